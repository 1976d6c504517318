"""`Instruction`: one HLO operation, its operands, users, attributes and metadata.

Use-def links are kept consistent by the mutators here (`set_operand`, `replace_operand`,
`replace_all_uses_with`, `detach`): a pass never edits `users` directly. `users` is de-duplicated,
as in XLA: a user that reads the same operand twice appears once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hlofuse.ir.attributes import ATTRIBUTES, COMPUTATION_ATTRS, AttrKind
from hlofuse.ir.literal import Literal
from hlofuse.ir.metadata import Metadata
from hlofuse.ir.opcodes import (
    CONTROL_FLOW_OPS,
    NON_KERNEL_OPS,
    OPCODES,
    Category,
    FusionKind,
    Opcode,
)
from hlofuse.ir.shape import ArrayShape, Shape, TupleShape

if TYPE_CHECKING:
    from hlofuse.ir.computation import Computation


# ids of the opcodes the table calls elementwise (`is_elementwise` runs for every edge a
# fusion pass looks at)
_CALL_ATTRS = frozenset(COMPUTATION_ATTRS)  # attributes that name computations

_ELEMENTWISE = frozenset(id(op) for op, info in OPCODES.items()
                         if info.category is Category.ELEMENTWISE)


def _drop_user(users: list[Instruction], user: Instruction) -> bool:
    """Remove `user` from a (de-duplicated) user list if it is there; returns whether it was.
    The last slots are looked at first: the user removed is most often a recent one."""
    n = len(users)
    for k in range(n - 1, max(n - 5, -1), -1):
        if users[k] is user:
            del users[k]
            return True
    try:
        users.remove(user)
    except ValueError:
        return False
    return True


NO_METADATA = Metadata()  # (immutable: the one empty value every instruction without any shares)


@dataclass(eq=False, slots=True)
class Instruction:
    """An HLO instruction. Identity semantics: two instructions are equal only if they are one."""

    opcode: Opcode
    shape: Shape
    name: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)
    literal: Literal | None = None
    parameter_number: int | None = None
    metadata: Metadata = NO_METADATA
    parent: Computation | None = None
    _operands: list[Instruction] = field(default_factory=list, repr=False)
    users: list[Instruction] = field(default_factory=list, repr=False)
    control_predecessors: list[Instruction] = field(default_factory=list, repr=False)

    @classmethod
    def create(
        cls,
        opcode: Opcode,
        shape: Shape,
        operands: Sequence[Instruction] = (),
        *,
        name: str = "",
        attrs: dict[str, Any] | None = None,
        literal: Literal | None = None,
        parameter_number: int | None = None,
        metadata: Metadata | None = None,
    ) -> Instruction:
        instr = cls(
            opcode,
            shape,
            name=name,
            attrs=dict(attrs or {}),
            literal=literal,
            parameter_number=parameter_number,
            metadata=metadata or NO_METADATA,
        )
        instr._operands.extend(operands)
        # a new instruction is in no user list yet: one append per distinct operand, in order
        # (no scan of the operand's users, which may be many)
        for op in dict.fromkeys(instr._operands):
            op.users.append(instr)
        return instr

    # ----- operands and users -------------------------------------------------------------

    @property
    def operands(self) -> tuple[Instruction, ...]:
        return tuple(self._operands)

    def operand(self, i: int) -> Instruction:
        return self._operands[i]

    @property
    def operand_count(self) -> int:
        return len(self._operands)

    def operand_indices(self, op: Instruction) -> list[int]:
        return [i for i, o in enumerate(self._operands) if o is op]

    def set_operand(self, i: int, new: Instruction) -> None:
        old = self._operands[i]
        if old is new:
            return
        self._operands[i] = new
        if self.parent is not None:
            self.parent._version += 1
        # (`in` and `index` on instruction lists compare by identity: Instruction has eq=False)
        if old not in self._operands and not _drop_user(old.users, self):
            raise ValueError(f"{self.name} is not a user of {old.name}")
        if self not in new.users:
            new.users.append(self)

    def replace_operand(self, old: Instruction, new: Instruction) -> None:
        if old is new:
            return
        operands = self._operands
        count = operands.count(old)  # (a failing index() would format repr(old))
        if not count:
            return
        if self.parent is not None:
            self.parent._version += 1
        # every position of `old` at once (a root tuple may have thousands of operands, and
        # each of its producers is replaced in turn): the user lists change once
        i = -1
        for _ in range(count):
            i = operands.index(old, i + 1)
            operands[i] = new
        if not _drop_user(old.users, self):
            raise ValueError(f"{self.name} is not a user of {old.name}")
        if self not in new.users:
            new.users.append(self)

    def append_operand(self, new: Instruction) -> None:
        self._operands.append(new)
        if self.parent is not None:
            self.parent._version += 1
        if self not in new.users:
            new.users.append(self)

    def set_operands(self, new_operands: Iterable[Instruction]) -> None:
        """Replace the operand list; this becomes the last user of each operand."""
        detached = self.detach_operands()
        for op in new_operands:
            self._operands.append(op)
            if op in detached:  # just dropped from its users: no need to look for it
                detached.discard(op)
                op.users.append(self)
            elif self not in op.users:
                op.users.append(self)

    def detach_operands(self) -> set[Instruction]:
        """Drop every operand edge (used before deleting the instruction). Returns the
        operands whose user lists this was removed from."""
        dropped = {op for op in set(self._operands) if _drop_user(op.users, self)}
        self._operands.clear()
        if self.parent is not None:
            self.parent._version += 1
        return dropped

    def replace_all_uses_with(self, new: Instruction) -> None:
        """Point every user (and the computation root, if this is it) at `new`."""
        if new is self:
            return
        for user in list(self.users):
            user.replace_operand(self, new)
        for user in list(self.users):  # control successors are users without operand edges
            if self in user.control_predecessors:
                user.control_predecessors = [
                    new if p is self else p for p in user.control_predecessors
                ]
                if user.parent is not None:
                    user.parent.touch()
        if self.parent is not None and self.parent.root is self:
            self.parent.root = new

    @property
    def user_count(self) -> int:
        return len(self.users)

    # ----- attributes and called computations ---------------------------------------------

    def called_computations(self) -> list[Computation]:
        """The computations this instruction calls, in `COMPUTATION_ATTRS` order. Most call
        nothing, and most of the rest name one attribute (a fusion's `calls`, a reduce's
        `to_apply`): both are answered without the ordered walk (every pass walks every
        computation's instructions through this)."""
        attrs = self.attrs
        if not attrs:
            return []
        keys = _CALL_ATTRS.intersection(attrs)
        if not keys:
            return []
        if len(keys) == 1:
            (key,) = keys
            value = attrs[key]
            if value is None:
                return []
            return list(value) if ATTRIBUTES[key] is AttrKind.COMPUTATIONS else [value]
        out: list[Computation] = []
        for key in COMPUTATION_ATTRS:
            value = attrs.get(key)
            if value is None:
                continue
            if ATTRIBUTES[key] is AttrKind.COMPUTATIONS:
                out.extend(value)
            else:
                out.append(value)
        return out

    def replace_called_computation(self, old: Computation, new: Computation) -> None:
        if self.parent is not None:
            self.parent.touch()
        for key in COMPUTATION_ATTRS:
            value = self.attrs.get(key)
            if value is None:
                continue
            if isinstance(value, tuple):
                self.attrs[key] = tuple(new if c is old else c for c in value)
            elif value is old:
                self.attrs[key] = new

    @property
    def dimensions(self) -> tuple[int, ...]:
        return tuple(self.attrs.get("dimensions", ()))

    @property
    def fused_computation(self) -> Computation:
        assert self.opcode is Opcode.FUSION, self
        return self.attrs["calls"][0]

    @property
    def fusion_kind(self) -> str:
        return str(self.attrs.get("kind", FusionKind.LOOP))

    @property
    def is_root(self) -> bool:
        return self.parent is not None and self.parent.root is self

    # ----- facts derived from the opcode table ---------------------------------------------

    @property
    def category(self) -> Category:
        return self.opcode.info.category

    @property
    def is_elementwise(self) -> bool:
        if self.opcode is Opcode.BITCAST_CONVERT:
            # Only same-width bitcast-converts map element to element.
            a, b = self.shape, self._operands[0].shape if self._operands else None
            return (
                isinstance(a, ArrayShape)
                and isinstance(b, ArrayShape)
                and a.dtype.bits == b.dtype.bits
            )
        return id(self.opcode) in _ELEMENTWISE  # (hashing an Enum member runs Python code)

    @property
    def branches(self) -> list[Computation]:
        """A conditional's branch computations in selector order: its `branch_computations`
        (an s32 selector), or `true_computation` then `false_computation` (a pred selector,
        true first); [] for any other instruction."""
        if self.opcode is not Opcode.CONDITIONAL:
            return []
        attrs = self.attrs
        listed = attrs.get("branch_computations")
        if listed:
            return list(listed)
        return [attrs["true_computation"], attrs["false_computation"]]

    @property
    def is_kernel(self) -> bool:
        """Does this instruction launch work on its own (kernel accounting)? Not plumbing
        (`NON_KERNEL_OPS`) and not control flow (`CONTROL_FLOW_OPS`: its computations'
        instructions are the kernels)."""
        return self.opcode not in NON_KERNEL_OPS and self.opcode not in CONTROL_FLOW_OPS

    @property
    def has_side_effect(self) -> bool:
        if self.opcode is Opcode.CUSTOM_CALL:
            return bool(self.attrs.get("custom_call_has_side_effect", False))
        return self.opcode.info.side_effect

    @property
    def array_shape(self) -> ArrayShape:
        assert isinstance(self.shape, ArrayShape), f"{self.name} has non-array shape {self.shape}"
        return self.shape

    @property
    def is_tuple_shaped(self) -> bool:
        return isinstance(self.shape, TupleShape)

    def __repr__(self) -> str:
        ops = ", ".join(o.name for o in self._operands)
        return f"<{self.name} = {self.shape} {self.opcode.value}({ops})>"
