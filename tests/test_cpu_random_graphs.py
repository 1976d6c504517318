"""Random graphs through the CPU kernel emitter: hypothesis draws elementwise / broadcast /
reshape / slice / reduce graphs as HLO text, the `xla` pipeline fuses them, every kernel is
lowered and compiled, and each kernel's outputs must match the interpreter's on random inputs.

Graphs have one or two [A, B] parameters, a [B] and an [A] vector and a scalar; each step applies
an op to earlier values (keeping everything [A, B], so any value can feed any op); the root is a
tuple of one to three values, so multi-output fusions occur. Kept to ~25 examples.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpu_lower_harness import Harness
from hlofuse.backends.cpu import build

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
