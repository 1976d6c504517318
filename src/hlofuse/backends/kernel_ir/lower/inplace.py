"""In-place roots: dynamic-update-slice and scatter writing into the buffer they update.

A root `dynamic-update-slice(p, update, starts...)` whose operand 0 is a kernel input `p` that
nothing else in the kernel reads becomes

    Copy(out, p, if_distinct)            the driver may pass the same memory for both
    for each update element u: out[start + u] = update[u]

and the kernel reports `inplace={out: in}`: O(update) work instead of O(operand). Correct both
when out and p are the same memory and when they differ: the update and the start indices never
read `p` (the "nothing else reads it" condition), and starts are clamped like the interpreter's
(`[0, dim - update_dim]`). Scan loops, which write one row of a [T, ...] array per step, rely on
this. `scatter_candidates` finds the same situation for scatter operands (see scatter.py).
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Buffer
from hlofuse.backends.kernel_ir.lower import index as ix
from hlofuse.backends.kernel_ir.lower.builder import Builder, dims_of
from hlofuse.backends.kernel_ir.lower.maps import dus_starts
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode


def _sole_input(root: Instruction, operand: int, params: dict[int, list[Buffer]],
                fused: bool) -> Buffer | None:
    base = root.operand(operand)
    bufs = params.get(id(base))
    if bufs is None or len(bufs) != 1:
        return None
    if root.operand_indices(base) != [operand]:
        return None
    if fused and any(u is not root for u in base.users):
        return None
    return bufs[0]


def candidate(root: Instruction, params: dict[int, list[Buffer]], fused: bool
              ) -> Buffer | None:
    """The input buffer a dynamic-update-slice root may update in place, or None."""
    if root.opcode is not Opcode.DYNAMIC_UPDATE_SLICE:
        return None
    return _sole_input(root, 0, params, fused)


def scatter_candidates(root: Instruction, params: dict[int, list[Buffer]], fused: bool
                       ) -> dict[int, Buffer]:
    """Result leaf -> input buffer a scatter root may update in place."""
    if root.opcode is not Opcode.SCATTER:
        return {}
    out: dict[int, Buffer] = {}
    for k in range((root.operand_count - 1) // 2):
        buf = _sole_input(root, k, params, fused)
        if buf is not None:
            out[k] = buf
    return out


def emit(b: Builder, dus: Instruction, out: Buffer, src: Buffer) -> None:
    od = dims_of(dus)
    upd = dus.operand(1)
    ud = dims_of(upd)
    b.comment("dynamic-update-slice in place: writes only the update region")
    b.emit(ir.Copy(out, src, if_distinct=True))
    starts = dus_starts(b, dus)
    from hlofuse.backends.kernel_ir.lower.roots import nest

    def body(idx: ix.Index) -> None:
        m = idx.coords(b.g)
        target = ix.linearize(tuple(starts[d] + m[d] for d in range(len(od))), od)
        b.emit(ir.Store(out, target, b.value(upd, idx)))

    nest(b, ud, body)
