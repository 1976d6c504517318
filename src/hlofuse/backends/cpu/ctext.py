"""The only ways input-derived text and integers reach a generated C file.

    comment("mul.3: ", op_name)          -> "/* mul.3: jit%28f%29%2Fmul */"   (escape.c_comment)
    check_integers(source, where)        -> IntegerRangeError if a literal does not fit its type

An HLO file is hostile input (docs/security.md). Its text (instruction, computation and module
names, metadata, layouts with tiling, attributes) reaches the C file only inside comments, and
every comment with anything but fixed text is made by `comment`: one line, allowlisted ASCII,
the rest %XX-encoded, so no `*/`, no backslash-newline splice (translation phase 2 runs before
comments are recognised), no `??/` trigraph, no newline and no non-ASCII can come out of it.
A test (tests/security/test_c_injection.py) checks that no f-string in backends/cpu opens a
comment by hand. C identifiers are never made from input text at all: `kernel_ir.naming.fresh`
accepts only bases made by the code (opcode words, fixed prefixes, counters).

Integers: `limits.check_module` bounds every dimension, byte count and integer attribute before
any C is generated, so valid modules never get near a C type's limit; `check_integers` is the
backstop on the finished text. It reads every integer literal of C's grammar (pp-numbers outside
comments and string literals) and raises `IntegerRangeError` naming `where` (a kernel's
instruction, or the driver) for a literal that no integer type can hold: above 2^63 - 1 for a
decimal literal without a `u` suffix, above 2^64 - 1 for any. Truncation into a narrower type
is the compiler's `-Werror=overflow` (build.py).
"""

from __future__ import annotations

import re

from hlofuse.errors import ResourceLimitError
from hlofuse.escape import c_comment

INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1


class IntegerRangeError(ResourceLimitError):
    """An integer printed into generated C does not fit any C integer type (names where)."""


def comment(*parts: object) -> str:
    """`/* ... */` holding the text of `parts` (joined, each part through `str`), inert."""
    return "/* " + c_comment("".join(str(p) for p in parts)) + " */"


# A pp-number: not inside a word or another number, its first character(s), and the
# characters that may follow.
_PP_AT, _PP_HEAD, _PP_TAIL = r"(?<![\w.])", r"\.?\d", r"(?:[eEpP][+-]|[\w.])"
# Comments, string and character literals (skipped), and pp-numbers (checked).
_TOKENS = re.compile(
    r"""/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'"""
    rf"""|{_PP_AT}({_PP_HEAD}{_PP_TAIL}*)""",
    re.DOTALL,
)
_INT_SUFFIX = re.compile(r"[uUlL]*$")
# The fewest characters of an integer literal above a limit: 19 decimal digits (2^63 - 1 has
# 19); "0x" and 17 hex digits (2^64 - 1 has 16); "0" and 22 octal digits (it has 22, the
# first a 1). A pp-number that long, anywhere in the text, makes `check_integers` read it all.
_SHORTEST_OVER = 19
_LONG_NUMBER = re.compile(rf"{_PP_AT}{_PP_HEAD}{_PP_TAIL}{{{_SHORTEST_OVER - 1},}}")


def _integer_value(token: str) -> tuple[int, bool, bool] | None:
    """(value, has a `u` suffix, is decimal) of an integer literal; None for a float."""
    low = token.lower()
    if low.startswith("0x"):
        if "." in low or "p" in low:
            return None
        digits, base = low[2:], 16
    else:
        if "." in low or "e" in low or low.endswith("f"):
            return None
        digits, base = low, (8 if low.startswith("0") and len(low) > 1 else 10)
    suffix = _INT_SUFFIX.search(digits)
    assert suffix is not None
    body = digits[: suffix.start()]
    try:
        value = int(body, base) if body else 0
    except ValueError:
        return None  # not a number C accepts either: the compiler reports it
    return value, "u" in suffix.group(), base == 10


# Every hex digit to "9" and x to "x": an integer literal above a limit has 19 decimal digits
# in a row, or "0x" and 17 hex digits (`_SHORTEST_OVER`), so a text whose image holds neither
# run has none (one pass of str.translate: the pp-number scan below took 13% of the printing
# of brax's ant, 11 MB of kernel C, all of which passes here).
_DIGIT_IMAGE = str.maketrans({c: "9" for c in "0123456789abcdefABCDEF"} | {"X": "x"})


def _may_hold_long_integer(source: str) -> bool:
    image = source.translate(_DIGIT_IMAGE)
    return "9" * _SHORTEST_OVER in image or "x" + "9" * (_SHORTEST_OVER - 2) in image


def check_integers(source: str, where: str) -> None:
    """Raise `IntegerRangeError` if an integer literal in `source` fits no C integer type.
    Only an integer pp-number of `_SHORTEST_OVER` characters or more can: a text without one
    anywhere (comments included; long float literals do not count) is passed at once, and
    shorter tokens are not converted."""
    if not _may_hold_long_integer(source):
        return
    if not any(_integer_value(m.group()) is not None for m in _LONG_NUMBER.finditer(source)):
        return
    for m in _TOKENS.finditer(source):
        token = m.group(1)
        if token is None or len(token) < _SHORTEST_OVER:
            continue
        parsed = _integer_value(token)
        if parsed is None:
            continue
        value, unsigned, decimal = parsed
        limit = INT64_MAX if decimal and not unsigned else UINT64_MAX
        if value > limit:
            raise IntegerRangeError(
                f"{where}: the generated C would hold the integer {value}, which does not fit "
                f"a 64-bit C integer (limit {limit})"
            )
