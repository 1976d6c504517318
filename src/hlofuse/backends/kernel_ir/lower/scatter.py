"""scatter with XLA's semantics as the interpreter defines them (`interpreter/indexing.py`).

    out = operand                      (Copy when updating in place, else computed)
    for each scatter index b (update dims not in update_window_dims, row-major):
        start = operand position from the index vector (scatter_dims_to_operand_dims) and the
                batch coordinates (input_batching_dims <- scatter_indices_batching_dims)
        if the whole window [start, start + window) lies inside the operand:   (else skipped)
            for each window element w:  out[start + w] = to_apply(out[...], update[b, w])

Updates apply one after another in (b, w) order, so repeated indices combine in update order (the
interpreter's order); `indices_are_sorted` / `unique_indices` are ignored. The combiner is the
`to_apply` computation inlined; variadic scatters update every operand together.

Inside a whole loop (`whole_loop.py`) a scatter is a value computed at a result position, per
batch element, when it writes a few points per position (`analysis/scatter.select_form`; the
batch analysis refuses the loop otherwise): the operand's value there, then for each point in
update order a select of `to_apply(out, update)` where the position lies in the point's
in-bounds window (`value_at`).
"""

from __future__ import annotations

import itertools

from hlofuse.analysis.scatter import ScatterForm, form
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Affine, Buffer, Val
from hlofuse.backends.kernel_ir.lower import index as ix
from hlofuse.backends.kernel_ir.lower import scalar
from hlofuse.backends.kernel_ir.lower.builder import (
    CVT64,
    EQ,
    GE,
    LT,
    S64,
    Builder,
    LoweringError,
    handles,
    where,
)
from hlofuse.ir.dtypes import PRED
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode

LE = ir.ScalarOp(Opcode.COMPARE, PRED, (("direction", "LE"),))
SUB64 = ir.ScalarOp(Opcode.SUBTRACT, S64)


def emit(b: Builder, instr: Instruction, outs: list[Buffer], inplace: dict[int, Buffer] | None
         ) -> None:
    """Compute scatter `instr` into `outs` (one buffer per operand); `inplace` maps operand k to
    the input buffer holding it (then out k is that memory or a copy of it)."""
    from hlofuse.backends.kernel_ir.lower.roots import nest

    inplace = inplace or {}
    f = form(instr)
    if isinstance(f, str):
        raise LoweringError(f"{where(instr)}: scatter {f}")
    operands = list(instr.operands[:f.operands])

    b.comment("scatter")
    for k, (o, out) in enumerate(zip(operands, outs, strict=True)):
        if k in inplace:
            b.emit(ir.Copy(out, inplace[k], if_distinct=True))
        else:
            def body(idx: ix.Index, o: Instruction = o, out: Buffer = out) -> None:
                b.emit(ir.Store(out, idx.lin(), b.value(o, idx)))

            nest(b, f.od, body)
    if any(n == 0 for n in f.ud):
        return
    umulti: list[Affine] = [ir.ZERO] * len(f.ud)
    _scatter_loops(b, [d for d in f.scatter_dims if f.ud[d] != 1], f.ud, umulti,
                   lambda: _apply(b, instr, f, outs, umulti))


def _scatter_loops(b: Builder, dims: list[int], ud: tuple[int, ...], umulti: list[Affine],
                   inner: object) -> None:
    if not dims:
        inner()  # type: ignore[operator]
        return
    d = dims[0]
    with b.loop(ud[d], "s") as v:
        umulti[d] = ir.affine(v)
        _scatter_loops(b, dims[1:], ud, umulti, inner)


def _apply(b: Builder, instr: Instruction, f: ScatterForm, outs: list[Buffer],
           umulti: list[Affine]) -> None:
    g = b.g
    od = f.od

    def batch_coord(t: int) -> Affine:
        return umulti[f.scatter_dims[f.batch_dims.index(t)]]

    starts: list[Affine] = [ir.ZERO] * len(od)
    raw: list[Val | None] = [None] * len(od)
    for k, d in enumerate(f.sdod):
        multi = [ir.affine(k) if t == f.ivd else batch_coord(t) for t in range(len(f.idd))]
        v = b.value(instr.operand(f.operands), ix.of_multi(f.idd, multi))
        v64 = v if v.dtype == S64 else g.alu(CVT64, v)
        raw[d] = v64
        starts[d] = ir.affine(v64)
    for d, t in zip(f.ibd, f.sibd, strict=True):
        starts[d] = batch_coord(t)
    conds: list[Val] = []
    for d in range(len(od)):
        r = raw[d]
        if r is None:
            continue
        if r.op == "const":
            if not 0 <= int(ir.const_value(r)) <= od[d] - f.win[d]:
                conds.append(g.const(False, PRED))
            continue
        conds.append(g.alu(GE, r, g.const(0, S64)))
        conds.append(g.alu(LE, r, g.const(od[d] - f.win[d], S64)))
    inside = b.all_of(conds)
    then: list[ir.Stmt] = []
    with b.into(then):
        _window(b, instr, f, [d for d in f.uwd if f.ud[d] != 1], umulti, starts, outs)
    if inside.op == "const":
        if ir.const_value(inside):
            b.block.extend(then)
        return
    b.emit(ir.If(inside, then))


