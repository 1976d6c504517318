"""The HLO text parser: XLA's long dump form and the short form of XLA's tests, into a `Module`.

A hand-written recursive-descent parser over `lexer.Lexer` (xDSL style: `parse_optional_x` /
`parse_x` pairs, character spans, `expect(...)` with a message saying what was expected).

    module      := [`HloModule` name (`,` key `=` raw)*] debug-table* computation+
    debug-table := (`FileNames` | `FunctionNames`) (int string)*
                 | (`FileLocations` | `StackFrames`) (int `{` (key `=` int)* `}`)*
    computation := [`ENTRY`] name [`(` params `)` `->` shape] `{` instruction* `}`
    instruction := [`ROOT`] name `=` [shape] opcode `(` operands `)` (`,` attribute)*
    operands    := [[shape] name (`,` [shape] name)*]     |  int (parameter)  |  literal (constant)
    attribute   := name `=` value   (by `ir.attributes.ATTRIBUTES`; plus `metadata`,
                                     `control-predecessors`)

Names may carry XLA's `%` prefix anywhere. Operands and computations may be used before they are
defined: names are resolved once everything is parsed (see `build.py`).

Conditions enforced here, each an `HloParseError` at the offending token's line:column: the
grammar above; known opcodes (`ir.opcodes.lookup`) and attribute names; no attribute twice; one
instruction per line; a shape on `parameter` and `constant`; no duplicate instruction name within
a computation, no duplicate computation name, at most one ENTRY and one ROOT per computation.
"""

from __future__ import annotations

import gc
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hlofuse.ir.attributes import ATTRIBUTES
from hlofuse.ir.instruction import Instruction, Metadata
from hlofuse.ir.literal import Literal
from hlofuse.ir.module import DebugInfo, FileLocation, Module, StackFrame
from hlofuse.ir.opcodes import Opcode, lookup
from hlofuse.ir.shape import Shape
from hlofuse.text.attrs import AttrParser
from hlofuse.text.literals import parse_literal

_INT_AHEAD = re.compile(r"\s*-?\d")
_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_FILE_LOCATION_FIELDS = ("file_name_id", "function_name_id", "line", "end_line", "column",
                         "end_column")
_STACK_FRAME_FIELDS = ("file_location_id", "parent_frame_id")


@dataclass
class Ref:
    """A use of a name (operand or control predecessor), resolved after parsing."""

    name: str
    offset: int
    shape: Shape | None = None  # the operand shape written in long form, if any
    shape_offset: int = 0


@dataclass
class PendingInstr:
    instr: Instruction
    offset: int  # of the name
    opcode_offset: int
    operands: list[Ref]
    control: list[Ref]
    shape_given: bool


@dataclass
class PendingComp:
    name: str
    offset: int
    is_entry: bool
    instrs: list[PendingInstr] = field(default_factory=list)
    by_name: dict[str, PendingInstr] = field(default_factory=dict)
    root: PendingInstr | None = None
    end_offset: int = 0


@dataclass
class ParsedModule:
    """Everything the grammar gives, before names are resolved."""

    name: str | None
    name_offset: int
    header_attrs: dict[str, str]
    debug_info: DebugInfo
    computations: list[PendingComp]


