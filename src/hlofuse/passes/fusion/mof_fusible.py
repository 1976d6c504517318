"""Multi-output fusion predicates (XLA's gpu_fusible.cc, era E2): which instructions can be a
root of a multi-output fusion, which producers can become an extra output, and whether two
fusions share a loop.

    fusion A (hero h1) ─┐                    real hero: the reduction / tiled transpose a
                        ├─ one kernel?       fusion is built around, else its root
    fusion B (hero h2) ─┘                    loop shape: a tiled hero's input, else its output

Conditions enforced:

* `is_fusible_as_multi_output_fusion_root`: fusible, and an input-fusible reduction or
  transpose, a loop fusion, or elementwise;
* `is_producer_multi_output_fusible`: not already multi-output, no in-place operands,
  loop-fusible, not physically transposing;
* `fusion_heroes_are_compatible`: tiled reductions of equal shapes, tiled transposes of equal
  shapes, never a transpose with a reduction, a tiled transpose only read through single-user
  intermediates;
* `shapes_compatible_for_multi_output_fusion`: compatible heroes and equal loop shapes (or
  reshape-bitcasts of each other);
* `is_consumer_the_only_non_root_user`: every use outside the root goes (through
  get-tuple-element / bitcast) to one consumer.

`ask(pred, instr)` (a pass run's memo, analysis.py) may answer the one-instruction questions.
"""

from __future__ import annotations

from collections.abc import Callable

from hlofuse.ir.fusion import is_fusion, is_multi_output_fusion
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import FusionKind, Opcode
from hlofuse.ir.shape import ArrayShape, Shape, TupleShape
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.gpu_fusible import (
    DEFAULT,
    Ask,
    find_non_trivial_hero,
    is_input_fusible_reduction,
    is_input_fusible_transpose,
    is_loop_fusible_as_producer,
    is_physically_transposing,
    is_real_reduction_hero,
    is_reduce_intermediate,
    is_reduction_from_or_to_contiguous_dims,
    nontrivial_physical,
    tiled_transpose_dims,
)
from hlofuse.passes.fusion.predicates import in_place_operands, is_fusible


def is_fusible_as_multi_output_fusion_root(instr: Instruction,
                                           config: FusionConfig = DEFAULT) -> bool:
    return is_fusible(instr) and (
        is_input_fusible_reduction(instr, config) or is_input_fusible_transpose(instr, config)
        or (is_fusion(instr) and instr.fusion_kind == FusionKind.LOOP) or instr.is_elementwise)


def is_producer_multi_output_fusible(producer: Instruction,
                                     config: FusionConfig = DEFAULT) -> FusionDecision:
    if is_multi_output_fusion(producer):
        return FusionDecision.no("Producer is a multi-output fusion",
                                 "mof_fusible.producer_multi_output")
    if in_place_operands(producer):
        return FusionDecision.no("In-place operations are present", "mof_fusible.in_place")
    if not is_loop_fusible_as_producer(producer, config):
        return FusionDecision.no("producer is not loop-fusible",
                                 "mof_fusible.producer_not_loop_fusible")
    if is_physically_transposing(producer):
        return FusionDecision.no("producer is physically transposing", "mof_fusible.transposing")
    return FusionDecision.ok()


def real_hero_for_multi_output_fusion(instr: Instruction,
                                      config: FusionConfig = DEFAULT) -> Instruction:
    if not is_fusion(instr):
        return instr
    root = instr.fused_computation.root
    if not is_multi_output_fusion(instr):
        hero = find_non_trivial_hero(root)
        if is_real_reduction_hero(root, hero, config) or tiled_transpose_dims(hero, config):
            return hero
        return root
    for r in root.operands:
        hero = find_non_trivial_hero(r)
        if is_real_reduction_hero(r, hero, config) or tiled_transpose_dims(hero, config):
            return hero
    return root.operand(0)


def _same_dims_ignoring_type(a: Shape, b: Shape) -> bool:
    if isinstance(a, ArrayShape) and isinstance(b, ArrayShape):
        return a.dims == b.dims and a.minor_to_major == b.minor_to_major
    if isinstance(a, TupleShape) and isinstance(b, TupleShape):
        return len(a.elements) == len(b.elements) and all(
            _same_dims_ignoring_type(x, y) for x, y in zip(a.elements, b.elements))
    return False


def _asker(config: FusionConfig, ask: Ask | None
           ) -> Callable[[Callable[[Instruction, FusionConfig], object], Instruction], object]:
    if ask is not None:
        return ask
    return lambda pred, instr: pred(instr, config)


