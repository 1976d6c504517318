"""`while-loop-simplifier`: shrink and remove while loops (XLA's WhileLoopSimplifier and
WhileLoopConstantSinking), and the trip-count analysis other passes use.

    init = (i=0, x, k=c, dead)                 init' = (i=0, x)
    while(init)                                while(init')
      cond: i < 10                      ==>      cond: i < 10
      body: (i+1, f(x, k), k, g(dead))           body: (i+1, f(x, c))       c sunk in
    use gte(w, 2)                              use c

What it does to each while `w` (in this order; the first that applies to a loop wins for
the first two):

1. trip count 0 (the condition is false on the initial value): `w` becomes its init;
2. trip count 1: the body is inlined once in place of `w`, within the module's budget of
   copied instructions (`growth.py`, shared with unrolling: loops of one trip whose bodies each
   hold two such loops double per level when inlined); past it the loop stays;
3. invariant elements: an element the body passes through unchanged (`root[i] =
   gte(param, i)`) keeps its initial value, so outside reads `gte(w, i)` become the init's
   operand i, and, when that operand is a constant, reads inside the body and condition become
   a copy of the constant (constant sinking);
4. dead elements: element i is live when the condition reads it, a user of `w` reads it, a
   side-effecting instruction of the body depends on it, or a live element's new value depends
   on it; dead elements leave the tuple (init, body, condition and `w` all shrink).

Conditions: steps 1-2 need a side-effect-free condition; step 4 needs tuple-shaped loops whose
body root is a `tuple` and whose parameters and `w` are read only through get-tuple-element;
body and condition computations shared with other callers are copied before they are edited.

Trip counts (`trip_count(w)`) are found for JAX's loop pattern: an integral induction element
initialised to a constant, updated by `gte + constant` (or `- constant`), and compared
(LT/LE/GT/GE/NE, either side) against a constant or an invariant element with a constant init.
The count is exact (Python integers) and None when the loop would overflow the type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape
from hlofuse.passes.registry import register
from hlofuse.passes.simplify.dce import dce_computation
from hlofuse.passes.simplify.growth import (
    UNROLL_BUDGET,
    UNROLL_PER_INSTRUCTION,
    body_size,
    charge,
    over_growth,
)
from hlofuse.passes.utils import (
    callers,
    clone_body_into,
    clone_computation_into_module,
    delete,
    each_while,
    has_side_effect,
    ordered,
    reachable_computations,
    remove_dead,
    scalar_int,
    sweep,
)

_FLIP = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "EQ": "EQ", "NE": "NE"}


# ----- analysis ---------------------------------------------------------------------------


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
    root = cond.root
    if root.opcode is not Opcode.COMPARE or body.root.opcode is not Opcode.TUPLE:
        return None
    a, b = root.operands
    direction = str(root.attrs.get("direction", ""))
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


# ----- rewrites ---------------------------------------------------------------------------


def _replace_while(comp: Computation, w: Instruction, value: Instruction) -> None:
    """`value` takes the place of `w`, which goes even if its body has side effects (they ran
    in the inlined copy, or never run at all)."""
    w.replace_all_uses_with(value)
    sweep(comp, [w], force=True)


def inline_body_once(comp: Computation, w: Instruction) -> Instruction:
    """Replace `w` by one copy of its body applied to its init; returns the copy's root."""
    body = body_of(w)
    mapping = {body.parameter(0): w.operand(0)}
    new_root = clone_body_into(comp, body, mapping, before=w)
    _replace_while(comp, w, new_root)
    return new_root


def own_computation(module: Module, w: Instruction, key: str,
                    counts: dict[int, list[Instruction]]) -> Computation:
    """The computation `w.attrs[key]`, copied first if anything else calls it."""
    comp: Computation = w.attrs[key]
    if len(counts.get(id(comp), [])) > 1:
        clone = clone_computation_into_module(module, comp, comp.name)
        counts[id(comp)].remove(w)
        counts[id(clone)] = [w]
        w.attrs[key] = clone
        return clone
    return comp


