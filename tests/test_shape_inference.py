"""Per-op unit tests of `hlofuse.ir.shape_inference.infer_shape`, including its error messages."""

from __future__ import annotations

import re
from typing import Any

import pytest

from hlofuse.errors import HloVerifyError
from hlofuse.ir.attributes import WindowDim
from hlofuse.ir.computation import Computation
from hlofuse.ir.dtypes import DTYPES
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, Shape, TokenShape, TupleShape
from hlofuse.ir.shape_inference import REQUIRES_DECLARED, infer_shape
from hlofuse.text import parse

Op = Opcode


def sh(text: str) -> Shape:
    """`f32[4,5]`, `(s32[], f32[2])`, `token[]` -> Shape (no layouts)."""
    text = text.strip()
    if text == "token[]":
        return TokenShape()
    if text.startswith("("):
        inner = text[1:-1].strip()
        parts, depth, cur = [], 0, ""
        for ch in inner:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += int(ch in "([")
            depth -= int(ch in ")]")
            cur += ch
        if cur.strip():
            parts.append(cur)
        return TupleShape(tuple(sh(p) for p in parts))
    m = re.fullmatch(r"(\w+)\[([\d,]*)\]", text)
    assert m, text
    dims = tuple(int(d) for d in m.group(2).split(",") if d)
    return ArrayShape(DTYPES[m.group(1)], dims)


def infer(op: Opcode, shapes: str | list[str], attrs: dict[str, Any] | None = None,
          called: tuple[Computation, ...] = (), declared: str | None = None) -> str:
    if isinstance(shapes, str):
        shapes = [shapes] if shapes else []
    result = infer_shape(op, [sh(s) for s in shapes], attrs or {}, called,
                         sh(declared) if declared else None)
    return str(result)


def fails(match: str, op: Opcode, shapes: str | list[str], attrs: dict[str, Any] | None = None,
          called: tuple[Computation, ...] = (), declared: str | None = None) -> None:
    with pytest.raises(HloVerifyError, match=match):
        infer(op, shapes, attrs, called, declared)


COMPS = parse("""
HloModule comps

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

add_s32 {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}

argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  v = f32[] select(gt, v0, v1)
  i = s32[] select(gt, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}

unary {
  a = f32[] parameter(0)
  ROOT n = f32[] negate(a)
}

less {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT
}

less2 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}

cond {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f32[4] exponential(x)
  ROOT t = (s32[], f32[4]) tuple(j, y)
}

bad_body {
  p = (s32[], f32[4]) parameter(0)
  ROOT x = f32[4] get-tuple-element(p), index=1
}

branch_a {
  p = f32[4] parameter(0)
  ROOT e = f32[4] exponential(p)
}

branch_b {
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p)
}

branch_s {
  p = f32[4] parameter(0)
  ROOT s = f32[2] slice(p), slice={[0:2]}
}

ENTRY main {
  ROOT c = f32[] constant(0)
}
""", verify=False)


def comp(name: str) -> Computation:
    return COMPS.computation(name)


# ----- elementwise --------------------------------------------------------------------------


def test_unary_keeps_shape() -> None:
    assert infer(Op.EXP, "f32[4,5]") == "f32[4,5]"
    assert infer(Op.NEGATE, "s32[3]") == "s32[3]"
    assert infer(Op.NOT, "pred[2]") == "pred[2]"
    assert infer(Op.IS_FINITE, "bf16[7]") == "pred[7]"
    assert infer(Op.COPY, "(f32[2], s32[])") == "(f32[2], s32[])"


def test_unary_type_rules() -> None:
    fails("exponential expects a floating-point or complex operand, found s32\\[4\\]", Op.EXP,
          "s32[4]")
    fails("popcnt expects a integral operand", Op.POPCNT, "f32[4]")
    fails("not expects a pred or integral operand", Op.NOT, "f32[4]")
    fails("abs expects a signed, floating-point or complex operand, found u32", Op.ABS, "u32[4]")
    assert infer(Op.ABS, "c64[3]") == "f32[3]"
    assert infer(Op.REAL, "c128[3]") == "f64[3]"
    assert infer(Op.EXP, "c64[3]") == "c64[3]"
    fails("floor expects a floating-point operand, found c64", Op.FLOOR, "c64[3]")
    fails("operand of negate must be an array", Op.NEGATE, "(f32[4])")


