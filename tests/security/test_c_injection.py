"""Hostile text in every text-bearing field of an HLO module never becomes C code.

The payloads are what an attacker would put in a module to run code when hlofuse loads the
compiled library: a comment terminator and a constructor calling system(), the same behind a
backslash-newline splice (translation phase 2 runs before comments are recognised) or a `??/`
trigraph, a preprocessor directive after a newline, NUL and control characters, non-ASCII and
U+2028. The marker file they would create has a `%` in its name, so its path cannot survive
`escape.c_comment` verbatim.

For each field and payload, the generated C with the payload must equal the C generated with a
harmless word in that field once comments are removed (after splices and trigraphs, as a C
compiler reads it): input text changes comments only, never code. End to end, one module that
carries every payload in every field at once is optimised, compiled, loaded and run: no marker
appears and the results equal the interpreter's.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

import hlofuse
from hlofuse.backends import cpu, interpreter
from hlofuse.backends.cpu.cexpr import UnsupportedOpError
from hlofuse.backends.kernel_ir import naming
from hlofuse.errors import HloParseError
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.text import parse
from hlofuse.text.lexer import encode_string

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

CPU_SRC = Path(cpu.__file__).resolve().parent


def payloads(marker: Path) -> dict[str, str]:
    call = f'system("touch {marker}")'
    ctor = f"__attribute__((constructor)) static void pwn(void) {{ {call}; }}"
    return {
        "close-comment": f"*/ {ctor} /*",
        "splice": f"x\\\n*/ {ctor} /*",
        "trigraph": f"x??/\n*/ {ctor} /*",
        "directive": f'\n#include "/etc/passwd"\n#define float {call}\n',
        "control": f"a\x00b\x01\x1b[31m\r\n*/ {call}; /*\x7f",
        "non-ascii": f"\u00e9\u2200\u2028\u2029\u202e */ {ctor} /* \ufeff",
    }


TEMPLATE = """HloModule {module}

FileNames
1 {text}

FunctionNames
1 {text}

FileLocations
1 {{file_name_id=1 function_name_id=1 line=3 end_line=3 column=1 end_column=2}}

StackFrames
1 {{file_location_id=1 parent_frame_id=1}}

add_f {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b), metadata={{{md}}}
}}

less_f {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT
}}

cond_f {{
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT c = pred[] compare(i, n), direction=LT
}}

body_f {{
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[8] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one), metadata={{{md}}}
  two = f32[8]{{0{tiling}}} constant({{1, 2, 3, 4, 5, 6, 7, 8}})
  y = f32[8] multiply(x, two), metadata={{{md}}}
  ROOT t = (s32[], f32[8]) tuple(j, y)
}}

then_f {{
  p = f32[8] parameter(0)
  ROOT n = f32[8] negate(p), metadata={{{md}}}
}}

else_f {{
  p = f32[8] parameter(0)
  ROOT e = f32[8] exponential(p)
}}

callee_f {{
  p = f32[8] parameter(0)
  ROOT s = f32[8] sine(p), metadata={{{md}}}
}}

