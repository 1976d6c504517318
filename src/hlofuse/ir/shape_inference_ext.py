"""Shape inference for the HLO ops of today's XLA beyond the classic set: collectives and their
start/done forms, async-start/update/done, copy-start/done, batch norm, the dynamic-size ops
(get-/set-dimension-size, dynamic-reshape), ragged-dot and scaled-dot, domain, shuffle,
stochastic-convert, complex, mulhi and custom-call; plus the element-type rule of every
elementwise op (`TYPE_RULES`, used by `shape_inference`).

Follows XLA's `ShapeInference` and `HloVerifier`. Collectives are shape functions of their
operands only: with one replica (all hlofuse runs) their values are too (docs/hlo-text.md).
Conditions enforced:

* all-reduce(-start), collective-broadcast, combined collective-permute: the operand shapes (a
  tuple when several); all-reduce-done / collective-permute-done / all-gather-done / copy-done:
  the data element of their start's tuple; all-to-all: the operand (with a split
  `dimensions={d}`) or the tuple of operands; ragged-all-to-all: its output operand (1), with
  four s32/s64 offset and size operands of rank 1; in-place collective-permute (4 operands, or
  `slice_sizes=`): its output operand (1);
* all-gather(-start), reduce-scatter, collective-permute-start, collective-reduce,
  dynamic-reshape, ragged-dot, scaled-dot, shuffle, copy-start: the written shape (their sizes
  depend on the replica count or on values), checked where the operands say something: the
  gathered/scattered dimension is in range and the element type kept;
* async-start: `((operands...), the wrapped computation's result, state...)` with the operand
  shapes; async-update: its operand's shape; async-done: element 1 of its operand's;
* batch-norm-training/-inference/-grad: a float operand, `feature_index` in range, epsilon
  present, and scale/offset/mean/variance vectors of the feature dimension's size;
* get-dimension-size: s32[] of a dimension in range; set-dimension-size: the operand, the size a
  s32 scalar;
* stochastic-convert: a float operand and unsigned random bits of its width and shape;
* complex: two equal real f32/f64 operands -> c64/c128; mulhi: integral operands;
* custom-call: the written shape; `operand_layout_constraints` gives one shape per operand,
  each compatible with it;
* elementwise element types (`TYPE_RULES`): the rounding ops, is-finite, erf, atan2 and
  reduce-precision take real floats; the other transcendentals take real or complex floats; abs,
  sign and negate also signed integers; the bit ops integers; the logical ops pred or integers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hlofuse.ir._shape_util import (
    MISSING,
    attr_int,
    attr_ints,
    callee,
    expect_array,
    expect_arrays,
    expect_scalar,
    fail,
    fmt,
    fmt_list,
    same_shape,
    signature,
    strip_layout,
    tuple_or_single,
)
from hlofuse.ir.dtypes import C64, C128, S32, DType
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, Shape, TupleShape

if TYPE_CHECKING:
    from hlofuse.ir.computation import Computation

Op = Opcode
_Called = Sequence["Computation"]
__all__ = ["MISSING", "REQUIRES_DECLARED", "RULES", "TYPE_RULES"]
Rule = Callable[[Sequence[Shape], Mapping[str, Any], _Called, "Shape | None"], Shape]

# ----- element types of elementwise ops ---------------------------------------------------

_REAL_FLOAT_ONLY = (Op.FLOOR, Op.CEIL, Op.ROUND_AFZ, Op.ROUND_EVEN, Op.IS_FINITE,
                    Op.REDUCE_PRECISION, Op.ERF, Op.ATAN2)
_FLOAT_OR_COMPLEX = (Op.COS, Op.SIN, Op.TAN, Op.EXP, Op.EXPM1, Op.LOG, Op.LOG1P, Op.LOGISTIC,
                     Op.RSQRT, Op.SQRT, Op.CBRT, Op.TANH, Op.ACOS, Op.ACOSH, Op.ASIN, Op.ASINH,
                     Op.ATAN, Op.ATANH, Op.COSH, Op.SINH, Op.REAL, Op.IMAG)
_INTEGRAL_ONLY = (Op.CLZ, Op.POPCNT, Op.SHIFT_LEFT, Op.SHIFT_RIGHT_ARITHMETIC,
                  Op.SHIFT_RIGHT_LOGICAL, Op.MULHI)
_LOGICAL = (Op.NOT, Op.AND, Op.OR, Op.XOR)

TYPE_RULES: dict[Opcode, tuple[Callable[[DType], bool], str]] = {}
for _op in _REAL_FLOAT_ONLY:
    TYPE_RULES[_op] = (lambda d: d.is_float, "floating-point")
for _op in _FLOAT_OR_COMPLEX:
    TYPE_RULES[_op] = (lambda d: d.is_inexact, "floating-point or complex")
for _op in _INTEGRAL_ONLY:
    TYPE_RULES[_op] = (lambda d: d.is_integral, "integral")
for _op in _LOGICAL:
    TYPE_RULES[_op] = (lambda d: d.is_integral or d.is_pred, "pred or integral")
for _op in (Op.ABS, Op.SIGN):
    TYPE_RULES[_op] = (lambda d: d.is_inexact or d.is_signed, "signed, floating-point or complex")
TYPE_RULES[Op.NEGATE] = (lambda d: d.is_inexact or d.is_integral,
                         "integral, floating-point or complex")
TYPE_RULES[Op.REMAINDER] = (lambda d: not d.is_complex, "real (not complex)")


def complex_(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
             declared: Any) -> Shape:
    re, im = expect_array(ss[0], "complex real part"), expect_array(ss[1], "complex imag part")
    if not same_shape(re, im):
        fail(f"complex parts must have the same shape: {fmt(re)} vs {fmt(im)}")
    if re.dtype.name not in ("f32", "f64"):
        fail(f"complex parts must be f32 or f64, found {fmt(re)}")
    return ArrayShape(C64 if re.dtype.name == "f32" else C128, re.dims)


def stochastic_convert(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                       declared: Shape | None) -> Shape:
    a = expect_array(ss[0], "stochastic-convert operand")
    r = expect_array(ss[1], "stochastic-convert random bits")
    if not a.dtype.is_float:
        fail(f"stochastic-convert converts floating-point operands, found {fmt(a)}")
    if r.dtype.kind != "unsigned" or r.dtype.bits != a.dtype.bits or r.dims != a.dims:
        fail(f"stochastic-convert random bits must be unsigned integers of the operand's width "
             f"and shape: {fmt(r)} for {fmt(a)}")
    out = _declared(Op.STOCHASTIC_CONVERT, declared)
    return ArrayShape(out.dtype, a.dims)


# ----- collectives ------------------------------------------------------------------------


def _declared(op: Opcode, declared: Shape | None) -> ArrayShape:
    if not isinstance(declared, ArrayShape):
        fail(f"{op} needs its array result shape written, found {fmt(declared)}")
    return declared


def _need(op: Opcode, declared: Shape | None) -> Shape:
    if declared is None:
        fail(f"{op} needs its result shape written; it cannot be inferred from the operands")
    return strip_layout(declared)


def operands_shape(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                   declared: Any) -> Shape:
    """all-reduce, all-reduce-start, collective-broadcast: the operand(s)."""
    expect_arrays(ss, "collective operand")
    return tuple_or_single([strip_layout(s) for s in ss])


def _gathered(op: Opcode, ss: Sequence[Shape], attrs: Mapping[str, Any],
              declared: Shape | None) -> Shape:
    """all-gather / reduce-scatter: the written shape; one dimension of each result leaf may
    differ from its operand's."""
    out = _need(op, declared)
    dims = attr_ints(attrs, "dimensions", str(op))
    if len(dims) != 1:
        fail(f"{op} needs one dimension, found dimensions={list(dims)}")
    results = out.elements if isinstance(out, TupleShape) else (out,)
    if op is Op.ALL_GATHER_START and isinstance(out, TupleShape) and len(out.elements) == 2:
        results = out.elements[1].elements if isinstance(out.elements[1], TupleShape) \
            else (out.elements[1],)
    arrays = expect_arrays(ss, f"{op} operand")
    if len(results) != len(arrays):
        fail(f"{op} has {len(arrays)} operands but its shape {fmt(out)} has {len(results)} "
             "results")
    d = dims[0]
    for a, r in zip(arrays, results, strict=True):
        r = expect_array(r, f"{op} result")
        if not 0 <= d < a.rank or r.rank != a.rank or r.dtype != a.dtype or any(
                x != y for i, (x, y) in enumerate(zip(a.dims, r.dims, strict=True)) if i != d):
            fail(f"{op} over dimension {d} cannot turn {fmt(a)} into {fmt(r)}")
    return out


