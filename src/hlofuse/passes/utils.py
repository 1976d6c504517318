"""Rewriting helpers shared by passes: replacing and deleting instructions safely, cloning a
computation's body into another computation, call-graph queries, and constant inspection.

Conditions every helper keeps:

* an instruction with a side effect (directly, or through a computation it calls) is never
  deleted, and neither is a parameter;
* new instructions are inserted before the instruction they replace, so a computation whose
  instruction list is in definition-before-use order stays in that order;
* replacements inherit the replaced instruction's metadata when they have none, so source
  locations survive rewriting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np

from hlofuse.ir.attributes import COMPUTATION_ATTRS
from hlofuse.ir.clone import clone_instruction
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import OPCODES, Opcode
from hlofuse.ir.shape import ArrayShape, Shape
from hlofuse.passes.base import check_kept, checking_kept

_CALL_ATTRS = frozenset(COMPUTATION_ATTRS)


# `instr.called_computations()` (its fast paths: most instructions call nothing or name one
# computation attribute), as the function the passes import.
called = Instruction.called_computations


def ordered(comp: Computation) -> list[Instruction]:
    """The instructions, definitions before uses: the instruction list itself when it already
    is in that order (what the parser and every pass here produce), else the post order."""
    seen: set[Instruction] = set()  # (instructions hash by identity, in C)
    for instr in comp.instructions:
        # the operand list itself: this loop runs for every pass
        if not seen.issuperset(instr._operands) or (
                instr.control_predecessors and not seen.issuperset(instr.control_predecessors)):
            return comp.post_order()
        seen.add(instr)
    return list(comp.instructions)


# ids of the opcodes the table marks side-effecting (an int set: Enum hashing is slow and this
# check runs for every instruction in several passes)
_SIDE_EFFECT_OPS = frozenset(id(op) for op, info in OPCODES.items() if info.side_effect)


def has_side_effect(instr: Instruction, _cache: dict[int, bool] | None = None) -> bool:
    """Side effect of `instr` itself or of any computation it calls (recursively)."""
    op = instr.opcode
    if id(op) in _SIDE_EFFECT_OPS:
        return True
    if op is Opcode.CUSTOM_CALL and instr.has_side_effect:
        return True
    attrs = instr.attrs
    if not attrs or _CALL_ATTRS.isdisjoint(attrs):  # (most instructions call nothing)
        return False
    cache = _cache if _cache is not None else {}
    return any(_computation_has_side_effect(comp, cache) for comp in called(instr))


def _computation_has_side_effect(comp: Computation, cache: dict[int, bool]) -> bool:
    """Does an instruction of `comp` have a side effect (`has_side_effect`, memoised in
    `cache` by computation)? The instruction's own tests are inlined here: every fusion's
    computation is walked once per CSE and DCE run."""
    key = id(comp)
    known = cache.get(key)
    if known is not None:
        return known
    cache[key] = False  # recursion guard
    known = False
    disjoint = _CALL_ATTRS.isdisjoint
    for i in comp.instructions:
        op = i.opcode
        if id(op) in _SIDE_EFFECT_OPS or (op is Opcode.CUSTOM_CALL and i.has_side_effect) or (
                i.attrs and not disjoint(i.attrs) and has_side_effect(i, cache)):
            known = True
            break
    cache[key] = known
    return known


def is_removable(instr: Instruction) -> bool:
    return instr.opcode is not Opcode.PARAMETER and not has_side_effect(instr)


def delete(comp: Computation, instr: Instruction) -> None:
    """Remove an unused instruction, dropping control edges it takes part in."""
    for pred in instr.control_predecessors:
        if instr in pred.users and instr not in pred.operands:
            pred.users.remove(instr)
    for user in list(instr.users):
        if instr in user.control_predecessors and instr not in user.operands:
            user.control_predecessors = [p for p in user.control_predecessors if p is not instr]
            instr.users.remove(user)
    comp.remove(instr)


def remove_dead(comp: Computation, instr: Instruction) -> None:
    """Delete `instr` if unused, then operands that become unused, transitively."""
    stack = [instr]
    while stack:
        cur = stack.pop()
        if cur.users or cur.parent is not comp or cur is comp.root or not is_removable(cur):
            continue
        operands = list(dict.fromkeys(cur.operands))
        delete(comp, cur)
        stack.extend(operands)


def replace(comp: Computation, old: Instruction, new: Instruction) -> None:
    """Make `new` (adding it before `old` if it is detached) take every use of `old`, then
    delete `old` and whatever only it used."""
    if new.parent is None:
        if not new.metadata and old.metadata:
            new.metadata = old.metadata
        comp.add(new, before=old)
    old.replace_all_uses_with(new)
    remove_dead(comp, old)


def sweep(comp: Computation, candidates: Iterable[Instruction], *, force: bool = False) -> int:
    """Delete the unused, removable `candidates` and then whatever only they used, in one
    batch (one pass over the instruction list instead of one per deletion). With `force` the
    candidates go even if they have side effects (a call or while whose body was just inlined
    in its place). Returns how many instructions were deleted."""
    dead: set[int] = set()
    order: list[Instruction] = []
    stack = list(candidates)
    forced = {id(c) for c in stack} if force else set()
    root = comp.root
    cache: dict[int, bool] = {}
    while stack:
        cur = stack.pop()
        if id(cur) in dead or cur.parent is not comp or cur is root:
            continue
        if id(cur) not in forced and (cur.opcode is Opcode.PARAMETER
                                      or has_side_effect(cur, cache)):
            continue
        if any(id(u) not in dead for u in cur.users):
            continue
        dead.add(id(cur))
        order.append(cur)
        stack.extend(cur.operands)
        stack.extend(cur.control_predecessors)
    if not order:
        return 0
    module = comp.parent
    for instr in order:
        for op in dict.fromkeys(instr.operands):
            op.users = [u for u in op.users if u is not instr]
        for pred in instr.control_predecessors:
            pred.users = [u for u in pred.users if u is not instr]
        instr.detach_operands()
        instr.control_predecessors = []
        instr.parent = None
        if module is not None:
            module.release_name(instr.name)
    comp.instructions = [i for i in comp.instructions if id(i) not in dead]
    return len(order)


class Rewriter:
    """Batched edits of one computation: `replace(old, new)` adds `new` (when detached) and
    moves `old`'s uses to it; `finish()` puts each new instruction just before the one it
    replaced (its operands come from `old`'s operands or earlier, so definition-before-use
    order holds) and deletes what became dead, each in one pass over the instruction list."""

    def __init__(self, comp: Computation) -> None:
        self.comp = comp
        self.replaced: list[Instruction] = []
        self.added: dict[int, list[Instruction]] = {}
        self.n_added = 0

    def replace(self, old: Instruction, new: Instruction) -> None:
        if new.parent is None:
            if not new.metadata and old.metadata:
                new.metadata = old.metadata
            self.comp.add(new)  # appended (and named); moved in finish()
            self.added.setdefault(id(old), []).append(new)
            self.n_added += 1
        old.replace_all_uses_with(new)
        self.replaced.append(old)

    @property
    def changed(self) -> bool:
        return bool(self.replaced)

    def finish(self) -> bool:
        if self.n_added:
            instrs = self.comp.instructions[: len(self.comp.instructions) - self.n_added]
            out: list[Instruction] = []
            for instr in instrs:
                new = self.added.get(id(instr))
                if new is not None:
                    out.extend(new)
                out.append(instr)
            self.comp.instructions = out
        sweep(self.comp, self.replaced)
        return self.changed


def forward_replacements(
    module: Module, replacement: Callable[[Instruction], Instruction | None]
) -> bool:
    """Make every use of an instruction a use of `replacement(instr)` where that names a value
    (in every computation, unreachable ones too: DCE drops them). Returns whether anything
    changed."""
    changed = False
    for comp in list(module.computations):
        edit = Rewriter(comp)
        for instr in ordered(comp):
            new = replacement(instr)
            if new is not None:
                edit.replace(instr, new)
        changed |= edit.finish()
    return changed


def add_before(comp: Computation, new: Instruction, anchor: Instruction,
               like: Instruction | None = None) -> Instruction:
    """Insert a detached `new` before `anchor`, taking `like`'s metadata."""
    if like is not None and not new.metadata:
        new.metadata = like.metadata
    return comp.add(new, before=anchor)