def test_binary_same_dims_and_types() -> None:
    assert infer(Op.ADD, ["f32[4]", "f32[4]"]) == "f32[4]"
    fails("add operands must have the same dimensions: f32\\[4\\] vs f32\\[5\\]", Op.ADD,
          ["f32[4]", "f32[5]"])
    fails("multiply operands must have the same element type: f32\\[4\\] vs s32\\[4\\]",
          Op.MULTIPLY, ["f32[4]", "s32[4]"])


def test_binary_rejects_implicit_scalar_broadcast() -> None:
    fails("same dimensions: f32\\[4\\] vs f32\\[\\]", Op.ADD, ["f32[4]", "f32[]"])


def test_binary_type_rules() -> None:
    fails("and expects pred or integral operands", Op.AND, ["f32[2]", "f32[2]"])
    fails("shift-left expects integral operands", Op.SHIFT_LEFT, ["f32[2]", "f32[2]"])
    fails("atan2 expects floating-point operands", Op.ATAN2, ["s32[2]", "s32[2]"])
    assert infer(Op.XOR, ["u32[2]", "u32[2]"]) == "u32[2]"


def test_compare() -> None:
    assert infer(Op.COMPARE, ["f32[3]", "f32[3]"], {"direction": "LT"}) == "pred[3]"
    assert infer(Op.COMPARE, ["s32[3]", "s32[3]"], {"direction": "EQ", "type": "SIGNED"}) \
        == "pred[3]"
    fails("compare requires attribute direction", Op.COMPARE, ["f32[3]", "f32[3]"])
    fails("compare direction must be one of EQ, NE, LT, LE, GT, GE, found 'XX'", Op.COMPARE,
          ["f32[3]", "f32[3]"], {"direction": "XX"})
    fails("compare type must be one of", Op.COMPARE, ["f32[3]", "f32[3]"],
          {"direction": "LT", "type": "WEIRD"})
    fails("compare type SIGNED does not fit operands f32\\[3\\]", Op.COMPARE,
          ["f32[3]", "f32[3]"], {"direction": "LT", "type": "SIGNED"})


def test_select() -> None:
    assert infer(Op.SELECT, ["pred[4]", "f32[4]", "f32[4]"]) == "f32[4]"
    assert infer(Op.SELECT, ["pred[]", "f32[4]", "f32[4]"]) == "f32[4]"
    fails("select pred must have element type pred, found s32\\[4\\]", Op.SELECT,
          ["s32[4]", "f32[4]", "f32[4]"])
    fails("select branches must have the same shape: f32\\[4\\] vs f32\\[5\\]", Op.SELECT,
          ["pred[4]", "f32[4]", "f32[5]"])
    fails("select pred must be a scalar or have the branches' dimensions", Op.SELECT,
          ["pred[2]", "f32[4]", "f32[4]"])


def test_clamp() -> None:
    assert infer(Op.CLAMP, ["f32[]", "f32[4]", "f32[]"]) == "f32[4]"
    assert infer(Op.CLAMP, ["f32[4]", "f32[4]", "f32[4]"]) == "f32[4]"
    fails("clamp max must be a scalar or have the operand's dimensions", Op.CLAMP,
          ["f32[]", "f32[4]", "f32[3]"])
    fails("clamp operands must have the same element type", Op.CLAMP,
          ["s32[]", "f32[4]", "f32[]"])


def test_convert_and_bitcast_convert_take_dtype_from_declared() -> None:
    assert infer(Op.CONVERT, "f32[4]", declared="s32[4]") == "s32[4]"
    assert infer(Op.CONVERT, "f32[4]", declared="s32[5]") == "s32[4]"  # dims from operand
    fails("convert needs its result shape written", Op.CONVERT, "f32[4]")
    assert infer(Op.BITCAST_CONVERT, "f32[4]", declared="u32[4]") == "u32[4]"
    assert infer(Op.BITCAST_CONVERT, "f32[4]", declared="u8[4,4]") == "u8[4,4]"
    assert infer(Op.BITCAST_CONVERT, "u8[4,4]", declared="f32[4]") == "f32[4]"
    fails("bitcast-convert from u8\\[4,2\\] to f32 needs a minor dimension of 4",
          Op.BITCAST_CONVERT, "u8[4,2]", declared="f32[4]")