def all_gather(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
               declared: Shape | None) -> Shape:
    return _gathered(Op.ALL_GATHER, ss, attrs, declared)


def all_gather_start(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                     declared: Shape | None) -> Shape:
    return _gathered(Op.ALL_GATHER_START, ss, attrs, declared)


def reduce_scatter(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                   declared: Shape | None) -> Shape:
    callee(attrs, "to_apply", called, 0, "reduce-scatter")
    return _gathered(Op.REDUCE_SCATTER, ss, attrs, declared)


def all_to_all(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
               declared: Any) -> Shape:
    arrays = expect_arrays(ss, "all-to-all operand")
    dims = attrs.get("dimensions")
    if dims:
        if len(arrays) != 1 or len(dims) != 1 or not 0 <= dims[0] < arrays[0].rank:
            fail(f"all-to-all with a split dimension takes one operand and a dimension in "
                 f"range, found dimensions={list(dims)} for {fmt_list(ss)}")
        return strip_layout(arrays[0])
    return TupleShape(tuple(strip_layout(a) for a in arrays))


def ragged_all_to_all(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                      declared: Any) -> Shape:
    data, out = expect_array(ss[0], "ragged-all-to-all input"), expect_array(ss[1], "output")
    if data.dtype != out.dtype or data.rank != out.rank:
        fail(f"ragged-all-to-all input and output must share element type and rank: "
             f"{fmt(data)} vs {fmt(out)}")
    for i, s in enumerate(ss[2:], 2):
        a = expect_array(s, f"ragged-all-to-all operand {i}")
        if a.rank != 1 or a.dtype.name not in ("s32", "s64"):
            fail(f"ragged-all-to-all offsets and sizes must be s32/s64 vectors, operand {i} is "
                 f"{fmt(a)}")
    return strip_layout(out)


