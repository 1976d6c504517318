"""Whole-loop fusion of scans over per-element grids (gymnax's MinAtar and bsuite environments):
gathers at a position each element chooses, scatters of a few points per element, small
reductions over an element's cells, and leaves the body never reads. `hlo/whole_loop_grid.hlo`
is jax's HLO of a 300 x 7 scan of such a step (a 10 x 10 grid per element), written by
`hlo/gen_whole_loop_grid.py`.

Checked: the loop becomes one kernel; its values match the interpreter on both vector widths and
thread counts (300 elements: a block of 256 and a tail of 44); the kernel keeps the grid in a
block-local element-minor copy, runs the element loop as a vector loop, and writes the
observation only in the last iteration; the batch analysis' and the cost model's refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse.analysis.scatter import SELECT_MAX_POINTS, select_form, select_ops
from hlofuse.backends import interpreter
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.target import Target
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.fusion.loop_fusion import fused_loop, is_whole_loop, whole_loop_legal
from hlofuse.passes.fusion.trace import trace_of
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse

GRID = (Path(__file__).parent / "hlo" / "whole_loop_grid.hlo").read_text()
N = 300


def _args() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return (rng.integers(0, 1000, N).astype(np.int32),
            rng.uniform(0, 1.2, (N, 10, 10)).astype(np.float32),
            rng.integers(0, 2, (N, 10, 10, 2)).astype(bool))


def _fused(text: str = GRID) -> tuple[object, list[object]]:
    module = parse(text)
    run_pipeline(module, "hlofuse")
    return module, [i for c in module.computations for i in c.instructions if is_whole_loop(i)]


def test_grid_scan_is_one_kernel() -> None:
    module, loops = _fused()
    assert len(loops) == 1
    events = [e for e in trace_of(module) if e.pass_name == "whole-loop-fusion"]
    assert [e.verdict for e in events] == ["fused"]
    assert events[0].figures["scatter_select_ops"] > 0  # the scatters' selects were costed
    plan, decision = whole_loop_legal(fused_loop(loops[0]))
    assert decision and plan is not None and plan.batch == N
    body = fused_loop(loops[0]).attrs["body"]
    ops = {i.opcode for c in [body, *(i.fused_computation for i in body.instructions
                                      if i.opcode is Opcode.FUSION)] for i in c.instructions}
    assert {Opcode.GATHER, Opcode.SCATTER, Opcode.REDUCE} <= ops


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_grid_scan_matches_the_interpreter(target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from hlofuse.backends import cpu

    args = _args()
    want = interpreter.run(parse(GRID), *args)
    module, _ = _fused()
    monkeypatch.setenv("HLOFUSE_TARGET", target)
    for threads in (1, 2):
        got = cpu.compile_module(module, threads=threads)(*args)
        for g, w in zip(got, want, strict=True):
            if w.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
            else:
                np.testing.assert_array_equal(g, w)


def _loops(stmts: list[ir.Stmt]) -> list[ir.Loop]:
    return [s for s in ir.walk(stmts) if isinstance(s, ir.Loop)]


def test_grid_state_is_a_vector_loop_over_an_element_minor_copy() -> None:
    """The 100-cell grid (rows wider than `COLUMN_STATE_FROM`) lives in a block-local copy
    laid out [cell, element], on the stack (so the blocks still run in parallel): the element
    loop reads and writes it a vector at a time, the
    positions chosen per element included (`vectorize._own_row_reads`), and the observation,
    which the body never reads, is written by its own loop under an `If` on the last
    iteration."""
    from hlofuse.backends.cpu.kernels import lower

    _, (fusion,) = _fused()
    kernel = lower(fusion, Target.named("avx512"), threads=2).kernel
    t = next(lp for lp in _loops(kernel.body) if lp.var.name.startswith("t"))
    copies = [b for b in {s.buf for s in ir.walk(kernel.body) if isinstance(s, ir.Store)}
              if b.kind == "local" and b.name.startswith("st")]
    # blocks of 32 elements, whose copies (32 x 100 floats) fit on the stack: 9 and a tail of 12
    assert copies and all(b.size in (32 * 100, 12 * 100) for b in copies)
    assert all(b not in kernel.placement.heap for b in copies)
    blk = next(lp for lp in _loops(kernel.body) if lp.var.name.startswith("blk"))
    assert blk.parallel and blk.hi - blk.lo == 9, "the blocks do not run in parallel"
    main = [s for s in t.body if isinstance(s, ir.Loop)]
    assert len(main) == 1 and main[0].vector == 16, "the element loop is not a vector loop"
    assert any(isinstance(s, ir.Store) and s.buf in copies for s in ir.walk(main[0].body))
    (last,) = [s for s in t.body if isinstance(s, ir.If)]
    assert _loops(last.then), "the observation is not written under the last iteration's If"
    obs = kernel.outputs[-1] if kernel.outputs[-1].dtype.is_pred else None
    assert obs is not None
    assert not any(isinstance(s, ir.Store) and s.buf is obs for s in ir.walk(main[0].body))


SCATTER_LOOP = """HloModule scatter_loop
over {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}}
cond {{
  p = (s32[], f32[512,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(50)
  ROOT lt = pred[] compare(i, n), direction=LT
}}
body {{
  p = (s32[], f32[512,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[512,4] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  idx = s32[{points}] constant({{{values}}})
  upd = f32[512,{points}] broadcast(i1f), dimensions={{}}
  i1f = f32[] convert(i1)
  y = f32[512,4] scatter(x, idx, upd), update_window_dims={{0}}, inserted_window_dims={{1}},
    scatter_dims_to_operand_dims={{1}}, index_vector_dim=1, to_apply=over
  h = f32[] constant(0.5)
  hb = f32[512,4] broadcast(h), dimensions={{}}
  s = f32[512,4] sine(y)
  m = f32[512,4] multiply(s, hb)
  ROOT t = (s32[], f32[512,4]) tuple(i1, m)
}}
ENTRY e {{
  x = f32[512,4] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[512,4]) tuple(z, x)
  ROOT w = (s32[], f32[512,4]) while(init), condition=cond, body=body
}}
"""


def _scatter_loop(points: int) -> str:
    return SCATTER_LOOP.format(points=points,
                               values=",".join(str(k % 4) for k in range(points)))


def test_scatter_forms_and_their_cost() -> None:
    few, many = parse(_scatter_loop(3)), parse(_scatter_loop(SELECT_MAX_POINTS + 1))
    (s3,) = [i for c in few.computations for i in c.instructions if i.opcode is Opcode.SCATTER]
    (s9,) = [i for c in many.computations for i in c.instructions if i.opcode is Opcode.SCATTER]
    f = select_form(s3)
    assert not isinstance(f, str) and f.points == 3
    assert select_ops(s3) == 512 * 4 * 3 * 4
    assert isinstance(select_form(s9), str) and "more than" in str(select_form(s9))


def test_a_scatter_of_many_points_per_element_is_refused_naming_it() -> None:
    module = parse(_scatter_loop(SELECT_MAX_POINTS + 1))
    run_pipeline(module, "hlofuse")
    (event,) = [e for e in trace_of(module) if e.pass_name == "whole-loop-fusion"]
    assert event.verdict == "refused" and event.rule == "whole_loop.op"
    assert "scatter" in event.reason and "points" in event.reason


@pytest.mark.parametrize("points", [1, 3])
def test_a_scatter_of_a_few_points_per_element_runs_in_the_loop(points: int) -> None:
    from hlofuse.backends import cpu

    text = _scatter_loop(points)
    module = parse(text)
    run_pipeline(module, "hlofuse")
    assert sum(1 for c in module.computations for i in c.instructions if is_whole_loop(i)) == 1
    x = np.random.default_rng(points).normal(size=(512, 4)).astype(np.float32)
    want = interpreter.run(parse(text), x)
    got = cpu.compile_module(module, threads=2)(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)  # (the vector sine: within an ulp)


def test_a_gather_across_the_batch_is_refused() -> None:
    text = """HloModule across
cond {
  p = (s32[], f32[512]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(9)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[512]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[512] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  k = s32[512] convert(x)
  k2 = s32[512,1] reshape(k)
  y = f32[512] gather(x, k2), offset_dims={}, collapsed_slice_dims={0}, start_index_map={0},
    index_vector_dim=1, slice_sizes={1}
  ROOT t = (s32[], f32[512]) tuple(i1, y)
}
ENTRY e {
  x = f32[512] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[512]) tuple(z, x)
  ROOT w = (s32[], f32[512]) while(init), condition=cond, body=body
}
"""
    module = parse(text)
    run_pipeline(module, "hlofuse")
    (event,) = [e for e in trace_of(module) if e.pass_name == "whole-loop-fusion"]
    assert event.verdict == "refused" and event.rule == "whole_loop.op"
    assert "gather" in event.reason and "another element" in event.reason


# Scatter forms inside a whole loop, each against the interpreter: a state x[n, 6, 5] per
# element; `{scatter}` writes into it, then the step maps it. Indices come from the state and
# the counter, so they vary by element and iteration and leave the operand sometimes (XLA
# skips such a window whole). The pipeline is told a kernel call costs a second, so the loop
# is fused whatever the cost model would say of so small a body.
FORMS_LOOP = """HloModule forms
over {{
  a = f32[] parameter(0)
  ROOT b = f32[] parameter(1)
}}
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}}
cond {{
  p = (s32[], f32[40,6,5]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}}
body {{
  p = (s32[], f32[40,6,5]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  c0 = f32[40,6,5] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  f1 = f32[40,1,1] slice(c0), slice={{[0:40], [0:1], [0:1]}}
  f = f32[40] reshape(f1)
  ib = s32[40] broadcast(i), dimensions={{}}
  k = s32[40] convert(f)
  k2 = s32[40] add(k, ib)
  r = s32[40] broadcast(one), dimensions={{}}
  {scatter}
  h = f32[] constant(0.75)
  hb = f32[40,6,5] broadcast(h), dimensions={{}}
  m = f32[40,6,5] multiply(y, hb)
  ROOT t = (s32[], f32[40,6,5]) tuple(i1, m)
}}
ENTRY e {{
  x = f32[40,6,5] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[40,6,5]) tuple(z, x)
  ROOT w = (s32[], f32[40,6,5]) while(init), condition=cond, body=body
}}
"""

SCATTER_FORMS = {
    # one point per element at (k2 - 1, k2 % 7 - 1): batching dim 0, sometimes out of bounds
    "batched_point": """
  a0 = s32[40] subtract(k2, r)
  c7 = s32[] constant(7)
  s7 = s32[40] broadcast(c7), dimensions={{}}
  m7 = s32[40] remainder(k2, s7)
  a1 = s32[40] subtract(m7, r)
  a0r = s32[40,1] reshape(a0)
  a1r = s32[40,1] reshape(a1)
  idx = s32[40,2] concatenate(a0r, a1r), dimensions={{1}}
  upd = f32[40] negate(f)
  y = f32[40,6,5] scatter(c0, idx, upd), update_window_dims={{}}, inserted_window_dims={{1,2}},
    scatter_dims_to_operand_dims={{1,2}}, input_batching_dims={{0}},
    scatter_indices_batching_dims={{0}}, index_vector_dim=1, to_apply={combiner}""",
    # rows [s, s+2) of every element at a constant start (s = 5: out of bounds, skipped)
    "constant_rows": """
  idx = s32[1] constant({{{start}}})
  upd = f32[40,2,5] broadcast(f), dimensions={{0}}
  y = f32[40,6,5] scatter(c0, idx, upd), update_window_dims={{0,1,2}}, inserted_window_dims={{}},
    scatter_dims_to_operand_dims={{1}}, index_vector_dim=0, to_apply={combiner}""",
    # three columns of every element at constant positions, one repeated (combined in order)
    "points_in_window": """
  idx = s32[3,1] constant({{{{4}},{{1}},{{4}}}})
  upd = f32[3,40,6] broadcast(f), dimensions={{1}}
  y = f32[40,6,5] scatter(c0, idx, upd), update_window_dims={{1,2}}, inserted_window_dims={{2}},
    scatter_dims_to_operand_dims={{2}}, index_vector_dim=1, to_apply={combiner}""",
    # a window of 3 of the 5 columns at a start each element chooses (k2 % 4 - 1: -1..2)
    "dynamic_window": """
  c4 = s32[] constant(4)
  s4 = s32[40] broadcast(c4), dimensions={{}}
  m4 = s32[40] remainder(k2, s4)
  a1 = s32[40] subtract(m4, r)
  zero = s32[] constant(0)
  zc = s32[40] broadcast(zero), dimensions={{}}
  zr = s32[40,1] reshape(zc)
  a1r = s32[40,1] reshape(a1)
  idx = s32[40,2] concatenate(zr, a1r), dimensions={{1}}
  upd = f32[40,6,3] broadcast(f), dimensions={{0}}
  y = f32[40,6,5] scatter(c0, idx, upd), update_window_dims={{1,2}}, inserted_window_dims={{}},
    scatter_dims_to_operand_dims={{1,2}}, input_batching_dims={{0}},
    scatter_indices_batching_dims={{0}}, index_vector_dim=1, to_apply={combiner}""",
}


@pytest.mark.parametrize("combiner", ["over", "add"])
@pytest.mark.parametrize(("form", "start"), [("batched_point", 0), ("constant_rows", 1),
                                             ("constant_rows", 5), ("points_in_window", 0),
                                             ("dynamic_window", 0)])
def test_scatter_forms_in_a_whole_loop_match_the_interpreter(form: str, start: int,
                                                             combiner: str) -> None:
    from hlofuse.backends import cpu

    scatter = SCATTER_FORMS[form].format(combiner=combiner, start=start)
    text = FORMS_LOOP.format(scatter=scatter)
    module = parse(text)
    run_pipeline(module, "hlofuse{host_kernel_overhead_ns=1000000000}")
    assert sum(1 for c in module.computations for i in c.instructions if is_whole_loop(i)) == 1
    x = np.random.default_rng(start).uniform(-1.5, 9.5, (40, 6, 5)).astype(np.float32)
    want = interpreter.run(parse(text), x)
    got = cpu.compile_module(module, threads=2)(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
