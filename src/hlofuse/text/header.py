"""What comes before the computations of a module: the `HloModule` line and JAX's debug tables.

    header      := `HloModule` name [`:`] (`,` key `=` raw)*
    debug-table := (`FileNames` | `FunctionNames`) (int string)*
                 | (`FileLocations` | `StackFrames`) (int `{` (key `=` int)* `}`)*

Header attributes are kept verbatim (printed back as written), but the two whose grammar XLA's
parser checks are checked here too, each an `HloParseError` at the offending character:

    input_output_alias={ {0}: (0, {0}, must-alias), {1, 1}: (0, {1}) }
                         output index : (parameter number, parameter index[, kind])
    buffer_donor={ (0, {0}), (0, {1}) }          (parameter number, parameter index)

where an index is `{` int (`,` int)* `}` or `{}` and kind is `may-alias` or `must-alias`.
Debug tables: ids are unique per table, rows name only their table's fields, required fields
(`file_name_id function_name_id line` for FileLocations, `file_location_id` for StackFrames)
are present.
"""

from __future__ import annotations

import re
from typing import Any

from hlofuse.ir.module import DebugInfo, FileLocation, StackFrame
from hlofuse.text.attrs import AttrParser
from hlofuse.text.lexer import Lexer

_INT_AHEAD = re.compile(r"\s*-?\d")
_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_FILE_LOCATION_FIELDS = ("file_name_id", "function_name_id", "line", "end_line", "column",
                         "end_column")
_STACK_FRAME_FIELDS = ("file_location_id", "parent_frame_id")
_ALIAS_KINDS = ("may-alias", "must-alias")


class HeaderParser(AttrParser):
    """The module header and the debug tables (the part of `HloParser` before computations)."""

    def parse_header(self) -> tuple[str | None, int, dict[str, str]]:
        """`HloModule name, k=v, ...` if present: (name, its offset, attributes)."""
        lexer = self.lexer
        tok = lexer.peek()
        if not (tok.kind == "name" and tok.text == "HloModule"):
            return None, 0, {}
        lexer.next()
        name_tok = self.parse_name("a module name after 'HloModule'")
        self.parse_optional_punct(":")  # the old `HloModule name:` spelling
        header: dict[str, str] = {}
        while self.parse_optional_punct(",") is not None:
            key = self.parse_name("a module attribute name")
            self.parse_punct("=", f"after module attribute {key.text}")
            if key.text in header:
                raise self.error(f"module attribute '{key.text}' given twice", key.start)
            value, start = lexer.raw_value()
            if not value:
                raise self.error(f"expected a value for module attribute {key.text}", start)
            if key.text == "input_output_alias":
                _AliasReader(lexer, value, start).aliases()
            elif key.text == "buffer_donor":
                _AliasReader(lexer, value, start).donors()
            header[key.text] = value
        return name_tok.text, name_tok.start, header

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


class _AliasReader:
    """Checks the grammar of `input_output_alias` / `buffer_donor` values (module docstring);
    offsets in errors are into the whole text."""

    _TOKEN = re.compile(r"\s*(-?\d+|[{}():,]|[A-Za-z][\w-]*|\S)")

    def __init__(self, lexer: Lexer, text: str, start: int) -> None:
        self.lexer = lexer
        self.tokens = [(m.group(1), start + m.start(1)) for m in self._TOKEN.finditer(text)]
        self.i = 0
        self.end = start + len(text)

    def _peek(self) -> str:
        return self.tokens[self.i][0] if self.i < len(self.tokens) else ""

    def _expect(self, want: str, what: str) -> None:
        if self._peek() != want:
            off = self.tokens[self.i][1] if self.i < len(self.tokens) else self.end
            got = f"'{self._peek()}'" if self._peek() else "the end of the value"
            raise self.lexer.error(f"expected '{want}' {what}, got {got}", off)
        self.i += 1

    def _int(self, what: str) -> None:
        tok = self._peek()
        if not re.fullmatch(r"-?\d+", tok):
            off = self.tokens[self.i][1] if self.i < len(self.tokens) else self.end
            raise self.lexer.error(f"expected an integer for {what}, got "
                                   f"'{tok or 'the end of the value'}'", off)
        self.i += 1

    def _index(self, what: str) -> None:
        self._expect("{", f"at the start of {what} (a shape index)")
        if self._peek() != "}":
            self._int(what)
            while self._peek() == ",":
                self.i += 1
                self._int(what)
        self._expect("}", f"at the end of {what} (a shape index)")

    def _parameter(self, kinds: bool) -> None:
        self._expect("(", "to open (parameter number, parameter index)")
        self._int("a parameter number")
        self._expect(",", "after a parameter number")
        self._index("a parameter index")
        if kinds and self._peek() == ",":
            self.i += 1
            if self._peek() not in _ALIAS_KINDS:
                off = self.tokens[self.i][1] if self.i < len(self.tokens) else self.end
                raise self.lexer.error(f"expected an alias kind ({' or '.join(_ALIAS_KINDS)}), "
                                       f"got '{self._peek()}'", off)
            self.i += 1
        self._expect(")", "to close (parameter number, parameter index)")

    def _list(self, item: Any) -> None:
        self._expect("{", "to open the list")
        if self._peek() != "}":
            item()
            while self._peek() == ",":
                self.i += 1
                item()
        self._expect("}", "at the end of the list")
        if self.i != len(self.tokens):
            raise self.lexer.error(f"unexpected '{self._peek()}' after the list",
                                   self.tokens[self.i][1])

    def aliases(self) -> None:
        def alias() -> None:
            self._index("an output index")
            self._expect(":", "after an output index")
            self._parameter(kinds=True)
        self._list(alias)

    def donors(self) -> None:
        self._list(lambda: self._parameter(kinds=False))
