"""`fusion-merger`: merge a loop fusion into *all* of its users, or into none (XLA's
FusionMerger, the E2 2022 "bytes transferred" version; spec section 4.3).

    p ──▶ F ──▶ A            F's result is written once and read by A and B.
            └─▶ B            Merged: A and B each recompute F from p, F disappears:

    p ──▶ A{F}               bytes: current = read(F) + write(F) * (users + 1)
     └──▶ B{F}                      merged  = read(F) * users      ratio = merged / current

Conditions, in order (first failure is the reason recorded in the trace, with the figures):

 1. F has users                                   "fusion has no users"
 2. F is a single-output loop fusion              "not a loop fusion"
 3. every user: not a bitcast                     "not fusing bitcast ops"
    and is_producer_consumer_fusible(F, user)
 4. a reduction user and F transposes >= 50% of its data   "would read mostly uncoalesced"
    (setting transposes_most_data)
 5. merged/current bytes ratio <= 1.10            (merger_bytes_ratio)
 6. no GPU-expensive fused op, unless F has one user or (ratio < 0.3 and current > 1024 B),
    and no user reuses F's elements               "fusion contains an expensive instruction"
 7. per user: the fused emitter stays efficient (code duplication) and the fusion fits the
    budget (operands+outputs, shared memory, unnested reductions)

merger_version="2023" (spec 4.4) keeps 1-4, then per user the budget, XLA's IR-size guard
(ProducerConsumerMergedTooLarge) and the first GpuPerformanceModel ("will execute slower if
fused"; perf_model.py) instead of 5-7.
"""

from __future__ import annotations

from typing import ClassVar

from hlofuse.ir.fusion import (
    create_fusion,
    fuse_instruction,
    fused_instructions,
    is_fusion,
    is_multi_output_fusion,
)
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import FusionKind, Opcode
from hlofuse.ir.shape import TupleShape, leaves
from hlofuse.passes.fusion.analysis import FusionAnalyses, Kept
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.gpu_fusible import (
    choose_fusion_kind,
    fusion_fits_in_budget,
    is_input_fusible_reduction,
    is_physically_transposing,
    is_producer_consumer_fusible,
)
from hlofuse.passes.fusion.indexing import FusionNodeIndexingEvaluation
from hlofuse.passes.fusion.instruction_fusion import fusible_computations
from hlofuse.passes.fusion.options import FUSIBLE, INDEXING, FusionPass
from hlofuse.passes.fusion.perf_model import fusion_is_faster, producer_consumer_merged_too_large
from hlofuse.passes.fusion.predicates import (
    is_expensive,
    reevaluated_ops,
    rereads_operand,
    reuses_operand_elements,
)
from hlofuse.passes.fusion.trace import trace_of
from hlofuse.passes.registry import register

# ----- bytes -------------------------------------------------------------------------------



def bytes_read_by_parameter(param: Instruction) -> int:
    """CalculateBytesReadByFusionParameter: a value only sliced counts the slices' bytes."""
    values = ([u for u in param.users if u.opcode is Opcode.GET_TUPLE_ELEMENT]
              if isinstance(param.shape, TupleShape) else [param])
    total = 0
    for v in values:
        if v.users and all(u.opcode in (Opcode.SLICE, Opcode.DYNAMIC_SLICE) for u in v.users):
            total += sum(u.shape.nbytes for u in v.users)
        else:
            total += v.shape.nbytes
    return total


def bytes_read(fusion: Instruction) -> int:
    return sum(bytes_read_by_parameter(p) for p in fusion.fused_computation.parameters)


def bytes_written(fusion: Instruction) -> int:
    root = fusion.fused_computation.root
    if root.opcode is Opcode.TUPLE:
        return sum(o.shape.nbytes for o in root.operands)
    return root.shape.nbytes


def current_bytes_transferred(fusion: Instruction) -> int:
    return bytes_read(fusion) + bytes_written(fusion) * (fusion.user_count + 1)


def merged_bytes_transferred(fusion: Instruction) -> int:
    return bytes_read(fusion) * fusion.user_count


