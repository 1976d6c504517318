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

- `unroll_small_loops`: the trip count is known and at most the setting (0 switches the pass
  off);
- `small_loop.side_effect`: the condition has no side effect (unrolling skips its evaluations).

Every unrolled loop is recorded in the fusion trace with its trip count and whether it is a
random-number loop (`is_rng_loop`: u32 shift-left, shift-right-logical and xor, twice each).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, leaves
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.options import FusionOptions
from hlofuse.passes.fusion.trace import source_figure, trace_of
from hlofuse.passes.registry import register
from hlofuse.passes.simplify.unroll import unroll
from hlofuse.passes.simplify.while_loops import condition_of, trip_count
from hlofuse.passes.utils import each_while, has_side_effect, reachable_computations

PASS = "unroll-small-loops"
_ROTATION = (Opcode.SHIFT_LEFT, Opcode.SHIFT_RIGHT_LOGICAL, Opcode.XOR)


def _ops(comp: Computation) -> Iterator[Instruction]:
    stack = list(comp.instructions)
    while stack:
        instr = stack.pop()
        yield instr
        if instr.opcode is Opcode.FUSION:
            stack.extend(instr.fused_computation.instructions)


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
        return FusionDecision.no("the trip count is not known", "unroll_small_loops")
    if trips > limit:
        return FusionDecision.no(f"{trips} iterations, more than unroll_small_loops={limit}",
                                 "unroll_small_loops", trips=trips, limit=limit)
    if any(has_side_effect(i) for i in condition_of(w).instructions):
        return FusionDecision.no("the condition has a side effect", "small_loop.side_effect")
    return FusionDecision.ok(trips=trips)


@register(PASS)
@dataclass(frozen=True)
class UnrollSmallLoops(FusionOptions):  # type: ignore[misc]
    """Unroll loops of at most `unroll_small_loops` iterations completely (module docstring).
    Only loops it unrolls, and random-number loops it does not, are recorded."""

    name: ClassVar[str] = PASS

    def run(self, module: Module) -> bool:
        config: FusionConfig = self.config()
        if config.unroll_small_loops <= 0:
            return False
        trace = trace_of(module)
        changed = False
        for comp, w in each_while(reachable_computations(module)):
            rng = is_rng_loop(w)
            decision = small_loop_legal(w, config).with_figures(
                rng=rng, **source_figure(module, w))
            if decision:
                changed |= unroll(module, comp, w, config.unroll_small_loops,
                                  complete_only=True)
            if decision or rng:
                trace.record(PASS, w.name, w.name, decision, comp.name)
        return changed
