"""The prelude cut down to what a translation unit uses (`backends/cpu/shake.py`): the split
loses nothing, dependencies are followed, any mention keeps a helper, a cut prelude compiles,
and programs whose C is cut give the interpreter's values (the CPU tests at large compile only
cut C; here an f16 and an s8 program, whose helpers are among those cut from other files)."""

from __future__ import annotations

import random
import subprocess

import numpy as np
import pytest

from hlofuse.backends import interpreter
from hlofuse.backends.cpu import build, cexpr, shake
from hlofuse.backends.cpu import compile_module as cpu_compile
from hlofuse.text import parse

try:
    build.find_compiler()
except build.CompilerNotFoundError:  # pragma: no cover
    pytest.skip("no C compiler", allow_module_level=True)


PRELUDE = cexpr.prelude()


def droppable() -> dict[str, shake._Block]:
    return {b.defines: b for b in shake._blocks(PRELUDE) if b.defines is not None}


def test_blocks_are_the_prelude_cut_into_pieces() -> None:
    blocks = shake._blocks(PRELUDE)
    assert "".join(b.text for b in blocks) == PRELUDE
    names = [b.defines for b in blocks if b.defines is not None]
    assert len(names) == len(set(names)) > 200
    defined = droppable()
    # the kinds of droppable blocks: functions (also under the prelude's inline macros), a
    # macro, a table of constants
    for name in ("hf_f16_to_f32", "hf_div_s8", "hf_tanh_f32", "HF_INF", "hf_tab_f8e4m3fn"):
        assert name in defined, name
    # never droppable: state, the parallel-loop pointer, conditional groups
    kept = "".join(b.text for b in shake._blocks(PRELUDE) if b.defines is None)
    for text in ("hf_oom_jmp", "hf_parallel_ptr", "#ifndef HF_KERNEL"):
        assert text in kept, text


def test_nothing_used_keeps_only_what_is_never_dropped() -> None:
    out = shake.keep(PRELUDE, "")
    assert "hf_f16_to_f32" not in out and "hf_div_s8" not in out
    assert len(out) < len(PRELUDE) / 4
    assert shake.keep(PRELUDE, " ".join(droppable())) == PRELUDE


def test_a_helper_brings_what_it_calls() -> None:
    out = shake.keep(PRELUDE, "x = hf_round_f16(y);")
    for name in ("hf_round_f16", "hf_f16_to_f32", "hf_f32_to_f16", "hf_f32_bits",
                 "hf_f32_from_bits"):
        assert f" {name}(" in out, name
    assert "hf_round_bf16" not in out


def test_any_mention_keeps_a_helper() -> None:
    assert "hf_div_s8(" in shake.keep(PRELUDE, "/* hf_div_s8 */")
    assert "hf_div_s8(" in shake.keep(PRELUDE, "#if defined(hf_div_s8)\n#endif\n")


def test_a_text_without_the_prelude_is_unchanged() -> None:
    text = "int f(void) { return 1; }\n"
    assert shake.unit(text) is text
    assert shake.unit(PRELUDE[:-1]) == PRELUDE[:-1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_cut_prelude_compiles(seed: int) -> None:
    """A file naming a random sample of the helpers (as a kernel would, through a pointer to
    each) compiles with nothing else of the prelude: whatever they need came along."""
    names = sorted(n for n, b in droppable().items()
                   if not b.text.lstrip().startswith("#") and "[" not in b.text.split("{", 1)[0])
    sample = random.Random(seed).sample(names, 25)
    body = "".join(f"void *use_{i} = (void *)&{n};\n" for i, n in enumerate(sample))
    text = shake.unit(PRELUDE + body)
    assert len(text) < len(PRELUDE)
    proc = subprocess.run([*build.find_compiler(), *build.flags(), "-fsyntax-only", "-x", "c",
                           "-"], input=text, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("dtype", ["f16", "s8"])
def test_programs_built_from_cut_c_match_the_interpreter(dtype: str) -> None:
    text = f"""HloModule m
ENTRY e {{
  a = {dtype}[64] parameter(0)
  b = {dtype}[64] parameter(1)
  d = {dtype}[64] divide(a, b)
  m = {dtype}[64] maximum(d, a)
  ROOT r = {dtype}[64] multiply(m, b)
}}
"""
    module = parse(text)
    exe = cpu_compile(module)
    assert "hf_div_s8" in shake.unit(exe.source) or dtype != "s8"
    assert "hf_div_s8" not in shake.unit(exe.source) or dtype == "s8"
    rng = np.random.default_rng(0)
    if dtype == "f16":
        args = [rng.uniform(0.5, 4, 64).astype(np.float16) for _ in range(2)]
    else:
        args = [rng.integers(-128, 128, 64).astype(np.int8) for _ in range(2)]
    args[1][args[1] == 0] = 3
    got = exe(*args)[0]
    want = interpreter.run(parse(text), *args)[0]
    np.testing.assert_array_equal(got, want)