def clone_body_into(
    dest: Computation,
    src: Computation,
    mapping: dict[Instruction, Instruction],
    before: Instruction | None,
) -> Instruction:
    """Clone every instruction of `src` not already in `mapping` (its parameters must be
    mapped) into `dest` before `before`; returns the clone of `src`'s root.

    Instructions the root does not reach are cloned too (they may have side effects); dead
    clones are left for DCE.
    """
    start = len(dest.instructions)
    for instr in ordered(src):
        if instr in mapping:
            continue
        if instr.opcode is Opcode.PARAMETER:
            raise ValueError(f"parameter {instr.name} of {src.name} is not mapped")
        clone = clone_instruction(instr, [mapping[o] for o in instr.operands])
        dest.add(clone)  # appended; moved before `before` below (one list splice, not n)
        clone.control_predecessors = [mapping[p] for p in instr.control_predecessors]
        for p in clone.control_predecessors:
            if clone not in p.users:
                p.users.append(clone)
        mapping[instr] = clone
    if before is not None:
        clones = dest.instructions[start:]
        del dest.instructions[start:]
        at = dest.instructions.index(before)
        dest.instructions[at:at] = clones
    return mapping[src.root]


def clone_computation_into_module(module: Module, comp: Computation, name: str) -> Computation:
    """An independent copy of `comp` added to `module` under a unique name."""
    from hlofuse.ir.clone import clone_computation

    new = clone_computation(comp, name=name)
    return module.add_computation(new)


