"""Structural and differential tests of the simplification passes other than the algebraic
rules and the while-loop passes: call-inliner, dce, cse, constant-folding, tuple-simplifier,
noop-removal."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlofuse.ir.opcodes import Opcode
from hlofuse.text import parse
from pass_testing import (
    all_opcodes,
    args_strategy,
    check_outputs,
    opcodes,
    optimize,
    random_args,
)

# ----- call-inliner -----------------------------------------------------------------------

CALLS = """
HloModule calls

inner {
  a = f32[4] parameter(0)
  ROOT n = f32[4] negate(a)
}

outer {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  c = f32[4] call(x), to_apply=inner
  ROOT s = f32[4] add(c, y)
}

pair {
  u = f32[4] parameter(0)
  ROOT t = (f32[4], f32[4]) tuple(u, u)
}

ENTRY e {
  p0 = f32[4] parameter(0)
  p1 = f32[4] parameter(1)
  c1 = f32[4] call(p0, p1), to_apply=outer
  c2 = f32[4] call(p1, p0), to_apply=outer
  c3 = (f32[4], f32[4]) call(c1), to_apply=pair
  g = f32[4] get-tuple-element(c3), index=1
  ROOT r = f32[4] multiply(g, c2)
}
"""


def test_inliner_removes_every_call_and_the_callees() -> None:
    before, after, _ = optimize(CALLS, "call-inliner")
    assert "call" not in all_opcodes(after)
    assert [c.name for c in after.computations] == ["e"]
    ops = opcodes(after)
    assert ops["negate"] == 2 and ops["add"] == 2 and ops["tuple"] == 1
    check_outputs(before, after, random_args(before))


def test_inliner_keeps_metadata_of_callee_instructions() -> None:
    text = CALLS.replace(
        "ROOT n = f32[4] negate(a)",
        'ROOT n = f32[4] negate(a), metadata={op_name="neg" source_line=7}',
    )
    _, after, _ = optimize(text, "call-inliner")
    negs = [i for i in after.entry.instructions if i.opcode is Opcode.NEGATE]
    assert all(i.metadata.op_name == "neg" and i.metadata.source_line == 7 for i in negs)


def test_inliner_keeps_computations_still_used_by_other_ops() -> None:
    text = """
HloModule m

add_c {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  p = f32[4] parameter(0)
  z = f32[] constant(0)
  r = f32[] reduce(p, z), dimensions={0}, to_apply=add_c
  ROOT c = f32[] call(r, r), to_apply=add_c
}
"""
    before, after, _ = optimize(text, "inline")
    assert "call" not in all_opcodes(after)
    assert [c.name for c in after.computations] == ["add_c", "e"]
    check_outputs(before, after, random_args(before))


# ----- dce --------------------------------------------------------------------------------

DEAD = """
HloModule dead

unused_comp {
  a = f32[] parameter(0)
  ROOT n = f32[] negate(a)
}

ENTRY e {
  p0 = f32[4] parameter(0)
  p1 = f32[4] parameter(1)
  e1 = f32[4] exponential(p0)
  e2 = f32[4] log(e1)
  tok = token[] after-all()
  out = token[] outfeed(p1, tok)
  ROOT a = f32[4] add(p0, p0)
}
"""


def test_dce_removes_dead_code_but_not_side_effects_or_parameters() -> None:
    _, after, _ = optimize(DEAD, "dce")
    ops = opcodes(after)
    assert ops["exponential"] == 0 and ops["log"] == 0
    assert ops["outfeed"] == 1 and ops["after-all"] == 1 and ops["parameter"] == 2
    assert [c.name for c in after.computations] == ["e"]


def test_dce_removes_dead_while_but_keeps_side_effecting_one() -> None:
    text = """
HloModule w

cond {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[]) tuple(j)
}

body_fx {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  tok = token[] after-all()
  o = token[] outfeed(i, tok)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[]) tuple(j)
}

ENTRY e {
  x = s32[] parameter(0)
  init = (s32[]) tuple(x)
  w1 = (s32[]) while(init), condition=cond, body=body
  w2 = (s32[]) while(init), condition=cond, body=body_fx
  ROOT r = s32[] add(x, x)
}
"""
    _, after, _ = optimize(text, "dce")
    ops = opcodes(after)
    assert ops["while"] == 1
    assert {c.name for c in after.computations} == {"cond", "body_fx", "e"}


# ----- cse --------------------------------------------------------------------------------

CSE = """
HloModule cse