def fusion_heroes_are_compatible(h1: Instruction, h2: Instruction,
                                 config: FusionConfig = DEFAULT,
                                 ask: Ask | None = None) -> FusionDecision:
    q = _asker(config, ask)
    r1 = q(is_reduction_from_or_to_contiguous_dims, h1)
    r2 = q(is_reduction_from_or_to_contiguous_dims, h2)
    t1 = q(tiled_transpose_dims, h1)
    t2 = q(tiled_transpose_dims, h2)
    if r1 and r2:
        same = (_same_dims_ignoring_type(h1.shape, h2.shape)
                and _same_dims_ignoring_type(h1.operand(0).shape, h2.operand(0).shape)
                and h1.dimensions == h2.dimensions)
        if not same:
            return FusionDecision.no("tiled reductions with different shapes",
                                     "mof_fusible.reduction_shapes")
    elif t1 and t2 and t1 != t2:
        return FusionDecision.no("tiled transposes with different shapes",
                                 "mof_fusible.transpose_shapes")
    elif (t1 and r2) or (r1 and t2):
        return FusionDecision.no("MOF-fusion of a transpose and a reduction",
                                 "mof_fusible.transpose_and_reduction")
    if t1 or t2:
        # A tiled transpose must stay tiled: when one fusion reads the other, the path from
        # the parameter bound to the transposing fusion must be single-user intermediates.
        f1 = h1.parent.fusion_instruction if h1.parent is not None else None
        f2 = h2.parent.fusion_instruction if h2.parent is not None else None
        if f1 is not None and f2 is not None:
            for hero_t, fa, fb in ((t1, f1, f2), (t2, f2, f1)):
                if hero_t and any(o is fa for o in fb.operands):
                    param = fb.fused_computation.parameter(
                        next(i for i, o in enumerate(fb.operands) if o is fa))
                    if not _intermediate_path_to_root(param):
                        return FusionDecision.no("tiled transpose would become untiled",
                                                 "mof_fusible.untiled_transpose")
    return FusionDecision.ok()


def _intermediate_path_to_root(param: Instruction) -> bool:
    if param.user_count != 1:
        return False
    cur = param.users[0]
    while cur.user_count > 0:
        if not (is_reduce_intermediate(cur) or (cur.is_elementwise and cur.operand_count == 1
                                                 and cur.user_count <= 1)):
            return False
        cur = cur.users[0]
    return True


def shapes_compatible_for_multi_output_fusion(a: Instruction, b: Instruction,
                                              config: FusionConfig = DEFAULT,
                                              ask: Ask | None = None) -> FusionDecision:
    q = _asker(config, ask)
    h1 = q(real_hero_for_multi_output_fusion, a)
    h2 = q(real_hero_for_multi_output_fusion, b)
    assert isinstance(h1, Instruction) and isinstance(h2, Instruction)
    compatible = fusion_heroes_are_compatible(h1, h2, config, ask)
    if not compatible:
        return compatible

    def loop_shape(h: Instruction) -> Shape:
        if q(is_reduction_from_or_to_contiguous_dims, h) or q(tiled_transpose_dims, h):
            return h.operand(0).shape
        return h.shape

    l1, l2 = loop_shape(h1), loop_shape(h2)
    if _same_dims_ignoring_type(l1, l2):
        return FusionDecision.ok()
    if isinstance(l1, ArrayShape) and isinstance(l2, ArrayShape) and l1.size == l2.size \
            and nontrivial_physical(l1) == sorted(nontrivial_physical(l1)) \
            and nontrivial_physical(l2) == sorted(nontrivial_physical(l2)):
        return FusionDecision.ok()  # a reshape bitcast of each other
    return FusionDecision.no("different loop shapes", "mof_fusible.loop_shapes")


def is_consumer_the_only_non_root_user(instr: Instruction, consumer: Instruction) -> bool:
    """Every user of `instr` is `consumer` or the root, looking through get-tuple-element and
    bitcast users (which must lead somewhere: have users or be the root). Without
    recursion: a long bitcast chain is a long walk, not a deep stack."""
    stack = list(instr.users)
    while stack:
        user = stack.pop()
        if user.opcode in (Opcode.GET_TUPLE_ELEMENT, Opcode.BITCAST):
            if not user.users and not user.is_root:
                return False
            stack.extend(user.users)
        elif user is not consumer and not user.is_root:
            return False
    return True
