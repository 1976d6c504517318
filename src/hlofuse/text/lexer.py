"""The lexer for XLA's HLO text: tokens on demand, spans as character offsets, line:col errors.

Tokens are produced lazily (one compiled regex, matched at the current offset), so the parser
can switch to character-level reading where HLO's grammar is not token-shaped: verbatim RAW
attribute values (`backend_config={...}`, `sharding={...}`), `window={size=3x3 pad=0_1x0_1}`,
`padding=0_1x2_2_1` and the header attributes of `HloModule`.

Token kinds:

    name    `add.1`, `%fused_computation`, `get-tuple-element`, `f32`, `ENTRY` (a leading `%`
            is dropped from the text; names may contain `.`, `-`, `_`, `$`)
    num     `12`, `-3`, `1.5e-3`, `-inf`, `nan` is a name (the literal parser accepts it)
    str     `"..."` with C escapes (the token text is the decoded string)
    punct   one of `= , ( ) { } [ ] : *` and `->` (kind is the text itself)
    eof     end of input

Whitespace, `/* ... */` comments (`/*index=5*/`) and `// ...` line comments are skipped.
Conditions enforced: an unterminated string or comment, or a character that starts no token, is
an `HloParseError` at its line and column; an integer read by `parse_int` must fit int64
(`ParseLimitError` otherwise, as XLA's ParseInt64). Error messages quote at most `SHOWN` chars
of any token and of the offending line, so a hostile input cannot make a message huge.
"""

from __future__ import annotations

import re
from typing import TypeVar

from hlofuse.errors import HloParseError, ParseLimitError
from hlofuse.escape import first_terminal_unsafe, has_terminal_unsafe, terminal_unsafe
from hlofuse.ir import limits

T = TypeVar("T")

SHOWN = 60  # characters of a token an error message quotes
_SNIPPET = 160  # characters of the offending line an error message shows

_SKIP = re.compile(r"(?:\s+|/\*.*?\*/|//[^\n\r]*)*", re.S)
# A name token (the parser's one-line fast paths read names with it too).
NAME = r"%?[A-Za-z_$][\w.\-$]*"
_TOKEN = re.compile(
    r"""
    (?:\s+|/\*.*?\*/|//[^\n\r]*)*
    (?:
    (?P<name>""" + NAME + r""")
   |(?P<num>-(?:inf|nan)(?![\w.\-])|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.]))
   |(?P<str>"(?:[^"\\\n]|\\.)*")
   |(?P<arrow>->)
   |(?P<punct>[=,(){}\[\]:*])
   |(?P<eof>\Z)
    )
    """,
    re.X | re.S,
)
_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{1,2}|[0-7]{1,3}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)",
                     re.S)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "?": "?",
                   "a": "\a", "b": "\b", "f": "\f", "v": "\v"}

OPEN_TO_CLOSE = {"{": "}", "(": ")", "[": "]"}
_BRACKET_OR_QUOTE = re.compile(r'["(){}\[\]]')
_STRING_BODY = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_END_WITH_SPACE = re.compile(r"[, \t\r\n]")
_END_AT_COMMA = re.compile(r",")


def shorten(text: str, limit: int = SHOWN) -> str:
    """`text`, cut to `limit` characters with `...` (for quoting input in messages)."""
    return text if len(text) <= limit else text[:limit] + "..."


def int64(text: str) -> int | None:
    """The value of a decimal integer token if it fits int64, else None (without converting
    more digits than any int64 has)."""
    digits = text.lstrip("+-")
    if len(digits) > limits.MAX_INT_DIGITS:
        return None
    value = int(text)
    return value if -(2**63) <= value <= 2**63 - 1 else None


class Token:
    """One token: its kind, text (decoded for strings, without `%` for names) and span."""

    __slots__ = ("end", "kind", "start", "text")

    def __init__(self, kind: str, text: str, start: int, end: int) -> None:
        self.kind = kind
        self.text = text
        self.start = start
        self.end = end

    def describe(self) -> str:
        """How an error message names this token: `','`, `name 'foo'`, `end of input`."""
        if self.kind == "eof":
            return "end of input"
        if self.kind == "str":
            return "string " + encode_string(shorten(self.text))
        return f"'{shorten(self.text)}'"

    def __repr__(self) -> str:
        return f"Token({self.kind}, {self.text!r}, {self.start})"


