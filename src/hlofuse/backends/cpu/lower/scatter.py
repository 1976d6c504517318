"""scatter as C, with XLA's semantics as the interpreter defines them (`interpreter/indexing.py`).

    out = operand                      (memcpy when updating in place, else computed)
    for each scatter index b (update dims not in update_window_dims, row-major):
        start = operand position from the index vector (scatter_dims_to_operand_dims) and the
                batch coordinates (input_batching_dims <- scatter_indices_batching_dims)
        if the whole window [start, start + window) lies inside the operand:   (else skipped)
            for each window element w:  out[start + w] = to_apply(out[...], update[b, w])

Updates are applied one after another in (b, w) order, so repeated indices combine in update
order (the interpreter's order); `indices_are_sorted` / `unique_indices` are ignored. Float
combiners round after every update (the interpreter adds repeats in f64 and rounds once: a
rounding-level difference). The combiner is `scalar.scalar_expression` inline or a
`scalar.scalar_function` call; variadic scatters update every operand with one call.
"""

from __future__ import annotations

from hlofuse.backends.cpu import cexpr
from hlofuse.backends.cpu.ctext import comment
from hlofuse.backends.cpu.lower import index as ix
from hlofuse.backends.cpu.lower import loops
from hlofuse.backends.cpu.lower.emitter import Emitter, LoweringError, dims_of, where
from hlofuse.backends.cpu.lower.index import Index
from hlofuse.backends.cpu.lower.naming import word
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode


def candidates(root: Instruction, params: dict[int, list[str]], fused: bool) -> dict[int, str]:
    """Result leaf -> input pointer a scatter root may update in place."""
    if root.opcode is not Opcode.SCATTER:
        return {}
    n = (root.operand_count - 1) // 2
    out: dict[int, str] = {}
    for k in range(n):
        base = root.operand(k)
        ptrs = params.get(id(base))
        if ptrs is None or len(ptrs) != 1 or root.operand_indices(base) != [k]:
            continue
        if fused and any(u is not root for u in base.users):
            continue
        out[k] = ptrs[0]
    return out


def _ints(instr: Instruction, key: str) -> list[int]:
    return [int(v) for v in instr.attrs.get(key, ())]


def emit(em: Emitter, instr: Instruction, outs: list[str], inplace: dict[int, str] | None
         ) -> None:
    """Compute scatter `instr` into `outs` (one pointer per operand); `inplace` maps operand
    k to the input pointer holding it (then out k is that buffer or a copy of it)."""
    from hlofuse.backends.cpu.lower import reduce

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

    em.line(comment(instr.name, ": scatter"))
    for k, (o, out) in enumerate(zip(operands, outs, strict=True)):
        shape = o.array_shape
        if k in inplace:
            em.line(f"if ({out} != {inplace[k]}) memcpy({out}, {inplace[k]}, "
                    f"{max(shape.nbytes, 1)});")
        else:
            def body(idx: Index, o: Instruction = o, out: str = out) -> None:
                v = em.value(o, idx)
                em.line(f"{out}[{idx.lin()}] = {cexpr.store(o.array_shape.dtype, v)};")

            loops.loop_nest(em, od, body)
    if any(n == 0 for n in ud):
        return

    umulti = ["0"] * len(ud)
    opened = 0
    for d in scatter_dims:
        if ud[d] == 1:
            continue
        v = em.fresh(f"b{d}")
        umulti[d] = v
        em.open(f"for (int64_t {v} = 0; {v} < {ud[d]}; ++{v})")
        opened += 1

    def batch_coord(t: int) -> str:
        return umulti[scatter_dims[batch_dims.index(t)]]

    starts = ["0"] * len(od)
    for k, d in enumerate(sdod):
        multi = [str(k) if t == ivd else batch_coord(t) for t in range(len(idd))]
        v = em.value(indices, ix.of_multi(idd, multi))
        starts[d] = em.local(f"{word(instr)}_start{d}", "int64_t", f"(int64_t)({v})")
    for d, t in zip(ibd, sibd, strict=True):
        starts[d] = batch_coord(t)
    conds = []
    for d in range(len(od)):
        if ix.is_const(starts[d]):
            if not 0 <= int(starts[d]) <= od[d] - win[d]:
                conds.append("0")
            continue
        conds.append(f"{starts[d]} >= 0 && {starts[d]} <= {od[d] - win[d]}")
    em.open(f"if ({' && '.join(f'({c})' for c in conds) if conds else '1'})")
    opened += 1
    for j, d in enumerate(uwd):
        if ud[d] == 1:
            continue
        v = em.fresh(f"w{d}")
        umulti[d] = v
        em.open(f"for (int64_t {v} = 0; {v} < {ud[d]}; ++{v})")
        opened += 1
        del j
    omulti = list(starts)
    for j, d in enumerate(window_operand_dims):
        omulti[d] = ix.add(starts[d], umulti[uwd[j]])
    target = em.local("t", "int64_t", ix.linearize(tuple(omulti), od))
    uidx = ix.of_multi(ud, umulti)
    xs = [em.value(u, uidx) for u in updates]
    accs = []
    for o, out in zip(operands, outs, strict=True):
        dt = o.array_shape.dtype
        accs.append(em.local(f"{word(o)}_old", cexpr.compute_type(dt),
                             cexpr.load(dt, f"{out}[{target}]"), const=False))
    reduce.combine(em, comp, accs, xs)
    for o, out, a in zip(operands, outs, accs, strict=True):
        em.line(f"{out}[{target}] = {cexpr.store(o.array_shape.dtype, a)};")
    for _ in range(opened):
        em.close()
