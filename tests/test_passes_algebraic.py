"""The algebraic simplifier's rules, one test per rule (each rule's comment in
`algebraic.RULES` names its test here), plus a differential property test over all of them."""

from __future__ import annotations

import inspect
import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.simplify import algebraic
from pass_testing import args_strategy, check_outputs, opcodes, optimize, random_args


def simplify(body: str, params: str) -> tuple:
    text = f"HloModule m\n\nENTRY e {{\n{params}\n{body}\n}}\n"
    before, after, _ = optimize(text, "algebraic-simplifier,dce")
    check_outputs(before, after, random_args(before))
    return before, after


def root_op(module) -> Opcode:  # type: ignore[no-untyped-def]
    return module.entry.root.opcode


def test_add_zero_int() -> None:
    _, after = simplify("""
  z = s32[] constant(0)
  zb = s32[4] broadcast(z), dimensions={}
  a = s32[4] add(zb, p)
  ROOT b = s32[4] add(a, zb)""", "  p = s32[4] parameter(0)")
    assert root_op(after) is Opcode.PARAMETER


def test_add_zero_float_ieee() -> None:
    # x + (+0) is not x for x = -0 (the sum is +0), so it stays; x + (-0) is always x.
    _, after = simplify("""
  pz = f32[] constant(0)
  nz = f32[] constant(-0)
  pb = f32[4] broadcast(pz), dimensions={}
  nb = f32[4] broadcast(nz), dimensions={}
  a = f32[4] add(p, pb)
  b = f32[4] add(nb, p)
  ROOT t = (f32[4], f32[4]) tuple(a, b)""", "  p = f32[4] parameter(0)")
    root = after.entry.root
    assert root.operand(0).opcode is Opcode.ADD
    assert root.operand(1).opcode is Opcode.PARAMETER


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f64"])
def test_add_zero_float_ieee_other_widths(dtype: str) -> None:
    _, after = simplify(f"""
  pz = {dtype}[] constant(0)
  nz = {dtype}[] constant(-0)
  a = {dtype}[] add(p, pz)
  b = {dtype}[] add(nz, p)
  ROOT t = ({dtype}[], {dtype}[]) tuple(a, b)""", f"  p = {dtype}[] parameter(0)")
    root = after.entry.root
    assert [o.opcode for o in root.operands] == [Opcode.ADD, Opcode.PARAMETER]


def test_sub_zero() -> None:
    _, after = simplify("""
  pz = f32[] constant(0)
  nz = f32[] constant(-0)
  iz = s32[] constant(0)
  a = f32[] subtract(p, pz)
  b = f32[] subtract(p, nz)
  c = s32[] subtract(i, iz)
  ROOT t = (f32[], f32[], s32[]) tuple(a, b, c)""",
                        "  p = f32[] parameter(0)\n  i = s32[] parameter(1)")
    root = after.entry.root
    assert [o.opcode for o in root.operands] == [Opcode.PARAMETER, Opcode.SUBTRACT,
                                                 Opcode.PARAMETER]


def test_mul_one() -> None:
    _, after = simplify("""
  one = f32[2,2] constant({ {1, 1}, {1, 1} })
  a = f32[2,2] multiply(one, p)
  ROOT b = f32[2,2] multiply(a, one)""", "  p = f32[2,2] parameter(0)")
    assert root_op(after) is Opcode.PARAMETER


def test_mul_zero_int_folds_float_stays() -> None:
    _, after = simplify("""
  iz = s32[] constant(0)
  fz = f32[] constant(0)
  a = s32[] multiply(i, iz)
  b = f32[] multiply(f, fz)
  ROOT t = (s32[], f32[]) tuple(a, b)""", "  i = s32[] parameter(0)\n  f = f32[] parameter(1)")
    root = after.entry.root
    assert root.operand(0).opcode is Opcode.CONSTANT
    assert root.operand(1).opcode is Opcode.MULTIPLY  # x * 0 is NaN for inf/NaN, -0 for x < 0


def test_div_one() -> None:
    _, after = simplify("""
  one = f32[] constant(1)
  ob = f32[3] broadcast(one), dimensions={}
  ROOT d = f32[3] divide(p, ob)""", "  p = f32[3] parameter(0)")
    assert root_op(after) is Opcode.PARAMETER


