"""Parsing of `constant(...)` literals into numpy arrays (or tuples of them) of the shape's type.

Grammar (XLA's): a scalar `5`, `-1.5e-3`, `nan`, `-nan`, `nan(0x7f)`, `inf`, `-inf`, `true`,
`false`; a complex scalar `(1.5, -2)`; an array as braces nested to the rank,
`{ {1, 2}, {3, 4} }`; one scalar for every element of an array, `f32[3,3] constant(1)` (newer
XLA parsers); a tuple `(1, {2, 3})`.

Conditions enforced, each an `HloParseError` at the offending character (messages use XLA's
words, "value ... is out of range for literal's primitive type F16"):

* the braces nest exactly to the rank and every dimension has its declared element count;
* every element is valid for the element type: integers in the type's range (u64 also takes
  negative int64 values, wrapping, as XLA's parser does), no fractions for integer types,
  `true`/`false` (or 0/1) for `pred`; a finite float that rounds to infinity (or, for a type
  without infinities, to NaN) in its type is out of range (`f16[] constant(-65520)`, f64 1.8e308);
  a NaN payload must fit the mantissa and be non-zero, and types whose NaN is one fixed pattern
  (the `fn`/`fnuz` fp8 formats, e8m0, fp4) take no payload;
* an elided value (`{...}`, what XLA dumps print for large constants) is rejected with a message
  saying so, since the value is not in the text (unless the caller allows it: then zeros).
"""

from __future__ import annotations

import math
import re
import warnings

import numpy as np

from hlofuse.errors import HloParseError
from hlofuse.ir import limits
from hlofuse.ir.dtypes import DType, int_range
from hlofuse.ir.literal import Literal
from hlofuse.ir.shape import ArrayShape, Shape, TokenShape, TupleShape, format_shape
from hlofuse.text.lexer import Lexer, shorten

_LIT_TOKEN = re.compile(r"-?nan\(0x[0-9a-fA-F]+\)|[{}(),]|[^\s{}(),/]+|/\*.*?\*/|/", re.S)
_FLOAT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|-?(?:inf|nan)")
_NAN_PAYLOAD = re.compile(r"(-?)nan\(0x([0-9a-fA-F]+)\)")
_NON_FINITE = re.compile(r"[-+]?(?:inf|nan)")
_INT = re.compile(r"[-+]?\d+")
_ELIDED = re.compile(r"\{\s*\.\.\.\s*\}")


def parse_literal(lexer: Lexer, shape: Shape, opcode_text: str = "constant", *,
                  allow_elided: bool = False, name: str = "") -> Literal:
    """Read a literal of `shape` at the lexer's position, up to (not including) the `)` that
    closes `constant(`. With `allow_elided`, an elided value `{...}` reads as zeros (an
    `AllocationError` naming the constant `name` if they do not fit in memory)."""
    text, start = lexer.raw_value(stop_at_space=False)
    m = _ELIDED.search(text)
    if m is not None:
        if allow_elided and text.strip() == "{...}" and not isinstance(shape, TokenShape):
            line, col = lexer.line_col(start)
            with limits.allocation_guard(f"constant {name} ({lexer.source_name}:{line}:{col})",
                                         shape.nbytes):
                return _zeros(shape)
        raise lexer.error(
            "the dump elided this constant's value ('{...}'); re-dump it with large "
            "constants printed (XLA flag --xla_dump_large_constants), or parse with "
            "allow_elided_constants=True to read it as zeros",
            start + m.start(),
        )
    fast = _fast_array(text, shape)
    if fast is not None:
        return fast
    tokens = [(m.group(), start + m.start()) for m in _LIT_TOKEN.finditer(text)
              if not m.group().startswith("/*")]
    reader = _LiteralReader(lexer, tokens, lexer.pos)
    value = reader.literal(shape)
    if reader.i < len(tokens):
        tok, off = tokens[reader.i]
        raise lexer.error(f"unexpected '{shorten(tok)}' after the literal of {opcode_text}", off)
    return value


FAST_MIN_ELEMENTS = 256
# what a literal of plain numbers holds besides its braces and commas (anything else: the
# token reader)
_NUMBER_CHARS = "0123456789+-.eEinfatrulsNAIF \t\r\n"
_SKELETON_ONLY = str.maketrans("", "", _NUMBER_CHARS)
_BRACES_TO_SPACES = str.maketrans("{}", "  ")
_PRED_LINES = re.compile(r"(?:(?:true|false|0|1)\n)*")
_SEPARATORS = re.compile(r"[\s{},]+")
_LONG_NUMBER = re.compile(r"\d{19}")


