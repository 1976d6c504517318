"""The order in which XLA's CPU backend folds a reduce-window's window positions.

XLA emits a reduce-window (`EmitReduceWindow`, xla/codegen/emitters) as a loop nest over the
window's offsets s0..sN-1 (s0 outermost), skipping positions in the padding or in base-dilation
holes by the constraints of the output-to-input indexing map (a padded read is the composition
`pad(window)`: `stride*d + dilation*s` must land in the operand's span, and between base
dilation holes). `EmitLoopNest` then *peels* one loop: scanning from the innermost offset
outwards while fewer than 64 positions lie inside, the first offset k that a constraint mentions
and that no constraint mentions once its last value is cut off (`IndexingMap::Simplify` folds a
constraint left on one variable into that variable's bounds) is split in two nests: every
position with s_k below its last value, row-major, then those with s_k at it, row-major.

So a bf16 window of 3x2 with high padding in its last dimension is folded as (0,0) (1,0) (2,0)
(0,1) (1,1) (2,1), not row-major; rounding each step to bf16 (and f16, the 8-bit floats) makes
the order visible (2812/000 of the 20,000-program fuzz run). `peeled_offset` returns the split
and `window_order` the positions in that order; the interpreter and the cpu backend both fold in
it. Conditions modelled (per window dimension, as the constraints involve one output and one
window index each):

* the span constraint `stride*d + dilation*s in [max(0, lo), lo + (n-1)*base]` is dropped when
  interval arithmetic proves it (`SimplifyConstraintExprs`), and rewritten by
  `SimplifyConstraintRanges` (a constant moved into the range, a common factor of the
  multiplied terms divided out when the rest cannot change the quotient, a single variable
  folded into its bounds); a variable with a single value becomes a constant;
* base dilation's `(stride*d + dilation*s - lo) mod base == 0` mentions s unless the window
  dilation is a multiple of the base dilation or s has one value (not modelled further: XLA's
  `RewriteMod` and `RescaleSymbols` rewrite some of these; measured as docs/cpu-backend.md says).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from math import gcd
from typing import Any

PEEL_LIMIT = 64  # EmitLoopNest looks for a loop to peel while fewer positions lie inside


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


@dataclass(frozen=True)
class _Lin:
    """coef_d * d + coef_s * s + const."""

    cd: int
    cs: int
    c: int = 0


def _tdiv(a: int, b: int) -> int:
    """C++ integer division (truncating)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _unit(v: str) -> _Lin:
    return _Lin(int(v == "d"), int(v == "s"))