def test_negate_negate() -> None:
    _, after = simplify("""
  a = s32[3] negate(p)
  ROOT b = s32[3] negate(a)""", "  p = s32[3] parameter(0)")
    assert root_op(after) is Opcode.PARAMETER


def test_not_not() -> None:
    _, after = simplify("""
  a = pred[3] not(p)
  ROOT b = pred[3] not(a)""", "  p = pred[3] parameter(0)")
    assert root_op(after) is Opcode.PARAMETER


def test_select_constant_pred() -> None:
    _, after = simplify("""
  t = pred[3] constant({true, true, true})
  f = pred[] constant(false)
  fb = pred[3] broadcast(f), dimensions={}
  mixed = pred[3] constant({true, false, true})
  a = f32[3] select(t, x, y)
  b = f32[3] select(fb, x, y)
  c = f32[3] select(mixed, x, y)
  ROOT r = (f32[3], f32[3], f32[3]) tuple(a, b, c)""",
                        "  x = f32[3] parameter(0)\n  y = f32[3] parameter(1)")
    root = after.entry.root
    assert root.operand(0).parameter_number == 0
    assert root.operand(1).parameter_number == 1
    assert root.operand(2).opcode is Opcode.SELECT


def test_select_same_branches() -> None:
    _, after = simplify("  ROOT s = f32[3] select(p, x, x)",
                        "  p = pred[3] parameter(0)\n  x = f32[3] parameter(1)")
    assert root_op(after) is Opcode.PARAMETER


def test_and_or_constants() -> None:
    _, after = simplify("""
  t = pred[] constant(true)
  f = pred[] constant(false)
  tb = pred[4] broadcast(t), dimensions={}
  fb = pred[4] broadcast(f), dimensions={}
  a = pred[4] and(p, tb)
  b = pred[4] and(fb, p)
  c = pred[4] or(p, fb)
  d = pred[4] or(tb, p)
  ROOT r = (pred[4], pred[4], pred[4], pred[4]) tuple(a, b, c, d)""",
                        "  p = pred[4] parameter(0)")
    ops = [o.opcode for o in after.entry.root.operands]
    assert ops == [Opcode.PARAMETER, Opcode.BROADCAST, Opcode.PARAMETER, Opcode.BROADCAST]


def test_broadcast_broadcast() -> None:
    _, after = simplify("""
  a = f32[3,2] broadcast(p), dimensions={0}
  ROOT b = f32[4,3,2] broadcast(a), dimensions={1,2}""", "  p = f32[3] parameter(0)")
    root = after.entry.root
    assert root.opcode is Opcode.BROADCAST and root.dimensions == (1,)
    assert root.operand(0).opcode is Opcode.PARAMETER


def test_reshape_of_scalar_broadcast() -> None:
    _, after = simplify("""
  a = f32[6] broadcast(p), dimensions={}
  b = f32[2,3] reshape(a)
  c = f32[1,1] reshape(p)
  ROOT t = (f32[2,3], f32[1,1]) tuple(b, c)""", "  p = f32[] parameter(0)")
    for op in after.entry.root.operands:
        assert op.opcode is Opcode.BROADCAST and op.operand(0).opcode is Opcode.PARAMETER


def test_reshape_reshape() -> None:
    _, after = simplify("""
  a = f32[6] reshape(p)
  b = f32[3,2] reshape(a)
  c = f32[6] reshape(p)
  d = f32[2,3] reshape(c)
  ROOT t = (f32[3,2], f32[2,3]) tuple(b, d)""", "  p = f32[2,3] parameter(0)")
    a, b = after.entry.root.operands
    assert a.opcode is Opcode.RESHAPE and a.operand(0).opcode is Opcode.PARAMETER
    assert b.opcode is Opcode.PARAMETER


def test_slice_slice() -> None:
    _, after = simplify("""
  a = f32[8,4] slice(p), slice={[2:18:2], [1:5]}
  ROOT b = f32[3,2] slice(a), slice={[1:8:3], [2:4]}""", "  p = f32[20,6] parameter(0)")
    root = after.entry.root
    assert root.opcode is Opcode.SLICE and root.operand(0).opcode is Opcode.PARAMETER
    assert tuple(root.attrs["slice"]) == ((4, 17, 6), (3, 5, 1))


def test_concatenate_single() -> None:
    _, after = simplify("  ROOT c = f32[3] concatenate(p), dimensions={0}",
                        "  p = f32[3] parameter(0)")
    assert root_op(after) is Opcode.PARAMETER


