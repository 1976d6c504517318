"""Buffer assignment: where every internal buffer of a schedule lives in the work arena.

    size = assign(schedule)     sets Buf.offset for every schedule.buffers entry

Liveness is computed on the driver IR (`schedule.py`), not while printing. Statements are laid out
on one timeline in program order (a conditional's branches one after the other, a loop's
condition then body); a buffer is live from its first use to its last. A buffer used inside a
while loop that was already in use at the loop's start (a carried leaf's buffers, a value
computed before the loop and read in it) stays live until the loop ends: every iteration needs
it. Buffers first used inside an iteration may share bytes with others of the same iteration when
their intervals do not overlap (each iteration writes them before reading them).

Packing: largest first, first fit, at `ALIGN`-byte aligned offsets; two buffers share bytes only
if their live intervals are disjoint. Conditions enforced: every buffer gets an offset; no two
buffers whose intervals overlap overlap in bytes (tests/test_cpu_assign.py checks this on every
program of the suite).
"""

from __future__ import annotations

import numpy as np

from hlofuse.backends.driver_ir.schedule import (
    Branch,
    Buf,
    Call,
    HostCall,
    Loc,
    MemCopy,
    Schedule,
    Stmt,
    While,
)

ALIGN = 64


def aligned_size(buf: Buf) -> int:
    return max(ALIGN, -(-buf.nbytes // ALIGN) * ALIGN)


class Liveness:
    """[first, last] use of every buffer on the schedule's timeline."""

    def __init__(self) -> None:
        self.now = 0
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self._loops: list[tuple[int, set[int]]] = []  # (start, buffers used inside)

    def touch(self, *locs: Loc) -> None:
        for loc in locs:
            for b in loc.buffers():
                self.first.setdefault(b.id, self.now)
                self.last[b.id] = max(self.last.get(b.id, self.now), self.now)
                for _start, used in self._loops:
                    used.add(b.id)

    def block(self, body: list[Stmt]) -> None:
        for s in body:
            self.now += 1
            if isinstance(s, (Call, HostCall)):
                self.touch(*s.ins, *s.outs)
            elif isinstance(s, MemCopy):
                self.touch(s.dst, s.src)
            elif isinstance(s, Branch):
                self.touch(s.selector)
                for b in s.branches:
                    self.block(b)
            elif isinstance(s, While):
                self.loop(s)

    def loop(self, s: While) -> None:
        for c in s.carried:
            self.touch(c)  # the pointers are set up before the loop
        start = self.now
        self._loops.append((start, set()))
        self.block(s.cond)
        self.now += 1
        self.touch(s.pred)
        self.block(s.body)
        self.now += 1
        for c in s.carried:
            self.touch(c)  # the swap at the end of every iteration
        _start, used = self._loops.pop()
        for b in used:
            if self.first[b] <= start:  # live across iterations
                self.last[b] = max(self.last[b], self.now)


def liveness(sched: Schedule) -> Liveness:
    live = Liveness()
    live.block(sched.body)
    return live


def assign(sched: Schedule) -> int:
    """Give every buffer an offset; returns the arena's size in bytes (0 without buffers)."""
    live = liveness(sched)
    bufs = [b for b in sched.buffers if b.id in live.first]
    for b in sched.buffers:
        if b.id not in live.first:  # never used: no bytes
            b.offset = 0
    order = sorted(bufs, key=lambda b: (-aligned_size(b), live.first[b.id], b.id))
    n = len(order)
    first = np.empty(n, np.int64)
    last = np.empty(n, np.int64)
    lo = np.empty(n, np.int64)
    hi = np.empty(n, np.int64)
    total = 0
    for i, b in enumerate(order):
        f, la, size = live.first[b.id], live.last[b.id], aligned_size(b)
        b.offset = offset = _first_fit(lo[:i], hi[:i], (first[:i] <= la) & (last[:i] >= f),
                                       size)
        first[i], last[i], lo[i], hi[i] = f, la, offset, offset + size
        total = max(total, offset + size)
    return total


def _first_fit(lo: np.ndarray, hi: np.ndarray, overlap: np.ndarray, size: int) -> int:
    """The lowest offset where `size` bytes fit between the byte ranges [lo, hi) of the
    placed buffers whose lives overlap this one's (`overlap`): going through them by lo (then
    hi), the offset so far is the largest hi seen (0 before any), and the buffer goes before
    the first range that starts `size` bytes or more beyond it. Array operations, not a
    Python loop per range (gpt-16: 1,148 buffers, most of them live at once)."""
    b_lo, b_hi = lo[overlap], hi[overlap]
    if not len(b_lo):
        return 0
    order = np.lexsort((b_hi, b_lo))
    b_lo, b_hi = b_lo[order], b_hi[order]
    reach = np.maximum.accumulate(np.maximum(b_hi, 0))
    before = np.concatenate(([0], reach[:-1]))
    fits = before + size <= b_lo
    return int(before[int(np.argmax(fits))] if fits.any() else reach[-1])
