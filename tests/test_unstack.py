"""Un-stacking loop state (passes/fusion/unstack.py): a carried array rebuilt from rows every
iteration is carried as its rows; values unchanged (interpreter, cpu), refusals named."""

from __future__ import annotations

import numpy as np
import pytest

from hlo_loops import stacked
from hlofuse import examples
from hlofuse.backends import cpu, interpreter
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.fusion.trace import trace_of
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse

NO_WHOLE = "hlofuse{whole_loop_fusion=false}"


def _run(text: str, pipeline: str = NO_WHOLE) -> tuple[object, list[object]]:
    module = parse(text)
    run_pipeline(module, pipeline)
    return module, [e for e in trace_of(module) if e.pass_name == "unstack-loop-state"]


def _loop_leaves(module: object) -> list[tuple[int, ...]]:
    (w,) = [i for i in module.entry.instructions if i.opcode is Opcode.WHILE]  # type: ignore
    return [tuple(e.dims) for e in w.shape.elements if isinstance(e, ArrayShape)]


def test_columns_become_carried_arrays() -> None:
    module, (event,) = _run(stacked())
    assert event.verdict == "fused"
    assert event.figures["rows"] == 3 and event.figures["axis"] == 1
    assert event.figures["row_shape"].startswith("f32[64]")
    leaves = _loop_leaves(module)
    assert (64, 3) not in leaves, "the stacked leaf is gone (dead after the rewrite)"
    assert leaves.count((64,)) == 3
    body = next(i for i in module.entry.instructions if i.opcode is Opcode.WHILE).attrs["body"]
    ops = {op.opcode for i in body.instructions for op in
           (i.fused_computation.instructions if i.opcode is Opcode.FUSION else [i])}
    assert Opcode.CONCATENATE not in ops and Opcode.SLICE not in ops


@pytest.mark.parametrize("n", [64, 37])
def test_values_unchanged(n: int) -> None:
    text = stacked(n)
    s0 = np.random.default_rng(n).normal(size=(n, 3)).astype(np.float32)
    want = interpreter.run(parse(text), s0)
    module, events = _run(text)
    assert [e.verdict for e in events] == ["fused"]
    np.testing.assert_array_equal(interpreter.run(module, s0)[0], want[0])
    np.testing.assert_allclose(cpu.compile_module(module)(s0)[0], want[0], rtol=1e-5,
                               atol=1e-6)


def test_read_whole_is_refused_with_the_reader() -> None:
    text = stacked(extra="mix = f32[64,3] add(st, s)", new="mix")
    module, (event,) = _run(text)
    assert event.verdict == "refused" and event.rule == "unstack.reads"
    assert event.figures["instruction"] == "mix"
    assert (64, 3) in _loop_leaves(module)


def test_max_rows_is_a_setting() -> None:
    _, (event,) = _run(stacked(), "hlofuse{whole_loop_fusion=false,unstack_max_rows=2}")
    assert event.verdict == "refused" and event.rule == "unstack_max_rows"
    _, events = _run(stacked(), "hlofuse{whole_loop_fusion=false,unstack_loop_state=false}")
    assert events == []


def test_rows_of_higher_rank_are_refused_as_unprofitable() -> None:
    # a legal un-stacking whose rows (f32[64] here) are of higher rank than the setting
    # allows is refused by the profitability check, not the legality one, and the loop
    # keeps its stacked leaf
    module, (event,) = _run(stacked(), "hlofuse{whole_loop_fusion=false,"
                                       "unstack_max_row_rank=0}")
    assert event.verdict == "refused" and event.rule == "unstack_max_row_rank"
    assert event.figures["row_rank"] == 1
    assert (64, 3) in _loop_leaves(module)


def test_cartpole_as_written_state_is_unstacked() -> None:
    """The paper's step 3 done by the compiler: the stacked [4, N] state (rebuilt by a stack
    under the reset-on-done select) becomes four carried [N] arrays."""
    module, (event,) = _run(examples.text("cartpole_baseline"))
    assert event.verdict == "fused" and event.figures["rows"] == 4
    leaves = _loop_leaves(module)
    assert (4, 2048) not in leaves and leaves.count((2048,)) >= 4


def test_readers_after_the_loop_keep_definitions_before_uses() -> None:
    """The restacked result is read by instructions listed before the point it was built at
    (gymnax MountainCar's shape): the lists stay in definition order, so the cpu backend's
    buffer analysis (which walks them in order) compiles it."""
    text = stacked().replace(
        "  ROOT out = f32[64,3] get-tuple-element(w), index=1",
        "  out = f32[64,3] get-tuple-element(w), index=1\n"
        "  neg = f32[64,3] negate(out)\n"
        "  ROOT r = (f32[64,3], f32[64,3]) tuple(neg, out)")
    module, (event,) = _run(text, "simplify,unstack-loop-state{unstack_loop_state=true}")
    assert event.verdict == "fused"
    for comp in module.computations:
        seen: set[int] = set()
        for instr in comp.instructions:
            assert all(id(o) in seen for o in instr.operands), (comp.name, instr.name)
            seen.add(id(instr))
    run_pipeline(module, NO_WHOLE)
    s0 = np.random.default_rng(3).normal(size=(64, 3)).astype(np.float32)
    want = interpreter.run(parse(text), s0)
    for g, w in zip(cpu.compile_module(module)(s0), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
