"""Hostile inputs around the HLO text: .npz files, huge random inputs, and input text that
reaches a terminal (CLI errors, `parse`, explain, lint) or an HTML page (viz)."""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

from hlofuse.cli import main
from hlofuse.errors import HloError, HloParseError, InputError
from hlofuse.escape import terminal_unsafe
from hlofuse.text import parse, print_module

ADD = """HloModule add_module
ENTRY main {
  p0 = f32[4] parameter(0)
  p1 = f32[4] parameter(1)
  ROOT add = f32[4] add(p0, p1)
}
"""


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_clean_error(code: int, err: str, *needles: str) -> None:
    """Exit status 1 and one message (a parse error adds the line and a caret under it)."""
    assert code == 1, err
    assert "Traceback" not in err and "internal error" not in err
    assert err.startswith("hlofuse ") and err.count(": error: ") == 1, err
    assert not any(terminal_unsafe(c) and c != "\n" for c in err), repr(err)
    for needle in needles:
        assert needle in err, err


@pytest.fixture
def add_file(tmp_path: Path) -> Path:
    path = tmp_path / "add.hlo"
    path.write_text(ADD)
    return path


# ----- .npz inputs --------------------------------------------------------------------------


def _npy(array: np.ndarray, *, allow_pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=allow_pickle)
    return buf.getvalue()


