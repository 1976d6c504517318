"""Per-step outputs of a whole loop (passes/fusion/loop_reductions.py, the `urow` leaves of
loop_fusion.py): reductions over the batch leave the loop so that it becomes one kernel, scan
outputs that depend on no batch value are written once after the blocks, and the values match
the interpreter and jax.jit, with one and two threads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from hlofuse.analysis.kernels import count_kernels  # noqa: E402
from hlofuse.backends import interpreter  # noqa: E402
from hlofuse.frontends.jax import hlo_text  # noqa: E402
from hlofuse.ir.opcodes import Opcode  # noqa: E402
from hlofuse.passes.fusion.loop_fusion import fused_loop, is_whole_loop, whole_loop_legal  # noqa: E402
from hlofuse.passes.fusion.loop_reductions import hoist_legal  # noqa: E402
from hlofuse.passes.fusion.trace import trace_of  # noqa: E402
from hlofuse.passes.pipelines import run_pipeline  # noqa: E402
from hlofuse.text import parse  # noqa: E402

YS: dict[str, Callable[[Any, Any, Any], Any]] = {
    "sum": lambda x, v, t: jnp.sum(x),
    "mean": lambda x, v, t: jnp.mean(x * v),
    "max": lambda x, v, t: jnp.max(v),
    "any": lambda x, v, t: jnp.any(x > 1.0),
    "count": lambda x, v, t: jnp.sum((x > 0).astype(jnp.int32)),
    "vector": lambda x, v, t: jnp.stack([jnp.sum(x), jnp.min(v), jnp.mean(x) * 2.0]),
    "per-env and sum": lambda x, v, t: (x, jnp.sum(v)),
    "constant": lambda x, v, t: jnp.float32(1.5),
    "counter": lambda x, v, t: t * 2,
}


def rollout(ys: Callable[[Any, Any, Any], Any]) -> Callable[..., Any]:
    """A per-element map over the batch (a damped oscillator reset by a table) whose scan
    emits `ys(x, v, t)` every step."""
    from jax import lax

    def run(x: Any, v: Any, table: Any) -> Any:
        def body(carry: Any, row: Any) -> Any:
            x, v, t = carry
            v = v - 0.1 * jnp.sin(x)
            x = jnp.where(jnp.abs(x) > 2.0, row, x + 0.1 * v)
            return (x, v, t + 1), ys(x, v, t)

        return lax.scan(body, (x, v, jnp.int32(0)), table)

    return run


def _args(n: int, s: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(n + s)
    return (rng.uniform(-2, 2, n).astype(np.float32), rng.uniform(-1, 1, n).astype(np.float32),
            rng.uniform(-1, 1, (s, n)).astype(np.float32))


def _compiled(kind: str, n: int, s: int, pipeline: str = "hlofuse") -> tuple[Any, str, tuple]:
    args = _args(n, s)
    text = hlo_text(rollout(YS[kind]), *args)
    module = parse(text)
    run_pipeline(module, pipeline)
    return module, text, args


def _events(module: Any, name: str) -> list[Any]:
    return [e for e in trace_of(module) if e.pass_name == name]


def _check(module: Any, text: str, args: tuple, fn: Callable[..., Any]) -> None:
    from hlofuse.backends import cpu

    want = interpreter.run(parse(text), *args)
    ref = jax.tree.leaves(jax.jit(fn)(*args))
    for threads in (1, 2):
        got = cpu.compile_module(module, threads=threads)(*args)
        for g, w, r in zip(got, want, ref, strict=True):
            if w.dtype.kind in "biu":
                np.testing.assert_array_equal(g, w)
                np.testing.assert_array_equal(w, r)
            else:
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
                np.testing.assert_allclose(w, r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["sum", "mean", "max", "any", "count", "vector",
                                  "per-env and sum"])
def test_reductions_over_the_batch_leave_the_loop(kind: str) -> None:
    module, text, args = _compiled(kind, 300, 40)
    (hoisted,) = _events(module, "hoist-loop-reductions")
    assert hoisted.verdict == "fused", hoisted.reason
    (fused,) = _events(module, "whole-loop-fusion")
    assert fused.verdict == "fused", fused.reason
    assert count_kernels(module).fusion_kinds.get("kCustom") == 1
    assert not any(i.opcode is Opcode.WHILE for i in module.entry.instructions)
    # the reduction is one reduce after the loop, over the loop's [40, 300] rows
    reduces = [i for i in module.entry.instructions if i.opcode is Opcode.REDUCE or (
        i.opcode is Opcode.FUSION and any(j.opcode is Opcode.REDUCE
                                          for j in i.fused_computation.instructions))]
    assert reduces
    _check(module, text, args, rollout(YS[kind]))


@pytest.mark.parametrize("kind", ["constant", "counter", "sum"])
def test_more_steps_than_elements(kind: str) -> None:
    """ys rows that depend on no batch value are written after the blocks (`urow`), so a scan
    longer than its batch is one kernel too (they counted as state every block recomputes)."""
    module, text, args = _compiled(kind, 64, 200)
    (fused,) = _events(module, "whole-loop-fusion")
    assert fused.verdict == "fused", fused.reason
    (loop,) = [i for c in module.computations for i in c.instructions if is_whole_loop(i)]
    plan, _ = whole_loop_legal(fused_loop(loop))
    assert plan is not None and plan.batch == 64
    if kind != "sum":
        assert "urow" in plan.kinds
    _check(module, text, args, rollout(YS[kind]))


def test_a_reduction_the_state_reads_stays_and_the_loop_is_refused() -> None:
    from jax import lax

    def run(x: Any, v: Any, table: Any) -> Any:
        def body(carry: Any, row: Any) -> Any:
            x, v = carry
            x = x - 0.1 * jnp.mean(x) + row
            return (x, v), jnp.sum(x)

        return lax.scan(body, (x, v), table)

    args = _args(300, 40)
    module = parse(hlo_text(run, *args))
    run_pipeline(module, "hlofuse")
    (refused,) = _events(module, "hoist-loop-reductions")
    assert refused.verdict == "refused" and refused.rule == "hoist.whole_loop"
    assert refused.figures["why"] == "whole_loop.op"
    assert not any(is_whole_loop(i) for c in module.computations for i in c.instructions)


def test_the_rows_are_bounded_by_a_setting() -> None:
    module, _, _ = _compiled("sum", 300, 40, "hlofuse{hoist_max_bytes=1000}")
    (refused,) = _events(module, "hoist-loop-reductions")
    assert refused.rule == "hoist_max_bytes"
    assert refused.figures["bytes"] == 300 * 40 * 4
    (whole,) = _events(module, "whole-loop-fusion")
    assert whole.verdict == "refused" and whole.rule == "whole_loop.op"


def test_the_transformation_is_a_setting() -> None:
    module, _, _ = _compiled("sum", 300, 40, "hlofuse{hoist_loop_reductions=false}")
    assert not _events(module, "hoist-loop-reductions")
    (whole,) = _events(module, "whole-loop-fusion")
    assert whole.verdict == "refused"


def test_rows_written_other_than_at_the_counter_are_not_hoisted() -> None:
    """A reverse scan writes row S-1-i: the legality names `hoist.row`."""
    from jax import lax

    def run(x: Any, v: Any, table: Any) -> Any:
        def body(x: Any, row: Any) -> Any:
            x = x + row
            return x, jnp.sum(x)

        return lax.scan(body, x, table, reverse=True)

    args = _args(300, 40)
    module = parse(hlo_text(run, *args))
    run_pipeline(module, "simplify")
    (w,) = [i for c in module.computations for i in c.instructions if i.opcode is Opcode.WHILE]
    decisions = [hoist_legal(w, k)[1] for k in range(len(w.shape.elements))]
    assert not any(decisions)
    assert "hoist.row" in {d.rule for d in decisions}


@pytest.mark.parametrize("kind", ["sum", "mean", "max", "any", "count", "per-env and sum"])
def test_reductions_over_the_batch_are_summed_per_block_in_the_kernel(kind: str) -> None:
    """With a batch the block divides (512: two blocks of 256), the loop's rows of a reduction
    (a float, integer or pred add, max, min, or, and) never leave the kernel: it returns one
    partial per block and step (`loop_fusion.partial_reductions`, `[blocks, steps]`), and the
    reduce after it combines them; the results match the interpreter and jax.jit, and do not
    depend on the threads."""
    from hlofuse.backends import cpu

    module, text, args = _compiled(kind, 512, 40)
    (fused,) = _events(module, "whole-loop-fusion")
    assert fused.verdict == "fused", fused.reason
    (loop,) = [i for c in module.computations for i in c.instructions if is_whole_loop(i)]
    shapes = [tuple(s.dims) for s in loop.shape.elements]
    assert (2, 40) in shapes, shapes  # the partials
    assert shapes.count((40, 512)) == (kind == "per-env and sum")  # (the per-env ys)
    assert sum(o.opcode is Opcode.BROADCAST and o.shape.rank == 2  # nor the rows' start
               for o in loop.operands) == (kind == "per-env and sum")
    _check(module, text, args, rollout(YS[kind]))
    one, two = (cpu.compile_module(module, threads=t)(*args) for t in (1, 2))
    for a, b in zip(one, two, strict=True):
        np.testing.assert_array_equal(a, b)
