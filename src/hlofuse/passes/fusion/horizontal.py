"""Horizontal fusion: `horizontal-loop-fusion` and `horizontal-input-fusion` (spec 6.1, 6.2).

Independent small kernels that feed one consumer are packed into one launch. Loop fusion (E2
"sliced input fusion") flattens each output to 1-D, concatenates the outputs of the same index,
and slices them back out, so candidates of different shapes share one kInput kernel::

    f1 = f16[1024] fusion(a, b)      fusion = (f16[1024], f16[123]) fusion(a, b, c, d), kInput
    f2 = f16[123]  fusion(c, d)        ROOT tuple(slice(concat(r1, r2)), slice(concat(r1, r2)))
    ROOT tuple(f1, f2)          ==>  ROOT tuple(gte(fusion, 0), gte(fusion, 1))
                                     (outputs of rank != 1 get a bitcast back outside the fusion)

Horizontal input fusion merges sibling-free reductions feeding one consumer into one
multi-output kInput fusion (`merge_fusions_multi_output`).

Conditions enforced by `horizontal-loop-fusion` (GpuHorizontalLoopFusion, E2):

* consumers are visited use-to-def (reverse post order), new horizontal fusions are visited
  too (their operands may now be fusible); E2 only ran on the entry computation
  (`horizontal_all_computations` extends it to every non-fusion computation);
* a candidate is the latest non-get-tuple-element ancestor of a consumer operand that is an
  elementwise op with operands, or a kLoop fusion whose outputs share one element type
  (variadic-reduction roots excluded), with no control edges;
* legality: the consumer is the candidate's only non-root user (`is_consumer_the_only_non_root
  _user`: no cycle possible); no candidate reads an entry `parameter` another candidate also
  reads (the concat output could not alias it);
* profitability: output elements <= `horizontal_max_elements` (128*2048), fused instructions
  <= `horizontal_max_instructions` (30) and (E2) row-major layouts only
  (`horizontal_require_row_major`);
* priority: candidates are stable-sorted by (output type, output count, instruction count,
  output elements) and cut into spans of equal type, output count and instruction count, at
  most `horizontal_max_batch` (32) per span and under `horizontal_max_cuda_param_bytes` (4000)
  of kernel parameters (8 bytes per operand/output); spans of one are skipped.

Conditions enforced by `horizontal-input-fusion` (GpuHorizontalInputFusion): candidates are
input-fusible reductions whose only non-root user is the consumer (and that nobody reads as a
whole tuple, whose shape would change), sorted by the hero's input
shape then instruction count; a chain merges j into the current anchor when the loop shapes are
compatible and the fusion fits the budget, otherwise j becomes the anchor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from hlofuse.ir.computation import Computation
from hlofuse.ir.fusion import (
    Reorder,
    create_fusion,
    is_fusion,
    merge_fusions_multi_output,
)
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import FusionKind, Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape, leaves
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.gpu_fusible import fusion_fits_in_budget, is_input_fusible_reduction
from hlofuse.passes.fusion.mof_fusible import (
    is_consumer_the_only_non_root_user,
    real_hero_for_multi_output_fusion,
    shapes_compatible_for_multi_output_fusion,
)
from hlofuse.passes.fusion.multi_output import read_whole
from hlofuse.passes.fusion.options import FUSIBLE, HORIZONTAL, FusionPass
from hlofuse.passes.fusion.order import PostOrderKeeper
from hlofuse.passes.fusion.trace import trace_of
from hlofuse.passes.registry import register
from hlofuse.passes.utils import non_fusion_computations

LOOP_PASS = "horizontal-loop-fusion"
INPUT_PASS = "horizontal-input-fusion"

# (producer name, consumer name, decision, fused): names, since fused-away ops are gone.
Recorder = Callable[[str, str, FusionDecision, bool], None]


# ----- facts about a candidate ---------------------------------------------------------------


def outputs_of(instr: Instruction) -> list[Instruction]:
    """GetOutputsOfFusible: the root tuple's operands, the root, or the instruction itself."""
    if not is_fusion(instr):
        return [instr]
    root = instr.fused_computation.root
    return list(root.operands) if root.opcode is Opcode.TUPLE else [root]


