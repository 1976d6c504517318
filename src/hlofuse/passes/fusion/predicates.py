"""Backend-independent fusion predicates (spec section 1.2 - 1.7 and 2.5).

    producer ──▶ consumer            questions asked about one edge
       │
       ├─ is_fusible(producer)?                    never: parameter, while/call/conditional,
       │                                           side effects (rng only with <= 1 user)
       ├─ is_expensive(producer)?                  base table + GPU override (f32/f16 cheap ops)
       ├─ reuses_operand_elements(consumer, i)?    OperandElementUse == kReuse
       ├─ effectively_at_most_unary(producer)?     duplication cannot add a large input
       ├─ is_always_duplicable(producer)?          broadcast, widening convert
       └─ should_fuse_in_place_op(producer, consumer)   in-place buffers (DUS, scatter)

Conditions enforced here, each a `FusionDecision` where a reason is meaningful:

* `is_fusible`: XLA's HloInstruction::IsFusible.
* `is_expensive`: InstructionFusion::IsExpensive; with `config.variant == "gpu"` the
  GpuInstructionFusion override (divide/sqrt/rsqrt/exp cheap for f32/f16).
* `operand_element_use`: HloInstruction::OperandElementUse, recursive through fusions.
* `effectively_at_most_unary`, `is_always_duplicable`, `fusion_would_duplicate`.
* `should_fuse_in_place_op`: the consumer's in-place buffer must not be read by a fused producer
  except through the same window ("DUS and slice index mismatch", ...).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum

import numpy as np

from hlofuse.ir.fastenum import plain_member_reads
from hlofuse.ir.fusion import is_fusion
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import CONTROL_FLOW_OPS, OPCODES, Opcode
from hlofuse.ir.shape import ArrayShape, Shape, TupleShape, leaves
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.utils import called

_NEVER_FUSIBLE = frozenset({Opcode.PARAMETER}) | CONTROL_FLOW_OPS
_ALWAYS_FUSIBLE = frozenset({Opcode.FUSION, Opcode.MAP, Opcode.REDUCE, Opcode.REDUCE_WINDOW})
# The same sets keyed by id: these checks run for every edge a pass looks at, and hashing an
# Enum member runs Python code.
_NEVER_FUSIBLE_IDS = frozenset(id(op) for op in Opcode
                               if op in _NEVER_FUSIBLE or op.value == "domain")
_ALWAYS_FUSIBLE_IDS = frozenset(id(op) for op in _ALWAYS_FUSIBLE)
_SIDE_EFFECT_IDS = frozenset(id(op) for op, info in OPCODES.items() if info.side_effect)


def is_fusible(instr: Instruction) -> bool:
    """HloInstruction::IsFusible."""
    op = id(instr.opcode)
    if op in _NEVER_FUSIBLE_IDS:
        return False
    if op in _ALWAYS_FUSIBLE_IDS:
        return True
    if instr.opcode is Opcode.RNG:
        return instr.user_count <= 1
    return not has_side_effect(instr)


def has_side_effect(instr: Instruction) -> bool:
    """Side effect of the instruction or of any computation it calls (transitively)."""
    if not called(instr):  # (the usual case: only the instruction itself to look at)
        if instr.opcode is Opcode.CUSTOM_CALL:
            return instr.has_side_effect
        return id(instr.opcode) in _SIDE_EFFECT_IDS
    stack = [instr]
    seen: set[int] = set()
    while stack:
        cur = stack.pop()
        if cur.opcode is Opcode.CUSTOM_CALL:
            if cur.has_side_effect:
                return True
        elif id(cur.opcode) in _SIDE_EFFECT_IDS:
            return True
        for comp in called(cur):
            if id(comp) not in seen:
                seen.add(id(comp))
                stack.extend(comp.instructions)
    return False


# ----- expensive ops ----------------------------------------------------------------------


def element_dtype_name(instr: Instruction) -> str | None:
    s = instr.shape
    return s.dtype.name if isinstance(s, ArrayShape) else None


def _is_constant_scalar_or_broadcast_of_one(instr: Instruction) -> bool:
    if instr.opcode is Opcode.BROADCAST:
        instr = instr.operand(0)
    return (instr.opcode is Opcode.CONSTANT and isinstance(instr.shape, ArrayShape)
            and instr.shape.is_effective_scalar)


_EXPENSIVE_OPS = frozenset(op for op, info in OPCODES.items() if info.expensive)


def is_expensive_base(instr: Instruction) -> bool:
    """InstructionFusion::IsExpensive (the op table, with the divide/remainder exception)."""
    op = instr.opcode
    if op is Opcode.DIVIDE or op is Opcode.REMAINDER:
        s = instr.shape
        integral = isinstance(s, ArrayShape) and s.dtype.is_integral
        cheap = integral and instr.operand_count > 1 and _is_constant_scalar_or_broadcast_of_one(
            instr.operand(1))
        return not cheap
    return op in _EXPENSIVE_OPS


def is_expensive(instr: Instruction, config: FusionConfig) -> bool:
    """The pass's is_expensive: GPU override for `variant == "gpu"`, else the base table."""
    if instr.opcode in config.gpu_cheap_ops and config.is_gpu \
            and element_dtype_name(instr) in config.gpu_cheap_dtypes:
        return False
    return is_expensive_base(instr)


