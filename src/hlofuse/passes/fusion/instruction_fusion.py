r"""`instruction-fusion`: XLA's InstructionFusion run loop with the GPU (E2) or generic rules.

Vertical fusion: a producer is cloned into its consumer's fusion so the intermediate never
reaches memory. Consumers are visited before producers (reverse post order); after each fusion
the fusion is re-queued at once, so it keeps growing upwards::

    p0   p1                p0   p1
     \   /                  \   /
     add          ==>     fusion { add -> exp -> ROOT multiply }
      |                      |
     exp                  (one kernel)
      |
    multiply

Order of checks for an edge (consumer, operand i), variant "gpu" (spec section 3.2):

 1. producer is a fusion                       "the producer is a fusion"
 2. expensive producer, consumer reuses it     "the producer is expensive, and the consumer
                                               reuses inputs"
 3. transposing producer into a reduction      "fusing the producer would break read coalescing"
 4. is_producer_consumer_fusible               loop/input fusibility, constants, in-place
 5. creates_heavy_computation                  "the fusion would create a heavy computation"
 6. base ShouldFuse                            root, duplication (may_duplicate), in-place
 7. fusion_fits_in_budget                      operands+outputs, shared memory, reductions
 8. code duplication (consumer is a fusion)    FusionNodeIndexingEvaluation

variant "generic" runs only 6 (XLA's base InstructionFusion, as in instruction_fusion_test.cc).
Duplication control: with may_duplicate, ComputeGloballyUnfusible marks producers that may not
be duplicated ("operand can not be duplicated") unless they can be fused on all paths.
Every decision goes to the module's fusion trace.
"""

from __future__ import annotations

from typing import Any

from hlofuse.ir.computation import Computation
from hlofuse.ir.fusion import create_fusion, fuse_instruction, is_fusion, set_kind
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import FusionKind, Opcode
from hlofuse.passes.fusion.analysis import FusionAnalyses, Kept
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.gpu_fusible import (
    choose_fusion_kind,
    creates_heavy_computation,
    fusion_fits_in_budget,
    is_input_fusible,
    is_input_fusible_reduction,
    is_physically_transposing,
    is_producer_consumer_fusible,
)
from hlofuse.passes.fusion.graph import ReachabilityMap
from hlofuse.passes.fusion.indexing import FusionNodeIndexingEvaluation
from hlofuse.passes.fusion.predicates import (
    duplication_does_not_grow_traffic,
    effectively_at_most_unary,
    fusion_would_duplicate,
    is_always_duplicable,
    is_expensive,
    is_fusible,
    reevaluated_ops,
    rereads_operand,
    reuses_operand_elements,
    should_fuse_in_place_op,
)
from hlofuse.passes.fusion.trace import FusionTrace, trace_of
from hlofuse.passes.utils import computations_post_order

# Computations reached through these attributes run as control flow; others (reducers,
# comparators, map/scatter bodies, custom-call bodies) are embedded and never fused into.
_CONTROL_FLOW_ATTRS = {
    Opcode.WHILE: ("body", "condition"),
    Opcode.CONDITIONAL: ("branch_computations", "true_computation", "false_computation"),
    Opcode.CALL: ("to_apply",),
}


def fusible_computations(module: Module) -> list[Computation]:
    """The entry and every computation it runs as control flow, callees first."""
    reached: set[int] = set()
    stack = [module.entry]
    while stack:
        comp = stack.pop()
        if id(comp) in reached:
            continue
        reached.add(id(comp))
        for instr in comp.instructions:
            for attr in _CONTROL_FLOW_ATTRS.get(instr.opcode, ()):
                value = instr.attrs.get(attr)
                if value is None:
                    continue
                stack.extend(value if isinstance(value, tuple) else (value,))
    return [c for c in computations_post_order(module)
            if id(c) in reached and not c.is_fusion_computation]


# ----- the rules ---------------------------------------------------------------------------


def base_should_fuse(consumer: Instruction, i: int, config: FusionConfig) -> FusionDecision:
    """InstructionFusion::ShouldFuse: root, duplication, in-place."""
    producer = consumer.operand(i)
    if producer.is_root:
        return FusionDecision.no("not fusing into the output of the root instruction",
                                 "instruction_fusion.root")
    if fusion_would_duplicate(producer, consumer) and (
            not config.may_duplicate or is_expensive(producer, config)) \
            and not is_always_duplicable(producer):
        if config.may_duplicate:
            return FusionDecision.no("expensive producer would be duplicated",
                                     "instruction_fusion.expensive_duplicate")
        return FusionDecision.no("fusion pass cannot duplicate", "may_duplicate")
    return should_fuse_in_place_op(producer, consumer)