def transposes_most_data(fusion: Instruction, threshold: float) -> bool:
    """TransposesMostData: physically transposing fused ops cover >= threshold of the output."""
    total = max(1, sum(s.size for s in leaves(fusion.shape)))
    score = 0.0
    for instr in fused_instructions(fusion):
        if is_physically_transposing(instr):
            score += sum(s.size for s in leaves(instr.shape)) / total
            if score >= threshold:
                return True
    return False


def fused_ir_emitter_inefficient(consumer: Instruction, producer: Instruction,
                                 config: FusionConfig,
                                 analyses: FusionAnalyses | None = None) -> bool:
    """FusedIrEmitter::IsFusedIrEmitterInefficient(consumer, producer)."""
    if not is_fusion(consumer):
        return False
    eval_consumer = (FusionNodeIndexingEvaluation(consumer) if analyses is None
                     else analyses.indexing(consumer))
    if not is_fusion(producer):
        return not eval_consumer.check_code_duplication(producer, config)
    emitted = eval_consumer.emitted_instructions(producer)
    eval_producer = FusionNodeIndexingEvaluation(producer, emitted)
    return eval_producer.max_code_duplication_too_high(config)


# ----- the decision ------------------------------------------------------------------------


def should_merge(fusion: Instruction, config: FusionConfig,
                 analyses: FusionAnalyses | None = None) -> FusionDecision:
    """May `fusion` be merged into all of its users? (legality, then profitability)
    `analyses`: the pass run's memo of per-fusion facts (the same answers)."""
    if not fusion.users:
        return FusionDecision.no("fusion has no users", "fusion_merger.no_users")
    if fusion.fusion_kind != FusionKind.LOOP or is_multi_output_fusion(fusion):
        return FusionDecision.no("not a loop fusion", "fusion_merger.not_loop")
    ask = analyses.ask if analyses is not None else None
    has_reduction_user = False
    for user in fusion.users:
        if user.opcode is Opcode.BITCAST:
            return FusionDecision.no("not fusing bitcast ops", "fusion_merger.bitcast")
        decision = is_producer_consumer_fusible(fusion, user, config, ask)
        if not decision:
            return decision
        has_reduction_user |= bool(is_input_fusible_reduction(user, config) if ask is None
                                   else ask(is_input_fusible_reduction, user))
    if has_reduction_user and transposes_most_data(fusion, config.transposes_most_data):
        return FusionDecision.no("would read mostly uncoalesced", "transposes_most_data")

    if config.merger_version == "2023":
        return _should_merge_2023(fusion, config, analyses)
    current = current_bytes_transferred(fusion)
    merged = merged_bytes_transferred(fusion)
    ratio = merged / max(1.0, current)
    figures = {"current_bytes": current, "merged_bytes": merged, "ratio": round(ratio, 4)}
    if ratio > config.merger_bytes_ratio:
        return FusionDecision.no(
            f"merged-to-current-bytes-ratio of {ratio:.2f} is not favorable",
            "merger_bytes_ratio", **figures)
    reuses = (reuses_operand_elements if analyses is None
              else analyses.reuses_operand_elements)
    reuse = any(reuses(u, i) for u in fusion.users
                for i, o in enumerate(u.operands) if o is fusion)
    allow_expensive = (fusion.user_count == 1 or (
        ratio < config.merger_expensive_escape_ratio
        and current > config.merger_expensive_escape_bytes)) and not reuse
    if not allow_expensive and (
            any(is_expensive(i, config) for i in fused_instructions(fusion)) if analyses is None
            else analyses.contains_expensive(fusion)):
        return FusionDecision.no("fusion contains an expensive instruction",
                                 "merger_expensive_escape_ratio", **figures)
    decision = _reevaluation(fusion, config)
    if not decision:
        return decision.with_figures(**figures)
    for user in fusion.users:
        if fused_ir_emitter_inefficient(user, fusion, config, analyses):
            return FusionDecision.no(
                f"merging into {user.name} would make the fused emitter inefficient",
                "max_code_duplication", **figures)
        decision = (fusion_fits_in_budget(user, fusion, config, True) if analyses is None
                    else analyses.fits_in_budget(user, fusion, True))
        if not decision:
            return decision.with_figures(**figures)
    return FusionDecision.ok(**figures)