def test_requires_declared_lists_the_underivable_ops() -> None:
    for op in (Op.PARAMETER, Op.CONSTANT, Op.IOTA, Op.BROADCAST, Op.RESHAPE, Op.CONVERT,
               Op.CUSTOM_CALL, Op.RNG_BIT_GENERATOR):
        assert op in REQUIRES_DECLARED
    assert Op.TUPLE not in REQUIRES_DECLARED and Op.GATHER not in REQUIRES_DECLARED


def test_arity() -> None:
    fails("add expects 2 operands, found 1", Op.ADD, ["f32[4]"])
    fails("negate expects 1 operand, found 2", Op.NEGATE, ["f32[4]", "f32[4]"])
    fails("concatenate expects at least 1 operands, found 0", Op.CONCATENATE, [],
          {"dimensions": (0,)})


# ----- structural ---------------------------------------------------------------------------


def test_tuple_and_gte() -> None:
    assert infer(Op.TUPLE, ["f32[2]", "s32[]"]) == "(f32[2], s32[])"
    assert infer(Op.TUPLE, []) == "()"
    assert infer(Op.GET_TUPLE_ELEMENT, "(f32[2], s32[])", {"index": 1}) == "s32[]"
    fails("get-tuple-element index 2 out of range for \\(f32\\[2\\], s32\\[\\]\\)",
          Op.GET_TUPLE_ELEMENT, "(f32[2], s32[])", {"index": 2})
    fails("get-tuple-element operand must be a tuple, found f32\\[2\\]", Op.GET_TUPLE_ELEMENT,
          "f32[2]", {"index": 0})
    fails("get-tuple-element requires attribute index", Op.GET_TUPLE_ELEMENT, "(f32[2])")


def test_tokens_and_barriers() -> None:
    assert infer(Op.AFTER_ALL, []) == "token[]"
    assert infer(Op.AFTER_ALL, ["token[]", "token[]"]) == "token[]"
    # XLA accepts any operands: they only order things (`after-all(f32[] p, token[] t)`).
    assert infer(Op.AFTER_ALL, ["f32[]", "token[]"]) == "token[]"
    assert infer(Op.OPTIMIZATION_BARRIER, "(f32[2], s32[])") == "(f32[2], s32[])"
    assert infer(Op.PARTITION_ID, []) == "u32[]"


def test_iota() -> None:
    assert infer(Op.IOTA, [], {"iota_dimension": 1}, declared="s32[4,5]") == "s32[4,5]"
    fails("iota_dimension 2 out of range for s32\\[4,5\\]", Op.IOTA, [],
          {"iota_dimension": 2}, declared="s32[4,5]")
    fails("iota does not support scalars", Op.IOTA, [], {"iota_dimension": 0},
          declared="s32[]")


def test_rng_and_rng_bit_generator() -> None:
    assert infer(Op.RNG, ["f32[]", "f32[]"], {"distribution": "rng_uniform"},
                 declared="f32[3,4]") == "f32[3,4]"
    fails("rng distribution must be rng_uniform or rng_normal", Op.RNG, ["f32[]", "f32[]"],
          {"distribution": "rng_bad"}, declared="f32[3]")
    assert infer(Op.RNG_BIT_GENERATOR, "u64[2]", {"algorithm": "rng_three_fry"},
                 declared="(u64[2], u32[8])") == "(u64[2], u32[8])"
    fails("rng-bit-generator algorithm must be one of", Op.RNG_BIT_GENERATOR, "u64[2]",
          {"algorithm": "rng_magic"}, declared="(u64[2], u32[8])")


# ----- data movement ------------------------------------------------------------------------


def test_broadcast() -> None:
    assert infer(Op.BROADCAST, "f32[3]", {"dimensions": (1,)}, declared="f32[2,3]") \
        == "f32[2,3]"
    assert infer(Op.BROADCAST, "f32[]", {"dimensions": ()}, declared="f32[2,3]") == "f32[2,3]"
    fails("broadcast operand dimension 0 \\(size 3\\) maps to output dimension 0 \\(size 2\\)",
          Op.BROADCAST, "f32[3]", {"dimensions": (0,)}, declared="f32[2,3]")
    fails("must list one output dimension per operand dimension", Op.BROADCAST, "f32[3]",
          {"dimensions": ()}, declared="f32[2,3]")
    fails("out of range for rank 2", Op.BROADCAST, "f32[3]", {"dimensions": (2,)},
          declared="f32[2,3]")
    fails("repeats dimension 0", Op.BROADCAST, "f32[1,1]", {"dimensions": (0, 0)},
          declared="f32[1,3]")


