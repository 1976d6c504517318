"""The budget of instructions that unrolling and inlining loops may create in one module.

Copying a loop's body (unrolling it, peeling iterations, inlining a loop of one trip) grows the
module by the body's size; nesting multiplies the copies (five nested loops of 8 trips unrolled
completely are 8^5 copies of the innermost body; loops of one trip whose bodies hold two such
loops each double per level when inlined), so no per-loop limit bounds the total. Each copy is
charged here instead, in the module's annotations (`growth_of`, across passes and runs), and a
copy that would take the total past the module's budget (`budget_limit`: a floor, or so many
instructions per instruction of the module before its first copy, whichever is larger) is
refused: the loop stays a loop, which every backend runs.
"""

from __future__ import annotations

from hlofuse.ir.computation import Computation
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode

# Instructions all unrolling may add to one module (every pass, every loop, nested ones too):
# at least UNROLL_BUDGET, or UNROLL_PER_INSTRUCTION times the module's size when unrolling first
# looks at it. A threefry loop (one random draw or split) is ~25 instructions of a module and
# ~300 once unrolled; a program of 20 draws (533 instructions) creates ~12,000 of its 17,056.
# The floor is for small modules: five nested 8-trip loops in 3 KB stop at ~3,000 copies.
UNROLL_BUDGET = 8192
UNROLL_PER_INSTRUCTION = 32
GROWTH_KEY = "unroll.created"
BASE_KEY = "unroll.base"


def growth_of(module: Module) -> int:
    """Instructions copies of loop bodies have created in `module` so far."""
    used = module.annotations.get(GROWTH_KEY, 0)
    return used if isinstance(used, int) else 0


def body_size(body: Computation) -> int:
    """Instructions one copy of `body` creates (fused computations, cloned with their fusion
    instruction, included; computations a while or call refers to are shared, not cloned)."""
    total = 0
    stack = [body]
    while stack:
        comp = stack.pop()
        for instr in comp.instructions:
            if instr.opcode is not Opcode.PARAMETER or comp is not body:
                total += 1
            if instr.opcode is Opcode.FUSION:
                stack.append(instr.fused_computation)
    return total


def budget_limit(module: Module, floor: int = UNROLL_BUDGET,
                 per_instruction: int = UNROLL_PER_INSTRUCTION) -> int:
    """The most instructions unrolling may create in `module`: `floor`, or `per_instruction`
    times the module's size before its first unroll (recorded then, so the copies never raise
    their own budget)."""
    base = module.annotations.get(BASE_KEY)
    if not isinstance(base, int):
        base = sum(body_size(c) for c in module.computations)
        module.annotations[BASE_KEY] = base
    return max(floor, per_instruction * base)


def over_growth(module: Module, need: int, floor: int = UNROLL_BUDGET,
                per_instruction: int = UNROLL_PER_INSTRUCTION) -> str:
    """Why creating `need` more instructions would take `module` past its budget
    (`budget_limit`) ('' when it would not)."""
    used = growth_of(module)
    limit = budget_limit(module, floor, per_instruction)
    if used + need <= limit:
        return ""
    return (f"copying the loop's body would create {need} instructions, {used} already created "
            f"by copies in this module: more than its budget of {limit} (unroll_budget)")


def charge(module: Module, created: int) -> None:
    """Count `created` instructions against `module`'s budget."""
    module.annotations[GROWTH_KEY] = growth_of(module) + created