def is_always_duplicable(instr: Instruction) -> bool:
    """InstructionFusion::IsAlwaysDuplicable: broadcast, or a widening convert."""
    if instr.opcode is Opcode.BROADCAST:
        return True
    if instr.opcode is Opcode.CONVERT and instr.operand_count == 1:
        a, b = instr.operand(0).shape, instr.shape
        if isinstance(a, ArrayShape) and isinstance(b, ArrayShape):
            return a.nbytes < b.nbytes
    return False


def fusion_would_duplicate(producer: Instruction, consumer: Instruction) -> bool:
    """The producer has a user other than the consumer."""
    return not (producer.user_count == 1 and producer.users[0] is consumer)


# ----- operand element use ------------------------------------------------------------------


@plain_member_reads
class UseKind(IntEnum):
    """Ordered so that min() picks the "worst" use, as in XLA."""

    NO_USE = 0
    REUSE = 1
    USE_PERMUTING = 2
    USE = 3


_PERMUTING = frozenset({Opcode.BITCAST, Opcode.CONCATENATE, Opcode.RESHAPE, Opcode.REVERSE,
                        Opcode.SLICE, Opcode.TRANSPOSE})
# Ops whose operand element use can be other than USE (operand_element_use's special cases);
# every other op uses its operands element for element when elementwise, else reuses them.
REUSE_CAPABLE_OPS = _PERMUTING | {Opcode.PAD, Opcode.REDUCE, Opcode.FUSION, Opcode.DOT}


def _plus(a: UseKind, b: UseKind) -> UseKind:
    if a is UseKind.NO_USE:
        return b
    if b is UseKind.NO_USE:
        return a
    if UseKind.REUSE in (a, b) or UseKind.USE_PERMUTING in (a, b):
        return UseKind.REUSE
    return UseKind.USE


def operand_element_use(instr: Instruction, i: int) -> UseKind:
    """HloInstruction::OperandElementUse (E1/E2 text: gather and dynamic-update-slice reuse)."""
    op = instr.opcode
    if op in _PERMUTING:
        return UseKind.USE_PERMUTING
    if op is Opcode.PAD:
        return UseKind.REUSE if i > 0 else UseKind.USE_PERMUTING
    if op is Opcode.REDUCE:
        return UseKind.REUSE if i >= instr.operand_count // 2 else UseKind.USE_PERMUTING
    if op is Opcode.FUSION:
        return _fusion_param_use(instr, i)
    if op is Opcode.DOT:
        out = instr.shape
        if isinstance(out, ArrayShape) and out.rank <= 1:
            other = instr.operand(1 - i).shape if i in (0, 1) else None
            if isinstance(other, ArrayShape) and other.rank <= 1:
                return UseKind.USE
        return UseKind.REUSE
    return UseKind.USE if instr.is_elementwise else UseKind.REUSE


def _fusion_param_use(fusion: Instruction, i: int) -> UseKind:
    """How the fused root uses parameter i's elements: over the fused computation in post
    order, use(param i) = USE, use(h) = PLUS over h's operands o_j of min(h's use of
    operand j, use(o_j)) (XLA's recursion, evaluated bottom-up without recursion). Only the
    instructions that read parameter i (transitively) can differ from NO_USE, the identity of
    PLUS, so only those are evaluated."""
    comp = fusion.fused_computation
    param = comp.parameter(i)
    cone: set[Instruction] = {param}
    todo = [param]
    while todo:
        for u in todo.pop().users:
            if u not in cone:
                cone.add(u)
                todo.append(u)
    root = comp.root
    if root not in cone:
        return UseKind.NO_USE
    # the cone in defs-before-uses order: a post order from the root through cone operands
    value: dict[Instruction, UseKind] = {param: UseKind.USE}
    seen: set[Instruction] = {param}
    stack: list[tuple[Instruction, bool]] = [(root, False)]
    while stack:
        h, expanded = stack.pop()
        if expanded:
            total = UseKind.NO_USE
            for j, o in enumerate(h.operands):
                if o in cone:
                    total = _plus(total, min(operand_element_use(h, j), value[o]))
            value[h] = total
        elif h not in seen:
            seen.add(h)
            stack.append((h, True))
            stack.extend((o, False) for o in h.operands if o in cone and o not in seen)
    return value[root]


