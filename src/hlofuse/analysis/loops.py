"""Loop analyses: a while's body and condition, its induction variable and its trip count.

    induction_variable(w)   JAX's loop pattern: an integral tuple element initialised to a
                            constant, updated by `gte + constant` (or `- constant`), compared
                            (LT/LE/GT/GE/NE, either side) with a constant or an invariant element
                            whose init is a constant; None otherwise
    trip_count(w)           how many times the body runs: exact (Python integers), None when
                            unknown or when the induction variable would overflow its type, 0
                            when the condition is the constant false
    passes_through(w, i)    whether the body returns element i unchanged (`gte(param, i)`)

Read by the simplification passes (`passes/simplify/while_loops.py`: trip counts 0 and 1,
invariant sinking; `unroll.py`), by fusion (whole-loop fusion, auto-unroll, small loops), by the
kernel accounting (`analysis/kernels.py`) and the tools; none of them rewrites anything here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape
from hlofuse.passes.utils import scalar_int

_FLIP = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "EQ": "EQ", "NE": "NE"}


def body_of(w: Instruction) -> Computation:
    comp: Computation = w.attrs["body"]
    return comp


def condition_of(w: Instruction) -> Computation:
    comp: Computation = w.attrs["condition"]
    return comp


def gte_index(instr: Instruction, tuple_value: Instruction) -> int | None:
    """i if `instr` is get-tuple-element(tuple_value), index=i."""
    if instr.opcode is Opcode.GET_TUPLE_ELEMENT and instr.operand(0) is tuple_value:
        index: int = instr.attrs["index"]
        return index
    return None


def init_operand(w: Instruction, i: int) -> Instruction | None:
    """Operand i of the while's init when the init is a `tuple` instruction."""
    init = w.operand(0)
    return init.operand(i) if init.opcode is Opcode.TUPLE else None


def passes_through(w: Instruction, i: int) -> bool:
    """Does the body return element i unchanged?"""
    body = body_of(w)
    param = body.parameter(0)
    root = body.root
    if root is param:
        return True
    return root.opcode is Opcode.TUPLE and gte_index(root.operand(i), param) == i


def _init_int(w: Instruction, i: int) -> int | None:
    op = init_operand(w, i)
    return scalar_int(op) if op is not None else None


@dataclass(frozen=True)
class InductionVariable:
    """Element `index` starts at `init`, moves by `step` per iteration, and the loop runs while
    `element <direction> bound`."""

    index: int
    init: int
    step: int
    direction: str
    bound: int
    dtype: np.dtype


def induction_variable(w: Instruction) -> InductionVariable | None:
    if w.opcode is not Opcode.WHILE or not isinstance(w.shape, TupleShape):
        return None
    cond, body = condition_of(w), body_of(w)
    if not cond.parameters or not body.parameters:
        return None
    q, p = cond.parameter(0), body.parameter(0)
    found = _compare(cond.root)
    if found is None or body.root.opcode is not Opcode.TUPLE:
        return None
    a, b, direction = found
    for iv, other, d in ((a, b, direction), (b, a, _FLIP.get(direction, ""))):
        k = gte_index(iv, q)
        if k is None or not isinstance(iv.shape, ArrayShape) or not iv.shape.dtype.is_integral:
            continue
        bound = scalar_int(other)
        if bound is None:
            m = gte_index(other, q)
            if m is None or not passes_through(w, m):
                continue
            bound = _init_int(w, m)
            if bound is None:
                continue
        init = _init_int(w, k)
        if init is None:
            continue
        step = _step(body.root.operand(k), p, k)
        if step is None:
            continue
        return InductionVariable(k, init, step, d, bound, iv.shape.dtype.np)
    return None


def _compare(root: Instruction) -> tuple[Instruction, Instruction, str] | None:
    """The condition's compare (a, b, direction); a fused one (priority fusion fuses the
    bound's constant into it) seen through its fusion: its parameters as the fusion's
    operands, its constants as they are."""
    op = root.fused_computation.root if root.opcode is Opcode.FUSION else root
    if op.opcode is not Opcode.COMPARE:
        return None
    sides = []
    for x in op.operands:
        if root.opcode is Opcode.FUSION and x.opcode is Opcode.PARAMETER:
            x = root.operand(x.parameter_number or 0)
        elif root.opcode is Opcode.FUSION and x.opcode is not Opcode.CONSTANT:
            return None
        sides.append(x)
    return sides[0], sides[1], str(op.attrs.get("direction", ""))


def _step(update: Instruction, p: Instruction, k: int) -> int | None:
    """The constant the update `gte(p, k) (+|-) c1 (+|-) c2 ...` adds per iteration (a chain,
    as unrolling produces, must move in one direction so no intermediate value overshoots).
    The chain may be fused: a fusion is followed to its root, its parameters to its operands."""
    parts: list[int] = []
    cur = update
    fusions: list[Instruction] = []  # the fusions entered, innermost last
    for _ in range(256):
        if cur.opcode is Opcode.FUSION:
            fusions.append(cur)
            cur = cur.fused_computation.root
            continue
        if cur.opcode is Opcode.PARAMETER and fusions and \
                cur.parent is fusions[-1].fused_computation:
            cur = fusions.pop().operand(cur.parameter_number or 0)
            continue
        if gte_index(cur, p) == k:
            total = sum(parts)
            if total == 0 or not (all(x > 0 for x in parts) or all(x < 0 for x in parts)):
                return None
            return total
        if cur.opcode is Opcode.ADD:
            x, y = cur.operands
            c, cur = (scalar_int(y), x) if scalar_int(y) is not None else (scalar_int(x), y)
            if c is None:
                return None
            parts.append(c)
        elif cur.opcode is Opcode.SUBTRACT:
            c = scalar_int(cur.operand(1))
            if c is None:
                return None
            parts.append(-c)
            cur = cur.operand(0)
        else:
            return None
    return None


def _count(init: int, step: int, direction: str, bound: int) -> int | None:
    if direction == "LT":
        if init >= bound:
            return 0
        return -(-(bound - init) // step) if step > 0 else None
    if direction == "LE":
        if init > bound:
            return 0
        return (bound - init) // step + 1 if step > 0 else None
    if direction == "GT":
        if init <= bound:
            return 0
        return -(-(init - bound) // -step) if step < 0 else None
    if direction == "GE":
        if init < bound:
            return 0
        return (init - bound) // -step + 1 if step < 0 else None
    if direction == "NE":
        if init == bound:
            return 0
        if step == 0 or (bound - init) % step != 0 or (bound - init) // step <= 0:
            return None
        return (bound - init) // step
    return None


def trip_count(w: Instruction) -> int | None:
    """How many times the body of while `w` runs, when the JAX loop pattern makes it known
    (or 0 when the condition is the constant false)."""
    if w.opcode is Opcode.WHILE:
        cond_root = condition_of(w).root
        if cond_root.opcode is Opcode.CONSTANT and isinstance(cond_root.literal, np.ndarray):
            return 0 if not bool(cond_root.literal.reshape(-1)[0]) else None
    iv = induction_variable(w)
    if iv is None:
        return None
    n = _count(iv.init, iv.step, iv.direction, iv.bound)
    if n is None:
        return None
    info = np.iinfo(iv.dtype)
    last = iv.init + n * iv.step  # the largest excursion the induction variable makes
    if not (info.min <= last <= info.max):
        return None
    return n