def collective_permute(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                       declared: Any) -> Shape:
    if "slice_sizes" in attrs or (len(ss) == 4 and isinstance(ss[2], TupleShape)):
        if len(ss) != 4:
            fail(f"in-place collective-permute takes input, output and two offsets, found "
                 f"{len(ss)} operands")
        return strip_layout(ss[1])
    return tuple_or_single([strip_layout(s) for s in ss])


def done_of_start(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                  declared: Any) -> Shape:
    """all-reduce-done: its operand; *-permute-done, all-gather-done: element 1 of the start's
    tuple; copy-done: element 0."""
    start = ss[0]
    if isinstance(start, ArrayShape):
        return strip_layout(start)
    if not isinstance(start, TupleShape) or len(start.elements) < 2:
        fail(f"a done op reads the tuple its start op produced, found {fmt(start)}")
    return strip_layout(start.elements[1])


def copy_done(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
              declared: Any) -> Shape:
    start = ss[0]
    if not isinstance(start, TupleShape) or len(start.elements) < 2:
        fail(f"copy-done reads the (destination, source, context) tuple of a copy-start, found "
             f"{fmt(start)}")
    return strip_layout(start.elements[0])


def copy_start(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
               declared: Shape | None) -> Shape:
    out = _need(Op.COPY_START, declared)
    if not (isinstance(out, TupleShape) and len(out.elements) >= 2
            and same_shape(out.elements[0], ss[0]) and same_shape(out.elements[1], ss[0])):
        fail(f"copy-start of {fmt(ss[0])} must have shape (destination, source, context) with "
             f"both buffers of the operand's shape, found {fmt(out)}")
    return out


# ----- async ------------------------------------------------------------------------------


def async_start(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                declared: Shape | None) -> Shape:
    comp = callee(attrs, "calls", called, 0, "async-start")
    params, root = signature(comp)
    out = _need(Op.ASYNC_START, declared)
    if not (isinstance(out, TupleShape) and len(out.elements) >= 2
            and isinstance(out.elements[0], TupleShape)):
        fail("AsyncStart expects the op shape to be in the form of ((async-operands), "
             f"async-outputs, state), found {fmt(out)}")
    operands = out.elements[0].elements
    if len(operands) != len(ss) or not all(same_shape(a, b) for a, b in zip(operands, ss,
                                                                             strict=True)):
        fail(f"async-start operands {fmt_list(ss)} do not match its shape's operand part "
             f"{fmt(out.elements[0])}")
    if len(params) != len(ss) or not all(same_shape(p, s) for p, s in zip(params, ss,
                                                                          strict=True)):
        fail(f"async-start operands {fmt_list(ss)} do not match the parameters "
             f"({fmt_list(params)}) of {comp.name}")
    if not same_shape(out.elements[1], root):
        fail(f"async-start output {fmt(out.elements[1])} does not match the result "
             f"{fmt(root)} of {comp.name}")
    return out


