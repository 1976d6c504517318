"""Reachability over one computation (XLA's HloReachabilityMap), as a bitset per instruction.

    a ──▶ b ──▶ d        bits(d) = {a, b, c, d}   (every node that reaches d, itself included)
     ╲         ▲         is_reachable(a, d) == bool(bits(d) & bit(a))
      ╰──▶ c ──╯

Built in one post-order sweep: bits(x) = bit(x) | OR(bits(o) for o in operands and control
predecessors of x). Python ints are the bitsets.

Kept up to date as a pass fuses, without rebuilding (which cost O(n) per fusion, O(n^2) per
pass): after a change, `update_fusion(instr)` marks `instr` and everything downstream of it
stale; a query recomputes the stale rows it needs, ancestors first, and nothing else. Passes
walk towards the definitions while fusions change what lies downstream, so most stale rows are
never asked for again. A node marked stale is recomputed from its operands' rows, so new nodes
(get-tuple-elements, a fusion that replaced an instruction) get rows when first needed.

Conditions: queries are exact for instructions of the computation as long as every change was
reported with `update_fusion` on the changed instruction (a fusion that took in a producer,
merged a sibling, or replaced an instruction); stale-marking relies on "stale" being closed
under users, which holds because marking follows users and a recomputed row first recomputes
its stale ancestors. Instructions outside the computation fall back to a walk over users.
"""

from __future__ import annotations

from collections.abc import Callable

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction


class ReachabilityMap:
    def __init__(self, comp: Computation, post_order: list[Instruction] | None = None) -> None:
        """`post_order`: `comp.post_order()`, when the caller has it already."""
        self.comp = comp
        self._index: dict[Instruction, int] = {}
        self._bits: dict[Instruction, int] = {}
        self._stale: set[Instruction] = set()
        self.rebuild(post_order)

    def rebuild(self, post_order: list[Instruction] | None = None) -> None:
        self._index.clear()
        self._bits.clear()
        self._stale.clear()
        for instr in self.comp.post_order() if post_order is None else post_order:
            self._add(instr)

    def _add(self, instr: Instruction) -> None:
        idx = self._index.get(instr)
        if idx is None:
            idx = self._index[instr] = len(self._index)
        bits = 1 << idx
        rows = self._bits
        for pred in instr._operands:
            bits |= rows.get(pred, 0)
        for pred in instr.control_predecessors:
            bits |= rows.get(pred, 0)
        rows[instr] = bits

    def __contains__(self, instr: Instruction) -> bool:
        return instr.parent is self.comp

    def _row(self, instr: Instruction) -> int:
        """`instr`'s row, recomputing it and its stale ancestors first if needed."""
        row = self._bits.get(instr)
        if row is not None and instr not in self._stale:
            return row
        stale, rows = self._stale, self._bits
        stack: list[tuple[Instruction, bool]] = [(instr, False)]
        done: set[Instruction] = set()
        while stack:
            node, expanded = stack.pop()
            if expanded:
                self._add(node)
                stale.discard(node)
                continue
            if node in done:
                continue
            done.add(node)
            stack.append((node, True))
            for pred in (*node.operands, *node.control_predecessors):
                if pred not in done and (pred in stale or (pred not in rows
                                                           and pred.parent is self.comp)):
                    stack.append((pred, False))
        return rows[instr]

    def is_reachable(self, a: Instruction, b: Instruction) -> bool:
        """Is there a path a -> ... -> b (a == b counts)?"""
        if a.parent is not self.comp or b.parent is not self.comp:
            return _dfs_reachable(a, b)
        row = self._row(b)
        ia = self._index.get(a)
        if ia is None:  # new, and not upstream of b (b's row would have indexed it)
            return False
        return bool(row >> ia & 1)

    def reached_operands(self, a: Instruction, consumer: Instruction,
                         positions: dict[Instruction, list[int]]) -> list[int]:
        """The positions i (ascending) of `consumer`'s operands with is_reachable(a, operand
        i); `positions` maps each operand to its positions. Walks from `a` through users that
        are upstream of `consumer` instead of asking about every operand (a consumer such as a
        root tuple may have thousands, each asked about by each of its producers)."""
        if a.parent is not self.comp or consumer.parent is not self.comp:
            return [i for i, o in enumerate(consumer.operands) if self.is_reachable(a, o)]
        row = self._row(consumer)  # also gives every upstream node an index
        index = self._index
        ia = index.get(a)
        if ia is None or not row >> ia & 1:
            return []
        found = list(positions.get(a, ()))
        seen = {a}
        stack = [a]
        budget = consumer.operand_count  # past this, asking each operand is cheaper
        while stack:
            for u in stack.pop().users:
                if u in seen or u is consumer:
                    continue
                seen.add(u)
                iu = index.get(u)
                if iu is None or not row >> iu & 1:
                    continue  # not upstream of the consumer: no operand lies beyond it
                found.extend(positions.get(u, ()))
                stack.append(u)
            if len(seen) > budget:
                return [i for i, o in enumerate(consumer.operands)
                        if self._row(o) >> ia & 1]
        found.sort()
        return found

    def is_connected(self, a: Instruction, b: Instruction) -> bool:
        return self.is_reachable(a, b) or self.is_reachable(b, a)

    def first_unconnected(self, a: Instruction, nodes: list[Instruction], start: int,
                          admit: dict[Instruction, bool],
                          ask: Callable[[Instruction], bool]) -> int:
        """The first position j >= start of `nodes` whose node b is admitted (`admit[b]`, or
        `ask(b)` when absent) and not connected to `a`; len(nodes) if none. One tight loop
        for the K^2/2 pairs of sibling fusion (an unrolled loop's steps all reading one input
        are all connected): a's row is looked up once, nothing is allocated per pair."""
        comp, n = self.comp, len(nodes)
        if a.parent is not comp:
            for j in range(start, n):
                b = nodes[j]
                ok = admit.get(b)
                if (ask(b) if ok is None else ok) and not self.is_connected(a, b):
                    return j
            return n
        index, rows, stale = self._index, self._bits, self._stale
        row_a = ia = -1  # looked up at the first pair that needs them
        for j in range(start, n):
            b = nodes[j]
            ok = admit.get(b)
            if not (ask(b) if ok is None else ok):
                continue
            if b.parent is not comp:
                if not self.is_connected(a, b):
                    return j
                continue
            row_b = rows.get(b)
            if row_b is None or b in stale:
                row_b = self._row(b)
            if ia < 0:
                ia = index.get(a, -1)  # none yet: a is upstream of no row computed so far
            if ia >= 0 and row_b >> ia & 1:
                continue  # a reaches b
            if row_a < 0:
                row_a = self._row(a)
                ia = index[a]
            ib = index.get(b)
            if ib is not None and row_a >> ib & 1:
                continue  # b reaches a
            return j
        return n

    def update_fusion(self, instr: Instruction) -> None:
        """`instr` changed (it fused something in, or is new in place of another
        instruction): it and everything downstream of it are recomputed when next asked."""
        stale = self._stale
        stale.add(instr)
        stack = list(instr.users)  # even if `instr` was stale: its users may be new
        while stack:
            node = stack.pop()
            if node in stale:
                continue
            stale.add(node)
            stack.extend(node.users)


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