def instr_count(instr: Instruction) -> int:
    """GetInstrCountOfFusible: fused instructions (parameters included), 1 for a plain op."""
    return len(instr.fused_computation.instructions) if is_fusion(instr) else 1


def output_type(instr: Instruction) -> str:
    shape = outputs_of(instr)[0].shape
    return shape.dtype.name if isinstance(shape, ArrayShape) else ""


def latest_non_gte_ancestor(instr: Instruction) -> Instruction:
    while instr.opcode is Opcode.GET_TUPLE_ELEMENT:
        instr = instr.operand(0)
    return instr


def _has_control_edges(instr: Instruction) -> bool:
    return bool(instr.control_predecessors) or any(
        instr in u.control_predecessors for u in instr.users)


def is_fusible_candidate(instr: Instruction) -> FusionDecision:
    """IsFusibleCandidate: elementwise with operands, or a kLoop fusion with one output type."""
    if _has_control_edges(instr):
        return FusionDecision.no(f"{instr.name} has control dependencies",
                                 "horizontal.control_deps")
    if instr.is_elementwise and instr.operand_count > 0:
        return FusionDecision.ok()
    if not is_fusion(instr) or instr.fusion_kind != FusionKind.LOOP:
        return FusionDecision.no(f"{instr.name} is neither elementwise nor a loop fusion",
                                 "horizontal.not_elementwise_or_loop")
    outs = outputs_of(instr)
    if any(not isinstance(o.shape, ArrayShape) for o in outs):
        return FusionDecision.no("variadic reductions are not supported",
                                 "horizontal.variadic_reduction")
    types = {o.shape.dtype.name for o in outs}  # type: ignore[union-attr]
    if len(types) > 1:
        return FusionDecision.no(f"{instr.name} has outputs of several element types",
                                 "horizontal.element_types")
    return FusionDecision.ok()


def is_profitable_candidate(instr: Instruction, config: FusionConfig) -> FusionDecision:
    """IsProfitableFusionCandidate (sliced-input thresholds) and HasOnlyRowMajorLayout."""
    elements = sum(s.size for s in leaves(outputs_of(instr)[0].shape))
    if elements > config.horizontal_max_elements:
        return FusionDecision.no(
            f"{instr.name} is too large to be launch-bound", "horizontal_max_elements",
            elements=elements)
    if is_fusion(instr) and instr_count(instr) > config.horizontal_max_instructions:
        return FusionDecision.no(f"{instr.name} has too many instructions",
                                 "horizontal_max_instructions", instructions=instr_count(instr))
    if config.horizontal_require_row_major and not _only_row_major(instr):
        return FusionDecision.no(f"{instr.name} has a non-row-major layout",
                                 "horizontal_require_row_major")
    return FusionDecision.ok()


def _row_major(shape: object) -> bool:
    if not isinstance(shape, ArrayShape):
        return True
    return shape.minor_to_major == tuple(range(shape.rank - 1, -1, -1))


def _only_row_major(instr: Instruction) -> bool:
    if not is_fusion(instr):
        return _row_major(instr.shape)
    return all(_row_major(i.shape) for i in instr.fused_computation.instructions)


def _shares_parameter(instr: Instruction, candidates: list[Instruction]) -> bool:
    """AnyOpndIsParamSharedAmongFusions."""
    return any(o.opcode is Opcode.PARAMETER and any(
        u is not instr and u in candidates for u in o.users) for o in instr.operands)


# ----- candidate selection -------------------------------------------------------------------


def loop_fusion_candidates(consumer: Instruction, config: FusionConfig,
                           record: Recorder) -> list[Instruction]:
    """FusionCandidates::Initialize: filtered and sorted candidates for one consumer."""
    found: list[Instruction] = []
    for operand in consumer.operands:
        pred = latest_non_gte_ancestor(operand)
        if pred not in found and is_fusible_candidate(pred):
            found.append(pred)
    kept: list[Instruction] = []
    for instr in found:
        # XLA's order: cycle, profitability (size, instructions, layout), shared parameter.
        decision = no_cycle(instr, consumer)
        if decision:
            decision = is_profitable_candidate(instr, config)
        if decision:
            decision = no_shared_parameter(instr, found)
        if decision:
            kept.append(instr)
        elif len(found) > 1:
            record(instr.name, consumer.name, decision, False)
    kept.sort(key=candidate_priority)
    return kept