def sink_invariants(module: Module, comp: Computation, w: Instruction,
                    counts: dict[int, list[Instruction]]) -> bool:
    """Step 3: forward invariant elements outside, sink invariant constants inside."""
    if not isinstance(w.shape, TupleShape) or w.operand(0).opcode is not Opcode.TUPLE:
        return False
    changed = False
    n = len(w.shape.elements)
    invariant = [i for i in range(n) if passes_through(w, i)]
    for i in invariant:
        init_op = init_operand(w, i)
        assert init_op is not None
        for user in list(w.users):
            if gte_index(user, w) == i and (user.users or user.is_root):
                user.replace_all_uses_with(init_op)
                changed = True
    for i in invariant:
        init_op = init_operand(w, i)
        if init_op is None or init_op.opcode is not Opcode.CONSTANT:
            continue
        for key in ("body", "condition"):
            target: Computation = w.attrs[key]
            param = target.parameter(0)
            reads = [u for u in param.users if gte_index(u, param) == i and _has_real_use(u, i)]
            if not reads:
                continue
            target = own_computation(module, w, key, counts)
            param = target.parameter(0)
            for g in [u for u in param.users if gte_index(u, param) == i]:
                _sink_into(target, g, i, init_op)
            changed = True
    return changed


def _has_real_use(g: Instruction, i: int) -> bool:
    """Is gte `g` (of element i) read other than as pass-through slot i of its root?"""
    comp = g.parent
    assert comp is not None
    root = comp.root
    for u in g.users:
        if u is root and root.opcode is Opcode.TUPLE:
            if any(j != i for j in root.operand_indices(g)):
                return True
            continue
        return True
    return root is g


def _sink_into(comp: Computation, g: Instruction, i: int, const: Instruction) -> None:
    copy = Instruction.create(Opcode.CONSTANT, const.shape, name="constant",
                              literal=const.literal, metadata=const.metadata)
    comp.add(copy, before=g)
    root = comp.root
    for u in list(g.users):
        if u is root and root.opcode is Opcode.TUPLE:
            for j in root.operand_indices(g):
                if j != i:
                    root.set_operand(j, copy)
        else:
            u.replace_operand(g, copy)
    if root is g:
        comp.root = copy
    if not copy.users and copy is not comp.root:
        delete(comp, copy)


def _dependency_masks(comp: Computation) -> dict[Instruction, int]:
    """Bit i of mask[x] is set when x depends on element i of the parameter."""
    param = comp.parameter(0)
    masks: dict[Instruction, int] = {}
    every = -1
    for instr in ordered(comp):
        if instr is param:
            masks[instr] = every
            continue
        i = gte_index(instr, param)
        if i is not None:
            masks[instr] = 1 << i
            continue
        m = 0
        for o in instr.operands:
            m |= masks[o]
        for o in instr.control_predecessors:
            m |= masks[o]
        masks[instr] = m
    return masks


def _read_indices(param: Instruction) -> set[int] | None:
    """Elements of a tuple parameter that are read; None if it is read as a whole."""
    out: set[int] = set()
    for u in param.users:
        i = gte_index(u, param)
        if i is None:
            return None
        if u.users or u.is_root:
            out.add(i)
    return out


