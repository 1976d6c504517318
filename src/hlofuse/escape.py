"""The one escaping function per output target. Input text (names, metadata, attributes, file
paths from an HLO file) is hostile: no byte of it reaches generated C, an HTML page or a terminal
except through the function made for that target.

    c_comment(text)   -> the body of a C block comment: allowlisted ASCII, the rest %XX-encoded
    html_json(value)  -> JSON that is safe inside <script>: no `<`, `>`, `&`, U+2028/9, non-ASCII
    terminal(text)    -> text without control characters (C0, DEL, C1, bidi overrides): `\\xNN`

Conditions enforced:
- `c_comment`'s output contains only characters of `C_COMMENT_SAFE`; `%` is encoded too, so the
  encoding is reversible (`urllib.parse.unquote`) and unambiguous. Excluded on purpose: `*` and
  `/` next to each other could close or open a comment, so `*` is encoded; `\\` splices lines
  (translation phase 2, before comments are recognised); `?` starts trigraphs (`??/` is a
  backslash under -std=c11); newlines and every other control character, and all non-ASCII.
- `html_json` is `json.dumps` with `ensure_ascii` (U+2028/U+2029 and every non-ASCII character
  become `\\uXXXX`) and `<`, `>`, `&` as `\\u003c`, `\\u003e`, `\\u0026`, so neither `</script>`
  nor `<!--` can appear in the page, and the result is still valid JSON for any string.
- `html_json` also maps floats that JSON cannot spell (nan, inf) to the strings "NaN",
  "Infinity" and "-Infinity" (`JSON.parse` rejects bare NaN), and other non-JSON values to
  their `str()`.
- `terminal` keeps printable text (including non-ASCII letters) and escapes what a terminal
  would interpret (`terminal_unsafe`): C0 controls but tab and newline, DEL, C1 controls
  (U+0080..U+009F: 0x9B is CSI, an escape sequence on its own), the bidirectional overrides
  and isolates, the line and paragraph separators, and lone surrogates (which cannot even be
  encoded for output).
"""

from __future__ import annotations

import json
import re
import string
from typing import Any

C_COMMENT_SAFE = frozenset(string.ascii_letters + string.digits + " _.,:;=+-()[]{}<>#@!&|^~'\"/$")

# Characters a terminal interprets, beyond C0/DEL/C1: bidirectional overrides and isolates
# (they reorder what is displayed), and the line/paragraph separators.
_TERMINAL_EXTRA = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
)


def c_comment(text: str) -> str:
    """`text` as the inert body of a C block comment (one line; see the module docstring)."""
    out: list[str] = []
    for ch in text:
        if ch in C_COMMENT_SAFE:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    return "".join(out)


class _Encoder(json.JSONEncoder):
    def iterencode(self, o: Any, _one_shot: bool = False) -> Any:
        return super().iterencode(_finite(o), _one_shot)

    def default(self, o: Any) -> Any:
        return str(o)


def _finite(value: Any) -> Any:
    """`value` with nan/inf floats (at any depth of lists, tuples and dicts) as strings."""
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def html_json(value: Any) -> str:
    """`value` as JSON safe to embed in an HTML `<script>` element (see the module docstring)."""
    text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"),
                      cls=_Encoder)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# What a terminal interprets, as one character class: C0, DEL, C1 and lone surrogates, and
# _TERMINAL_EXTRA (`terminal_unsafe` matches one character, `has_terminal_unsafe` scans a text).
_TERMINAL_RANGES = ((0x00, 0x1F), (0x7F, 0x7F), (0x80, 0x9F), (0xD800, 0xDFFF))
_TERMINAL_UNSAFE = re.compile("[" + "".join(
    f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in _TERMINAL_RANGES) + "".join(
    f"\\U{ord(c):08x}" for c in sorted(_TERMINAL_EXTRA)) + "]")


# the same class without tab, CR and newline (whitespace a reader keeps)
_NOT_SPACE_RANGES = ((0x00, 0x08), (0x0B, 0x0C), (0x0E, 0x1F), *_TERMINAL_RANGES[1:])
_TERMINAL_UNSAFE_NOT_SPACE = re.compile("[" + "".join(
    f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in _NOT_SPACE_RANGES) + "".join(
    f"\\U{ord(c):08x}" for c in sorted(_TERMINAL_EXTRA)) + "]")


def first_terminal_unsafe(text: str, start: int, end: int) -> int:
    """The offset of the first character in `text[start:end]` a terminal would interpret,
    tab, CR and newline excepted (-1 if none): one regex scan."""
    m = _TERMINAL_UNSAFE_NOT_SPACE.search(text, start, end)
    return -1 if m is None else m.start()


def terminal_unsafe(ch: str) -> bool:
    """Whether a terminal would interpret the character `ch` (tab and newline included: the
    callers decide whether to keep those)."""
    return _TERMINAL_UNSAFE.fullmatch(ch) is not None


def has_terminal_unsafe(text: str) -> bool:
    """Whether `text` holds a character `terminal_unsafe` is true of (one regex scan: printing
    a module asks this of every metadata string)."""
    return _TERMINAL_UNSAFE.search(text) is not None


def terminal(text: str) -> str:
    """`text` with every character a terminal would interpret escaped as `\\xNN` / `\\uXXXX`
    (tab and newline are kept: callers print multi-line messages)."""
    out: list[str] = []
    for ch in text:
        if ch in "\n\t" or not terminal_unsafe(ch):
            out.append(ch)
        elif ord(ch) < 0x100:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}")
    return "".join(out)
