"""Priority fusion (XLA GPU's fusion since 2024, spec section 8; `priority_fusion.cc`): producers
in a queue ordered by the time fusing them into all their users saves, fused greedily.

    queue = every fusible producer P with users, keyed by priority(P) (ties: the later one)
    while queue:  P = the largest
        fuse P into each of its users (bitcast users excepted): a fusion P is merged in,
        another P is cloned in; a user that is not a fusion is wrapped into one
        P dies once unused; the new fusions and their operands get new priorities
    then every constant of at most one element is fused into each of its fusible users

priority(P) (`CalculateProducerPriority`): +inf for a bitcast, -inf (never queued) for a
constant, a producer without users, one whose users are all bitcasts, or one some non-bitcast
user of which `can_fuse` refuses; else `unfused - fused` of the performance model
(`perf_model_e3.estimate`, spec 7.2): the estimated microseconds saved by fusing P into all its
users. A producer whose saving is negative is not queued ("fuse into all users or none").

Legality (`can_fuse`, spec 8.4, in XLA's order; each refusal names its rule):
`priority.producer_not_fusible` / `priority.consumer_not_fusible` (XLA GPU's local IsFusible:
elementwise ops, non-custom fusions, copy, iota, constant, reduce, bitcast, broadcast,
concatenate, dynamic-(update-)slice, gather, pad, reduce-window, reshape, reverse, scatter,
slice, transpose), `priority.bitcast_consumer`, `priority.coalescing` (a tiled transpose is
fused only into one-operand epilogue ops: a stand-in for the model's coalescing analysis, which
rates a consumer reading the transposed output as uncoalesced), `priority.scatter` (nothing
into a scatter's in-place operand), `priority.reduce_into_reduce` (both sides hold a reduce of
at least 16 inputs per output), then `is_producer_consumer_fusible(e3=True)` (a reduction may
take an epilogue of one-operand ops; multi-output producers, constants), the budget
(`fusion_fits_in_budget`), `producer_consumer_merged_too_large`, `priority.root` and the in-
place rule. Priority (the model) and legality are separate functions; the kind of a new fusion
is `kInput` when either side is input-fusible (a reduction, a tiled transpose: XLA's emitter
kind), else `kLoop`.

Every fusion step is a trace event (`explain --pipeline xla-priority`): the step number, the
producer's estimated times unfused and fused and the saving; producers that stay unfused are
recorded at the end, once per edge (`refusals`): each user with the refusal `can_fuse` gives
it, or every user with the negative saving.
"""

from __future__ import annotations

import heapq
import math
from typing import ClassVar

from hlofuse.ir.computation import Computation
from hlofuse.ir.fusion import create_fusion, fuse_instruction, is_fusion, set_kind
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import FusionKind, Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.fusion import perf_model_cpu, perf_model_e3
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.gpu_fusible import (
    fusion_fits_in_budget,
    is_epilogue,
    is_input_fusible,
    is_input_fusible_transpose,
    is_producer_consumer_fusible,
)
from hlofuse.passes.fusion.instruction_fusion import fusible_computations
from hlofuse.passes.fusion.options import FUSIBLE, HOST_MODEL, INDEXING, PERF_MODEL, FusionPass
from hlofuse.passes.fusion.perf_model import VersionMemo, producer_consumer_merged_too_large
from hlofuse.passes.fusion.predicates import is_fusible, should_fuse_in_place_op
from hlofuse.passes.fusion.trace import FusionTrace, trace_of
from hlofuse.passes.registry import register

PASS = "priority-fusion"
# XLA GPU's local IsFusible (priority_fusion.cc): besides elementwise ops and fusions
_GPU_FUSIBLE = frozenset({
    Opcode.COPY, Opcode.IOTA, Opcode.CONSTANT, Opcode.REDUCE, Opcode.BITCAST, Opcode.BROADCAST,
    Opcode.CONCATENATE, Opcode.DYNAMIC_SLICE, Opcode.DYNAMIC_UPDATE_SLICE, Opcode.GATHER,
    Opcode.PAD, Opcode.REDUCE_WINDOW, Opcode.RESHAPE, Opcode.REVERSE, Opcode.SCATTER,
    Opcode.SLICE, Opcode.TRANSPOSE})