class _Dim:
    """One window dimension's output index d and window index s (scaled: s = scale * s'),
    their bounds and the constraints on them: spans `e in [lo, hi]`, mods `e mod m == 0`, and
    constraints of forms not modelled (only which variables they mention)."""

    def __init__(self, d: tuple[int, int], s: tuple[int, int]) -> None:
        self.bounds = {"d": d, "s": s}
        self.spans: dict[_Lin, tuple[int, int]] = {}
        self.mods: dict[_Lin, int] = {}
        self.opaque: set[str] = set()
        self.scale = 1
        self.empty = False

    def copy(self) -> _Dim:
        c = _Dim(self.bounds["d"], self.bounds["s"])
        c.spans, c.mods, c.opaque = dict(self.spans), dict(self.mods), set(self.opaque)
        c.scale, c.empty = self.scale, self.empty
        return c

    def point(self, v: str) -> bool:
        lo, hi = self.bounds[v]
        return lo == hi

    def range_of(self, e: _Lin) -> tuple[int, int]:
        lo = hi = e.c
        for coef, v in ((e.cd, "d"), (e.cs, "s")):
            a, b = self.bounds[v]
            lo += min(coef * a, coef * b)
            hi += max(coef * a, coef * b)
        return lo, hi

    def replace_points(self, e: _Lin) -> _Lin:
        """SimplifyOnce: a variable (or the whole sum) with one value is a constant."""
        cd, cs, c = e.cd, e.cs, e.c
        if cd and self.point("d"):
            c, cd = c + cd * self.bounds["d"][0], 0
        if cs and self.point("s"):
            c, cs = c + cs * self.bounds["s"][0], 0
        return _Lin(cd, cs, c)

    def add(self, e: _Lin, lo: int, hi: int) -> None:
        """IndexingMap::AddConstraint: a lone variable narrows its bounds, a constant is checked."""
        if lo > hi:
            self.empty = True
            return
        terms = [(coef, v) for coef, v in ((e.cd, "d"), (e.cs, "s")) if coef]
        if len(terms) == 1 and terms[0][0] == 1 and e.c == 0:
            v = terms[0][1]
            a, b = self.bounds[v]
            self.bounds[v] = (max(a, lo), min(b, hi))
            self.empty |= self.bounds[v][0] > self.bounds[v][1]
            return
        if not terms:
            self.empty |= not lo <= e.c <= hi
            return
        old = self.spans.get(e)
        self.spans[e] = (lo, hi) if old is None else (max(old[0], lo), min(old[1], hi))

    def _range_once(self, e: _Lin, lo: int, hi: int) -> tuple[_Lin, int, int] | None:
        """SimplifyConstraintRangeOnce on a linear constraint."""
        terms = [(coef, v) for coef, v in ((e.cd, "d"), (e.cs, "s")) if coef]
        if not terms:
            return None
        if len(terms) == 1 and e.c == 0:  # k * v in [lo, hi]: v in [lo / k, hi / k]
            k, v = terms[0]
            if k == 1:
                return None
            if k < 0:
                k, lo, hi = -k, -hi, -lo
            return _unit(v), _ceil_div(lo, k), hi // k
        if e.c:  # the constant summand is the sum's right-hand side: moved into the range
            return _Lin(e.cd, e.cs), lo - e.c, hi - e.c
        if lo != 0:
            return None
        # 0 <= g*a + b <= hi: when (hi - b) // g takes one value, b is irrelevant
        g = 0
        for coef, _ in terms:
            g = gcd(g, coef) if coef != 1 else g
        if g <= 1:
            return None
        rest_lo = rest_hi = 0
        for coef, v in terms:
            if coef == 1:
                rest_lo += self.bounds[v][0]
                rest_hi += self.bounds[v][1]
        if (hi - rest_hi) // g != (hi - rest_lo) // g:
            return None
        kept = {v: coef // g for coef, v in terms if coef != 1}
        return _Lin(kept.get("d", 0), kept.get("s", 0)), 0, hi // g

    def _rewrite_mod(self, e: _Lin, m: int) -> tuple[str, _Lin, int] | set[str]:
        """RewriteMod of `e mod m` (== 0): ("span", e', 0) for a linear `e' == 0`,
        ("mod", e', m') for `e' mod m' == 0`, or the variables of a form not modelled."""
        lhs = self.replace_points(e)
        lo, hi = self.range_of(lhs)
        offset = -(lo // m) * m
        if hi + offset < m:  # no wraparound: the mod is an add
            return "span", _Lin(lhs.cd, lhs.cs, lhs.c + offset), 0
        terms = [(coef, v) for coef, v in ((lhs.cd, "d"), (lhs.cs, "s")) if coef]
        if len(terms) == 1 and lhs.c == 0 and terms[0][0] > 1 and m % terms[0][0] == 0:
            return "mod", _unit(terms[0][1]), m // terms[0][0]  # (c*a) % ab -> (c % b) * a
        terms = [(coef, v) for coef, v in terms if coef % m]
        c = lhs.c - m * _tdiv(lhs.c, m)
        new = _Lin(sum(k for k, v in terms if v == "d"), sum(k for k, v in terms if v == "s"), c)
        g = 0
        for coef, _ in terms:
            g = gcd(g, coef) if coef != 1 else g
        if g > 1 and m % g == 0:
            rest_lo = rest_hi = c
            for coef, v in terms:
                if coef == 1:
                    rest_lo += self.bounds[v][0]
                    rest_hi += self.bounds[v][1]
            if (rest_lo, rest_hi) == (0, 0):
                kept = {v: coef // g for coef, v in terms if coef != 1}
                return "mod", _Lin(kept.get("d", 0), kept.get("s", 0)), m // g
            if rest_lo >= 0 and rest_hi < g:
                return {v for _, v in terms}
        return "mod", new, m

    def simplify(self) -> None:
        """IndexingMap::Simplify's constraint loop, then MergeModConstraints."""
        changed = True
        while changed and not self.empty:
            changed = False
            for e, (lo, hi) in list(self.spans.items()):  # SimplifyConstraintExprs
                s = self.replace_points(e)
                r = self.range_of(s)
                if lo <= r[0] and r[1] <= hi:
                    del self.spans[e]
                elif s != e:
                    del self.spans[e]
                    self.add(s, lo, hi)
                    changed = True
            for e, m in list(self.mods.items()):
                new = self._rewrite_mod(e, m)
                if isinstance(new, set):
                    del self.mods[e]
                    self.opaque |= new
                    continue
                kind, f, k = new
                x = self.range_of(f)
                if kind == "span":
                    del self.mods[e]
                    if x != (0, 0):
                        self.add(f, 0, 0)
                        changed = True
                elif (x if x[0] >= 0 and x[1] < k else (0, k - 1)) == (0, 0):
                    del self.mods[e]
                elif (f, k) != (e, m):
                    del self.mods[e]
                    self.mods[f] = k
                    changed = True
            for e, (lo, hi) in list(self.spans.items()):  # SimplifyConstraintRanges
                cur, clo, chi = e, lo, hi
                while (step := self._range_once(cur, clo, chi)) is not None:
                    cur, clo, chi = step
                if cur != e:
                    self.spans.pop(e, None)
                    self.add(cur, clo, chi)
                    changed = True
        self.merge_mods()
        if self.point("s"):
            self.opaque.discard("s")

    def merge_mods(self) -> None:
        """MergeModConstraints: `v mod m == 0` narrows the bounds of a lone variable v."""
        for e, m in self.mods.items():
            for v in ("d", "s"):
                if e == _unit(v):
                    lo, hi = self.bounds[v]
                    a, b = _tdiv(lo, m) * m, _tdiv(hi, m) * m
                    self.bounds[v] = (a if a >= lo else a + m, b if b <= hi else b - m)

    def rescale(self) -> None:
        """RescaleSymbols: `s mod m == 0` becomes s = m * s'."""
        m = self.mods.pop(_unit("s"), None)
        if m is None:
            return
        lo, hi = self.bounds["s"]
        self.bounds["s"] = (_tdiv(lo, m), _tdiv(hi, m))
        self.scale *= m
        self.spans = {_Lin(e.cd, e.cs * m, e.c): r for e, r in self.spans.items()}
        self.mods = {_Lin(e.cd, e.cs * m, e.c): k for e, k in self.mods.items()}

    def s_constrained(self) -> bool:
        return "s" in self.opaque or any(e.cs for e in (*self.spans, *self.mods))


def _dim_model(n: int, w: Any, out: int) -> _Dim:
    """The simplified constraints of one window dimension `w` over an operand extent `n`, as
    EmitReduceWindow hands them to EmitLoopNest."""
    size, stride, dil = w.size, w.stride, w.window_dilation
    base, lo, hi = w.base_dilation, w.pad_lo, w.pad_hi
    padded = lo + hi + (n - 1) * base + 1 if n else lo + hi
    dim = _Dim((0, out - 1), (0, size - 1))
    dim.add(_Lin(stride, dil), max(0, lo), min(padded - 1, padded - 1 - hi))
    if base > 1:
        dim.mods[_Lin(stride, dil, -lo)] = base
    dim.simplify()
    dim.merge_mods()  # RescaleSymbols merges mod constraints again, then rescales
    dim.rescale()
    return dim


def peeled_offset(in_dims: Sequence[int], window: Sequence[Any],
                  out_dims: Sequence[int]) -> tuple[int, int] | None:
    """(window dimension k, offset v): XLA folds the positions with s_k >= v after all the
    others (each group row-major); None when it folds them all row-major."""
    if not window or 0 in out_dims:
        return None
    dims = [_dim_model(n, w, o) for n, w, o in zip(in_dims, window, out_dims, strict=True)]
    if any(d.empty for d in dims):
        return None
    inside = 1
    for k in reversed(range(len(window))):
        if inside >= PEEL_LIMIT:
            break
        d = dims[k]
        lo, hi = d.bounds["s"]
        inside *= hi - lo + 1
        if not d.s_constrained() or lo == hi:
            continue
        cut = d.copy()
        cut.bounds["s"] = (lo, hi - 1)
        cut.simplify()
        if cut.s_constrained():
            continue
        return k, hi * d.scale
    return None


def window_order(in_dims: Sequence[int], window: Sequence[Any], out_dims: Sequence[int],
                 offsets: Sequence[Sequence[int]]) -> Iterator[tuple[int, ...]]:
    """The window positions from the per-dimension `offsets` (ascending) in XLA's order."""
    positions = itertools.product(*offsets)
    peel = peeled_offset(in_dims, window, out_dims)
    if peel is None:
        yield from positions
        return
    k, v = peel
    later = []
    for p in positions:
        if p[k] >= v:
            later.append(p)
        else:
            yield p
    yield from later
