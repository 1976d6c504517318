"""Data-movement index maps: slice, dynamic-slice, dynamic-update-slice (as an expression),
reverse, pad, concatenate, gather, and width-changing bitcast-convert.

Each handler gives the value of its instruction at an output index by reading its operands at
the mapped index (see `emitter.py`). Semantics are the interpreter's: dynamic-slice /
dynamic-update-slice / gather start indices are clamped so the slice fits; pad (negative edges
crop, interior padding), concatenate and dynamic-update-slice read an operand only inside the
branch where its index is in bounds; conditions on loop indices go through `Emitter.lt/ge` so they
fold when a loop range decides them (loops.py splits ranges for that). bitcast-convert between
widths is the row-major byte view (little-endian, as numpy's `view` on this machine).
"""

from __future__ import annotations

from collections.abc import Callable

from hlofuse.backends.cpu import cexpr
from hlofuse.backends.cpu.lower import index as ix
from hlofuse.backends.cpu.lower.emitter import Emitter, LoweringError, dims_of, handles, where
from hlofuse.backends.cpu.lower.index import Index
from hlofuse.backends.cpu.lower.naming import word
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode


def _contiguous_offset(sd: tuple[int, ...], starts: list[str], sizes: tuple[int, ...]
                       ) -> str | None:
    """If the window (starts, sizes) of an array of shape `sd` is one contiguous row-major run,
    the linear offset of its first element (so window linear i -> source linear offset + i)."""
    k = 0
    while k < len(sd) and sizes[k] == 1:
        k += 1
    if any(sizes[d] != sd[d] for d in range(k + 1, len(sd))):
        return None
    st = ix.strides(sd)
    off = "0"
    for d in range(min(k + 1, len(sd))):
        off = ix.add(off, ix.mul(starts[d], st[d]))
    return off


