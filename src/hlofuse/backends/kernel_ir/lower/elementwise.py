"""Elementwise ops and the shape-only index maps: parameter, constant, iota, broadcast, reshape,
bitcast, transpose, tuple, get-tuple-element, map.

An elementwise instruction becomes one `alu` value of its `ScalarOp` (the opcode, the result type
and the attributes that change the meaning: comparison direction and type, reduce-precision
bits); `copy` is its operand. Constants with one element are `const` values; larger ones are
`const` buffers read by index. Two ops lower to other values (`alu_of`): a reduce-precision XLA
leaves unchanged is its operand (`xla_facts.py`), and a bf16 == / != a constant
zero tests the bits, as XLA's CPU does (LLVM folds the compare of the extended bf16 into a bit
test, so a subnormal is nonzero there, under DAZ; interpreter/flush.py `rule`).
Broadcast/reshape/transpose map the result index to the operand index (reshape passes the
linear index through, so it costs nothing).
"""

from __future__ import annotations

import math

import numpy as np

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Buffer, Val
from hlofuse.backends.kernel_ir.lower import index as ix
from hlofuse.backends.kernel_ir.lower.builder import (
    Builder,
    LoweringError,
    array_shape,
    dims_of,
    handles,
    where,
)
from hlofuse.backends.kernel_ir.lower.index import Index
from hlofuse.backends.xla_facts import reduce_precision_is_identity
from hlofuse.ir.dtypes import PRED, U16
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape, leaf_start, leaves

_MEANINGFUL_ATTRS = ("direction", "type", "exponent_bits", "mantissa_bits")


def scalar_op(instr: Instruction) -> ir.ScalarOp:
    """The `ScalarOp` of an elementwise instruction."""
    attrs = []
    for key in _MEANINGFUL_ATTRS:
        if key in instr.attrs:
            value = instr.attrs[key]
            attrs.append((key, value if isinstance(value, int | str) else str(value)))
    return ir.ScalarOp(instr.opcode, array_shape(instr).dtype, tuple(attrs))


def alu_of(g: ir.Graph, instr: Instruction, args: list[Val]) -> Val:
    """The value of elementwise `instr` on `args`: one `alu`, or, for a bf16 compared equal
    or unequal to a constant zero, the bit test of the module docstring."""
    op = scalar_op(instr)
    if instr.opcode is Opcode.REDUCE_PRECISION and reduce_precision_is_identity(
            args[0].dtype, int(instr.attrs.get("exponent_bits", -1)),
            int(instr.attrs.get("mantissa_bits", -1))):
        return args[0]  # XLA's CPU leaves it unchanged (xla_facts.py)
    if instr.opcode is not Opcode.COMPARE or args[0].dtype.name != "bf16":
        return g.alu(op, *args)
    zero = [a.op == "const" and float(ir.const_value(a)) == 0.0 for a in args]
    if any(zero) and op.attr("direction") in ("EQ", "NE") and op.attr("type") != "TOTALORDER":
        x = args[1] if zero[0] else args[0]
        bits = g.alu(ir.ScalarOp(Opcode.BITCAST_CONVERT, U16), x)
        magnitude = g.alu(ir.ScalarOp(Opcode.AND, U16), bits, g.const(0x7FFF, U16))
        return g.alu(ir.ScalarOp(Opcode.COMPARE, PRED, (("direction", op.attr("direction")),
                                                        ("type", "UNSIGNED"))),
                     magnitude, g.const(0, U16))
    return g.alu(op, *args)


def elementwise(b: Builder, instr: Instruction, idx: Index) -> Val:
    args = []
    for o in instr.operands:
        od = dims_of(o)
        args.append(b.value(o, idx if od == idx.dims else ix.zero(od)))
    if instr.opcode is Opcode.COPY:
        return args[0]
    return alu_of(b.g, instr, args)