def _skeleton(dims: tuple[int, ...]) -> str:
    """The braces and commas of a literal of `dims`, without spaces: `{{,,},{,,}}` for [2,3]."""
    inner = "," * (dims[-1] - 1) if dims[-1] else ""
    for d in reversed(dims[:-1]):
        inner = ",".join(["{" + inner + "}"] * d)
    return "{" + inner + "}"


def _numbers(text: str, dtype: type) -> np.ndarray | None:
    """Every comma-separated number of `text` (braces already spaces), or None where numpy
    stops early (an element of another form: `1.5` for an integer, `0x10`, `1_0`, ...)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return np.fromstring(text, dtype=dtype, sep=",")
        except (ValueError, DeprecationWarning, OverflowError):
            return None


def _fast_array(text: str, shape: Shape) -> np.ndarray | None:
    """A large array literal of plain numbers, read by numpy in one go (a jumanji Sudoku's
    puzzle bank: 810,000 elements, 8 s token by token, 0.2 s so); None for anything else
    (complex, NaN payloads, u64, comments, a malformed or out-of-range element, a wrong
    count: the token reader then reads it, or raises at the offending character)."""
    if not isinstance(shape, ArrayShape) or shape.rank == 0 or shape.size < FAST_MIN_ELEMENTS:
        return None
    dt = shape.dtype
    if dt.is_complex or dt.name == "u64" or not (dt.is_float or dt.is_integral or dt.is_pred):
        return None
    if text.translate(_SKELETON_ONLY) != _skeleton(tuple(shape.dims)):
        return None
    if dt.is_pred:
        tokens = [t for t in _SEPARATORS.split(text) if t]
        if len(tokens) != shape.size or not _PRED_LINES.fullmatch("\n".join(tokens) + "\n"):
            return None
        return np.isin(np.array(tokens), ("true", "1")).reshape(shape.dims)
    body = text.translate(_BRACES_TO_SPACES)
    if _LONG_NUMBER.search(body) or "nan" in body:  # int64 saturates; -nan's sign is lost
        return None
    if dt.is_integral:
        if any(c in body for c in ".eEinfatrulsNAIF"):
            return None
        wide = _numbers(body, np.int64)
        if wide is None or wide.size != shape.size:
            return None
        lo, hi = int_range(dt)
        if wide.min() < lo or wide.max() > hi:
            return None
        return wide.astype(dt.np).reshape(shape.dims)
    wide = _numbers(body, np.float64)
    if wide is None or wide.size != shape.size:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        arr = _to_float(wide, dt)
        back = arr.astype(np.float64)
    if (~np.isfinite(back) & np.isfinite(wide)).any():
        return None  # a finite value out of the type's range: the token reader says which
    if not dt.float_format.nan_payloads and np.isnan(wide).any():
        return None
    return arr.reshape(shape.dims)


def _zeros(shape: Shape) -> Literal:
    if isinstance(shape, TupleShape):
        return tuple(_zeros(e) for e in shape.elements)
    assert isinstance(shape, ArrayShape)
    return np.zeros(shape.dims, dtype=shape.dtype.np)


class _LiteralReader:
    def __init__(self, lexer: Lexer, tokens: list[tuple[str, int]], end: int) -> None:
        self.lexer = lexer
        self.tokens = tokens
        self.i = 0
        self.end = end

    def _peek(self) -> tuple[str, int]:
        if self.i < len(self.tokens):
            return self.tokens[self.i]
        return ("", self.end)

    def _expect(self, text: str, what: str) -> int:
        tok, off = self._peek()
        if tok != text:
            got = f"'{shorten(tok)}'" if tok else "')'"
            raise self.lexer.error(f"expected '{text}' {what}, got {got}", off)
        self.i += 1
        return off

    def literal(self, shape: Shape) -> Literal:
        if isinstance(shape, TupleShape):
            self._expect("(", f"to open a tuple literal of shape {format_shape(shape)}")
            values: list[Literal] = []
            for k, element in enumerate(shape.elements):
                if k:
                    self._expect(",", "between tuple literal elements")
                values.append(self.literal(element))
            self._expect(")", f"to close a tuple literal of {len(shape.elements)} elements")
            return tuple(values)
        if isinstance(shape, TokenShape):
            raise self.lexer.error("a token-shaped constant has no literal", self._peek()[1])
        flat: list[str] = []
        offsets: list[int] = []
        if shape.rank == 0 and shape.dtype.is_complex:
            self._complex_element(shape, flat, offsets)
        elif shape.rank == 0:
            tok, off = self._peek()
            if tok in ("", "{", "}", "(", ")", ","):
                raise self.lexer.error(
                    f"expected a scalar literal of type {shape.dtype}, got "
                    f"'{shorten(tok) or ')'}'", off)
            self.i += 1
            flat.append(tok)
            offsets.append(off)
        elif self._peek()[0] != "{":
            return self._splat(shape)
        else:
            self._nested(shape, 0, flat, offsets)
        return _to_array(self.lexer, flat, offsets, shape)

    def _splat(self, shape: ArrayShape) -> np.ndarray:
        """`f32[3,3] constant(1)`: one scalar for every element (newer XLA parsers)."""
        at = self._peek()[1]
        scalar = self.literal(ArrayShape(shape.dtype, ()))
        line, col = self.lexer.line_col(at)
        with limits.allocation_guard(f"constant ({self.lexer.source_name}:{line}:{col})",
                                     shape.nbytes):
            return np.full(shape.dims, scalar, dtype=shape.dtype.np)

    def _nested(self, shape: ArrayShape, dim: int, flat: list[str], offsets: list[int]) -> None:
        self._expect("{", f"to open dimension {dim} of a {format_shape(shape)} literal")
        count = 0
        expected = shape.dims[dim]
        last = dim == shape.rank - 1
        while True:
            tok, off = self._peek()
            if tok == "}":
                break
            if count:
                self._expect(",", f"between elements of a {format_shape(shape)} literal")
                tok, off = self._peek()
            if last and shape.dtype.is_complex:
                self._complex_element(shape, flat, offsets)
            elif last:
                if tok in ("", "{", "}", "(", ")", ","):
                    raise self.lexer.error(
                        f"expected a literal element of type {shape.dtype}, got "
                        f"'{shorten(tok) or ')'}'",
                        off)
                flat.append(tok)
                offsets.append(off)
                self.i += 1
            else:
                self._nested(shape, dim + 1, flat, offsets)
            count += 1
        close = self._peek()[1]
        if count != expected:
            raise self.lexer.error(
                f"literal of shape {format_shape(shape)} has {count} elements in dimension "
                f"{dim}, expected {expected}", close)
        self.i += 1


    def _complex_element(self, shape: ArrayShape, flat: list[str], offsets: list[int]) -> None:
        """`(re, im)`: two tokens appended to `flat` (real part, then imaginary part)."""
        self._expect("(", f"to open a complex value (re, im) of a {format_shape(shape)} literal")
        for k in range(2):
            if k:
                self._expect(",", "between the real and imaginary parts of a complex value")
            tok, off = self._peek()
            if tok in ("", "{", "}", "(", ")", ","):
                raise self.lexer.error(f"expected a number in a complex value, got "
                                       f"'{shorten(tok) or ')'}'", off)
            flat.append(tok)
            offsets.append(off)
            self.i += 1
        self._expect(")", "to close a complex value (re, im)")


def _to_array(lexer: Lexer, flat: list[str], offsets: list[int], shape: ArrayShape) -> np.ndarray:
    dt: DType = shape.dtype
    values: list[object]
    if dt.is_pred:
        values = []
        for tok, off in zip(flat, offsets):
            if tok in ("true", "1"):
                values.append(True)
            elif tok in ("false", "0"):
                values.append(False)
            else:
                raise lexer.error(f"expected true or false in a pred literal, got "
                                  f"'{shorten(tok)}'", off)
    elif dt.is_integral:
        values = [_int_value(lexer, tok, off, dt) for tok, off in zip(flat, offsets)]
    elif dt.is_complex:
        # (re, im) pairs, interleaved as complex numbers are in memory
        re_im = np.ascontiguousarray(_float_array(lexer, flat, offsets, dt.component))
        return re_im.view(dt.np).reshape(shape.dims)
    else:
        return _float_array(lexer, flat, offsets, dt).reshape(shape.dims)
    return np.array(values, dtype=dt.np).reshape(shape.dims)


def _out_of_range(lexer: Lexer, tok: str, off: int, dt: DType) -> HloParseError:
    return lexer.error(f"value {shorten(tok)} is out of range for literal's primitive type "
                       f"{dt.name.upper()} ({dt})", off)


def _int_value(lexer: Lexer, tok: str, off: int, dt: DType) -> int:
    if not _INT.fullmatch(tok):
        raise lexer.error(f"expected an integer literal of type {dt}, got '{shorten(tok)}'", off)
    if len(tok.lstrip("+-")) > limits.MAX_INT_DIGITS:  # int() refuses 4300+ digits
        raise _out_of_range(lexer, tok, off, dt)
    v = int(tok)
    lo, hi = int_range(dt)
    if dt.name == "u64" and -(2**63) <= v < 0:
        return v + 2**64  # XLA reads u64 literals as int64 and casts: -1 is all ones
    if v < lo or v > hi:
        raise _out_of_range(lexer, tok, off, dt)
    return v


def _float_array(lexer: Lexer, flat: list[str], offsets: list[int], dt: DType) -> np.ndarray:
    """The values of `flat` in the real float type `dt` (one-dimensional)."""
    values: list[float] = []
    payloads: list[tuple[int, bool, int, int]] = []
    for k, (tok, off) in enumerate(zip(flat, offsets)):
        if not _FLOAT.fullmatch(tok):
            m = _NAN_PAYLOAD.fullmatch(tok)
            if m is None:
                raise lexer.error(
                    f"expected a floating-point literal of type {dt}, got '{shorten(tok)}'", off)
            payloads.append((k, m.group(1) == "-", int(m.group(2), 16), off))
            values.append(float("nan"))
            continue
        values.append(float(tok))
    with np.errstate(over="ignore", invalid="ignore"):
        arr = _to_float(np.array(values, dtype=np.float64), dt)
        wide = arr.astype(np.float64)
    bad = ~np.isfinite(wide) & np.isfinite(np.array(values, dtype=np.float64))
    for k, (tok, off) in enumerate(zip(flat, offsets)):
        if bad[k] or (not _NON_FINITE.fullmatch(tok) and not _NAN_PAYLOAD.fullmatch(tok)
                      and not math.isfinite(values[k])):
            raise _out_of_range(lexer, tok, off, dt)
    if payloads:
        _set_nan_payloads(lexer, arr, dt, payloads)
    return arr


def _to_float(wide: np.ndarray, dt: DType) -> np.ndarray:
    """f64 values in the float type `dt`, rounded to nearest. For f8e8m0fnu a value in
    [2^-128, 2^-126) is the nearer of 2^-127 and 2^-126: XLA prints 2^-127 as 5.9e-39, which
    ml_dtypes' cast (by the bits of an f32 subnormal) makes 2^-126."""
    arr = wide.astype(dt.np)
    if dt.name == "f8e8m0fnu":
        with np.errstate(invalid="ignore"):
            tiny = (wide >= 2.0**-128) & (wide < _E8M0_HALFWAY)
        if tiny.any():
            arr = np.where(tiny, np.uint8(0).view(dt.np), arr).astype(dt.np)
    return arr


_E8M0_HALFWAY = 1.5 * 2.0**-127  # between e8m0's two smallest values


def _set_nan_payloads(lexer: Lexer, arr: np.ndarray, dt: DType,
                      payloads: list[tuple[int, bool, int, int]]) -> None:
    """Write `nan(0x...)` elements bit by bit: sign, all-ones exponent, the payload (the whole
    mantissa, as XLA prints it)."""
    fmt = dt.float_format
    mantissa_bits = fmt.mantissa_bits
    exponent = ((1 << fmt.exponent_bits) - 1) << mantissa_bits
    bits = arr.view(np.dtype(f"u{arr.itemsize}"))
    for k, negative, payload, off in payloads:
        if not fmt.nan_payloads or payload == 0 or payload >> mantissa_bits:
            why = (f"{dt} has a single NaN encoding" if not fmt.nan_payloads else
                   f"it does not fit the {mantissa_bits}-bit mantissa of {dt} (and must not be "
                   "0)")
            raise lexer.error(f"literal tries to set NaN payload 0x{shorten(f'{payload:x}')}: "
                              f"{why}", off)
        sign = 1 << (dt.bits - 1) if negative else 0
        bits[k] = sign | exponent | payload
