"""Literals: the values of `constant` instructions and of every interpreter result.

An array literal is a numpy array of the shape's dtype; a tuple literal is a Python tuple of
literals. Formatting follows XLA's text (`{1, 2}`, `{ {1, 2}, {3, 4} }`, `nan`, `-inf`, `true`)
and round-trips exactly: every float is printed with the shortest text that reads back to the
same bits of its own type.
"""

from __future__ import annotations

import math
from typing import TypeAlias

import numpy as np

from hlofuse.ir.dtypes import DType
from hlofuse.ir.shape import ArrayShape, Shape, TokenShape, TupleShape

Literal: TypeAlias = "np.ndarray | tuple[Literal, ...]"


def format_scalar(value: object, shape: ArrayShape) -> str:
    return _format_value(value, shape.dtype)


def _format_value(value: object, dt: DType) -> str:
    if dt.is_pred:
        return "true" if bool(value) else "false"
    if dt.is_integral:
        return str(int(value))  # type: ignore[call-overload]
    if dt.is_complex:
        c = complex(value)  # type: ignore[call-overload]
        part = dt.component
        return (f"({_format_value(part.np.type(c.real), part)}, "
                f"{_format_value(part.np.type(c.imag), part)})")
    typed = dt.np.type(value)
    f = float(typed)
    if math.isnan(f):
        return _format_nan(typed, dt)
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    # numpy's str() of a scalar of the right width is the shortest round-tripping text.
    text = str(typed)
    if text.endswith(".0"):
        text = text[:-2]
    return text


def _format_nan(value: np.generic, dt: DType) -> str:
    """`nan` / `-nan`, or `nan(0x...)` (the whole mantissa, as XLA prints it) for a NaN that is
    not its type's default quiet NaN."""
    fmt = dt.float_format
    bits = int(np.asarray(value).reshape(()).view(np.dtype(f"u{dt.itemsize}")))
    sign = "-" if fmt.has_sign and bits >> (dt.bits - 1) & 1 else ""
    mantissa = bits & ((1 << fmt.mantissa_bits) - 1)
    quiet = 1 << (fmt.mantissa_bits - 1) if fmt.mantissa_bits else 0
    if fmt.nan_payloads and mantissa != quiet:
        return f"{sign}nan(0x{mantissa:x})"
    return f"{sign}nan"


def format_literal(value: Literal, shape: Shape) -> str:
    """The text inside `constant(...)`."""
    if isinstance(shape, TupleShape):
        assert isinstance(value, tuple)
        parts = [format_literal(v, s) for v, s in zip(value, shape.elements, strict=True)]
        return "(" + ", ".join(parts) + ")"
    if isinstance(shape, TokenShape):
        return ""
    assert isinstance(value, np.ndarray)
    if shape.rank == 0:
        return format_scalar(value.reshape(()).item() if value.dtype.kind != "V" else value,
                             shape)
    return _format_nested(value, shape)


def _format_nested(value: np.ndarray, shape: ArrayShape) -> str:
    if value.ndim == 1:
        return "{" + ", ".join(format_scalar(v, shape) for v in value) + "}"
    inner = ", ".join(_format_nested(v, shape) for v in value)
    return "{ " + inner + " }"


def flatten(value: Literal) -> list[np.ndarray]:
    """Leaves of a (possibly nested tuple) literal, depth-first."""
    if isinstance(value, tuple):
        out: list[np.ndarray] = []
        for v in value:
            out.extend(flatten(v))
        return out
    return [value]


def literals_equal(a: Literal, b: Literal) -> bool:
    """Bitwise equality (nan equals nan of the same bits)."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (
            isinstance(a, tuple)
            and isinstance(b, tuple)
            and len(a) == len(b)
            and all(literals_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