class HloParser(AttrParser):
    """Parses one HLO text. `parse_module()` returns the unresolved `ParsedModule`."""

    def __init__(self, text: str, source_name: str = "<text>", *,
                 allow_elided_constants: bool = False) -> None:
        super().__init__(text, source_name)
        self.allow_elided_constants = allow_elided_constants

    def parse_module(self) -> ParsedModule:
        lexer = self.lexer
        name: str | None = None
        name_offset = 0
        header: dict[str, str] = {}
        tok = lexer.peek()
        if tok.kind == "name" and tok.text == "HloModule":
            lexer.next()
            name_tok = self.parse_name("a module name after 'HloModule'")
            name, name_offset = name_tok.text, name_tok.start
            while self.parse_optional_punct(",") is not None:
                key = self.parse_name("a module attribute name")
                self.parse_punct("=", f"after module attribute {key.text}")
                if key.text in header:
                    raise self.error(f"module attribute '{key.text}' given twice", key.start)
                value, start = lexer.raw_value()
                if not value:
                    raise self.error(f"expected a value for module attribute {key.text}", start)
                header[key.text] = value
        debug = self.parse_debug_tables()
        comps: list[PendingComp] = []
        seen: dict[str, PendingComp] = {}
        while lexer.peek().kind != "eof":
            comp = self.parse_computation()
            if comp.name in seen:
                raise self.error(f"duplicate computation name '{comp.name}'", comp.offset)
            seen[comp.name] = comp
            comps.append(comp)
        if not comps:
            raise self.error("expected a computation, got end of input", lexer.peek().start)
        return ParsedModule(name, name_offset, header, debug, comps)

    # ----- debug tables -------------------------------------------------------------------

    def _at_table(self) -> bool:
        tok = self.lexer.peek()
        return (tok.kind == "name" and tok.text in _TABLES
                and _INT_AHEAD.match(self.lexer.text, tok.end) is not None)

    def parse_debug_tables(self) -> DebugInfo:
        debug = DebugInfo()
        lexer = self.lexer
        while self._at_table():
            table = lexer.next().text
            while lexer.peek().kind == "num":
                id_tok = lexer.peek()
                key = self.parse_int(f"an id in table {table}")
                target: dict[int, Any]
                value: Any
                if table in ("FileNames", "FunctionNames"):
                    value = self.parse_string(f"a quoted name in table {table}")
                    target = debug.file_names if table == "FileNames" else debug.function_names
                else:
                    fields = self._parse_int_record(table)
                    if table == "FileLocations":
                        value = self._record(FileLocation, fields, _FILE_LOCATION_FIELDS, 3,
                                             table, id_tok.start)
                        target = debug.file_locations
                    else:
                        value = self._record(StackFrame, fields, _STACK_FRAME_FIELDS, 1, table,
                                             id_tok.start)
                        target = debug.stack_frames
                if key in target:
                    raise self.error(f"id {key} given twice in table {table}", id_tok.start)
                target[key] = value
        return debug

    def _parse_int_record(self, table: str) -> dict[str, tuple[int, int]]:
        self.parse_punct("{", f"to open a row of table {table}")
        fields: dict[str, tuple[int, int]] = {}
        while self.parse_optional_punct("}") is None:
            key = self.parse_name(f"a field name or '}}' in a row of table {table}")
            self.parse_punct("=", f"after field {key.text}")
            fields[key.text] = (self.parse_int(f"an integer for field {key.text}"), key.start)
        return fields

    def _record(self, cls: Any, fields: dict[str, tuple[int, int]], names: tuple[str, ...],
                required: int, table: str, offset: int) -> Any:
        for key, (_, off) in fields.items():
            if key not in names:
                raise self.error(f"unknown field '{key}' in table {table} (expected "
                                 f"{', '.join(names)})", off)
        for key in names[:required]:
            if key not in fields:
                raise self.error(f"row of table {table} has no {key}", offset)
        return cls(**{k: v for k, (v, _) in fields.items()})

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
            self._parse_signature(comp.name)
        self.parse_punct("{", f"to open the body of computation {comp.name}")
        prev_end = -1
        while True:
            tok = lexer.peek()
            if tok.kind == "}":
                break
            if tok.kind != "name":
                raise self.error(f"expected an instruction or '}}' to close computation "
                                 f"{comp.name}, got {tok.describe()}", tok.start)
            if prev_end >= 0 and "\n" not in lexer.text[prev_end:tok.start]:
                raise self.error(f"expected ',' or a new line after instruction "
                                 f"{comp.instrs[-1].instr.name}, got {tok.describe()}", tok.start)
            self.parse_instruction(comp)
            prev_end = lexer.pos
        comp.end_offset = lexer.next().start
        if not comp.instrs:
            raise self.error(f"computation {comp.name} has no instructions", comp.end_offset)
        # `}, execution_thread="..."` after a computation: accepted and dropped.
        while self.parse_optional_punct(",") is not None:
            key = self.parse_name("a computation attribute name")
            self.parse_punct("=", f"after computation attribute {key.text}")
            lexer.raw_value()
        return comp

    def _parse_signature(self, comp_name: str) -> None:
        """`(p0: f32[4], p1: (s32[], f32[])) -> f32[4]`: read and dropped (the parameters say
        the same)."""
        self.parse_punct("(", "to open a computation signature")
        if self.parse_optional_punct(")") is None:
            while True:
                self.parse_name(f"a parameter name in the signature of {comp_name}")
                self.parse_punct(":", "after a parameter name in a signature")
                self.parse_shape()
                if self.parse_optional_punct(",") is None:
                    break
            self.parse_punct(")", f"to close the signature of {comp_name}")
        self.expect("->", f"'->' after the parameters of {comp_name}")
        self.parse_shape()

    # ----- instructions -------------------------------------------------------------------

    def parse_instruction(self, comp: PendingComp) -> None:
        lexer = self.lexer
        tok = lexer.next()
        is_root = False
        if tok.text == "ROOT" and lexer.peek().kind == "name":
            is_root = True
            tok = lexer.next()
        name = tok.text
        eq = lexer.peek()
        if eq.kind != "=":
            raise self.error(f"expected '=' after instruction name '{name}', got "
                             f"{eq.describe()}", eq.start)
        lexer.next()
        shape = self.parse_optional_shape()
        op_tok = lexer.peek()
        if op_tok.kind != "name":
            what = "an opcode" if shape is not None else "a shape or an opcode"
            raise self.error(f"expected {what} for instruction '{name}', got "
                             f"{op_tok.describe()}", op_tok.start)
        lexer.next()
        opcode = lookup(op_tok.text)
        if opcode is None:
            raise self.error(f"unknown opcode '{op_tok.text}'", op_tok.start)
        self.parse_punct("(", f"to open the operand list of {op_tok.text}")
        literal: Literal | None = None
        number: int | None = None
        operands: list[Ref] = []
        if opcode is Opcode.PARAMETER or opcode is Opcode.CONSTANT:
            if shape is None:
                raise self.error(f"{op_tok.text} '{name}' needs a shape, e.g. "
                                 f"'{name} = f32[4] {op_tok.text}(...)'", op_tok.start)
            if opcode is Opcode.PARAMETER:
                number = self.parse_int("a parameter number")
                if number < 0:
                    raise self.error("a parameter number must be >= 0", lexer.pos)
            else:
                literal = parse_literal(lexer, shape, allow_elided=self.allow_elided_constants,
                                        name=name)
            self.parse_punct(")", f"to close {op_tok.text}(...)")
        else:
            operands = self._parse_operands(op_tok.text)
        attrs, metadata, control = self._parse_attributes()
        instr = Instruction(opcode, shape, name=name, attrs=attrs,  # type: ignore[arg-type]
                            literal=literal, parameter_number=number, metadata=metadata)
        pending = PendingInstr(instr, tok.start, op_tok.start, operands, control,
                               shape is not None)
        if name in comp.by_name:
            first = lexer.line_col(comp.by_name[name].offset)[0]
            raise self.error(f"duplicate instruction name '{name}' in computation {comp.name} "
                             f"(first defined on line {first})", tok.start)
        comp.by_name[name] = pending
        comp.instrs.append(pending)
        if is_root:
            if comp.root is not None:
                raise self.error(f"computation {comp.name} has a second ROOT "
                                 f"(the first is {comp.root.instr.name})", tok.start)
            comp.root = pending

    def _parse_operands(self, op_text: str) -> list[Ref]:
        lexer = self.lexer
        refs: list[Ref] = []
        if self.parse_optional_punct(")") is not None:
            return refs
        while True:
            shape_offset = lexer.peek().start
            shape = self.parse_optional_shape()
            tok = lexer.peek()
            if tok.kind != "name":
                raise self.error(f"expected an operand name in the operand list of {op_text}, "
                                 f"got {tok.describe()}", tok.start)
            lexer.next()
            refs.append(Ref(tok.text, tok.start, shape, shape_offset))
            if self.parse_optional_punct(",") is None:
                break
        tok = lexer.peek()
        if tok.kind != ")":
            raise self.error(f"expected ')' to close the operand list of {op_text}, got "
                             f"{tok.describe()}", tok.start)
        lexer.next()
        return refs

    def _parse_attributes(self) -> tuple[dict[str, Any], Metadata, list[Ref]]:
        attrs: dict[str, Any] = {}
        metadata = Metadata()
        control: list[Ref] = []
        seen: set[str] = set()
        while self.parse_optional_punct(",") is not None:
            key = self.parse_name("an attribute name after ','")
            if key.text in seen:
                raise self.error(f"attribute '{key.text}' given twice", key.start)
            seen.add(key.text)
            if key.text == "metadata":
                self.parse_punct("=", "after attribute name metadata")
                metadata = self.parse_metadata()
                continue
            if key.text == "control-predecessors":
                self.parse_punct("=", "after attribute name control-predecessors")
                control = self._parse_name_list("control-predecessors")
                continue
            kind = ATTRIBUTES.get(key.text)
            if kind is None:
                raise self.error(f"unknown attribute '{key.text}'", key.start)
            self.parse_punct("=", f"after attribute name {key.text}")
            attrs[key.text] = self.parse_attr_value(key.text, kind)
        return attrs, metadata, control

    def _parse_name_list(self, what: str) -> list[Ref]:
        return [Ref(t.text, t.start) for t in self.parse_braced_names(what, "an instruction")]


def parse(text: str, *, source_name: str = "<text>", verify: bool = True,
          allow_elided_constants: bool = False) -> Module:
    """Parse HLO text (long or short form) into a `Module`.

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
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        parsed = parser.parse_module()
        module = build_module(parser, parsed)
    finally:
        if gc_was_enabled:
            gc.enable()
    if verify:
        try:
            from hlofuse.ir.verifier import verify as run_verifier
        except ImportError:  # the verifier is optional until it lands
            return module
        run_verifier(module)
    return module


def parse_file(path: str | Path, *, verify: bool = True,
               allow_elided_constants: bool = False) -> Module:
    """Parse the HLO text in `path`; errors name the file."""
    text = Path(path).read_text()
    return parse(text, source_name=str(path), verify=verify,
                 allow_elided_constants=allow_elided_constants)