def no_cycle(instr: Instruction, consumer: Instruction) -> FusionDecision:
    """Legality: the consumer is the only non-root user, so fusing cannot create a cycle."""
    return FusionDecision.check(is_consumer_the_only_non_root_user(instr, consumer),
                                f"{consumer.name} is not the only non-root user of {instr.name}",
                                "horizontal.not_only_user")


def no_shared_parameter(instr: Instruction, found: list[Instruction]) -> FusionDecision:
    """Legality: the concatenated output could not alias a parameter another candidate reads."""
    return FusionDecision.check(not _shares_parameter(instr, found),
                                f"{instr.name} shares a parameter with another candidate",
                                "horizontal.shared_parameter")


def candidate_priority(instr: Instruction) -> tuple[str, int, int, int]:
    """The sort key that makes fusible candidates adjacent: (output type, output count,
    instruction count, output elements)."""
    return (output_type(instr), len(outputs_of(instr)), instr_count(instr),
            sum(s.size for s in leaves(outputs_of(instr)[0].shape)))


def next_spans(candidates: list[Instruction], config: FusionConfig) -> list[list[Instruction]]:
    """GetNextSpanOfFusions, applied until the list is used up (E2 limits)."""
    spans: list[list[Instruction]] = []
    pos = 0
    while pos < len(candidates):
        first = candidates[pos]
        right = pos + 1
        io_bytes = 0
        while right < len(candidates):
            cur = candidates[right]
            if output_type(cur) != output_type(first) \
                    or len(outputs_of(cur)) != len(outputs_of(first)) \
                    or instr_count(cur) != instr_count(first):
                break
            if right - pos >= config.horizontal_max_batch:
                break
            io_bytes += (cur.operand_count + len(outputs_of(cur))) * 8
            if io_bytes >= config.horizontal_max_cuda_param_bytes:
                break
            right += 1
        spans.append(candidates[pos:right])
        pos = right
    return spans


# ----- building the sliced-input fusion ------------------------------------------------------


def _flat(dtype_shape: ArrayShape, n: int) -> ArrayShape:
    return ArrayShape(dtype_shape.dtype, (n,), (0,))


def _add(comp: Computation, instr: Instruction) -> Instruction:
    instr.parent = comp
    comp.instructions.append(instr)
    comp.touch()
    return instr


