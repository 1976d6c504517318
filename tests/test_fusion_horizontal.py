"""`horizontal-loop-fusion` and `horizontal-input-fusion` on crafted HLO: the sliced-input
fusion's structure (reshape/concatenate/slice, kInput, bitcasts back outside), kernel counts,
the refusals (types, shared parameters, size, layouts, control edges, batch limit, entry only)
and the interpreter's outputs unchanged."""

from __future__ import annotations

from fusion_helpers import fusions, run_and_check
from hlofuse.analysis.kernels import count_kernels
from hlofuse.ir.fusion import is_multi_output_fusion
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.fusion.horizontal import HorizontalInputFusion, HorizontalLoopFusion
from hlofuse.passes.fusion.trace import trace_of
from hlofuse.text import parse

TWO_LOOPS = """HloModule two
f1 {
  a = f16[1024] parameter(0)
  b = f16[1024] parameter(1)
  ROOT m = f16[1024] multiply(a, b)
}
f2 {
  a = f16[12,11] parameter(0)
  b = f16[12,11] parameter(1)
  ROOT s = f16[12,11] add(a, b)
}
ENTRY e {
  a1 = f16[1024] parameter(0)
  a2 = f16[1024] parameter(1)
  a3 = f16[12,11] parameter(2)
  a4 = f16[12,11] parameter(3)
  x = f16[1024] fusion(a1, a2), kind=kLoop, calls=f1
  y = f16[12,11] fusion(a3, a4), kind=kLoop, calls=f2
  ROOT t = (f16[1024], f16[12,11]) tuple(x, y)
}
"""


def _refusals(module: object) -> list[str]:
    return [e.reason for e in trace_of(module) if e.verdict == "refused"]  # type: ignore[arg-type]


def test_two_loop_fusions_of_different_shapes_become_one_sliced_input_fusion() -> None:
    after, changed = run_and_check(TWO_LOOPS, HorizontalLoopFusion())
    assert changed
    assert count_kernels(parse(TWO_LOOPS)).entry == 2 and count_kernels(after).entry == 1
    (f,) = fusions(after)
    assert f.fusion_kind == "kInput" and is_multi_output_fusion(f)
    root = f.fused_computation.root
    assert [o.opcode for o in root.operands] == [Opcode.SLICE, Opcode.SLICE]
    assert all(o.operand(0).opcode is Opcode.CONCATENATE for o in root.operands)
    assert any(i.opcode is Opcode.RESHAPE for i in f.fused_computation.instructions)
    # the rank-2 output comes back through a bitcast outside the fusion
    t = after.entry.root
    kinds = sorted(o.opcode.value for o in t.operands)
    assert kinds == ["bitcast", "get-tuple-element"]
    assert f.operand_count == 4


def test_different_output_types_are_not_fused() -> None:
    text = TWO_LOOPS.replace("f16[12,11]", "s32[12,11]")
    _after, changed = run_and_check(text, HorizontalLoopFusion())
    assert not changed


def test_shared_parameter_is_refused() -> None:
    text = TWO_LOOPS.replace("y = f16[12,11] fusion(a3, a4)", "y = f16[12,11] fusion(a3, a3)")
    text = text.replace("x = f16[1024] fusion(a1, a2)", "x = f16[1024] fusion(a1, a1)")
    text = text.replace("a3 = f16[12,11] parameter(2)", "a3 = f16[12,11] parameter(2)\n"
                        "  s = f16[1024] parameter(4)")
    # make both candidates read one shared parameter
    text = text.replace("x = f16[1024] fusion(a1, a1)", "x = f16[1024] fusion(a1, s)")
    text = text.replace("""f1 {
  a = f16[1024] parameter(0)
  b = f16[1024] parameter(1)
  ROOT m = f16[1024] multiply(a, b)
}""", """f1 {
  a = f16[1024] parameter(0)
  b = f16[1024] parameter(1)
  ROOT m = f16[1024] multiply(a, b)
}
f3 {
  a = f16[1024] parameter(0)
  ROOT n = f16[1024] negate(a)
}""")
    text = text.replace("ROOT t = (f16[1024], f16[12,11]) tuple(x, y)",
                        "z = f16[1024] fusion(s), kind=kLoop, calls=f3\n"
                        "  ROOT t = (f16[1024], f16[12,11], f16[1024]) tuple(x, y, z)")
    after, _changed = run_and_check(text, HorizontalLoopFusion())
    assert any("shares a parameter" in r for r in _refusals(after))
    names = {i.name for i in after.entry.instructions}
    assert {"x", "z"} <= names  # both readers of `s` stay as they were


def test_large_candidates_are_not_profitable() -> None:
    text = TWO_LOOPS.replace("1024", "300000")
    after, changed = run_and_check(text, HorizontalLoopFusion())
    assert not changed
    assert any("launch-bound" in r for r in _refusals(after))
    _after, changed = run_and_check(text, HorizontalLoopFusion(horizontal_max_elements=10**6))
    assert changed


def test_non_row_major_layouts_refused_in_e2() -> None:
    text = TWO_LOOPS.replace("f16[12,11]", "f16[12,11]{0,1}")
    _after, changed = run_and_check(text, HorizontalLoopFusion())
    assert not changed
    _after, changed = run_and_check(text, HorizontalLoopFusion(
        horizontal_require_row_major=False))
    assert changed


