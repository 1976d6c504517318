"""Ops that are not index maps (dot, sort, convolution, rng-bit-generator, ...) inside a kernel.

Such an op is computed whole by `lower.library` into buffers, then read like an input:

    float *tmp = hf_alloc(0, ...);           /* its operands, unless they are kernel inputs */
    for (i ...) tmp[i] = <operand at i>;
    <library statements: dot(tmp, in1) -> tmp_2>
    ... loads tmp_2[i] in the loops ...
    free(tmp); free(tmp_2);                  /* at the end of the kernel */

Everything here runs in the kernel's preamble (it does not depend on the loop variables). As a
kernel root the op writes straight into the kernel's outputs (`emit_root`). Scratch buffers are
heap-allocated (sizes are unbounded) and freed at the end of the kernel. Conditions enforced: the
op's opcode is in `library.SUPPORTED`, else `LoweringError` names it.
"""

from __future__ import annotations

from hlofuse.backends.cpu import cexpr
from hlofuse.backends.cpu.lower import index as ix
from hlofuse.backends.cpu.lower import loops
from hlofuse.backends.cpu.lower.emitter import Emitter, LoweringError, where
from hlofuse.backends.cpu.lower.index import Index
from hlofuse.backends.cpu.lower.naming import word
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, leaves


def _library():
    try:
        from hlofuse.backends.cpu.lower import library
    except ImportError:
        return None
    return library


def supported(instr: Instruction) -> bool:
    lib = _library()
    return lib is not None and instr.opcode in lib.SUPPORTED


def scratch(em: Emitter, shape: ArrayShape, base: str) -> str:
    """A heap buffer for one array (allocated in the preamble, freed at the end)."""
    ct = cexpr.ctype(shape.dtype)
    name = em.fresh(base)
    with em.at_preamble():
        em.line(f"{ct} *{name} = ({ct} *)hf_alloc(0, {max(shape.nbytes, 1)});")
    em.post.append(f"    free({name});")
    return name


def buffers(em: Emitter, instr: Instruction) -> list[str]:
    """Pointers to `instr`'s array leaves, materialising them if needed (in the preamble)."""
    if id(instr) in em.params:
        return em.params[id(instr)]
    key = ("buffers", id(instr))
    found = em.lookup(key)
    if found is not None:
        return found  # type: ignore[return-value]
    with em.at_preamble():
        if supported(instr):
            outs = [scratch(em, s, f"{word(instr)}_buf") for s in leaves(instr.shape)]
            call(em, instr, outs)
        elif instr.opcode is Opcode.SCATTER:
            from hlofuse.backends.cpu.lower import scatter

            outs = [scratch(em, s, f"{word(instr)}_buf") for s in leaves(instr.shape)]
            scatter.emit(em, instr, outs, None)
        else:
            outs = []
            shapes = leaves(instr.shape)
            for k, s in enumerate(shapes):
                ptr = scratch(em, s, f"{word(instr)}_buf")
                outs.append(ptr)

                def body(idx: Index, k: int = k, ptr: str = ptr, s: ArrayShape = s) -> None:
                    v = em.values(instr, idx)[k]
                    em.line(f"{ptr}[{idx.lin()}] = {cexpr.store(s.dtype, v)};")

                loops.loop_nest(em, tuple(s.dims), body)
        em.remember(key, outs)
    return outs


def call(em: Emitter, instr: Instruction, outs: list[str]) -> None:
    """Emit the library call computing `instr` into `outs` (operands materialised first)."""
    lib = _library()
    if lib is None or instr.opcode not in lib.SUPPORTED:
        raise LoweringError(
            f"{where(instr)}: the CPU backend has no kernel for {instr.opcode.value} "
            "(not an index map and not in lower.library)"
        )
    ins: list[str] = []
    for o in instr.operands:
        ins += buffers(em, o)
    defs, stmts = lib.emit(instr, ins, outs, em.used_globals)
    if defs:
        em.helpers.append(defs)
    for line in stmts.splitlines():
        if line.strip():
            em.line(line)


def values(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    """`instr`'s leaves at `idx`, read from its materialised buffers."""
    if not supported(instr) and instr.opcode is not Opcode.SCATTER:
        raise LoweringError(
            f"{where(instr)}: the CPU backend cannot lower {instr.opcode.value} here "
            "(not an index map and not in lower.library)"
        )
    ptrs = buffers(em, instr)
    out = []
    for ptr, s in zip(ptrs, leaves(instr.shape), strict=True):
        at = idx if idx.dims == tuple(s.dims) else ix.of_linear(tuple(s.dims), idx.lin())
        out.append(em.load(ptr, s, at, word(instr)))
    return out
