"""`tuple-simplifier`: cancel tuple construction against tuple access (XLA's TupleSimplifier).

    t = tuple(a, b, c)
    g = get-tuple-element(t), index=1          ==>   uses of g read b

    g0 = get-tuple-element(w), index=0
    g1 = get-tuple-element(w), index=1
    t  = tuple(g0, g1)                          ==>   uses of t read w

Conditions:

* `gte(tuple(...), i)` is replaced by operand i when the shapes match (layout included);
* `tuple(gte(w, 0), ..., gte(w, n-1))` is replaced by `w` only when every element comes from
  the same `w`, in order, all n of them, and `w`'s shape equals the tuple's;
* the instructions left unused are deleted (never side-effecting ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import TupleShape
from hlofuse.passes.registry import register
from hlofuse.passes.utils import forward_replacements, layouts_match


def _forwarded(instr: Instruction) -> Instruction | None:
    if instr.opcode is Opcode.GET_TUPLE_ELEMENT:
        src = instr.operand(0)
        if src.opcode is Opcode.TUPLE:
            elem = src.operand(instr.attrs["index"])
            if layouts_match(elem.shape, instr.shape):
                return elem
        return None
    if instr.opcode is Opcode.TUPLE and instr.operand_count > 0:
        first = instr.operand(0)
        if first.opcode is not Opcode.GET_TUPLE_ELEMENT:
            return None
        whole = first.operand(0)
        if not isinstance(whole.shape, TupleShape):
            return None
        if len(whole.shape.elements) != instr.operand_count:
            return None
        for i, op in enumerate(instr.operands):
            if (op.opcode is not Opcode.GET_TUPLE_ELEMENT or op.operand(0) is not whole
                    or op.attrs.get("index") != i):
                return None
        if layouts_match(whole.shape, instr.shape):
            return whole
    return None


@register("tuple-simplifier")
@dataclass(frozen=True)
class TupleSimplifier:
    """Fold get-tuple-element of tuple, and tuples that rebuild a tuple unchanged."""

    name: ClassVar[str] = "tuple-simplifier"

    def run(self, module: Module) -> bool:
        return forward_replacements(module, _forwarded)