def _npz(path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


class _Planted:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_pickled_object_arrays_are_never_unpickled(capsys: pytest.CaptureFixture[str],
                                                   add_file: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = np.array([_Planted(str(marker))] * 4, dtype=object)
    good = _npy(np.zeros(4, np.float32))
    npz = _npz(tmp_path / "in.npz", {"in_0.npy": _npy(payload, allow_pickle=True),
                                     "in_1.npy": good})
    code, _, err = _cli(capsys, "run", str(add_file), "--inputs", str(npz),
                        "--backend", "interpreter")
    _one_clean_error(code, err, "in_0 (parameter 0, p0)", "object and structured arrays are "
                     "not accepted")
    assert not marker.exists()


@pytest.mark.parametrize(("array", "needle"), [
    (np.zeros(4, np.float64), "expected f32[4] (numpy <f4[4]), the file holds numpy <f8[4]"),
    (np.zeros(5, np.float32), "expected f32[4] (numpy <f4[4]), the file holds numpy <f4[5]"),
    (np.zeros(4, ">f4"), "the file holds numpy >f4[4]"),
    (np.zeros(4, [("a", np.float32)]), "object and structured arrays are not accepted"),
])
def test_wrong_arrays_are_named(capsys: pytest.CaptureFixture[str], add_file: Path,
                                tmp_path: Path, array: np.ndarray, needle: str) -> None:
    npz = _npz(tmp_path / "in.npz", {"in_0.npy": _npy(array),
                                     "in_1.npy": _npy(np.zeros(4, np.float32))})
    code, _, err = _cli(capsys, "run", str(add_file), "--inputs", str(npz),
                        "--backend", "interpreter")
    _one_clean_error(code, err, "parameter 0", needle)


def test_good_arrays_in_any_order_and_fortran_layout(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    hlo = tmp_path / "t.hlo"
    hlo.write_text("HloModule t\nENTRY e {\n  p = f32[2,3] parameter(0)\n"
                   "  ROOT n = f32[2,3] negate(p)\n}\n")
    x = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    npz = _npz(tmp_path / "in.npz", {"in_0.npy": _npy(x)}, zipfile.ZIP_DEFLATED)
    code, _, err = _cli(capsys, "run", str(hlo), "--inputs", str(npz), "--backend",
                        "interpreter", "--pipeline", "", "--output", str(tmp_path / "o.npz"))
    assert code == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "o.npz")["out_0"], -x)


def test_truncated_and_broken_members(capsys: pytest.CaptureFixture[str], add_file: Path,
                                      tmp_path: Path) -> None:
    good = _npy(np.zeros(4, np.float32))
    for name, member, needle in [
        ("trunc", good[:-3], "the array data is truncated (13 of 16 bytes)"),
        ("magic", b"not an npy file at all", "the magic string is not correct"),
        ("header", good[:10] + b"{" * 20000, "not a readable .npy array (malformed header"),
        ("eof", good[:20], "not a readable .npy array (malformed header"),
    ]:
        npz = _npz(tmp_path / f"{name}.npz", {"in_0.npy": member, "in_1.npy": good})
        code, _, err = _cli(capsys, "run", str(add_file), "--inputs", str(npz),
                            "--backend", "interpreter")
        _one_clean_error(code, err, needle)
    npz = _npz(tmp_path / "extra.npz", {"in_0.npy": good, "in_1.npy": good, "x.txt": b"hi"})
    code, _, err = _cli(capsys, "run", str(add_file), "--inputs", str(npz))
    _one_clean_error(code, err, "expected an .npz archive of .npy arrays")


def test_compressed_bomb_reads_only_what_the_parameter_needs(tmp_path: Path) -> None:
    from hlofuse.cli import read_npz

    # a 16-byte array followed by 64 MiB of zeros that compress to almost nothing
    bomb = _npy(np.ones(4, np.float32)) + bytes(64 << 20)
    npz = _npz(tmp_path / "bomb.npz", {"in_0.npy": bomb}, zipfile.ZIP_DEFLATED)
    assert npz.stat().st_size < 1 << 20
    module = parse("HloModule m\nENTRY e {\n  ROOT p = f32[4] parameter(0)\n}\n")
    (arr,) = read_npz(npz, module.entry.parameters)
    assert arr.tolist() == [1, 1, 1, 1]
    # a header claiming a huge shape is refused before anything is allocated
    header_only = _npz(tmp_path / "claim.npz", {"in_0.npy": _npy(np.ones(4, np.float32))
                                                .replace(b"(4,)", b"(10**18,)".replace(
                                                    b"10**18", b"1000000000000000000"))})
    with pytest.raises(InputError) as info:
        read_npz(header_only, module.entry.parameters)
    assert "the file holds numpy <f4[1000000000000000000]" in str(info.value)


def test_random_inputs_beyond_memory(capsys: pytest.CaptureFixture[str],
                                     tmp_path: Path) -> None:
    hlo = tmp_path / "big.hlo"
    hlo.write_text("HloModule big\nENTRY e {\n  p = f32[1048576,1048576,1024] parameter(0)\n"
                   "  ROOT n = f32[1048576,1048576,1024] negate(p)\n}\n")
    code, _, err = _cli(capsys, "run", str(hlo), "--random-inputs", "0", "--backend",
                        "interpreter", "--pipeline", "")
    # the generator makes float64 first: 12 bytes per f32 element
    _one_clean_error(code, err, "random input in_0 (p) needs 13510798882111488 bytes (12.0 PiB)",
                     "allocation limit")


# ----- text for the terminal ----------------------------------------------------------------

HOSTILE_META = (
    "HloModule hostile\nENTRY main {\n  p = f32[4] parameter(0)\n"
    "  ROOT n = f32[4] negate(p), metadata={"
    r'op_type="neg\x1b[2J" op_name="jit(f)/\x9b31m\u202eneg" '
    r'source_file="/tmp/\x1b]0;owned\x07.py" source_line=3}'
    "\n}\n"
)


def test_parse_prints_escaped_strings_that_read_back(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    hlo = tmp_path / "h.hlo"
    hlo.write_text(HOSTILE_META)
    code, out, err = _cli(capsys, "parse", str(hlo))
    assert code == 0, err
    assert not any(terminal_unsafe(c) and c not in "\n" for c in out), repr(out)
    assert r"\x1b[2J" in out and r"\u009b31m\u202eneg" in out
    again = parse(out)
    assert again.entry.root.metadata.op_name == "jit(f)/\x9b31m\u202eneg"


@pytest.mark.parametrize(("written", "decoded"), [
    (r"f\x)", "f\\x)"),  # no hex digit (found by fuzzing: was a ValueError)
    (r"\xg\x", "\\xg\\x"),
    (r"\x41\x4", "A\x04"),
    (r"\u12\U1234", "\\u12\\U1234"),  # short \u and \U
    (r"\ud800\U00110000", "\\ud800\\U00110000"),  # a surrogate, beyond U+10FFFF
    (r"\q\101", "\\qA"),  # an unknown letter; octal
])
def test_string_escapes_that_name_no_character_are_kept(written: str, decoded: str) -> None:
    text = ("HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n"
            f'  ROOT n = f32[4] negate(p), metadata={{op_name="{written}"}}\n}}\n')
    module = parse(text)
    assert module.entry.root.metadata.op_name == decoded
    again = parse(print_module(module))
    assert again.entry.root.metadata.op_name == decoded


@pytest.mark.parametrize("tool", ["explain", "lint"])
def test_tools_escape_metadata(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                               tool: str) -> None:
    hlo = tmp_path / "h.hlo"
    hlo.write_text(HOSTILE_META)
    code, out, err = _cli(capsys, tool, str(hlo))
    assert code == 0, err
    assert not any(terminal_unsafe(c) and c not in "\n\t" for c in out + err), repr(out)
    if tool == "explain":
        assert r"/tmp/\x1b]0;owned\x07.py:3" in out


def test_cli_errors_escape_input_text(capsys: pytest.CaptureFixture[str],
                                      tmp_path: Path) -> None:
    hlo = tmp_path / "evil\x1b[31m.hlo"
    hlo.write_text("HloModule m\nENTRY e {\n  ROOT p = f32[4] parameter(0)\n  oops\n}\n")
    code, _, err = _cli(capsys, "parse", str(hlo))
    _one_clean_error(code, err, r"evil\x1b[31m.hlo:5:1: expected '=' after instruction name")
    cc = tmp_path / "cc.hlo"
    cc.write_text('HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT c = f32[4] '
                  'custom-call(p), custom_call_target="\\x1b[2J\\u202eboom"\n}\n')
    code, _, err = _cli(capsys, "run", str(cc), "--random-inputs", "0", "--backend",
                        "interpreter", "--pipeline", "")
    _one_clean_error(code, err, r"cannot interpret custom-call '\x1b[2J\u202eboom'")


def test_control_characters_in_verbatim_text_are_parse_errors() -> None:
    text = ADD.replace("ROOT add = f32[4] add(p0, p1)",
                       "ROOT add = f32[4] add(p0, p1), backend_config={\"a\":\"\x1b[2J\"}")
    with pytest.raises(HloParseError) as info:
        parse(text)
    assert info.value.line == 5 and "control character U+001B" in info.value.message
    header = "HloModule m, entry_computation_layout={\x9b}\n" + ADD.split("\n", 1)[1]
    with pytest.raises(HloParseError) as info:
        parse(header)
    assert (info.value.line, info.value.column) == (1, 40)


def test_an_internal_error_is_one_line_not_a_traceback(capsys: pytest.CaptureFixture[str],
                                                       add_file: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import hlofuse.cli as cli

    def broken(args: object) -> int:
        raise ZeroDivisionError("\x1b[2Jboom")

    monkeypatch.setattr(cli, "cmd_parse", broken)
    code = cli.main(["parse", str(add_file)])
    err = capsys.readouterr().err
    assert code == 3 and err.count("\n") == 1 and "Traceback" not in err
    assert "internal error: ZeroDivisionError: \\x1b[2Jboom" in err


# ----- HTML ---------------------------------------------------------------------------------

HOSTILE_PAGE = (
    "HloModule page\nENTRY main {\n  p = f32[4] parameter(0)\n"
    "  ROOT n = f32[4] negate(p), metadata={"
    r'op_name="</script><script>alert(1)</script><!-- \u2028 \u2029 &amp; \"q\" \\" '
    r'source_file="<!--x.py" source_line=1}'
    "\n}\n"
)


def _embedded(page: str) -> str:
    found = re.findall(r'<script type="application/json" id="viz-data">(.*?)</script>', page,
                       re.S)
    assert len(found) == 1
    return found[0]


def test_viz_page_embeds_hostile_strings_as_valid_json() -> None:
    from hlofuse.tools import viz

    page = viz.viz(HOSTILE_PAGE, "xla", with_c=False, title="t</title><!--")
    data_text = _embedded(page)
    assert "<" not in data_text and "\u2028" not in data_text
    data = json.loads(data_text)
    node = next(n for n in data["views"]["before"]["comps"]["main"]["nodes"] if n["id"] == "n")
    assert node["op_name"] == ("</script><script>alert(1)</script><!-- \u2028 \u2029 &amp; "
                               '"q" \\')
    assert node["src"] == "<!--x.py:1"
    assert "<title>t&lt;/title&gt;&lt;!-- · hlofuse viz</title>" in page


def test_viz_refuses_a_page_that_cannot_render() -> None:
    from hlofuse.tools import viz

    page = viz.viz(HOSTILE_PAGE, "none", with_c=False)
    viz.check_page(page)
    data = _embedded(page)
    for broken in (data.replace('"op_name":"', '"op_name":"<!--', 1),
                   data.replace("{", "{\\!", 1), ""):
        with pytest.raises(HloError, match="cannot render"):
            viz.check_page(page.replace(data, broken))


def test_every_hlo_error_prints_terminal_safe_with_the_caret_in_place() -> None:
    text = "HloModule m\nENTRY e {\n  ROOT c = f32[] constant(\x1b\x9b1)\n}\n"
    with pytest.raises(HloParseError) as info:
        parse(text)
    err = info.value
    assert err.snippet == "  ROOT c = f32[] constant(\x1b\x9b1)"  # the raw line stays
    printed = str(err)
    assert not any(terminal_unsafe(c) and c != "\n" for c in printed)
    shown, caret = printed.split("\n")[1:3]
    assert shown == "    ROOT c = f32[] constant(\\x1b\\x9b1)"
    assert shown[caret.index("^"):].startswith("\\x1b")
    assert str(InputError("bad \u202e name")) == "bad \\u202e name"


def test_deeply_nested_python_arguments(tmp_path: Path) -> None:
    from hlofuse.backends import interpreter

    module = parse("HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n")
    value: object = np.zeros(2, np.float32)
    for _ in range(100000):
        value = (value,)
    with pytest.raises(InputError) as info:
        interpreter.run(module, value)
    assert "parameter 0 (p): expected f32[2], got (((((...)))))" in str(info.value)


def test_input_file_too_large_for_memory(capsys: pytest.CaptureFixture[str], add_file: Path,
                                         monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def no_memory(self: Path, *args: object, **kwargs: object) -> str:
        raise MemoryError

    monkeypatch.setattr(Path, "read_text", no_memory)
    code, _, err = _cli(capsys, "parse", str(add_file))
    _one_clean_error(code, err, "add.hlo: too large to read into memory")