def test_elementwise_ops_are_wrapped_and_batched() -> None:
    n = 40
    params = "\n".join(f"  p{i} = f32[8] parameter({i})" for i in range(n))
    ops = "\n".join(f"  s{i} = f32[8] sqrt(p{i})" for i in range(n))
    text = f"""HloModule many
ENTRY e {{
{params}
{ops}
  ROOT t = ({", ".join(["f32[8]"] * n)}) tuple({", ".join(f"s{i}" for i in range(n))})
}}
"""
    after, changed = run_and_check(text, HorizontalLoopFusion())
    assert changed
    made = fusions(after)
    # spans of at most 32 candidates: 32 + 8
    sizes = sorted(len(f.fused_computation.root.operands) for f in made)
    assert sizes == [8, 32]
    assert count_kernels(after).entry == 2
    after, _ = run_and_check(text, HorizontalLoopFusion(horizontal_max_batch=10))
    assert count_kernels(after).entry == 4


def test_control_dependencies_exclude_candidates() -> None:
    text = """HloModule ctrl
ENTRY e {
  c = f32[4] constant({1, 2, 3, 4})
  cp1 = f32[4] copy(c)
  cp2 = f32[4] negate(c)
  cp3 = f32[4] sqrt(c)
  cp4 = f32[4] abs(c), control-predecessors={cp1}
  ROOT t = (f32[4], f32[4], f32[4], f32[4]) tuple(cp1, cp2, cp3, cp4)
}
"""
    after, changed = run_and_check(text, HorizontalLoopFusion())
    assert changed
    names = {i.name for i in after.entry.instructions}
    assert {"cp1", "cp4"} <= names and not {"cp2", "cp3"} & names


def test_multi_output_candidates_are_reassembled() -> None:
    text = """HloModule mo
f1 {
  a = f32[16] parameter(0)
  m = f32[16] multiply(a, a)
  n = f32[16] negate(a)
  ROOT t = (f32[16], f32[16]) tuple(m, n)
}
f2 {
  a = f32[4,4] parameter(0)
  m = f32[4,4] add(a, a)
  n = f32[4,4] abs(a)
  ROOT t = (f32[4,4], f32[4,4]) tuple(m, n)
}
ENTRY e {
  x = f32[16] parameter(0)
  y = f32[4,4] parameter(1)
  f = (f32[16], f32[16]) fusion(x), kind=kLoop, calls=f1
  g = (f32[4,4], f32[4,4]) fusion(y), kind=kLoop, calls=f2
  g0 = f32[16] get-tuple-element(f), index=0
  g1 = f32[16] get-tuple-element(f), index=1
  g2 = f32[4,4] get-tuple-element(g), index=0
  g3 = f32[4,4] get-tuple-element(g), index=1
  ROOT t = (f32[16], f32[16], f32[4,4], f32[4,4]) tuple(g0, g1, g2, g3)
}
"""
    after, changed = run_and_check(text, HorizontalLoopFusion())
    assert changed and count_kernels(after).entry == 1
    (f,) = fusions(after)
    concats = [i for i in f.fused_computation.instructions if i.opcode is Opcode.CONCATENATE]
    assert len(concats) == 2  # one per output index


def test_only_the_entry_computation_in_e2() -> None:
    text = """HloModule loop
body {
  p = (s32[], f32[8], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f32[8] get-tuple-element(p), index=1
  b = f32[4] get-tuple-element(p), index=2
  one = s32[] constant(1)
  j = s32[] add(i, one)
  x = f32[8] sqrt(a)
  y = f32[4] negate(b)
  ROOT t = (s32[], f32[8], f32[4]) tuple(j, x, y)
}
cond {
  p = (s32[], f32[8], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY e {
  z = s32[] constant(0)
  a = f32[8] parameter(0)
  b = f32[4] parameter(1)
  init = (s32[], f32[8], f32[4]) tuple(z, a, b)
  ROOT w = (s32[], f32[8], f32[4]) while(init), condition=cond, body=body
}
"""
    _after, changed = run_and_check(text, HorizontalLoopFusion())
    assert not changed
    after, changed = run_and_check(text, HorizontalLoopFusion(horizontal_all_computations=True))
    assert changed
    assert count_kernels(after).loops["w"] < count_kernels(parse(text)).loops["w"]


def test_horizontal_input_fusion_merges_independent_reductions() -> None:
    text = """HloModule hif
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  x = f32[1024] parameter(0)
  y = f32[1024] parameter(1)
  z = f32[] constant(0)
  r1 = f32[] reduce(x, z), dimensions={0}, to_apply=add
  r2 = f32[] reduce(y, z), dimensions={0}, to_apply=add
  ROOT t = (f32[], f32[]) tuple(r1, r2)
}
"""
    after, changed = run_and_check(text, HorizontalInputFusion())
    assert changed and count_kernels(after).entry == 1
    (f,) = fusions(after)
    assert f.fusion_kind == "kInput" and is_multi_output_fusion(f)


def test_horizontal_input_fusion_needs_compatible_shapes() -> None:
    text = """HloModule hif2
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  x = f32[1024] parameter(0)
  y = f32[64,128] parameter(1)
  z = f32[] constant(0)
  r1 = f32[] reduce(x, z), dimensions={0}, to_apply=add
  r2 = f32[64] reduce(y, z), dimensions={1}, to_apply=add
  ROOT t = (f32[], f32[64]) tuple(r1, r2)
}
"""
    after, _changed = run_and_check(text, HorizontalInputFusion())
    assert count_kernels(after).entry == 2
    assert _refusals(after)