def callers(module: Module, computations: Iterable[Computation] | None = None
            ) -> dict[int, list[Instruction]]:
    """id(computation) -> instructions that call it (in any computation of the module, or in
    the given ones)."""
    out: dict[int, list[Instruction]] = {}
    comps = module.computations if computations is None else computations
    for comp in comps:
        for instr in comp.instructions:
            for callee in called(instr):
                out.setdefault(id(callee), []).append(instr)
    return out


def callees(comp: Computation) -> list[Computation]:
    """The computations `comp`'s instructions call, in instruction order (repeats kept)."""
    out: list[Computation] = []
    disjoint = _CALL_ATTRS.isdisjoint
    for instr in [i for i in comp.instructions if i.attrs and not disjoint(i.attrs)]:
        out.extend(called(instr))  # (most instructions call nothing: filtered out above)
    return out


def computations_post_order(module: Module) -> list[Computation]:
    """`module.computations_post_order()` (callees before callers, the entry last), computed
    with an explicit stack and the fast `called` (the fusion passes ask for it every run).
    During a pipeline run, each computation's callees are kept by its version
    (`module.caches`): the walk reads every fused computation, most of which no pass run
    changes."""
    order: list[Computation] = []
    seen: set[int] = set()
    kept: dict[Computation, tuple[int, list[Computation]]] | None = (
        module.caches.setdefault(callees, {}) if module.caches is not None else None)
    check = kept is not None and checking_kept()

    def calls(comp: Computation) -> list[Computation]:
        if kept is None:
            return callees(comp)
        known = kept.get(comp)
        if known is not None and known[0] == comp.version:
            if check:
                check_kept(known[1] == callees(comp), f"the kept callees of {comp.name}")
            return known[1]
        out = callees(comp)
        kept[comp] = (comp.version, out)
        return out

    def visit(root: Computation) -> None:
        if id(root) in seen:
            return
        seen.add(id(root))
        stack = [(root, iter(calls(root)))]
        while stack:
            comp, pending = stack[-1]
            for callee in pending:
                if id(callee) not in seen:
                    seen.add(id(callee))
                    stack.append((callee, iter(calls(callee))))
                    break
            else:
                order.append(comp)
                stack.pop()

    try:
        entry: Computation | None = module.entry
    except ValueError:
        entry = None
    for comp in module.computations:
        if comp is not entry:
            visit(comp)
    if entry is not None:
        visit(entry)
    return order


def non_fusion_computations(module: Module) -> list[Computation]:
    """`module.non_fusion_computations()`, through `computations_post_order` above."""
    return [c for c in computations_post_order(module) if not c.is_fusion_computation]


def each_while(comps: Iterable[Computation]) -> Iterator[tuple[Computation, Instruction]]:
    """Each computation's while loops, listed when the walk reaches that computation, skipping a
    loop an earlier rewrite (of a loop before it) moved out of it: passes that rewrite loops one
    at a time iterate this."""
    for comp in comps:
        for w in [i for i in comp.instructions if i.opcode is Opcode.WHILE]:
            if w.parent is comp:
                yield comp, w


def reachable_computations(module: Module) -> list[Computation]:
    """Computations reachable from the entry through called computations, callees first."""
    return reachable_from([module.entry])