def test_reshape_and_bitcast() -> None:
    assert infer(Op.RESHAPE, "f32[2,6]", declared="f32[3,4]") == "f32[3,4]"
    fails("reshape must keep the element count: f32\\[2,6\\] \\(12 elements\\) vs f32\\[5\\]",
          Op.RESHAPE, "f32[2,6]", declared="f32[5]")
    assert infer(Op.BITCAST, "s32[7,2]", declared="s16[7]") == "s16[7]"


def test_transpose() -> None:
    assert infer(Op.TRANSPOSE, "f32[2,3,4]", {"dimensions": (2, 0, 1)}) == "f32[4,2,3]"
    fails("transpose dimensions=\\{0,0,1\\} is not a permutation", Op.TRANSPOSE, "f32[2,3,4]",
          {"dimensions": (0, 0, 1)})
    fails("is not a permutation", Op.TRANSPOSE, "f32[2,3]", {"dimensions": (0,)})


def test_slice() -> None:
    assert infer(Op.SLICE, "f32[10,8]", {"slice": ((2, 9, 3), (0, 8, 1))}) == "f32[3,8]"
    assert infer(Op.SLICE, "f32[10]", {"slice": ((3, 3, 1),)}) == "f32[0]"
    fails("slice \\[0:11\\] out of bounds in dimension 0 of f32\\[10\\]", Op.SLICE, "f32[10]",
          {"slice": ((0, 11, 1),)})
    fails("slice \\[5:4\\] out of bounds", Op.SLICE, "f32[10]", {"slice": ((5, 4, 1),)})
    fails("slice stride must be positive", Op.SLICE, "f32[10]", {"slice": ((0, 4, 0),)})
    fails("slice has 1 ranges for operand f32\\[10,8\\] of rank 2", Op.SLICE, "f32[10,8]",
          {"slice": ((0, 4, 1),)})


def test_dynamic_slice_and_update() -> None:
    attrs = {"dynamic_slice_sizes": (2, 8)}
    assert infer(Op.DYNAMIC_SLICE, ["f32[10,8]", "s32[]", "s32[]"], attrs) == "f32[2,8]"
    fails("dynamic-slice size 9 out of bounds in dimension 1", Op.DYNAMIC_SLICE,
          ["f32[10,8]", "s32[]", "s32[]"], {"dynamic_slice_sizes": (2, 9)})
    fails("dynamic-slice needs one start index per operand dimension: 2 expected, found 1",
          Op.DYNAMIC_SLICE, ["f32[10,8]", "s32[]"], attrs)
    fails("dynamic-slice start index 1 must be an integral scalar, found f32\\[\\]",
          Op.DYNAMIC_SLICE, ["f32[10,8]", "s32[]", "f32[]"], attrs)
    fails("start indices must share one element type", Op.DYNAMIC_SLICE,
          ["f32[10,8]", "s32[]", "u32[]"], attrs)
    assert infer(Op.DYNAMIC_UPDATE_SLICE, ["f32[10,8]", "f32[2,8]", "s32[]", "s32[]"]) \
        == "f32[10,8]"
    fails("update f32\\[11,8\\] is larger than operand f32\\[10,8\\] in dimension 0",
          Op.DYNAMIC_UPDATE_SLICE, ["f32[10,8]", "f32[11,8]", "s32[]", "s32[]"])
    fails("update must have the operand's element type", Op.DYNAMIC_UPDATE_SLICE,
          ["f32[10,8]", "s16[1,8]", "s32[]", "s32[]"])


def test_concatenate() -> None:
    attrs = {"dimensions": (1,)}
    assert infer(Op.CONCATENATE, ["f32[2,3]", "f32[2,5]"], attrs) == "f32[2,8]"
    fails("concatenate operands may differ only in dimension 1: f32\\[2,3\\] vs f32\\[3,5\\]",
          Op.CONCATENATE, ["f32[2,3]", "f32[3,5]"], attrs)
    fails("concatenate operands must have the same rank", Op.CONCATENATE,
          ["f32[2,3]", "f32[2]"], attrs)
    fails("concatenate dimension 2 out of range", Op.CONCATENATE, ["f32[2,3]"],
          {"dimensions": (2,)})


