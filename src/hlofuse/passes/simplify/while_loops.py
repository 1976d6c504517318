"""`while-loop-simplifier`: shrink and remove while loops (XLA's WhileLoopSimplifier and
WhileLoopConstantSinking), on the loop analyses of `analysis/loops.py`.

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

Trip counts (`analysis.loops.trip_count`) are found for JAX's loop pattern (that module's
docstring).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.analysis.loops import (
    body_of,
    condition_of,
    gte_index,
    init_operand,
    passes_through,
    trip_count,
)
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import TupleShape
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
    sweep,
)

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
