"""`Computation`: a DAG of instructions with parameters and one root.

Instructions are kept in insertion order (the order the text lists them); `post_order()` gives a
defs-before-uses order that visits operands (and control predecessors) first, like XLA's
`MakeInstructionPostOrder`, including instructions the root does not reach.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode

if TYPE_CHECKING:
    from hlofuse.ir.module import Module


class Computation:
    def __init__(self, name: str) -> None:
        self.name = name
        self.instructions: list[Instruction] = []
        self._root: Instruction | None = None
        self.parent: Module | None = None
        # Set on fused computations: the fusion instruction that calls this computation.
        self.fusion_instruction: Instruction | None = None

    # ----- structure ----------------------------------------------------------------------

    @property
    def root(self) -> Instruction:
        if self._root is None:
            raise ValueError(f"computation {self.name} has no root")
        return self._root

    @root.setter
    def root(self, instr: Instruction) -> None:
        self._root = instr

    @property
    def has_root(self) -> bool:
        return self._root is not None

    @property
    def parameters(self) -> list[Instruction]:
        params = [i for i in self.instructions if i.opcode is Opcode.PARAMETER]
        return sorted(params, key=lambda p: p.parameter_number or 0)

    def parameter(self, number: int) -> Instruction:
        for p in self.instructions:
            if p.opcode is Opcode.PARAMETER and p.parameter_number == number:
                return p
        raise IndexError(f"computation {self.name} has no parameter {number}")

    @property
    def is_fusion_computation(self) -> bool:
        return self.fusion_instruction is not None

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def __len__(self) -> int:
        return len(self.instructions)

    # ----- mutation -----------------------------------------------------------------------

    def add(self, instr: Instruction, *, before: Instruction | None = None) -> Instruction:
        """Insert `instr`; give it a module-unique name derived from its current name."""
        instr.parent = self
        if self.parent is not None:
            instr.name = self.parent.unique_name(instr.name or instr.opcode.value)
        elif not instr.name:
            instr.name = instr.opcode.value
        if before is None:
            self.instructions.append(instr)
        else:
            self.instructions.insert(self.instructions.index(before), instr)
        return instr

    def remove(self, instr: Instruction) -> None:
        """Delete an instruction that has no users (and is not the root)."""
        if instr.users:
            users = ", ".join(u.name for u in instr.users)
            raise ValueError(f"cannot remove {instr.name}: still used by {users}")
        if self._root is instr:
            raise ValueError(f"cannot remove {instr.name}: it is the root of {self.name}")
        instr.detach_operands()
        instr.control_predecessors = []
        self.instructions.remove(instr)
        instr.parent = None
        if self.parent is not None:
            self.parent.release_name(instr.name)

    def replace_instruction(self, old: Instruction, new: Instruction) -> None:
        """Make every use of `old` a use of `new` (adding `new` if needed), then delete `old`."""
        if new.parent is None:
            self.add(new, before=old)
        old.replace_all_uses_with(new)
        self.remove(old)

    def remove_dead(self, instr: Instruction) -> None:
        """Remove `instr` and, recursively, operands that become unused (not parameters)."""
        stack = [instr]
        while stack:
            cur = stack.pop()
            if cur.users or cur is self._root or cur.parent is not self:
                continue
            operands = list(dict.fromkeys(cur.operands))
            self.remove(cur)
            stack.extend(o for o in operands if o.opcode is not Opcode.PARAMETER)

    # ----- traversal ----------------------------------------------------------------------

    def post_order(self) -> list[Instruction]:
        visited: set[int] = set()
        order: list[Instruction] = []
        for start in self.instructions:
            if id(start) in visited:
                continue
            # Iterative DFS: (node, expanded?) pairs.
            stack: list[tuple[Instruction, bool]] = [(start, False)]
            while stack:
                node, expanded = stack.pop()
                if expanded:
                    order.append(node)
                    continue
                if id(node) in visited:
                    continue
                visited.add(id(node))
                stack.append((node, True))
                preds = list(node.operands) + node.control_predecessors
                for op in reversed(preds):
                    if id(op) not in visited:
                        stack.append((op, False))
        return order

    def __repr__(self) -> str:
        return f"<Computation {self.name}: {len(self.instructions)} instructions>"
