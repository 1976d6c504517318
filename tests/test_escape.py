"""`hlofuse.escape`: the one escaping function per output target, on hostile text."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from hlofuse.escape import (
    C_COMMENT_SAFE,
    c_comment,
    has_terminal_unsafe,
    html_json,
    terminal,
    terminal_unsafe,
)

HOSTILE = [
    "*/ int x; /*",
    "line\\\nsplice",
    "??/ trigraph",
    "</script><script>alert(1)</script>",
    "<!-- comment",
    "a\u2028b\u2029c",
    "\x1b[31mred\x1b[0m",
    "\x9b2J",
    "\u202eevil\u202c",
    "nul\x00byte",
    "é ü 漢字 😀",
    "\ud800 lone surrogate",
    "%41 percent",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_c_comment_is_allowlisted_and_reversible(text: str) -> None:
    body = c_comment(text)
    assert set(body) <= C_COMMENT_SAFE | {"%"}  # `%XX` encodes the rest
    assert "*/" not in body and "/*" not in body and "\\" not in body and "??" not in body
    assert urllib.parse.unquote(body, errors="surrogatepass") == text


@pytest.mark.parametrize("text", HOSTILE)
def test_html_json_has_no_markup_and_round_trips(text: str) -> None:
    value = {"name": text, "list": [text, 1, None, True]}
    out = html_json(value)
    assert not set(out) & set("<>&\u2028\u2029")
    assert all(ord(c) < 128 for c in out)
    assert json.loads(out) == value


def test_html_json_spells_non_finite_floats_and_unknown_values() -> None:
    out = html_json({"nan": float("nan"), "inf": [float("inf"), -float("inf")], "x": 1.5,
                     "obj": frozenset()})
    assert json.loads(out) == {"nan": "NaN", "inf": ["Infinity", "-Infinity"], "x": 1.5,
                               "obj": "frozenset()"}
    assert "NaN," not in out.replace('"NaN"', "")  # never a bare NaN token


@pytest.mark.parametrize("text", HOSTILE)
def test_terminal_leaves_no_interpreted_character(text: str) -> None:
    out = terminal(text)
    assert not any(terminal_unsafe(c) and c not in "\n\t" for c in out)
    out.encode("utf-8")  # printable: lone surrogates are escaped too


def test_terminal_keeps_text_and_escapes_each_class() -> None:
    assert terminal("plain é 漢字\n\tok") == "plain é 漢字\n\tok"
    assert terminal("\x1b[2J") == "\\x1b[2J"
    assert terminal("\x7f\x9b") == "\\x7f\\x9b"
    assert terminal("\u202e\u2028\ud800") == "\\u202e\\u2028\\ud800"
    assert terminal(terminal("\x1b")) == terminal("\x1b")  # idempotent


def test_terminal_unsafe_classes() -> None:
    assert all(terminal_unsafe(c) for c in "\x00\x07\x1b\x7f\x80\x9b\x9f\u061c\u200f\u2066")
    assert not any(terminal_unsafe(c) for c in "aZ09 ~é\u00a0漢")


def test_terminal_unsafe_is_exactly_its_classes_on_every_code_point() -> None:
    """The one character class both tests use: C0, DEL, C1, lone surrogates, the bidi
    controls and separators, and nothing else, checked on all of Unicode."""
    extra = set(map(ord, "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                         "\u2066\u2067\u2068\u2069\u2028\u2029"))
    expected = [o for o in range(0x110000)
                if o < 0x20 or o == 0x7F or 0x80 <= o < 0xA0 or 0xD800 <= o < 0xE000
                or o in extra]
    assert [o for o in range(0x110000) if terminal_unsafe(chr(o))] == expected
    everything = "".join(map(chr, range(0x110000)))
    assert has_terminal_unsafe(everything)
    unsafe = set(expected)
    assert not has_terminal_unsafe("".join(chr(o) for o in range(0x110000)
                                           if o not in unsafe))
    assert not has_terminal_unsafe("")