@handles(Opcode.PARAMETER)
def _parameter(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    raise LoweringError(f"{where(instr)}: parameter is not bound to a kernel input")


def constant_buffer(b: Builder, instr: Instruction) -> Buffer:
    """The file-scope table holding a constant's elements (one per kernel and constant)."""
    key = ("const", id(instr))
    found = b.scopes[0].get(key)  # kernel-wide, whatever block asks
    if isinstance(found, Buffer):
        return found
    shape = array_shape(instr)
    if instr.literal is None:
        raise LoweringError(f"{where(instr)}: constant without a value")
    arr = np.asarray(instr.literal, dtype=shape.dtype.np).reshape(shape.dims)
    buf = Buffer(b.fresh("c"), shape.dtype, max(1, arr.size), "const", data=arr)
    b.consts.append(buf)
    b.scopes[0][key] = buf
    return buf


@handles(Opcode.CONSTANT)
def _constant(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    shape = array_shape(instr)
    if instr.literal is None:
        raise LoweringError(f"{where(instr)}: constant without a value")
    if shape.size == 1:
        arr = np.asarray(instr.literal, dtype=shape.dtype.np).reshape(())
        return [b.g.const(arr[()], shape.dtype)]
    return [b.load(constant_buffer(b, instr), idx)]


@handles(Opcode.IOTA)
def _iota(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    shape = array_shape(instr)
    if shape.rank == 0:
        return [b.g.const(0, shape.dtype)]
    d = int(instr.attrs.get("iota_dimension", 0))
    coord = idx.coords(b.g)[d]
    if coord.is_const:
        return [b.g.const(coord.const, shape.dtype)]
    v = b.index_val(coord)
    return [v if shape.dtype.name == "s64" else
            b.g.alu(ir.ScalarOp(Opcode.CONVERT, shape.dtype), v)]


@handles(Opcode.BROADCAST)
def _broadcast(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    src = instr.operand(0)
    sd = dims_of(src)
    if math.prod(sd) == 1:
        return [b.value(src, ix.zero(sd))]
    dims = instr.dimensions
    out = idx.dims
    # a broadcast of a contiguous run of dimensions from the linear index: one division
    if idx.multi is None and list(dims) == list(range(dims[0], dims[-1] + 1)):
        assert idx.linear is not None
        inner = math.prod(out[dims[-1] + 1:])
        lin = b.g.idiv(idx.linear, inner)
        if dims[0] > 0:
            lin = b.g.imod(lin, math.prod(out[dims[0]:dims[-1] + 1]))
        return [b.value(src, ix.of_linear(sd, lin))]
    m = idx.coords(b.g)
    return [b.value(src, ix.of_multi(sd, [m[d] for d in dims]))]


@handles(Opcode.RESHAPE, Opcode.BITCAST)
def _reshape(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    src = instr.operand(0)
    if instr.opcode is Opcode.BITCAST and array_shape(src).dtype != array_shape(instr).dtype:
        raise LoweringError(f"{where(instr)}: a bitcast that changes the element type")
    sd = dims_of(src)
    if sd == idx.dims:
        return [b.value(src, idx)]
    return [b.value(src, ix.of_linear(sd, idx.lin()))]


@handles(Opcode.TRANSPOSE)
def _transpose(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    src = instr.operand(0)
    perm = instr.dimensions
    m = idx.coords(b.g)
    multi: list[ir.Affine] = [ir.ZERO] * len(perm)
    for k, p in enumerate(perm):
        multi[p] = m[k]
    return [b.value(src, ix.of_multi(dims_of(src), multi))]


@handles(Opcode.TUPLE)
def _tuple(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    out: list[Val] = []
    for o in instr.operands:
        out += b.values(o, idx)
    return out


@handles(Opcode.GET_TUPLE_ELEMENT)
def _gte(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    src = instr.operand(0)
    k = int(instr.attrs["index"])
    shape = src.shape
    assert isinstance(shape, TupleShape)
    first = leaf_start(shape, k)
    count = len(leaves(shape.elements[k]))
    if id(src) in b.params:
        bufs = b.params[id(src)][first:first + count]
        if count != 1:
            raise LoweringError(f"{where(instr)}: nested tuple inputs are not supported")
        return [b.load(bufs[0], idx)]
    if len({tuple(e.dims) for e in shape.elements if isinstance(e, ArrayShape)}) > 1:
        # leaves of different shapes (a multi-output fusion's gather beside a map): only
        # element k has a value at this index
        elem = _element(b, src, k)
        if elem is not None:
            return b.values(elem, idx)
    return b.values(src, idx)[first:first + count]


def _element(b: Builder, src: Instruction, k: int) -> Instruction | None:
    """The instruction computing element `k` of tuple-shaped `src` (a tuple, or a fusion
    rooted at one, its parameters aliased to the fusion's operands), or None."""
    while src.opcode is Opcode.FUSION and id(src) not in b.params:
        comp = src.fused_computation
        for param in comp.parameters:
            b.alias[id(param)] = src.operand(param.parameter_number or 0)
        src = comp.root
    return src.operand(k) if src.opcode is Opcode.TUPLE else None


@handles(Opcode.FUSION)
def _fusion(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    """A fusion inside the computation being lowered (a whole loop's body): its fused
    computation, with its parameters standing for the operands."""
    comp = instr.fused_computation
    for param in comp.parameters:
        b.alias[id(param)] = instr.operand(param.parameter_number or 0)
    return b.values(comp.root, idx)


@handles(Opcode.MAP)
def _map(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    from hlofuse.backends.kernel_ir.lower import scalar

    comp = instr.attrs["to_apply"]
    args = [b.value(o, idx) for o in instr.operands]
    (out,) = scalar.inline(b.g, comp, args)
    return [out]


# the data-movement maps and reductions register themselves in HANDLERS
from hlofuse.backends.kernel_ir.lower import maps, reduce, scatter  # noqa: E402, F401