ENTRY e {
  p0 = f32[4] parameter(0)
  p1 = f32[4] parameter(1)
  c1 = f32[] constant(2)
  c2 = f32[] constant(2)
  c3 = f32[] constant(-0)
  c4 = f32[] constant(0)
  b1 = f32[4] broadcast(c1), dimensions={}
  b2 = f32[4] broadcast(c2), dimensions={}
  m1 = f32[4] multiply(p0, b1)
  m2 = f32[4] multiply(p0, b2)
  s1 = f32[4] add(p0, p1)
  s2 = f32[4] add(p1, p0)
  z1 = f32[4] broadcast(c3), dimensions={}
  z2 = f32[4] broadcast(c4), dimensions={}
  a = f32[4] add(m1, m2)
  b = f32[4] add(s1, s2)
  c = f32[4] add(z1, z2)
  d = f32[4] add(a, b)
  ROOT r = f32[4] add(d, c)
}
"""


def test_cse_merges_by_value_and_structure_only() -> None:
    before, after, _ = optimize(CSE, "cse,dce")
    ops = opcodes(after)
    assert ops["constant"] == 3  # 2 merged; -0 and +0 kept apart
    assert ops["broadcast"] == 3
    assert ops["multiply"] == 1
    assert ops["add"] == 7  # add(p0,p1) and add(p1,p0) are not merged (commutativity ignored)
    check_outputs(before, after, random_args(before))


def test_cse_never_merges_side_effects() -> None:
    text = """
HloModule m

ENTRY e {
  p0 = f32[4] parameter(0)
  t1 = token[] after-all()
  t2 = token[] after-all()
  o1 = token[] outfeed(p0, t1)
  o2 = token[] outfeed(p0, t2)
  ROOT a = f32[4] add(p0, p0)
}
"""
    _, after, _ = optimize(text, "cse")
    assert opcodes(after)["outfeed"] == 2 and opcodes(after)["after-all"] == 2


def test_cse_distinguishes_attributes_and_called_computations() -> None:
    text = """
HloModule m