def decode_string(body: str) -> str:
    """Decode the C escapes of a string token's body (without the quotes): absl's CUnescape
    set, `\\uXXXX` and `\\UXXXXXXXX` included. An escape naming no character is kept as
    written: `\\x` without a hex digit, a `\\u` or `\\U` without all its digits, a surrogate or a
    code point beyond U+10FFFF, an unknown letter."""
    if "\\" not in body:
        return body

    def repl(m: re.Match[str]) -> str:
        esc = m.group(0)[1:]
        if esc[0] == "x" and len(esc) > 1:
            return chr(int(esc[1:], 16))
        if esc[0] in "01234567":
            return chr(int(esc, 8))
        if esc[0] in "uU" and len(esc) > 1:
            code = int(esc[1:], 16)
            if code > 0x10FFFF or 0xD800 <= code < 0xE000:
                return "\\" + esc
            return chr(code)
        return _SIMPLE_ESCAPES.get(esc, "\\" + esc)

    return _ESCAPE.sub(repl, body)


def encode_string(text: str) -> str:
    """The quoted, escaped text of a string (inverse of `decode_string`). Every character a
    terminal would interpret (`escape.terminal_unsafe`) is escaped, so printed HLO is safe to
    show: control characters as `\\n`, `\\t`, `\\r` or `\\xNN`, DEL as `\\x7f`, C1
    controls, bidirectional overrides and separators as `\\uXXXX`."""
    out = text.replace("\\", "\\\\").replace('"', '\\"')
    if has_terminal_unsafe(out):
        out = out.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
        out = "".join(c if not terminal_unsafe(c) else
                      f"\\x{ord(c):02x}" if ord(c) < 0x80 else f"\\u{ord(c):04x}"
                      for c in out)
    return '"' + out + '"'


