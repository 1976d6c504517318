"""`constant-folding`: evaluate instructions whose operands are all constants (XLA's
HloConstantFolding), using the interpreter's handler for the opcode.

    c1 = f32[] constant(2)
    c2 = f32[] constant(3)                    ==>    m = f32[] constant(6)
    m  = f32[] multiply(c1, c2)

Conditions (XLA's, plus a size limit):

* never folded: parameters, constants, side-effecting instructions (rng, outfeed, ...), rng
  ops of any kind, control flow (while, call, conditional, fusion), custom-calls, tuples and
  get-tuple-element, tokens, and zero-operand ops other than `iota` (partition-id and
  replica-id are not constants);
* the result and every operand must have at most `max_elements` elements (default 1024), so
  folding never builds a huge literal;
* `broadcast` and `iota` grow data rather than compute it: they are folded only when the result
  has at most `max_expand_elements` elements (default 1, so a broadcast of a scalar stays a
  cheap, fusible broadcast instead of becoming an array constant);
* an instruction the interpreter cannot evaluate is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hlofuse.errors import HloError
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Category, Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.registry import register
from hlofuse.passes.utils import Rewriter, has_side_effect, ordered

NEVER_FOLD = frozenset(
    {
        Opcode.PARAMETER,
        Opcode.CONSTANT,
        Opcode.TUPLE,
        Opcode.GET_TUPLE_ELEMENT,
        Opcode.CUSTOM_CALL,
        Opcode.RNG,
        Opcode.RNG_BIT_GENERATOR,
        Opcode.RNG_GET_AND_UPDATE_STATE,
        Opcode.AFTER_ALL,
        Opcode.ADD_DEPENDENCY,
        Opcode.OPTIMIZATION_BARRIER,
        Opcode.PARTITION_ID,
        Opcode.REPLICA_ID,
        Opcode.FFT,
    }
)
EXPANDING = frozenset({Opcode.BROADCAST, Opcode.IOTA})


def _size(instr: Instruction) -> int | None:
    return instr.shape.size if isinstance(instr.shape, ArrayShape) else None


def foldable(instr: Instruction, max_elements: int, max_expand_elements: int,
             cache: dict[int, bool]) -> bool:
    for o in instr.operands:  # the cheap test first: most instructions fail it
        if o.opcode is not Opcode.CONSTANT:
            return False
    op = instr.opcode
    if op in NEVER_FOLD or instr.category in (Category.CONTROL, Category.OPAQUE):
        return False
    if instr.operand_count == 0 and op is not Opcode.IOTA:
        return False
    size = _size(instr)
    if size is None or size > max_elements:
        return False
    if op in EXPANDING and size > max_expand_elements:
        return False
    for o in instr.operands:
        osize = _size(o)
        if osize is None or osize > max_elements:
            return False
    return not has_side_effect(instr, cache)


def evaluate(instr: Instruction) -> np.ndarray | None:
    """The value of `instr` given its constant operands, or None if it cannot be evaluated."""
    from hlofuse.backends import interpreter  # noqa: F401  (registers every handler)
    from hlofuse.backends.interpreter.core import HANDLERS, Interpreter

    handler = HANDLERS.get(instr.opcode)
    if handler is None:
        return None
    try:
        value = handler(Interpreter(), instr, [o.literal for o in instr.operands])
    except (HloError, ArithmeticError, ValueError, TypeError, NotImplementedError):
        return None
    shape = instr.array_shape
    arr = np.asarray(value)
    if arr.shape != shape.dims:
        return None
    return np.array(arr, dtype=shape.dtype.np, order="C", copy=True)


def fold_computation(comp: Computation, max_elements: int, max_expand_elements: int,
                     cache: dict[int, bool]) -> bool:
    edit = Rewriter(comp)
    for instr in ordered(comp):
        if not foldable(instr, max_elements, max_expand_elements, cache):
            continue
        value = evaluate(instr)
        if value is None:
            continue
        const = Instruction.create(Opcode.CONSTANT, instr.shape, name="constant",
                                   literal=value, metadata=instr.metadata)
        edit.replace(instr, const)
    return edit.finish()


@register("constant-folding")
@dataclass(frozen=True)
class ConstantFolding:
    """Replace instructions of constants by their value (small results only)."""

    max_elements: int = 1024
    max_expand_elements: int = 1

    name: ClassVar[str] = "constant-folding"

    def run(self, module: Module) -> bool:
        cache: dict[int, bool] = {}
        changed = False
        for comp in list(module.computations):  # unreachable ones too: DCE drops them
            changed |= fold_computation(comp, self.max_elements, self.max_expand_elements,
                                        cache)
        return changed
