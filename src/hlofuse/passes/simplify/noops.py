"""`noop-removal`: delete instructions that return their operand unchanged.

    r = f32[4]{0} reshape(f32[4]{0} x)       ==>   uses of r read x

No-ops recognised (each only when the result's shape equals the operand's, layout included;
a missing layout counts as the default one):

    reshape, bitcast                  same shape
    copy                              same shape and same layout (a copy that changes layout
                                      is real work, so it stays)
    convert                           same element type
    transpose                         identity permutation
    broadcast                         same shape, dimensions={0,1,...,rank-1}
    slice                             the full range with stride 1 in every dimension
    reverse                           no dimensions
    pad                               zero low/high/interior padding everywhere
    dynamic-slice                     slice sizes equal to the operand's dims (starts clamp to 0)
    concatenate                       a single operand
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.registry import register
from hlofuse.passes.utils import forward_replacements, layouts_match


def _always(instr: Instruction) -> bool:
    return True


def _identity_perm(instr: Instruction) -> bool:
    return tuple(instr.dimensions) == tuple(range(len(instr.dimensions)))


def _identity_broadcast(instr: Instruction) -> bool:
    return tuple(instr.dimensions) == tuple(range(instr.array_shape.rank))


def _full_slice(instr: Instruction) -> bool:
    dims = instr.operand(0).array_shape.dims
    ranges = instr.attrs.get("slice", ())
    return len(ranges) == len(dims) and all(
        r[0] == 0 and r[1] == d and (len(r) < 3 or r[2] == 1)
        for r, d in zip(ranges, dims, strict=True)
    )


def _no_reverse(instr: Instruction) -> bool:
    return not instr.dimensions


def _zero_pad(instr: Instruction) -> bool:
    return all(all(v == 0 for v in p) for p in instr.attrs.get("padding", ()))


def _full_dynamic_slice(instr: Instruction) -> bool:
    sizes = tuple(instr.attrs.get("dynamic_slice_sizes", ()))
    return sizes == instr.operand(0).array_shape.dims


def _single_operand(instr: Instruction) -> bool:
    return instr.operand_count == 1


NOOPS: dict[Opcode, Callable[[Instruction], bool]] = {
    Opcode.RESHAPE: _always,
    Opcode.BITCAST: _always,
    Opcode.COPY: _always,
    Opcode.CONVERT: _always,
    Opcode.TRANSPOSE: _identity_perm,
    Opcode.BROADCAST: _identity_broadcast,
    Opcode.SLICE: _full_slice,
    Opcode.REVERSE: _no_reverse,
    Opcode.PAD: _zero_pad,
    Opcode.DYNAMIC_SLICE: _full_dynamic_slice,
    Opcode.CONCATENATE: _single_operand,
}


def noop_operand(instr: Instruction) -> Instruction | None:
    """The operand `instr` merely forwards, or None."""
    check = NOOPS.get(instr.opcode)
    if check is None or instr.operand_count == 0:
        return None
    src = instr.operand(0)
    if not isinstance(instr.shape, ArrayShape) or not isinstance(src.shape, ArrayShape):
        return None
    if not layouts_match(instr.shape, src.shape):
        return None
    return src if check(instr) else None


@register("noop-removal")
@dataclass(frozen=True)
class NoopRemoval:
    """Forward the operand of instructions that do not change it."""

    name: ClassVar[str] = "noop-removal"

    def run(self, module: Module) -> bool:
        return forward_replacements(module, noop_operand)