def test_pad() -> None:
    assert infer(Op.PAD, ["f32[4,5]", "f32[]"], {"padding": ((1, 2, 0), (0, 0, 1))}) \
        == "f32[7,9]"
    assert infer(Op.PAD, ["f32[4]", "f32[]"], {"padding": ((-1, -2, 0),)}) == "f32[1]"
    fails("pad makes dimension 0 of f32\\[4\\] negative", Op.PAD, ["f32[4]", "f32[]"],
          {"padding": ((-3, -2, 0),)})
    fails("pad value must have the operand's element type", Op.PAD, ["f32[4]", "s32[]"],
          {"padding": ((0, 0, 0),)})
    fails("interior padding must be non-negative", Op.PAD, ["f32[4]", "f32[]"],
          {"padding": ((0, 0, -1),)})


def test_reverse() -> None:
    assert infer(Op.REVERSE, "f32[2,3]", {"dimensions": (0, 1)}) == "f32[2,3]"
    fails("reverse dimensions=\\{3\\} has dimension 3 out of range for rank 2", Op.REVERSE,
          "f32[2,3]", {"dimensions": (3,)})


# ----- reductions ---------------------------------------------------------------------------


def test_reduce() -> None:
    attrs = {"dimensions": (1,), "to_apply": comp("add")}
    assert infer(Op.REDUCE, ["f32[4,5,6]", "f32[]"], attrs) == "f32[4,6]"
    variadic = {"dimensions": (0,), "to_apply": comp("argmax")}
    assert infer(Op.REDUCE, ["f32[4,5]", "s32[4,5]", "f32[]", "s32[]"], variadic) \
        == "(f32[5], s32[5])"
    fails("reduce to_apply add_s32 parameter 1 s32\\[\\] differs from the input element type "
          "f32\\[\\]", Op.REDUCE, ["f32[4]", "s32[]"],
          {"dimensions": (0,), "to_apply": comp("add_s32")})
    fails("reduce to_apply unary must take 2 parameters, takes 1", Op.REDUCE,
          ["f32[4]", "f32[]"], {"dimensions": (0,), "to_apply": comp("unary")})
    fails("reduce dimensions=\\{0,0\\} repeats dimension 0", Op.REDUCE, ["f32[4]", "f32[]"],
          {"dimensions": (0, 0), "to_apply": comp("add")})
    fails("reduce init value 0 must be a scalar", Op.REDUCE, ["f32[4]", "f32[4]"],
          {"dimensions": (0,), "to_apply": comp("add")})
    fails("reduce requires attribute to_apply", Op.REDUCE, ["f32[4]", "f32[]"],
          {"dimensions": (0,)})


def test_reduce_window() -> None:
    window = (WindowDim(size=1), WindowDim(size=3, stride=2, pad_lo=1, pad_hi=1))
    attrs = {"window": window, "to_apply": comp("add")}
    assert infer(Op.REDUCE_WINDOW, ["f32[5,30]", "f32[]"], attrs) == "f32[5,15]"
    dilated = (WindowDim(size=2, window_dilation=2, base_dilation=2),)
    # base 4 dilated by 2 -> 7; window 2 dilated by 2 -> 3; (7 - 3) / 1 + 1 = 5
    assert infer(Op.REDUCE_WINDOW, ["f32[4]", "f32[]"],
                 {"window": dilated, "to_apply": comp("add")}) == "f32[5]"
    fails("reduce-window window has 1 dimensions but the operand has 2", Op.REDUCE_WINDOW,
          ["f32[5,30]", "f32[]"], {"window": (WindowDim(size=2),), "to_apply": comp("add")})
    fails("needs a positive size and stride", Op.REDUCE_WINDOW, ["f32[5]", "f32[]"],
          {"window": (WindowDim(size=2, stride=0),), "to_apply": comp("add")})


