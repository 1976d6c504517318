"""HLO shapes: arrays (element type, dimensions, layout), tuples and tokens.

Shapes are immutable values. An array's layout is XLA's `minor_to_major` list (`f32[2,3]{1,0}`);
`None` means "no layout given", which XLA treats as the default descending layout. What XLA
writes after a `:` inside the layout braces (tiles, memory space, element size, ...) is held as
`LayoutAttrs`, parsed into fields and printed back from them (never kept as text):

    f32[8,128]{1,0:T(8,128)(2,1)L(1024)#(u32)*(u64)E(16)S(1)SC(0:1,2)M(8)}
                   T tiles   L tail padding  # index type  * pointer type  E element size in
                   bits  S memory space  SC split configs  M dynamic-shape metadata bytes

Two shapes are `compatible` when they agree in everything but layout.

`shape_problem(shape)` is the one validity check for shapes (parser and verifier both use it),
iterative so that it is safe on any nesting. Conditions it enforces: tuples nested at most
`limits.MAX_TUPLE_DEPTH` deep; rank at most `limits.MAX_RANK`; every dimension in
0..`limits.MAX_DIMENSION` (XLA's int64); elements x element bytes at most
`limits.MAX_SHAPE_BYTES` (XLA's ValidateShapeSize); a layout that is a permutation of the
dimensions; layout attributes within their ranges (tile sizes >= 1 or `*`, memory space, element
size and metadata bytes >= 0, tail padding >= 1, split indices ascending and > 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from hlofuse.ir import limits
from hlofuse.ir.dtypes import DType

# Index and pointer types a layout may name (`#(u32)`, `*(u64)`): XLA allows unsigned integers.
LAYOUT_INDEX_TYPES = ("u8", "u16", "u32", "u64")


@dataclass(frozen=True)
class LayoutAttrs:
    """The part of an XLA layout after `:` (`{1,0:T(8,128)S(1)}`), field by field.

    `tiles` holds one tuple per `T(...)` group; `None` in a tile is XLA's `*` (combine
    dimension). `split_configs` holds `(dimension, split_indices)` per `SC(d:i,j)` group.
    Defaults are XLA's: an attribute at its default is not printed."""

    tiles: tuple[tuple[int | None, ...], ...] = ()
    tail_padding_alignment: int = 1
    index_type: str | None = None
    pointer_type: str | None = None
    element_size_bits: int = 0
    memory_space: int = 0
    split_configs: tuple[tuple[int, tuple[int, ...]], ...] = ()
    dynamic_shape_metadata_prefix_bytes: int = 0

    def __str__(self) -> str:
        """XLA's text, without the leading `:` (`T(8,128)S(1)`)."""
        out = ""
        if self.tiles:
            out += "T" + "".join(
                "(" + ",".join("*" if d is None else str(d) for d in tile) + ")"
                for tile in self.tiles)
        if self.tail_padding_alignment != 1:
            out += f"L({self.tail_padding_alignment})"
        if self.index_type is not None:
            out += f"#({self.index_type})"
        if self.pointer_type is not None:
            out += f"*({self.pointer_type})"
        if self.element_size_bits:
            out += f"E({self.element_size_bits})"
        if self.memory_space:
            out += f"S({self.memory_space})"
        if self.split_configs:
            out += "SC" + "".join(f"({d}:{','.join(str(i) for i in idx)})"
                                  for d, idx in self.split_configs)
        if self.dynamic_shape_metadata_prefix_bytes:
            out += f"M({self.dynamic_shape_metadata_prefix_bytes})"
        return out

    def problem(self, rank: int) -> str:
        """Why these attributes are invalid for an array of `rank`, or ''."""
        for tile in self.tiles:
            for d in tile:
                if d is not None and not 1 <= d <= limits.MAX_DIMENSION:
                    return f"layout tile dimension {d} is not in 1..2^63-1 (or '*')"
        if not 1 <= self.tail_padding_alignment <= limits.MAX_DIMENSION:
            return f"layout tail padding L({self.tail_padding_alignment}) must be >= 1"
        for what, t in (("index", self.index_type), ("pointer", self.pointer_type)):
            if t is not None and t not in LAYOUT_INDEX_TYPES:
                return f"layout {what} type {t} is not an unsigned integer type"
        for what, v in (("element size E", self.element_size_bits),
                        ("memory space S", self.memory_space),
                        ("dynamic shape metadata M", self.dynamic_shape_metadata_prefix_bytes)):
            if not 0 <= v <= limits.MAX_DIMENSION:
                return f"layout {what}({v}) must be in 0..2^63-1"
        for d, indices in self.split_configs:
            if not 0 <= d < max(rank, 1):
                return f"layout split config SC({d}:...) names no dimension of the shape"
            if any(i <= 0 for i in indices) or list(indices) != sorted(set(indices)):
                return "layout split indices must be positive and ascending"
        return ""