_NOT_QUEUED = frozenset({Opcode.PARAMETER, Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT})
SIGNIFICANT_REDUCE = 16  # input elements per output element that make a reduce "significant"


def gpu_fusible(instr: Instruction) -> bool:
    if not is_fusible(instr):
        return False
    if instr.opcode is Opcode.FUSION:
        return instr.fusion_kind != FusionKind.CUSTOM
    return instr.is_elementwise or instr.opcode in _GPU_FUSIBLE


def _significant_reduce(instr: Instruction) -> bool:
    inner = instr.fused_computation.instructions if is_fusion(instr) else [instr]
    for i in inner:
        if i.opcode is Opcode.REDUCE and isinstance(i.shape, ArrayShape):
            src = i.operand(0).shape
            if isinstance(src, ArrayShape) and src.size >= SIGNIFICANT_REDUCE * max(
                    i.shape.size, 1):
                return True
    return False


def _scatter_operand(producer: Instruction, consumer: Instruction) -> bool:
    """Does `producer` feed the in-place operand of a scatter `consumer` (or fusion rooted at
    one)?"""
    if consumer.opcode is Opcode.SCATTER:
        return consumer.operand(0) is producer
    if is_fusion(consumer) and consumer.fused_computation.root.opcode is Opcode.SCATTER:
        base = consumer.fused_computation.root.operand(0)
        return base.opcode is Opcode.PARAMETER and \
            consumer.operand(base.parameter_number or 0) is producer
    return False


def can_fuse(producer: Instruction, consumer: Instruction, config: FusionConfig,
             memo: VersionMemo | None = None) -> FusionDecision:
    """PriorityFusionQueue::CanFuse (spec 8.4), in order (`memo`: the queue run's, for the
    IR-size check's walks of the fusions)."""
    if not gpu_fusible(producer):
        return FusionDecision.no("the producer is not fusible", "priority.producer_not_fusible")
    if not gpu_fusible(consumer):
        return FusionDecision.no("the consumer is not fusible", "priority.consumer_not_fusible")
    if consumer.opcode is Opcode.BITCAST:
        return FusionDecision.no("not fusing into a single bitcast as consumer",
                                 "priority.bitcast_consumer")
    if _scatter_operand(producer, consumer):
        return FusionDecision.no("a scatter's in-place operand is not fused into it",
                                 "priority.scatter")
    if is_input_fusible_transpose(producer, config) and not is_epilogue(consumer):
        return FusionDecision.no("the consumer would read the transpose's output uncoalesced",
                                 "priority.coalescing")
    significant = _significant_reduce if memo is None else (
        lambda i: bool(memo.memo(_significant_reduce, i)))
    if significant(producer) and significant(consumer):
        return FusionDecision.no("both the producer and the consumer contain a reduce",
                                 "priority.reduce_into_reduce")
    decision = is_producer_consumer_fusible(producer, consumer, config, e3=True)
    if not decision:
        return decision
    decision = fusion_fits_in_budget(
        consumer, producer, config, True,
        usage=None if memo is None else (lambda i: memo.usage(i, config)))
    if not decision:
        return decision
    decision = producer_consumer_merged_too_large(producer, consumer, config, memo,
                                                  count_splits=False)
    if not decision:
        return decision
    if producer.is_root:
        return FusionDecision.no("not fusing into the output of the root instruction",
                                 "priority.root")
    return should_fuse_in_place_op(producer, consumer)


