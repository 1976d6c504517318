"""Indices into arrays as C expressions, and the small algebra the index maps need.

An `Index` names one element of an array of shape `dims`: a multi-index (one C expression per
dimension), a row-major linear expression, or both. Elementwise chains and row-major reshapes
pass the linear form through untouched, so a flat loop `for (i = 0; i < n; ++i)` never divides;
the multi-index is computed (delinearised) only when an index map needs it, by
`Emitter.multi(index)`.

Expressions are plain C strings of type int64_t; the helpers fold constants so generated code
reads `in0[i + 2048]`, not `in0[(i * 1) + (0 + 2048)]`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_INT = re.compile(r"-?\d+")
_ATOM = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\d+")


def is_const(expr: str) -> bool:
    return bool(_INT.fullmatch(expr))


def paren(expr: str) -> str:
    """`expr` safe to use as an operand of * / %."""
    return expr if _ATOM.fullmatch(expr) else f"({expr})"


def add(a: str, b: str) -> str:
    if is_const(a) and is_const(b):
        return str(int(a) + int(b))
    if a == "0":
        return b
    if b == "0":
        return a
    if is_const(b) and int(b) < 0:
        return f"{a} - {-int(b)}"
    return f"{a} + {b}"


def sub(a: str, b: str) -> str:
    if is_const(a) and is_const(b):
        return str(int(a) - int(b))
    if b == "0":
        return a
    if is_const(b):
        return add(a, str(-int(b)))
    return f"{a} - {paren(b)}"


def mul(a: str, n: int | str) -> str:
    b = str(n)
    if is_const(a) and is_const(b):
        return str(int(a) * int(b))
    if b == "1":
        return a
    if a == "1":
        return b
    if a == "0" or b == "0":
        return "0"
    return f"{paren(a)} * {paren(b)}"


def div(a: str, n: int) -> str:
    if n == 1:
        return a
    if is_const(a):
        return str(int(a) // n)
    return f"{paren(a)} / {n}"


def mod(a: str, n: int) -> str:
    if n == 1:
        return "0"
    if is_const(a):
        return str(int(a) % n)
    return f"{paren(a)} % {n}"


def strides(dims: tuple[int, ...]) -> list[int]:
    """Row-major element strides."""
    out = [1] * len(dims)
    for d in range(len(dims) - 2, -1, -1):
        out[d] = out[d + 1] * dims[d + 1]
    return out


def linearize(multi: tuple[str, ...], dims: tuple[int, ...]) -> str:
    """Row-major linear expression of a multi-index (Horner form)."""
    expr = "0"
    for e, n in zip(multi, dims, strict=True):
        if n != 1:  # a size-1 dimension's index is 0: it contributes nothing
            expr = add(mul(expr, n), e)
    return expr


@dataclass(frozen=True)
class Index:
    """An element of an array of shape `dims`: `multi` and/or `linear` (at least one)."""

    dims: tuple[int, ...]
    multi: tuple[str, ...] | None = None
    linear: str | None = None

    def __post_init__(self) -> None:
        assert self.multi is not None or self.linear is not None
        if self.multi is not None:
            assert len(self.multi) == len(self.dims), (self.multi, self.dims)

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    def key(self) -> tuple[str, ...]:
        """Memoisation key: the same key means the same element."""
        if self.size == 1:
            return ("0",)
        if self.linear is not None:
            return ("L", self.linear)
        assert self.multi is not None
        return ("M", *self.multi)

    def lin(self) -> str:
        """The linear expression (computed from the multi-index if needed; no division)."""
        if self.size == 1:
            return "0"
        if self.linear is not None:
            return self.linear
        assert self.multi is not None
        return linearize(self.multi, self.dims)


def zero(dims: tuple[int, ...]) -> Index:
    return Index(dims, tuple("0" for _ in dims), "0")


def of_multi(dims: tuple[int, ...], multi: list[str] | tuple[str, ...]) -> Index:
    multi = tuple(multi)
    if math.prod(dims) == 1:
        return zero(dims)
    return Index(dims, multi, None)


def of_linear(dims: tuple[int, ...], linear: str) -> Index:
    if math.prod(dims) == 1:
        return zero(dims)
    if len(dims) == 1:
        return Index(dims, (linear,), linear)
    # dimensions of size 1 do not need a division: only one non-1 dimension -> it is `linear`
    big = [d for d, n in enumerate(dims) if n != 1]
    if len(big) == 1:
        multi = tuple(linear if d == big[0] else "0" for d in range(len(dims)))
        return Index(dims, multi, linear)
    return Index(dims, None, linear)
