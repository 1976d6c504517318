"""GPU fusibility predicates (XLA's gpu_fusible.cc and reduction_utils.cc, era E2).

    reduce over contiguous dims ──▶ "unnested" (tiled emitter) ──▶ kInput fusion root
    anything loop-fusible ─────────▶ kLoop fusion (one parallel loop over the output)

              producer                     consumer
    loop-fusible as producer?      input-fusible or loop-fusible as consumer?
              └──────────── is_producer_consumer_fusible ────────────┘
                             fusion_fits_in_budget (operands, smem, #reductions)

Conditions enforced (spec section 1.8 - 1.10, section 0 for the reduction classifier):

* unnested reduction: reduced or kept dims consecutive in the layout, and the tiled emitter
  beats the elemental one (row: minor >= warp or warp % minor == 0; column thresholds);
* tiled transpose: a physical 0-2-1 transpose (copy or transpose) with both tiled dims >= 16
  and at least 64*128 elements;
* loop / input fusibility, `choose_fusion_kind`, `is_producer_consumer_fusible` (E2 order),
  `creates_heavy_computation`, `is_physically_transposing`;
* `fusion_fits_in_budget`: shared memory, <= 8 unnested reductions, <= N operands+outputs.

The multi-output helpers (roots, heroes, loop shapes) are in mof_fusible.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from hlofuse.ir.fusion import is_fusion, is_multi_output_fusion
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import FusionKind, Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape, leaves, subshape_count
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.predicates import is_fusible, should_fuse_in_place_op

DEFAULT = FusionConfig()


# ----- layout helpers ----------------------------------------------------------------------


def _consecutive(layout: tuple[int, ...], dims: list[int]) -> bool:
    """LayoutUtil::AreDimensionsConsecutive: `dims` occupy consecutive layout positions."""
    if not dims:
        return True
    pos = sorted(layout.index(d) for d in dims)
    return pos[-1] - pos[0] == len(pos) - 1


def _partition(shape: ArrayShape, middle: list[int]) -> tuple[int, int, int]:
    """PartitionShapeByMiddleDimensions: (major, middle, minor) element products."""
    values = [1, 1, 1]
    segment = 2  # minor
    for d in shape.minor_to_major:
        if segment != 0:
            in_middle = d in middle
            if segment == 2 and in_middle:
                segment = 1
            elif segment == 1 and not in_middle:
                segment = 0
        values[segment] *= shape.dims[d]
    return values[0], values[1], values[2]


def reduction_kind_and_components(reduce: Instruction) -> tuple[bool, tuple[int, int, int]]:
    """GetReductionKindAndContiguousComponents: (is_row_reduction, [D, H, W])."""
    shape = reduce.operand(0).array_shape
    reduced = list(reduce.dimensions)
    kept = [d for d in range(shape.rank) if d not in reduced]
    if not kept:
        return True, (1, 1, shape.size)
    if _consecutive(shape.minor_to_major, kept):
        major, middle, minor = _partition(shape, kept)
        if middle == 1:
            return True, (1, 1, major * minor)
        if minor == 1:
            return False, (1, major, middle)
        return True, (major, middle, minor)
    major, middle, minor = _partition(shape, reduced)
    if minor == 1:
        return True, (1, major, middle)
    return False, (major, middle, minor)


def is_reduction_from_or_to_contiguous_dims(instr: Instruction,
                                             config: FusionConfig = DEFAULT) -> bool:
    """IsReductionFromOrToContiguousDimensions: an "unnested" (tiled-emitter) reduction."""
    if instr.opcode is not Opcode.REDUCE or not isinstance(instr.operand(0).shape, ArrayShape):
        return False
    shape = instr.operand(0).array_shape
    reduced = list(instr.dimensions)
    kept = [d for d in range(shape.rank) if d not in reduced]
    layout = shape.minor_to_major
    if not _consecutive(layout, kept) and not _consecutive(layout, reduced):
        return False
    is_row, (_d, h, w) = reduction_kind_and_components(instr)
    warp = config.warp_size
    if is_row:
        return w >= warp or (config.row_reduction_divisor_rule and warp % w == 0)
    prefer_elemental = (h < warp or (h < 2 * warp and w < warp) or (h < 4 * warp and w < 8)
                        or (h < 8 * warp and w < 3))
    return not prefer_elemental


def nontrivial_physical(shape: ArrayShape) -> list[int]:
    """Logical dims of extent > 1 in physical order, major to minor."""
    return [d for d in reversed(shape.minor_to_major) if shape.dims[d] > 1]


def transpose_is_bitcast(instr: Instruction) -> bool:
    """A transpose whose permutation leaves the physical element order unchanged."""
    src, out = instr.operand(0).array_shape, instr.array_shape
    perm = instr.dimensions
    out_phys = [perm[d] for d in nontrivial_physical(out)]
    return out_phys == nontrivial_physical(src)


def reshape_is_bitcast(instr: Instruction) -> bool:
    """Approximation of ShapeUtil::ReshapeIsBitcast: both shapes row-major up to unit dims."""
    src, out = instr.operand(0).shape, instr.shape
    if not isinstance(src, ArrayShape) or not isinstance(out, ArrayShape):
        return False

    def row_major(s: ArrayShape) -> bool:
        nt = nontrivial_physical(s)
        return nt == sorted(nt)

    return row_major(src) and row_major(out)


def _physical_permutation(instr: Instruction) -> list[int] | None:
    """For copy/transpose: the normalised permutation of the non-trivial physical dims
    (output position -> input position), with runs of consecutive dims merged, plus the
    merged extents as a side value. None if not a copy/transpose."""
    if instr.opcode not in (Opcode.COPY, Opcode.TRANSPOSE):
        return None
    src, out = instr.operand(0).shape, instr.shape
    if not isinstance(src, ArrayShape) or not isinstance(out, ArrayShape):
        return None
    perm = instr.dimensions if instr.opcode is Opcode.TRANSPOSE else tuple(range(out.rank))
    src_pos = {d: i for i, d in enumerate(nontrivial_physical(src))}
    seq = [src_pos[perm[d]] for d in nontrivial_physical(out)]
    return seq


def tiled_transpose_dims(instr: Instruction, config: FusionConfig = DEFAULT
                         ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """GetDescriptionForTiledTransposeEmitter (simplified): for a physical 0-2-1 (or 2-1-0)
    transpose big enough for the shared-memory tiled emitter, (normalised permutation,
    normalised extents); else None."""
    seq = _physical_permutation(instr)
    if not seq:
        return None
    out = instr.array_shape
    extents_out = [out.dims[d] for d in nontrivial_physical(out)]
    # Merge runs of output positions that read consecutive input positions.
    groups: list[list[int]] = [[0]]
    for k in range(1, len(seq)):
        if seq[k] == seq[k - 1] + 1:
            groups[-1].append(k)
        else:
            groups.append([k])
    if len(groups) not in (2, 3):
        return None
    order = [seq[g[0]] for g in groups]
    norm = [sorted(order).index(v) for v in order]
    sizes = [math.prod(extents_out[k] for k in g) for g in groups]
    if norm == [1, 0]:
        norm, sizes = [0, 2, 1], [1, *sizes]
    if norm == [0, 2, 1]:
        a, b = sizes[1], sizes[2]
    elif norm == [2, 1, 0]:
        a, b = sizes[0], sizes[2]
    else:
        return None
    m, m2 = config.min_dimension_to_transpose_tiled, config.min_dimension_to_transpose_tiled2
    if (a >= m and b >= m) or (a >= m2 and b >= m2
                               and a * b >= config.min_total_dimensions_to_transpose_tiled):
        return tuple(norm), tuple(sizes)
    return None


def is_physically_transposing(instr: Instruction) -> bool:
    """IsPhysicallyTransposing: copy, or a transpose that is not a bitcast (any fused one)."""
    if is_fusion(instr):
        return any(is_physically_transposing(i) for i in instr.fused_computation.instructions)
    if instr.opcode is Opcode.COPY:
        return True
    return instr.opcode is Opcode.TRANSPOSE and not transpose_is_bitcast(instr)


def transposes_minor_dimension(instr: Instruction) -> bool:
    """TransposesMinorDimension: the physically minor-most non-trivial dim moves."""
    if instr.opcode not in (Opcode.COPY, Opcode.TRANSPOSE):
        return False
    seq = _physical_permutation(instr)
    if not seq:
        return False
    return seq[-1] != len(seq) - 1


# ----- heroes ------------------------------------------------------------------------------


def is_reduce_intermediate(instr: Instruction) -> bool:
    """A trivial op in a reduction epilogue: bitcast, bitcast-convert, convert or a bitcast
    reshape, with at most one operand and one user."""
    if len(instr._operands) > 1 or len(instr.users) > 1:  # (asked for every fused op)
        return False
    op = instr.opcode
    if op is Opcode.BITCAST or op is Opcode.BITCAST_CONVERT or op is Opcode.CONVERT:
        return True
    return op is Opcode.RESHAPE and reshape_is_bitcast(instr)


def find_non_trivial_hero(instr: Instruction) -> Instruction:
    """FindNonTrivialHero: walk up reduce-intermediate ops (inside a fused computation)."""
    cur = instr
    while cur.opcode is not Opcode.PARAMETER and cur.operand_count == 1 \
            and is_reduce_intermediate(cur) and cur.operand(0).opcode is not Opcode.PARAMETER:
        cur = cur.operand(0)
    return cur


def fusion_roots(fusion: Instruction) -> list[Instruction]:
    """GetFusionRoots: the root, or the root tuple's operands; a get-tuple-element of a
    tuple-shaped non-tuple op (variadic reduce, custom-call) stands for that op."""
    root = fusion.fused_computation.root
    roots = list(root.operands) if root.opcode is Opcode.TUPLE else [root]
    out = []
    for r in roots:
        if r.opcode is Opcode.GET_TUPLE_ELEMENT and r.operand(0).opcode is not Opcode.TUPLE \
                and r.operand(0).opcode is not Opcode.PARAMETER:
            r = r.operand(0)
        out.append(r)
    return out


def is_real_reduction_hero(root: Instruction, hero: Instruction,
                           config: FusionConfig = DEFAULT) -> bool:
    return is_reduction_from_or_to_contiguous_dims(hero, config)


def is_reduce_input_fusion(instr: Instruction, config: FusionConfig = DEFAULT) -> bool:
    return is_fusion(instr) and any(
        is_real_reduction_hero(r, find_non_trivial_hero(r), config) for r in fusion_roots(instr))


def is_input_fusible_reduction(instr: Instruction, config: FusionConfig = DEFAULT) -> bool:
    return is_reduce_input_fusion(instr, config) or is_reduction_from_or_to_contiguous_dims(
        instr, config)


def is_input_fusible_transpose(instr: Instruction, config: FusionConfig = DEFAULT) -> bool:
    if is_fusion(instr):
        return instr.fusion_kind != FusionKind.CUSTOM and any(
            tiled_transpose_dims(find_non_trivial_hero(r), config) is not None
            for r in fusion_roots(instr))
    return tiled_transpose_dims(instr, config) is not None


def is_input_fusible_scatter(instr: Instruction) -> bool:
    if instr.opcode is Opcode.SCATTER:
        return True
    return (is_fusion(instr) and instr.fusion_kind == FusionKind.INPUT
            and instr.fused_computation.root.opcode is Opcode.SCATTER)


def is_input_fusible(instr: Instruction, config: FusionConfig = DEFAULT) -> bool:
    return is_fusible(instr) and (is_input_fusible_reduction(instr, config)
                                  or is_input_fusible_scatter(instr)
                                  or is_input_fusible_transpose(instr, config))


_UNIVERSAL = frozenset({
    Opcode.BITCAST, Opcode.BROADCAST, Opcode.CONCATENATE, Opcode.DYNAMIC_SLICE,
    Opcode.DYNAMIC_UPDATE_SLICE, Opcode.GATHER, Opcode.PAD, Opcode.REDUCE_WINDOW,
    Opcode.RESHAPE, Opcode.REVERSE, Opcode.SLICE, Opcode.TRANSPOSE})


def is_universally_loop_fusible(instr: Instruction, config: FusionConfig = DEFAULT) -> bool:
    """Elementwise (not copy) with >= 1 operand, non-tiled copy, loop fusion, data movement.
    get-tuple-element is deliberately excluded (free on GPU when unfused)."""
    op = instr.opcode
    if instr.is_elementwise and instr.operand_count > 0 and op is not Opcode.COPY:
        return True
    if op is Opcode.COPY:
        return tiled_transpose_dims(instr, config) is None
    if op is Opcode.BITCAST:
        src, out = instr.operand(0).shape, instr.shape
        # A bitcast that changes the element bit width is not fusible (newer XLA).
        return not (isinstance(src, ArrayShape) and isinstance(out, ArrayShape)
                    and src.dtype.bits != out.dtype.bits)
    if op is Opcode.FUSION:
        return instr.fusion_kind == FusionKind.LOOP
    return op in _UNIVERSAL


def is_loop_fusible_as_consumer(instr: Instruction, config: FusionConfig = DEFAULT) -> bool:
    return is_fusible(instr) and (is_universally_loop_fusible(instr, config)
                                  or instr.opcode is Opcode.REDUCE)


def is_loop_fusible_as_producer(instr: Instruction, config: FusionConfig = DEFAULT) -> bool:
    if not is_fusible(instr):
        return False
    if is_universally_loop_fusible(instr, config):
        return True
    if instr.opcode in (Opcode.IOTA, Opcode.CONSTANT):
        return True
    return instr.opcode is Opcode.REDUCE and not isinstance(instr.shape, TupleShape)


def choose_fusion_kind(producer: Instruction, consumer: Instruction,
                       config: FusionConfig = DEFAULT) -> str:
    return FusionKind.INPUT if is_input_fusible(consumer, config) else FusionKind.LOOP


def _all_satisfy(instr: Instruction, test: Callable[[Instruction], bool]) -> bool:
    if not is_fusion(instr):
        return test(instr)
    return all(i.opcode is Opcode.PARAMETER or test(i)
               for i in instr.fused_computation.instructions)


def is_reduction_epilogue(instr: Instruction, config: FusionConfig = DEFAULT) -> bool:
    """Only reduce intermediates (bitcast, convert, ... one user) in `instr` or its fusion."""
    return _all_satisfy(instr, is_reduce_intermediate)


def is_epilogue_intermediate(instr: Instruction) -> bool:
    """IsIntermediate(instr, allowed_operand_count=1), E3: a one-operand elementwise op, a
    bitcast, or a reshape or transpose that is one."""
    if len(instr.operands) != 1:
        return False
    op = instr.opcode
    if instr.is_elementwise or op is Opcode.BITCAST:
        return True
    if op is Opcode.RESHAPE:
        return reshape_is_bitcast(instr)
    return op is Opcode.TRANSPOSE and transpose_is_bitcast(instr)


def is_epilogue(instr: Instruction, config: FusionConfig = DEFAULT) -> bool:
    """E3's reduction epilogue: only `is_epilogue_intermediate` ops in `instr` or its
    fusion."""
    return _all_satisfy(instr, is_epilogue_intermediate)


Ask = Callable[[Callable[[Instruction, FusionConfig], object], Instruction], object]


def is_producer_consumer_fusible(producer: Instruction, consumer: Instruction,
                                 config: FusionConfig = DEFAULT,
                                 ask: Ask | None = None, e3: bool = False) -> FusionDecision:
    """IsProducerConsumerFusible (E2), checked in order. `ask(pred, instr)`, when given,
    answers `pred(instr, config)` for the one-instruction predicates (a pass run's memo).
    `e3`: the priority-fusion era's version: a reduction (or a fusion whose hero is one) may
    be a producer, its epilogue one-operand ops (`is_epilogue`), and an input fusion that
    became a loop fusion is a loop-fusible consumer."""
    def answer(pred: Callable[[Instruction, FusionConfig], object], instr: Instruction
               ) -> object:
        return pred(instr, config)

    q = answer if ask is None else ask

    reduction = bool(q(is_input_fusible_reduction, producer))
    if not q(is_loop_fusible_as_producer, producer) and not (
            e3 and (reduction or q(is_input_fusible_transpose, producer))) and not (
            q(tiled_transpose_dims, producer) is not None
            and find_non_trivial_hero(consumer) is producer):  # a tiled transpose into itself
        return FusionDecision.no("the producer is not loop-fusible",
                                 "gpu_fusible.producer_not_loop_fusible")
    if reduction:
        if not q(is_epilogue if e3 else is_reduction_epilogue, consumer):
            return FusionDecision.no("Reductions from/to continuous dims epilogue not fusible",
                                     "gpu_fusible.reduction_epilogue")
        if producer.user_count > 1:
            return FusionDecision.no("reduction output fusion only works for single user",
                                     "gpu_fusible.reduction_users")
    loop_input = e3 and is_fusion(consumer) and consumer.fusion_kind == FusionKind.INPUT
    if not q(is_input_fusible, consumer) and not q(is_loop_fusible_as_consumer, consumer) \
            and not loop_input:
        return FusionDecision.no("the consumer is not input-fusible and not loop-fusible",
                                 "gpu_fusible.consumer_not_fusible")
    if is_multi_output_fusion(producer):
        return FusionDecision.no("the producer is not fusible as it is a multi-output fusion",
                                 "gpu_fusible.producer_multi_output")
    if producer.opcode is Opcode.CONSTANT and (
            not producer.array_shape.is_effective_scalar or not is_fusion(consumer)):
        return FusionDecision.no("not fusing constant", "gpu_fusible.constant")
    return should_fuse_in_place_op(producer, consumer)


# ----- heavy computations -------------------------------------------------------------------


def if_fused_reads_elements_multiple_times(instr: Instruction) -> bool:
    if instr.opcode in (Opcode.GATHER, Opcode.BROADCAST):
        out, src = instr.shape, instr.operand(0).shape
        return (isinstance(out, ArrayShape) and isinstance(src, ArrayShape)
                and out.size > src.size)
    if instr.opcode is Opcode.REDUCE_WINDOW:
        return any(d.size > d.stride for d in instr.attrs.get("window", ()))
    return False


def is_expensive_to_repeat(instr: Instruction, config: FusionConfig = DEFAULT) -> bool:
    limit = config.max_inputs_per_output
    if instr.opcode is Opcode.REDUCE and not is_reduction_from_or_to_contiguous_dims(
            instr, config):
        out_elems = leaves(instr.shape)[0].size if leaves(instr.shape) else 0
        src = instr.operand(0).shape
        if isinstance(src, ArrayShape) and out_elems and src.size // out_elems > limit:
            return True
    if instr.opcode is Opcode.REDUCE_WINDOW:
        return bool(math.prod(d.size for d in instr.attrs.get("window", ())) > limit)
    return False


def creates_heavy_computation(producer: Instruction, consumer: Instruction,
                              config: FusionConfig = DEFAULT,
                              producer_heavy: bool | None = None) -> bool:
    """CreatesHeavyComputation (E2): a heavy producer read many times by the consumer.
    `producer_heavy`, when known, is whether the producer has an expensive-to-repeat op."""
    if producer_heavy is not None:
        heavy = producer_heavy
    elif is_fusion(producer):
        heavy = any(is_expensive_to_repeat(i, config)
                    for i in producer.fused_computation.instructions)
    else:
        heavy = is_expensive_to_repeat(producer, config)
    if not heavy:
        return False
    if not is_fusion(consumer):
        return if_fused_reads_elements_multiple_times(consumer)
    for i, o in enumerate(consumer.operands):
        if o is not producer:
            continue
        stack = [consumer.fused_computation.parameter(i)]
        seen: set[int] = set()
        while stack:
            cur = stack.pop()
            if id(cur) in seen:
                continue
            seen.add(id(cur))
            if if_fused_reads_elements_multiple_times(cur):
                return True
            stack.extend(cur.users)
    return False


# ----- budget ------------------------------------------------------------------------------


def shared_memory_usage(instr: Instruction, config: FusionConfig = DEFAULT) -> int:
    if instr.opcode is Opcode.REDUCE and is_reduction_from_or_to_contiguous_dims(instr, config):
        is_row, _ = reduction_kind_and_components(instr)
        size = instr.operand(0).array_shape.dtype.itemsize
        n = len(instr.shape.elements) if isinstance(instr.shape, TupleShape) else 1
        return 32 * size * n if is_row else 2 * 32 * 33 * size * n
    if tiled_transpose_dims(instr, config) is not None:
        return 32 * 33 * instr.array_shape.dtype.itemsize
    if is_fusion(instr):
        return sum(shared_memory_usage(i, config) for i in instr.fused_computation.instructions)
    return 0


def num_unnested_reductions(instr: Instruction, config: FusionConfig = DEFAULT) -> int:
    if instr.opcode is Opcode.REDUCE and is_reduction_from_or_to_contiguous_dims(instr, config):
        return 1
    if is_fusion(instr):
        return sum(num_unnested_reductions(i, config)
                   for i in instr.fused_computation.instructions)
    return 0


def fusion_fits_in_budget(instr1: Instruction, instr2: Instruction,
                          config: FusionConfig = DEFAULT,
                          is_consumer_producer_fusion: bool = False,
                          usage: Callable[[Instruction], tuple[int, int]] | None = None
                          ) -> FusionDecision:
    """FusionFitsInBudget (E2): `instr1` is the consumer when `is_consumer_producer_fusion`.
    `usage(instr)`, when given, is (shared_memory_usage, num_unnested_reductions) of `instr`
    (a pass's cached sums, analysis.py)."""
    if usage is None:
        smem1, red1 = shared_memory_usage(instr1, config), num_unnested_reductions(instr1, config)
        smem2, red2 = shared_memory_usage(instr2, config), num_unnested_reductions(instr2, config)
    else:
        (smem1, red1), (smem2, red2) = usage(instr1), usage(instr2)
    smem = smem1 + smem2
    if smem > config.shared_memory_budget:
        return FusionDecision.no(
            f"shared memory usage would be over the budget of {config.shared_memory_budget}B",
            "shared_memory_budget", shared_memory_bytes=smem)
    reductions = red1 + red2
    if reductions > config.max_unnested_reductions:
        return FusionDecision.no(
            f"over {config.max_unnested_reductions} unnested reductions in fusion",
            "max_unnested_reductions", unnested_reductions=reductions)
    outputs = subshape_count(instr1.shape) + subshape_count(instr2.shape)
    limit = config.max_operands_and_outputs
    if instr1.operand_count + instr2.operand_count - 1 + outputs <= limit:
        return FusionDecision.ok()
    operands = {id(o): o for o in (*instr1.operands, *instr2.operands)}
    operands.pop(id(instr1), None)
    operands.pop(id(instr2), None)
    if is_consumer_producer_fusion and len(operands) <= instr1.operand_count:
        return FusionDecision.ok()
    if len(operands) + outputs > limit:
        return FusionDecision.no(
            "Number of operands and output buffers is larger than allowed budget per fusion",
            "max_operands_and_outputs", operands=len(operands), outputs=outputs, limit=limit)
    return FusionDecision.ok()