ENTRY main_f {{
  x = f32[8]{{0{tiling}}} parameter(0), metadata={{{md}}}
  m = f32[4,2] parameter(1)
  k = f32[2,4] parameter(2)
  pr = pred[] parameter(3)
  sh = f32[8] custom-call(x), custom_call_target="Sharding", sharding={{replicated}}, \
frontend_attributes={{attr={text}}}, backend_config={text}
  zero = s32[] constant(0)
  init = (s32[], f32[8]) tuple(zero, sh)
  w = (s32[], f32[8]) while(init), condition=cond_f, body=body_f, metadata={{{md}}}
  wx = f32[8] get-tuple-element(w), index=1
  c = f32[8] conditional(pr, wx, wx), true_computation=then_f, false_computation=else_f
  cl = f32[8] call(c), to_apply=callee_f
  srt = f32[8] sort(cl), dimensions={{0}}, to_apply=less_f, metadata={{{md}}}
  d = f32[4,4] dot(m, k), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, metadata={{{md}}}
  z = f32[] constant(0)
  r = f32[] reduce(srt, z), dimensions={{0}}, to_apply=add_f, metadata={{{md}}}
  ROOT out = (f32[8], f32[4,4], f32[]) tuple(srt, d, r)
}}
"""

TEXT_FIELDS = ("op_type", "op_name", "source_file", "stack_frames", "attributes", "tiling")
NAME_FIELDS = ("instruction_names", "computation_names", "module_name")


def module_text(field: str, value: str) -> str:
    """The template with `value` in text field `field` (every occurrence) and "ok" elsewhere."""
    def text(f: str) -> str:
        return encode_string(value if field == f else "ok")

    md = " ".join(f"{k}={text(k)}" for k in ("op_type", "op_name", "source_file"))
    md += " source_line=12 stack_frame_id=1"
    # a layout's tiling suffix cannot hold braces (the text format's own delimiters)
    tiling = ":T(8)" + (value.replace("{", "(").replace("}", ")") if field == "tiling" else "")
    return TEMPLATE.format(module="m", text=text("stack_frames" if field == "stack_frames"
                                                  else "attributes"),
                           md=md, tiling=tiling)


def rename(module: Module, field: str, value: str) -> None:
    """Put `value` (made unique with a counter) in every name of kind `field`."""
    if field == "module_name":
        module.name = value
        return
    for n, comp in enumerate(module.computations):
        if field == "computation_names":
            comp.name = f"{value}{n}"
        elif field == "instruction_names":
            for m, instr in enumerate(comp.instructions):
                instr.name = f"{value}{n}_{m}"


def build(field: str, value: str) -> Module:
    if field in NAME_FIELDS:
        module = parse(module_text("", ""))
        rename(module, field, value)
        return module
    return parse(module_text(field, value))


def as_compiled(source: str) -> str:
    """`source` as a C compiler reads it: trigraphs replaced (as under -std=c11), lines spliced,
    comments removed (string literals respected)."""
    text = source.replace("??/", "\\")
    text = text.replace("\\\n", "")
    out = re.sub(r'/\*.*?\*/|//[^\n]*|("(?:\\.|[^"\\\n])*")',
                 lambda m: m.group(1) or " ", text, flags=re.S)
    return re.sub(r"[ \t]+", " ", out)


def generated(module: Module, pipeline: str | None = None) -> str:
    if pipeline is not None:
        from hlofuse.passes.pipelines import run_pipeline

        run_pipeline(module, pipeline)
    return cpu.generate(module).source


FIELDS = TEXT_FIELDS + NAME_FIELDS


@pytest.mark.parametrize("field", FIELDS)
def test_payload_changes_comments_only(field: str, tmp_path: Path) -> None:
    marker = tmp_path / "pw%ned"
    if field == "tiling":
        # the layout suffix is parsed into structure (text/layout.py): it cannot carry text
        for text in ["harmless", *payloads(marker).values()]:
            with pytest.raises(HloParseError):
                build(field, text)
        return
    raw = generated(build(field, "harmless"))
    baseline = as_compiled(raw)
    for name, payload in payloads(marker).items():
        source = generated(build(field, payload))
        assert str(marker) not in source, (field, name)
        assert as_compiled(source) == baseline, (field, name)
        assert source.count("\\\n") == raw.count("\\\n"), (field, name)  # no new splices
        assert not re.search(r"[^\x09\x0a\x20-\x7e]", source), (field, name)  # ASCII only


def _run_both(module: Module, args: list[np.ndarray]) -> tuple[list, list]:
    want = interpreter.run(module.clone(), *args)
    got = hlofuse.compile(module, pipeline="xla")(*args)
    return list(got), want


@pytest.mark.parametrize("name", list(payloads(Path("/m"))))
def test_every_field_at_once_compiles_runs_and_executes_nothing(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "pw%ned"
    payload = payloads(marker)[name]
    # every metadata string, stack-frame table entry, attribute string and layout tiling
    # carries the payload (a parser that refuses such a tiling: then every other field)
    try:
        module = parse(module_text("tiling", payload).replace(encode_string("ok"),
                                                               encode_string(payload)))
    except HloParseError:
        module = parse(module_text("", "").replace(encode_string("ok"), encode_string(payload)))
    for field in NAME_FIELDS:
        rename(module, field, payload)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(8).astype(np.float32), rng.standard_normal((4, 2), np.float32),
            rng.standard_normal((2, 4), np.float32), np.asarray(True)]
    got, want = _run_both(module, args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert not marker.exists()
    assert not list(tmp_path.iterdir())


def test_hostile_custom_call_target_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pw%ned"
    for payload in payloads(marker).values():
        text = ("HloModule m\nENTRY e {\n  x = f32[8] parameter(0)\n  ROOT c = f32[8] "
                f"custom-call(x), custom_call_target={encode_string(payload)}\n}}\n")
        with pytest.raises(UnsupportedOpError, match="custom-call target"):
            hlofuse.compile(text, pipeline=None)
    assert not marker.exists()


# ----- structural checks: the mechanisms cannot be bypassed quietly ---------------------------


HOLE = "\x00"


def _template(node: ast.AST) -> str | None:
    """The text of a string expression with HOLE for every runtime value (an f-string, or a
    `+` chain with at least one string constant); None for anything else."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else HOLE for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left), _template(node.right)
        if left is None and right is None:
            return None
        return (HOLE if left is None else left) + (HOLE if right is None else right)
    return None