def remove_dead_elements(module: Module, comp: Computation, w: Instruction,
                         counts: dict[int, list[Instruction]],
                         cache: dict[int, bool] | None = None) -> bool:
    """Step 4: drop tuple elements nothing live reads."""
    if not isinstance(w.shape, TupleShape) or w.is_root:
        return False
    body, cond = body_of(w), condition_of(w)
    if body.root.opcode is not Opcode.TUPLE or not body.parameters or not cond.parameters:
        return False
    n = len(w.shape.elements)
    cond_reads = _read_indices(cond.parameter(0))
    outside = _read_indices(w)
    if cond_reads is None or outside is None or _read_indices(body.parameter(0)) is None:
        return False
    masks = _dependency_masks(body)
    cache = cache if cache is not None else {}
    live_mask = 0
    for instr in body.instructions:
        if has_side_effect(instr, cache):
            live_mask |= masks[instr]
    work = [*cond_reads, *outside, *[i for i in range(n) if live_mask >> i & 1]]
    live: set[int] = set()
    root = body.root
    while work:
        j = work.pop()
        if j in live or j >= n:
            continue
        live.add(j)
        m = masks[root.operand(j)]
        work.extend(i for i in range(n) if m >> i & 1 and i not in live)
    keep = sorted(live)
    if len(keep) == n or not keep:
        return False

    body = own_computation(module, w, "body", counts)
    cond = own_computation(module, w, "condition", counts)
    new_index = {old: new for new, old in enumerate(keep)}
    old_shape = w.shape
    new_shape = TupleShape(tuple(old_shape.elements[i] for i in keep))

    # body: new root, dead code out, parameter reshaped
    root = body.root
    new_root = Instruction.create(Opcode.TUPLE, new_shape, [root.operand(i) for i in keep],
                                  name=root.name, metadata=root.metadata)
    body.add(new_root, before=root)
    body.root = new_root
    remove_dead(body, root)
    for c in (body, cond):
        dce_computation(c, cache)
        param = c.parameter(0)
        param.shape = new_shape
        for g in list(param.users):
            g.attrs["index"] = new_index[g.attrs["index"]]

    # init and the while itself
    init = w.operand(0)
    if init.opcode is Opcode.TUPLE:
        elems = [init.operand(i) for i in keep]
    else:
        elems = []
        for i in keep:
            g = Instruction.create(Opcode.GET_TUPLE_ELEMENT, old_shape.elements[i], [init],
                                   name="get-tuple-element", attrs={"index": i})
            comp.add(g, before=w)
            elems.append(g)
    new_init = Instruction.create(Opcode.TUPLE, new_shape, elems, name=init.name,
                                  metadata=init.metadata)
    comp.add(new_init, before=w)
    w.set_operand(0, new_init)
    remove_dead(comp, init)
    w.shape = new_shape
    for g in list(w.users):
        index = g.attrs["index"]
        if index in new_index:
            g.attrs["index"] = new_index[index]
        else:
            delete(comp, g)
    return True


# ----- the pass ---------------------------------------------------------------------------


@register("while-loop-simplifier")
@dataclass(frozen=True)
class WhileLoopSimplifier:
    """Remove loops that run 0 or 1 times, sink invariant constants, drop dead elements."""

    sink_constants: bool = True
    remove_dead: bool = True
    max_growth: int = UNROLL_BUDGET
    growth_per_instruction: int = UNROLL_PER_INSTRUCTION

    name: ClassVar[str] = "while-loop-simplifier"

    def run(self, module: Module) -> bool:
        changed = False
        comps = reachable_computations(module)
        counts = callers(module, comps)
        cache: dict[int, bool] = {}
        for comp, w in each_while(comps):
            n = trip_count(w)
            pure_cond = not any(has_side_effect(i, cache)
                                for i in condition_of(w).instructions)
            if n == 0 and pure_cond:
                _replace_while(comp, w, w.operand(0))
                changed = True
                continue
            if n == 1 and pure_cond and not over_growth(
                    module, body_size(body_of(w)), self.max_growth,
                    self.growth_per_instruction):
                charge(module, body_size(body_of(w)))
                inline_body_once(comp, w)
                counts = callers(module, reachable_computations(module))
                changed = True
                continue
            if self.sink_constants:
                changed |= sink_invariants(module, comp, w, counts)
            if self.remove_dead:
                changed |= remove_dead_elements(module, comp, w, counts, cache)
        return changed