@dataclass(frozen=True)
class ArrayShape:
    dtype: DType
    dims: tuple[int, ...]
    layout: tuple[int, ...] | None = None
    # What follows `:` inside the layout braces (tiles, memory space, ...), or None.
    layout_attrs: LayoutAttrs | None = None
    # Dynamic dimensions, one code per dimension (DIM_STATIC, DIM_BOUNDED `<=N`: dims holds the
    # bound, DIM_UNBOUNDED `?`: dims holds 0), or None when every dimension is static. Such
    # shapes parse, print and verify (the verifier compares the bounds); no backend runs them
    # (`require_static`).
    dynamic: tuple[int, ...] | None = None

    def __hash__(self) -> int:
        # Computed once per shape object: shapes are dictionary keys in passes' inner loops
        # (CSE, fusion analyses), and the field-by-field hash runs Python code for the dtype.
        try:
            return self.__dict__["_hash"]
        except KeyError:
            h = hash((self.dtype, self.dims, self.layout, self.layout_attrs, self.dynamic))
            self.__dict__["_hash"] = h  # (not a field: equality ignores it)
            return h

    @property
    def layout_extra(self) -> str:
        """The layout attributes as XLA's text with the leading `:` (`:T(8,128)`), printed
        from `layout_attrs`; '' when there are none (a default physical layout)."""
        return "" if self.layout_attrs is None else ":" + str(self.layout_attrs)

    @property
    def rank(self) -> int:
        return len(self.dims)

    # The derived sizes below are computed once per shape object (kept in its __dict__, which
    # equality and hashing ignore): the fusion rules ask for them on every edge they look at.

    @cached_property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.dims)

    @cached_property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @cached_property
    def true_rank(self) -> int:
        """Number of dimensions with extent > 1 (XLA's TrueRank)."""
        return sum(1 for d in self.dims if d > 1)

    @property
    def is_effective_scalar(self) -> bool:
        return self.size == 1

    @cached_property
    def minor_to_major(self) -> tuple[int, ...]:
        """The layout, defaulting to row-major (descending) when none was given."""
        if self.layout is not None:
            return self.layout
        return tuple(range(self.rank - 1, -1, -1))

    @property
    def has_default_layout(self) -> bool:
        """Row-major (descending minor-to-major) with no tiling or memory space: the physical
        layout numpy's C order has."""
        return self.layout_attrs is None and (
            self.layout is None or self.layout == tuple(range(self.rank - 1, -1, -1)))

    @property
    def is_dynamic(self) -> bool:
        """Some dimension is dynamic (`<=N` or `?`)."""
        return self.dynamic is not None

    def with_dtype(self, dtype: DType) -> ArrayShape:
        return ArrayShape(dtype, self.dims, self.layout, self.layout_attrs, self.dynamic)

    def with_dims(self, dims: tuple[int, ...]) -> ArrayShape:
        return ArrayShape(self.dtype, tuple(dims), None)

    def without_layout(self) -> ArrayShape:
        return ArrayShape(self.dtype, self.dims, None, None, self.dynamic)

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

DIM_STATIC, DIM_BOUNDED, DIM_UNBOUNDED = 0, 1, 2


def _dim_text(shape: ArrayShape, i: int) -> str:
    code = DIM_STATIC if shape.dynamic is None else shape.dynamic[i]
    if code == DIM_UNBOUNDED:
        return "?"
    return f"<={shape.dims[i]}" if code == DIM_BOUNDED else str(shape.dims[i])


def dynamic_leaf(shape: Shape) -> ArrayShape | None:
    """The first array leaf of `shape` with a dynamic dimension, or None."""
    for leaf in leaves(shape):
        if leaf.dynamic is not None:
            return leaf
    return None


def format_shape(shape: Shape, with_layout: bool = True) -> str:
    """XLA's text for a shape: `f32[2,3]{1,0}`, `(s32[], f32[4]{0})`, `token[]`."""
    if isinstance(shape, TokenShape):
        return "token[]"
    if isinstance(shape, TupleShape):
        return "(" + ", ".join(format_shape(e, with_layout) for e in shape.elements) + ")"
    if shape.dynamic is None:
        text = f"{shape.dtype.name}[{','.join(str(d) for d in shape.dims)}]"
    else:
        text = f"{shape.dtype.name}[{','.join(_dim_text(shape, i) for i in range(shape.rank))}]"
    if with_layout and shape.layout is not None:
        text += "{" + ",".join(str(d) for d in shape.layout) + shape.layout_extra + "}"
    return text