def _value_in_comment(template: str) -> bool:
    """Does a runtime value sit inside a C comment (opened or closed in this text)?"""
    for m in re.finditer(r"/\*(.*?)(?:\*/|$)", template, re.S):
        if HOLE in m.group(1):
            return True
    first_close = template.find("*/")
    return first_close >= 0 and "/*" not in template[:first_close] and \
        HOLE in template[:first_close]


def test_no_comment_is_built_from_runtime_values_by_hand() -> None:
    """In backends/cpu, a C comment holding anything but fixed text is made by
    `ctext.comment`: no f-string or `+` chain puts a runtime value inside `/* ... */`."""
    offenders: list[str] = []
    for path in sorted(CPU_SRC.rglob("*.py")):
        if path.name == "ctext.py":
            continue  # the one place that builds comments
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.JoinedStr | ast.BinOp):
                template = _template(node)
                if template is not None and _value_in_comment(template):
                    offenders.append(f"{path.relative_to(CPU_SRC)}:{node.lineno}")
    assert not offenders, offenders
    assert _value_in_comment("x = 1;  /* " + HOLE + " */") and not _value_in_comment(
        HOLE + " = 1;  /* fixed */")


def test_name_bases_are_made_by_the_code() -> None:
    used: set[str] = set()
    for hostile in ("mul.3", "x */ y", "linux", "A", ""):
        if re.fullmatch(r"[a-z][a-z0-9_]{0,63}", hostile):
            continue
        with pytest.raises(AssertionError, match="not made by the code"):
            naming.fresh(hostile, used)


def test_no_opcode_word_is_a_macro_of_the_prelude(tmp_path: Path) -> None:
    """C names come from opcode words (`naming.word`); none may be a macro of the headers the
    generated file includes (`unix`, `I`, `EOF` would be)."""
    from hlofuse.backends.cpu import build, cexpr

    words = sorted({naming.op_word(op) for op in Opcode})
    checks = "".join(f"#ifdef {w}\n#error {w} is a macro\n#endif\n" for w in words)
    source = cexpr.prelude() + "#include <time.h>\n" + checks + "int hf_words_ok;\n"
    build.load_library(source, name="opcode_words")
