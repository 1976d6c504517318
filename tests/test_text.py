"""The HLO text format: round trips (fixtures, XLA conformance cases, real JAX dumps), what the
parser builds (names, shapes, links, literals, debug info, source locations), the printer's forms,
structural equality, and parse speed.

Fixtures in tests/hlo/: `jax_*.hlo` were produced by a small JAX program (mlp, fori_loop, a mix
of sort/cond/rng/reduce_window/gather/conv) with `lower(...).as_text(dialect="hlo",
debug_info=True)` (short form with debug tables) and `lower(...).compile().as_text()` (XLA's
optimized long form with fusions); `xla_*.hlo` are written in the style of XLA's own tests.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from hlofuse.errors import HloParseError
from hlofuse.ir.equality import module_diff, modules_equal
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape
from hlofuse.text import format_computation, format_instruction, parse, parse_file, print_module

HERE = Path(__file__).parent
FIXTURES = sorted((HERE / "hlo").glob("*.hlo"))
PROBE = HERE / "hlo" / "jax_probe_short.hlo"
CONFORMANCE = Path("/work/shared/conformance/xla_fusion_cases.jsonl")


def assert_round_trip(text: str, **kwargs: bool) -> None:
    """Both printed forms re-parse to an equal module and print identically again."""
    module = parse(text, **kwargs)
    for long in (False, True):
        printed = print_module(module, long=long)
        again = parse(printed, **kwargs)
        diff = module_diff(module, again)
        assert diff is None, f"long={long}: {diff}\n{printed}"
        assert print_module(again, long=long) == printed


# ----- round trips ---------------------------------------------------------------------------


def test_fixtures_present() -> None:
    names = {p.name for p in FIXTURES}
    assert len([n for n in names if n.startswith(("jax_", "xla_"))]) >= 8


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_fixture_round_trip(path: Path) -> None:
    assert_round_trip(path.read_text())


def _without_fast_paths(text: str) -> str:
    """`text` with a comment before each instruction's `=` and after each comma that is not
    inside braces, brackets or a string, so that the parser's one-line fast paths
    (`[ROOT] name =`, a plain operand list, `, key =`) match nothing and every instruction goes
    through the token-by-token path. `opcode(` gets one too."""
    out = []
    for line in text.split("\n"):
        if " = " not in line or line.startswith("HloModule"):
            out.append(line)
            continue
        line = re.sub(r"^(\s*(?:ROOT\s+)?%?[\w.\-$]+)\s*=", r"\1 /*h*/ =", line)
        line = re.sub(r"(\s[A-Za-z][\w\-]*)\(", r"\1 /*o*/(", line, count=1)  # `opcode(`
        chars, depth, quoted = [], 0, False
        for c in line:
            chars.append(c)
            if c == '"':
                quoted = not quoted
            elif not quoted and c in "{[":
                depth += 1
            elif not quoted and c in "}]":
                depth -= 1
            elif not quoted and depth == 0 and c == ",":
                chars.append(" /*c*/")
        out.append("".join(chars))
    return "\n".join(out)


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_fast_paths_parse_as_the_token_path(path: Path) -> None:
    text = path.read_text()
    slow = _without_fast_paths(text)
    assert slow != text
    diff = module_diff(parse(text), parse(slow))
    assert diff is None, diff


def test_metadata_read_again_is_the_same_value() -> None:
    """The parser keeps each metadata text's value and, for the same text again, skips the
    regex (`Lexer.take_known`): a `}` inside a string, a text that is a prefix of another and
    a repeat must all read as written."""
    texts = ['{op_name="a}b" source_line=3}', '{op_name="a}" source_line=5}', '{op_name="a"}',
             '{op_name="a}b" source_line=3}', '{op_name="a"}', '{op_name="a" source_line=4}']
    lines = ["HloModule m", "ENTRY e {", "  p = f32[2] parameter(0)"]
    prev = "p"
    for i, meta in enumerate(texts):
        lines.append(f"  n{i} = f32[2] negate({prev}), metadata={meta}")
        prev = f"n{i}"
    lines[-1] = lines[-1].replace(f"  n{len(texts) - 1}", f"  ROOT n{len(texts) - 1}")
    module = parse("\n".join([*lines, "}"]))
    by_name = {i.name: i for i in module.entry.instructions}
    got = [by_name[f"n{i}"].metadata.fields for i in range(len(texts))]
    a_b, a_ = (("op_name", "a}b"), ("source_line", 3)), (("op_name", "a}"), ("source_line", 5))
    a, a4 = (("op_name", "a"),), (("op_name", "a"), ("source_line", 4))
    assert got == [a_b, a_, a, a_b, a, a4]


def test_probe_round_trip() -> None:
    if not PROBE.exists():
        pytest.skip(f"{PROBE} is missing")
    assert_round_trip(PROBE.read_text())


def _conformance_cases() -> list[tuple[str, str]]:
    if not CONFORMANCE.exists():
        return []
    cases = []
    for line in CONFORMANCE.read_text().splitlines():
        if line.strip():
            case = json.loads(line)
            cases.append((case["id"], case["hlo"]))
    return cases


CASES = _conformance_cases()


@pytest.mark.skipif(not CASES, reason=f"conformance cases not found at {CONFORMANCE}")
@pytest.mark.parametrize(("case_id", "hlo"), CASES, ids=[c[0] for c in CASES])
def test_conformance_round_trip(case_id: str, hlo: str) -> None:
    # One XLA test (FuseOnlySmallConstant) writes an elided constant `{...}`.
    assert_round_trip(hlo, allow_elided_constants=True)


def test_conformance_count() -> None:
    if not CASES:
        pytest.skip(f"conformance cases not found at {CONFORMANCE}")
    assert len(CASES) == 136


def test_live_jax_round_trip() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def f(x, y):  # type: ignore[no-untyped-def]
        z = jnp.exp(x) * y + jnp.sin(x).sum()
        return jax.lax.fori_loop(0, 3, lambda i, c: c * 2 + i, z)

    args = (jnp.ones((4, 8)), jnp.ones((4, 8)))
    short = jax.jit(f, keep_unused=True).lower(*args).as_text(dialect="hlo", debug_info=True)
    compiled = jax.jit(f).lower(*args).compile().as_text()
    assert_round_trip(short)
    assert_round_trip(compiled)
    module = parse(short)
    locs = [module.source_location(i) for i in module.all_instructions()]
    assert any(loc is not None and loc.file.endswith("test_text.py")
               and loc.function.endswith("f")
               for loc in locs), locs


def _xla_hlo_parser():  # type: ignore[no-untyped-def]
    """XLA's own HLO text parser, as jaxlib exposes it (a private API: skip if it moved)."""
    try:
        from jax._src.lib import xla_client
    except Exception:
        return None
    return getattr(getattr(xla_client, "hlo", None), "hlo_module_from_text", None)


