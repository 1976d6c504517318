"""`while-loop-unroller{factor=k}`: unroll loops with a known trip count, as
`lax.scan(..., unroll=k)` does.

    while(init) body=B, n = 10, k = 4          peel:   s1 = B(init); s2 = B(s1)    (10 % 4)
                                     ==>       while(s2) body = B;B;B;B            (2 times)

* the trip count comes from `while_loops.trip_count` (JAX's induction-variable pattern);
  loops without one are left alone;
* n % k iterations are peeled in front of the loop (they run first, while the condition is
  still true), then the body becomes k chained copies of itself; the condition is unchanged
  because the induction variable now passes it only every k steps, at the same values;
* loops with n <= k are unrolled completely: the while disappears;
* the condition must be free of side effects (unrolling skips evaluations of it);
* it unrolls every loop it sees once per run: do not put it inside a fixpoint;
* `complete_only=true` leaves loops of more than k iterations alone (hlofuse's pipeline uses it
  to unroll the few rounds of JAX's threefry loops, not the time loops around them);
* a module-wide budget (`budget_limit`: `max_growth`, or `growth_per_instruction` times the
  module's size before its first unroll, whichever is larger): the instructions every unroll
  of a module has created are counted in the module's annotations (`growth_of`), across passes
  and runs, and an unroll that would take the total past the budget is refused (the loop stays
  a loop). Each level of a nest multiplies the copies (five nested loops of 8 trips
  unrolled completely are 8^5 copies of the innermost body), so no per-loop limit bounds the
  work; the total does, whatever the nesting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.analysis.loops import body_of, condition_of, trip_count
from hlofuse.errors import PassError
from hlofuse.ir.clone import clone_computation
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.passes.registry import register
from hlofuse.passes.simplify.growth import (
    UNROLL_BUDGET,
    UNROLL_PER_INSTRUCTION,
    body_size,
    charge,
    over_growth,
)
from hlofuse.passes.utils import (
    clone_body_into,
    each_while,
    has_side_effect,
    reachable_computations,
    sweep,
)


def unroll_growth(w: Instruction, k: int) -> int:
    """Instructions `unroll(.., w, k)` creates: the peeled copies, and the k copies of the new
    body when the loop stays a loop."""
    n = trip_count(w) or 0
    copies = n if n <= k else n % k + k
    return copies * body_size(body_of(w))


def over_budget(module: Module, w: Instruction, k: int, floor: int = UNROLL_BUDGET,
                per_instruction: int = UNROLL_PER_INSTRUCTION) -> str:
    """Why unrolling `w` k times would take `module` past its budget (`budget_limit`) of
    created instructions ('' when it would not)."""
    return over_growth(module, unroll_growth(w, k), floor, per_instruction)


def peel(comp: Computation, w: Instruction, times: int) -> Instruction:
    """Insert `times` copies of the body before `w`, chained from its init; returns the last
    state (the init itself when `times` is 0)."""
    body = body_of(w)
    state = w.operand(0)
    for _ in range(times):
        state = clone_body_into(comp, body, {body.parameter(0): state}, before=w)
    return state


def unrolled_body(module: Module, body: Computation, k: int) -> Computation:
    """A new computation running `body` k times in a row."""
    new = module.add_computation(clone_computation(body, name=f"{body.name}.unrolled"))
    for _ in range(k - 1):
        new.root = clone_body_into(new, body, {body.parameter(0): new.root}, before=None)
    return new


def unroll(module: Module, comp: Computation, w: Instruction, k: int,
           complete_only: bool = False, floor: int = UNROLL_BUDGET,
           per_instruction: int = UNROLL_PER_INSTRUCTION) -> bool:
    n = trip_count(w)
    if n is None or k <= 1 or n <= 1 or (complete_only and n > k):
        return False
    if any(has_side_effect(i) for i in condition_of(w).instructions):
        return False
    if over_budget(module, w, k, floor, per_instruction):
        return False
    charge(module, unroll_growth(w, k))
    if n <= k:
        state = peel(comp, w, n)
        w.replace_all_uses_with(state)
        sweep(comp, [w], force=True)  # its side effects, if any, now happen in the copies
        return True
    state = peel(comp, w, n % k)
    if state is not w.operand(0):
        w.set_operand(0, state)
    w.attrs["body"] = unrolled_body(module, body_of(w), k)
    return True


@register("while-loop-unroller", "unroll-while")
@dataclass(frozen=True)
class WhileLoopUnroller:
    """Unroll each loop with a known trip count `factor` times; with `complete_only`, only
    loops of at most `factor` iterations, completely (JAX's threefry rounds: the random bits
    become elementwise code that fuses into their consumers); never past `max_growth`
    instructions created in the module."""

    factor: int = 4
    complete_only: bool = False
    max_growth: int = UNROLL_BUDGET
    growth_per_instruction: int = UNROLL_PER_INSTRUCTION

    name: ClassVar[str] = "while-loop-unroller"

    def __post_init__(self) -> None:
        if self.factor < 1:
            raise PassError(f"while-loop-unroller factor must be at least 1, got {self.factor}")
        if self.max_growth < 0 or self.growth_per_instruction < 0:
            raise PassError("while-loop-unroller max_growth and growth_per_instruction must be "
                            f"at least 0, got {self.max_growth}, {self.growth_per_instruction}")

    def run(self, module: Module) -> bool:
        changed = False
        for comp, w in each_while(reachable_computations(module)):
            changed |= unroll(module, comp, w, self.factor, self.complete_only,
                              self.max_growth, self.growth_per_instruction)
        return changed
