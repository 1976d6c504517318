"""HLO shapes: arrays (element type, dimensions, layout), tuples and tokens.

Shapes are immutable values. An array's layout is XLA's `minor_to_major` list (`f32[2,3]{1,0}`);
`None` means "no layout given", which XLA treats as the default descending layout. Two shapes
are `compatible` when they agree in everything but layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hlofuse.ir.dtypes import DType


@dataclass(frozen=True)
class ArrayShape:
    dtype: DType
    dims: tuple[int, ...]
    layout: tuple[int, ...] | None = None
    # Anything after the minor-to-major list inside the braces (tiling, memory space), verbatim.
    layout_extra: str = ""

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.dims)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def true_rank(self) -> int:
        """Number of dimensions with extent > 1 (XLA's TrueRank)."""
        return sum(1 for d in self.dims if d > 1)

    @property
    def is_effective_scalar(self) -> bool:
        return self.size == 1

    @property
    def minor_to_major(self) -> tuple[int, ...]:
        """The layout, defaulting to row-major (descending) when none was given."""
        if self.layout is not None:
            return self.layout
        return tuple(range(self.rank - 1, -1, -1))

    def with_dtype(self, dtype: DType) -> ArrayShape:
        return ArrayShape(dtype, self.dims, self.layout, self.layout_extra)

    def with_dims(self, dims: tuple[int, ...]) -> ArrayShape:
        return ArrayShape(self.dtype, tuple(dims), None)

    def without_layout(self) -> ArrayShape:
        return ArrayShape(self.dtype, self.dims)

    def compatible(self, other: Shape) -> bool:
        return (
            isinstance(other, ArrayShape) and self.dtype == other.dtype and self.dims == other.dims
        )

    def same_dims(self, other: Shape) -> bool:
        """Equal dimensions, ignoring element type and layout."""
        return isinstance(other, ArrayShape) and self.dims == other.dims

    def __str__(self) -> str:
        return format_shape(self)


@dataclass(frozen=True)
class TupleShape:
    elements: tuple[Shape, ...]

    def compatible(self, other: Shape) -> bool:
        return (
            isinstance(other, TupleShape)
            and len(self.elements) == len(other.elements)
            and all(a.compatible(b) for a, b in zip(self.elements, other.elements, strict=True))
        )

    def same_dims(self, other: Shape) -> bool:
        return self.compatible(other)

    def without_layout(self) -> TupleShape:
        return TupleShape(tuple(e.without_layout() for e in self.elements))

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.elements)

    def __str__(self) -> str:
        return format_shape(self)


@dataclass(frozen=True)
class TokenShape:
    def compatible(self, other: Shape) -> bool:
        return isinstance(other, TokenShape)

    def same_dims(self, other: Shape) -> bool:
        return self.compatible(other)

    def without_layout(self) -> TokenShape:
        return self

    @property
    def nbytes(self) -> int:
        return 0

    def __str__(self) -> str:
        return "token[]"


Shape = ArrayShape | TupleShape | TokenShape


def format_shape(shape: Shape, with_layout: bool = True) -> str:
    """XLA's text for a shape: `f32[2,3]{1,0}`, `(s32[], f32[4]{0})`, `token[]`."""
    if isinstance(shape, TokenShape):
        return "token[]"
    if isinstance(shape, TupleShape):
        return "(" + ", ".join(format_shape(e, with_layout) for e in shape.elements) + ")"
    text = f"{shape.dtype.name}[{','.join(str(d) for d in shape.dims)}]"
    if with_layout and shape.layout is not None:
        text += "{" + ",".join(str(d) for d in shape.layout) + shape.layout_extra + "}"
    return text


def leaves(shape: Shape) -> list[ArrayShape]:
    """The array leaves of a shape, depth-first."""
    if isinstance(shape, ArrayShape):
        return [shape]
    if isinstance(shape, TupleShape):
        out: list[ArrayShape] = []
        for e in shape.elements:
            out.extend(leaves(e))
        return out
    return []


def subshape_count(shape: Shape) -> int:
    """XLA's ShapeUtil::SubshapeCount: a tuple counts itself plus every subshape."""
    if isinstance(shape, TupleShape):
        return 1 + sum(subshape_count(e) for e in shape.elements)
    return 1


def scalar(dtype: DType) -> ArrayShape:
    return ArrayShape(dtype, ())


def array(dtype: DType, *dims: int) -> ArrayShape:
    return ArrayShape(dtype, tuple(dims))