# XLA's parser rejects a typed operand of send-done (`send-done(f32[4,3]{1,0} %send)`).
_XLA_REJECTS_LONG = {"instruction_fusion_test.cc::AvoidDuplicationIfNotAllFusibleRecursively#2"}


def test_xla_accepts_printed_text_and_we_accept_xlas() -> None:
    """Cross-check with XLA's parser: whatever XLA reads, XLA also reads our printing of (both
    forms), and we read XLA's printing of it, with the same instructions."""
    xla_parse = _xla_hlo_parser()
    if xla_parse is None:
        pytest.skip("jaxlib's hlo_module_from_text is not available")
    texts = [(p.name, p.read_text()) for p in FIXTURES] + CASES
    checked = 0
    for name, text in texts:
        try:
            xla_module = xla_parse(text)
        except Exception:
            continue  # e.g. computations used before their definition, which XLA rejects
        ours = parse(text, allow_elided_constants=True)
        for long in (False, True):
            if long and name in _XLA_REJECTS_LONG:
                continue
            xla_parse(print_module(ours, long=long))
        theirs = parse(xla_module.to_string(), allow_elided_constants=True)
        count = sorted(len(c.instructions) for c in ours.computations)
        assert sorted(len(c.instructions) for c in theirs.computations) == count, name
        checked += 1
    assert checked >= 100