@handles(Opcode.SLICE)
def _slice(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    src = instr.operand(0)
    sd = dims_of(src)
    ranges = instr.attrs["slice"]
    starts = [str(int(s)) for s, _e, _st in ranges]
    if idx.multi is None and all(int(st) == 1 for _s, _e, st in ranges):
        off = _contiguous_offset(sd, starts, idx.dims)
        if off is not None:
            return [em.value(src, ix.of_linear(sd, ix.add(idx.lin(), off)))]
    m = em.multi(idx)
    multi = [ix.add(ix.mul(m[d], int(st)), str(int(s))) for d, (s, _e, st) in enumerate(ranges)]
    return [em.value(src, ix.of_multi(sd, multi))]


@handles(Opcode.DYNAMIC_SLICE)
def _dynamic_slice(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    src = instr.operand(0)
    sd = dims_of(src)
    sizes = idx.dims
    key = ("starts", id(instr))
    starts = em.lookup(key)
    if starts is None:
        with em.at_preamble():
            raw = em.start_indices(instr, 1, len(sd))
            starts = [em.clamp_start(f"{word(instr)}_start{d}", raw[d], sd[d] - sizes[d])
                      for d in range(len(sd))]
            em.remember(key, starts)
    assert isinstance(starts, list)
    if idx.multi is None:
        off = _contiguous_offset(sd, starts, sizes)
        if off is not None:
            return [em.value(src, ix.of_linear(sd, ix.add(idx.lin(), off)))]
    m = em.multi(idx)
    return [em.value(src, ix.of_multi(sd, [ix.add(m[d], starts[d]) for d in range(len(sd))]))]


@handles(Opcode.DYNAMIC_UPDATE_SLICE)
def _dynamic_update_slice(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    base, upd = instr.operand(0), instr.operand(1)
    ud = dims_of(upd)
    starts = dus_starts(em, instr)
    m = em.multi(idx)
    conds = []
    for d, n in enumerate(ud):
        if n == idx.dims[d]:
            continue  # the clamped start is 0: every index is inside
        conds.append(f"{m[d]} >= {starts[d]} && {m[d]} < {ix.add(starts[d], str(n))}")
    inside = " && ".join(f"({c})" for c in conds) if conds else "1"
    return [em.cases(word(instr), em.ctype(instr), [
        (inside, lambda: em.value(upd, ix.of_multi(ud, [ix.sub(m[d], starts[d])
                                                       for d in range(len(ud))]))),
        (None, lambda: em.value(base, idx)),
    ])]


def dus_starts(em: Emitter, instr: Instruction) -> list[str]:
    """Clamped start indices of a dynamic-update-slice (hoisted, computed once)."""
    key = ("starts", id(instr))
    starts = em.lookup(key)
    if starts is None:
        od, ud = dims_of(instr.operand(0)), dims_of(instr.operand(1))
        with em.at_preamble():
            raw = em.start_indices(instr, 2, len(od))
            starts = [em.clamp_start(f"{word(instr)}_start{d}", raw[d], od[d] - ud[d])
                      for d in range(len(od))]
            em.remember(key, starts)
    assert isinstance(starts, list)
    return starts


@handles(Opcode.REVERSE)
def _reverse(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    src = instr.operand(0)
    m = em.multi(idx)
    rev = set(instr.dimensions)
    multi = [ix.sub(str(n - 1), m[d]) if d in rev else m[d] for d, n in enumerate(idx.dims)]
    return [em.value(src, ix.of_multi(dims_of(src), multi))]


@handles(Opcode.PAD)
def _pad(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    src, pad_value = instr.operand(0), instr.operand(1)
    sd = dims_of(src)
    m = em.multi(idx)
    conds: list[str] = []
    multi: list[str] = []
    for d, (lo, hi, interior) in enumerate(instr.attrs["padding"]):
        lo, hi, interior = int(lo), int(hi), int(interior)
        p = ix.sub(m[d], str(lo))
        if lo > 0:
            conds.append(em.ge(m[d], lo))
        if interior:
            conds.append(f"{ix.mod(p, interior + 1)} == 0")
            q = ix.div(p, interior + 1)
            conds.append(f"{q} < {sd[d]}")
            multi.append(q)
        else:
            if hi > 0:  # the index runs up to n + hi - 1
                conds.append(em.lt(m[d], sd[d] + lo))
            multi.append(p)
    if any(n == 0 for n in sd) or "0" in conds:
        return [em.value(pad_value, ix.zero(dims_of(pad_value)))]
    live = [c for c in conds if c != "1"]
    inside = " && ".join(f"({c})" for c in live) if live else "1"
    return [em.cases(word(instr), em.ctype(instr), [
        (inside, lambda: em.value(src, ix.of_multi(sd, multi))),
        (None, lambda: em.value(pad_value, ix.zero(dims_of(pad_value)))),
    ])]


@handles(Opcode.CONCATENATE)
def _concatenate(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    (dim,) = instr.dimensions
    m = em.multi(idx)
    cases: list[tuple[str | None, Callable[[], str]]] = []
    offset = 0
    ops = [o for o in instr.operands if dims_of(o)[dim] > 0]
    for j, o in enumerate(ops):
        od = dims_of(o)
        lo = offset
        offset += od[dim]
        multi = list(m)
        multi[dim] = ix.sub(m[dim], str(lo))

        def fn(o: Instruction = o, od: tuple[int, ...] = od, multi: list[str] = multi) -> str:
            return em.value(o, ix.of_multi(od, multi))

        cond = None if j == len(ops) - 1 else em.lt(m[dim], offset)
        cases.append((cond, fn))
    return [em.cases(word(instr), em.ctype(instr), cases)]


@handles(Opcode.GATHER)
def _gather(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    operand, indices = instr.operand(0), instr.operand(1)
    od, idd = dims_of(operand), dims_of(indices)
    a = instr.attrs
    ints = lambda k: [int(v) for v in a.get(k, ())]  # noqa: E731
    offset_dims, collapsed = ints("offset_dims"), ints("collapsed_slice_dims")
    index_map, obd, sibd = ints("start_index_map"), ints("operand_batching_dims"), ints(
        "start_indices_batching_dims")
    sizes = ints("slice_sizes")
    if "index_vector_dim" not in a or len(sizes) != len(od):
        raise LoweringError(f"{where(instr)}: needs index_vector_dim and one slice size per dim")
    ivd = int(a["index_vector_dim"])
    m = em.multi(idx)
    batch_out = [d for d in range(len(idx.dims)) if d not in offset_dims]
    batch_dims = [d for d in range(len(idd)) if d != ivd]

    def batch_coord(t: int) -> str:
        return m[batch_out[batch_dims.index(t)]]

    starts = ["0"] * len(od)
    for k, d in enumerate(index_map):
        multi = [str(k) if t == ivd else batch_coord(t) for t in range(len(idd))]
        v = em.value(indices, ix.of_multi(idd, multi))
        starts[d] = em.clamp_start(f"{word(instr)}_start{d}", v, od[d] - sizes[d])
    for d, t in zip(obd, sibd, strict=True):
        starts[d] = batch_coord(t)
    window = [d for d in range(len(od)) if d not in collapsed and d not in obd]
    multi = []
    for d in range(len(od)):
        off = m[offset_dims[window.index(d)]] if d in window else "0"
        multi.append(ix.add(starts[d], off))
    return [em.value(operand, ix.of_multi(od, multi))]




def _bits_of(em: Emitter, instr: Instruction, value: str) -> str:
    """The raw storage bits of a compute-type value of `instr`'s element type (uintN_t)."""
    dt = instr.array_shape.dtype
    tmp = em.local(f"{word(instr)}_st", cexpr.ctype(dt), cexpr.store(dt, value))
    raw = em.fresh(f"{word(instr)}_raw")
    em.line(f"uint{dt.bits}_t {raw}; memcpy(&{raw}, &{tmp}, sizeof {raw});")
    return raw


@handles(Opcode.BITCAST_CONVERT)
def _bitcast_convert(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    """Same width: elementwise (cexpr). Different widths, as the interpreter's row-major byte
    view: a narrower result has an extra minor dimension (the pieces of one source element,
    least significant first); a wider one consumes the source's minor dimension."""
    src = instr.operand(0)
    sdt, ddt = src.array_shape.dtype, instr.array_shape.dtype
    if sdt.bits == ddt.bits:
        return [em.elementwise(instr, idx)]
    if sdt.is_pred or ddt.is_pred:
        raise LoweringError(f"{where(instr)}: bitcast-convert to or from pred is not defined")
    m = em.multi(idx)
    sd = dims_of(src)
    if sdt.bits > ddt.bits:
        raw = _bits_of(em, src, em.value(src, ix.of_multi(sd, m[:-1])))
        piece = f"(uint{ddt.bits}_t)({raw} >> ({ix.mul(m[-1], ddt.bits)}))"
    else:
        piece = em.local(f"{word(instr)}_bits", f"uint{ddt.bits}_t", "0", const=False)
        for k in range(ddt.bits // sdt.bits):
            raw = _bits_of(em, src, em.value(src, ix.of_multi(sd, [*m, str(k)])))
            em.line(f"{piece} |= (uint{ddt.bits}_t){raw} << {k * sdt.bits};")
    bits = em.local(f"{word(instr)}_bits", f"uint{ddt.bits}_t", piece)
    st = em.fresh(f"{word(instr)}_st")
    em.line(f"{cexpr.ctype(ddt)} {st}; memcpy(&{st}, &{bits}, sizeof {st});")
    return [em.local(word(instr), cexpr.compute_type(ddt), cexpr.load(ddt, st))]
