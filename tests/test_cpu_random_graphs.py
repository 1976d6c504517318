"""Random graphs through the CPU kernel emitter: every kernel is lowered, compiled, and its
outputs must match the interpreter's on random inputs. A C compile error is an hlofuse bug.

- `graphs` (hypothesis): elementwise / broadcast / reshape / slice / reduce graphs of f32.
  Graphs have one or two [A, B] parameters, a [B] and an [A] vector and a scalar; each step
  applies an op to earlier values (keeping everything [A, B], so any value can feed any op);
  the root is a tuple of one to three values, so multi-output fusions occur. ~25 examples.
- `random_kernels.random_module` (seeded): kernel shapes that stress the C printer (reductions
  in vector loops, multi-output reductions, reductions of reductions and over split loops,
  argmax, reduce-window, gather/scatter at sparse indices, dynamic slices, selects of
  compares; pred, s8, s32, u32, f16, bf16, f32, f64). Seeds in fixed batches, each batch ONE
  C file (many modules, a few hundred kernels), under the `xla` and `hlofuse` pipelines and
  for vector widths 8 and 16, scalar, and parallel loops (the pool's threshold at 0).
  `HLOFUSE_KERNEL_FUZZ=N` runs N seeds per batch (default 32); a failure names the seed, the
  kernel and the module's HLO (reproduce with `random_module(seed)`).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpu_lower_harness import Harness
from hlofuse.backends.cpu import build
from random_kernels import random_module

try:
    build.find_compiler()
except build.CompilerNotFoundError:  # pragma: no cover
    pytest.skip("no C compiler", allow_module_level=True)

UNARY = ["negate", "abs", "tanh", "sine", "cosine", "floor"]
BINARY = ["add", "subtract", "multiply", "maximum", "minimum"]


@st.composite
def graphs(draw: st.DrawFn) -> str:
    a = draw(st.sampled_from([1, 3, 8, 17]))
    b = draw(st.sampled_from([1, 4, 16, 33]))
    t = f"f32[{a},{b}]"
    lines = [
        f"  p0 = {t} parameter(0)",
        f"  p1 = {t} parameter(1)",
        f"  vb = f32[{b}] parameter(2)",
        f"  va = f32[{a}] parameter(3)",
        "  s = f32[] parameter(4)",
        "  zero = f32[] constant(0)",
    ]
    values = ["p0", "p1"]
    n = draw(st.integers(2, 9))
    for i in range(n):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "bcast", "reduce", "select",
                                     "reshape", "slicepad", "scalar"]))
        x = draw(st.sampled_from(values))
        y = draw(st.sampled_from(values))
        v = f"v{i}"
        if kind == "unary":
            lines.append(f"  {v} = {t} {draw(st.sampled_from(UNARY))}({x})")
        elif kind == "binary":
            lines.append(f"  {v} = {t} {draw(st.sampled_from(BINARY))}({x}, {y})")
        elif kind == "bcast":
            if draw(st.booleans()):
                lines.append(f"  {v}b = {t} broadcast(vb), dimensions={{1}}")
            else:
                lines.append(f"  {v}b = {t} broadcast(va), dimensions={{0}}")
            lines.append(f"  {v} = {t} add({x}, {v}b)")
        elif kind == "scalar":
            lines.append(f"  {v}b = {t} broadcast(s), dimensions={{}}")
            lines.append(f"  {v} = {t} multiply({x}, {v}b)")
        elif kind == "reduce":
            dim = draw(st.integers(0, 1))
            op = draw(st.sampled_from(["add", "max"]))
            init = "zero" if op == "add" else "s"
            kept = b if dim == 0 else a
            lines.append(f"  {v}r = f32[{kept}] reduce({x}, {init}), dimensions={{{dim}}}, "
                         f"to_apply={op}")
            lines.append(f"  {v} = {t} broadcast({v}r), dimensions={{{1 - dim}}}")
        elif kind == "select":
            lines.append(f"  {v}c = pred[{a},{b}] compare({x}, {y}), direction=LT")
            lines.append(f"  {v} = {t} select({v}c, {x}, {y})")
        elif kind == "reshape":
            lines.append(f"  {v}f = f32[{a * b}] reshape({x})")
            lines.append(f"  {v}n = f32[{a * b}] negate({v}f)")
            lines.append(f"  {v} = {t} reshape({v}n)")
        else:  # slice one column/row off and pad it back
            lines.append(f"  {v}s = f32[{a},{b - 1 if b > 1 else b}] slice({x}), "
                         f"slice={{[0:{a}], [{1 if b > 1 else 0}:{b}]}}")
            pad = "0_0x0_1" if b > 1 else "0_0x0_0"
            lines.append(f"  {v} = {t} pad({v}s, s), padding={pad}")
        values.append(v)
    outs = draw(st.lists(st.sampled_from(values[2:]), min_size=1, max_size=3, unique=True))
    shape = ", ".join([t] * len(outs))
    lines.append(f"  ROOT out = ({shape}) tuple({', '.join(outs)})")
    reducers = """add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT r = f32[] add(x, y)
}
max {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT r = f32[] maximum(x, y)
}
"""
    return reducers + "ENTRY e {\n" + "\n".join(lines) + "\n}\n"


@settings(max_examples=int(os.environ.get("HLOFUSE_RANDOM_GRAPHS", "25")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.integers(0, 2**16))
def test_random_graph_kernels_match_interpreter(text: str, seed: int) -> None:
    h = Harness()
    ids = h.add_module(text, "xla")
    if not ids:  # simplified away entirely
        return
    lib = h.build()
    for kid in ids:
        h.check(lib, kid, seed, rtol=1e-4, atol=1e-4)


FUZZ_SEEDS = int(os.environ.get("HLOFUSE_KERNEL_FUZZ", "32"))
# (pipeline, target, threads): each batch its own seeds (batch k: seeds from k * 100000)
FUZZ_BATCHES = [("xla", "avx2", 1), ("hlofuse", "avx512", 1), ("xla", "scalar", 1),
                ("hlofuse", "avx2", 2)]


@pytest.mark.parametrize(("batch", "pipeline", "target", "threads"),
                         [(k, *b) for k, b in enumerate(FUZZ_BATCHES)],
                         ids=[f"{p}-{t}-{n}t" for p, t, n in FUZZ_BATCHES])
def test_random_kernels_compile_and_match_interpreter(
        batch: int, pipeline: str, target: str, threads: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if threads > 1:  # every safe top-level loop parallel, however small
        from hlofuse.backends.kernel_ir import passes
        from hlofuse.backends.kernel_ir.passes import parallel

        monkeypatch.setattr(passes, "parallelize",
                            lambda k, n=1: parallel.parallelize(k, n, threshold=0.0))
    h = Harness(target, threads)
    modules: list[tuple[int, str, tuple[float, float], list[int]]] = []
    for seed in range(batch * 100000, batch * 100000 + FUZZ_SEEDS):
        text, tol = random_module(seed)
        modules.append((seed, text, tol, h.add_module(text, pipeline)))
    try:
        lib = h.build()
    except build.CCompileError as exc:
        bad = [(seed, text) for seed, text, _tol, ids in modules
               if any(h.entries[i].kernel.name in exc.functions for i in ids)]
        pytest.fail(f"the C of random modules {[s for s, _ in bad]} ({pipeline}, {target}) "
                    f"does not compile: {exc}\n" + (bad[0][1] if bad else ""))
    for seed, text, tol, ids in modules:
        for kid in ids:
            try:
                h.check(lib, kid, seed, rtol=tol[0], atol=tol[1])
            except AssertionError as exc:
                raise AssertionError(f"random module {seed} ({pipeline}, {target}):\n{text}\n"
                                     f"{exc}") from None


def test_random_kernels_cover_the_shapes_they_are_for() -> None:
    """The generator makes what it is for: over the default seeds, every kind of pattern and
    element type occurs (a change that lost one would silently test less)."""
    text = "\n".join(random_module(k * 100000 + s)[0] for k in range(len(FUZZ_BATCHES))
                     for s in range(32))
    for needle in ("reduce-window(", "gather(", "scatter(", "dynamic-slice(",
                   "dynamic-update-slice(", "concatenate(", "pad(", "transpose(", "select(",
                   "compare(", "to_apply=arg_", "iota(", "reverse(", "clamp(", "convert(",
                   "pred[", "s8[", "s32[", "u32[", "f16[", "bf16[", "f32[", "f64["):
        assert needle in text, needle