# ----- what the parser builds ---------------------------------------------------------------


def test_short_form_basics() -> None:
    m = parse("""
HloModule test, is_scheduled=true

ENTRY main {
  p0 = f32[4]{0} parameter(0)
  p1 = f32[4] parameter(1)
  ROOT add = f32[4] add(p0, p1)
}
""")
    assert m.name == "test"
    assert m.header_attrs == {"is_scheduled": "true"}
    add = m.entry.root
    assert add.opcode is Opcode.ADD and add.name == "add"
    assert [o.name for o in add.operands] == ["p0", "p1"]
    assert m.entry.parameter(0).users == [add]
    assert m.entry.parameter(0).shape == ArrayShape(add.shape.dtype, (4,), (0,))  # type: ignore[union-attr]
    assert add.shape.layout is None  # type: ignore[union-attr]


def test_forward_references_and_missing_root() -> None:
    m = parse("""
HloModule fwd
ENTRY main {
  b = f32[] negate(a)
  a = f32[] parameter(0)
  c = f32[] call(b), to_apply=later
}
later {
  x = f32[] parameter(0)
  ROOT y = f32[] exponential(x)
}
""")
    entry = m.entry
    assert entry.root.name == "c"  # no ROOT: the last instruction
    # the list is put in definition order: `a` before its reader `b`
    assert [i.name for i in entry.instructions] == ["a", "b", "c"]
    assert entry.instructions[1].operand(0) is entry.instructions[0]
    assert entry.root.attrs["to_apply"] is m.computation("later")


def test_names_are_uniquified_across_computations() -> None:
    m = parse((HERE / "hlo" / "xla_control_flow.hlo").read_text())
    names = [i.name for i in m.all_instructions()]
    assert len(names) == len(set(names))
    assert [c.parameters[0].name for c in m.computations] == ["p", "p.1", "p.2", "p.3", "p.4"]
    # An instruction may share a computation's name (separate namespaces, as in XLA).
    m2 = parse("HloModule m\nadd {\n  a = f32[] parameter(0)\n  ROOT add = f32[] negate(a)\n}\n")
    assert m2.entry.root.name == "add"


def test_shapeless_instructions_are_inferred() -> None:
    m = parse_file(HERE / "hlo" / "xla_control_flow.hlo")
    init = m.entry.instructions[2]
    assert isinstance(init.shape, TupleShape)
    assert str(init.shape) == "(s32[], f32[4])"
    assert str(m.entry.instructions[4].shape) == "f32[4]"


def test_fusion_links_and_entry() -> None:
    m = parse_file(HERE / "hlo" / "xla_reduce_fusion.hlo")
    assert m.entry.name == "entry"
    f1 = m.entry.instruction if False else m.instruction("f1")
    assert f1.fused_computation is m.computation("f1_computation")
    assert m.computation("f1_computation").fusion_instruction is f1
    assert m.computation("f2_computation").root.attrs["to_apply"] is m.computation(
        "add_computation")
    assert m.computation("add_computation").fusion_instruction is None