def _window(b: Builder, instr: Instruction, f: ScatterForm, dims: list[int],
            umulti: list[Affine], starts: list[Affine], outs: list[Buffer]) -> None:
    if dims:
        d = dims[0]
        with b.loop(f.ud[d], "w") as v:
            umulti[d] = ir.affine(v)
            _window(b, instr, f, dims[1:], umulti, starts, outs)
        return
    omulti = list(starts)
    for j, d in enumerate(f.window_operand_dims):
        omulti[d] = starts[d] + umulti[f.uwd[j]]
    target = ix.linearize(tuple(omulti), f.od)
    uidx = ix.of_multi(f.ud, umulti)
    xs = [b.value(u, uidx) for u in instr.operands[f.operands + 1:]]
    olds = [b.g.load(out, target) for out in outs]
    new = scalar.inline(b.g, instr.attrs["to_apply"], olds + xs)
    b.assign([(out, target, v) for out, v in zip(outs, new, strict=True)])


@handles(Opcode.SCATTER)
def value_at(b: Builder, instr: Instruction, idx: ix.Index) -> list[Val]:
    """Scatter `instr` at result position `idx` (module docstring): inside a whole loop, as
    selects; elsewhere the library routine's result (`library.values`)."""
    from hlofuse.analysis.scatter import select_form
    from hlofuse.backends.kernel_ir.lower import library

    if b.hoist_scalars:
        return library.values(b, instr, idx)
    f = select_form(instr)
    if isinstance(f, str):
        raise LoweringError(f"{where(instr)}: a library routine inside a whole loop ({f})")
    g = b.g
    m = idx.coords(g)
    n = f.operands
    indices = instr.operand(n)
    updates = list(instr.operands[n + 1:])
    comp = instr.attrs["to_apply"]
    outs = [b.value(instr.operand(k), idx) for k in range(n)]
    umulti: list[Affine] = [ir.ZERO] * len(f.ud)
    for u in f.scatter_dims:
        d = f.operand_dim_of_update(u)
        if d is not None:  # a batching dim: the point of this position's batch element
            umulti[u] = m[d]
    for point in itertools.product(*(range(f.ud[u]) for u in f.point_dims)):
        for u, c in zip(f.point_dims, point, strict=True):
            umulti[u] = ir.affine(c)
        window = _window_at(b, f, indices, umulti, m)
        if window is None:
            continue  # this point's window is out of bounds
        inside, coords = window
        always = inside.op == "const"
        if always and not ir.const_value(inside):
            continue  # not in this point's window
        for j, d in enumerate(f.window_operand_dims):
            umulti[f.uwd[j]] = coords[d]
        uidx = ix.of_multi(f.ud, umulti)
        new = scalar.inline(g, comp, outs + [b.value(u, uidx) for u in updates])
        if always:
            outs = list(new)
        else:
            # a select, not a guarded `cond`: both sides read in bounds wherever they run,
            # and the element loop stays a vector loop over strided state
            outs = [g.alu(ir.ScalarOp(Opcode.SELECT, v.dtype), inside, v, old)
                    for v, old in zip(new, outs, strict=True)]
    return outs


def _window_at(b: Builder, f: ScatterForm, indices: Instruction, umulti: list[Affine],
               m: tuple[Affine, ...]) -> tuple[Val, list[Affine]] | None:
    """(whether result position `m` lies in the in-bounds window of the point at `umulti`,
    the window coordinate along each operand dim), or None when the window is out of bounds
    for every position."""
    g = b.g
    starts: list[Val | int] = [0] * len(f.od)
    for k, d in enumerate(f.sdod):
        multi = [ir.affine(k) if t == f.ivd else umulti[f.scatter_dims[f.batch_dims.index(t)]]
                 for t in range(len(f.idd))]
        v = b.value(indices, ix.of_multi(f.idd, multi))
        starts[d] = int(ir.const_value(v)) if v.op == "const" else v
    conds: list[Val] = []
    coords: list[Affine] = [ir.ZERO] * len(f.od)
    for d in range(len(f.od)):
        if d in f.ibd:
            continue  # the batch coordinate: the point's own
        w, s = f.win[d], starts[d]
        if isinstance(s, int):
            if not 0 <= s <= f.od[d] - w:
                return None
            if w < f.od[d]:
                conds += [b.ge(m[d], s), b.lt(m[d], s + w)]
            coords[d] = m[d] - s
            continue
        if w == 1:  # p_d == start: in bounds too, as p_d is
            at = m[d]
            if at.is_const and s.dtype.kind in ("signed", "unsigned") and \
                    at.const < 1 << (s.dtype.bits - 1):
                conds.append(g.alu(EQ, s, g.const(at.const, s.dtype)))  # in the index's type
            else:
                conds.append(g.alu(EQ, b.index_val(at), s if s.dtype == S64 else
                                   g.alu(CVT64, s)))
            continue
        s = s if s.dtype == S64 else g.alu(CVT64, s)
        conds += [g.alu(GE, s, g.const(0, S64)), g.alu(LE, s, g.const(f.od[d] - w, S64))]
        if w < f.od[d]:
            delta = g.alu(SUB64, b.index_val(m[d]), s)
            conds += [g.alu(GE, delta, g.const(0, S64)), g.alu(LT, delta, g.const(w, S64))]
            coords[d] = b.clamp(delta, w - 1)
        else:
            coords[d] = m[d]
    return b.all_of(conds), coords
