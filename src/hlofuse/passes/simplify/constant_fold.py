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
* the work evaluating it implies (`fold_work`: its operands and result, plus what the
  interpreter builds or visits on the way: a windowed op's padded, dilated input and a read per
  window tap and result element, a dot's or a convolution's multiply-adds) is at most
  `max_work` element steps (default 2^20). Small operands and a small result do not bound it: a
  4-element `reduce-window` with padding 2^28 and stride 2^28 has 3 results but builds a padded
  array of 2^29 elements. Such an op is left for the backend (the cpu backend reads windows
  without padding them). A reducer, comparator or map function counts its instructions per
  element it combines, and one holding a `while` is never folded (its trip count is the
  input's to choose);
* an instruction the interpreter cannot evaluate (or runs out of memory evaluating) is left
  alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hlofuse.errors import HloError
from hlofuse.ir.attributes import WindowDim
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Category, Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.evaluator import evaluator
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
# ops whose `window=` pads (and base-dilates) their first operand before reading it per tap
WINDOWED = frozenset({Opcode.REDUCE_WINDOW, Opcode.SELECT_AND_SCATTER, Opcode.CONVOLUTION})
MAX_WORK = 1 << 20
UNKNOWN_WORK = 1 << 62


def _size(instr: Instruction) -> int | None:
    return instr.shape.size if isinstance(instr.shape, ArrayShape) else None


def _padded(window: tuple[WindowDim, ...], dims: tuple[int, ...] | None) -> int:
    """Elements of an operand of `dims` padded and base-dilated as `window` says (`dims`
    None: the window's dimensions are not the operand's, e.g. a convolution's spatial ones;
    then each dimension is bounded by the operand's whole size)."""
    total = 1
    for k, w in enumerate(window):
        d = dims[k] if dims is not None else 1
        core = d + max(d - 1, 0) * max(w.base_dilation - 1, 0)
        total *= max(w.pad_lo + core + w.pad_hi, 1) if dims is not None else \
            max(abs(w.pad_lo) + abs(w.pad_hi) + 1, 1) * max(w.base_dilation, 1)
    return total


def fold_work(instr: Instruction) -> int:
    """Element steps evaluating `instr` implies (module docstring): its operands and result,
    plus the padded input and window reads of a windowed op and the multiply-adds of a dot or
    a convolution. Every folder goes through this one bound."""
    out = _size(instr) or 0
    ins = [_size(o) or 0 for o in instr.operands]
    work = out + sum(ins)
    op = instr.opcode
    window = instr.attrs.get("window")
    if op in WINDOWED and isinstance(window, tuple) and instr.operand_count:
        taps = math.prod(max(w.size, 1) for w in window)
        first = instr.operand(0).shape
        dims = first.dims if isinstance(first, ArrayShape) and len(first.dims) == len(window) \
            else None
        padded = _padded(window, dims)
        if dims is None:  # a convolution: the padding grows every spatial dimension
            padded *= max(ins[0], 1)
        reads = (_size(instr.operand(instr.operand_count - 2)) or 0
                 if op is Opcode.SELECT_AND_SCATTER else out)  # the windows visited
        work += max(1, instr.operand_count // 2) * (padded + reads * taps)
        if op is Opcode.CONVOLUTION and len(ins) > 1:
            work += out * ins[1]
    elif op is Opcode.DOT and len(ins) > 1:
        contracted = instr.attrs.get("lhs_contracting_dims") or ()
        lhs = instr.operand(0).shape
        k = math.prod(lhs.dims[int(d)] for d in contracted
                      if isinstance(lhs, ArrayShape) and 0 <= int(d) < len(lhs.dims))
        work += out * max(k, 1)
    called = _called_cost(instr)
    if called:  # a reducer, comparator or map function, evaluated per element it combines
        work += (out + sum(ins)) * called
    return work


def _called_cost(instr: Instruction) -> int:
    """Instructions evaluated per application of the computations `instr` calls (0: none); a
    loop among them makes the work unknown: more than any bound."""
    total = 0
    stack = list(instr.called_computations())
    seen: set[int] = set()
    while stack:
        comp = stack.pop()
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        for i in comp.instructions:
            if i.opcode is Opcode.WHILE:
                return UNKNOWN_WORK
            total += 1
            stack.extend(i.called_computations())
    return total


def foldable(instr: Instruction, max_elements: int, max_expand_elements: int,
             cache: dict[int, bool], max_work: int = MAX_WORK) -> bool:
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
    if fold_work(instr) > max_work:
        return False
    return not has_side_effect(instr, cache)


def evaluate(instr: Instruction) -> np.ndarray | None:
    """The value of `instr` given its constant operands, or None if it cannot be evaluated."""
    run = evaluator()
    if run is None:
        return None
    try:
        value = run(instr, [o.literal for o in instr.operands])
        if value is None:  # (no handler for the opcode)
            return None
    except (HloError, ArithmeticError, ValueError, TypeError, NotImplementedError,
            MemoryError):  # a value too large to build here is left for the backend
        return None
    shape = instr.array_shape
    arr = np.asarray(value)
    if arr.shape != shape.dims:
        return None
    return np.array(arr, dtype=shape.dtype.np, order="C", copy=True)


def fold_computation(comp: Computation, max_elements: int, max_expand_elements: int,
                     cache: dict[int, bool], max_work: int = MAX_WORK) -> bool:
    edit = Rewriter(comp)
    for instr in ordered(comp):
        if not foldable(instr, max_elements, max_expand_elements, cache, max_work):
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
    max_work: int = MAX_WORK

    name: ClassVar[str] = "constant-folding"

    def run(self, module: Module) -> bool:
        cache: dict[int, bool] = {}
        changed = False
        for comp in list(module.computations):  # unreachable ones too: DCE drops them
            changed |= fold_computation(comp, self.max_elements, self.max_expand_elements,
                                        cache, self.max_work)
        return changed
