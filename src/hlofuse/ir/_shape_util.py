"""Small helpers shared by the shape-inference modules: error raising, shape formatting and
attribute readers that validate what they read.

Every helper raises `HloVerifyError` (without an instruction name; the verifier adds it) with a
message that says what was expected and what was found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from hlofuse.errors import HloVerifyError
from hlofuse.ir.dtypes import DType
from hlofuse.ir.shape import ArrayShape, Shape, TupleShape, format_shape

if TYPE_CHECKING:
    from hlofuse.ir.computation import Computation

_MISSING = MISSING = object()  # "no default": the attribute is required


def fail(message: str) -> NoReturn:
    raise HloVerifyError(message)


def fmt(shape: Shape | None) -> str:
    """A shape as XLA prints it, without layout (`f32[4,5]`, `(s32[], f32[2])`)."""
    if shape is None:
        return "<no shape>"
    return format_shape(shape, with_layout=False)


def fmt_list(shapes: Sequence[Shape]) -> str:
    return ", ".join(fmt(s) for s in shapes)


def expect_array(shape: Shape, what: str) -> ArrayShape:
    if not isinstance(shape, ArrayShape):
        fail(f"{what} must be an array, found {fmt(shape)}")
    return shape


def expect_arrays(shapes: Sequence[Shape], what: str) -> list[ArrayShape]:
    """Every shape an array; the error names `what` and the operand's position."""
    for i, s in enumerate(shapes):
        if not isinstance(s, ArrayShape):
            fail(f"{what} {i} must be an array, found {fmt(s)}")
    return list(shapes)  # type: ignore[arg-type]


def expect_scalar(shape: Shape, what: str) -> ArrayShape:
    arr = expect_array(shape, what)
    if arr.dims:
        fail(f"{what} must be a scalar, found {fmt(shape)}")
    return arr


def expect_integral_scalar(shape: Shape, what: str) -> ArrayShape:
    arr = expect_scalar(shape, what)
    if not arr.dtype.is_integral:
        fail(f"{what} must be an integral scalar, found {fmt(shape)}")
    return arr


def same_shape(a: Shape, b: Shape) -> bool:
    """Equal up to layout."""
    return a.compatible(b)


def same_ignoring_fp(a: Shape, b: Shape) -> bool:
    """Equal up to layout and floating-point precision (XLA's CompatibleIgnoringFpPrecision)."""
    if isinstance(a, ArrayShape) and isinstance(b, ArrayShape):
        if a.dims != b.dims:
            return False
        return a.dtype == b.dtype or (a.dtype.is_float and b.dtype.is_float)
    if isinstance(a, TupleShape) and isinstance(b, TupleShape):
        return len(a.elements) == len(b.elements) and all(
            same_ignoring_fp(x, y) for x, y in zip(a.elements, b.elements, strict=True)
        )
    return a.compatible(b)


def strip_layout(shape: Shape) -> Shape:
    return shape.without_layout()


def tuple_or_single(shapes: Sequence[Shape]) -> Shape:
    """One shape as itself, several as a tuple (variadic reduce, sort, scatter results)."""
    if len(shapes) == 1:
        return shapes[0]
    return TupleShape(tuple(shapes))


# ----- attributes -------------------------------------------------------------------------


def attr_int(attrs: Mapping[str, Any], key: str, op: str, default: Any = _MISSING) -> int:
    value = attrs.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is _MISSING:
            fail(f"{op} requires attribute {key}")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        fail(f"{op} attribute {key} must be an integer, found {value!r}")
    return value


def attr_ints(
    attrs: Mapping[str, Any], key: str, op: str, default: Any = _MISSING
) -> tuple[int, ...]:
    value = attrs.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is _MISSING:
            fail(f"{op} requires attribute {key}")
        return tuple(default)
    if not isinstance(value, (tuple, list)) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        fail(f"{op} attribute {key} must be a list of integers, found {value!r}")
    return tuple(value)


def check_dim_list(
    dims: Sequence[int], rank: int, op: str, key: str, *, sorted_: bool = False
) -> None:
    """Each entry in [0, rank), no repeats, optionally strictly increasing."""
    seen: set[int] = set()
    prev = -1
    for d in dims:
        if d < 0 or d >= rank:
            fail(f"{op} {key}={{{_ints(dims)}}} has dimension {d} out of range for rank {rank}")
        if d in seen:
            fail(f"{op} {key}={{{_ints(dims)}}} repeats dimension {d}")
        if sorted_ and d < prev:
            fail(f"{op} {key}={{{_ints(dims)}}} must be sorted")
        seen.add(d)
        prev = d


def _ints(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)


def ints_text(values: Sequence[int]) -> str:
    """`{0,1}` as the text format writes integer lists."""
    return "{" + _ints(values) + "}"


def dtype_of(shape: Shape) -> DType | None:
    return shape.dtype if isinstance(shape, ArrayShape) else None


# ----- called computations ---------------------------------------------------------------


def callee(attrs: Mapping[str, Any], key: str, called: Sequence[Computation], index: int,
           op: object) -> Computation:
    """The computation named by attribute `key`, else `called[index]`; raises if neither."""
    comp = attrs.get(key)
    if comp is None and index < len(called):
        comp = called[index]
    if comp is None:
        fail(f"{op} requires attribute {key}")
    if isinstance(comp, (tuple, list)):
        if len(comp) != 1:
            fail(f"{op} attribute {key} must name one computation, found {len(comp)}")
        comp = comp[0]
    if not hasattr(comp, "instructions"):
        fail(f"{op} attribute {key} names unknown computation {comp!r}")
    return comp


def signature(comp: Computation) -> tuple[list[Shape], Shape]:
    """Parameter shapes (by parameter number) and root shape of a computation."""
    if not comp.has_root:
        fail(f"computation {comp.name} has no root")
    return [p.shape for p in comp.parameters], comp.root.shape