def test_select_and_scatter() -> None:
    attrs = {"window": (WindowDim(size=2, stride=2),), "select": comp("less"),
             "scatter": comp("add")}
    assert infer(Op.SELECT_AND_SCATTER, ["f32[6]", "f32[3]", "f32[]"], attrs) == "f32[6]"
    fails("select-and-scatter source f32\\[2\\] must have the windowed operand's dimensions",
          Op.SELECT_AND_SCATTER, ["f32[6]", "f32[2]", "f32[]"], attrs)


# ----- dot and convolution ------------------------------------------------------------------


def test_dot() -> None:
    mm = {"lhs_contracting_dims": (1,), "rhs_contracting_dims": (0,)}
    assert infer(Op.DOT, ["f32[2,3]", "f32[3,4]"], mm) == "f32[2,4]"
    batched = {"lhs_batch_dims": (0,), "rhs_batch_dims": (0,), "lhs_contracting_dims": (2,),
               "rhs_contracting_dims": (1,)}
    assert infer(Op.DOT, ["f32[8,2,3]", "f32[8,3,4]"], batched) == "f32[8,2,4]"
    assert infer(Op.DOT, ["bf16[2,3]", "bf16[3,4]"], mm, declared="f32[2,4]") == "f32[2,4]"
    assert infer(Op.DOT, ["f32[2]", "f32[3]"], {}) == "f32[2,3]"  # outer product
    fails("dot contracting dimension sizes differ: lhs dimension 1 of f32\\[2,3\\] is 3, rhs "
          "dimension 0 of f32\\[5,4\\] is 5", Op.DOT, ["f32[2,3]", "f32[5,4]"], mm)
    fails("dot must contract as many dimensions on each side", Op.DOT,
          ["f32[2,3]", "f32[3,4]"], {"lhs_contracting_dims": (1,)})
    fails("dot batch dimension sizes differ", Op.DOT, ["f32[8,2,3]", "f32[7,3,4]"], batched)
    fails("must not be narrower", Op.DOT, ["s32[2,3]", "s32[3,4]"], mm, declared="s8[2,4]")
    # mixed operand types, as XLA takes them: the wider type (a float at equal width), or the
    # declared one
    assert infer(Op.DOT, ["s32[2,3]", "f32[3,4]"], mm) == "f32[2,4]"
    assert infer(Op.DOT, ["s8[2,3]", "s16[3,4]"], mm) == "s16[2,4]"
    assert infer(Op.DOT, ["s8[2,3]", "s16[3,4]"], mm, declared="s32[2,4]") == "s32[2,4]"
    assert infer(Op.DOT, ["bf16[2,3]", "s4[3,4]"], mm, declared="f32[2,4]") == "f32[2,4]"
    assert infer(Op.DOT, ["f32[2,3]", "c64[3,4]"], mm) == "c64[2,4]"
    fails("must not be narrower", Op.DOT, ["s8[2,3]", "s16[3,4]"], mm, declared="s8[2,4]")
    fails("dot operands must both be pred or neither", Op.DOT, ["pred[2,3]", "s8[3,4]"], mm)


def test_convolution() -> None:
    attrs = {"dim_labels": "b01f_01io->b01f",
             "window": (WindowDim(size=3, pad_lo=1, pad_hi=1), WindowDim(size=3, stride=2))}
    assert infer(Op.CONVOLUTION, ["f32[8,32,32,16]", "f32[3,3,16,64]"], attrs) \
        == "f32[8,32,15,64]"
    fails("convolution input features \\(16\\) must equal kernel input features \\(4\\)",
          Op.CONVOLUTION, ["f32[8,32,32,16]", "f32[3,3,4,64]"], attrs)
    grouped = dict(attrs, feature_group_count=4)
    assert infer(Op.CONVOLUTION, ["f32[8,32,32,16]", "f32[3,3,4,64]"], grouped) \
        == "f32[8,32,15,64]"
    fails("convolution requires dim_labels", Op.CONVOLUTION,
          ["f32[8,32,32,16]", "f32[3,3,16,64]"], {})
    fails("window size 3 differs from kernel spatial dimension", Op.CONVOLUTION,
          ["f32[8,32,32,16]", "f32[5,3,16,64]"], attrs)
    # No window attribute: a 1x1 convolution with unit strides.
    assert infer(Op.CONVOLUTION, ["f32[2,8,8,3]", "f32[1,1,3,5]"],
                 {"dim_labels": "b01f_01io->b01f"}) == "f32[2,8,8,5]"