add_c {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

max_c {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}

ENTRY e {
  p = f32[2,3] parameter(0)
  z = f32[] constant(0)
  r1 = f32[2] reduce(p, z), dimensions={1}, to_apply=add_c
  r2 = f32[2] reduce(p, z), dimensions={1}, to_apply=max_c
  r3 = f32[2] reduce(p, z), dimensions={1}, to_apply=add_c
  s1 = f32[1,3] slice(p), slice={[0:1], [0:3]}
  s2 = f32[1,3] slice(p), slice={[1:2], [0:3]}
  t = (f32[2], f32[2], f32[2]) tuple(r1, r2, r3)
  ROOT u = ((f32[2], f32[2], f32[2]), f32[1,3], f32[1,3]) tuple(t, s1, s2)
}
"""
    before, after, _ = optimize(text, "cse")
    ops = opcodes(after)
    assert ops["reduce"] == 2 and ops["slice"] == 2
    check_outputs(before, after, random_args(before))


def test_cse_of_the_fusion_fixpoints_merges_only_inside_fusions() -> None:
    """XLA's fusion and horizontal-fusion fixpoints run HloCSE(only_fusion_computations=true):
    the kernels' bodies are cleaned up, the computation that calls them is left alone."""
    from hlofuse.passes.fusion.config import FusionConfig
    from hlofuse.passes.fusion.pipelines import fusion_fixpoint, horizontal_fixpoint
    from hlofuse.passes.simplify.cse import Cse

    text = """
HloModule m

fused {
  a = f32[4] parameter(0)
  e1 = f32[4] exponential(a)
  e2 = f32[4] exponential(a)
  ROOT s = f32[4] add(e1, e2)
}

ENTRY e {
  p = f32[4] parameter(0)
  n1 = f32[4] negate(p)
  n2 = f32[4] negate(p)
  f = f32[4] fusion(n1), kind=kLoop, calls=fused
  ROOT t = (f32[4], f32[4]) tuple(f, n2)
}
"""
    module = parse(text)
    assert Cse(only_fusion_computations=True).run(module)
    assert opcodes(module)["negate"] == 2  # the entry: untouched
    fused = next(c for c in module.computations if c.is_fusion_computation)
    assert sum(i.opcode is Opcode.EXP for i in fused.instructions) == 1
    check_outputs(parse(text), module, random_args(module))
    for fixpoint in (fusion_fixpoint(FusionConfig()), horizontal_fixpoint(FusionConfig())):
        (cse,) = [p for p in fixpoint.pipeline.passes if isinstance(p, Cse)]
        assert cse.only_fusion_computations


# ----- constant-folding -------------------------------------------------------------------

FOLD = """
HloModule fold

ENTRY e {
  p0 = f32[4] parameter(0)
  a = f32[] constant(2)
  b = f32[] constant(3)
  m = f32[] multiply(a, b)
  i = s32[] constant(7)
  cv = f32[] convert(i)
  cmp = pred[] compare(a, b), direction=LT
  s = f32[] select(cmp, m, cv)
  bs = f32[4] broadcast(s), dimensions={}
  big = f32[2048] iota(), iota_dimension=0
  small = s32[3] constant({0, 1, 2})
  sm = s32[3] multiply(small, small)
  rb = f32[] reduce(big, a), dimensions={0}, to_apply=add_c
  rbb = f32[4] broadcast(rb), dimensions={}
  x = f32[4] add(p0, bs)
  ROOT t = (f32[4], s32[3], f32[4]) tuple(x, sm, rbb)
}

add_c {
  l = f32[] parameter(0)
  r = f32[] parameter(1)
  ROOT s = f32[] add(l, r)
}
"""


def test_constant_folding_folds_small_and_skips_large() -> None:
    before, after, _ = optimize(FOLD, "constant-folding,dce")
    ops = opcodes(after)
    assert ops["multiply"] == 0 and ops["convert"] == 0 and ops["compare"] == 0
    assert ops["select"] == 0
    assert ops["broadcast"] == 2  # a broadcast to 4 elements stays a broadcast
    assert ops["iota"] == 1  # iota is never folded (XLA: it only makes constants bigger)
    assert ops["reduce"] == 1  # a reduce of an iota has no constant operand
    value = next(
        i for i in after.entry.instructions if i.opcode is Opcode.CONSTANT and i.shape.dims == (3,)
    )  # type: ignore
    np.testing.assert_array_equal(value.literal, [0, 1, 4])
    check_outputs(before, after, random_args(before))


def test_constant_folding_limit_is_an_option() -> None:
    text = FOLD.replace(
        "big = f32[2048] iota(), iota_dimension=0",
        "k = f32[] constant(0.5)\n  big = f32[2048] broadcast(k), dimensions={}",
    )
    _, after, _ = optimize(text, "constant-folding,dce")
    assert opcodes(after)["reduce"] == 1  # 2048 elements: over the default limit
    _, after, _ = optimize(text, "constant-folding{max_elements=4096,max_expand_elements=4096}")
    assert opcodes(after)["reduce"] == 0


def test_constant_folding_never_folds_rng_or_parameters() -> None:
    text = """
HloModule m

ENTRY e {
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  r = f32[2] rng(lo, hi), distribution=rng_uniform
  rid = u32[] replica-id()
  ROOT t = (f32[2], u32[]) tuple(r, rid)
}
"""
    _, after, report = optimize(text, "constant-folding")
    assert not report.changed
    assert opcodes(after)["rng"] == 1 and opcodes(after)["replica-id"] == 1


# ----- tuple-simplifier -------------------------------------------------------------------

TUPLES = """
HloModule tuples

ENTRY e {
  p0 = f32[4] parameter(0)
  p1 = (f32[4], s32[]) parameter(1)
  t = (f32[4], f32[4]) tuple(p0, p0)
  g = f32[4] get-tuple-element(t), index=1
  a = f32[4] get-tuple-element(p1), index=0
  b = s32[] get-tuple-element(p1), index=1
  same = (f32[4], s32[]) tuple(a, b)
  swapped = (s32[], f32[4]) tuple(b, a)
  n = f32[4] negate(g)
  ROOT r = ((f32[4], s32[]), (s32[], f32[4]), f32[4]) tuple(same, swapped, n)
}
"""


def test_tuple_simplifier() -> None:
    _, after, _ = optimize(TUPLES, "tuple-simplifier")
    root = after.entry.root
    assert root.operand(0).opcode is Opcode.PARAMETER  # tuple(gte(p1,0), gte(p1,1)) -> p1
    assert root.operand(1).opcode is Opcode.TUPLE  # a reordering stays
    assert root.operand(2).operand(0).opcode is Opcode.PARAMETER  # gte(tuple) -> p0
    assert opcodes(after)["tuple"] == 2


# ----- noop-removal -----------------------------------------------------------------------

NOOPS = """
HloModule noops

ENTRY e {
  p0 = f32[2,3]{1,0} parameter(0)
  r = f32[2,3]{1,0} reshape(p0)
  bc = f32[2,3]{1,0} bitcast(r)
  t = f32[2,3]{1,0} transpose(bc), dimensions={0,1}
  c = f32[2,3]{1,0} convert(t)
  b = f32[2,3]{1,0} broadcast(c), dimensions={0,1}
  s = f32[2,3]{1,0} slice(b), slice={[0:2], [0:3]}
  rv = f32[2,3]{1,0} reverse(s), dimensions={}
  z = f32[] constant(0)
  pd = f32[2,3]{1,0} pad(rv, z), padding=0_0x0_0
  i = s32[] constant(1)
  ds = f32[2,3]{1,0} dynamic-slice(pd, i, i), dynamic_slice_sizes={2,3}
  cc = f32[2,3]{1,0} concatenate(ds), dimensions={0}
  cp = f32[2,3]{1,0} copy(cc)
  lay = f32[2,3]{0,1} copy(cp)
  real = f32[3,2]{1,0} transpose(lay), dimensions={1,0}
  s2 = f32[1,3]{1,0} slice(p0), slice={[0:1], [0:3]}
  ROOT out = (f32[2,3]{0,1}, f32[3,2]{1,0}, f32[1,3]{1,0}) tuple(lay, real, s2)
}
"""


def test_noop_removal_keeps_real_work() -> None:
    before, after, _ = optimize(NOOPS, "noop-removal,dce")
    ops = opcodes(after)
    assert ops["copy"] == 1  # the layout-changing copy stays
    assert ops["transpose"] == 1 and ops["slice"] == 1
    for gone in (
        "reshape",
        "bitcast",
        "convert",
        "broadcast",
        "reverse",
        "pad",
        "dynamic-slice",
        "concatenate",
    ):
        assert ops[gone] == 0, gone
    check_outputs(before, after, random_args(before))


# ----- differential property tests --------------------------------------------------------

PROPERTY_CASES = [
    (CALLS, "call-inliner"),
    (DEAD.replace("  tok = token[] after-all()\n  out = token[] outfeed(p1, tok)\n", ""), "dce"),
    (CSE, "cse"),
    (NOOPS, "noop-removal"),
    (
        TUPLES.replace(
            "p1 = (f32[4], s32[]) parameter(1)",
            "p1a = f32[4] parameter(1)\n  p1b = s32[] parameter(2)\n"
            "  p1 = (f32[4], s32[]) tuple(p1a, p1b)",
        ),
        "tuple-simplifier",
    ),
    (FOLD, "constant-folding"),
]


@pytest.mark.parametrize(("text", "spec"), PROPERTY_CASES, ids=[spec for _, spec in PROPERTY_CASES])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pass_keeps_interpreter_outputs(text: str, spec: str, data: st.DataObject) -> None:
    before, after, _ = optimize(text, spec)
    args = data.draw(args_strategy(before))
    check_outputs(before, after, args)


def test_property_cases_parse() -> None:
    for text, _ in PROPERTY_CASES:
        parse(text, verify=True)


def test_inliner_moves_side_effects_exactly_once() -> None:
    text = """
HloModule m

fx {
  a = f32[4] parameter(0)
  tok = token[] after-all()
  o = token[] outfeed(a, tok)
  ROOT n = f32[4] negate(a)
}

ENTRY e {
  p = f32[4] parameter(0)
  c = f32[4] call(p), to_apply=fx
  unused = f32[4] call(p), to_apply=fx
  ROOT r = f32[4] add(c, c)
}
"""
    _, after, _ = optimize(text, "call-inliner,dce")
    ops = all_opcodes(after)
    assert ops["call"] == 0 and ops["outfeed"] == 2 and ops["negate"] == 1
