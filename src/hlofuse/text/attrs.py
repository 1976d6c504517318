"""Parsing of shapes, instruction attributes (by the schema in `ir/attributes.py`) and metadata.

Shapes: `f32[2,3]`, `f32[2,3]{1,0}`, `f32[8,128]{1,0:T(8,128)}` (the part after `:` is parsed
into `ir.shape.LayoutAttrs` by `text/layout.py`), `(s32[], f32[4]{0})`, `()`, `token[]`. A
layout is read only when its `{` directly follows the `]` (so `-> f32[4] {` opens a computation
body).

Attribute values by kind (`AttrKind`): INT `3`; INTS `{0,1}`; BOOL `true`; ENUM `kLoop`; STRING
`"foo"`; SLICE `{[0:2], [1:3:2]}`; PADDING `0_1x2_2_1`; WINDOW `{size=3x3 stride=2x2 pad=0_1x0_1
lhs_dilate=1x2 rhs_dilate=1x1 rhs_reversal=0x1}`; COMPUTATION `%add`; COMPUTATIONS `{%a, %b}`
(or one bare name); RAW: verbatim balanced text.

Conditions enforced (each an `HloParseError` at the offending token): known element types;
non-negative dimensions; dynamic dimensions (`<=N` bounded, `?` unbounded) are read into
`ArrayShape.dynamic` (they parse, print and verify; no backend runs them); every array shape passes
`ir.shape.array_problem` (rank, int64 dimensions and byte size: a `ParseLimitError` beyond
`ir.limits`); tuples nested at most `ir.limits.MAX_TUPLE_DEPTH` deep; a layout that is a
permutation of the dimensions; integers that fit int64; well-formed slices,
paddings and windows (every window field has one entry per dimension, known field names only);
metadata as `key=value` pairs of strings, integers or booleans.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from hlofuse.ir import limits
from hlofuse.ir.attributes import AttrKind, WindowDim
from hlofuse.ir.dtypes import DTYPES
from hlofuse.ir.metadata import Metadata, Verbatim
from hlofuse.ir.shape import (
    DIM_BOUNDED,
    DIM_STATIC,
    DIM_UNBOUNDED,
    ArrayShape,
    LayoutAttrs,
    Shape,
    TokenShape,
    TupleShape,
    array_problem,
    format_shape,
)
from hlofuse.text.layout import parse_layout_attrs
from hlofuse.text.lexer import BaseParser, Token, decode_string, int64, shorten

_PADDING = re.compile(r"-?\d+_-?\d+(?:_-?\d+)?(?:x-?\d+_-?\d+(?:_-?\d+)?)*")
_WINDOW = re.compile(r"\{([^{}]*)\}")
_WINDOW_ITEM = re.compile(r"\s*([A-Za-z_]+)=(\S+)")
_WINDOW_FIELDS = ("size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal")
# Fast paths: a whole array shape, and a whole metadata block, in one regex match each.
# (A layout with `:` attributes is left to the slow path: the lookahead refuses a `{` after it.)
_ARRAY_SHAPE = re.compile(r"%?([a-z]+[0-9]*)\[([0-9,]*)\](?:\{([0-9,]*)\})?(?![\w.\-${])")
_METADATA = re.compile(
    r'\{((?:\s*[A-Za-z_]\w*=(?:"(?:[^"\\\n]|\\.)*"|-?\d+(?![\w.])|true|false))*)\s*\}')
_METADATA_ITEM = re.compile(r'\s*([A-Za-z_]\w*)=(?:"((?:[^"\\\n]|\\.)*)"|(-?\d+)|(true|false))')


@dataclass(frozen=True)
class CompRef:
    """A computation named in an attribute, resolved once every computation is parsed."""

    name: str
    offset: int


class AttrParser(BaseParser):
    """Shapes, attribute values and metadata."""

    def __init__(self, text: str, source_name: str = "<text>") -> None:
        super().__init__(text, source_name)
        self._shape_cache: dict[str, Shape] = {}
        # metadata text -> its value (JAX repeats it: gpt-8's 6,010 are 1,404 distinct texts)
        self._metadata_cache: dict[str, Metadata] = {}
        self._tuple_depth = 0  # tuple shapes being parsed, one inside the other

    # ----- shapes -------------------------------------------------------------------------

    def parse_optional_shape(self) -> Shape | None:
        """A shape if the next tokens start one: `(` or an element type followed by `[`."""
        m = self.lexer.match_here(_ARRAY_SHAPE)
        if m is not None:
            return self._array_shape_from_match(m)
        tok = self.lexer.peek()
        if tok.kind == "(":
            return self.parse_shape()
        if tok.kind == "name" and self.lexer.text.startswith("[", tok.end):
            return self.parse_shape()
        return None

    def _dimension(self, text: str, offset: int) -> int:
        value = int64(text)
        if value is None:
            raise self.error(f"dimension size {shorten(text)} does not fit in int64 (XLA's "
                             "limit is 2^63-1)", offset, limit=True)
        return value

    def _array_shape_from_match(self, m: re.Match[str]) -> Shape:
        text = m.group()
        shape = self._shape_cache.get(text)
        if shape is not None:
            return shape
        dtype = DTYPES.get(m.group(1))
        if dtype is None:
            if m.group(1) == "token" and not m.group(2) and m.group(3) is None:
                return TokenShape()
            raise self.error(f"unknown element type '{shorten(m.group(1))}' in shape",
                             m.start(1))
        parts = m.group(2).split(",") if m.group(2) else []
        offset = m.start(2)
        dims: list[int] = []
        for part in parts:
            if not part:
                got = self.lexer.text[offset]
                raise self.error(f"expected a dimension size (a non-negative integer), got "
                                 f"'{got}'", offset)
            dims.append(self._dimension(part, offset))
            offset += len(part) + 1
        layout: tuple[int, ...] | None = None
        if m.group(3) is not None:
            lparts = m.group(3).split(",") if m.group(3) else []
            if "" in lparts or any(len(v) > limits.MAX_INT_DIGITS for v in lparts):
                raise self.error(f"expected dimension numbers in the layout "
                                 f"{{{shorten(m.group(3))}}}", m.start(3) - 1)
            layout = tuple(int(d) for d in lparts)
            if sorted(layout) != list(range(len(dims))):
                raise self.error(
                    f"layout {{{shorten(m.group(3))}}} is not a permutation of the {len(dims)} "
                    f"dimension(s) of the shape", m.start(3) - 1)
        shape = self._checked(ArrayShape(dtype, tuple(dims), layout), m.start())
        self._shape_cache[text] = shape
        return shape

    def _checked(self, shape: ArrayShape, offset: int) -> ArrayShape:
        """`shape` if `ir.shape.array_problem` finds nothing, else the error at `offset`."""
        problem = array_problem(shape)
        if problem is not None:
            raise self.error(f"invalid shape {shorten(format_shape(shape, False))}: "
                             f"{problem.message}", offset, limit=problem.limit)
        return shape

    def parse_shape(self) -> Shape:
        """A shape; tuples nest at most `ir.limits.MAX_TUPLE_DEPTH` deep (`ParseLimitError`
        at the `(` that goes deeper)."""
        lexer = self.lexer
        m = lexer.match_here(_ARRAY_SHAPE)
        if m is not None:
            return self._array_shape_from_match(m)
        tok = lexer.peek()
        if tok.kind == "(":
            if self._tuple_depth >= limits.MAX_TUPLE_DEPTH:
                raise self.error(f"tuple shapes nested more than {limits.MAX_TUPLE_DEPTH} deep "
                                 "(hlofuse.ir.limits.MAX_TUPLE_DEPTH)", tok.start, limit=True)
            lexer.next()
            self._tuple_depth += 1
            try:
                elements: list[Shape] = []
                if self.parse_optional_punct(")") is None:
                    elements.append(self.parse_shape())
                    while self.parse_optional_punct(",") is not None:
                        elements.append(self.parse_shape())
                    self.parse_punct(")", "to close a tuple shape")
            finally:
                self._tuple_depth -= 1
            return TupleShape(tuple(elements))
        if tok.kind != "name":
            raise self.error(f"expected a shape, got {tok.describe()}", tok.start)
        lexer.next()
        if tok.text == "token":
            self.parse_punct("[", "after 'token'")
            self.parse_punct("]", "in 'token[]'")
            return TokenShape()
        dtype = DTYPES.get(tok.text)
        if dtype is None:
            raise self.error(f"unknown element type '{shorten(tok.text)}' in shape", tok.start)
        self.parse_punct("[", f"after element type {tok.text}")
        dims: list[int] = []
        dynamic: list[int] = []
        while True:
            at = lexer.skip_space()  # no token is peeked here: `?` and `<` are not tokens
            if lexer.text.startswith("?", at):
                lexer.pos = at + 1
                dims.append(0)
                dynamic.append(DIM_UNBOUNDED)
                if self.parse_optional_punct(",") is None:
                    self.parse_punct("]", "to close the dimensions of a shape")
                    break
                continue
            bounded = lexer.text.startswith("<=", at)
            if bounded:
                lexer.pos = at + 2
            elif not dims and self.parse_optional_punct("]") is not None:
                break
            dynamic.append(DIM_BOUNDED if bounded else DIM_STATIC)
            d = lexer.peek()
            if d.kind != "num" or not d.text.isdigit():
                raise self.error(
                    f"expected a dimension size (a non-negative integer), got {d.describe()}",
                    d.start)
            lexer.next()
            dims.append(self._dimension(d.text, d.start))
            if self.parse_optional_punct(",") is None:
                self.parse_punct("]", "to close the dimensions of a shape")
                break
        layout: tuple[int, ...] | None = None
        attrs: LayoutAttrs | None = None
        if lexer.text.startswith("{", lexer.pos):
            layout, attrs = self._parse_layout(len(dims))
        dyn = tuple(dynamic) if any(dynamic) else None
        return self._checked(ArrayShape(dtype, tuple(dims), layout, attrs, dyn), tok.start)

    def _parse_layout(self, rank: int) -> tuple[tuple[int, ...], LayoutAttrs | None]:
        lexer = self.lexer
        open_tok = lexer.next()
        values: list[int] = []
        attrs: LayoutAttrs | None = None
        if self.parse_optional_punct("}") is None:
            if lexer.peek().kind != ":":
                values.append(self.parse_int("a dimension number in the layout"))
                while self.parse_optional_punct(",") is not None:
                    values.append(self.parse_int("a dimension number in the layout"))
            colon = lexer.peek()
            if colon.kind == ":":
                lexer.next()
                attrs = parse_layout_attrs(lexer, rank)
            self.parse_punct("}", "to close the layout")
        if sorted(values) != list(range(rank)):
            layout_text = "{" + ",".join(str(v) for v in values) + "}"
            raise self.error(
                f"layout {shorten(layout_text)} is not a permutation of the {rank} "
                f"dimension(s) of the shape", open_tok.start)
        return tuple(values), attrs

    # ----- attribute values ---------------------------------------------------------------

    def parse_attr_value(self, name: str, kind: AttrKind) -> Any:
        what = f"attribute {name}"
        if kind is AttrKind.INT:
            return self.parse_int(f"an integer for {what}")
        if kind is AttrKind.INTS:
            return self.parse_int_list(f"the integer list of {what}")
        if kind is AttrKind.BOOL:
            return self.parse_bool(f"true or false for {what}")
        if kind is AttrKind.ENUM:
            return self.parse_name(f"a value for {what}").text
        if kind is AttrKind.STRING:
            return self.parse_string(f"a quoted string for {what}")
        if kind is AttrKind.SLICE:
            return self._parse_slice(what)
        if kind is AttrKind.PADDING:
            return self._parse_padding(what)
        if kind is AttrKind.WINDOW:
            return self._parse_window(what)
        if kind is AttrKind.FLOAT:
            return self._parse_float(what)
        if kind is AttrKind.COMPUTATION:
            if self._at_inline_body():
                return self.parse_inline_computation(name)
            tok = self.parse_name(f"a computation name for {what}")
            return CompRef(tok.text, tok.start)
        if kind is AttrKind.COMPUTATIONS:
            return self._parse_computation_list(name, what)
        if kind is AttrKind.SHAPES:
            return self._parse_shape_list(what)
        text, start = self.lexer.raw_value(stop_at_space=kind is not AttrKind.LITERAL)
        text = text.rstrip()
        if not text:
            raise self.error(f"expected a value for {what}", start)
        return text

    def _parse_computation_list(self, name: str, what: str) -> tuple[CompRef, ...]:
        tok = self.parse_optional_name()
        if tok is not None:
            return (CompRef(tok.text, tok.start),)
        if self._at_inline_body():  # `calls={ p = ... }`: one computation written in place
            return (self.parse_inline_computation(name),)
        ahead = self.lexer.peek_n(2)
        if len(ahead) == 2 and ahead[0].kind == "{" and ahead[1].kind == "{":
            # `branch_computations={ {...}, {...} }`: computations written in place
            self.parse_punct("{", f"to open {what}")
            refs = [self.parse_inline_computation(name)]
            while self.parse_optional_punct(",") is not None:
                refs.append(self.parse_inline_computation(name))
            self.parse_punct("}", f"to close {what}")
            return tuple(refs)
        names = self.parse_braced_names(what, "a computation", "or a computation name to start")
        return tuple(CompRef(t.text, t.start) for t in names)

    def _at_inline_body(self) -> bool:
        """Is the next text `{` opening a computation body (`{ name = ...` or `{ ROOT ...`)?"""
        ahead = self.lexer.peek_n(3)
        return (len(ahead) == 3 and ahead[0].kind == "{" and ahead[1].kind == "name"
                and (ahead[1].text == "ROOT" or ahead[2].kind == "="))

    def parse_inline_computation(self, attr: str) -> CompRef:
        """A computation written in place of its name (XLA's single-instruction text); the
        module parser overrides this."""
        raise self.error(f"a computation cannot be written in place for attribute {attr} here",
                         self.lexer.peek().start)

    def _parse_float(self, what: str) -> float:
        tok = self.lexer.peek()
        if tok.kind != "num":
            raise self.error(f"expected a number for {what}, got {tok.describe()}", tok.start)
        value = float(tok.text)
        if not math.isfinite(value):
            raise self.error(f"{what} must be finite, got {shorten(tok.text)}", tok.start)
        self.lexer.next()
        return value

    def _parse_shape_list(self, what: str) -> tuple[Shape, ...]:
        """`{f32[2]{0}, (s32[], f32[])}` (possibly empty)."""
        self.parse_punct("{", f"to open {what}")
        shapes: list[Shape] = []
        if self.parse_optional_punct("}") is None:
            shapes.append(self.parse_shape())
            while self.parse_optional_punct(",") is not None:
                shapes.append(self.parse_shape())
            self.parse_punct("}", f"to close {what}")
        return tuple(shapes)

    def parse_braced_names(self, what: str, item: str, opener: str = "to open") -> list[Token]:
        """`{a, b, c}` (possibly empty): the name tokens, for `what` (an attribute)."""
        self.parse_punct("{", f"{opener} {what}")
        names: list[Token] = []
        if self.parse_optional_punct("}") is None:
            while True:
                names.append(self.parse_name(f"{item} name in {what}"))
                if self.parse_optional_punct(",") is None:
                    break
            self.parse_punct("}", f"to close {what}")
        return names

    def _parse_slice(self, what: str) -> tuple[tuple[int, int, int], ...]:
        self.parse_punct("{", f"to open {what}")
        ranges: list[tuple[int, int, int]] = []
        if self.parse_optional_punct("}") is None:
            while True:
                self.parse_punct("[", f"to open a range [start:limit] of {what}")
                start = self.parse_int(f"the start of a range of {what}")
                self.parse_punct(":", f"after the start of a range of {what}")
                limit = self.parse_int(f"the limit of a range of {what}")
                stride = 1
                if self.parse_optional_punct(":") is not None:
                    stride = self.parse_int(f"the stride of a range of {what}")
                self.parse_punct("]", f"to close a range of {what}")
                ranges.append((start, limit, stride))
                if self.parse_optional_punct(",") is None:
                    break
            self.parse_punct("}", f"to close {what}")
        return tuple(ranges)

    def _parse_padding(self, what: str) -> tuple[tuple[int, int, int], ...]:
        m = self.lexer.match(_PADDING)
        if m is None:
            pos = self.lexer.skip_space()
            raise self.error(f"expected a padding like 0_1x2_2_1 for {what}", pos)
        dims: list[tuple[int, int, int]] = []
        for part in m.group().split("x"):
            nums = [self._int64_at(v, m.start(), what) for v in re.findall(r"-?\d+", part)]
            dims.append((nums[0], nums[1], nums[2] if len(nums) > 2 else 0))
        return tuple(dims)

    def _parse_window(self, what: str) -> tuple[WindowDim, ...]:
        m = self.lexer.match(_WINDOW)
        if m is None:
            pos = self.lexer.skip_space()
            raise self.error(f"expected a window like {{size=3x3 stride=2x2}} for {what}", pos)
        body_start = m.start(1)
        fields: dict[str, list[str]] = {}
        for item in _WINDOW_ITEM.finditer(m.group(1)):
            key, value = item.group(1), item.group(2)
            if key not in _WINDOW_FIELDS:
                raise self.error(f"unknown window field '{shorten(key)}' (expected one of "
                                 f"{', '.join(_WINDOW_FIELDS)})", body_start + item.start(1))
            fields[key] = value.split("x")
        if m.group(1).strip() and not fields:
            raise self.error("expected window fields like size=3x3", body_start)
        if not fields:
            return ()
        if "size" not in fields:
            raise self.error(f"window of {what} has no size", m.start())
        rank = len(fields["size"])
        for key, values in fields.items():
            if len(values) != rank:
                raise self.error(f"window field {key} has {len(values)} entries, expected "
                                 f"{rank} (one per window dimension)", m.start())
        for values in fields.values():
            for v in values:
                for num in re.findall(r"-?\d+", v):
                    self._int64_at(num, m.start(), what)
        try:
            dims = []
            for i in range(rank):
                pad = fields["pad"][i].split("_") if "pad" in fields else ["0", "0"]
                if len(pad) != 2:
                    raise ValueError(fields["pad"][i])
                dims.append(WindowDim(
                    size=int(fields["size"][i]),
                    stride=int(fields["stride"][i]) if "stride" in fields else 1,
                    pad_lo=int(pad[0]),
                    pad_hi=int(pad[1]),
                    window_dilation=int(fields["rhs_dilate"][i]) if "rhs_dilate" in fields else 1,
                    base_dilation=int(fields["lhs_dilate"][i]) if "lhs_dilate" in fields else 1,
                    reversal=(fields["rhs_reversal"][i] == "1") if "rhs_reversal" in fields
                    else False,
                ))
        except ValueError as exc:
            raise self.error(f"malformed window value '{shorten(str(exc.args[0]))}'",
                             m.start()) from None
        return tuple(dims)

    def _int64_at(self, text: str, offset: int, what: str) -> int:
        value = int64(text)
        if value is None:
            raise self.error(f"integer {shorten(text)} in {what} does not fit in int64",
                             offset, limit=True)
        return value

    # ----- metadata -----------------------------------------------------------------------

    def parse_metadata(self) -> Metadata:
        """`{op_type="add" op_name="jit(f)/add" source_line=3 stack_frame_id=1}`; fields may
        be separated by commas, and a value may be a braced list (`profile_type={1}`, kept
        verbatim as a `Verbatim` string)."""
        known = self.lexer.take_known(self._metadata_cache, "}")
        if known is not None:  # (a whole metadata text read before, so the regex would read
            return known       # just that: the first `}` outside its strings ends it)
        m = self.lexer.match_here(_METADATA)
        if m is not None:
            items: list[tuple[str, Any]] = []
            for item in _METADATA_ITEM.finditer(m.group(1)):
                key, text, num, flag = item.groups()
                if text is not None:
                    items.append((key, decode_string(text)))
                elif num is not None:
                    at = m.start(1) + item.start(3)
                    items.append((key, self._int64_at(num, at, f"metadata field {key}")))
                else:
                    items.append((key, flag == "true"))
            value = self._metadata_cache[m.group()] = Metadata(tuple(items))
            return value
        self.parse_punct("{", "to open metadata")
        fields: list[tuple[str, Any]] = []
        lexer = self.lexer
        while self.parse_optional_punct("}") is None:
            if fields:
                self.parse_optional_punct(",")
            key = self.parse_name("a metadata field name or '}'")
            self.parse_punct("=", f"after metadata field {key.text}")
            tok = lexer.peek()
            if tok.kind == "{":
                text, _ = lexer.raw_value()
                fields.append((key.text, Verbatim(text)))
            elif tok.kind == "str":
                fields.append((key.text, lexer.next().text))
            elif tok.kind == "num" and tok.text.lstrip("-").isdigit():
                fields.append((key.text, self._int64_at(tok.text, tok.start,
                                                        f"metadata field {key.text}")))
                lexer.next()
            elif tok.kind == "name" and tok.text in ("true", "false"):
                fields.append((key.text, lexer.next().text == "true"))
            else:
                raise self.error(
                    f"expected a string, integer or boolean for metadata field {key.text}, "
                    f"got {tok.describe()}", tok.start)
        return Metadata(tuple(fields))