# ----- gather and scatter -------------------------------------------------------------------


GATHER = {"offset_dims": (0, 1, 2, 3), "collapsed_slice_dims": (), "start_index_map": (1, 2),
          "index_vector_dim": 2, "slice_sizes": (1, 1, 1, 1)}


def test_gather_xla_test_case() -> None:
    assert infer(Op.GATHER, ["f32[1,1,512,512]", "s32[512,512,2]"], GATHER) \
        == "f32[1,1,1,1,512,512]"


def test_gather_rows() -> None:
    rows = {"offset_dims": (1,), "collapsed_slice_dims": (0,), "start_index_map": (0,),
            "index_vector_dim": 1, "slice_sizes": (1, 7)}
    assert infer(Op.GATHER, ["f32[10,7]", "s32[5]"], rows) == "f32[5,7]"
    assert infer(Op.GATHER, ["f32[10,7]", "s32[5,1]"], rows) == "f32[5,7]"


def test_gather_errors() -> None:
    fails("gather slice_sizes=\\{1,1,1\\} must have one entry per dimension", Op.GATHER,
          ["f32[1,1,512,512]", "s32[512,512,2]"], dict(GATHER, slice_sizes=(1, 1, 1)))
    fails("gather slice_sizes=\\{1,1,1,600\\} out of bounds in dimension 3", Op.GATHER,
          ["f32[1,1,512,512]", "s32[512,512,2]"], dict(GATHER, slice_sizes=(1, 1, 1, 600)))
    fails("gather start_index_map=\\{1\\} must have 2 entries", Op.GATHER,
          ["f32[1,1,512,512]", "s32[512,512,2]"], dict(GATHER, start_index_map=(1,)))
    fails("gather can only collapse dimensions of slice size 0 or 1", Op.GATHER,
          ["f32[10,7]", "s32[5]"],
          {"offset_dims": (1,), "collapsed_slice_dims": (0,), "start_index_map": (0,),
           "index_vector_dim": 1, "slice_sizes": (2, 7)})
    fails("must account for all 2 dimensions", Op.GATHER, ["f32[10,7]", "s32[5]"],
          {"offset_dims": (1,), "collapsed_slice_dims": (), "start_index_map": (0,),
           "index_vector_dim": 1, "slice_sizes": (1, 7)})
    fails("gather indices must be integral", Op.GATHER, ["f32[10,7]", "f32[5]"],
          {"offset_dims": (1,), "collapsed_slice_dims": (0,), "start_index_map": (0,),
           "index_vector_dim": 1, "slice_sizes": (1, 7)})


SCATTER = {"update_window_dims": (1,), "inserted_window_dims": (0,),
           "scatter_dims_to_operand_dims": (0,), "index_vector_dim": 1}


def test_scatter() -> None:
    attrs = dict(SCATTER, to_apply=comp("add_s32"))
    assert infer(Op.SCATTER, ["s32[3,3]", "s32[2]", "s32[2,3]"], attrs) == "s32[3,3]"
    fails("scatter update window dimension 1 of s32\\[2,4\\] is larger than operand", Op.SCATTER,
          ["s32[3,3]", "s32[2]", "s32[2,4]"], attrs)
    fails("scatter update scatter dimensions \\{5\\} of s32\\[5,3\\] must match the index batch "
          "dimensions \\{2\\}", Op.SCATTER, ["s32[3,3]", "s32[2]", "s32[5,3]"], attrs)
    fails("scatter to_apply add parameter 0 f32\\[\\] differs|accumulator f32\\[\\] differs",
          Op.SCATTER, ["s32[3,3]", "s32[2]", "s32[2,3]"], dict(SCATTER, to_apply=comp("add")))
    fails("at least 3 operands, found 2", Op.SCATTER, ["s32[3,3]", "s32[2]"], attrs)
    fails("odd count", Op.SCATTER, ["s32[3,3]", "s32[2]", "s32[2,3]", "s32[2,3]"], attrs)


# ----- sort and map -------------------------------------------------------------------------


