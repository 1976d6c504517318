"""`multi-output-fusion`: XLA's GpuMultiOutputFusion, era E2 (spec section 5).

Fuses without duplicating anything by giving one fusion several outputs (a root `tuple`; users
outside read them through get-tuple-element)::

    sibling:                              producer-consumer:
          p                                     p = exp(x)
        /   \\                                 /        \\
      f1     f2      ==>  f(p) -> (f1, f2)    reduce(p)   ROOT ...(p)   ==>  f(x) -> (reduce, exp)
    (p read twice)        (p read once)       (p written, then read)        (p written, not re-read)

Algorithm, per non-fusion computation: walk the post order from the back (uses before defs). For
each instruction `p` (constants and kCustom fusions skipped) first try sibling fusion among p's
users, then producer-consumer fusion of p into one of its users. Reachability is updated
after every fusion (graph.py: rows downstream of the fusion go stale and are recomputed when
asked), not rebuilt.

Sibling fusion (`fuse_siblings`), conditions in order:

* priority  `p` is a profitable shared operand (`is_profitable_operand`: not an effective scalar;
            with `mof_skip_scalar_operands=false` only scalar constants are skipped);
            siblings are stable-sorted by `fusion_priority` (MOF 2 > fusion 1 > unfused 0);
            the first of a pair must be a fusion;
* legality  both are sibling candidates (have users, fusible as a MOF root, not a nestable
            variadic reduction, a MOF only read through get-tuple-element); they are not
            connected either way ("... are connected": fusing would make a cycle); loop shapes
            compatible (`shapes_compatible_for_multi_output_fusion`); `legal_to_fuse`: no
            dynamic-update-slice root on either side ("can't fuse multiple DUSs") and the
            budget (operands+outputs, shared memory, unnested reductions).
* no profitability check beyond the shared operand (as in XLA).

Producer-consumer fusion (`producer_consumer_candidates`):

* legality  the producer is MOF-fusible (not a MOF, no in-place op, loop fusible, not
            physically transposing); a single non-MOF user was the fusion merger's business;
            the consumer is fusible as a MOF root and not read as a whole tuple (its shape
            grows), no heavy computation, loop shapes compatible;
            no other operand of the consumer is reachable from the producer ("would introduce
            a cycle when fused"); budget; IR size (`producer_consumer_merged_too_large`);
* profitability  the performance model (perf_model.py): fused time <= unfused time
            ("will execute slower if fused");
* priority  the candidate with the highest `fusion_priority` (first maximum wins).

Every decision, fused or refused, goes into the module's fusion trace (trace.py).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Protocol

from hlofuse.ir.computation import Computation
from hlofuse.ir.fusion import (
    Reorder,
    create_fusion,
    fused_root,
    is_fusion,
    is_multi_output_fusion,
    merge_fusions_multi_output,
    set_kind,
)
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import FusionKind, Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape
from hlofuse.passes.fusion.analysis import FusionAnalyses, Kept
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision, all_
from hlofuse.passes.fusion.gpu_fusible import (
    Ask,
    choose_fusion_kind,
    creates_heavy_computation,
    fusion_fits_in_budget,
    is_input_fusible_reduction,
    is_reduction_from_or_to_contiguous_dims,
)
from hlofuse.passes.fusion.graph import ReachabilityMap
from hlofuse.passes.fusion.mof_fusible import (
    is_fusible_as_multi_output_fusion_root,
    is_producer_multi_output_fusible,
    shapes_compatible_for_multi_output_fusion,
)
from hlofuse.passes.fusion.order import PostOrderKeeper
from hlofuse.passes.fusion.perf_model import fusion_is_faster, producer_consumer_merged_too_large
from hlofuse.passes.fusion.trace import FusionTrace, TraceEvent, trace_of
from hlofuse.passes.utils import non_fusion_computations

PASS_NAME = "multi-output-fusion"



class Recorder(Protocol):
    """Where the pass's decisions go (the module's fusion trace)."""

    def __call__(self, producer: Instruction, consumer: Instruction, decision: FusionDecision,
                 fused: bool) -> None: ...

    def refused_siblings(self, a: Instruction, siblings: list[Instruction],
                         candidacy: dict[Instruction, FusionDecision]) -> None:
        """Each of `siblings` refused as a sibling of `a`: `candidacy[b]` when that refuses,
        else because the two are connected (tuple / get-tuple-element siblings unrecorded).
        `candidacy` must not change its answers for these siblings afterwards."""


class TraceRecorder:
    """A `Recorder` writing into `trace` for computation `comp`."""

    def __init__(self, trace: FusionTrace, comp: Computation) -> None:
        self.trace, self.comp_name = trace, comp.name

    def __call__(self, producer: Instruction, consumer: Instruction, decision: FusionDecision,
                 fused: bool) -> None:
        self.trace.record(PASS_NAME, consumer.name, producer.name, decision, self.comp_name,
                          fused)

    def refused_siblings(self, a: Instruction, siblings: list[Instruction],
                         candidacy: dict[Instruction, FusionDecision]) -> None:
        a_name, comp_name = a.name, self.comp_name
        names = list(map(_NAME, siblings))  # names and opcodes now: later passes rename
        opcodes = list(map(_OPCODE, siblings))
        decisions = list(map(candidacy.__getitem__, siblings))

        def expand() -> list[TraceEvent]:
            events = []
            for name, opcode, d in zip(names, opcodes, decisions):
                if opcode is Opcode.TUPLE or opcode is Opcode.GET_TUPLE_ELEMENT:
                    continue
                if d:
                    d = FusionDecision.no(f"{a_name} and {name} are connected",
                                          "multi_output.connected")
                events.append(TraceEvent(PASS_NAME, a_name, name, "refused", d.reason or "",
                                         d.rule, dict(d.figures), comp_name))
            return events

        self.trace.defer(expand)


_NAME = attrgetter("name")
_OPCODE = attrgetter("opcode")


# ----- priority ------------------------------------------------------------------------------


def fusion_priority(instr: Instruction) -> int:
    """FusionPriority: grow existing multi-output fusions first, then fusions, then others."""
    if is_multi_output_fusion(instr):
        return 2
    return 1 if is_fusion(instr) else 0


def is_profitable_operand(instr: Instruction, config: FusionConfig) -> FusionDecision:
    """IsProfitableOperand: a shared effective scalar saves no memory read."""
    shape = instr.shape
    scalar = isinstance(shape, ArrayShape) and shape.is_effective_scalar
    if scalar and (config.mof_skip_scalar_operands or instr.opcode is Opcode.CONSTANT):
        return FusionDecision.no(f"shared operand {instr.name} is an effective scalar",
                                 "mof_skip_scalar_operands")
    return FusionDecision.ok()


# ----- legality ------------------------------------------------------------------------------


def is_nestable_variadic_reduction(instr: Instruction, config: FusionConfig) -> bool:
    """A variadic reduce the tiled emitter does not handle (emitted as a nested loop)."""
    target = fused_root(instr) if is_fusion(instr) else instr
    return (target.opcode is Opcode.REDUCE and isinstance(target.shape, TupleShape)
            and not is_reduction_from_or_to_contiguous_dims(target, config))


def _mof_root(instr: Instruction, config: FusionConfig,
              analyses: FusionAnalyses | None) -> bool:
    if analyses is None:
        return is_fusible_as_multi_output_fusion_root(instr, config)
    return bool(analyses.ask(is_fusible_as_multi_output_fusion_root, instr))


def _ask(analyses: FusionAnalyses | None) -> Ask | None:
    return analyses.ask if analyses is not None else None


def _fits(a: Instruction, b: Instruction, config: FusionConfig,
          analyses: FusionAnalyses | None) -> FusionDecision:
    if analyses is None:
        return fusion_fits_in_budget(a, b, config, False)
    return analyses.fits_in_budget(a, b, False)


def is_sibling_candidate(instr: Instruction, config: FusionConfig,
                         analyses: FusionAnalyses | None = None) -> FusionDecision:
    """IsSiblingFusionCandidate. (`analyses`: the pass run's memo, same answers.)"""
    if not instr.users:
        return FusionDecision.no(f"{instr.name} has no users", "multi_output.no_users")
    if not _mof_root(instr, config, analyses):
        return FusionDecision.no(f"{instr.name} is not fusible as a multi-output fusion root",
                                 "multi_output.root")
    if is_nestable_variadic_reduction(instr, config):
        return FusionDecision.no("merging with variadic reductions is not supported yet",
                                 "multi_output.variadic_reduction")
    if read_whole(instr):
        return FusionDecision.no(f"{instr.name} is a multi-output fusion read whole",
                                 "multi_output.read_whole")
    return FusionDecision.ok()


def read_whole(instr: Instruction) -> bool:
    """A tuple-shaped instruction some user reads as a whole tuple: adding an output would
    change the shape that user sees (XLA requires get-tuple-element users)."""
    return isinstance(instr.shape, TupleShape) and any(
        u.opcode is not Opcode.GET_TUPLE_ELEMENT for u in instr.users)


def _root_is_dus(instr: Instruction) -> bool:
    return is_fusion(instr) and fused_root(instr).opcode is Opcode.DYNAMIC_UPDATE_SLICE


def legal_to_fuse(a: Instruction, b: Instruction, config: FusionConfig,
                  analyses: FusionAnalyses | None = None) -> FusionDecision:
    """LegalToFuse: the in-place DUS emitter supports one DUS root only; then the budget."""
    if _root_is_dus(a) or _root_is_dus(b):
        return FusionDecision.no("can't fuse multiple DUSs", "multi_output.multiple_dus")
    return _fits(a, b, config, analyses)


def siblings_legal(a: Instruction, b: Instruction, reach: ReachabilityMap,
                   config: FusionConfig, analyses: FusionAnalyses | None = None
                   ) -> FusionDecision:
    return all_(
        lambda: is_sibling_candidate(b, config, analyses),
        lambda: FusionDecision.check(not reach.is_connected(a, b),
                                     f"{a.name} and {b.name} are connected",
                                     "multi_output.connected"),
        lambda: shapes_compatible_for_multi_output_fusion(a, b, config, _ask(analyses)),
        lambda: legal_to_fuse(a, b, config, analyses),
    )


def _operand_reachable_from_producer(producer: Instruction, consumer: Instruction,
                                     reach: ReachabilityMap) -> bool:
    for operand in consumer.operands:
        if operand not in reach and operand.opcode is Opcode.GET_TUPLE_ELEMENT:
            operand = operand.operand(0)
        if operand is not producer and reach.is_reachable(producer, operand):
            return True
    return False


def _budget(producer: Instruction, consumer: Instruction, config: FusionConfig,
            analyses: FusionAnalyses | None = None) -> FusionDecision:
    d = _fits(producer, consumer, config, analyses)
    if d:
        return d
    return FusionDecision.no(f"{producer.name} {consumer.name} would be too large of a fusion: "
                             f"{d.reason}", d.rule, **d.figures)


def producer_consumer_legal(producer: Instruction, consumer: Instruction,
                            reach: ReachabilityMap, config: FusionConfig,
                            analyses: FusionAnalyses | None = None) -> FusionDecision:
    """The legality half of GetProducerConsumerMultiOutputFusionCandidates, per consumer."""
    return all_(
        lambda: FusionDecision.check(
            _mof_root(consumer, config, analyses),
            "consumer not eligible as multi-output fusion root.", "multi_output.root"),
        lambda: FusionDecision.check(
            not read_whole(consumer), f"{consumer.name} is a multi-output fusion read whole",
            "multi_output.read_whole"),
        lambda: FusionDecision.check(
            not creates_heavy_computation(
                producer, consumer, config,
                analyses.is_heavy(producer) if analyses is not None else None),
            "the fusion would create a heavy computation", "max_inputs_per_output"),
        lambda: shapes_compatible_for_multi_output_fusion(producer, consumer, config,
                                                          _ask(analyses)),
        lambda: FusionDecision.check(
            not _operand_reachable_from_producer(producer, consumer, reach),
            f"{producer.name} {consumer.name} would introduce a cycle when fused",
            "multi_output.cycle"),
        lambda: _budget(producer, consumer, config, analyses),
        lambda: producer_consumer_merged_too_large(producer, consumer, config, analyses),
    )


# ----- profitability -------------------------------------------------------------------------


def producer_consumer_profitable(producer: Instruction, consumer: Instruction,
                                 config: FusionConfig,
                                 analyses: FusionAnalyses | None = None) -> FusionDecision:
    if not config.mof_use_cost_model:
        return FusionDecision.ok()
    return fusion_is_faster(producer, [consumer], config, multi_output=True,
                            analyses=analyses)


def producer_consumer_candidates(producer: Instruction, reach: ReachabilityMap,
                                 config: FusionConfig, record: Recorder,
                                 analyses: FusionAnalyses | None = None) -> list[Instruction]:
    """GetProducerConsumerMultiOutputFusionCandidates."""
    ok: FusionDecision = (is_producer_multi_output_fusible(producer, config) if analyses is None
                          else analyses.ask(is_producer_multi_output_fusible, producer))
    if not ok:
        users = _kernel_users(producer) if producer.is_kernel else []
        for consumer in users if len(users) > 1 else []:
            record(producer, consumer, ok, False)
        return []
    if producer.user_count == 1 and not is_multi_output_fusion(producer.users[0]):
        return []  # the fusion merger already considered (and refused) this merge
    out: list[Instruction] = []
    for consumer in producer.users:
        if consumer.opcode is Opcode.GET_TUPLE_ELEMENT or consumer.opcode is Opcode.TUPLE:
            continue  # never kernels; not worth a trace line
        decision = producer_consumer_legal(producer, consumer, reach, config, analyses)
        if decision:
            decision = producer_consumer_profitable(producer, consumer, config, analyses)
        if decision:
            out.append(consumer)
        else:
            record(producer, consumer, decision, False)
    return out


def _kernel_users(instr: Instruction) -> list[Instruction]:
    """Users that could host the producer: not get-tuple-element / tuple plumbing."""
    users: list[Instruction] = []
    for u in instr.users:
        if u.opcode is Opcode.GET_TUPLE_ELEMENT:
            users.extend(v for v in u.users if v.opcode is not Opcode.TUPLE and v not in users)
        elif u.opcode is not Opcode.TUPLE and u not in users:
            users.append(u)
    return users


def select_preferred(candidates: list[Instruction]) -> Instruction | None:
    """SelectPreferredFusionCandidate: highest priority, first maximum wins."""
    best: Instruction | None = None
    for c in candidates:
        if best is None or fusion_priority(c) > fusion_priority(best):
            best = c
    return best


# ----- the transformation --------------------------------------------------------------------


def fuse_siblings(parent: Instruction, reach: ReachabilityMap, config: FusionConfig,
                  record: Recorder, reorder: Reorder | None = None,
                  analyses: FusionAnalyses | None = None) -> bool:
    """FuseSiblings(parent): merge users of `parent` pairwise into multi-output fusions.

    Every pair is decided as `siblings_legal` decides it, in the same order, but K siblings
    make K^2/2 pairs (an unrolled loop's steps all reading one input are all connected), so
    a refused pair costs little: a sibling's candidacy is asked once and remembered until the
    next merge (the only change this function makes to the graph), connectivity to `a` is
    one function with a's reachability row looked up once, and a run of refusals goes into
    the trace as one deferred batch (`Recorder.refused_siblings`). Only a pair that passes
    both goes through the remaining checks."""
    if not is_profitable_operand(parent, config):
        return False
    siblings = sorted(parent.users, key=fusion_priority, reverse=True)  # stable
    changed = False
    candidacy: dict[Instruction, FusionDecision] = {}
    admitted: dict[Instruction, bool] = {}  # bool(candidacy[x]), without __bool__ per pair

    def ask(x: Instruction) -> bool:
        d = candidacy[x] = is_sibling_candidate(x, config, analyses)
        ok = admitted[x] = d.reason is None
        return ok

    i = 0
    while i < len(siblings):
        a = siblings[i]
        if not is_fusion(a):
            i += 1
            continue
        ok = admitted.get(a)
        if not (ask(a) if ok is None else ok):
            i += 1
            continue
        j = i + 1
        while j < len(siblings):
            start = j
            j = reach.first_unconnected(a, siblings, start, admitted, ask)
            if j > start:  # refused for candidacy or connectivity
                record.refused_siblings(a, siblings[start:j], candidacy)
            if j == len(siblings):
                break
            b = siblings[j]
            decision = shapes_compatible_for_multi_output_fusion(a, b, config, _ask(analyses))
            if decision:
                decision = legal_to_fuse(a, b, config, analyses)
            if decision:
                decision = FusionDecision.ok()  # as all_ in siblings_legal: no figures
            if not decision:
                if b.opcode not in (Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT):
                    record(b, a, decision, False)
                j += 1
                continue
            record(b, a, decision.with_figures(kind="sibling", shared=parent.name), True)
            was_input = is_fusion(b) and b.fusion_kind == FusionKind.INPUT
            if reorder is None:
                merge_fusions_multi_output(a, b)
            else:
                merge_fusions_multi_output(a, b, reorder=reorder)
            if analyses is not None:
                analyses.forget(b)
                _forget_around(analyses, a)
            if was_input:
                set_kind(a, FusionKind.INPUT)
            del siblings[j]
            changed = True
            reach.update_fusion(a)
            candidacy = {}  # a new dict: deferred trace batches keep the old one's answers
            admitted = {}
        i += 1
    return changed


def _forget_around(analyses: FusionAnalyses, fusion: Instruction) -> None:
    """A merge into `fusion` changed it and pointed users (its own and the absorbed one's) at
    its get-tuple-elements: what the run remembers about any of them is stale."""
    analyses.forget(fusion)
    for u in fusion.users:
        analyses.forget(u)
        for v in u.users:
            analyses.forget(v)


def fuse_producer_into_consumer(producer: Instruction, consumer: Instruction,
                                config: FusionConfig, reorder: Reorder | None = None
                                ) -> Instruction:
    """Make `producer` an extra output of `consumer` (wrapping the consumer if needed)."""
    if not is_fusion(consumer):
        consumer = create_fusion(consumer, choose_fusion_kind(producer, consumer, config))
    if is_fusion(producer) and producer.fusion_kind == FusionKind.INPUT \
            and is_input_fusible_reduction(producer, config):
        set_kind(consumer, FusionKind.INPUT)
    if reorder is None:
        merge_fusions_multi_output(consumer, producer)
    else:
        merge_fusions_multi_output(consumer, producer, reorder=reorder)
    return consumer


def run_on_computation(comp: Computation, config: FusionConfig, record: Recorder,
                       kept: Kept | None = None) -> bool:
    """DoMultiOutputFusion for one computation (`kept`: the pass run's per-fusion entries)."""
    post_order = comp.post_order()
    reach = ReachabilityMap(comp, post_order)
    order = PostOrderKeeper(comp)
    analyses = FusionAnalyses(config, kept)
    changed = False
    for producer in reversed(post_order):
        if producer.parent is not comp:
            continue  # merged away earlier in this walk
        if producer.opcode is Opcode.CONSTANT:
            continue
        if is_fusion(producer) and producer.fusion_kind == FusionKind.CUSTOM:
            continue
        if fuse_siblings(producer, reach, config, record, order.restore, analyses):
            changed = True
        if producer.parent is not comp:
            continue
        candidates = producer_consumer_candidates(producer, reach, config, record, analyses)
        consumer = select_preferred(candidates)
        if consumer is None:
            continue
        record(producer, consumer, FusionDecision.ok(kind="producer-consumer"), True)
        fusion = fuse_producer_into_consumer(producer, consumer, config, order.restore)
        analyses.forget(producer)
        analyses.forget(consumer)
        _forget_around(analyses, fusion)
        changed = True
        reach.update_fusion(fusion)
    return changed


def run_multi_output_fusion(module: Module, config: FusionConfig) -> bool:
    """One run of multi-output fusion over `module` (the pass `core_passes.MultiOutputFusion`),
    its decisions recorded in the module's trace."""
    trace = trace_of(module)
    kept = Kept.resume(module, config)
    changed = False
    for comp in non_fusion_computations(module):
        record = TraceRecorder(trace, comp)
        changed |= run_on_computation(comp, config, record, kept)
    kept.close()
    return changed
