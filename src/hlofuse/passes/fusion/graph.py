"""Reachability over one computation (XLA's HloReachabilityMap), as a bitset per instruction.

    a ──▶ b ──▶ d        bits(d) = {a, b, c, d}   (every node that reaches d, itself included)
     ╲         ▲         is_reachable(a, d) == bool(bits(d) & bit(a))
      ╰──▶ c ──╯

Built in one post-order sweep: bits(x) = bit(x) | OR(bits(o) for o in operands and control
predecessors of x). Python ints are the bitsets. After a fusion, `update_fusion(fusion)` recomputes
the fused node's row from its (new) operands; rows of its users are left as they were, which is
what XLA's `UpdateReachabilityThroughInstruction`-style refresh needs for the instruction-fusion
loop (consumers are visited before producers). Passes that need exact answers after many changes
simply `rebuild()`.
"""

from __future__ import annotations

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction


class ReachabilityMap:
    def __init__(self, comp: Computation) -> None:
        self.comp = comp
        self._index: dict[Instruction, int] = {}
        self._bits: dict[Instruction, int] = {}
        self.rebuild()

    def rebuild(self) -> None:
        self._index.clear()
        self._bits.clear()
        for instr in self.comp.post_order():
            self._add(instr)

    def _add(self, instr: Instruction) -> None:
        idx = self._index.setdefault(instr, len(self._index))
        bits = 1 << idx
        for pred in (*instr.operands, *instr.control_predecessors):
            bits |= self._bits.get(pred, 0)
        self._bits[instr] = bits

    def __contains__(self, instr: Instruction) -> bool:
        return instr in self._bits

    def is_reachable(self, a: Instruction, b: Instruction) -> bool:
        """Is there a path a -> ... -> b (a == b counts)?"""
        ia = self._index.get(a)
        bb = self._bits.get(b)
        if ia is None or bb is None:
            return _dfs_reachable(a, b)
        return bool(bb >> ia & 1)

    def is_connected(self, a: Instruction, b: Instruction) -> bool:
        return self.is_reachable(a, b) or self.is_reachable(b, a)

    def update_fusion(self, instr: Instruction) -> None:
        """Recompute `instr`'s row (it may be new) from its operands' rows, then push the change
        to its transitive users so that later queries stay exact."""
        self._add(instr)
        stack = list(instr.users)
        while stack:
            u = stack.pop()
            if u not in self._bits:
                continue
            old = self._bits[u]
            self._add(u)
            if self._bits[u] != old:
                stack.extend(u.users)


def _dfs_reachable(a: Instruction, b: Instruction) -> bool:
    """Fallback for instructions not in the map: walk users from `a`."""
    stack = [a]
    seen: set[int] = set()
    while stack:
        cur = stack.pop()
        if cur is b:
            return True
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        stack.extend(cur.users)
    return False