def reuses_operand_elements(consumer: Instruction, i: int) -> bool:
    return operand_element_use(consumer, i) is UseKind.REUSE


# ----- re-evaluation (beyond XLA: the hlofuse pipeline) -----------------------------------------

_REREADING = frozenset({Opcode.REDUCE_WINDOW, Opcode.DOT, Opcode.CONVOLUTION})


def _rereads(instr: Instruction, j: int) -> bool:
    """Does `instr` evaluate operand j's value at one element more than once per result (a
    reduce-window whose windows overlap, a dot's contraction, a convolution)?"""
    if instr.opcode is Opcode.REDUCE_WINDOW:
        if j >= instr.operand_count // 2:
            return False
        window = instr.attrs.get("window") or ()
        return any(w.size > max(w.stride, 1) for w in window)
    return instr.opcode in _REREADING


def reevaluated_ops(consumer: Instruction) -> int:
    """The weighted ops (`analysis.cost.op_cost`) of a fusion that sit below an op that reads
    its operand's elements more than once (`_rereads`): the work a kernel repeats per result.
    Not a fusion: 0."""
    from hlofuse.analysis.cost import op_cost

    if consumer.opcode is not Opcode.FUSION:
        return 0
    stack = [o for h in consumer.fused_computation.instructions
             for j, o in enumerate(h.operands) if _rereads(h, j)]
    seen: set[Instruction] = set()
    total = 0
    while stack:
        x = stack.pop()
        if x in seen or x.opcode in (Opcode.PARAMETER, Opcode.CONSTANT):
            continue
        seen.add(x)
        total += op_cost(x.opcode)
        stack.extend(x.operands)
    return total


def rereads_operand(consumer: Instruction, i: int) -> bool:
    """Would operand i of `consumer`, fused in, sit below an op that re-reads it? (Walked up
    from the operands re-read inside the fusion, which most fusions have none of, so the
    question costs a scan of the fusion's opcodes, not a walk per operand.)"""
    if consumer.opcode is not Opcode.FUSION:
        return _rereads(consumer, i)
    comp = consumer.fused_computation
    stack = [o for h in comp.instructions if h.opcode in _REREADING
             for j, o in enumerate(h.operands) if _rereads(h, j)]
    if not stack:
        return False
    param = comp.parameter(i)
    seen = set(stack)
    while stack:
        x = stack.pop()
        if x is param:
            return True
        for o in x.operands:
            if o not in seen:
                seen.add(o)
                stack.append(o)
    return False


# ----- duplication control -------------------------------------------------------------------


def _true_rank(shape: ArrayShape) -> int:
    return shape.true_rank


def effectively_at_most_unary(instr: Instruction) -> bool:
    """InstructionFusion::EffectivelyAtMostUnary: at most one operand of output-like rank that
    is not a broadcast, iota or effective-scalar constant."""
    shape = instr.shape
    out_rank = (shape.true_rank if isinstance(shape, ArrayShape)
                else max((_true_rank(s) for s in leaves(shape)), default=0))
    count = 0
    for o in instr._operands:  # (the list itself: asked for every producer)
        op, s = o.opcode, o.shape
        if op is Opcode.BROADCAST or op is Opcode.IOTA:
            continue
        if op is Opcode.CONSTANT and isinstance(s, ArrayShape) and s.is_effective_scalar:
            continue
        if isinstance(s, ArrayShape) and s.true_rank >= out_rank:
            count += 1
    return count <= 1


def total_elements(shape: Shape) -> int:
    if isinstance(shape, ArrayShape):  # (the usual case)
        return shape.size
    return sum(s.size for s in leaves(shape))


def duplication_does_not_grow_traffic(instr: Instruction) -> bool:
    """Sum of unique operand elements <= output elements (ComputeGloballyUnfusible rule 2)."""
    operands = sum(total_elements(o.shape) for o in dict.fromkeys(instr.operands))
    return operands <= total_elements(instr.shape)


# ----- in-place operations -------------------------------------------------------------------


