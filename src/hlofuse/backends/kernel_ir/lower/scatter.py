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
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Affine, Buffer, Val
from hlofuse.backends.kernel_ir.lower import index as ix
from hlofuse.backends.kernel_ir.lower import scalar
from hlofuse.backends.kernel_ir.lower.builder import (
    CVT64,
    GE,
    S64,
    Builder,
    LoweringError,
    dims_of,
    where,
)
from hlofuse.ir.dtypes import PRED
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode

LE = ir.ScalarOp(Opcode.COMPARE, PRED, (("direction", "LE"),))


def _ints(instr: Instruction, key: str) -> list[int]:
    return [int(v) for v in instr.attrs.get(key, ())]


def emit(b: Builder, instr: Instruction, outs: list[Buffer], inplace: dict[int, Buffer] | None
         ) -> None:
    """Compute scatter `instr` into `outs` (one buffer per operand); `inplace` maps operand k to
    the input buffer holding it (then out k is that memory or a copy of it)."""
    from hlofuse.backends.kernel_ir.lower.roots import nest

    inplace = inplace or {}
    n = (instr.operand_count - 1) // 2
    operands = list(instr.operands[:n])
    indices = instr.operand(n)
    updates = list(instr.operands[n + 1:])
    comp = instr.attrs.get("to_apply")
    if comp is None or "index_vector_dim" not in instr.attrs:
        raise LoweringError(f"{where(instr)}: scatter needs to_apply= and index_vector_dim=")
    od, idd, ud = dims_of(operands[0]), dims_of(indices), dims_of(updates[0])
    uwd, iwd = _ints(instr, "update_window_dims"), _ints(instr, "inserted_window_dims")
    sdod = _ints(instr, "scatter_dims_to_operand_dims")
    ibd, sibd = _ints(instr, "input_batching_dims"), _ints(instr, "scatter_indices_batching_dims")
    ivd = int(instr.attrs["index_vector_dim"])
    window_operand_dims = [d for d in range(len(od)) if d not in iwd and d not in ibd]
    if len(window_operand_dims) != len(uwd):
        raise LoweringError(f"{where(instr)}: update_window_dims do not match the operand")
    scatter_dims = [d for d in range(len(ud)) if d not in uwd]
    batch_dims = [t for t in range(len(idd)) if t != ivd]
    win = [1] * len(od)
    for j, d in enumerate(window_operand_dims):
        win[d] = ud[uwd[j]]

    b.comment("scatter")
    for k, (o, out) in enumerate(zip(operands, outs, strict=True)):
        if k in inplace:
            b.emit(ir.Copy(out, inplace[k], if_distinct=True))
        else:
            def body(idx: ix.Index, o: Instruction = o, out: Buffer = out) -> None:
                b.emit(ir.Store(out, idx.lin(), b.value(o, idx)))

            nest(b, od, body)
    if any(n == 0 for n in ud):
        return
    umulti: list[Affine] = [ir.ZERO] * len(ud)
    _scatter_loops(b, [d for d in scatter_dims if ud[d] != 1], ud, umulti, lambda: _apply(
        b, instr, operands, indices, updates, outs, comp, od, idd, ud, uwd, sdod, ibd, sibd,
        ivd, scatter_dims, batch_dims, window_operand_dims, win, umulti))


def _scatter_loops(b: Builder, dims: list[int], ud: tuple[int, ...], umulti: list[Affine],
                   inner: object) -> None:
    if not dims:
        inner()  # type: ignore[operator]
        return
    d = dims[0]
    with b.loop(ud[d], "s") as v:
        umulti[d] = ir.affine(v)
        _scatter_loops(b, dims[1:], ud, umulti, inner)


def _apply(b: Builder, instr: Instruction, operands: list[Instruction], indices: Instruction,
           updates: list[Instruction], outs: list[Buffer], comp: object,
           od: tuple[int, ...], idd: tuple[int, ...], ud: tuple[int, ...], uwd: list[int],
           sdod: list[int], ibd: list[int], sibd: list[int], ivd: int, scatter_dims: list[int],
           batch_dims: list[int], window_operand_dims: list[int], win: list[int],
           umulti: list[Affine]) -> None:
    g = b.g

    def batch_coord(t: int) -> Affine:
        return umulti[scatter_dims[batch_dims.index(t)]]

    starts: list[Affine] = [ir.ZERO] * len(od)
    raw: list[Val | None] = [None] * len(od)
    for k, d in enumerate(sdod):
        multi = [ir.affine(k) if t == ivd else batch_coord(t) for t in range(len(idd))]
        v = b.value(indices, ix.of_multi(idd, multi))
        v64 = v if v.dtype == S64 else g.alu(CVT64, v)
        raw[d] = v64
        starts[d] = ir.affine(v64)
    for d, t in zip(ibd, sibd, strict=True):
        starts[d] = batch_coord(t)
    conds: list[Val] = []
    for d in range(len(od)):
        r = raw[d]
        if r is None:
            continue
        if r.op == "const":
            if not 0 <= int(ir.const_value(r)) <= od[d] - win[d]:
                conds.append(g.const(False, PRED))
            continue
        conds.append(g.alu(GE, r, g.const(0, S64)))
        conds.append(g.alu(LE, r, g.const(od[d] - win[d], S64)))
    inside = b.all_of(conds)
    then: list[ir.Stmt] = []
    with b.into(then):
        _window(b, [d for d in uwd if ud[d] != 1], ud, uwd, umulti, starts,
                window_operand_dims, od, outs, operands, updates, comp)
    if inside.op == "const":
        if ir.const_value(inside):
            b.block.extend(then)
        return
    b.emit(ir.If(inside, then))


def _window(b: Builder, dims: list[int], ud: tuple[int, ...], uwd: list[int],
            umulti: list[Affine], starts: list[Affine], window_operand_dims: list[int],
            od: tuple[int, ...], outs: list[Buffer], operands: list[Instruction],
            updates: list[Instruction], comp: object) -> None:
    if dims:
        d = dims[0]
        with b.loop(ud[d], "w") as v:
            umulti[d] = ir.affine(v)
            _window(b, dims[1:], ud, uwd, umulti, starts, window_operand_dims, od, outs,
                    operands, updates, comp)
        return
    omulti = list(starts)
    for j, d in enumerate(window_operand_dims):
        omulti[d] = starts[d] + umulti[uwd[j]]
    target = ix.linearize(tuple(omulti), od)
    uidx = ix.of_multi(ud, umulti)
    xs = [b.value(u, uidx) for u in updates]
    olds = [b.g.load(out, target) for out in outs]
    new = scalar.inline(b.g, comp, olds + xs)  # type: ignore[arg-type]
    b.assign([(out, target, v) for out, v in zip(outs, new, strict=True)])