def test_long_form_details() -> None:
    m = parse_file(HERE / "hlo" / "xla_long_form.hlo")
    assert m.header_attrs["entry_computation_layout"].startswith("{(f32[8,128]{1,0}")
    param = m.computation("fused_computation").parameter(0)
    assert isinstance(param.shape, ArrayShape)
    assert param.shape.layout == (1, 0) and param.shape.layout_extra == ":T(8,128)"
    copy1 = m.instruction("copy.1")
    assert [p.name for p in copy1.control_predecessors] == ["copy.0"]
    assert copy1 in m.instruction("copy.0").users
    fusion = m.instruction("fusion")
    assert fusion.attrs["kind"] == "kLoop"
    assert fusion.attrs["backend_config"] == '{"outer_dimension_partitions":[],"flag":true}'
    cc = m.instruction("custom-call")
    assert cc.attrs["custom_call_target"] == "my_target"
    assert cc.attrs["backend_config"] == '"opaque \\"quoted\\" text"'
    assert m.instruction("p0").attrs["sharding"] == "{replicated}"
    add = m.instruction("add.0")
    assert add.metadata.fields == (("op_type", "Add"), ("op_name", "model/add"),
                                   ("source_file", "/home/user/model.py"), ("source_line", 12))


def test_attribute_values() -> None:
    m = parse_file(HERE / "hlo" / "xla_attributes.hlo")
    rw2 = m.instruction("rw2")
    assert [(d.size, d.pad_lo, d.pad_hi) for d in rw2.attrs["window"]] == [(3, 1, 1), (3, 1, 1)]
    assert m.instruction("rw").attrs["window"][0].stride == 2
    assert m.instruction("padded").attrs["padding"] == ((1, 1, 1), (0, 2, 1))
    assert m.instruction("sl").attrs["slice"] == ((0, 4, 2), (1, 4, 1))
    assert m.instruction("ds").attrs["dynamic_slice_sizes"] == (2, 2)
    assert m.instruction("conv").attrs["dim_labels"] == "b01f_01io->b01f"
    assert m.instruction("srt").attrs["is_stable"] is True
    assert m.instruction("rng").attrs["distribution"] == "rng_uniform"
    sas = m.instruction("sas")
    assert sas.attrs["select"] is m.computation("ge")
    assert sas.called_computations() == [m.computation("ge"), m.computation("add")]


def test_literals() -> None:
    m = parse_file(HERE / "hlo" / "xla_constants.hlo")
    lit = {i.name: i.literal for i in m.entry.instructions}
    f = lit["f"]
    assert isinstance(f, np.ndarray) and f.dtype == np.float32
    assert math.copysign(1.0, float(f[1])) == -1.0  # -0 kept
    assert np.isinf(f[5]) and f[5] > 0 and np.isneginf(f[6]) and np.isnan(f[7])
    h = lit["h"]
    assert h.dtype == np.float16 and np.isnan(h[1]) and np.signbit(h[1])  # type: ignore[union-attr]
    assert lit["b"].dtype == np.dtype(ml_dtypes.bfloat16)  # type: ignore[union-attr]
    assert lit["b"].shape == (2, 2)  # type: ignore[union-attr]
    assert lit["u"].dtype == np.uint64 and int(lit["u"]) == 2**64 - 1  # type: ignore[union-attr, arg-type]
    assert lit["s"].tolist() == [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]  # type: ignore[union-attr]
    assert lit["e"].shape == (0,)  # type: ignore[union-attr]
    tl = lit["tl"]
    assert isinstance(tl, tuple) and int(tl[0]) == 7 and tl[1].tolist() == [1.0, 2.0]  # type: ignore[union-attr]
    assert lit["t"].tolist() == [True, False]  # type: ignore[union-attr]


def test_nan_payloads_round_trip() -> None:
    text = ("HloModule m\nENTRY e {\n  a = f32[3] constant({nan(0x1), -nan(0x400000), -nan})\n"
            "  ROOT b = bf16[1,2] constant({ {nan(0x41), 2} })\n}\n")
    m = parse(text)
    a = m.instruction("a").literal
    assert isinstance(a, np.ndarray)
    assert a.view(np.uint32).tolist() == [0x7F800001, 0xFFC00000, 0xFFC00000]
    printed = print_module(m)
    assert "constant({nan(0x1), -nan, -nan})" in printed
    assert "constant({ {nan(0x41), 2} })" in printed
    assert_round_trip(text)