def priority(producer: Instruction, config: FusionConfig,
             memo: perf_model_cpu.Memo | None = None
             ) -> tuple[float, FusionDecision, perf_model_e3.Estimate | None]:
    """CalculateProducerPriority: (priority, why, the estimate when one was made)."""
    if producer.opcode is Opcode.BITCAST:
        return math.inf, FusionDecision.ok(), None
    if producer.opcode is Opcode.CONSTANT:
        return -math.inf, FusionDecision.no("constants are fused at the end, when small",
                                            "priority.constant"), None
    users = list(dict.fromkeys(producer.users))
    if not users:
        return -math.inf, FusionDecision.no("No users to fuse", "priority.no_users"), None
    others = [u for u in users if u.opcode is not Opcode.BITCAST]
    if not others:
        return -math.inf, FusionDecision.no("not fusing because there are only bitcast users",
                                            "priority.only_bitcast_users"), None
    for u in others:
        decision = can_fuse(producer, u, config, memo)
        if not decision:
            return -math.inf, decision, None
    if config.priority_cost_model == "cpu":
        est = perf_model_cpu.estimate(producer, users, config, memo)
    else:
        est = perf_model_e3.estimate(producer, users, config, memo)
    figures = {"unfused_us": round(est.unfused_us, 4), "fused_us": round(est.fused_us, 4),
               "saving_us": round(est.saving_us, 4)}
    if est.saving_us < 0:
        return est.saving_us, FusionDecision.no(
            f"fusing into all {len(users)} user(s) is estimated slower "
            f"({est.fused_us:.3f} us against {est.unfused_us:.3f} us)",
            "priority.not_profitable", **figures), est
    return est.saving_us, FusionDecision.ok(**figures), est


def _fuse(producer: Instruction, consumer: Instruction, config: FusionConfig) -> Instruction:
    """Fuse `producer` into `consumer` (wrapped first when not a fusion); returns the fusion."""
    kind = FusionKind.INPUT if is_input_fusible(consumer, config) or is_input_fusible(
        producer, config) else FusionKind.LOOP
    if is_fusion(consumer):
        if consumer.fusion_kind != kind and consumer.fusion_kind != FusionKind.INPUT:
            set_kind(consumer, kind)
        fusion = consumer
    else:
        fusion = create_fusion(consumer, kind)
    fuse_instruction(fusion, producer)
    return fusion


