"""What both sides of a `cond` compute: the values a printer may compute once, before the branch.

    Always(lazy, done).needed(v) -> set of uids   values computing `v` computes on every path
    Always(lazy, done).shared(cond) -> [Val]      values both sides of `cond` compute, operands
                                                  first

A `cond` computes only the side its condition selects (the other may read out of bounds), and
so does a select a printer computes lazily (`lazy`: select uid -> the side computed only in a
branch). A value that *both* sides compute on every path through them is computed whatever
the condition, so computing it before the branch changes nothing (values are pure) and saves
printing it once per side: for a gather from nested concatenates (MuJoCo MJX's cross products,
a 3-vector assembled from components and gathered by joint), every piece repeats the shared
operands, and the C grew to 270 KB for one 126-instruction fusion.

Conditions enforced: `needed(v)` enters a `cond`'s sides (and a lazy select's lazy side) only
through the intersection of what each side needs, so nothing only one side computes is ever
returned. The search stops at values `done` says are computed already (they need no hoisting),
so it visits only the part of the kernel not printed yet; results are memoised per value, so
each is visited once per instance (a printer makes one per branch it prints).
"""

from __future__ import annotations

from collections.abc import Callable

from hlofuse.backends.kernel_ir.ir import Val

_EMPTY: frozenset[int] = frozenset()


class Always:
    def __init__(self, lazy: dict[int, int] | None = None,
                 done: Callable[[Val], bool] = lambda v: False) -> None:
        self.lazy = lazy or {}
        self.done = done
        self._memo: dict[int, frozenset[int]] = {}
        self._vals: dict[int, Val] = {}

    def _unconditional(self, v: Val) -> list[Val]:
        """The operands `v` reads whatever its conditions are."""
        if v.op == "cond":
            return [v.args[0]]
        side = self.lazy.get(v.uid)
        if side:
            return [c for k, c in enumerate(v.children()) if k != side]
        return v.children()

    def needed(self, root: Val) -> frozenset[int]:
        """The uids of every value computing `root` computes on every path (itself included)."""
        stack: list[tuple[Val, bool]] = [(root, False)]
        while stack:
            v, ready = stack.pop()
            if v.uid in self._memo:
                continue
            if self.done(v):
                self._memo[v.uid] = _EMPTY
                continue
            kids = self._unconditional(v)
            both = [v.args[1], v.args[2]] if v.op == "cond" else []
            if not ready:
                stack.append((v, True))
                stack.extend((c, False) for c in kids + both if c.uid not in self._memo)
                continue
            out: set[int] = {v.uid}
            for c in kids:
                out |= self._memo[c.uid]
            if both:
                out |= self._memo[both[0].uid] & self._memo[both[1].uid]
            self._vals[v.uid] = v
            self._memo[v.uid] = frozenset(out)
        return self._memo[root.uid]

    def shared(self, cond: Val) -> list[Val]:
        """The values both sides of `cond` (a `cond` value or a select) compute on every path,
        in an order where each comes after the values it reads."""
        a, b = cond.args[1], cond.args[2]
        common = self.needed(a) & self.needed(b)
        vals = [self._vals[u] for u in common]
        return sorted(vals, key=lambda x: x.uid)  # a value is created after its operands
