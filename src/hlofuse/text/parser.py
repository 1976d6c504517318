"""The HLO text parser: XLA's long dump form and the short form of XLA's tests, into a `Module`.

A hand-written recursive-descent parser over `lexer.Lexer` (xDSL style: `parse_optional_x` /
`parse_x` pairs, character spans, `expect(...)` with a message saying what was expected).

    module      := header debug-table* (computation+ | single)        (header.py)
    computation := [`ENTRY`] name [`(` params `)` `->` shape] body
    body        := `{` instruction* `}` (`,` key `=` raw)*
    instruction := [`ROOT`] name `=` rhs
    rhs         := [shape] opcode `(` operands `)` (`,` attribute)*
    operands    := [operand (`,` operand)*] | int (parameter) | literal (constant)
    operand     := [shape] name | [shape] opcode `(` operands `)`      (a nested instruction)
    attribute   := name `=` value   (by `ir.attributes.attr_kind`; plus `metadata`,
                                     `control-predecessors`); a computation-valued attribute
                                     may be a body written in place
    single      := instruction | rhs                                  (one instruction alone)

Names may carry XLA's `%` prefix anywhere. Operands and computations may be used before they are
defined: names are resolved once everything is parsed (see `build.py`). A nested instruction
(`add(f32[4] parameter(0), multiply(a, b))`) is added before its user under the name
`<opcode>.anon` (made unique), as XLA does; it takes no attributes. Text that is a single
instruction becomes a module whose entry holds it, with one parameter per operand that names no
instruction (`single_op` in `build.py`). `X-start` / `X-update` / `X-done` for an opcode X that
has no such async form of its own is XLA's syntax sugar for `async-start` / `async-update` /
`async-done` wrapping X (`async_sugar.py`).

Most lines of a real dump are plain: `[ROOT] name = shape opcode(a, b), key=value, ...` on
one line. Three regular expressions read those pieces at once (`_HEAD`, `_OPERAND_LIST`,
`_ATTRIBUTE_KEY`); anything they do not match whole (a comment, a line break, a typed or
nested operand) is read token by token, with the same result and the same error positions
(tests/test_text.py checks each fixture both ways). gpt-16's 13,000 lines: 0.46 -> 0.40 s.

Conditions enforced here, each an `HloParseError` at the offending token's line:column: the
grammar above; known opcodes (`ir.opcodes.lookup`) and attribute names; an attribute that names
a computation only on an opcode that calls one of that kind
(`ir.opcodes.CALLED_COMPUTATION_ATTRS`), `result_accuracy` only on the ops that take one
(`ir.opcodes.RESULT_ACCURACY_OPS`, with its grammar, `attr_checks.py`); no attribute twice; one
instruction per line; a shape on `parameter` and `constant`; parameter numbers >= 0; no
duplicate instruction name within a computation, no duplicate computation name, at most one
ENTRY and one ROOT per computation; nested instructions and computations written in place at
most `ir.limits.MAX_NESTING_DEPTH` deep (`ParseLimitError`); single-instruction text is one
instruction and nothing after it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hlofuse import gcpause
from hlofuse.ir import limits
from hlofuse.ir.attributes import AttrKind, attr_kind
from hlofuse.ir.dtypes import DTYPES
from hlofuse.ir.instruction import Instruction, Metadata
from hlofuse.ir.literal import Literal
from hlofuse.ir.module import DebugInfo, Module
from hlofuse.ir.opcodes import CALLED_COMPUTATION_ATTRS, Opcode, lookup
from hlofuse.ir.shape import Shape
from hlofuse.text.attr_checks import check_attribute
from hlofuse.text.attrs import CompRef
from hlofuse.text.header import HeaderParser
from hlofuse.text.lexer import NAME, Token
from hlofuse.text.literals import parse_literal

# Fast paths for the common form of a line (the token-by-token path reads the rest, and any
# line these do not match whole): `[ROOT] name =` with spaces or tabs only, and an operand list
# of plain names on one line, `a, %b.1, c)`, names being the lexer's name tokens.
_HEAD = re.compile(rf"(?:(ROOT)[ \t]+)?({NAME})[ \t]*=")
_OPERAND_LIST = re.compile(rf"{NAME}(?:[ \t]*,[ \t]*{NAME})*[ \t]*\)")
_OPERAND_NAME = re.compile(NAME)
_OPCODE_OPEN = re.compile(rf"({NAME})[ \t]*\(")
_ATTRIBUTE_KEY = re.compile(r",[ \t]*([A-Za-z_][\w.\-$]*)[ \t]*=")

_ASYNC_SUFFIXES = {"-start": Opcode.ASYNC_START, "-update": Opcode.ASYNC_UPDATE,
                   "-done": Opcode.ASYNC_DONE}


@dataclass(slots=True)
class Ref:
    """A use of a name (operand or control predecessor), resolved after parsing. `name` is
    None for an operand written as a shape alone (single-instruction text only)."""

    name: str | None
    offset: int
    shape: Shape | None = None  # the operand shape written in long form, if any
    shape_offset: int = 0


@dataclass(slots=True)
class PendingInstr:
    instr: Instruction
    offset: int  # of the name
    opcode_offset: int
    operands: list[Ref]
    control: list[Ref]
    shape_given: bool
    # `X-start` sugar: the wrapped opcode X (the instruction itself is async-start/update/done)
    async_wrapped: Opcode | None = None


@dataclass(slots=True)
class PendingComp:
    name: str
    offset: int
    is_entry: bool
    instrs: list[PendingInstr] = field(default_factory=list)
    by_name: dict[str, PendingInstr] = field(default_factory=dict)
    root: PendingInstr | None = None
    end_offset: int = 0
    # `(p: f32[4]) -> f32[4]`: the written parameter and result shapes, and where
    signature: tuple[list[tuple[str, Shape, int]], Shape, int] | None = None
    single_op: bool = False  # text that is one instruction: unknown operands become parameters


@dataclass
class ParsedModule:
    """Everything the grammar gives, before names are resolved."""

    name: str | None
    name_offset: int
    header_attrs: dict[str, str]
    debug_info: DebugInfo
    computations: list[PendingComp]


class HloParser(HeaderParser):
    """Parses one HLO text. `parse_module()` returns the unresolved `ParsedModule`."""

    def __init__(self, text: str, source_name: str = "<text>", *,
                 allow_elided_constants: bool = False) -> None:
        super().__init__(text, source_name)
        self.allow_elided_constants = allow_elided_constants
        self._comps: list[PendingComp] = []
        self._comp_names: dict[str, PendingComp] = {}
        self._depth = 0  # nested instructions and computations written in place

    def parse_module(self) -> ParsedModule:
        lexer = self.lexer
        name, name_offset, header = self.parse_header()
        debug = self.parse_debug_tables()
        if self._at_single_instruction():
            self._parse_single_instruction()
        else:
            while lexer.peek().kind != "eof":
                self._add_computation(self.parse_computation())
        if not self._comps:
            raise self.error("expected a computation, got end of input", lexer.peek().start)
        return ParsedModule(name, name_offset, header, debug, self._comps)

    def _add_computation(self, comp: PendingComp) -> None:
        if comp.name in self._comp_names:
            first = self.lexer.line_col(self._comp_names[comp.name].offset)[0]
            raise self.error(f"duplicate computation name '{comp.name}' (first defined on line "
                             f"{first})", comp.offset)
        self._comp_names[comp.name] = comp
        self._comps.append(comp)

    def _fresh_comp_name(self, base: str) -> str:
        name, k = base, 0
        while name in self._comp_names:
            k += 1
            name = f"{base}.{k}"
        return name

    # ----- single-instruction text ---------------------------------------------------------

    def _at_single_instruction(self) -> bool:
        """Text that is one instruction: `name = ...`, `ROOT name = ...`, or one that starts
        with its shape (`f32[4] add(...)`, `(f32[], s32[]) tuple(...)`)."""
        ahead = self.lexer.peek_n(3)
        if not ahead:
            return False
        first = ahead[0]
        if first.kind == "(":
            return True
        if first.kind != "name" or len(ahead) < 2:
            return False
        second = ahead[1]
        if second.kind == "=":
            return True
        if first.text == "ROOT" and second.kind == "name":
            return True
        if second.kind == "(" and lookup(first.text) is not None:
            # `add(f32[4] x, ...)`: an instruction without `name =` (a computation's signature
            # would read `add(x: f32[4], ...)`)
            inner = self.lexer.peek_n(4)[2:]
            return len(inner) == 2 and (inner[0].kind == "(" or inner[1].kind == "[")
        return second.kind == "[" and first.text in DTYPES

    def _parse_single_instruction(self) -> None:
        lexer = self.lexer
        start = lexer.peek()
        comp = PendingComp("entry", start.start, True, single_op=True)
        self.parse_instruction(comp, top_level=True)
        comp.name = self._fresh_comp_name(comp.instrs[-1].instr.name)
        comp.root = comp.instrs[-1]
        tok = lexer.peek()
        if tok.kind != "eof":
            raise self.error(f"expected end of input after the single instruction "
                             f"{comp.root.instr.name} (text that is not a module holds one "
                             f"instruction), got {tok.describe()}", tok.start)
        comp.end_offset = tok.start
        self._add_computation(comp)

    # ----- computations -------------------------------------------------------------------

    def parse_computation(self) -> PendingComp:
        lexer = self.lexer
        tok = self.parse_name("a computation name")
        is_entry = False
        if tok.text == "ENTRY" and lexer.peek().kind == "name":
            is_entry = True
            tok = lexer.next()
        elif tok.text == "ENTRY" and lexer.peek().kind == "{":
            is_entry = True  # `ENTRY { ... }`: XLA tests' unnamed entry
            tok.text = "entry"
        comp = PendingComp(tok.text, tok.start, is_entry)
        if lexer.peek().kind == "(":
            comp.signature = self._parse_signature(comp.name)
        self._parse_body(comp, trailing_attrs=True)
        return comp

    def _parse_body(self, comp: PendingComp, *, trailing_attrs: bool = False) -> None:
        lexer = self.lexer
        self.parse_punct("{", f"to open the body of computation {comp.name}")
        prev_end = -1
        while True:
            tok = lexer.peek()
            if tok.kind == "}":
                break
            if tok.kind != "name":
                raise self.error(f"expected an instruction or '}}' to close computation "
                                 f"{comp.name}, got {tok.describe()}", tok.start)
            between = lexer.text[prev_end:tok.start]
            if prev_end >= 0 and "\n" not in between and "\r" not in between:
                raise self.error(f"expected ',' or a new line after instruction "
                                 f"{comp.instrs[-1].instr.name}, got {tok.describe()}", tok.start)
            self.parse_instruction(comp)
            prev_end = lexer.pos
        comp.end_offset = lexer.next().start
        if not comp.instrs:
            raise self.error(f"computation {comp.name} has no instructions", comp.end_offset)
        # `}, execution_thread="..."` after a computation: accepted and dropped.
        while (trailing_attrs and lexer.peek().kind == "," and len(ahead := lexer.peek_n(3)) == 3
               and ahead[1].kind == "name" and ahead[2].kind == "="):
            lexer.next()
            self.parse_name("a computation attribute name")
            self.parse_punct("=", "after a computation attribute name")
            lexer.raw_value()

    def _parse_signature(self, comp_name: str) -> tuple[list[tuple[str, Shape, int]], Shape, int]:
        """`(p0: f32[4], p1: (s32[], f32[])) -> f32[4]`: the parameters and result as written
        (build.py checks them against the parameters and the root)."""
        self.parse_punct("(", "to open a computation signature")
        params: list[tuple[str, Shape, int]] = []
        if self.parse_optional_punct(")") is None:
            while True:
                tok = self.parse_name(f"a parameter name in the signature of {comp_name}")
                self.parse_punct(":", "after a parameter name in a signature")
                params.append((tok.text, self.parse_shape(), tok.start))
                if self.parse_optional_punct(",") is None:
                    break
            self.parse_punct(")", f"to close the signature of {comp_name}")
        self.expect("->", f"'->' after the parameters of {comp_name}")
        at = self.lexer.peek().start
        return params, self.parse_shape(), at

    def parse_inline_computation(self, attr: str) -> CompRef:
        """A computation body written as an attribute value (`calls={ p = ... }`): added to the
        module under a fresh name derived from the attribute."""
        open_tok = self.lexer.peek()
        self._enter(open_tok.start)
        try:
            comp = PendingComp(self._fresh_comp_name(attr), open_tok.start, False)
            self._comp_names[comp.name] = comp  # reserved now: bodies may nest
            self._parse_body(comp)
        finally:
            self._depth -= 1
        self._comps.append(comp)
        return CompRef(comp.name, open_tok.start)

    def _enter(self, offset: int) -> None:
        self._depth += 1
        if self._depth > limits.MAX_NESTING_DEPTH:
            raise self.error(f"instructions or computations written in place nest more than "
                             f"{limits.MAX_NESTING_DEPTH} deep "
                             "(hlofuse.ir.limits.MAX_NESTING_DEPTH)", offset, limit=True)

    # ----- instructions -------------------------------------------------------------------

    def parse_instruction(self, comp: PendingComp, *, top_level: bool = False) -> None:
        """One instruction of `comp`; `top_level` (single-instruction text) also allows the
        nameless form `f32[4] add(...)`."""
        lexer = self.lexer
        if not top_level:
            head = lexer.match_here(_HEAD)
            if head is not None:
                name, start = head.group(2), head.start(2)
                pending = self._parse_rhs(comp, name.lstrip("%"), start)
                if head.group(1) is not None:
                    self._set_root(comp, pending, start)
                return
        tok = lexer.peek()
        is_root = False
        if tok.kind == "name" and tok.text == "ROOT" and lexer.peek_n(2)[-1].kind == "name":
            is_root = True
            lexer.next()
            tok = lexer.peek()
        ahead = lexer.peek_n(2)
        if top_level and not (tok.kind == "name" and len(ahead) == 2 and ahead[1].kind == "="):
            if tok.kind == "name" and len(ahead) == 2 and ahead[1].kind == "(":
                raise self.error(f"expected '=' in instruction (write 'name = shape "
                                 f"{tok.text}(...)'), got '('", ahead[1].start)
            pending = self._parse_rhs(comp, None, tok.start, top_level=True)
        else:
            tok = self.parse_name("an instruction name")
            eq = lexer.peek()
            if eq.kind != "=":
                raise self.error(f"expected '=' after instruction name '{tok.text}', got "
                                 f"{eq.describe()}", eq.start)
            lexer.next()
            pending = self._parse_rhs(comp, tok.text, tok.start, top_level=top_level)
        if is_root:
            self._set_root(comp, pending, tok.start)

    def _set_root(self, comp: PendingComp, pending: PendingInstr, offset: int) -> None:
        if comp.root is not None:
            raise self.error(f"computation {comp.name} has a second ROOT "
                             f"(the first is {comp.root.instr.name})", offset)
        comp.root = pending

    def _parse_rhs(self, comp: PendingComp, name: str | None, offset: int, *,
                   top_level: bool = False, nested: bool = False) -> PendingInstr:
        """`[shape] opcode(operands), attributes` (no attributes when `nested`), added to `comp`
        under `name` (None: `<opcode>.anon`)."""
        lexer = self.lexer
        shape = self.parse_optional_shape()
        plain = lexer.match_here(_OPCODE_OPEN)  # `opcode(` read at once where written plainly
        if plain is not None:
            op_tok = Token("name", plain.group(1).lstrip("%"), plain.start(1), plain.end(1))
        else:
            op_tok = lexer.peek()
            if op_tok.kind != "name":
                what = "an opcode" if shape is not None else "a shape or an opcode"
                raise self.error(f"expected {what} for instruction '{name or '?'}', got "
                                 f"{op_tok.describe()}", op_tok.start)
            lexer.next()
        opcode, wrapped = self._opcode(op_tok)
        if name is None:
            name = self._fresh_instr_name(comp, f"{(wrapped or opcode).value}.anon")
        if plain is None:
            self.parse_punct("(", f"to open the operand list of {op_tok.text}")
        literal: Literal | None = None
        number: int | None = None
        operands: list[Ref] = []
        if opcode is Opcode.PARAMETER or opcode is Opcode.CONSTANT:
            if shape is None:
                raise self.error(f"{op_tok.text} '{name}' needs a shape, e.g. "
                                 f"'{name} = f32[4] {op_tok.text}(...)'", op_tok.start)
            if opcode is Opcode.PARAMETER:
                num_tok = lexer.peek()
                number = self.parse_int("a parameter number")
                if number < 0:
                    raise self.error("parameter number must be >= 0", num_tok.start)
            else:
                literal = parse_literal(lexer, shape, allow_elided=self.allow_elided_constants,
                                        name=name)
            self.parse_punct(")", f"to close {op_tok.text}(...)")
        else:
            operands = self._parse_operands(comp, op_tok.text, top_level)
        attrs: dict[str, Any] = {}
        metadata, control = Metadata(), list[Ref]()
        if not nested:
            attrs, metadata, control = self._parse_attributes(op_tok.text, wrapped or opcode)
        instr = Instruction(opcode, shape, name=name, attrs=attrs,  # type: ignore[arg-type]
                            literal=literal, parameter_number=number, metadata=metadata)
        pending = PendingInstr(instr, offset, op_tok.start, operands, control, shape is not None,
                               wrapped)
        if name in comp.by_name:
            first = lexer.line_col(comp.by_name[name].offset)[0]
            raise self.error(f"duplicate instruction name '{name}' in computation {comp.name} "
                             f"(first defined on line {first})", offset)
        comp.by_name[name] = pending
        comp.instrs.append(pending)
        return pending

    def _opcode(self, tok: Token) -> tuple[Opcode, Opcode | None]:
        """The opcode of `tok`, and the wrapped opcode when it is `X-start/-update/-done`
        sugar for an async op wrapping X."""
        opcode = lookup(tok.text)
        if opcode is not None:
            return opcode, None
        for suffix, async_op in _ASYNC_SUFFIXES.items():
            if tok.text.endswith(suffix):
                base = lookup(tok.text[: -len(suffix)])
                if base is not None:
                    return async_op, base
        raise self.error(f"unknown opcode '{tok.text}'", tok.start)

    @staticmethod
    def _fresh_instr_name(comp: PendingComp, base: str) -> str:
        name, k = base, 0
        while name in comp.by_name:
            k += 1
            name = f"{base}.{k}"
        return name

    def _parse_operands(self, comp: PendingComp, op_text: str, top_level: bool) -> list[Ref]:
        lexer = self.lexer
        refs: list[Ref] = []
        if self.parse_optional_punct(")") is not None:
            return refs
        plain = lexer.match_here(_OPERAND_LIST)
        if plain is not None:
            for m in _OPERAND_NAME.finditer(lexer.text, plain.start(), plain.end() - 1):
                refs.append(Ref(m.group().lstrip("%"), m.start()))
            return refs
        while True:
            shape_offset = lexer.peek().start
            shape = self.parse_optional_shape()
            tok = lexer.peek()
            if tok.kind == "name" and lexer.peek_n(2)[-1].kind == "(":
                refs.append(self._parse_nested(comp, shape_offset))
            elif tok.kind == "name":
                lexer.next()
                refs.append(Ref(tok.text, tok.start, shape, shape_offset))
            elif shape is not None and top_level and tok.kind in (",", ")"):
                refs.append(Ref(None, shape_offset, shape, shape_offset))
            else:
                raise self.error(f"expected an operand name in the operand list of {op_text}, "
                                 f"got {tok.describe()}", tok.start)
            if self.parse_optional_punct(",") is None:
                break
        tok = lexer.peek()
        if tok.kind != ")":
            raise self.error(f"expected ')' to close the operand list of {op_text}, got "
                             f"{tok.describe()}", tok.start)
        lexer.next()
        return refs

    def _parse_nested(self, comp: PendingComp, shape_offset: int) -> Ref:
        """An instruction written as an operand: parsed (from its shape, re-read) and added to
        `comp` before its user; the operand refers to it by its generated name."""
        self.lexer.pos = shape_offset  # re-read the shape as part of the instruction
        self.lexer._peeked = None
        self._enter(shape_offset)
        try:
            pending = self._parse_rhs(comp, None, shape_offset, nested=True)
        finally:
            self._depth -= 1
        return Ref(pending.instr.name, shape_offset)

    def _parse_attributes(self, op_text: str,
                          opcode: Opcode) -> tuple[dict[str, Any], Metadata, list[Ref]]:
        attrs: dict[str, Any] = {}
        metadata = Metadata()
        control: list[Ref] = []
        seen: set[str] = set()
        lexer = self.lexer
        while True:
            # `, key =` read at once where it is written plainly (`_ATTRIBUTE_KEY`)
            plain = lexer.match_here(_ATTRIBUTE_KEY)
            if plain is not None:
                key, key_at, has_eq = plain.group(1), plain.start(1), True
            elif self.parse_optional_punct(",") is not None:
                tok = self.parse_name("an attribute name after ','")
                key, key_at, has_eq = tok.text, tok.start, False
            else:
                break
            if key in seen:
                raise self.error(f"attribute '{key}' given twice", key_at)
            seen.add(key)
            if key == "metadata":
                if not has_eq:
                    self.parse_punct("=", "after attribute name metadata")
                metadata = self.parse_metadata()
                continue
            if key == "control-predecessors":
                if not has_eq:
                    self.parse_punct("=", "after attribute name control-predecessors")
                control = self._parse_name_list("control-predecessors")
                continue
            kind = attr_kind(opcode.value, key)
            if kind is None:
                raise self.error(f"unknown attribute '{key}'", key_at)
            if (kind in (AttrKind.COMPUTATION, AttrKind.COMPUTATIONS)
                    and key not in CALLED_COMPUTATION_ATTRS.get(opcode, ())):
                raise self.error(f'unexpected attribute "{key}" for {op_text}: '
                                 f"{opcode.value} calls no computation through it", key_at)
            if not has_eq:
                self.parse_punct("=", f"after attribute name {key}")
            value_at = lexer.skip_space() if lexer._peeked is None else lexer._peeked.start
            attrs[key] = self.parse_attr_value(key, kind)
            problem = check_attribute(opcode, key, attrs[key])
            if problem:
                raise self.error(problem, key_at if problem.startswith("unexpected")
                                 else value_at)
        return attrs, metadata, control

    def _parse_name_list(self, what: str) -> list[Ref]:
        return [Ref(t.text, t.start) for t in self.parse_braced_names(what, "an instruction")]


def parse(text: str, *, source_name: str = "<text>", verify: bool = True,
          allow_elided_constants: bool = False) -> Module:
    """Parse HLO text (long or short form, or a single instruction) into a `Module`.

    Raises `HloParseError` for malformed text (with line:column) and, when `verify` is true,
    `HloVerifyError` from `hlofuse.ir.verifier.verify` for semantically invalid modules.
    A constant whose value a dump elided (`constant({...})`) is an error, unless
    `allow_elided_constants` (then it reads as zeros: fine for structural tests, not for
    numerics).
    """
    from hlofuse.text.build import build_module

    parser = HloParser(text, source_name, allow_elided_constants=allow_elided_constants)
    # Parsing allocates many linked objects and no garbage: the cyclic GC would only rescan
    # them (it doubled the parse time of a 5000-instruction module).
    with gcpause.paused():
        parsed = parser.parse_module()
        module = build_module(parser, parsed)
    if verify:
        from hlofuse.ir.verifier import verify as run_verifier

        run_verifier(module)
    return module


def parse_file(path: str | Path, *, verify: bool = True,
               allow_elided_constants: bool = False) -> Module:
    """Parse the HLO text in `path`; errors name the file."""
    text = Path(path).read_text()
    return parse(text, source_name=str(path), verify=verify,
                 allow_elided_constants=allow_elided_constants)