def gpu_should_fuse(consumer: Instruction, i: int, config: FusionConfig,
                    analyses: FusionAnalyses | None = None) -> FusionDecision:
    """GpuInstructionFusion::ShouldFuse (E2), in XLA's order. `analyses`: the pass run's
    per-fusion facts (the same answers, without walking the consumer fusion each time)."""
    producer = consumer.operand(i)
    if is_fusion(producer):
        return FusionDecision.no("the producer is a fusion", "instruction_fusion.producer_fusion")
    if analyses is None:
        expensive = is_expensive(producer, config)
        reuses = expensive and reuses_operand_elements(consumer, i)
        into_reduction = is_input_fusible_reduction(consumer, config)
    else:
        expensive = is_expensive(producer, config)  # (a table lookup: cheaper than a memo)
        reuses = expensive and analyses.reuses_operand_elements(consumer, i)
        into_reduction = analyses.ask(is_input_fusible_reduction, consumer)
    if reuses:
        return FusionDecision.no("the producer is expensive, and the consumer reuses inputs",
                                 "instruction_fusion.expensive_reuse")
    limit = config.max_reevaluated_ops
    if limit and rereads_operand(consumer, i):
        from hlofuse.analysis.cost import op_cost

        again = reevaluated_ops(consumer) + op_cost(producer.opcode)
        if again > limit:
            return FusionDecision.no(
                f"the consumer evaluates the producer more than once per result, and the code "
                f"it would repeat grows to {again} ops (more than max_reevaluated_ops={limit})",
                "max_reevaluated_ops", ops=again, limit=limit)
    if into_reduction and is_physically_transposing(producer):
        return FusionDecision.no("fusing the producer would break read coalescing",
                                 "instruction_fusion.coalescing")
    decision = is_producer_consumer_fusible(producer, consumer, config,
                                            analyses.ask if analyses is not None else None)
    if not decision:
        return decision
    heavy = analyses.is_heavy(producer) if analyses is not None else None
    if creates_heavy_computation(producer, consumer, config, heavy):
        return FusionDecision.no("the fusion would create a heavy computation",
                                 "max_inputs_per_output")
    decision = base_should_fuse(consumer, i, config)
    if not decision:
        return decision
    if analyses is not None:
        decision = analyses.fits_in_budget(consumer, producer, True)
    else:
        decision = fusion_fits_in_budget(consumer, producer, config, True)
    if not decision or not is_fusion(consumer):
        return decision
    evaluation = (analyses.indexing(consumer) if analyses is not None
                  else FusionNodeIndexingEvaluation(consumer))
    return evaluation.check_code_duplication(producer, config)


def should_fuse(consumer: Instruction, i: int, config: FusionConfig,
                analyses: FusionAnalyses | None = None) -> FusionDecision:
    if config.is_gpu:
        return gpu_should_fuse(consumer, i, config, analyses)
    return base_should_fuse(consumer, i, config)


def choose_kind(producer: Instruction, consumer: Instruction, config: FusionConfig,
                analyses: FusionAnalyses | None = None) -> str:
    if not config.is_gpu:
        return FusionKind.LOOP
    if analyses is None:
        return choose_fusion_kind(producer, consumer, config)
    return FusionKind.INPUT if analyses.ask(is_input_fusible, consumer) else FusionKind.LOOP


def fuse(producer: Instruction, consumer: Instruction, config: FusionConfig,
         analyses: FusionAnalyses | None = None) -> Instruction:
    """InstructionFusion::Fuse: wrap the consumer if needed, then clone the producer in."""
    kind = choose_kind(producer, consumer, config, analyses)
    if is_fusion(consumer):
        fusion = consumer
        if fusion.fusion_kind != kind:
            set_kind(fusion, kind)
    else:
        fusion = create_fusion(consumer, kind)
        if analyses is not None:
            analyses.created(fusion)
    if analyses is not None:
        analyses.fuse(fusion, producer)
    else:
        fuse_instruction(fusion, producer)
    return fusion


# ----- the run loop ------------------------------------------------------------------------


