"""Malformed HLO text: each case checks the exception type, the 1-based line and column of the
offending token, and a substring of the message (xDSL's tests/test_parser_error.py style)."""

from __future__ import annotations

import contextlib
import random
import textwrap
from pathlib import Path

import pytest

from hlofuse.errors import HloError, HloParseError, HloVerifyError
from hlofuse.text import parse, parse_file

GOOD_HEAD = """\
HloModule m

ENTRY main {
  p0 = f32[4] parameter(0)
  p1 = f32[4] parameter(1)
"""

# (id, text, line, column, message substring). GOOD_HEAD is lines 1-5, so a bad line 6 is
# the first line after it.
CASES: list[tuple[str, str, int, int, str]] = [
    ("missing-equals", GOOD_HEAD + "  a f32[4] add(p0, p1)\n}\n",
     6, 5, "expected '=' after instruction name 'a', got 'f32'"),
    ("unknown-opcode", GOOD_HEAD + "  ROOT a = f32[4] frobnicate(p0, p1)\n}\n",
     6, 19, "unknown opcode 'frobnicate'"),
    ("unknown-attribute", GOOD_HEAD + "  ROOT a = f32[4] add(p0, p1), foo=1\n}\n",
     6, 32, "unknown attribute 'foo'"),
    ("unknown-element-type", GOOD_HEAD + "  ROOT a = f33[4] add(p0, p1)\n}\n",
     6, 12, "unknown element type 'f33'"),
    ("bad-dimension", GOOD_HEAD + "  ROOT a = f32[4,] add(p0, p1)\n}\n",
     6, 18, "expected a dimension size (a non-negative integer), got ']'"),
    ("layout-not-permutation", GOOD_HEAD + "  ROOT a = f32[2,2]{0,0} add(p0, p1)\n}\n",
     6, 20, "layout {0,0} is not a permutation"),
    ("layout-empty-entry", GOOD_HEAD + "  ROOT a = f32[2,2]{1,} add(p0, p1)\n}\n",
     6, 20, "expected dimension numbers in the layout {1,}"),
    ("layout-wrong-rank", GOOD_HEAD + "  ROOT a = f32[2,2]{0} add(p0, p1)\n}\n",
     6, 20, "is not a permutation of the 2 dimension(s)"),
    ("unclosed-computation", GOOD_HEAD + "  ROOT a = f32[4] add(p0, p1)\n",
     7, 1, "expected an instruction or '}' to close computation main, got end of input"),
    ("undefined-operand", GOOD_HEAD + "  ROOT a = f32[4] add(p0, p9)\n}\n",
     6, 27, "use of undefined instruction 'p9' in computation main"),
    ("duplicate-name", GOOD_HEAD + "  p0 = f32[4] add(p0, p1)\n}\n",
     6, 3, "duplicate instruction name 'p0' in computation main (first defined on line 4)"),
    ("unknown-computation", GOOD_HEAD
     + "  z = f32[] constant(0)\n"
       "  ROOT r = f32[] reduce(p0, z), dimensions={0}, to_apply=nope\n}\n",
     7, 58, "unknown computation 'nope'"),
    ("literal-count", GOOD_HEAD + "  ROOT c = f32[3] constant({1, 2})\n}\n",
     6, 33, "has 2 elements in dimension 0, expected 3"),
    ("elided-constant", GOOD_HEAD + "  ROOT c = f32[32,32] constant({...})\n}\n",
     6, 32, "elided this constant's value"),
    ("operand-list-not-closed", GOOD_HEAD + "  ROOT a = f32[4] add(p0 p1)\n}\n",
     6, 26, "expected ')' to close the operand list of add, got 'p1'"),
    ("operand-shape-mismatch", GOOD_HEAD + "  ROOT a = f32[4] add(f32[5] %p0, f32[4] %p1)\n}\n",
     6, 23, "operand 'p0' of 'a' is written with shape f32[5] but 'p0' has shape f32[4]"),
    ("two-entries", "HloModule m\nENTRY a {\n  p = f32[] parameter(0)\n}\n"
     "ENTRY b {\n  p = f32[] parameter(0)\n}\n",
     5, 7, "a second ENTRY computation (b; the first is a)"),
    ("two-roots", GOOD_HEAD + "  ROOT a = f32[4] add(p0, p1)\n  ROOT b = f32[4] add(p0, p1)\n}\n",
     7, 8, "has a second ROOT (the first is a)"),
    ("duplicate-computation", "HloModule m\nc {\n  p = f32[] parameter(0)\n}\n"
     "c {\n  p = f32[] parameter(0)\n}\n",
     5, 1, "duplicate computation name 'c'"),
    ("unterminated-string",
     GOOD_HEAD + "  ROOT a = f32[4] add(p0, p1), metadata={op_name=\"x}\n}\n",
     6, 50, "unterminated string"),
    ("ints-without-braces", GOOD_HEAD + "  ROOT a = f32[4,4] broadcast(p0), dimensions=0\n}\n",
     6, 47, "expected '{' to open the integer list of attribute dimensions, got '0'"),
    ("window-field-count", GOOD_HEAD
     + "  z = f32[] constant(0)\n"
       "  ROOT r = f32[2] reduce-window(p0, z), window={size=2x2 stride=2}, to_apply=c\n}\n",
     7, 48, "window field stride has 1 entries, expected 2"),
    ("unknown-window-field", GOOD_HEAD
     + "  z = f32[] constant(0)\n"
       "  ROOT r = f32[2] reduce-window(p0, z), window={size=2 strides=2}, to_apply=c\n}\n",
     7, 56, "unknown window field 'strides'"),
    ("bad-padding",
     GOOD_HEAD + "  z = f32[] constant(0)\n  ROOT r = f32[6] pad(p0, z), padding=1-1\n}\n",
     7, 39, "expected a padding like 0_1x2_2_1"),
    ("bad-slice", GOOD_HEAD + "  ROOT s = f32[2] slice(p0), slice={[0:2}\n}\n",
     6, 41, "expected ']' to close a range of attribute slice, got '}'"),
    ("fraction-in-int-literal", GOOD_HEAD + "  ROOT c = s32[] constant(1.5)\n}\n",
     6, 27, "expected an integer literal of type s32, got '1.5'"),
    ("int-out-of-range", GOOD_HEAD + "  ROOT c = u8[2] constant({1, 256})\n}\n",
     6, 31, "value 256 is out of range for literal's primitive type U8"),
    ("bad-pred-literal", GOOD_HEAD + "  ROOT c = pred[] constant(yes)\n}\n",
     6, 28, "expected true or false in a pred literal, got 'yes'"),
    ("parameter-without-shape", GOOD_HEAD + "  p2 = parameter(2)\n}\n",
     6, 8, "parameter 'p2' needs a shape"),
    ("two-instructions-one-line",
     GOOD_HEAD + "  a = f32[4] add(p0, p1) b = f32[4] add(p0, p1)\n}\n",
     6, 26, "expected ',' or a new line after instruction a, got 'b'"),
    ("attribute-twice",
     GOOD_HEAD + "  ROOT a = f32[4,4] broadcast(p0), dimensions={0}, dimensions={1}\n}\n",
     6, 52, "attribute 'dimensions' given twice"),
    ("fusion-without-calls", GOOD_HEAD + "  ROOT f = f32[4] fusion(p0), kind=kLoop\n}\n",
     6, 19, "fusion 'f' needs calls=<fused computation>"),
    ("uninferable-shape", GOOD_HEAD + "  q = f32[5] parameter(2)\n  ROOT t = add(p0, q)\n}\n",
     7, 12, "cannot infer the shape of 't'"),
    ("unexpected-character", GOOD_HEAD + "  ROOT a = f32[4] add(p0, @p1)\n}\n",
     6, 27, "unexpected character '@'"),
    ("empty-input", "\n  // nothing here\n", 3, 1, "expected a computation, got end of input"),
    ("unknown-control-predecessor", GOOD_HEAD
     + "  ROOT a = f32[4] add(p0, p1), control-predecessors={zz}\n}\n",
     6, 54, "control predecessor 'zz' is not an instruction of computation main"),
    ("metadata-bare-word", GOOD_HEAD + "  ROOT a = f32[4] add(p0, p1), metadata={op_name=foo}\n}\n",
     6, 50, "expected a string, integer or boolean for metadata field op_name, got 'foo'"),
    ("unknown-debug-field", "HloModule m\n\nFileLocations\n1 {file_name_id=1 function_name_id=1 "
     "line=3 colour=2}\n\nENTRY e {\n  p = f32[] parameter(0)\n}\n",
     4, 45, "unknown field 'colour' in table FileLocations"),
    ("unterminated-comment", GOOD_HEAD + "  /* never closed\n  ROOT a = f32[4] add(p0, p1)\n}\n",
     6, 3, "unterminated /* comment"),
    ("unclosed-tuple-shape", GOOD_HEAD + "  ROOT t = (f32[4], f32[4] tuple(p0, p1)\n}\n",
     6, 28, "expected ')' to close a tuple shape, got 'tuple'"),
]


