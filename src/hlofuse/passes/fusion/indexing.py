"""Code-duplication estimate for a fusion (XLA's FusionNodeIndexingEvaluation).

A loop fusion emits each fused op once per distinct *index* it is asked for. Walking the fused
computation from the root, an operand inherits its user's indexing users when the index is
reused (same shape, or a transpose), otherwise the user itself becomes a new indexing user::

    ROOT add(slice.a(x), slice.b(x))     x is indexed by slice.a and slice.b: emitted twice
    a tree of k such levels              the producer at the bottom is emitted 2**k times

Conditions enforced by `check_code_duplication(producer)` (negative when too high):

* a broadcast producer is never "too high" (materialising it is worse);
* emitted copies > `max_code_duplication` (15) -> too high;
* an op that invalidates the emitter's cache (INVALIDATES_CACHE: concatenate, dot, dus, pad,
  reduce, reduce-window) emitted more than once, or with more than one user -> too high
  (unless `relax_code_duplication`; a multi-user concatenate is allowed with
  `allow_multi_user_concatenate`).
"""

from __future__ import annotations

from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import INVALIDATES_CACHE, Opcode
from hlofuse.ir.shape import ArrayShape, Shape
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.utils import ordered


def _same_shape_ignoring_type(a: Shape, b: Shape) -> bool:
    if a is b:
        return True
    if isinstance(a, ArrayShape) and isinstance(b, ArrayShape):
        return a.dims == b.dims and a.minor_to_major == b.minor_to_major
    return a.same_dims(b)


class FusionNodeIndexingEvaluation:
    """Indexing users and emitted-copy counts of one fusion's instructions.

    Keys are instructions (identity); a parameter stands for the fusion operand bound to it.
    Built in one walk over the fused computation; a pass run that keeps one per fusion updates
    it when it fuses a plain producer in (`remove_fusion_operand`, then
    `update_evaluation_cache` for the clone), as XLA's GpuInstructionFusion does, instead of
    walking the grown fusion again."""

    def __init__(self, fusion: Instruction, root_usage_count: int = 1) -> None:
        self.fusion = fusion
        self.index_usage_count: dict[Instruction, int] = {fusion: root_usage_count}
        self.indexing_users: dict[Instruction, set[Instruction]] = {}
        root = fusion.fused_computation.root
        self.indexing_users[root] = {fusion}
        # any defs-before-uses order, reversed, gives the same sets and counts
        order = ordered(fusion.fused_computation)
        for instr in reversed(order):
            if instr.opcode is Opcode.PARAMETER:
                continue
            self._update_count(instr)
            self._update_operands(instr)

    def _update_count(self, instr: Instruction) -> None:
        users = self.indexing_users.get(instr, ())
        counts = self.index_usage_count
        counts[instr] = sum(map(counts.__getitem__, users))

    def _update_operands(self, instr: Instruction) -> None:
        indexing_users = self.indexing_users
        mine = indexing_users.get(instr)
        if mine is None:
            mine = indexing_users[instr] = set()
        transpose, shape = instr.opcode is Opcode.TRANSPOSE, instr.shape
        for operand in instr._operands:  # (the list itself: this runs for every fused op)
            key_instr = operand
            if operand.opcode is Opcode.PARAMETER and operand.parameter_number is not None:
                key_instr = self.fusion.operand(operand.parameter_number)
            target = indexing_users.get(key_instr)
            if target is None:
                target = indexing_users[key_instr] = set()
            if transpose or _same_shape_ignoring_type(operand.shape, shape):
                target |= mine
            else:
                target.add(instr)

    def remove_fusion_operand(self, operand: Instruction) -> set[Instruction]:
        """Forget fusion operand `operand` (about to be fused in); its indexing users."""
        return self.indexing_users.pop(operand, set())

    def update_evaluation_cache(self, clone: Instruction,
                                indexing_users: set[Instruction]) -> None:
        """`clone` (a plain instruction just fused in) inherits the indexing users of the
        operand it replaced; count its copies and pass them on to its operands."""
        self.indexing_users[clone] = indexing_users
        self._update_count(clone)
        self._update_operands(clone)

    def emitted_instructions(self, producer: Instruction) -> int:
        """How many copies of `producer` fusing it into this fusion would emit."""
        users = self.indexing_users.get(producer, ())
        return sum(self.index_usage_count.get(u, 0) for u in users)

    @staticmethod
    def user_count(instr: Instruction) -> int:
        count = 0
        for user in instr.users:
            if user.opcode is Opcode.FUSION:
                for i, o in enumerate(user.operands):
                    if o is instr:
                        count += user.fused_computation.parameter(i).user_count
            else:
                count += 1
        return count

    def check_code_duplication(self, producer: Instruction,
                               config: FusionConfig | None = None) -> FusionDecision:
        config = config or FusionConfig()
        if producer.opcode is Opcode.BROADCAST:
            return FusionDecision.ok()
        emitted = self.emitted_instructions(producer)
        reason = "the fusion would result in an overly large code duplication"
        if emitted > config.max_code_duplication:
            return FusionDecision.no(reason, "max_code_duplication", emitted=emitted,
                                     limit=config.max_code_duplication)
        if producer.opcode in INVALIDATES_CACHE and not config.relax_code_duplication:
            users = self.user_count(producer)
            if producer.opcode is Opcode.CONCATENATE and config.allow_multi_user_concatenate:
                return FusionDecision.ok(emitted=emitted)
            if emitted > 1 or users > 1:
                return FusionDecision.no(
                    reason, "allow_multi_user_concatenate" if producer.opcode is Opcode.CONCATENATE
                    else "relax_code_duplication", emitted=emitted, users=users)
        return FusionDecision.ok(emitted=emitted)

    def max_code_duplication_too_high(self, config: FusionConfig | None = None) -> bool:
        config = config or FusionConfig()
        for instr, count in self.index_usage_count.items():
            if count > config.max_code_duplication:
                return True
            if instr is not self.fusion and instr.opcode in INVALIDATES_CACHE and count > 1 \
                    and not config.relax_code_duplication:
                return True
        return False