class _ComputationRun:
    def __init__(self, pass_name: str, config: FusionConfig, comp: Computation,
                 trace: FusionTrace, kept: Kept | None = None) -> None:
        self.pass_name = pass_name
        self.config = config
        self.comp = comp
        self.trace = trace
        self.do_not_duplicate: set[Instruction] = set()
        self.analyses = FusionAnalyses(config, kept)
        # ComputeGloballyUnfusible (no edits meanwhile): instruction -> operand -> positions
        self._positions: dict[Instruction, dict[Instruction, list[int]]] = {}

    def should_fuse(self, consumer: Instruction, i: int) -> FusionDecision:
        return should_fuse(consumer, i, self.config, self.analyses)

    # ComputeGloballyUnfusible ---------------------------------------------------------------
    def compute_globally_unfusible(self, post_order: list[Instruction]) -> None:
        reach = ReachabilityMap(self.comp, post_order)
        cache: dict[tuple[Instruction, Instruction], bool] = {}
        for producer in reversed(post_order):
            if effectively_at_most_unary(producer):
                continue
            if duplication_does_not_grow_traffic(producer):
                continue
            if is_fusible(producer) and all(
                    self.can_fuse_on_all_paths(producer, u, reach, cache)
                    for u in producer.users):
                continue
            self.do_not_duplicate.add(producer)

    def can_fuse_on_all_paths(self, producer: Instruction, consumer: Instruction,
                              reach: ReachabilityMap,
                              cache: dict[tuple[Instruction, Instruction], bool]) -> bool:
        """CanFuseOnAllPaths: every path producer -> consumer can be fused along, memoised.
        XLA's recursion (over the operands of `consumer` that `producer` reaches, found by
        `ReachabilityMap.reached_operands`), run with an explicit stack so a long chain cannot
        overflow Python's."""

        def known(c: Instruction) -> bool | None:
            if c is producer:
                return True
            if not is_fusible(c):
                return False
            return cache.get((producer, c))

        first = known(consumer)
        if first is not None:
            return first
        positions: dict[Instruction, dict[Instruction, list[int]]] = self._positions

        def reached(node: Instruction) -> list[int]:
            at = positions.get(node)
            if at is None:
                at = positions[node] = {}
                for k, o in enumerate(node.operands):
                    at.setdefault(o, []).append(k)
            return reach.reached_operands(producer, node, at)

        # frame: [consumer, operand positions producer reaches, next of them, waiting for
        # that operand's answer]
        stack: list[list[Any]] = [[consumer, reached(consumer), 0, False]]
        answer = True
        while stack:
            frame = stack[-1]
            node: Instruction = frame[0]
            todo: list[int] = frame[1]
            k: int = frame[2]
            result = True
            if frame[3]:
                frame[3] = False
                if not answer:
                    result, k = False, len(todo)
                else:
                    k += 1
            descended = False
            while result and k < len(todo):
                i = todo[k]
                operand = node.operand(i)
                if operand in self.do_not_duplicate or not self.should_fuse(node, i):
                    result = False
                    break
                sub = known(operand)
                if sub is None:
                    frame[2], frame[3] = k, True
                    stack.append([operand, reached(operand), 0, False])
                    descended = True
                    break
                if not sub:
                    result = False
                    break
                k += 1
            if descended:
                continue
            cache[(producer, node)] = result
            answer = result
            stack.pop()
        return answer

    # Run -------------------------------------------------------------------------------------
    def run(self) -> bool:
        comp = self.comp
        post_order = comp.post_order()
        if self.config.may_duplicate:
            self.compute_globally_unfusible(post_order)
        queue: list[Instruction | None] = list(post_order)
        index: dict[Instruction, int] = {instr: k for k, instr in enumerate(post_order)}
        changed = False
        while queue:
            instr = queue.pop()
            if instr is None:
                continue
            index.pop(instr, None)
            if instr.parent is not comp:
                continue
            if not is_fusible(instr) and not is_fusion(instr):
                continue
            # unvisited operands, latest in post order first (a stable sort: equal operands
            # keep their positions' order); keys looked up in C, not by a lambda per operand,
            # since a wide consumer (a scan's stacked outputs) comes back after every fusion
            keys = list(map(index.get, instr.operands))
            operand_numbers = [i for i, k in enumerate(keys) if k is not None]
            operand_numbers.sort(key=keys.__getitem__, reverse=True)  # type: ignore[arg-type]
            for i in operand_numbers:
                operand = instr.operand(i)
                if not is_fusible(operand):
                    continue
                if operand in self.do_not_duplicate:
                    decision = FusionDecision.no("operand can not be duplicated",
                                                 "instruction_fusion.not_duplicable")
                else:
                    decision = self.should_fuse(instr, i)
                if not decision:
                    if operand.opcode is not Opcode.GET_TUPLE_ELEMENT:
                        self.trace.record(self.pass_name, instr.name, operand.name, decision,
                                          comp.name)
                    continue
                consumer_name, producer_name = instr.name, operand.name
                fusion = fuse(operand, instr, self.config, self.analyses)
                self.trace.record(self.pass_name, consumer_name, producer_name, decision,
                                  comp.name, fused=True)
                changed = True
                index[fusion] = len(queue)
                queue.append(fusion)
                if operand.parent is None:  # the producer died
                    self.do_not_duplicate.discard(operand)
                    k = index.pop(operand, None)
                    if k is not None:
                        queue[k] = None
                if fusion is not instr:
                    self.do_not_duplicate.discard(instr)
                break
        return changed


def run_instruction_fusion(module: Module, name: str, config: FusionConfig) -> bool:
    """One run of instruction fusion over `module` (the pass `core_passes.InstructionFusion`),
    its decisions recorded in the module's trace under `name`."""
    trace = trace_of(module)
    kept = Kept.resume(module, config)
    changed = False
    for comp in fusible_computations(module):
        with comp.deferred_removals():
            changed |= _ComputationRun(name, config, comp, trace, kept).run()
    kept.close()
    return changed