def test_debug_tables_and_stack_frame_locations() -> None:
    m = parse_file(HERE / "hlo" / "jax_mlp_short.hlo")
    debug = m.debug_info
    assert debug.file_names[1].endswith("model.py")
    assert debug.function_names and debug.file_locations and debug.stack_frames
    tanh = m.instruction("tanh.1")
    loc = m.source_location(tanh)
    assert loc is not None
    assert loc.file.endswith("model.py") and loc.line == 8 and loc.function == "mlp"
    assert str(loc).endswith("model.py:8 (mlp)")


def test_old_style_source_locations() -> None:
    m = parse_file(HERE / "hlo" / "xla_long_form.hlo")
    loc = m.source_location(m.instruction("tanh.0"))
    assert loc is not None and (loc.file, loc.line) == ("/home/user/model.py", 13)
    assert m.source_location(m.instruction("copy.2")) is None


def test_compiled_dump_locations() -> None:
    m = parse_file(HERE / "hlo" / "jax_misc_long.hlo")
    located = [m.source_location(i) for i in m.all_instructions()]
    assert any(loc is not None and loc.file.endswith("model.py") for loc in located)
    assert m.entry.name.startswith("main")
    assert sum(1 for c in m.computations if c.is_fusion_computation) >= 5


def test_bare_computation() -> None:
    m = parse_file(HERE / "hlo" / "xla_bare_computation.hlo")
    assert m.name == "e" and m.entry.name == "e"
    assert m.entry.root.name == "t"
    assert str(m.entry.root.shape) == "(s8[1], s8[])"


def test_unnamed_entry_and_percent_names() -> None:
    m = parse("HloModule m\nENTRY {\n  %p = f32[2]{0} parameter(0)\n"
              "  ROOT %n = f32[2]{0} negate(f32[2]{0} %p)\n}\n")
    assert m.entry.root.operand(0).name == "p"


def test_comments_are_skipped() -> None:
    m = parse("HloModule m // trailing\n/* block */ ENTRY e {\n  // a line comment\n"
              "  p = (f32[], /*index=1*/f32[]) parameter(0)\n"
              "  ROOT g = f32[] get-tuple-element(p), /* here */ index=1\n}\n")
    assert m.entry.root.attrs["index"] == 1


# ----- printer ----------------------------------------------------------------------------


def test_printer_forms() -> None:
    m = parse_file(HERE / "hlo" / "xla_long_form.hlo")
    add = m.instruction("add.0")
    assert format_instruction(add) == (
        'add.0 = f32[8,128]{1,0:T(8,128)} add(param_0, param_1), metadata={op_type="Add" '
        'op_name="model/add" source_file="/home/user/model.py" source_line=12}')
    assert format_instruction(add, long=True).startswith(
        "%add.0 = f32[8,128]{1,0:T(8,128)} add(f32[8,128]{1,0:T(8,128)} %param_0, ")
    text = format_computation(m.computation("fused_computation"), long=True)
    assert text.startswith(
        "%fused_computation (param_0: f32[8,128], param_1: f32[8,128]) -> f32[8,128] {\n")
    assert "  ROOT %tanh.0 = " in text
    assert format_computation(m.entry).startswith("ENTRY main {\n")
    printed = print_module(m)
    assert printed.startswith("HloModule long_form, is_scheduled=true, entry_computation_layout=")
    assert "control-predecessors={copy.0}" in printed


def test_printer_attribute_order_is_canonical() -> None:
    m = parse("HloModule m\nc {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
              "  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n  p = f32[4] parameter(0)\n"
              "  z = f32[] constant(0)\n  ROOT r = f32[] reduce(p, z), metadata={op_name=\"r\"}, "
              "to_apply=c, dimensions={0}\n}\n")
    assert format_instruction(m.entry.root) == (
        'r = f32[] reduce(p, z), dimensions={0}, to_apply=c, metadata={op_name="r"}')