def build_horizontal_fusion(fusions: list[Instruction],
                            reorder: Reorder | None = None) -> Instruction:
    """Replace the kLoop `fusions` by one sliced-input kInput fusion (CreateFusedComputation
    and Fuse of horizontal_loop_fusion.cc). Returns the new fusion. `reorder(caller, fusion)`
    puts the caller's list back in post order (default: a full post order)."""
    caller = fusions[0].parent
    assert caller is not None and caller.parent is not None
    module = caller.parent
    fused = Computation("horizontally_fused_computation")
    operands: list[Instruction] = []
    param_of: dict[Instruction, Instruction] = {}
    clones: list[dict[Instruction, Instruction]] = []
    for i, f in enumerate(fusions):
        mapping: dict[Instruction, Instruction] = {}
        for j, o in enumerate(f.operands):
            if o not in param_of:
                p = Instruction.create(Opcode.PARAMETER, o.shape, name=f"param_{i}_{j}",
                                       parameter_number=len(operands))
                param_of[o] = _add(fused, p)
                operands.append(o)
            mapping[f.fused_computation.parameter(j)] = param_of[o]
        for instr in f.fused_computation.post_order():
            if instr.opcode is Opcode.PARAMETER:
                continue
            clone = Instruction.create(instr.opcode, instr.shape,
                                       [mapping[o] for o in instr.operands], name=instr.name,
                                       attrs=dict(instr.attrs), literal=instr.literal,
                                       metadata=instr.metadata)
            mapping[instr] = _add(fused, clone)
        clones.append(mapping)
    n_outputs = len(outputs_of(fusions[0]))
    slices: list[Instruction | None] = [None] * (n_outputs * len(fusions))
    for k in range(n_outputs):
        flats: list[Instruction] = []
        for f, mapping in zip(fusions, clones, strict=True):
            out = mapping[outputs_of(f)[k]]
            shape = out.array_shape
            if shape.rank != 1:
                out = _add(fused, Instruction.create(Opcode.RESHAPE, _flat(shape, shape.size),
                                                     [out], name="reshape"))
            flats.append(out)
        total = sum(o.array_shape.size for o in flats)
        concat = _add(fused, Instruction.create(
            Opcode.CONCATENATE, _flat(flats[0].array_shape, total), flats, name="concatenate",
            attrs={"dimensions": (0,)}))
        start = 0
        for j, o in enumerate(flats):
            size = o.array_shape.size
            slices[n_outputs * j + k] = _add(fused, Instruction.create(
                Opcode.SLICE, _flat(o.array_shape, size), [concat], name="slice",
                attrs={"slice": ((start, start + size, 1),)}))
            start += size
    outs = [s for s in slices if s is not None]
    root = _add(fused, Instruction.create(Opcode.TUPLE, TupleShape(tuple(s.shape for s in outs)),
                                          outs, name="tuple"))
    fused.root = root
    module.add_computation(fused)
    fusion = Instruction.create(Opcode.FUSION, root.shape, operands, name="fusion",
                                attrs={"kind": FusionKind.INPUT, "calls": (fused,)})
    caller.add(fusion)
    fused.fusion_instruction = fusion
    module.computations.remove(fused)
    module.computations.insert(module.computations.index(caller), fused)
    # Outside: one get-tuple-element per output, a bitcast back for rank != 1, a tuple for a
    # multi-output candidate; then the candidates go.
    index = 0
    for f in fusions:
        values: list[Instruction] = []
        for out in outputs_of(f):
            flat = outs[index]
            gte = caller.add(Instruction.create(Opcode.GET_TUPLE_ELEMENT, flat.shape, [fusion],
                                                name="get-tuple-element",
                                                attrs={"index": index}))
            index += 1
            if out.array_shape.rank != 1:
                # A bitcast is free, but reinterprets the physical order: only for row-major
                # outputs; a non-row-major one (E3 allows them) needs a logical reshape.
                op = Opcode.BITCAST if _row_major(out.shape) else Opcode.RESHAPE
                gte = caller.add(Instruction.create(op, out.shape, [gte], name=op.value))
            values.append(gte)
        value = values[0] if len(values) == 1 else caller.add(Instruction.create(
            Opcode.TUPLE, f.shape, values, name="tuple"))
        f.replace_all_uses_with(value)
        callee = f.fused_computation
        caller.remove(f)
        module.remove_computation(callee)
    if reorder is None:
        caller.instructions = caller.post_order()
    else:
        reorder(caller, fusion)
    return fusion


def fuse_consumer_operands(consumer: Instruction, config: FusionConfig,
                           record: Recorder, reorder: Reorder | None = None
                           ) -> list[Instruction]:
    """FuseConsumerOperands: returns the horizontal fusions it made."""
    made: list[Instruction] = []
    for span in next_spans(loop_fusion_candidates(consumer, config, record), config):
        if len(span) < 2:
            continue
        fusions = [s if is_fusion(s) else create_fusion(s, FusionKind.LOOP) for s in span]
        names = [s.name for s in fusions]
        fusion = build_horizontal_fusion(fusions, reorder)
        for name in names:
            record(name, fusion.name, FusionDecision.ok(kind="horizontal", batch=len(names)),
                   True)
        made.append(fusion)
    return made


def horizontal_loop_fusion(comp: Computation, config: FusionConfig, record: Recorder) -> bool:
    changed = False
    worklist = comp.post_order()  # popped from the back: use-to-def order
    order = PostOrderKeeper(comp)  # the caller's list after each fusion, without a full sort
    while worklist:
        consumer = worklist.pop()
        if consumer.parent is not comp:
            continue
        made = fuse_consumer_operands(consumer, config, record, order.restore)
        changed |= bool(made)
        worklist.extend(made)
    return changed


