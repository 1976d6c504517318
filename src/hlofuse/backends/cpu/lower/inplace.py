"""In-place dynamic-update-slice: O(update) work instead of O(operand).

A root `dynamic-update-slice(p, update, starts...)` whose operand 0 is a kernel input `p` that
nothing else in the kernel reads becomes

    if (out0 != in0) memcpy(out0, in0, bytes);   /* the driver may pass the same buffer */
    for (update elements u) out0[start + u] = update[u];

and the Kernel reports `inplace={out: in}`. Correct both when out0 == in0 and when they differ:
the update and the start indices never read `p` (the "nothing else reads it" condition), and
starts are clamped like the interpreter's (`[0, dim - update_dim]`). Scan loops, which write one
row of a [T, ...] array per step, rely on this.
"""

from __future__ import annotations

from hlofuse.backends.cpu import cexpr
from hlofuse.backends.cpu.ctext import comment
from hlofuse.backends.cpu.lower import index as ix
from hlofuse.backends.cpu.lower import loops
from hlofuse.backends.cpu.lower.emitter import Emitter, dims_of
from hlofuse.backends.cpu.lower.index import Index
from hlofuse.backends.cpu.lower.maps import dus_starts
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode


def candidate(root: Instruction, params: dict[int, list[str]], fused: bool) -> str | None:
    """The input pointer `root` may update in place, or None."""
    if root.opcode is not Opcode.DYNAMIC_UPDATE_SLICE:
        return None
    base = root.operand(0)
    ptrs = params.get(id(base))
    if ptrs is None or len(ptrs) != 1:
        return None
    if root.operand_indices(base) != [0]:
        return None
    if fused and any(u is not root for u in base.users):
        return None
    return ptrs[0]


def emit(em: Emitter, dus: Instruction, out: str, src: str) -> None:
    shape = dus.array_shape
    od = dims_of(dus)
    upd = dus.operand(1)
    ud = dims_of(upd)
    em.line(comment(dus.name, ": in place, writes only the update region"))
    em.line(f"if ({out} != {src}) memcpy({out}, {src}, {max(shape.nbytes, 1)});")
    starts = dus_starts(em, dus)

    def body(idx: Index) -> None:
        m = em.multi(idx)
        target = ix.linearize(tuple(ix.add(starts[d], m[d]) for d in range(len(od))), od)
        value = em.value(upd, idx)
        em.line(f"{out}[{target}] = {cexpr.store(shape.dtype, value)};")

    # the nest form: the target index needs the multi-index of the update element
    saved = em.flat_loops
    em.flat_loops = False
    try:
        loops.loop_nest(em, ud, body)
    finally:
        em.flat_loops = saved
