"""Whole-loop fusion (passes/fusion/loop_fusion.py, kernel_ir/lower/whole_loop.py): which loops
become one kernel, the rule named when one does not, the kernel's structure, and its values
against the interpreter (batch sizes with and without a tail block, a uniform key updated every
iteration, a scan's `ys` written one row per iteration, also when fused into a kLoop fusion)."""

from __future__ import annotations

import numpy as np
import pytest

from hlo_loops import mlp_scan, scan, scan_reducing_over_batch
from hlofuse.analysis.kernels import count_kernels, kernels_per_run
from hlofuse.analysis.loops import body_of
from hlofuse.backends import interpreter
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.lower import lower_kernel
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.fusion.loop_fusion import (
    fused_loop,
    is_whole_loop,
    whole_loop_legal,
)
from hlofuse.passes.fusion.trace import trace_of
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse


def _args(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    return (rng.uniform(-2, 2, n).astype(np.float32),
            np.array([123456789, 987654321], dtype=np.uint32))


def _whole(text: str, pipeline: str = "hlofuse") -> tuple[object, list[object]]:
    module = parse(text)
    run_pipeline(module, pipeline)
    loops = [i for c in module.computations for i in c.instructions if is_whole_loop(i)]
    return module, loops


def _refusal(text: str, pipeline: str = "hlofuse") -> object:
    module = parse(text)
    run_pipeline(module, pipeline)
    events = [e for e in trace_of(module) if e.pass_name == "whole-loop-fusion"]
    assert len(events) == 1, events
    assert events[0].verdict == "refused"
    return events[0]


def test_scan_becomes_one_kernel_with_leaf_kinds() -> None:
    module, loops = _whole(scan())
    assert len(loops) == 1
    # the ys broadcast and the loop: one kernel for all 12 iterations
    assert kernels_per_run(module.entry) == 2
    assert count_kernels(module).fusion_kinds == {"kCustom": 1}
    assert not any(i.opcode is Opcode.WHILE for i in module.entry.instructions)
    plan, decision = whole_loop_legal(fused_loop(loops[0]))
    assert decision and plan is not None
    assert plan.batch == 300
    assert plan.kinds == ("counter", "state", "output", "uniform")
    assert plan.axes == (None, 0, 1, None)
    fused = [e for e in trace_of(module) if e.pass_name == "whole-loop-fusion"]
    assert [e.verdict for e in fused] == ["fused"]
    assert fused[0].figures["batch"] == 300


@pytest.mark.parametrize(("n", "s"), [(300, 12), (256, 9), (512, 10), (40, 30)])
def test_cpu_matches_interpreter(n: int, s: int) -> None:
    from hlofuse.backends import cpu

    module, loops = _whole(scan(n, s))
    assert len(loops) == 1
    args = _args(n)
    want = interpreter.run(parse(scan(n, s)), *args)
    for threads in (1, 2):
        got = cpu.compile_module(module, threads=threads)(*args)
        for g, w in zip(got, want, strict=True):
            if w.dtype.kind == "u":
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    # every row of ys was written, the last one with the final state
    np.testing.assert_allclose(want[1][-1], want[0])


def _stores(stmts: list[ir.Stmt], buf: ir.Buffer) -> int:
    return sum(1 for st in ir.walk(stmts) if isinstance(st, ir.Store) and st.buf is buf)


def test_kernel_structure_time_loop_inside() -> None:
    """Blocks of elements outside, the iterations inside, the elements innermost; the ys row is
    one store per element (not a select over every row), the key is per block."""
    _, (fusion,) = _whole(scan(512, 11))
    kernel = lower_kernel(fusion)
    loops = [st for st in ir.walk(kernel.body) if isinstance(st, ir.Loop)]
    names = [lp.var.name.rstrip("0123456789") for lp in loops]
    assert names[:3] == ["blk", "t", "j"], names
    blk, t, j = loops[:3]
    assert (blk.hi, t.hi, j.hi) == (2, 11, 256)
    ys = kernel.outputs[2]
    assert ys.size == 11 * 512
    assert _stores(j.body, ys) == 1


def test_fused_row_write_is_an_output() -> None:
    """The gymnax shape: ys's update fused with the step into a kLoop fusion rooted at the
    dynamic-update-slice; still written one row per iteration."""
    _, (fusion,) = _whole(scan(300, 10))
    w = fused_loop(fusion)
    root = body_of(w).root
    assert root.operand(2).opcode is Opcode.FUSION, "XLA's fusion put ys's update in a fusion"
    plan, _ = whole_loop_legal(w)
    assert plan is not None and plan.kinds[2] == "output"


def test_refused_reduction_over_the_batch_names_the_instruction() -> None:
    text = scan_reducing_over_batch()
    event = _refusal(text)
    assert event.rule == "whole_loop.op"
    assert "reduces over the batch" in event.reason
    assert "reduce" in event.reason.split("(")[1]  # the instruction's opcode is named


def test_refused_unknown_trip_count() -> None:
    text = scan().replace("ROOT lt = pred[] compare(i, bound), direction=LT", """\
x = f32[300] get-tuple-element(p), index=1
  x0 = f32[1] slice(x), slice={[0:1]}
  xs = f32[] reshape(x0)
  big = f32[] constant(100)
  ROOT lt = pred[] compare(xs, big), direction=LT""")
    event = _refusal(text)
    assert event.rule == "whole_loop.trip_count"


def test_refused_too_few_iterations() -> None:
    event = _refusal(scan(), "hlofuse{whole_loop_min_trips=13,auto_unroll=false}")
    assert event.rule == "whole_loop_min_trips"
    assert event.figures["trips"] == 12


def test_small_loops_are_unrolled_not_whole_fused() -> None:
    """With other loops than random-number loops allowed (`small_loop_max_instructions`), a
    scan of at most `unroll_small_loops` steps is unrolled completely (and recorded)."""
    module = parse(scan(300, 6))
    run_pipeline(module, "hlofuse{small_loop_max_instructions=1000}")
    assert not any(i.opcode is Opcode.WHILE for c in module.computations
                   for i in c.instructions)
    (event,) = [e for e in trace_of(module) if e.pass_name == "unroll-small-loops"]
    assert event.verdict == "fused" and event.figures["trips"] == 6
    assert event.figures["rng"] is False


@pytest.mark.parametrize("pipeline", ["xla", "hlofuse{whole_loop_fusion=false,auto_unroll=false}"])
def test_whole_loop_fusion_is_a_setting(pipeline: str) -> None:
    module, loops = _whole(scan(), pipeline)
    assert loops == []
    assert any(i.opcode is Opcode.WHILE for i in module.entry.instructions)
    assert not [e for e in trace_of(module) if e.pass_name == "whole-loop-fusion"]


def test_block_size_grows_with_the_batch_within_l1() -> None:
    from hlofuse.passes.fusion.loop_fusion import block_size

    assert block_size(2048, 24) == 512  # four blocks at least
    assert block_size(65536, 24) == 1024
    assert block_size(65536, 64) == 512  # 1024 x 64 bytes would not fit L1
    assert block_size(65536, 1000) == 256  # nothing fits: the smallest block
    assert block_size(300, 4) == 256


def test_dense_layers_in_the_body_are_refused_for_their_cost() -> None:
    """A policy network inside the loop: as one kernel each element would run its dense
    layers as matrix-vector products, slower than the body's batched dots (PureJaxRL's PPO
    rollout ran 0.01x jax.jit fused whole). The cost check refuses it with its figures."""
    event = _refusal(mlp_scan())
    assert event.rule == "whole_loop.cost"
    figures = event.figures
    assert figures["whole_ns"] >= figures["separate_ns"]
    assert figures["dot_ops"] == 2 * 64 * (4 * 16 + 16 * 16 + 16 * 4)  # per iteration


def test_per_element_dense_layers_compute_each_layer_once() -> None:
    """Forced past the cost check, the whole-loop kernel materialises each dot and each value
    a dot reads once per element (`whole_loop.heavy`): no layer is recomputed for every output
    of the next (three layers deep that multiplied the work by 16 * 16 per element), and the
    values match the interpreter."""
    from hlofuse.backends import cpu
    from hlofuse.backends.kernel_ir.lower.whole_loop import heavy

    text = mlp_scan()
    forced = "hlofuse{whole_loop_dot_slowdown=0,whole_loop_scalar_slowdown=0}"
    module, loops = _whole(text, forced)
    assert len(loops) == 1
    body = body_of(fused_loop(loops[0]))
    names = {i.opcode for i, _ in heavy(body, [None, 0, None, None, None], 64)}
    assert Opcode.DOT in names
    kernel = lower_kernel(loops[0])
    dots = sum(1 for s in ir.walk(kernel.body) if isinstance(s, ir.Loop)
               and s.var.name.startswith("c"))
    assert dots == 3  # one contraction loop per layer: nothing recomputed inside another
    rng = np.random.default_rng(0)
    args = [rng.uniform(-1, 1, shape).astype(np.float32)
            for shape in ((64, 4), (4, 16), (16, 16), (16, 4))]
    want = interpreter.run(parse(text), *args)
    got = cpu.compile_module(module)(*args)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_small_loops_around_dots_are_left_as_loops() -> None:
    """A loop of 4 iterations whose body holds dots (PPO's minibatch and epoch loops around a
    training step) is not unrolled: the copies' dots stay kernels of their own, so unrolling
    would only multiply the code. The refusal names the dot and the rule."""
    module = parse(mlp_scan(s=4))
    run_pipeline(module, "hlofuse{small_loop_max_instructions=100000}")
    assert any(i.opcode is Opcode.WHILE for c in module.computations for i in c.instructions)
    (event,) = [e for e in trace_of(module) if e.pass_name == "unroll-small-loops"]
    assert event.verdict == "refused" and event.rule == "small_loop.cost"
    assert event.figures["instruction"].startswith("a")  # a1/a2/a3: one of the dots


def test_small_loops_other_than_random_numbers_stay_loops_by_default() -> None:
    """The default unrolls random-number loops only: another small loop is refused with the
    size rule (its limit 0) and recorded."""
    module = parse(scan(300, 6))
    run_pipeline(module, "hlofuse{whole_loop_fusion=false}")
    (event,) = [e for e in trace_of(module) if e.pass_name == "unroll-small-loops"]
    assert event.verdict == "refused" and event.rule == "small_loop_max_instructions"
