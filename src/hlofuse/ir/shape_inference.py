"""Shape inference for every HLO opcode, following XLA's `ShapeInference` and `ShapeVerifier`.

`infer_shape(opcode, operand_shapes, attrs, called, declared)` returns the result shape an
instruction must have (without layout) or raises `HloVerifyError` saying what was expected and
what was found. It is used twice: by the verifier (which compares the result with the shape an
instruction declares) and by the text parser (for XLA-test short forms such as
`t = tuple(a, b)` or `g = gather(x, i), ...` that write no shape).

Declared shapes. Some results are not derivable from the operands: the element type of
`convert`/`bitcast-convert` (and the preferred element type of `dot`/`convolution`), the
dimensions of `broadcast`/`reshape`/`bitcast`, and the whole shape of `parameter`, `constant`,
`iota`, `custom-call`, `rng`, `rng-bit-generator`, `infeed`, `all-gather`, `fft`, ...
For those, `infer_shape` takes the instruction's written shape as `declared` and uses *only the
underivable part* of it, checking everything else (a reshape's element count, a broadcast's
`dimensions` mapping, a convert's operand dims). Called without `declared`, these ops raise
"... needs its result shape written" (`REQUIRES_DECLARED` lists them); `dot`/`convolution`
then default to the lhs element type. Everything else is inferred from operands and attributes
alone, so `declared` is ignored for it and the verifier's comparison is a real check.

Conditions enforced (beyond the per-op shape arithmetic): operand counts against the opcode
table (variadic ops have their own minimums); no implicit broadcasting for unary/binary
elementwise ops (scalars included), except select's pred and clamp's min/max may be scalars;
element-type rules per op (float-only math, integral bit ops, pred/integral logic, matching
operand types, no mixed precision); required attributes present and in range (dimension lists
in range and unique, compare direction/type, fusion kind, rng distribution/algorithm (rng:
exactly 2 scalar operands, uniform over float/integral/pred, normal over float only), slice
bounds, gte index, permutations). Reductions, windows, dot/convolution, gather/scatter,
sort/map and control flow (with their called-computation signatures) live in
`shape_inference_nd`; this module holds the dispatch table, elementwise, structural and
data-movement rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hlofuse.ir import shape_inference_ext as ext
from hlofuse.ir import shape_inference_nd as nd
from hlofuse.ir._shape_util import (
    attr_int,
    attr_ints,
    callee,
    check_dim_list,
    expect_array,
    expect_arrays,
    expect_integral_scalar,
    expect_scalar,
    fail,
    fmt,
    fmt_list,
    ints_text,
    same_shape,
    signature,
    strip_layout,
)
from hlofuse.ir.dtypes import PRED, U32
from hlofuse.ir.opcodes import (
    COMPARISON_DIRECTIONS,
    COMPARISON_TYPES,
    OPCODES,
    RNG_ALGORITHMS,
    Category,
    Opcode,
)
from hlofuse.ir.shape import ArrayShape, Shape, TokenShape, TupleShape, leaves

if TYPE_CHECKING:
    from hlofuse.ir.computation import Computation

__all__ = ["REQUIRES_DECLARED", "callee", "infer_shape", "signature"]

Op = Opcode

# Ops whose result shape (or a part of it) can only come from the written shape.
REQUIRES_DECLARED = frozenset({
    Op.PARAMETER, Op.CONSTANT, Op.IOTA, Op.CUSTOM_CALL, Op.RNG, Op.RNG_BIT_GENERATOR,
    Op.RNG_GET_AND_UPDATE_STATE, Op.INFEED, Op.ALL_GATHER, Op.FFT, Op.CONVERT, Op.BITCAST_CONVERT,
    Op.BROADCAST, Op.RESHAPE, Op.BITCAST, Op.SEND, Op.SEND_DONE, Op.RECV, Op.RECV_DONE, Op.SCAN,
}) | ext.REQUIRES_DECLARED

# Minimum operand counts of variadic ops (fixed arities come from the opcode table).
_MIN_OPERANDS = {
    Op.CONCATENATE: 1, Op.DYNAMIC_SLICE: 1, Op.REDUCE: 2, Op.REDUCE_WINDOW: 2,
    Op.DYNAMIC_UPDATE_SLICE: 2, Op.SCATTER: 3, Op.SORT: 1, Op.MAP: 1, Op.CONDITIONAL: 1,
    Op.ALL_REDUCE: 1, Op.ALL_GATHER: 1, Op.ALL_REDUCE_START: 1, Op.ALL_TO_ALL: 1,
    Op.ALL_GATHER_START: 1, Op.REDUCE_SCATTER: 1, Op.COLLECTIVE_BROADCAST: 1,
    Op.COLLECTIVE_PERMUTE: 1, Op.COLLECTIVE_PERMUTE_START: 1, Op.ASYNC_UPDATE: 1,
}

_TYPE_RULES = ext.TYPE_RULES

_Rule = Callable[[Sequence[Shape], Mapping[str, Any], Sequence["Computation"], "Shape | None"],
                 Shape]


def infer_shape(
    opcode: Opcode,
    operand_shapes: Sequence[Shape],
    attrs: Mapping[str, Any],
    called: Sequence[Computation] = (),
    declared: Shape | None = None,
) -> Shape:
    """The result shape (no layout) of `opcode` applied to operands of `operand_shapes`.

    `called` lists the called computations in `Instruction.called_computations()` order; it is
    used when `attrs` does not name them. `declared` is the written result shape, consulted only
    for the parts operands cannot determine (see the module docstring). Raises HloVerifyError.
    """
    entry = _DISPATCH.get(opcode)
    if entry is None:
        fail(f"no shape inference for opcode {opcode}")
    lo, hi, rule = entry
    n = len(operand_shapes)
    if n < lo or (hi is not None and n > hi):
        if hi == lo:
            fail(f"{opcode} expects {lo} operand{'s' if lo != 1 else ''}, found {n}")
        fail(f"{opcode} expects at least {lo} operands, found {n}")
    return rule(operand_shapes, attrs, called, declared)


def _need_declared(op: Opcode, declared: Shape | None, what: str = "result shape") -> Shape:
    if declared is None:
        fail(f"{op} needs its {what} written; it cannot be inferred from the operands")
    return declared


def _declared_array(op: Opcode, declared: Shape | None) -> ArrayShape:
    d = _need_declared(op, declared)
    if not isinstance(d, ArrayShape):
        fail(f"{op} result must be an array, found {fmt(d)}")
    return d


# ----- elementwise ------------------------------------------------------------------------


def _unary(op: Opcode, s: Shape, attrs: Mapping[str, Any], declared: Shape | None) -> Shape:
    if op is Op.COPY:
        return strip_layout(s)
    if not isinstance(s, ArrayShape):
        fail(f"operand of {op} must be an array, found {fmt(s)}")
    a = s
    dt = a.dtype
    if op is Op.CONVERT:
        out = _declared_array(op, declared)
        if dt.is_complex and not out.dtype.is_complex:
            fail(f"convert from complex {fmt(a)} to {out.dtype} is not supported (take real or "
                 "imag first)")
        return ArrayShape(out.dtype, a.dims)
    if op is Op.BITCAST_CONVERT:
        return _bitcast_convert(a, _declared_array(op, declared))
    type_rule = _TYPE_RULES.get(op)
    if type_rule is not None and not type_rule[0](dt):
        fail(f"{op} expects a {type_rule[1]} operand, found {fmt(a)}")
    if op is Op.IS_FINITE:
        return ArrayShape(PRED, a.dims)
    if op in (Op.ABS, Op.REAL, Op.IMAG):
        return ArrayShape(dt.component, a.dims)
    if op is Op.REDUCE_PRECISION:
        e = attr_int(attrs, "exponent_bits", str(op))
        m = attr_int(attrs, "mantissa_bits", str(op))
        if e < 1 or m < 0:
            fail(f"reduce-precision needs exponent_bits >= 1 and mantissa_bits >= 0, "
                 f"found {e} and {m}")
    return ArrayShape(dt, a.dims)


def _bitcast_convert(a: ArrayShape, out: ArrayShape) -> ArrayShape:
    if a.dtype.is_complex != out.dtype.is_complex:
        fail(f"bitcast-convert between complex and real types: {fmt(a)} to {out.dtype}")
    ib, ob = a.dtype.bits, out.dtype.bits
    if max(ib, ob) % min(ib, ob):
        fail(f"bitcast-convert between types of undivisible widths: {a.dtype} to {out.dtype}")
    if ib == ob:
        return ArrayShape(out.dtype, a.dims)
    if ib > ob:  # wider -> narrower: a new minor dimension of ib/ob
        return ArrayShape(out.dtype, (*a.dims, ib // ob))
    # narrower -> wider: the minor dimension of ob/ib is consumed
    if not a.dims or a.dims[-1] != ob // ib:
        fail(f"bitcast-convert from {fmt(a)} to {out.dtype} needs a minor dimension of "
             f"{ob // ib}, found {fmt(a)}")
    return ArrayShape(out.dtype, a.dims[:-1])


def _binary(op: Opcode, s0: Shape, s1: Shape, attrs: Mapping[str, Any]) -> Shape:
    if not isinstance(s0, ArrayShape) or not isinstance(s1, ArrayShape):
        fail(f"{op} operands must be arrays, found {fmt(s0)} and {fmt(s1)}")
    a, b = s0, s1
    if a.dims != b.dims:
        fail(f"{op} operands must have the same dimensions: {fmt(a)} vs {fmt(b)}")
    if a.dtype != b.dtype:
        fail(f"{op} operands must have the same element type: {fmt(a)} vs {fmt(b)}")
    dt = a.dtype
    if op is Op.COMPARE:
        _check_compare_attrs(a, attrs)
        return ArrayShape(PRED, a.dims)
    type_rule = _TYPE_RULES.get(op)
    if type_rule is not None and not type_rule[0](dt):
        fail(f"{op} expects {type_rule[1]} operands, found {fmt(a)}")
    return ArrayShape(dt, a.dims)


def _check_compare_attrs(a: ArrayShape, attrs: Mapping[str, Any]) -> None:
    direction = attrs.get("direction")
    if direction is None:
        fail("compare requires attribute direction")
    if direction not in COMPARISON_DIRECTIONS:
        fail(f"compare direction must be one of {', '.join(COMPARISON_DIRECTIONS)}, "
             f"found {direction!r}")
    ctype = attrs.get("type")
    if ctype is None:
        return
    if ctype not in COMPARISON_TYPES:
        fail(f"compare type must be one of {', '.join(COMPARISON_TYPES)}, found {ctype!r}")
    dt = a.dtype
    allowed = (("FLOAT", "TOTALORDER") if dt.is_float else ("SIGNED",) if dt.is_signed
               else ("UNSIGNED",))
    if ctype not in allowed:
        fail(f"compare type {ctype} does not fit operands {fmt(a)}; expected "
             f"{' or '.join(allowed)}")


def _select(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any, declared: Any) -> Shape:
    pred = expect_array(ss[0], "select pred")
    on_true, on_false = ss[1], ss[2]
    if not same_shape(on_true, on_false):
        fail(f"select branches must have the same shape: {fmt(on_true)} vs {fmt(on_false)}")
    if pred.dtype != PRED:
        fail(f"select pred must have element type pred, found {fmt(pred)}")
    t = expect_array(on_true, "select on-true operand")
    if pred.dims and pred.dims != t.dims:
        fail(f"select pred must be a scalar or have the branches' dimensions: "
             f"{fmt(pred)} vs {fmt(t)}")
    return strip_layout(t)


def _clamp(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any, declared: Any) -> Shape:
    lo = expect_array(ss[0], "clamp min")
    x = expect_array(ss[1], "clamp operand")
    hi = expect_array(ss[2], "clamp max")
    if not (lo.dtype == x.dtype == hi.dtype):
        fail(f"clamp operands must have the same element type: {fmt_list(ss)}")
    for bound, name in ((lo, "min"), (hi, "max")):
        if bound.dims and bound.dims != x.dims:
            fail(f"clamp {name} must be a scalar or have the operand's dimensions: "
                 f"{fmt(bound)} vs {fmt(x)}")
    return ArrayShape(x.dtype, x.dims)


# ----- structural -------------------------------------------------------------------------


def _declared_only(op: Opcode) -> _Rule:
    def rule(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
             declared: Shape | None) -> Shape:
        return strip_layout(_need_declared(op, declared))
    return rule


def _parameter(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
               declared: Any) -> Shape:
    shape = _need_declared(Op.PARAMETER, declared)
    replication = attrs.get("parameter_replication")
    if replication is not None:
        entries = [e for e in str(replication).strip("{} ").split(",") if e.strip()]
        if len(entries) != len(leaves(shape)) or any(
                e.strip() not in ("true", "false") for e in entries):
            fail(f"parameter has {len(leaves(shape))} leaf buffers, but parameter_replication "
                 f"has {len(entries)} elements (each true or false)")
    return strip_layout(shape)


def _tuple(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any, declared: Any) -> Shape:
    return TupleShape(tuple(strip_layout(s) for s in ss))


def _gte(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any, declared: Any) -> Shape:
    t = ss[0]
    if not isinstance(t, TupleShape):
        fail(f"get-tuple-element operand must be a tuple, found {fmt(t)}")
    index = attr_int(attrs, "index", "get-tuple-element")
    if not 0 <= index < len(t.elements):
        fail(f"get-tuple-element index {index} out of range for {fmt(t)} "
             f"({len(t.elements)} elements)")
    return strip_layout(t.elements[index])


def _after_all(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
               declared: Any) -> Shape:
    # Operands only order things (XLA accepts any: `after-all(f32[] p, token[] t)`).
    return TokenShape()


def _add_dependency(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
                    declared: Any) -> Shape:
    if not isinstance(ss[1], TokenShape):
        fail(f"add-dependency operand 1 must be a token, found {fmt(ss[1])}")
    return strip_layout(ss[0])


def _same_as_operand(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
                     declared: Any) -> Shape:
    return strip_layout(ss[0])


def _u32_scalar(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
                declared: Any) -> Shape:
    return ArrayShape(U32, ())


def _iota(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any, declared: Any) -> Shape:
    out = _declared_array(Op.IOTA, declared)
    if not out.dims:
        fail(f"iota does not support scalars, found {fmt(out)}")
    d = attr_int(attrs, "iota_dimension", "iota")
    if not 0 <= d < out.rank:
        fail(f"iota_dimension {d} out of range for {fmt(out)}")
    return strip_layout(out)


def _rng(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any, declared: Any) -> Shape:
    if len(ss) != 2:
        fail(f"rng expects 2 operands, found {len(ss)}")
    a = expect_scalar(ss[0], "rng operand 0")
    b = expect_scalar(ss[1], "rng operand 1")
    if a.dtype != b.dtype:
        fail(f"rng operands must have the same element type: {fmt(a)} vs {fmt(b)}")
    dist = attrs.get("distribution")
    if dist not in ("rng_uniform", "rng_normal"):
        fail(f"rng distribution must be rng_uniform or rng_normal, found {dist!r}")
    # XLA's ShapeVerifier::HandleRng: uniform draws floats, integers or preds; normal floats.
    if dist == "rng_normal" and not a.dtype.is_float:
        fail(f"rng_normal needs a floating-point element type, found {fmt(a)}")
    if not (a.dtype.is_float or a.dtype.is_integral or a.dtype.is_pred):
        fail(f"rng_uniform needs a floating-point, integral or pred element type, "
             f"found {fmt(a)}")
    out = _declared_array(Op.RNG, declared)
    return ArrayShape(a.dtype, out.dims)


def _rng_bit_generator(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
                       declared: Any) -> Shape:
    state = expect_array(ss[0], "rng-bit-generator state")
    algorithm = attrs.get("algorithm", "rng_default")
    if algorithm not in RNG_ALGORITHMS:
        fail(f"rng-bit-generator algorithm must be one of {', '.join(RNG_ALGORITHMS)}, "
             f"found {algorithm!r}")
    out = _need_declared(Op.RNG_BIT_GENERATOR, declared)
    if not isinstance(out, TupleShape) or len(out.elements) != 2:
        fail(f"rng-bit-generator result must be a (state, values) tuple, found {fmt(out)}")
    values = expect_array(out.elements[1], "rng-bit-generator values")
    return TupleShape((strip_layout(state), strip_layout(values)))


# ----- data movement ----------------------------------------------------------------------


def _broadcast(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
               declared: Any) -> Shape:
    a = expect_array(ss[0], "broadcast operand")
    out = _declared_array(Op.BROADCAST, declared)
    # A scalar operand needs no dimensions={} (XLA's parser fills it in).
    dims = attr_ints(attrs, "dimensions", "broadcast", () if a.rank == 0 else ext.MISSING)
    if len(dims) != a.rank:
        fail(f"broadcast dimensions={ints_text(dims)} must list one output dimension per "
             f"operand dimension: operand {fmt(a)} has rank {a.rank}")
    check_dim_list(dims, out.rank, "broadcast", "dimensions")
    for i, d in enumerate(dims):
        if a.dims[i] != out.dims[d]:
            fail(f"broadcast operand dimension {i} (size {a.dims[i]}) maps to output "
                 f"dimension {d} (size {out.dims[d]}): {fmt(a)} -> {fmt(out)}")
    return ArrayShape(a.dtype, out.dims)


def _reshape(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
             declared: Any) -> Shape:
    a = expect_array(ss[0], "reshape operand")
    out = _declared_array(Op.RESHAPE, declared)
    if a.size != out.size:
        fail(f"reshape must keep the element count: {fmt(a)} ({a.size} elements) vs "
             f"{fmt(out)} ({out.size} elements)")
    return ArrayShape(a.dtype, out.dims)


def _bitcast(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
             declared: Any) -> Shape:
    # XLA checks bitcast byte sizes only in layout-sensitive verification; so do we not.
    return strip_layout(_declared_array(Op.BITCAST, declared))


def _transpose(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
               declared: Any) -> Shape:
    a = expect_array(ss[0], "transpose operand")
    perm = attr_ints(attrs, "dimensions", "transpose")
    if sorted(perm) != list(range(a.rank)):
        fail(f"transpose dimensions={ints_text(perm)} is not a permutation of the operand's "
             f"{a.rank} dimensions ({fmt(a)})")
    return ArrayShape(a.dtype, tuple(a.dims[p] for p in perm))


def _slice(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any, declared: Any) -> Shape:
    a = expect_array(ss[0], "slice operand")
    ranges = attrs.get("slice")
    if ranges is None:
        fail("slice requires attribute slice")
    if len(ranges) != a.rank:
        fail(f"slice has {len(ranges)} ranges for operand {fmt(a)} of rank {a.rank}")
    out = []
    for i, (start, limit, stride) in enumerate(ranges):
        if stride < 1:
            fail(f"slice stride must be positive, found {stride} in dimension {i}")
        if not 0 <= start <= limit <= a.dims[i]:
            fail(f"slice [{start}:{limit}] out of bounds in dimension {i} of {fmt(a)}")
        out.append((limit - start + stride - 1) // stride)
    return ArrayShape(a.dtype, tuple(out))


def _index_operands(op: Opcode, idx: Sequence[Shape], rank: int) -> None:
    if len(idx) == 1 and rank != 1 and isinstance(idx[0], ArrayShape) and idx[0].rank == 1:
        # The old single-vector form of the start indices.
        v = idx[0]
        if not v.dtype.is_integral or v.dims[0] != rank:
            fail(f"{op} start index vector must be integral with {rank} elements, "
                 f"found {fmt(v)}")
        return
    if len(idx) != rank:
        fail(f"{op} needs one start index per operand dimension: {rank} expected, "
             f"found {len(idx)}")
    first = None
    for i, s in enumerate(idx):
        sc = expect_integral_scalar(s, f"{op} start index {i}")
        if first is None:
            first = sc.dtype
        elif sc.dtype != first:
            fail(f"{op} start indices must share one element type: {first} vs {sc.dtype}")


def _dynamic_slice(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
                   declared: Any) -> Shape:
    a = expect_array(ss[0], "dynamic-slice operand")
    _index_operands(Op.DYNAMIC_SLICE, ss[1:], a.rank)
    sizes = attr_ints(attrs, "dynamic_slice_sizes", "dynamic-slice")
    if len(sizes) != a.rank:
        fail(f"dynamic-slice dynamic_slice_sizes={ints_text(sizes)} must have one size per "
             f"dimension of {fmt(a)}")
    for i, size in enumerate(sizes):
        if not 0 <= size <= a.dims[i]:
            fail(f"dynamic-slice size {size} out of bounds in dimension {i} of {fmt(a)}")
    return ArrayShape(a.dtype, tuple(sizes))


def _dynamic_update_slice(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
                          declared: Any) -> Shape:
    a = expect_array(ss[0], "dynamic-update-slice operand")
    u = expect_array(ss[1], "dynamic-update-slice update")
    if u.rank != a.rank:
        fail(f"dynamic-update-slice update must have the operand's rank: {fmt(u)} vs {fmt(a)}")
    if u.dtype != a.dtype:
        fail(f"dynamic-update-slice update must have the operand's element type: "
             f"{fmt(u)} vs {fmt(a)}")
    for i, (ud, od) in enumerate(zip(u.dims, a.dims, strict=True)):
        if ud > od:
            fail(f"dynamic-update-slice update {fmt(u)} is larger than operand {fmt(a)} in "
                 f"dimension {i}")
    _index_operands(Op.DYNAMIC_UPDATE_SLICE, ss[2:], a.rank)
    return ArrayShape(a.dtype, a.dims)


def _concatenate(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
                 declared: Any) -> Shape:
    arrays = expect_arrays(ss, "concatenate operand")
    first = arrays[0]
    dims = attr_ints(attrs, "dimensions", "concatenate")
    if len(dims) != 1:
        fail(f"concatenate needs exactly one dimension, found dimensions={ints_text(dims)}")
    d = dims[0]
    if not 0 <= d < first.rank:
        fail(f"concatenate dimension {d} out of range for {fmt(first)}")
    total = 0
    for a in arrays:
        if a.rank != first.rank:
            fail(f"concatenate operands must have the same rank: {fmt(first)} vs {fmt(a)}")
        if a.dtype != first.dtype:
            fail(f"concatenate operands must have the same element type: "
                 f"{fmt(first)} vs {fmt(a)}")
        for i in range(a.rank):
            if i != d and a.dims[i] != first.dims[i]:
                fail(f"concatenate operands may differ only in dimension {d}: "
                     f"{fmt(first)} vs {fmt(a)}")
        total += a.dims[d]
    out = list(first.dims)
    out[d] = total
    return ArrayShape(first.dtype, tuple(out))


def _pad(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any, declared: Any) -> Shape:
    a = expect_array(ss[0], "pad operand")
    v = expect_scalar(ss[1], "pad value")
    if v.dtype != a.dtype:
        fail(f"pad value must have the operand's element type: {fmt(v)} vs {fmt(a)}")
    padding = attrs.get("padding")
    if padding is None:
        fail("pad requires attribute padding")
    if len(padding) != a.rank:
        fail(f"pad has {len(padding)} padding entries for operand {fmt(a)} of rank {a.rank}")
    out = []
    for i, ((lo, hi, interior), d) in enumerate(zip(padding, a.dims, strict=True)):
        if interior < 0:
            fail(f"pad interior padding must be non-negative, found {interior} in dimension {i}")
        size = lo + hi + d + max(d - 1, 0) * interior
        if size < 0:
            fail(f"pad makes dimension {i} of {fmt(a)} negative ({size})")
        out.append(size)
    return ArrayShape(a.dtype, tuple(out))


def _reverse(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
             declared: Any) -> Shape:
    a = expect_array(ss[0], "reverse operand")
    check_dim_list(attr_ints(attrs, "dimensions", "reverse"), a.rank, "reverse", "dimensions")
    return ArrayShape(a.dtype, a.dims)


def _recv(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any, declared: Any) -> Shape:
    """recv's shape is XLA's (data, u32[] context, token[]) tuple; the operand a token."""
    if len(ss) != 1 or not isinstance(ss[0], TokenShape):
        fail(f"recv takes one token operand, found ({fmt_list(ss)})")
    if not (isinstance(declared, TupleShape) and len(declared.elements) == 3
            and isinstance(declared.elements[2], TokenShape)):
        fail(f"recv must produce a (data, u32[], token[]) tuple, declared {fmt(declared)}")
    return declared


_RULES: dict[Opcode, _Rule] = {
    Op.SELECT: _select,
    Op.CLAMP: _clamp,
    Op.PARAMETER: _parameter,
    Op.CONSTANT: _declared_only(Op.CONSTANT),
    Op.RNG_GET_AND_UPDATE_STATE: _declared_only(Op.RNG_GET_AND_UPDATE_STATE),
    Op.FFT: _declared_only(Op.FFT),
    # Send/recv shapes changed across XLA versions (old tests declare send as the data shape).
    Op.SEND: _declared_only(Op.SEND),
    Op.SEND_DONE: _declared_only(Op.SEND_DONE),
    Op.RECV: _recv,
    Op.RECV_DONE: _declared_only(Op.RECV_DONE),
    Op.SCAN: _declared_only(Op.SCAN),
    Op.TUPLE: _tuple,
    Op.GET_TUPLE_ELEMENT: _gte,
    Op.AFTER_ALL: _after_all,
    Op.ADD_DEPENDENCY: _add_dependency,
    Op.OPTIMIZATION_BARRIER: _same_as_operand,
    Op.PARTITION_ID: _u32_scalar,
    Op.REPLICA_ID: _u32_scalar,
    Op.IOTA: _iota,
    Op.RNG: _rng,
    Op.RNG_BIT_GENERATOR: _rng_bit_generator,
    Op.BROADCAST: _broadcast,
    Op.RESHAPE: _reshape,
    Op.BITCAST: _bitcast,
    Op.TRANSPOSE: _transpose,
    Op.SLICE: _slice,
    Op.DYNAMIC_SLICE: _dynamic_slice,
    Op.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice,
    Op.CONCATENATE: _concatenate,
    Op.PAD: _pad,
    Op.REVERSE: _reverse,
    Op.WHILE: nd.while_,
    Op.CONDITIONAL: nd.conditional,
    Op.CALL: nd.call,
    Op.FUSION: nd.fusion,
    Op.INFEED: nd.infeed,
    Op.OUTFEED: nd.outfeed,
    Op.REDUCE: nd.reduce,
    Op.REDUCE_WINDOW: nd.reduce_window,
    Op.SELECT_AND_SCATTER: nd.select_and_scatter,
    Op.DOT: nd.dot,
    Op.CONVOLUTION: nd.convolution,
    Op.GATHER: nd.gather,
    Op.SCATTER: nd.scatter,
    Op.SORT: nd.sort,
    Op.TOPK: nd.topk,
    Op.MAP: nd.map_,
    Op.CHOLESKY: nd.cholesky,
    Op.TRIANGULAR_SOLVE: nd.triangular_solve,
    **ext.RULES,
}


def _unary_rule(op: Opcode) -> _Rule:
    def rule(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
             declared: Shape | None) -> Shape:
        return _unary(op, ss[0], attrs, declared)
    return rule


def _binary_rule(op: Opcode) -> _Rule:
    def rule(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
             declared: Shape | None) -> Shape:
        return _binary(op, ss[0], ss[1], attrs)
    return rule


def _build_dispatch() -> dict[Opcode, tuple[int, int | None, _Rule]]:
    table: dict[Opcode, tuple[int, int | None, _Rule]] = {}
    for op, info in OPCODES.items():
        if op in _RULES:
            rule = _RULES[op]
        elif info.category is Category.ELEMENTWISE and info.arity == 1:
            rule = _unary_rule(op)
        elif info.category is Category.ELEMENTWISE and info.arity == 2:
            rule = _binary_rule(op)
        else:
            continue
        if info.arity is None:
            table[op] = (_MIN_OPERANDS.get(op, 0), None, rule)
        else:
            table[op] = (info.arity, info.arity, rule)
    return table


_DISPATCH = _build_dispatch()