def leaves(shape: Shape) -> list[ArrayShape]:
    """The array leaves of a shape, depth-first (iterative: safe on any nesting)."""
    if isinstance(shape, ArrayShape):  # (the usual case)
        return [shape]
    out: list[ArrayShape] = []
    stack: list[Shape] = [shape]
    while stack:
        s = stack.pop()
        if isinstance(s, ArrayShape):
            out.append(s)
        elif isinstance(s, TupleShape):
            stack.extend(reversed(s.elements))
    return out


def leaf_start(shape: Shape, index: int) -> int:
    """Where element `index` of a tuple shape starts among `leaves(shape)`."""
    if not isinstance(shape, TupleShape):
        raise TypeError(f"element {index} of a non-tuple shape {format_shape(shape)}")
    return sum(len(leaves(e)) for e in shape.elements[:index])


def subshape_count(shape: Shape) -> int:
    """XLA's ShapeUtil::SubshapeCount: a tuple counts itself plus every subshape."""
    if isinstance(shape, ArrayShape):  # (the usual case)
        return 1
    count = 0
    stack: list[Shape] = [shape]
    while stack:
        s = stack.pop()
        count += 1
        if isinstance(s, TupleShape):
            stack.extend(s.elements)
    return count


def tuple_depth(shape: Shape) -> int:
    """How deep tuples nest in `shape` (0 for an array or token, 1 for `(f32[])`)."""
    deepest = 0
    stack: list[tuple[Shape, int]] = [(shape, 0)]
    while stack:
        s, depth = stack.pop()
        if isinstance(s, TupleShape):
            depth += 1
            deepest = max(deepest, depth)
            stack.extend((e, depth) for e in s.elements)
    return deepest


@dataclass(frozen=True)
class ShapeProblem:
    """Why a shape is invalid. `limit` tells a limit exceeded (raised as a `LimitError`) from
    a malformed shape."""

    message: str
    limit: bool = False


def array_problem(shape: ArrayShape) -> ShapeProblem | None:
    """`shape_problem` for one array shape (no tuples involved)."""
    dims = shape.dims
    if len(dims) > limits.MAX_RANK:
        return ShapeProblem(f"rank {len(dims)} is above the limit of {limits.MAX_RANK} "
                            "dimensions (hlofuse.ir.limits.MAX_RANK)", True)
    for i, d in enumerate(dims):
        if d < 0:
            return ShapeProblem(f"dimension {i} is negative ({d})")
        if d > limits.MAX_DIMENSION:
            return ShapeProblem(f"dimension {i} ({d}) does not fit in int64 (XLA's limit is "
                                "2^63-1)", True)
    nbytes = shape.dtype.itemsize
    for d in dims:
        nbytes *= d
        if nbytes > limits.MAX_SHAPE_BYTES:
            break
    if nbytes > limits.MAX_SHAPE_BYTES:
        return ShapeProblem(f"its size in bytes overflows int64 (XLA's ValidateShapeSize): "
                            f"{'x'.join(str(d) for d in dims)} elements of "
                            f"{shape.dtype.itemsize} bytes", True)
    if shape.layout is not None and sorted(shape.layout) != list(range(len(dims))):
        return ShapeProblem(f"layout {{{','.join(map(str, shape.layout))}}} is not a "
                            f"permutation of the {len(dims)} dimension(s)")
    if shape.layout_attrs is not None:
        problem = shape.layout_attrs.problem(len(dims))
        if problem:
            return ShapeProblem(problem)
    return None


def shape_problem(shape: Shape) -> ShapeProblem | None:
    """The first reason `shape` is invalid (see the module docstring), or None. Iterative."""
    stack: list[tuple[object, int]] = [(shape, 0)]
    while stack:
        s, depth = stack.pop()
        if isinstance(s, TupleShape):
            if depth + 1 > limits.MAX_TUPLE_DEPTH:
                return ShapeProblem(f"tuples are nested more than {limits.MAX_TUPLE_DEPTH} "
                                    "deep (hlofuse.ir.limits.MAX_TUPLE_DEPTH)", True)
            stack.extend((e, depth + 1) for e in reversed(s.elements))
        elif isinstance(s, ArrayShape):
            problem = array_problem(s)
            if problem is not None:
                return problem
        elif not isinstance(s, TokenShape):
            return ShapeProblem(f"not a shape: {type(s).__name__}")
    return None


def scalar(dtype: DType) -> ArrayShape:
    return ArrayShape(dtype, ())


def array(dtype: DType, *dims: int) -> ArrayShape:
    return ArrayShape(dtype, tuple(dims))
