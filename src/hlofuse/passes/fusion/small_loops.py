"""Fusible random numbers (beyond XLA): loops of a few iterations are unrolled completely, so
their bodies become straight-line code that fuses into the kernels around them.

    while (r < 5) { x = rounds(x, r); r += 1 }        5 iterations, 3 kernels each, on the host
 -> x = rounds(rounds(rounds(rounds(rounds(x, 0), 1), 2), 3), 4)       elementwise: fused into
                                                                        its consumer's kernel

JAX lowers `threefry2x32` (every `jax.random` draw and `split`) on CPU to such a loop: 5
iterations of 4 rounds of u32 adds, rotations and xors. XLA never fuses a while, so each random
draw costs a loop of small kernels and materialises its inputs and outputs; unrolled, the bits
are computed counter-based, element by element, inside the kernel that uses them (and inside a
whole-loop kernel, per element). `rng-bit-generator` is the same computation as one op and is
lowered elementwise by the backends already.

Conditions (`small_loop_legal`, each refusal names its rule):

- `small_loop.trip_count`: the trip count is known; `unroll_small_loops`: it is at most the
  setting (0 switches the pass off);
- `small_loop.side_effect`: the condition has no side effect (unrolling skips its evaluations);
- `small_loop.cost` (profitability, `small_loop_profitable`): a random-number loop is always
  unrolled; another loop only when its body has no op that never fuses (a dot, a convolution,
  a sort, a custom call, an inner loop or branch: unrolling pays when the copies of the body
  fuse into fewer kernels, and those stay kernels of their own, as in PPO's minibatch and epoch
  loops of 4 iterations around a training step) and the unrolled code stays within
  `small_loop_max_instructions` (0 by default: random-number loops only, as measured on the
  third-party suite; see `FusionConfig`).
- `unroll_budget`: the copies, with everything unrolling has already created in the module,
  stay within the setting (nested loops multiply: five nested random-number loops of 8 trips
  are 8^5 copies of the innermost body).

Every unrolled loop is recorded in the fusion trace with its trip count and whether it is a
random-number loop (`is_rng_loop`: u32 shift-left, shift-right-logical and xor, twice each).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import ClassVar

from hlofuse.analysis.loops import condition_of, trip_count
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Category, Opcode
from hlofuse.ir.shape import ArrayShape, leaves
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.options import FusionPass
from hlofuse.passes.fusion.trace import source_figure, trace_of
from hlofuse.passes.registry import register
from hlofuse.passes.simplify.growth import budget_limit, growth_of
from hlofuse.passes.simplify.unroll import (
    over_budget,
    unroll,
    unroll_growth,
)
from hlofuse.passes.utils import each_while, has_side_effect, reachable_computations

PASS = "unroll-small-loops"
_ROTATION = (Opcode.SHIFT_LEFT, Opcode.SHIFT_RIGHT_LOGICAL, Opcode.XOR)
# ops that stay kernels of their own whatever surrounds them (library routines, opaque calls,
# nested control flow): copies of a body holding one fuse no better than the loop did
_NEVER_FUSED = frozenset(
    op for op in Opcode if op.info.category in (Category.COMPLEX, Category.OPAQUE)
) | {Opcode.WHILE, Opcode.CONDITIONAL, Opcode.SORT, Opcode.TOPK}


def _ops(comp: Computation) -> Iterator[Instruction]:
    stack = list(comp.instructions)
    while stack:
        instr = stack.pop()
        yield instr
        if instr.opcode is Opcode.FUSION:
            stack.extend(instr.fused_computation.instructions)


def _budget(config: FusionConfig) -> tuple[int, int]:
    return config.unroll_budget, config.unroll_budget_per_instruction


def is_rng_loop(w: Instruction) -> bool:
    """A while whose body looks like threefry2x32 rounds (JAX's CPU lowering of `jax.random`):
    it carries only integer arrays, and its body has u32 shift-left, shift-right-logical and
    xor, at least twice each (a loop around such rounds carries its float state too)."""
    if w.opcode is not Opcode.WHILE:
        return False
    if not all(leaf.dtype.is_integral for leaf in leaves(w.shape)):
        return False
    counts: Counter[Opcode] = Counter()
    for op in _ops(w.attrs["body"]):
        shape = op.shape
        if op.opcode in _ROTATION and isinstance(shape, ArrayShape) and \
                shape.dtype.name == "u32":
            counts[op.opcode] += 1
    return all(counts[o] >= 2 for o in _ROTATION)


def small_loop_legal(w: Instruction, config: FusionConfig) -> FusionDecision:
    trips = trip_count(w)
    limit = config.unroll_small_loops
    if trips is None:
        return FusionDecision.no("the trip count is not known", "small_loop.trip_count")
    if trips > limit:
        return FusionDecision.no(f"{trips} iterations, more than unroll_small_loops={limit}",
                                 "unroll_small_loops", trips=trips, limit=limit)
    if any(has_side_effect(i) for i in condition_of(w).instructions):
        return FusionDecision.no("the condition has a side effect", "small_loop.side_effect")
    return FusionDecision.ok(trips=trips)


def budget_decision(module: Module, w: Instruction, k: int, config: FusionConfig
                    ) -> FusionDecision:
    """Refused (`unroll_budget`) when unrolling `w` k times would take the instructions all
    unrolling has created in `module` past its budget (`unroll_budget`,
    `unroll_budget_per_instruction`)."""
    why = over_budget(module, w, k, *_budget(config))
    if why:
        return FusionDecision.no(why, "unroll_budget", instructions=unroll_growth(w, k),
                                 created=growth_of(module),
                                 limit=budget_limit(module, *_budget(config)))
    return FusionDecision.ok()


def small_loop_profitable(w: Instruction, config: FusionConfig) -> FusionDecision:
    """Random-number loops always; others when the unrolled copies can fuse (module
    docstring)."""
    if is_rng_loop(w):
        return FusionDecision.ok()
    body = list(_ops(w.attrs["body"]))
    blocker = next((i for i in body if i.opcode in _NEVER_FUSED), None)
    if blocker is not None:
        return FusionDecision.no(
            f"{blocker.name} ({blocker.opcode.value}) in the body stays a kernel of its own: "
            "the unrolled copies would fuse no better than the loop's body",
            "small_loop.cost", instruction=blocker.name)
    trips = trip_count(w) or 0
    size = trips * len(body)
    limit = config.small_loop_max_instructions
    if size > limit:
        return FusionDecision.no(
            f"{trips} copies of a {len(body)}-instruction body: {size} instructions, more "
            f"than small_loop_max_instructions={limit}", "small_loop_max_instructions",
            instructions=size, limit=limit)
    return FusionDecision.ok()


@register(PASS)
class UnrollSmallLoops(FusionPass):
    """Unroll loops of at most `unroll_small_loops` iterations completely (module docstring).
    Only loops it unrolls, loops it leaves for their cost, and random-number loops it does not
    unroll are recorded."""

    OPTIONS: ClassVar[tuple[str, ...]] = (
        "unroll_small_loops", "small_loop_max_instructions", "unroll_budget",
        "unroll_budget_per_instruction")
    name: ClassVar[str] = PASS

    def run(self, module: Module) -> bool:
        config: FusionConfig = self.run_config(module)
        if config.unroll_small_loops <= 0:
            return False
        trace = trace_of(module)
        changed = False
        for comp, w in each_while(reachable_computations(module)):
            rng = is_rng_loop(w)
            decision = small_loop_legal(w, config)
            if decision:
                cost = small_loop_profitable(w, config)
                decision = decision if cost else cost
            if decision:
                budget = budget_decision(module, w, config.unroll_small_loops, config)
                decision = decision if budget else budget
            decision = decision.with_figures(rng=rng, **source_figure(module, w))
            if decision:
                changed |= unroll(module, comp, w, config.unroll_small_loops,
                                  complete_only=True, floor=config.unroll_budget,
                                  per_instruction=config.unroll_budget_per_instruction)
            if decision or rng or decision.rule in ("small_loop.cost",
                                                    "small_loop_max_instructions",
                                                    "unroll_budget"):
                trace.record(PASS, w.name, w.name, decision, comp.name)
        return changed