def in_place_operands(instr: Instruction) -> list[int]:
    """Operand numbers whose buffer the instruction updates in place
    (HloDataflowAnalysis::GetInPlaceInputOutputPairs)."""
    if instr.opcode is Opcode.DYNAMIC_UPDATE_SLICE:
        return [0]
    if instr.opcode is Opcode.SCATTER:
        return list(range(instr.operand_count // 2))
    if is_fusion(instr):
        out: list[int] = []
        root = instr.fused_computation.root
        roots = list(root.operands) if root.opcode is Opcode.TUPLE else [root]
        for r in roots:
            if r.opcode not in (Opcode.DYNAMIC_UPDATE_SLICE, Opcode.SCATTER):
                continue
            for k in in_place_operands(r):
                src = r.operand(k)
                while src.opcode is Opcode.BITCAST:
                    src = src.operand(0)
                if src.opcode is Opcode.PARAMETER and src.parameter_number is not None:
                    out.append(src.parameter_number)
        return out
    return []


def _extract(instr: Instruction, test: Callable[[Instruction], bool]) -> Instruction | None:
    """The instruction itself if it matches, else the unique fused instruction that does."""
    if test(instr):
        return instr
    if not is_fusion(instr):
        return None
    found = [i for i in instr.fused_computation.instructions if test(i)]
    return found[0] if len(found) == 1 else None


def _constant_int(instr: Instruction) -> int | None:
    if instr.opcode is Opcode.CONSTANT and instr.literal is not None:
        try:
            return int(np.asarray(instr.literal).reshape(-1)[0])
        except (TypeError, ValueError, IndexError):
            return None
    return None


def _real_operand(holder: Instruction, operand: Instruction) -> Instruction:
    if is_fusion(holder) and operand.opcode is Opcode.PARAMETER \
            and operand.parent is holder.fused_computation:
        assert operand.parameter_number is not None
        return holder.operand(operand.parameter_number)
    return operand


def _has_nonelementwise_uses_except(param: Instruction, dus: Instruction | None) -> bool:
    stack = [param]
    seen: set[int] = set()
    while stack:
        cur = stack.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        if cur is not dus and cur is not param and not cur.is_elementwise:
            return True
        stack.extend(cur.users)
    return False


def should_fuse_in_place_op(producer: Instruction, consumer: Instruction) -> FusionDecision:
    """InstructionFusion::ShouldFuseInPlaceOp (E2 text, plus the newer elementwise-alias rule
    that XLA's DontFuseProducerIfInplaceConflict test pins down)."""
    for k in in_place_operands(consumer):
        buf = consumer.operand(k)
        if not any(o is buf for o in producer.operands):
            continue
        if producer.is_elementwise:
            if is_fusion(consumer):
                dus = _extract(consumer, lambda i: i.opcode is Opcode.DYNAMIC_UPDATE_SLICE)
                for i, o in enumerate(consumer.operands):
                    if o is producer and _has_nonelementwise_uses_except(
                            consumer.fused_computation.parameter(i), dus):
                        return FusionDecision.no(
                            "the producer reads the in-place buffer of the consumer, which "
                            "uses it non-elementwise", "in_place.non_elementwise_read")
            continue
        dus = _extract(consumer, lambda i: i.opcode is Opcode.DYNAMIC_UPDATE_SLICE)
        nonelem = _extract(producer, lambda i: i.opcode is not Opcode.FUSION
                           and not i.is_elementwise and i.opcode is not Opcode.PARAMETER)
        if dus is None or nonelem is None or nonelem.shape != dus.operand(1).shape:
            return FusionDecision.no("Consumer is not a dus or the producer fusion has multiple "
                                     "non-elementwise ops, bailing.", "in_place.not_dus")
        rank = dus.shape.rank if isinstance(dus.shape, ArrayShape) else 0
        if nonelem.opcode is Opcode.SLICE:
            for d in range(rank):
                c = _constant_int(_real_operand(consumer, dus.operand(2 + d)))
                start, _limit, stride = nonelem.attrs["slice"][d]
                if c is None or c != start or stride != 1:
                    return FusionDecision.no("DUS and slice index mismatch",
                                             "in_place.slice_index")
            return FusionDecision.ok()
        if nonelem.opcode is Opcode.DYNAMIC_SLICE:
            for d in range(rank):
                ds_op = _real_operand(producer, nonelem.operand(1 + d))
                dus_op = _real_operand(consumer, dus.operand(2 + d))
                c1, c2 = _constant_int(ds_op), _constant_int(dus_op)
                if c1 != c2 or (c1 is None and ds_op is not dus_op):
                    return FusionDecision.no("DUS and DS index mismatch",
                                             "in_place.dynamic_slice_index")
            return FusionDecision.ok()
        return FusionDecision.no("unrecognized inplace update non-elementwise output pair",
                                 "in_place.unrecognized")
    return FusionDecision.ok()


def is_tuple_shaped(instr: Instruction) -> bool:
    return isinstance(instr.shape, TupleShape)