def reachable_from(roots: list[Computation]) -> list[Computation]:
    """`roots` and the computations they call, directly or not, callees first."""
    seen: set[int] = set()
    order: list[Computation] = []

    def visit(c: Computation) -> None:
        stack: list[tuple[Computation, bool]] = [(c, False)]
        while stack:
            cur, expanded = stack.pop()
            if expanded:
                order.append(cur)
                continue
            if id(cur) in seen:
                continue
            seen.add(id(cur))
            stack.append((cur, True))
            for callee in callees(cur):
                if id(callee) not in seen:
                    stack.append((callee, False))

    for root in roots:
        visit(root)
    return order


def remove_unreachable_computations(module: Module,
                                    reachable: list[Computation] | None = None) -> bool:
    """Drop computations the entry cannot reach. Returns whether any were dropped.
    `reachable`: `reachable_computations(module)`, when the caller has it for the module as
    it is now."""
    if reachable is None:
        reachable = reachable_computations(module)
    live = {id(c) for c in reachable}
    dead = [c for c in module.computations if id(c) not in live]
    for c in dead:
        module.remove_computation(c)
    return bool(dead)


# ----- constants ----------------------------------------------------------------------------


def uniform_value(instr: Instruction) -> np.generic | None:
    """The single value every element of `instr` has, when `instr` is a constant (or a
    broadcast/reshape of one) whose elements are all bitwise equal; else None."""
    while instr.opcode in (Opcode.BROADCAST, Opcode.RESHAPE, Opcode.BITCAST):
        if instr.opcode is Opcode.BITCAST and not _same_dtype(instr.shape,
                                                               instr.operand(0).shape):
            return None
        instr = instr.operand(0)
    if instr.opcode is not Opcode.CONSTANT or not isinstance(instr.literal, np.ndarray):
        return None
    arr = instr.literal
    if arr.size == 0:
        return None
    flat = arr.reshape(-1)
    first = flat[0]
    if arr.size > 1:
        raw = flat.view(np.uint8).reshape(arr.size, -1)
        if not (raw == raw[0]).all():
            return None
    value: np.generic = first
    return value


def _same_dtype(a: Shape, b: Shape) -> bool:
    return isinstance(a, ArrayShape) and isinstance(b, ArrayShape) and a.dtype == b.dtype


def is_uniform(instr: Instruction, value: float | bool, *, negative_zero: bool | None = None
               ) -> bool:
    """Is every element of `instr` equal to `value`? For zero, `negative_zero` picks the sign
    (None accepts both)."""
    v = uniform_value(instr)
    if v is None:
        return False
    if isinstance(value, bool):
        return bool(v) is value
    if np.iscomplexobj(v):  # both parts must match (float() would drop the imaginary one)
        z = complex(v)
        if z != complex(value):
            return False
        if value == 0 and negative_zero is not None:
            return all(bool(np.signbit(p)) is negative_zero for p in (z.real, z.imag))
        return True
    try:
        if float(v) != float(value):
            return False
    except (TypeError, ValueError):
        return False
    if value == 0 and negative_zero is not None:  # callers ask only for float types
        # (bf16 is not an np.floating subtype, so do not test the dtype: test the sign)
        return bool(np.signbit(np.asarray(v).astype(np.float64))) is negative_zero
    return True


def scalar_int(instr: Instruction) -> int | None:
    """The integer value of a scalar (or one-element) integral constant."""
    if instr.opcode is not Opcode.CONSTANT or not isinstance(instr.literal, np.ndarray):
        return None
    arr = instr.literal
    if arr.size != 1 or arr.dtype.kind not in "iu":
        return None
    return int(arr.reshape(-1)[0])


def layouts_match(a: Shape, b: Shape) -> bool:
    """Equal shapes, where a missing layout counts as the default one."""
    if isinstance(a, ArrayShape) and isinstance(b, ArrayShape):
        return a.compatible(b) and a.minor_to_major == b.minor_to_major
    return a == b or (a.without_layout() == b.without_layout() and _tuple_match(a, b))


def _tuple_match(a: Shape, b: Shape) -> bool:
    from hlofuse.ir.shape import TupleShape

    if isinstance(a, TupleShape) and isinstance(b, TupleShape):
        return all(layouts_match(x, y) for x, y in zip(a.elements, b.elements, strict=True))
    return a.compatible(b)


def in_order(instrs: Iterable[Instruction]) -> list[Instruction]:
    """De-duplicated, order kept."""
    return list(dict.fromkeys(instrs))