@pytest.mark.parametrize(("text", "line", "column", "message"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parse_error(text: str, line: int, column: int, message: str) -> None:
    with pytest.raises(HloParseError) as info:
        parse(text)
    err = info.value
    assert message in err.message, err.message
    assert (err.line, err.column) == (line, column), str(err)
    assert err.snippet == text.split("\n")[line - 1]
    assert f"<text>:{line}:{column}:" in str(err)


def test_error_count() -> None:
    assert len(CASES) >= 22


def test_error_names_the_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.hlo"
    path.write_text(GOOD_HEAD + "  ROOT a = f32[4] frobnicate(p0, p1)\n}\n")
    with pytest.raises(HloParseError) as info:
        parse_file(path)
    assert info.value.source_name == str(path)
    assert str(info.value).startswith(f"{path}:6:19: unknown opcode 'frobnicate'")


def test_semantic_error_is_a_verify_error() -> None:
    text = GOOD_HEAD + "  q = f32[5] parameter(2)\n  ROOT a = f32[4] add(p0, q)\n}\n"
    with pytest.raises(HloVerifyError):
        parse(text)
    parse(text, verify=False)  # the text itself is well formed


def test_missing_entry_is_allowed() -> None:
    """As in XLA: without ENTRY, the last computation is the entry."""
    m = parse("HloModule m\nc {\n  p = f32[] parameter(0)\n}\nd {\n  p = f32[] parameter(0)\n"
              "  ROOT n = f32[] negate(p)\n}\n")
    assert m.entry.name == "d"


def test_elided_constant_can_be_allowed() -> None:
    text = GOOD_HEAD + "  ROOT c = f32[2,3] constant({...})\n}\n"
    m = parse(text, allow_elided_constants=True)
    assert m.entry.root.literal.shape == (2, 3)  # type: ignore[union-attr]


def test_snippet_caret_points_at_column() -> None:
    text = textwrap.dedent("""\
        HloModule m
        ENTRY e {
          p = f32[4] parameter(0)
          ROOT n = f32[4] negat(p)
        }
        """)
    with pytest.raises(HloParseError) as info:
        parse(text)
    lines = str(info.value).splitlines()
    assert lines[1] == "    ROOT n = f32[4] negat(p)"
    assert lines[2].index("^") == lines[1].index("negat")


def test_mutated_fixtures_raise_only_hlo_errors() -> None:
    """Seeded fuzzing: random edits of the fixtures either parse or raise an HloError, never
    another exception (a bare traceback)."""
    rng = random.Random(20261122)
    texts = [p.read_text() for p in sorted((Path(__file__).parent / "hlo").glob("*.hlo"))]
    texts = [t for t in texts if len(t) < 20000]
    alphabet = list('{}()[],=:%"/*-x.0123456789af \n_')
    for _ in range(300):
        text = rng.choice(texts)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(text))
            r = rng.random()
            if r < 0.4:
                text = text[:i] + text[i + 1:]
            elif r < 0.8:
                text = text[:i] + rng.choice(alphabet) + text[i:]
            else:
                text = text[:i] + text[i + rng.randint(1, 20):]
        with contextlib.suppress(HloError):
            parse(text)
