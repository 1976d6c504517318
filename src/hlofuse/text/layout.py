"""Parsing of the layout attributes after `:` in a layout: `{1,0:T(8,128)(2,1)S(1)}`.

Grammar (XLA's `HloParserImpl::ParseLayout`, xla/hlo/parser/hlo_parser.cc), each part at most
once and in this order:

    attrs   := ['T' ('(' [tdim (',' tdim)*] ')')+]        tiles; tdim := int | '*'
               ['L' '(' int ')']                           tail padding alignment (elements)
               ['#' '(' utype ')']                         index primitive type
               ['*' '(' utype ')']                         pointer primitive type
               ['E' '(' int ')']                           element size in bits
               ['S' '(' int ')']                           memory space
               ['SC' ('(' int ':' [int (',' int)*] ')')+]  split configs
               ['M' '(' int ')']                           dynamic-shape metadata prefix bytes
    utype   := 'u8' | 'u16' | 'u32' | 'u64'

Conditions enforced, each an `HloParseError` at the offending character: the grammar above;
integers that fit int64; XLA's sparse-layout parts (`D(...)` dim level types and `P(...)`
physical shapes) are rejected as unsupported, since hlofuse has no sparse arrays; the result
passes `LayoutAttrs.problem` (ranges). The parser reads characters directly (`#`, `*` and `:`
are not tokens here), and returns with the lexer just before the closing `}`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from hlofuse.ir import limits
from hlofuse.ir.shape import LAYOUT_INDEX_TYPES, LayoutAttrs
from hlofuse.text.lexer import shorten

if TYPE_CHECKING:
    from hlofuse.text.lexer import Lexer

_ORDER = ("T", "L", "#", "*", "E", "S", "SC", "M")
_KEY = re.compile(r"SC|[A-Za-z]+|[#*]")
_INT = re.compile(r"-?\d+")
_SPACE = re.compile(r"[ \t\r\n]*")
_TYPE = re.compile(r"[a-z]+\d*")


class _Reader:
    def __init__(self, lexer: Lexer) -> None:
        self.lexer = lexer
        self.text = lexer.text
        self.pos = lexer.pos

    def skip(self) -> int:
        self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
        return self.pos

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos:self.pos + 1]

    def expect(self, ch: str, what: str) -> None:
        if self.peek() != ch:
            got = self.text[self.pos:self.pos + 1]
            raise self.lexer.error(f"expected '{ch}' {what}, got "
                                   f"{repr(got) if got else 'end of input'}", self.pos)
        self.pos += 1

    def integer(self, what: str) -> int:
        start = self.skip()
        m = _INT.match(self.text, start)
        if m is None:
            got = self.text[start:start + 1]
            raise self.lexer.error(f"expected an integer for {what}, got "
                                   f"{repr(got) if got else 'end of input'}", start)
        self.pos = m.end()
        digits = m.group().lstrip("-")
        if len(digits) > limits.MAX_INT_DIGITS or int(digits) > limits.MAX_DIMENSION:
            raise self.lexer.error(f"{what} {shorten(m.group())} does not fit in int64", start)
        return int(m.group())

    def type_name(self, what: str) -> str:
        start = self.skip()
        m = _TYPE.match(self.text, start)
        if m is None or m.group() not in LAYOUT_INDEX_TYPES:
            shown = m.group()[:24] if m is not None else self.text[start:start + 1]
            raise self.lexer.error(f"expected an unsigned integer type "
                                   f"({', '.join(LAYOUT_INDEX_TYPES)}) for {what}, got "
                                   f"{shown!r}", start)
        self.pos = m.end()
        return m.group()

    def paren_int(self, what: str) -> int:
        self.expect("(", f"after {what}")
        value = self.integer(what)
        self.expect(")", f"to close {what}")
        return value


def parse_layout_attrs(lexer: Lexer, rank: int) -> LayoutAttrs:
    """Read the attributes after a layout's `:` (see the module docstring) for an array of
    `rank` dimensions; leaves the lexer at the closing `}`."""
    r = _Reader(lexer)
    start = r.skip()
    fields: dict[str, object] = {}
    last = -1
    while r.peek() not in ("}", ""):
        at = r.pos
        m = _KEY.match(r.text, at)
        if m is None:
            raise lexer.error(f"expected a layout attribute ({', '.join(_ORDER)}) or '}}', got "
                              f"{r.text[at]!r}", at)
        key = m.group()
        if key in ("D", "P"):
            raise lexer.error(f"sparse layouts ({key}(...)) are not supported", at)
        if key not in _ORDER:
            raise lexer.error(f"unknown layout attribute '{key[:24]}' (expected one of "
                              f"{', '.join(_ORDER)})", at)
        index = _ORDER.index(key)
        if index <= last:
            raise lexer.error(f"layout attribute {key} repeated or out of order (XLA's order "
                              f"is {' '.join(_ORDER)})", at)
        last = index
        r.pos = m.end()
        if key == "T":
            fields["tiles"] = _tiles(r)
        elif key == "SC":
            fields["split_configs"] = _split_configs(r)
        elif key in ("#", "*"):
            what = "the index type #(...)" if key == "#" else "the pointer type *(...)"
            r.expect("(", f"after {key} in a layout")
            fields["index_type" if key == "#" else "pointer_type"] = r.type_name(what)
            r.expect(")", f"to close {what}")
        else:
            name = {"L": "tail_padding_alignment", "E": "element_size_bits",
                    "S": "memory_space", "M": "dynamic_shape_metadata_prefix_bytes"}[key]
            fields[name] = r.paren_int(f"layout attribute {key}")
    attrs = LayoutAttrs(**fields)  # type: ignore[arg-type]
    problem = attrs.problem(rank)
    if problem:
        raise lexer.error(problem, start)
    lexer.pos = r.pos
    return attrs


def _tiles(r: _Reader) -> tuple[tuple[int | None, ...], ...]:
    tiles: list[tuple[int | None, ...]] = []
    r.expect("(", "after T in a layout")
    while True:
        dims: list[int | None] = []
        if r.peek() != ")":
            while True:
                if r.peek() == "*":
                    r.pos += 1
                    dims.append(None)
                else:
                    dims.append(r.integer("a tile dimension"))
                if r.peek() != ",":
                    break
                r.pos += 1
        r.expect(")", "to close a layout tile")
        tiles.append(tuple(dims))
        if r.peek() != "(":
            return tuple(tiles)
        r.pos += 1


def _split_configs(r: _Reader) -> tuple[tuple[int, tuple[int, ...]], ...]:
    configs: list[tuple[int, tuple[int, ...]]] = []
    r.expect("(", "after SC in a layout")
    while True:
        dim = r.integer("a split config dimension")
        r.expect(":", "after the dimension of a split config")
        indices: list[int] = []
        if r.peek() != ")":
            while True:
                indices.append(r.integer("a split index"))
                if r.peek() != ",":
                    break
                r.pos += 1
        r.expect(")", "to close a split config")
        configs.append((dim, tuple(indices)))
        if r.peek() != "(":
            return tuple(configs)
        r.pos += 1