def test_sort() -> None:
    assert infer(Op.SORT, "f32[4,5]", {"dimensions": (1,), "to_apply": comp("less")}) \
        == "f32[4,5]"
    assert infer(Op.SORT, ["f32[5]", "s32[5]"], {"dimensions": (0,), "to_apply": comp("less2")}) \
        == "(f32[5], s32[5])"
    fails("sort comparator add must return pred\\[\\], returns f32\\[\\]", Op.SORT, "f32[5]",
          {"dimensions": (0,), "to_apply": comp("add")})
    fails("sort comparator less must take \\(f32\\[\\], f32\\[\\], s32\\[\\], s32\\[\\]\\)",
          Op.SORT, ["f32[5]", "s32[5]"], {"dimensions": (0,), "to_apply": comp("less")})


def test_map() -> None:
    assert infer(Op.MAP, "f32[128]", {"dimensions": (0,), "to_apply": comp("unary")}) \
        == "f32[128]"
    fails("map function add must take \\(f32\\[\\]\\), takes \\(f32\\[\\], f32\\[\\]\\)", Op.MAP,
          "f32[128]", {"dimensions": (0,), "to_apply": comp("add")})


# ----- control flow -------------------------------------------------------------------------


def test_while() -> None:
    loop = "(s32[], f32[4])"
    attrs = {"condition": comp("cond"), "body": comp("body")}
    assert infer(Op.WHILE, loop, attrs) == loop
    fails("while body bad_body must return the loop shape \\(s32\\[\\], f32\\[4\\]\\), returns "
          "f32\\[4\\]", Op.WHILE, loop, {"condition": comp("cond"), "body": comp("bad_body")})
    fails("while condition body must return pred\\[\\]", Op.WHILE, loop,
          {"condition": comp("body"), "body": comp("body")})
    fails("while condition cond parameter must have the loop shape", Op.WHILE, "(s32[])",
          attrs)


def test_conditional() -> None:
    two = {"branch_computations": (comp("branch_a"), comp("branch_b"))}
    # XLA's parser: a pred selector takes true_computation/false_computation, never a list.
    fails("a conditional with a pred selector takes true_computation and false_computation",
          Op.CONDITIONAL, ["pred[]", "f32[4]", "f32[4]"], two)
    assert infer(Op.CONDITIONAL, ["s32[]", "f32[4]", "f32[4]"], two) == "f32[4]"
    tf = {"true_computation": comp("branch_a"), "false_computation": comp("branch_b")}
    assert infer(Op.CONDITIONAL, ["pred[]", "f32[4]", "f32[4]"], tf) == "f32[4]"
    fails("conditional has 2 branches but 1 branch operands", Op.CONDITIONAL,
          ["s32[]", "f32[4]"], two)
    fails("conditional branches must return the same shape", Op.CONDITIONAL,
          ["s32[]", "f32[4]", "f32[4]"],
          {"branch_computations": (comp("branch_a"), comp("branch_s"))})
    fails("conditional selector must be pred\\[\\] or s32\\[\\], found f32\\[\\]",
          Op.CONDITIONAL, ["f32[]", "f32[4]", "f32[4]"], two)


def test_call_and_fusion() -> None:
    assert infer(Op.CALL, ["f32[]", "f32[]"], {"to_apply": comp("add")}) == "f32[]"
    fails("call passes 1 operands to add, which takes 2 parameters", Op.CALL, ["f32[]"],
          {"to_apply": comp("add")})
    fails("call operand 1 s32\\[\\] does not match parameter 1 f32\\[\\] of add", Op.CALL,
          ["f32[]", "s32[]"], {"to_apply": comp("add")})
    assert infer(Op.FUSION, "f32[4]", {"kind": "kLoop", "calls": (comp("branch_a"),)}) \
        == "f32[4]"
    fails("fusion kind must be one of kLoop, kInput, kOutput, kCustom, found 'kWeird'",
          Op.FUSION, "f32[4]", {"kind": "kWeird", "calls": (comp("branch_a"),)})
    # Called computations may also come positionally (Instruction.called_computations order).
    assert infer(Op.CALL, ["f32[]", "f32[]"], {}, called=(comp("add"),)) == "f32[]"


def test_custom_call_uses_declared() -> None:
    assert infer(Op.CUSTOM_CALL, "f32[4]", {"custom_call_target": "x"},
                 declared="(bf16[], s32[])") == "(bf16[], s32[])"
    fails("custom-call needs its result shape written", Op.CUSTOM_CALL, "f32[4]")