def test_dynamic_slice_constant_indices_clamped() -> None:
    _, after = simplify("""
  i = s32[] constant(7)
  j = s32[] constant(-3)
  k = s32[] constant(1)
  a = f32[2,2] dynamic-slice(p, i, j), dynamic_slice_sizes={2,2}
  b = f32[2,2] dynamic-slice(p, k, k), dynamic_slice_sizes={2,2}
  ROOT t = (f32[2,2], f32[2,2]) tuple(a, b)""", "  p = f32[5,4] parameter(0)")
    a, b = after.entry.root.operands
    assert a.opcode is Opcode.SLICE and tuple(a.attrs["slice"]) == ((3, 5, 1), (0, 2, 1))
    assert b.opcode is Opcode.SLICE and tuple(b.attrs["slice"]) == ((1, 3, 1), (1, 3, 1))


def test_transpose_transpose() -> None:
    _, after = simplify("""
  a = f32[3,4,2] transpose(p), dimensions={1,2,0}
  b = f32[4,2,3] transpose(a), dimensions={1,2,0}
  c = f32[4,3,2] transpose(p), dimensions={2,1,0}
  d = f32[2,3,4] transpose(c), dimensions={2,1,0}
  ROOT t = (f32[4,2,3], f32[2,3,4]) tuple(b, d)""", "  p = f32[2,3,4] parameter(0)")
    b, d = after.entry.root.operands
    assert b.opcode is Opcode.TRANSPOSE and b.dimensions == (2, 0, 1)
    assert b.operand(0).opcode is Opcode.PARAMETER
    assert d.opcode is Opcode.PARAMETER


BATCH_DOT = ("  bd = f32[2,3,6] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={1}, "
             "lhs_contracting_dims={2}, rhs_contracting_dims={0}")


def test_transpose_of_dot_swaps_operands() -> None:
    # jax writes `x @ W.T` (equinox's Linear) as dot(W, x) then a transpose: the product is
    # computed as dot(x, W) instead, in the order the transpose's users read it. Batch
    # dimensions stay in front; the operand precisions swap with the operands.
    _, after = simplify(f"""
  d = f32[5,4] dot(w, x), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}},\
 operand_precision={{highest,default}}
  t = f32[4,5] transpose(d), dimensions={{1,0}}
{BATCH_DOT}
  bt = f32[2,6,3] transpose(bd), dimensions={{0,2,1}}
  ROOT r = (f32[4,5], f32[2,6,3]) tuple(t, bt)""", """  w = f32[5,3] parameter(0)
  x = f32[4,3] parameter(1)
  a = f32[2,3,7] parameter(2)
  b = f32[7,2,6] parameter(3)""")
    t, bt = after.entry.root.operands
    assert t.opcode is Opcode.DOT and [o.name for o in t.operands] == ["x", "w"]
    assert t.attrs["operand_precision"] == "{default,highest}"
    assert bt.opcode is Opcode.DOT and [o.name for o in bt.operands] == ["b", "a"]
    assert bt.attrs["lhs_batch_dims"] == (1,) and bt.attrs["rhs_contracting_dims"] == (2,)


def test_transpose_of_dot_stays_where_it_cannot_swap() -> None:
    # a transpose that moves a batch dimension, or a dot with another user, stays
    _, after = simplify(f"""
{BATCH_DOT}
  bt = f32[3,2,6] transpose(bd), dimensions={{1,0,2}}
  d = f32[3,3] dot(c, c), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}
  t = f32[3,3] transpose(d), dimensions={{1,0}}
  ROOT r = (f32[3,2,6], f32[3,3], f32[3,3]) tuple(bt, t, d)""", """  a = f32[2,3,7] parameter(0)
  b = f32[7,2,6] parameter(1)
  c = f32[3,4] parameter(2)""")
    bt, t, _ = after.entry.root.operands
    assert bt.opcode is Opcode.TRANSPOSE and t.opcode is Opcode.TRANSPOSE