def test_debug_tables_print_like_jax() -> None:
    text = (HERE / "hlo" / "jax_mlp_short.hlo").read_text()
    printed = print_module(parse(text))
    start = text.index("FileNames")
    tables = text[start:text.index("\n\n", text.index("StackFrames"))]
    assert tables in printed


# ----- equality ---------------------------------------------------------------------------


def test_module_diff_finds_differences() -> None:
    text = (HERE / "hlo" / "xla_constants.hlo").read_text()
    a, b = parse(text), parse(text)
    assert modules_equal(a, b)
    lit = b.instruction("f").literal
    assert isinstance(lit, np.ndarray)
    lit[7] = np.float32(-np.nan)  # a different nan: bitwise comparison sees it
    assert module_diff(a, b) == "computation main: instruction f: literal differs"
    c = parse(text.replace("s8[3] constant", "s8[3]{0} constant"))
    assert "shape s8[3] != s8[3]{0}" in (module_diff(a, c) or "")
    d = parse(text.replace("HloModule constants", "HloModule other"))
    assert module_diff(a, d) == "module name 'constants' != 'other'"


def test_module_diff_attrs_and_computations() -> None:
    text = (HERE / "hlo" / "xla_attributes.hlo").read_text()
    a = parse(text)
    b = parse(text.replace("window={size=2x2 stride=2x2}, to_apply=add",
                           "window={size=2x2 stride=2x2}, to_apply=add", 1))
    assert modules_equal(a, b)
    c = parse(text.replace("dimensions={1}, to_apply=add", "dimensions={1}, to_apply=add"))
    assert modules_equal(a, c)
    m = b.instruction("red")
    m.attrs["to_apply"] = b.computation("ge")
    assert "attribute to_apply: add != ge" in (module_diff(a, b) or "")


# ----- speed ------------------------------------------------------------------------------


def _big_module(n: int) -> str:
    lines = ["HloModule big", "", "ENTRY %main {",
             "  %p0 = f32[128,256]{1,0} parameter(0)", "  %p1 = f32[128,256]{1,0} parameter(1)"]
    names = ["p0", "p1"]
    ops = ("add", "multiply", "subtract", "maximum")
    for i in range(n - 3):
        a, b = names[-1], names[max(0, len(names) - 7)]
        op = ops[i % 4]
        lines.append(
            f"  %{op}.{i} = f32[128,256]{{1,0}} {op}(f32[128,256]{{1,0}} %{a}, "
            f"f32[128,256]{{1,0}} %{b}), metadata={{op_type=\"{op}\" "
            f"op_name=\"jit(f)/{op}\" source_file=\"/x/model.py\" source_line={i}}}")
        names.append(f"{op}.{i}")
    lines.append(f"  ROOT %out = f32[128,256]{{1,0}} negate(f32[128,256]{{1,0}} %{names[-1]})")
    lines.append("}")
    return "\n".join(lines) + "\n"


@pytest.mark.pure_core
def test_parse_work_grows_linearly_to_5000_instructions() -> None:
    """Parsing work (calls made, counted on the parser's sources: a count, not a timing a busy
    machine would fail) grows linearly with the module; benchmarks/compile_time.py times it."""
    from test_compile_scaling import calls

    small, large = _big_module(1250), _big_module(5000)
    parse(small, verify=False)  # warm-up: first-use caches
    n_small = calls(lambda: parse(small, verify=False))
    n_large = calls(lambda: parse(large, verify=False))
    assert len(parse(large, verify=False).entry.instructions) == 5000
    assert n_large / n_small < 4.5, (n_small, n_large)


def test_operands_named_before_their_definition_are_put_first() -> None:
    """Text may use a name before the line that defines it; the module's instruction lists come
    out in definition order (what passes and backends walk), and the program runs."""
    from hlofuse.backends import interpreter

    module = parse("""HloModule order
ENTRY e {
  b = f32[4] negate(a)
  a = f32[4] parameter(0)
  ROOT c = f32[4] add(a, b)
}
""")
    names = [i.name for i in module.entry.instructions]
    assert names.index("a") < names.index("b") < names.index("c")
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(interpreter.run(module, x)[0], np.zeros(4, np.float32))