class Lexer:
    """Tokens of one HLO text, read on demand with one token of lookahead."""

    def __init__(self, text: str, source_name: str = "<text>") -> None:
        self.text = text
        self.source_name = source_name
        self.pos = 0  # offset just after the last consumed token
        self._peeked: Token | None = None

    # ----- positions and errors -----------------------------------------------------------

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based line and column of a character offset."""
        line = self.text.count("\n", 0, offset) + 1
        start = self.text.rfind("\n", 0, offset) + 1
        return line, offset - start + 1

    def line_text(self, offset: int) -> str:
        start = self.text.rfind("\n", 0, offset) + 1
        end = self.text.find("\n", offset)
        if end < 0:
            end = len(self.text)
        return self.text[start:end]

    def error(self, message: str, offset: int, *, limit: bool = False) -> HloParseError:
        """An `HloParseError` at a character offset (returned, for the caller to raise); a
        `ParseLimitError` when `limit` (the input exceeds one of `ir.limits`)."""
        offset = min(max(offset, 0), len(self.text))
        line, col = self.line_col(offset)
        snippet = self.line_text(offset)
        caret = col
        if len(snippet) > _SNIPPET:  # a window around the column
            lo = max(0, col - 1 - _SNIPPET // 2)
            snippet = ("..." if lo else "") + snippet[lo:lo + _SNIPPET] + "..."
            caret = col - lo + (3 if lo else 0)
        cls = ParseLimitError if limit else HloParseError
        err = cls(message, line, col, snippet, self.source_name, caret=caret)
        return err

    # ----- tokens -------------------------------------------------------------------------

    def _skip(self, pos: int) -> int:
        """The offset of the first non-space, non-comment character at or after `pos`."""
        text = self.text
        if pos < len(text) and text[pos] not in " \t\r\n/":
            return pos
        pos = _SKIP.match(text, pos).end()  # type: ignore[union-attr]
        if text.startswith("/*", pos):
            raise self.error("unterminated /* comment", pos)
        return pos

    def skip_space(self) -> int:
        """Skip whitespace and comments (consuming them); return the new offset."""
        self.pos = self._skip(self.pos)
        return self.pos

    def peek(self) -> Token:
        tok = self._peeked
        if tok is None:
            tok = self._peeked = self._lex()
        return tok

    def next(self) -> Token:
        tok = self._peeked
        if tok is None:
            tok = self._lex()
        self._peeked = None
        self.pos = tok.end
        return tok

    def _lex(self) -> Token:
        m = _TOKEN.match(self.text, self.pos)
        if m is None:
            start = self._skip(self.pos)  # raises for an unterminated comment
            if self.text[start] == '"':
                raise self.error("unterminated string", start)
            raise self.error(f"unexpected character {self.text[start]!r}", start)
        kind = m.lastgroup
        assert kind is not None
        start, end = m.span(kind)
        value = m.group(kind)
        if kind == "name":
            if value[0] == "%":
                value = value[1:]
        elif kind == "str":
            value = decode_string(value[1:-1])
        elif kind != "num" and kind != "eof":
            kind = value
        return Token(kind, value, start, end)

    def peek_n(self, n: int) -> list[Token]:
        """The next `n` tokens (fewer at the end of input), without consuming them."""
        pos, peeked = self.pos, self._peeked
        out: list[Token] = []
        try:
            for _ in range(n):
                tok = self.next()
                out.append(tok)
                if tok.kind == "eof":
                    break
        except HloParseError:
            pass  # the caller meets the error when it consumes the token
        finally:
            self.pos, self._peeked = pos, peeked
        return out

    def match_here(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        """Like `match`, but also valid when a token has been peeked (fast paths for
        shapes and metadata); consumes the match on success."""
        tok = self._peeked
        start = tok.start if tok is not None else self._skip(self.pos)
        m = pattern.match(self.text, start)
        if m is not None:
            self._peeked = None
            self.pos = m.end()
        return m

    def take_known(self, known: dict[str, T], close: str) -> T | None:
        """If the text from the next token up to the first `close` (included) is a key of
        `known`, consume it and return its value (a parser's memo of texts it read before:
        a hit skips the regex that would read the same text again)."""
        tok = self._peeked
        start = tok.start if tok is not None else self._skip(self.pos)
        end = self.text.find(close, start) + 1
        value = known.get(self.text[start:end]) if end else None
        if value is not None:
            self._peeked = None
            self.pos = end
        return value

    # ----- character-level reading --------------------------------------------------------

    def match(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        """Match a regex at the next non-space character and consume it on success."""
        assert self._peeked is None or self._peeked.start >= self.pos
        self._peeked = None
        start = self.skip_space()
        m = pattern.match(self.text, start)
        if m is not None:
            self.pos = m.end()
        return m

    def raw_value(self, *, stop_at_space: bool = True) -> tuple[str, int]:
        """Read verbatim text with balanced brackets and strings: up to a `,` (or, when
        `stop_at_space`, whitespace) at depth 0, or an unmatched closing bracket. Returns the
        text and its start offset. Verbatim text is printed back as is, so it may not hold a
        character a terminal interprets (`escape.terminal_unsafe`; tab, CR and newline are
        whitespace): that is an `HloParseError`. The scan jumps from bracket to bracket (a
        large constant's literal is megabytes of numbers between braces); each error is the
        first one in the text."""
        self._peeked = None
        start = self.skip_space()
        text = self.text
        n = len(text)
        stack: list[str] = []
        ends = _END_WITH_SPACE if stop_at_space else _END_AT_COMMA
        i = start
        end = n
        problem: tuple[int, str] | None = None  # (offset, message) of a structural error
        while True:
            m = _BRACKET_OR_QUOTE.search(text, i)
            stop = n if m is None else m.start()
            if not stack:
                e = ends.search(text, i, stop)
                if e is not None:
                    end = e.start()
                    break
            if m is None:
                if stack:
                    problem = (n, f"expected '{stack[-1]}' before end of input")
                end = n
                break
            c = m.group()
            if c == '"':
                q = _STRING_BODY.match(text, stop)
                if q is None:
                    problem, end = (stop, "unterminated string"), n
                    break
                i = q.end()
                continue
            if c in OPEN_TO_CLOSE:
                stack.append(OPEN_TO_CLOSE[c])
            else:
                if not stack:
                    end = stop
                    break
                if stack[-1] != c:
                    problem, end = (stop, f"expected '{stack[-1]}', got '{c}'"), stop
                    break
                stack.pop()
            i = m.end()
        unsafe = first_terminal_unsafe(text, start, end if problem is None else
                                       min(problem[0] + 1, n))
        if unsafe >= 0 and (problem is None or unsafe <= problem[0]):
            raise self._control_error(unsafe)
        if problem is not None:
            raise self.error(problem[1], problem[0])
        self.pos = end
        return text[start:end], start

    def _control_error(self, offset: int) -> HloParseError:
        return self.error(f"unexpected control character U+{ord(self.text[offset]):04X} (text "
                          "read verbatim may not hold control characters; inside a string, "
                          "write an escape such as \\x1b)", offset)


class BaseParser:
    """Token-level helpers in xDSL's style: `parse_optional_x` returns None when the next
    token is not an x; `parse_x` raises an `HloParseError` saying what was expected."""

    def __init__(self, text: str, source_name: str = "<text>") -> None:
        self.lexer = Lexer(text, source_name)

    def error(self, message: str, offset: int, *, limit: bool = False) -> HloParseError:
        return self.lexer.error(message, offset, limit=limit)

    def expect(self, kind: str, what: str) -> Token:
        """Consume a token of `kind` (a punctuation text, `name`, `num` or `str`) or fail with
        "expected <what>, got <token>"."""
        tok = self.lexer.peek()
        if tok.kind != kind:
            raise self.error(f"expected {what}, got {tok.describe()}", tok.start)
        return self.lexer.next()

    def parse_optional_punct(self, punct: str) -> Token | None:
        if self.lexer.peek().kind == punct:
            return self.lexer.next()
        return None

    def parse_punct(self, punct: str, context: str = "") -> Token:
        return self.expect(punct, f"'{punct}'" + (f" {context}" if context else ""))

    def parse_optional_name(self) -> Token | None:
        if self.lexer.peek().kind == "name":
            return self.lexer.next()
        return None

    def parse_name(self, what: str = "a name") -> Token:
        return self.expect("name", what)

    def parse_optional_int(self) -> int | None:
        tok = self.lexer.peek()
        if tok.kind == "num" and _is_int(tok.text):
            value = int64(tok.text)
            if value is None:
                raise self.error(f"integer {shorten(tok.text)} does not fit in int64",
                                 tok.start, limit=True)
            self.lexer.next()
            return value
        return None

    def parse_int(self, what: str = "an integer") -> int:
        value = self.parse_optional_int()
        if value is None:
            tok = self.lexer.peek()
            raise self.error(f"expected {what}, got {tok.describe()}", tok.start)
        return value

    def parse_optional_bool(self) -> bool | None:
        tok = self.lexer.peek()
        if tok.kind == "name" and tok.text in ("true", "false"):
            self.lexer.next()
            return tok.text == "true"
        return None

    def parse_bool(self, what: str = "true or false") -> bool:
        value = self.parse_optional_bool()
        if value is None:
            tok = self.lexer.peek()
            raise self.error(f"expected {what}, got {tok.describe()}", tok.start)
        return value

    def parse_string(self, what: str = "a quoted string") -> str:
        return self.expect("str", what).text

    def parse_int_list(self, what: str) -> tuple[int, ...]:
        """`{1,2,3}` or `{}`."""
        self.parse_punct("{", f"to open {what}")
        values: list[int] = []
        if self.parse_optional_punct("}") is None:
            values.append(self.parse_int(f"an integer in {what}"))
            while self.parse_optional_punct(",") is not None:
                values.append(self.parse_int(f"an integer in {what}"))
            self.parse_punct("}", f"to close {what}")
        return tuple(values)


def _is_int(text: str) -> bool:
    return text.lstrip("+-").isdigit()
