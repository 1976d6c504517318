"""`Computation`: a DAG of instructions with parameters and one root.

Instructions are kept in insertion order (the order the text lists them); `post_order()` gives a
defs-before-uses order that visits operands (and control predecessors) first, like XLA's
`MakeInstructionPostOrder`, including instructions the root does not reach.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode

if TYPE_CHECKING:
    from hlofuse.ir.module import Module


# Lists this long or longer may keep an index of positions (`Computation.position`); shorter
# ones (most fused computations) are always scanned.
_INDEXED = 64


class Computation:
    # (attribute reads are most of what a pass does: slots make them faster and the objects
    # smaller; nothing may add attributes to a computation)
    __slots__ = (
        "__weakref__",
        "_instructions",
        "_parameter_index",
        "_positions",
        "_removed",
        "_root",
        "_scanned",
        "_shifts",
        "_version",
        "fusion_instruction",
        "name",
        "parent",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self._instructions: list[Instruction] = []
        # While `deferred_removals()` is active: removed instructions still in the list.
        self._removed: set[Instruction] | None = None
        self._root: Instruction | None = None
        self.parent: Module | None = None
        # Set on fused computations: the fusion instruction that calls this computation.
        self.fusion_instruction: Instruction | None = None
        # parameter number -> parameter, a lookup aid checked on every use (see `parameter`)
        self._parameter_index: list[Instruction | None] = []
        # instruction -> list index, a lookup aid checked on every use (see `position`), and
        # how many entries have shifted by one since it was exact (insertions, removals).
        self._positions: dict[Instruction, int] | None = None
        self._shifts = 0
        self._scanned = 0  # list entries scanned past since the index was (re)built
        # Counts edits (see `version`).
        self._version = 0

    @property
    def version(self) -> int:
        """A number that changes whenever this computation does: an instruction added,
        removed or replaced, an operand edge changed (Instruction's mutators), the root set, the
        list replaced or parameters renumbered, or `touch()`. Code that edits the instruction
        list in place, or an instruction's attributes or shape, calls `touch()`. Passes key
        facts they keep between runs on it (`Module.caches`)."""
        return self._version

    def touch(self) -> None:
        """Say that this computation changed in a way its mutators did not see."""
        self._version += 1

    # ----- structure ----------------------------------------------------------------------

    @property
    def instructions(self) -> list[Instruction]:
        if self._removed:
            self._flush_removals()
        return self._instructions

    @instructions.setter
    def instructions(self, instrs: list[Instruction]) -> None:
        self._instructions = instrs
        self._positions = None
        self._version += 1
        if self._removed:
            self._removed = set()

    @contextmanager
    def deferred_removals(self) -> Iterator[None]:
        """While active, `remove` leaves the instruction in the list (finding it there costs
        O(n)) and the list drops all of them at once when next read, or at the end. For a pass
        that removes many instructions between reads of the list (instruction fusion, the
        fusion merger). Removals then shift nothing in the list, so `position`'s index of it
        stays exact."""
        if self._removed is not None:
            yield
            return
        self._removed = set()
        try:
            yield
        finally:
            self._flush_removals()
            self._removed = None
            self._positions = None

    def _flush_removals(self) -> None:
        removed = self._removed
        if removed:
            self._instructions[:] = [i for i in self._instructions if i not in removed]
            removed.clear()
            self._positions = None

    @property
    def root(self) -> Instruction:
        if self._root is None:
            raise ValueError(f"computation {self.name} has no root")
        return self._root

    @root.setter
    def root(self, instr: Instruction) -> None:
        self._root = instr
        self._version += 1

    @property
    def has_root(self) -> bool:
        return self._root is not None

    @property
    def parameters(self) -> list[Instruction]:
        params = [i for i in self.instructions if i.opcode is Opcode.PARAMETER]
        return sorted(params, key=lambda p: p.parameter_number or 0)

    def parameter(self, number: int) -> Instruction:
        """Parameter `number`. Looked up in an index that is checked on every use (the entry
        must still be a parameter of this computation with that number) and rebuilt from the
        instruction list when stale, so edits anywhere keep it correct; code that removes a
        parameter and renumbers the later ones says so (`parameters_renumbered`) to spare the
        rebuild."""
        p = self._indexed_parameter(number)
        if p is None:
            self._parameter_index = self._scan_parameters()
            p = self._indexed_parameter(number)
        if p is None:  # numbers beyond the instruction count are not indexed
            for q in self.instructions:
                if q.opcode is Opcode.PARAMETER and q.parameter_number == number:
                    return q
            raise IndexError(f"computation {self.name} has no parameter {number}")
        return p

    def parameters_numbered(self, start: int, stop: int) -> list[Instruction]:
        """`[parameter(i) for i in range(start, stop)]`, checking the index's entries in one
        loop instead of a lookup per number (a wide fusion's parameters are listed after
        every change to it)."""
        out = self._parameter_index[start:stop]
        if len(out) == stop - start:
            n = start
            for p in out:
                if p is None or p.parent is not self or p.parameter_number != n \
                        or p.opcode is not Opcode.PARAMETER:
                    break
                n += 1
            else:
                return out  # type: ignore[return-value]
        return [self.parameter(i) for i in range(start, stop)]

    def parameters_renumbered(self, removed: int) -> None:
        """Parameter `removed` is gone and the ones after it were numbered one lower: move
        their index entries down too (a rebuild would cost a scan of every instruction)."""
        self._version += 1
        if removed < len(self._parameter_index):
            del self._parameter_index[removed]

    def _indexed_parameter(self, number: int) -> Instruction | None:
        index = self._parameter_index
        if 0 <= number < len(index):
            p = index[number]
            if p is not None and p.parent is self and p.parameter_number == number \
                    and p.opcode is Opcode.PARAMETER:
                return p
        return None

    def _scan_parameters(self) -> list[Instruction | None]:
        index: list[Instruction | None] = []
        limit = len(self.instructions)
        for p in self.instructions:
            n = p.parameter_number
            if p.opcode is not Opcode.PARAMETER or n is None or not 0 <= n < limit:
                continue
            if n >= len(index):
                index.extend([None] * (n + 1 - len(index)))
            if index[n] is None:  # the first one listed, as a scan would find
                index[n] = p
        return index

    @property
    def is_fusion_computation(self) -> bool:
        return self.fusion_instruction is not None

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def __len__(self) -> int:
        return len(self.instructions)

    # ----- mutation -----------------------------------------------------------------------

    def add(self, instr: Instruction, *, before: Instruction | None = None,
            after: Instruction | None = None) -> Instruction:
        """Insert `instr` (at the end, or just before `before`, or just after `after`); give
        it a module-unique name derived from its current name."""
        if self._removed and instr in self._removed:
            self._flush_removals()  # back after a deferred removal: drop the old entry first
        self._adopt(instr)
        if before is None and after is None:
            self._instructions.append(instr)
            if self._positions is not None:
                self._positions[instr] = len(self._instructions) - 1
        else:
            at = (self.position(before) if before is not None
                  else self.position(after) + 1)  # type: ignore[arg-type]  # (one is set)
            self._instructions.insert(at, instr)
            if self._positions is not None:
                self._positions[instr] = at
                self._shifts += 1  # the later ones moved
        return instr

    def _adopt(self, instr: Instruction) -> None:
        """Make `instr` one of this computation's instructions (not yet listed)."""
        instr.parent = self
        self._version += 1
        if self.parent is not None:
            instr.name = self.parent.unique_name(instr.name or instr.opcode.value)
        elif not instr.name:
            instr.name = instr.opcode.value
        if instr.opcode is Opcode.PARAMETER and instr.parameter_number == len(
                self._parameter_index):
            self._parameter_index.append(instr)  # the next number: keep the index whole

    def position(self, instr: Instruction) -> int:
        """Index of `instr` in the instruction list. Passes edit near the end of the list
        (consumers are visited from the back), so the last few slots are looked at first.
        Otherwise the list is scanned, until the scans have passed more entries than the
        list holds: then a list of `_INDEXED` or more instructions builds an index of
        positions, checked on every use. An entry may be off by at most the insertions and
        removals since it was exact (`_shifts`), so a stale one is looked for that far around
        it, and found by a scan (and rebuilt, as above) when that window grows past about
        the list's square root. (Instruction fusion looks up every consumer it wraps,
        multi-output fusion every fusion it adds outputs to: a scan of the list each would
        be O(n^2) per pass; a fused computation's few lookups near its start scan little.)
        Inside `deferred_removals` removed instructions stay listed, so nothing shifts."""
        instrs = self._instructions
        n = len(instrs)
        for k in range(n - 1, max(n - 5, -1), -1):
            if instrs[k] is instr:
                return k
        index = self._positions
        if index is not None:
            kept = index.get(instr)
            if kept is not None:
                if kept < n and instrs[kept] is instr:
                    return kept
                w = self._shifts
                if w * w <= n:
                    lo = max(kept - w, 0)
                    window = instrs[lo:kept + w + 1]
                    if instr in window:  # (identity first: no __eq__ runs for `instr` itself)
                        kept = index[instr] = lo + window.index(instr)
                        return kept
        if n >= _INDEXED and self._scanned > n and self.fusion_instruction is None:
            self._positions = index = {x: j for j, x in enumerate(instrs)}
            self._shifts = self._scanned = 0
            found = index.get(instr)
        else:
            try:
                found = instrs.index(instr)
            except ValueError:
                found = None
            if found is not None:
                self._scanned += found
                if index is not None:
                    index[instr] = found
        if found is None:
            raise ValueError(f"{instr.name} is not in computation {self.name}")
        return found

    def moved(self, shifted: int, at: int = 0, placed: Sequence[Instruction] = ()) -> None:
        """Say that code editing the instruction list in place shifted entries `shifted`
        times (one insertion or removal each) and put `placed` at `at`, `at + 1`, ..., so
        that `position` finds them at once and looks that much further around other stale
        entries (it finds the right place regardless, but rebuilds its index to do so).
        Reordering alone does not change the `version`."""
        self._shifts += shifted
        index = self._positions
        if index is not None:
            for k, x in enumerate(placed, at):
                index[x] = k

    def remove(self, instr: Instruction) -> None:
        """Delete an instruction that has no users (and is not the root)."""
        self._check_removable(instr)
        if self._removed is not None:
            self._removed.add(instr)
        else:
            del self._instructions[self.position(instr)]
            if self._positions is not None:
                self._positions.pop(instr, None)
                self._shifts += 1  # the later ones moved
        self._release(instr)

    def _check_removable(self, instr: Instruction) -> None:
        if instr.users:
            users = ", ".join(u.name for u in instr.users)
            raise ValueError(f"cannot remove {instr.name}: still used by {users}")
        if self._root is instr:
            raise ValueError(f"cannot remove {instr.name}: it is the root of {self.name}")

    def _release(self, instr: Instruction) -> None:
        """Drop a removed instruction's edges, parent and name."""
        self._version += 1
        instr.detach_operands()
        instr.control_predecessors = []
        instr.parent = None
        if self.parent is not None:
            self.parent.release_name(instr.name)

    def replace_instruction(self, old: Instruction, new: Instruction) -> None:
        """Make every use of `old` a use of `new`, then delete `old`. A detached `new` takes
        `old`'s slot in the instruction list (one slot written: nothing shifts)."""
        if new.parent is not None:
            old.replace_all_uses_with(new)
            self.remove(old)
            return
        if self._removed and new in self._removed:
            self._flush_removals()  # back after a deferred removal: drop the old entry first
        k = self.position(old)
        self._adopt(new)
        self._instructions[k] = new
        if self._positions is not None:
            self._positions.pop(old, None)
            self._positions[new] = k
        old.replace_all_uses_with(new)
        self._check_removable(old)
        self._release(old)

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
        # (instructions hash by identity, in C: the set holds them, not their ids)
        visited: set[Instruction] = set()
        mark = visited.add
        order: list[Instruction] = []
        emit = order.append
        for start in self.instructions:
            if start in visited:
                continue
            # Every operand already emitted (the usual case: lists are kept in this order):
            # the DFS below would emit `start` at once, so do just that.
            if visited.issuperset(start._operands) and (
                    not start.control_predecessors
                    or visited.issuperset(start.control_predecessors)):
                mark(start)
                emit(start)
                continue
            # Iterative DFS: (node, expanded?) pairs.
            stack: list[tuple[Instruction, bool]] = [(start, False)]
            while stack:
                node, expanded = stack.pop()
                if expanded:
                    emit(node)
                    continue
                if node in visited:
                    continue
                mark(node)
                stack.append((node, True))
                preds = node._operands + node.control_predecessors
                for op in reversed(preds):
                    if op not in visited:
                        stack.append((op, False))
        return order

    def __repr__(self) -> str:
        return f"<Computation {self.name}: {len(self.instructions)} instructions>"