def async_update(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                 declared: Shape | None) -> Shape:
    if declared is not None and not same_shape(declared, ss[0]):
        fail("AsyncUpdate expects the op shape to be the same as the operand shape, found "
             f"{fmt(declared)} for operand {fmt(ss[0])}")
    return strip_layout(ss[0])


def async_done(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
               declared: Any) -> Shape:
    start = ss[0]
    if not isinstance(start, TupleShape) or len(start.elements) < 2:
        fail(f"async-done reads an async-start's tuple, found {fmt(start)}")
    return strip_layout(start.elements[1])


# ----- batch norm -------------------------------------------------------------------------


def _batch_norm(op: Opcode, ss: Sequence[Shape], attrs: Mapping[str, Any],
                vectors: Sequence[int]) -> ArrayShape:
    a = expect_array(ss[0], f"{op} operand")
    if not a.dtype.is_float:
        fail(f"{op} needs a floating-point operand, found {fmt(a)}")
    f = attr_int(attrs, "feature_index", str(op))
    if "epsilon" not in attrs:
        fail(f"{op} requires attribute epsilon")
    if not 0 <= f < a.rank:
        fail(f"{op} feature_index {f} out of range for {fmt(a)}")
    for i in vectors:
        v = expect_array(ss[i], f"{op} operand {i}")
        if v.dims != (a.dims[f],) or v.dtype != a.dtype:
            fail(f"{op} operand {i} must be {a.dtype}[{a.dims[f]}] (the feature dimension), "
                 f"found {fmt(v)}")
    return strip_layout(a)  # type: ignore[return-value]


def batch_norm_training(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                        declared: Any) -> Shape:
    a = _batch_norm(Op.BATCH_NORM_TRAINING, ss, attrs, (1, 2))
    vec = ArrayShape(a.dtype, (a.dims[attrs["feature_index"]],))
    return TupleShape((a, vec, vec))


def batch_norm_inference(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                         declared: Any) -> Shape:
    return _batch_norm(Op.BATCH_NORM_INFERENCE, ss, attrs, (1, 2, 3, 4))


def batch_norm_grad(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                    declared: Any) -> Shape:
    a = _batch_norm(Op.BATCH_NORM_GRAD, ss, attrs, (1, 2, 3))
    if not same_shape(ss[4], a):
        fail(f"batch-norm-grad output gradient {fmt(ss[4])} must have the operand's shape "
             f"{fmt(a)}")
    vec = ArrayShape(a.dtype, (a.dims[attrs["feature_index"]],))
    return TupleShape((a, vec, vec))


# ----- dynamic sizes, domain ----------------------------------------------------------------


def get_dimension_size(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                       declared: Any) -> Shape:
    a = expect_array(ss[0], "get-dimension-size operand")
    d = attr_ints(attrs, "dimensions", "get-dimension-size")
    if len(d) != 1 or not 0 <= d[0] < a.rank:
        fail(f"get-dimension-size needs one dimension of {fmt(a)}, found {list(d)}")
    return ArrayShape(S32, ())


def set_dimension_size(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                       declared: Any) -> Shape:
    a = expect_array(ss[0], "set-dimension-size operand")
    size = expect_scalar(ss[1], "set-dimension-size size")
    d = attr_ints(attrs, "dimensions", "set-dimension-size")
    if len(d) != 1 or not 0 <= d[0] < a.rank or size.dtype != S32:
        fail(f"set-dimension-size needs one dimension of {fmt(a)} and an s32 size, found "
             f"{list(d)} and {fmt(size)}")
    return strip_layout(a)


def same_as_operand(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                    declared: Any) -> Shape:
    return strip_layout(ss[0])


def custom_call(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                declared: Shape | None) -> Shape:
    """The written shape; `operand_layout_constraints` has one shape per operand, each
    compatible with it (XLA's parser checks this)."""
    out = _need(Op.CUSTOM_CALL, declared)
    constraints = attrs.get("operand_layout_constraints")
    if constraints is not None:
        if len(constraints) != len(ss):
            fail(f"custom-call: Expected {len(ss)} operand layout constraints, "
                 f"{len(constraints)} given")
        for i, (c, s) in enumerate(zip(constraints, ss, strict=True)):
            if not same_shape(c, s):
                fail(f"custom-call operand_layout_constraints: operand {i} is not compatible "
                     f"with operand shape: {fmt(c)} vs {fmt(s)}")
    return out