def _big_literal(dims: tuple[int, ...], values: list[str]) -> str:
    it = iter(values)

    def nest(d: int) -> str:
        if d == len(dims) - 1:
            return "{ " + ", ".join(next(it) for _ in range(dims[d])) + " }"
        return "{ " + ", ".join(nest(d + 1) for _ in range(dims[d])) + " }"

    return nest(0)


@pytest.mark.parametrize(("dtype", "make"), [
    ("s8", lambda i: str(i % 256 - 128)),
    ("u32", lambda i: str(i * 7919 % 2**32)),
    ("f32", lambda i: ["1.5", "-2e-3", "inf", "-inf", "nan", "0", "3.25e+10"][i % 7]),
    ("pred", lambda i: ["true", "false", "1", "0"][i % 4]),
])
def test_large_literals_read_in_one_go_as_token_by_token(
        dtype: str, make: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large constant (jumanji Sudoku's 810,000-element puzzle bank) is read by numpy in one
    go; the values are those the token reader gives."""
    from hlofuse.text import literals

    dims = (4, 30, 9)
    values = [make(i) for i in range(4 * 30 * 9)]  # type: ignore[operator]
    body = _big_literal(dims, values)
    text = f"HloModule m\nENTRY e {{\n  ROOT c = {dtype}[4,30,9] constant({body})\n}}\n"
    fast = parse(text).entry.root.literal
    monkeypatch.setattr(literals, "FAST_MIN_ELEMENTS", 10**9)  # the token reader only
    slow = parse(text).entry.root.literal
    assert fast.dtype == slow.dtype and fast.shape == slow.shape == dims
    np.testing.assert_array_equal(fast, slow)


@pytest.mark.parametrize(("bad", "message"), [
    ("300", "out of range"), ("1.5", "expected an integer literal"), ("0x10", "integer"),
])
def test_large_literal_errors_name_the_element(bad: str, message: str) -> None:
    """An element the fast path cannot take sends the literal to the token reader, whose error
    names the element's line and column."""
    values = ["1"] * 300
    values[217] = bad
    body = _big_literal((3, 100), values)
    text = f"HloModule m\nENTRY e {{\n  ROOT c = s8[3,100] constant({body})\n}}\n"
    with pytest.raises(HloParseError, match=message) as exc:
        parse(text)
    col = 2 + len("ROOT c = s8[3,100] constant(") + body.index(bad) + 1
    assert f":3:{col}:" in str(exc.value)


def test_large_literal_with_a_wrong_count_is_refused() -> None:
    body = _big_literal((3, 100), ["2"] * 300).replace("2, 2 }", "2 }", 1)  # 99 in a row
    with pytest.raises(HloParseError, match="has 99 elements in dimension 1, expected 100"):
        parse(f"HloModule m\nENTRY e {{\n  ROOT c = s8[3,100] constant({body})\n}}\n")


@pytest.mark.parametrize(("dtype", "last", "check"), [
    ("s64", "99999999999999999999", "out of range"),   # numpy would saturate it
    ("f32", "-nan", "negative"),                       # numpy would drop the sign
])
def test_large_literal_edge_values_keep_their_meaning(dtype: str, last: str, check: str) -> None:
    values = ", ".join(["1"] * 299 + [last])
    text = f"HloModule m\nENTRY e {{\n  ROOT c = {dtype}[300] constant({{ {values} }})\n}}\n"
    if check == "out of range":
        with pytest.raises(HloParseError, match="out of range"):
            parse(text)
    else:
        value = float(parse(text).entry.root.literal[-1])
        assert math.isnan(value) and math.copysign(1.0, value) == -1.0
