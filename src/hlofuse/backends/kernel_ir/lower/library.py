"""Ops that are not index maps (dot, convolution, sort, topk, rng-bit-generator,
select-and-scatter, cholesky, triangular-solve, jax's LAPACK custom calls) as library calls:
the op is computed whole into buffers, then read like an input.

    LibCall(op, ins=[operand buffers], outs=[local buffers])   in the kernel's preamble
    ... load(local, i) in the loops ...

Operands that are kernel inputs are passed as they are; any other operand is first materialised
into a local buffer by a loop nest. As a kernel root the op writes the kernel's outputs directly
(`roots.py`). Which ops have a routine, and the routines themselves, belong to the backend
(`backends/cpu/library/` for C); this module only decides where they run.
"""

from __future__ import annotations

from hlofuse.backends import lapack_targets
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Buffer, Val
from hlofuse.backends.kernel_ir.lower import index as ix
from hlofuse.backends.kernel_ir.lower.builder import Builder, LoweringError, where
from hlofuse.backends.kernel_ir.lower.index import Index
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, leaves

SUPPORTED = frozenset({Opcode.DOT, Opcode.CONVOLUTION, Opcode.SORT, Opcode.TOPK,
                       Opcode.RNG_BIT_GENERATOR, Opcode.SELECT_AND_SCATTER, Opcode.CHOLESKY,
                       Opcode.TRIANGULAR_SOLVE})


def supported(instr: Instruction) -> bool:
    """Is `instr` computed by a library routine: one of `SUPPORTED`, or a custom call of jax's
    LAPACK targets (`backends/lapack_targets.py`)?"""
    if instr.opcode is Opcode.CUSTOM_CALL:
        return lapack_targets.is_target(instr)
    return instr.opcode in SUPPORTED


def buffers(b: Builder, instr: Instruction) -> list[Buffer]:
    """Buffers holding `instr`'s array leaves, materialising them (in the preamble) if needed."""
    if id(instr) in b.params:
        return b.params[id(instr)]
    key = ("buffers", id(instr))
    found = b.scopes[0].get(key)
    if isinstance(found, list):
        return found
    with b.at_preamble():
        shapes = leaves(instr.shape)
        outs = [b.local(s.dtype, s.size, "m") for s in shapes]
        if supported(instr):
            call(b, instr, outs)
        elif instr.opcode is Opcode.SCATTER:
            from hlofuse.backends.kernel_ir.lower import scatter

            scatter.emit(b, instr, outs, None)
        else:
            from hlofuse.backends.kernel_ir.lower.roots import nest

            for k, (s, buf) in enumerate(zip(shapes, outs, strict=True)):
                def body(idx: Index, k: int = k, buf: Buffer = buf) -> None:
                    b.emit(ir.Store(buf, idx.lin(), b.values(instr, idx)[k]))

                nest(b, tuple(s.dims), body)
        b.scopes[0][key] = outs
    return outs


def call(b: Builder, instr: Instruction, outs: list[Buffer]) -> None:
    """The library call computing `instr` into `outs` (operands materialised first)."""
    if not supported(instr):
        raise LoweringError(
            f"{where(instr)}: the backend has no kernel for {instr.opcode.value} "
            "(not an index map and not a library routine)")
    ins: list[Buffer] = []
    for o in instr.operands:
        ins += buffers(b, o)
    b.comment(instr.opcode.value)
    b.emit(ir.LibCall(instr, ins, outs))


def values(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    """`instr`'s leaves at `idx`, read from its materialised buffers."""
    if not supported(instr) and instr.opcode is not Opcode.SCATTER:
        raise LoweringError(
            f"{where(instr)}: cannot lower {instr.opcode.value} here (not an index map and not "
            "a library routine)")
    bufs = buffers(b, instr)
    out = []
    for buf, s in zip(bufs, leaves(instr.shape), strict=True):
        at = idx if idx.dims == tuple(s.dims) else ix.of_linear(tuple(s.dims), idx.lin())
        out.append(b.load(buf, at))
    return out


def array_leaves(instr: Instruction) -> list[ArrayShape]:
    return leaves(instr.shape)
