"""Lazy selects (`cprint._lazy_cond`): in a vector loop, a select whose side has many values of
its own computes that side only when some lane of the vector takes it, one branch per
condition. The results must be the interpreter's whatever the lanes select (none, some, all,
either side), and cheap sides must stay branch-free blends."""

from __future__ import annotations

import re

import numpy as np
import pytest

from hlofuse.analysis.kernels import is_kernel
from hlofuse.backends import cpu, interpreter
from hlofuse.backends.cpu.kernels import lower_kernel
from hlofuse.backends.kernel_ir.passes.lazy import LAZY_SELECT_MIN_OPS
from hlofuse.backends.kernel_ir.target import Target
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse

N = 256


def _chain(name: str, src: str, length: int) -> tuple[list[str], str]:
    """`length` elementwise ops from `src` (sine/multiply/add, so nothing folds away)."""
    lines, cur = [], src
    for i in range(length):
        op = ("sine", "multiply", "add")[i % 3]
        nxt = f"{name}{i}"
        if op == "sine":
            lines.append(f"  {nxt} = f32[{N}] sine({cur})")
        else:
            lines.append(f"  {nxt} = f32[{N}] {op}({cur}, kb)")
        cur = nxt
    return lines, cur


def _module(side: str, long_ops: int, two: bool = False) -> str:
    """select(x > t, A, B) (and, with `two`, a second select on the same condition), where the
    side named by `side` ("true"/"false") is a chain of `long_ops` ops and the other is x."""
    chain, last = _chain("a", "x", long_ops)
    chain2, last2 = _chain("b", "y", long_ops)
    sel = (f"{last}, x" if side == "true" else f"x, {last}")
    sel2 = (f"{last2}, y" if side == "true" else f"y, {last2}")
    body = [
        f"  x = f32[{N}] parameter(0)",
        f"  y = f32[{N}] parameter(1)",
        "  t = f32[] parameter(2)",
        "  k = f32[] constant(1.25)",
        f"  kb = f32[{N}] broadcast(k), dimensions={{}}",
        f"  tb = f32[{N}] broadcast(t), dimensions={{}}",
        f"  p = pred[{N}] compare(x, tb), direction=GT",
        *chain,
        *(chain2 if two else []),
        f"  s = f32[{N}] select(p, {sel})",
    ]
    if two:
        body.append(f"  s2 = f32[{N}] select(p, {sel2})")
        body.append(f"  ROOT r = (f32[{N}], f32[{N}]) tuple(s, s2)")
    else:
        body.append(f"  ROOT r = f32[{N}] negate(s)")
    return "HloModule lazy\n\nENTRY e {\n" + "\n".join(body) + "\n}\n"


def _source(text: str, target: str = "avx2") -> str:
    module = parse(text)
    run_pipeline(module, "xla")
    kernels = [i for i in module.entry.instructions if is_kernel(i)]
    return "".join(lower_kernel(k, Target.named(target)).source for k in kernels)


@pytest.mark.parametrize("side", ["true", "false"])
def test_a_long_side_is_computed_under_a_branch(side: str) -> None:
    src = _source(_module(side, 3 * LAZY_SELECT_MIN_OPS))
    tests = re.findall(r"if \(hf_any_v8\((.*?)\)\) \{", src)
    assert len(tests) == 1, src
    assert tests[0].endswith("^ 1") == (side == "false")  # the false side tests !p


def test_selects_on_one_condition_share_one_branch() -> None:
    src = _source(_module("true", 3 * LAZY_SELECT_MIN_OPS, two=True))
    assert len(re.findall(r"if \(hf_any_v8\(", src)) == 1, src


def test_short_sides_stay_blends() -> None:
    src = _source(_module("true", 6))
    assert "hf_any_v" not in src


@pytest.mark.skipif(not cpu.available(), reason="no C compiler")
@pytest.mark.parametrize("side", ["true", "false"])
@pytest.mark.parametrize("two", [False, True])
@pytest.mark.parametrize("threshold", [10.0, 2.5, 0.0, -10.0])  # no lane .. every lane
def test_results_are_the_interpreters_whatever_the_lanes_select(
        side: str, two: bool, threshold: float) -> None:
    text = _module(side, 3 * LAZY_SELECT_MIN_OPS, two)
    assert "hf_any_v" in _source(text, "avx512")
    rng = np.random.default_rng(0)
    x = rng.standard_normal(N).astype(np.float32)
    y = rng.standard_normal(N).astype(np.float32)
    x[::50] = 3.0  # a few lanes above 2.5: most vectors take no lazy side
    t = np.float32(threshold)
    got = cpu.compile_module(parse(text))(x, y, t)
    want = interpreter.run(parse(text), x, y, t)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)


@pytest.mark.skipif(not cpu.available(), reason="no C compiler")
def test_a_select_inside_a_lazy_side_on_the_same_condition_blends_there() -> None:
    """select(p, select(p, A, B), C) with A long, B and C short: both selects compute their
    true side lazily, one group; the inner one, inside the outer's branch, blends there (not
    a branch per nesting level); the interpreter's values."""
    a, la = _chain("a", "x", 2 * LAZY_SELECT_MIN_OPS)
    b, lb = _chain("b", "y", 4)
    c, lc = _chain("c", "x", 5)
    text = "\n".join([
        "HloModule nested", "", "ENTRY e {",
        f"  x = f32[{N}] parameter(0)", f"  y = f32[{N}] parameter(1)",
        "  k = f32[] constant(1.25)", f"  kb = f32[{N}] broadcast(k), dimensions={{}}",
        "  z = f32[] constant(0)", f"  zb = f32[{N}] broadcast(z), dimensions={{}}",
        f"  p = pred[{N}] compare(x, zb), direction=GT",
        *a, *b, *c,
        f"  inner = f32[{N}] select(p, {la}, {lb})",
        f"  ROOT outer = f32[{N}] select(p, inner, {lc})", "}", ""])
    src = _source(text, "avx512")
    assert 1 <= len(re.findall(r"if \(hf_any_v16\(", src)) <= 2, src
    rng = np.random.default_rng(1)
    x = rng.standard_normal(N).astype(np.float32)
    y = rng.standard_normal(N).astype(np.float32)
    got = cpu.compile_module(parse(text))(x, y)[0]
    np.testing.assert_allclose(got, interpreter.run(parse(text), x, y)[0], rtol=2e-6, atol=1e-6)
