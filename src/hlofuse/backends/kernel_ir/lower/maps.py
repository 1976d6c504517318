"""Data-movement index maps: slice, dynamic-slice, dynamic-update-slice (as an expression),
reverse, pad, concatenate, gather, and width-changing bitcast-convert.

Each handler gives the value of its instruction at a result index by reading its operands at the
mapped index. Semantics are the interpreter's: dynamic-slice / dynamic-update-slice / gather start
indices are clamped so the slice fits (`Builder.clamp`, computed once in the preamble when they do
not depend on the loops); pad (negative edges crop, interior padding), concatenate and
dynamic-update-slice read an operand only where its index is in bounds (`Builder.cases`; a
concatenate of many operands bisects on the index).
Conditions on loop indices stay affine comparisons, so the `split` pass cuts loop ranges where
they change and each piece is branch-free. bitcast-convert between widths is the row-major byte
view (little-endian, as numpy's `view`): a narrower result has an extra minor dimension of
pieces, least significant first; a wider one consumes the source's minor dimension.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Affine, Val
from hlofuse.backends.kernel_ir.lower import index as ix
from hlofuse.backends.kernel_ir.lower.builder import (
    EQ,
    S64,
    Builder,
    LoweringError,
    array_shape,
    dims_of,
    handles,
    where,
)
from hlofuse.backends.kernel_ir.lower.index import Index
from hlofuse.ir.dtypes import DTYPES
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode


def _contiguous_offset(sd: tuple[int, ...], starts: list[Affine], sizes: tuple[int, ...]
                       ) -> Affine | None:
    """If the window (starts, sizes) of an array of shape `sd` is one contiguous row-major run,
    the linear offset of its first element (window linear i -> source linear offset + i)."""
    k = 0
    while k < len(sd) and sizes[k] == 1:
        k += 1
    if any(sizes[d] != sd[d] for d in range(k + 1, len(sd))):
        return None
    st = ix.strides(sd)
    off = ir.ZERO
    for d in range(min(k + 1, len(sd))):
        off = off + starts[d] * st[d]
    return off


@handles(Opcode.SLICE)
def _slice(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    src = instr.operand(0)
    sd = dims_of(src)
    ranges = instr.attrs["slice"]
    starts = [ir.affine(int(s)) for s, _e, _st in ranges]
    if idx.multi is None and all(int(st) == 1 for _s, _e, st in ranges):
        off = _contiguous_offset(sd, starts, idx.dims)
        if off is not None:
            return [b.value(src, ix.of_linear(sd, idx.lin() + off))]
    m = idx.coords(b.g)
    multi = [m[d] * int(st) + int(s) for d, (s, _e, st) in enumerate(ranges)]
    return [b.value(src, ix.of_multi(sd, multi))]


def _starts(b: Builder, instr: Instruction, first: int, od: tuple[int, ...],
            sizes: tuple[int, ...]) -> list[Affine]:
    """Clamped start indices (scalar operands, or one rank-1 operand), lowered once in the
    preamble when scalars cannot depend on the loops (`Builder.hoist_scalars`)."""
    key = ("starts", id(instr))
    found = b.lookup(key)
    if isinstance(found, list):
        return found
    with b.at_preamble() if b.hoist_scalars else contextlib.nullcontext():
        ops = instr.operands[first:]
        rank = len(od)
        if len(ops) == 1 and dims_of(ops[0]) == (rank,) and rank != 1:
            vec = ops[0]
            raw = [b.value(vec, ix.of_multi((rank,), (ir.affine(d),))) for d in range(rank)]
        elif len(ops) == rank:
            raw = [b.value(o, ix.zero(dims_of(o))) for o in ops]
        elif len(ops) == 1 and rank == 1:
            raw = [b.value(ops[0], ix.zero(dims_of(ops[0])))]
        else:
            raise LoweringError(f"{where(instr)}: expected {rank} start indices, got {len(ops)}")
        starts = [b.clamp(raw[d], od[d] - sizes[d]) for d in range(rank)]
        b.remember(key, starts)
    return starts


@handles(Opcode.DYNAMIC_SLICE)
def _dynamic_slice(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    src = instr.operand(0)
    sd = dims_of(src)
    starts = _starts(b, instr, 1, sd, idx.dims)
    if idx.multi is None:
        off = _contiguous_offset(sd, starts, idx.dims)
        if off is not None:
            return [b.value(src, ix.of_linear(sd, idx.lin() + off))]
    m = idx.coords(b.g)
    return [b.value(src, ix.of_multi(sd, [m[d] + starts[d] for d in range(len(sd))]))]


def dus_starts(b: Builder, instr: Instruction) -> list[Affine]:
    """Clamped start indices of a dynamic-update-slice."""
    od, ud = dims_of(instr.operand(0)), dims_of(instr.operand(1))
    return _starts(b, instr, 2, od, ud)


@handles(Opcode.DYNAMIC_UPDATE_SLICE)
def _dynamic_update_slice(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    base, upd = instr.operand(0), instr.operand(1)
    ud = dims_of(upd)
    starts = dus_starts(b, instr)
    m = idx.coords(b.g)
    conds = []
    for d, n in enumerate(ud):
        if n == idx.dims[d]:
            continue  # the clamped start is 0: every index is inside
        rel = m[d] - starts[d]
        conds += [b.ge(rel, 0), b.lt(rel, n)]
    inside = b.all_of(conds)
    dtype = array_shape(instr).dtype
    return [b.cases(dtype, [
        (inside, lambda: b.value(upd, ix.of_multi(ud, [m[d] - starts[d]
                                                        for d in range(len(ud))]))),
        (None, lambda: b.value(base, idx)),
    ])]


@handles(Opcode.REVERSE)
def _reverse(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    src = instr.operand(0)
    m = idx.coords(b.g)
    rev = set(instr.dimensions)
    multi = [(ir.affine(n - 1) - m[d]) if d in rev else m[d] for d, n in enumerate(idx.dims)]
    return [b.value(src, ix.of_multi(dims_of(src), multi))]


@handles(Opcode.PAD)
def _pad(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    src, pad_value = instr.operand(0), instr.operand(1)
    sd = dims_of(src)
    m = idx.coords(b.g)
    conds: list[Val] = []
    multi: list[Affine] = []
    for d, (lo, hi, interior) in enumerate(instr.attrs["padding"]):
        lo, hi, interior = int(lo), int(hi), int(interior)
        p = m[d] - lo
        conds.append(b.ge(p, 0))
        if interior:
            q = b.g.idiv(p + (interior + 1) * (1 + abs(lo)), interior + 1) - (1 + abs(lo))
            r = b.g.imod(p + (interior + 1) * (1 + abs(lo)), interior + 1)
            conds.append(b.g.alu(EQ, b.index_val(r), b.g.const(0, S64)))
            conds.append(b.lt(q, sd[d]))
            multi.append(q)
        else:
            conds.append(b.lt(p, sd[d]))
            multi.append(p)
    dtype = array_shape(instr).dtype
    if any(n == 0 for n in sd):
        return [b.value(pad_value, ix.zero(dims_of(pad_value)))]
    inside = b.all_of(conds)
    return [b.cases(dtype, [
        (inside, lambda: b.value(src, ix.of_multi(sd, multi))),
        (None, lambda: b.value(pad_value, ix.zero(dims_of(pad_value)))),
    ])]


# A concatenate of up to this many operands is a chain of cases (the `split` pass, whose budget
# is the same, cuts the loop into branch-free pieces); a longer one bisects, so a 1,024-operand
# concatenate is ten comparisons deep, not a chain of 1,024 nested branches (which took GCC
# over a minute).
LINEAR_CONCATENATE = 16


@handles(Opcode.CONCATENATE)
def _concatenate(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    (dim,) = instr.dimensions
    m = idx.coords(b.g)
    dtype = array_shape(instr).dtype
    ops = [o for o in instr.operands if dims_of(o)[dim] > 0]
    reads: list[Callable[[], Val]] = []
    ends: list[int] = []  # operand j covers [ends[j-1], ends[j]) along `dim`
    offset = 0
    for o in ops:
        od = dims_of(o)
        lo = offset
        offset += od[dim]
        multi = list(m)
        multi[dim] = m[dim] - lo

        def fn(o: Instruction = o, od: tuple[int, ...] = od, multi: list[Affine] = multi) -> Val:
            return b.value(o, ix.of_multi(od, multi))

        reads.append(fn)
        ends.append(offset)
    if len(ops) <= LINEAR_CONCATENATE:
        cases = [(None if j == len(ops) - 1 else b.lt(m[dim], ends[j]), fn)
                 for j, fn in enumerate(reads)]
        return [b.cases(dtype, cases)]

    def tree(lo: int, hi: int) -> Val:  # operands lo..hi-1, by bisection on the coordinate
        if hi - lo == 1:
            return reads[lo]()
        mid = (lo + hi) // 2
        return b.cases(dtype, [(b.lt(m[dim], ends[mid - 1]), lambda: tree(lo, mid)),
                               (None, lambda: tree(mid, hi))])

    return [tree(0, len(ops))]


@handles(Opcode.GATHER)
def _gather(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    operand, indices = instr.operand(0), instr.operand(1)
    od, idd = dims_of(operand), dims_of(indices)
    a = instr.attrs

    def ints(k: str) -> list[int]:
        return [int(v) for v in a.get(k, ())]

    offset_dims, collapsed = ints("offset_dims"), ints("collapsed_slice_dims")
    index_map, obd = ints("start_index_map"), ints("operand_batching_dims")
    sibd = ints("start_indices_batching_dims")
    sizes = ints("slice_sizes")
    if "index_vector_dim" not in a or len(sizes) != len(od):
        raise LoweringError(f"{where(instr)}: needs index_vector_dim and one slice size per dim")
    ivd = int(a["index_vector_dim"])
    m = idx.coords(b.g)
    batch_out = [d for d in range(len(idx.dims)) if d not in offset_dims]
    batch_dims = [d for d in range(len(idd)) if d != ivd]

    def batch_coord(t: int) -> Affine:
        return m[batch_out[batch_dims.index(t)]]

    starts = [ir.ZERO] * len(od)
    for k, d in enumerate(index_map):
        multi = [ir.affine(k) if t == ivd else batch_coord(t) for t in range(len(idd))]
        v = b.value(indices, ix.of_multi(idd, multi))
        starts[d] = b.clamp(v, od[d] - sizes[d])
    for d, t in zip(obd, sibd, strict=True):
        starts[d] = batch_coord(t)
    window = [d for d in range(len(od)) if d not in collapsed and d not in obd]
    multi = []
    for d in range(len(od)):
        off = m[offset_dims[window.index(d)]] if d in window else ir.ZERO
        multi.append(starts[d] + off)
    return [b.value(operand, ix.of_multi(od, multi))]


def _bits(b: Builder, v: Val) -> Val:
    """The raw storage bits of `v` as an unsigned integer of its width."""
    dt = v.dtype
    if dt.kind == "unsigned":
        return v
    return b.g.alu(ir.ScalarOp(Opcode.BITCAST_CONVERT, DTYPES[f"u{dt.bits}"]), v)


@handles(Opcode.BITCAST_CONVERT)
def _bitcast_convert(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    from hlofuse.backends.kernel_ir.lower.elementwise import elementwise

    src = instr.operand(0)
    sdt, ddt = array_shape(src).dtype, array_shape(instr).dtype
    if sdt.bits == ddt.bits:
        return [elementwise(b, instr, idx)]
    if sdt.is_pred or ddt.is_pred:
        raise LoweringError(f"{where(instr)}: bitcast-convert to or from pred is not defined")
    m = idx.coords(b.g)
    sd = dims_of(src)
    uw = DTYPES[f"u{ddt.bits}"]
    g = b.g
    if sdt.bits > ddt.bits:
        raw = _bits(b, b.value(src, ix.of_multi(sd, m[:-1])))
        wide = raw.dtype
        shift = g.alu(ir.ScalarOp(Opcode.CONVERT, wide), b.index_val(m[-1] * ddt.bits))
        shifted = g.alu(ir.ScalarOp(Opcode.SHIFT_RIGHT_LOGICAL, wide), raw, shift)
        piece = g.alu(ir.ScalarOp(Opcode.CONVERT, uw), shifted)
    else:
        piece = g.const(0, uw)
        for k in range(ddt.bits // sdt.bits):
            raw = _bits(b, b.value(src, ix.of_multi(sd, [*m, ir.affine(k)])))
            part = g.alu(ir.ScalarOp(Opcode.CONVERT, uw), raw)
            if k:
                part = g.alu(ir.ScalarOp(Opcode.SHIFT_LEFT, uw), part,
                             g.const(k * sdt.bits, uw))
            piece = g.alu(ir.ScalarOp(Opcode.OR, uw), piece, part)
    if ddt == uw:
        return [piece]
    return [g.alu(ir.ScalarOp(Opcode.BITCAST_CONVERT, ddt), piece)]
