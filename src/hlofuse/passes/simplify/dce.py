"""`dce`: delete dead instructions and unreachable computations (XLA's HloDCE).

    p0 ─ add ─ ROOT tuple          p0 ─ add ─ ROOT tuple
     └── exp   (no users)    ==>    (exp deleted)

An instruction is live when the root reaches it through operands or control edges, or when it
has a side effect (an rng, an outfeed, a side-effecting custom-call, or a while/call/conditional
whose computations contain one); everything a live instruction reads is live. Conditions:

* parameters are never deleted (they are the computation's signature);
* side-effecting instructions are never deleted, even when nothing reads them;
* a computation the entry cannot reach through `to_apply`/`body`/`calls`/... is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.registry import register
from hlofuse.passes.utils import (
    has_side_effect,
    ordered,
    reachable_computations,
    remove_unreachable_computations,
    sweep,
)


def dce_computation(comp: Computation, cache: dict[int, bool] | None = None) -> bool:
    """Delete dead instructions of one computation; returns whether any were deleted."""
    cache = cache if cache is not None else {}
    if not _may_have_dead_code(comp, cache):
        return False
    live: set[Instruction] = set()  # (instructions hash by identity, in C)
    stack = [comp.root]
    for instr in comp.instructions:
        if instr.opcode is Opcode.PARAMETER or has_side_effect(instr, cache):
            stack.append(instr)
    while stack:
        cur = stack.pop()
        if cur in live:
            continue
        live.add(cur)
        stack.extend(cur._operands)  # the list itself (no tuple copy per instruction)
        stack.extend(cur.control_predecessors)
    if len(live) == len(comp.instructions):
        return False
    # post order on a stack: users are popped (and deleted) before their operands
    return sweep(comp, [i for i in ordered(comp) if i not in live]) > 0


def _may_have_dead_code(comp: Computation, cache: dict[int, bool]) -> bool:
    """Is some instruction without users other than the root, a parameter or a side-effecting
    one? Exactly when there is dead code: following users from any instruction ends at one
    without users (control successors are users too, and a user list names only real users,
    as the verifier requires), so if only those have none, everything reaches the root or a
    side effect. One look at each user list instead of the walk from the live ones (most
    computations, every fusion's included, have no dead code), and side effects asked only of
    the few without users."""
    root = comp.root
    for instr in comp.instructions:
        if not instr.users and instr is not root and instr.opcode is not Opcode.PARAMETER \
                and not has_side_effect(instr, cache):
            return True
    return False


@register("dce")
@dataclass(frozen=True)
class Dce:
    """Dead-code elimination over instructions and computations."""

    remove_computations: bool = True

    name: ClassVar[str] = "dce"
    exact_versions: ClassVar[bool] = True  # (passes/base.py)

    def run(self, module: Module) -> bool:
        changed = False
        cache: dict[int, bool] = {}
        reachable = reachable_computations(module)
        for comp in reachable:
            changed |= dce_computation(comp, cache)
        if self.remove_computations:
            # (deleting instructions may leave computations unreachable: walk again then)
            changed |= remove_unreachable_computations(module, None if changed else reachable)
        return changed