def _reevaluation(fusion: Instruction, config: FusionConfig) -> FusionDecision:
    """Beyond XLA (`max_reevaluated_ops`, the hlofuse pipeline): no user that would evaluate
    the merged code more than once per result may repeat more than the limit's ops."""
    from hlofuse.analysis.cost import op_cost

    limit = config.max_reevaluated_ops
    if not limit:
        return FusionDecision.ok()
    own = sum(op_cost(i.opcode) for i in fused_instructions(fusion)
              if i.opcode is not Opcode.PARAMETER)
    for user in fusion.users:
        if any(o is fusion and rereads_operand(user, i) for i, o in enumerate(user.operands)):
            again = reevaluated_ops(user) + own
            if again > limit:
                return FusionDecision.no(
                    f"{user.name} evaluates the merged code more than once per result: {again} "
                    f"ops repeated (more than max_reevaluated_ops={limit})",
                    "max_reevaluated_ops", ops=again, limit=limit)
    return FusionDecision.ok()


def _should_merge_2023(fusion: Instruction, config: FusionConfig,
                       analyses: FusionAnalyses | None = None) -> FusionDecision:
    """Spec 4.4 steps 5-7: budget, IR-size guard, then the first GpuPerformanceModel."""
    for user in fusion.users:
        decision = (fusion_fits_in_budget(user, fusion, config, True) if analyses is None
                    else analyses.fits_in_budget(user, fusion, True))
        if not decision:
            return decision
    for user in fusion.users:
        decision = producer_consumer_merged_too_large(fusion, user, config, analyses)
        if not decision:
            return decision
    decision = fusion_is_faster(fusion, list(fusion.users), config, analyses=analyses)
    if not decision:
        return FusionDecision.no(decision.reason or "", "merger_version", **decision.figures)
    return decision


def fuse_into_all_users(fusion: Instruction, config: FusionConfig,
                        analyses: FusionAnalyses | None = None) -> list[Instruction]:
    """FuseIntoAllUsers: wrap non-fusion users, merge `fusion` into each; it then dies."""
    merged: list[Instruction] = []
    for user in list(fusion.users):
        target = user
        if not is_fusion(user):
            target = create_fusion(user, choose_fusion_kind(fusion, user, config))
            if analyses is not None:
                analyses.forget(user)
                analyses.created(target)  # (forgets the users that now read `target`)
        if analyses is not None:
            analyses.fuse(target, fusion)
        else:
            fuse_instruction(target, fusion)
        merged.append(target)
    return merged


@register("fusion-merger")
class FusionMerger(FusionPass):
    """XLA's GPU FusionMerger; its options are the settings in OPTIONS."""

    OPTIONS: ClassVar[tuple[str, ...]] = ("merger_bytes_ratio", "merger_expensive_escape_bytes",
                                          "merger_expensive_escape_ratio", "merger_version",
                                          "transposes_most_data", *FUSIBLE, *INDEXING)
    name: ClassVar[str] = "fusion-merger"
    exact_versions: ClassVar[bool] = True  # (passes/base.py)

    def run(self, module: Module) -> bool:
        config: FusionConfig = self.run_config(module)
        trace = trace_of(module)
        kept = Kept.resume(module, config)
        changed = False
        for comp in fusible_computations(module):
            analyses = FusionAnalyses(config, kept)
            with comp.deferred_removals():
                for instr in comp.post_order():
                    if instr.parent is not comp or not is_fusion(instr):
                        continue
                    decision = should_merge(instr, config, analyses)
                    users = ",".join(u.name for u in instr.users) or "-"
                    trace.record(self.name, users, instr.name, decision, comp.name)
                    if decision:
                        fuse_into_all_users(instr, config, analyses)
                        changed = True
        kept.close()
        return changed