def dynamic_reshape(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                    declared: Shape | None) -> Shape:
    """XLA's dynamic-reshape: the operand, then one integral scalar per result dimension
    (its size at run time); the result keeps the operand's element type and size bound."""
    out = _need(Op.DYNAMIC_RESHAPE, declared)
    if not isinstance(out, ArrayShape):
        fail(f"dynamic-reshape must produce an array, declared {fmt(out)}")
    if not ss:
        fail("dynamic-reshape needs an operand and one size per result dimension")
    operand = expect_array(ss[0], "dynamic-reshape operand")
    if len(ss) != 1 + out.rank:
        fail(f"dynamic-reshape to {fmt(out)} needs {out.rank} dimension size operand(s) after "
             f"the operand, found {len(ss) - 1}")
    for i, s in enumerate(ss[1:]):
        size = expect_scalar(s, f"dynamic-reshape size operand {i + 1}")
        if not size.dtype.is_integral:
            fail(f"dynamic-reshape size operand {i + 1} must be an integer, found {fmt(s)}")
    if out.dtype != operand.dtype:
        fail(f"dynamic-reshape must keep the element type: {fmt(operand)} -> {fmt(out)}")
    return out


def declared_only(op: Opcode) -> Rule:
    def rule(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
             declared: Shape | None) -> Shape:
        return _need(op, declared)
    return rule


RULES: dict[Opcode, Rule] = {
    Op.CUSTOM_CALL: custom_call,
    Op.COMPLEX: complex_,
    Op.STOCHASTIC_CONVERT: stochastic_convert,
    Op.ALL_REDUCE: operands_shape,
    Op.ALL_REDUCE_START: operands_shape,
    Op.ALL_REDUCE_DONE: done_of_start,
    Op.COLLECTIVE_BROADCAST: operands_shape,
    Op.ALL_GATHER: all_gather,
    Op.ALL_GATHER_START: all_gather_start,
    Op.ALL_GATHER_DONE: done_of_start,
    Op.REDUCE_SCATTER: reduce_scatter,
    Op.ALL_TO_ALL: all_to_all,
    Op.RAGGED_ALL_TO_ALL: ragged_all_to_all,
    Op.COLLECTIVE_PERMUTE: collective_permute,
    Op.COLLECTIVE_PERMUTE_START: declared_only(Op.COLLECTIVE_PERMUTE_START),
    Op.COLLECTIVE_PERMUTE_DONE: done_of_start,
    Op.COLLECTIVE_REDUCE: declared_only(Op.COLLECTIVE_REDUCE),
    Op.COPY_START: copy_start,
    Op.COPY_DONE: copy_done,
    Op.ASYNC_START: async_start,
    Op.ASYNC_UPDATE: async_update,
    Op.ASYNC_DONE: async_done,
    Op.BATCH_NORM_TRAINING: batch_norm_training,
    Op.BATCH_NORM_INFERENCE: batch_norm_inference,
    Op.BATCH_NORM_GRAD: batch_norm_grad,
    Op.GET_DIMENSION_SIZE: get_dimension_size,
    Op.SET_DIMENSION_SIZE: set_dimension_size,
    Op.DOMAIN: same_as_operand,
    Op.DYNAMIC_RESHAPE: dynamic_reshape,
    Op.RAGGED_DOT: declared_only(Op.RAGGED_DOT),
    Op.SCALED_DOT: declared_only(Op.SCALED_DOT),
    Op.SHUFFLE: declared_only(Op.SHUFFLE),
}

# Ops whose result shape (or part of it) only the written shape gives.
REQUIRES_DECLARED = frozenset({
    Op.ALL_GATHER, Op.ALL_GATHER_START, Op.REDUCE_SCATTER, Op.COLLECTIVE_PERMUTE_START,
    Op.COLLECTIVE_REDUCE, Op.COPY_START, Op.ASYNC_START, Op.DYNAMIC_RESHAPE, Op.RAGGED_DOT,
    Op.SCALED_DOT, Op.SHUFFLE, Op.STOCHASTIC_CONVERT,
})