class _Queue:
    """The priority queue of one computation (spec 8.2, 8.5)."""

    def __init__(self, comp: Computation, config: FusionConfig, trace: FusionTrace) -> None:
        self.comp, self.config, self.trace = comp, config, trace
        self.heap: list[tuple[float, int, int, Instruction]] = []
        self.version: dict[int, int] = {}
        self.uid: dict[int, int] = {}
        self.why: dict[int, tuple[Instruction, FusionDecision]] = {}
        self.estimate: dict[int, perf_model_e3.Estimate | None] = {}
        self.steps = 0
        self.run_number = 1
        self.memo = perf_model_cpu.Memo()  # (the models' and the IR-size check's; one run)

    def candidate(self, instr: Instruction) -> bool:
        return instr.parent is self.comp and instr.opcode not in _NOT_QUEUED and \
            bool(instr.users) and gpu_fusible(instr)

    def update(self, instr: Instruction) -> None:
        key = id(instr)
        self.version[key] = self.version.get(key, 0) + 1
        if key not in self.uid:
            self.uid[key] = len(self.uid)
        if not self.candidate(instr):
            return
        prio, why, est = priority(instr, self.config, self.memo)
        if prio < 0 or not why:
            self.why[key] = (instr, why)
            return
        self.why.pop(key, None)
        self.estimate[key] = est
        heapq.heappush(self.heap, (-prio, -self.uid[key], self.version[key], instr))

    def run(self) -> bool:
        for instr in list(self.comp.instructions):
            self.update(instr)
        changed = False
        while self.heap:
            neg, _, version, producer = heapq.heappop(self.heap)
            if version != self.version.get(id(producer)) or producer.parent is not self.comp:
                continue
            if producer.opcode is Opcode.BITCAST:
                consumers = [u for u in dict.fromkeys(producer.users)
                             if can_fuse(producer, u, self.config, self.memo)]
            else:
                consumers = [u for u in dict.fromkeys(producer.users)
                             if u.opcode is not Opcode.BITCAST]
            if not consumers:
                continue
            if not self.steps:  # (which run of the pass over this computation: explain)
                self.run_number = 1 + sum(
                    1 for e in self.trace if e.pass_name == PASS and e.computation ==
                    self.comp.name and e.verdict == "fused" and e.figures.get("step") == 1)
            self.steps += 1
            touched: list[Instruction] = []
            est = self.estimate.get(id(producer))
            figures: dict[str, object] = {
                "step": self.steps, "saving_us": round(-neg, 4) if math.isfinite(neg) else "inf",
                "users": len(consumers), "run": self.run_number}
            if est is not None:
                figures.update(unfused_us=round(est.unfused_us, 4),
                               fused_us=round(est.fused_us, 4))
            for consumer in consumers:
                name = consumer.name
                fusion = _fuse(producer, consumer, self.config)
                self.trace.record(PASS, name, producer.name,
                                  FusionDecision.ok(**figures, into=fusion.name), self.comp.name)
                touched.append(fusion)
            changed = True
            marked = dict.fromkeys(touched)
            for f in touched:
                for o in f.operands:
                    if o.opcode not in (Opcode.CONSTANT, Opcode.GET_TUPLE_ELEMENT) and \
                            gpu_fusible(o):
                        marked[o] = None
            if producer.parent is self.comp:
                marked[producer] = None
            for instr in marked:
                self.update(instr)
        changed |= self.small_constants()
        for instr, why in self.why.values():
            if instr.parent is self.comp and instr.users and why.rule not in (
                    "priority.constant", "priority.no_users"):
                for user_name, decision in self.refusals(instr, why):
                    self.trace.record(PASS, user_name, instr.name, decision, self.comp.name,
                                      False)
        return changed

    def refusals(self, producer: Instruction, why: FusionDecision
                 ) -> list[tuple[str, FusionDecision]]:
        """(consumer, decision) for each edge of a producer left unfused, so each boundary
        names its own reason: every user for a negative saving ("all or none"), each user
        `can_fuse` refuses for a refusal; the producer itself for a rule about it alone."""
        others = [u for u in dict.fromkeys(producer.users) if u.opcode is not Opcode.BITCAST]
        if why.rule == "priority.not_profitable":
            return [(u.name, why) for u in others]
        out = [(u.name, d) for u in others
               if not (d := can_fuse(producer, u, self.config, self.memo))]
        return out or [(producer.name, why)]

    def small_constants(self) -> bool:
        """Every constant of at most one element into each fusible user (spec 8.5 step 3)."""
        changed = False
        for c in [i for i in self.comp.instructions if i.opcode is Opcode.CONSTANT]:
            shape = c.shape
            if not isinstance(shape, ArrayShape) or shape.size > 1:
                continue
            for user in list(dict.fromkeys(c.users)):
                if c.parent is not self.comp or not gpu_fusible(user) or \
                        user.opcode is Opcode.BITCAST or _scatter_operand(c, user):
                    continue
                _fuse(c, user, self.config)
                changed = True
        return changed


@register(PASS)
class PriorityFusion(FusionPass):
    """XLA GPU's priority fusion (module docstring); its options are the settings in
    OPTIONS."""

    OPTIONS: ClassVar[tuple[str, ...]] = ("memory_compute_parallelism", "priority_cost_model",
                                          *FUSIBLE, *INDEXING, *PERF_MODEL, *HOST_MODEL)
    name: ClassVar[str] = PASS

    def run(self, module: Module) -> bool:
        config: FusionConfig = self.run_config(module)
        trace = trace_of(module)
        changed = False
        for comp in fusible_computations(module):
            changed |= _Queue(comp, config, trace).run()
        return changed
