"""Indices into arrays during lowering: a multi-index and/or a row-major linear index, both as
affine expressions (`ir.Affine`).

Elementwise chains and row-major reshapes pass the linear form through untouched, so a reshape
costs nothing; the multi-index is derived (delinearised, `Graph.idiv`/`imod`, which fold
`(4*i + k) // 4 = i` when `k` is known to lie in [0, 4)) only when an index map needs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hlofuse.backends.kernel_ir.ir import ZERO, Affine, Graph, affine


def strides(dims: tuple[int, ...]) -> list[int]:
    """Row-major element strides."""
    out = [1] * len(dims)
    for d in range(len(dims) - 2, -1, -1):
        out[d] = out[d + 1] * dims[d + 1]
    return out


def linearize(multi: tuple[Affine, ...], dims: tuple[int, ...]) -> Affine:
    out = ZERO
    for e, s, n in zip(multi, strides(dims), dims, strict=True):
        if n != 1:  # a size-1 dimension's index is 0
            out = out + e * s
    return out


@dataclass(frozen=True)
class Index:
    """An element of an array of shape `dims`: `multi` and/or `linear` (at least one)."""

    dims: tuple[int, ...]
    multi: tuple[Affine, ...] | None = None
    linear: Affine | None = None

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    def key(self) -> tuple[object, ...]:
        """Memoisation key: the same key means the same element."""
        if self.size == 1:
            return ("0",)
        if self.linear is not None:
            return ("L", self.linear)
        return ("M", self.multi)

    def lin(self) -> Affine:
        if self.size == 1:
            return ZERO
        if self.linear is not None:
            return self.linear
        assert self.multi is not None
        return linearize(self.multi, self.dims)

    def coords(self, g: Graph) -> tuple[Affine, ...]:
        """The multi-index (delinearised from the linear form if needed)."""
        if self.multi is not None:
            return self.multi
        assert self.linear is not None
        out = []
        st = strides(self.dims)
        for d, n in enumerate(self.dims):
            if n == 1:
                out.append(ZERO)
                continue
            e = g.idiv(self.linear, st[d])
            if d > 0:  # the first coordinate needs no modulo: linear < size
                e = g.imod(e, n)
            out.append(e)
        return tuple(out)


def zero(dims: tuple[int, ...]) -> Index:
    return Index(dims, tuple(ZERO for _ in dims), ZERO)


def of_multi(dims: tuple[int, ...], multi: tuple[Affine, ...] | list[Affine]) -> Index:
    if math.prod(dims) == 1:
        return zero(dims)
    return Index(dims, tuple(multi), None)


def of_linear(dims: tuple[int, ...], linear: Affine) -> Index:
    if math.prod(dims) == 1:
        return zero(dims)
    big = [d for d, n in enumerate(dims) if n != 1]
    if len(big) == 1:  # one non-1 dimension: its coordinate is the linear index
        return Index(dims, tuple(linear if d == big[0] else ZERO for d in range(len(dims))),
                     linear)
    return Index(dims, None, linear)


def of_vars(dims: tuple[int, ...], coords: list[Affine]) -> Index:
    """A loop nest's index: both forms (the linear one is cheap to form)."""
    multi = tuple(coords)
    return Index(dims, multi, linearize(multi, dims))


__all__ = ["Index", "affine", "linearize", "of_linear", "of_multi", "of_vars", "strides", "zero"]