# ----- horizontal input fusion ---------------------------------------------------------------


def _input_shape_key(instr: Instruction, config: FusionConfig) -> tuple[int, ...]:
    hero = real_hero_for_multi_output_fusion(instr, config)
    if not hero.operands:
        return ()
    shape = hero.operand(0).shape
    return (shape.rank, *shape.dims) if isinstance(shape, ArrayShape) else ()


def input_fusion_candidates(consumer: Instruction, config: FusionConfig) -> list[Instruction]:
    """FindAndSortFusionCandidates."""
    found: list[Instruction] = []
    for operand in consumer.operands:
        pred = latest_non_gte_ancestor(operand)
        if pred not in found and is_input_fusible_reduction(pred, config) \
                and is_consumer_the_only_non_root_user(pred, consumer) and not read_whole(pred):
            found.append(pred)
    found.sort(key=lambda i: (_input_shape_key(i, config), instr_count(i)))
    return found


def input_fusion_legal(anchor: Instruction, fused: Instruction, config: FusionConfig
                       ) -> FusionDecision:
    d = shapes_compatible_for_multi_output_fusion(anchor, fused, config)
    return d if not d else fusion_fits_in_budget(anchor, fused, config, False)


def horizontal_input_fusion(comp: Computation, config: FusionConfig,
                            record: Recorder) -> bool:
    changed = False
    for consumer in comp.post_order():  # def-to-use: users are never modified
        if consumer.parent is not comp:
            continue
        candidates = input_fusion_candidates(consumer, config)
        if len(candidates) <= 1:
            continue
        for j, c in enumerate(candidates):
            if not is_fusion(c):
                candidates[j] = create_fusion(c, FusionKind.INPUT)
                changed = True
        anchor = candidates[0]
        for fused in candidates[1:]:
            decision = input_fusion_legal(anchor, fused, config)
            record(fused.name, anchor.name, decision.with_figures(kind="horizontal-input"),
                   bool(decision))
            if decision:
                merge_fusions_multi_output(anchor, fused)
                changed = True
            else:
                anchor = fused
    return changed


# ----- the passes ----------------------------------------------------------------------------


def _recorder(module: Module, pass_name: str, comp: Computation) -> Recorder:
    trace = trace_of(module)

    def record(producer: str, consumer: str, d: FusionDecision, fused: bool) -> None:
        trace.record(pass_name, consumer, producer, d, comp.name, fused)

    return record


@register(LOOP_PASS)
class HorizontalLoopFusion(FusionPass):
    """GpuHorizontalLoopFusion (E2 sliced-input mode)."""

    OPTIONS: ClassVar[tuple[str, ...]] = (*HORIZONTAL, *FUSIBLE)
    name: ClassVar[str] = LOOP_PASS
    exact_versions: ClassVar[bool] = True  # (passes/base.py)

    def run(self, module: Module) -> bool:
        config: FusionConfig = self.run_config(module)
        comps = (non_fusion_computations(module) if config.horizontal_all_computations
                 else [module.entry])
        changed = False
        for comp in comps:
            changed |= horizontal_loop_fusion(comp, config, _recorder(module, LOOP_PASS, comp))
        return changed


@register(INPUT_PASS)
class HorizontalInputFusion(FusionPass):
    """GpuHorizontalInputFusion: sibling-free reductions into one multi-output kInput."""

    OPTIONS: ClassVar[tuple[str, ...]] = (*HORIZONTAL, *FUSIBLE)
    name: ClassVar[str] = INPUT_PASS
    exact_versions: ClassVar[bool] = True  # (passes/base.py)

    def run(self, module: Module) -> bool:
        config: FusionConfig = self.run_config(module)
        changed = False
        for comp in non_fusion_computations(module):
            changed |= horizontal_input_fusion(comp, config, _recorder(module, INPUT_PASS,
                                                                         comp))
        return changed