def test_dot_of_transpose_folds() -> None:
    # the backward pass of a dense layer: dot(transpose(g), x) contracts g's rows directly.
    # A transpose that reorders an operand's free dimensions would reorder the result's: it
    # stays.
    _, after = simplify("""
  gt = f32[5,4] transpose(g), dimensions={1,0}
  d = f32[5,3] dot(gt, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ht = f32[3,2,4] transpose(h), dimensions={2,1,0}
  e = f32[3,2,3] dot(ht, x), lhs_contracting_dims={2}, rhs_contracting_dims={0}
  ROOT r = (f32[5,3], f32[3,2,3]) tuple(d, e)""", """  g = f32[4,5] parameter(0)
  x = f32[4,3] parameter(1)
  h = f32[4,2,3] parameter(2)""")
    d, e = after.entry.root.operands
    assert d.opcode is Opcode.DOT and d.operand(0).name == "g"
    assert d.attrs["lhs_contracting_dims"] == (0,)
    assert e.operand(0).opcode is Opcode.TRANSPOSE


def test_every_rule_names_an_existing_test() -> None:
    source = inspect.getsource(algebraic)
    named = re.findall(r"# test_passes_algebraic\.py::(\w+)", source)
    assert len(named) == len(algebraic.RULES)
    here = sys.modules[__name__]
    for name in named:
        assert callable(getattr(here, name, None)), name


ALL_RULES = """
HloModule all

ENTRY e {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  i = s32[4] parameter(2)
  p = pred[4] parameter(3)
  nz = f32[] constant(-0)
  pz = f32[] constant(0)
  one = f32[] constant(1)
  iz = s32[] constant(0)
  t = pred[] constant(true)
  nzb = f32[4] broadcast(nz), dimensions={}
  pzb = f32[4] broadcast(pz), dimensions={}
  oneb = f32[4] broadcast(one), dimensions={}
  izb = s32[4] broadcast(iz), dimensions={}
  tb = pred[4] broadcast(t), dimensions={}
  a1 = f32[4] add(x, nzb)
  a2 = f32[4] add(x, pzb)
  s1 = f32[4] subtract(y, pzb)
  s2 = f32[4] subtract(y, nzb)
  m1 = f32[4] multiply(a1, oneb)
  m0 = f32[4] multiply(a2, pzb)
  d1 = f32[4] divide(s1, oneb)
  n2 = f32[4] negate(d1)
  n3 = f32[4] negate(n2)
  ia = s32[4] add(i, izb)
  im = s32[4] multiply(ia, izb)
  nn = pred[4] not(p)
  nnn = pred[4] not(nn)
  an = pred[4] and(nnn, tb)
  se = f32[4] select(tb, m1, s2)
  se2 = f32[4] select(an, n3, m0)
  bb = f32[2,4] broadcast(se2), dimensions={1}
  bbb = f32[3,2,4] broadcast(bb), dimensions={1,2}
  rr = f32[24] reshape(bbb)
  rrr = f32[4,6] reshape(rr)
  tt = f32[6,4] transpose(rrr), dimensions={1,0}
  ttt = f32[4,6] transpose(tt), dimensions={1,0}
  sl = f32[4,4] slice(ttt), slice={[0:4], [1:5]}
  sls = f32[2,2] slice(sl), slice={[1:4:2], [0:4:3]}
  k = s32[] constant(9)
  ds = f32[2,3] dynamic-slice(ttt, k, k), dynamic_slice_sizes={2,3}
  ROOT r = (f32[4], f32[4], s32[4], f32[2,2], f32[2,3]) tuple(se, a2, im, sls, ds)
}
"""


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_rules_keep_interpreter_outputs(data: st.DataObject) -> None:
    before, after, _ = optimize(ALL_RULES, "algebraic-simplifier,dce")
    check_outputs(before, after, data.draw(args_strategy(before)))


def test_all_rules_module_shrinks() -> None:
    before, after, _ = optimize(ALL_RULES, "algebraic-simplifier,dce")
    ops = opcodes(after)
    assert ops["negate"] == 0 and ops["not"] == 0 and ops["and"] == 0 and ops["divide"] == 0
    assert ops["add"] == 1  # add(x, +0) stays
    assert ops["multiply"] == 1  # the float multiply by zero stays
    assert ops["dynamic-slice"] == 0 and ops["slice"] == 2
    assert len(after.entry.instructions) < len(before.entry.instructions)


@pytest.mark.parametrize("rule", algebraic.RULES, ids=lambda r: r.name)
def test_rules_are_data(rule: algebraic.Rule) -> None:
    assert isinstance(rule.opcode, Opcode) and callable(rule.fn)
    assert re.fullmatch(r"[a-z]+(-[a-z]+)*", rule.name)
