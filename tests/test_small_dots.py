"""`small-dot-fusion` (passes/fusion/small_dots.py): a dot over a handful of elements computed per
element inside the kernels that read it, under the `hlofuse` pipeline.

The shapes are a PPO update's: the first layer over a 4-number observation (`x @ W1 + b`, then
tanh) and a policy head's input gradient (`dlogits[N, 2] @ W3^T`, read by the tanh gradient and
its bias-gradient sum).
"""

from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.api import optimise
from hlofuse.backends import interpreter
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.fusion.trace import trace_of
from hlofuse.text import parse

FIRST_LAYER = """
ENTRY e {
  x = f32[4096,4] parameter(0)
  w = f32[4,64] parameter(1)
  b = f32[64] parameter(2)
  d = f32[4096,64] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[4096,64] broadcast(b), dimensions={1}
  s = f32[4096,64] add(d, bb)
  ROOT t = f32[4096,64] tanh(s)
}"""

HEAD_GRADIENT = """
region {
  a = f32[] parameter(0)
  c = f32[] parameter(1)
  ROOT s = f32[] add(a, c)
}
ENTRY e {
  dl = f32[4096,2] parameter(0)
  w = f32[64,2] parameter(1)
  t = f32[4096,64] parameter(2)
  dx = f32[4096,64] dot(dl, w), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  one = f32[] constant(1)
  ones = f32[4096,64] broadcast(one), dimensions={}
  omt = f32[4096,64] subtract(ones, t)
  m1 = f32[4096,64] multiply(dx, omt)
  m2 = f32[4096,64] multiply(m1, t)
  g = f32[4096,64] add(m1, m2)
  z = f32[] constant(0)
  r = f32[64] reduce(g, z), dimensions={0}, to_apply=region
  ROOT out = (f32[64], f32[4096,64]) tuple(r, g)
}"""


def _args(text: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, p.shape.dims).astype(np.float32)
            for p in parse(text).entry.parameters]


def _events(module: object) -> list:
    return [e for e in trace_of(module).events if e.pass_name == "small-dot-fusion"]


def _top_dots(module: object) -> int:
    return sum(i.opcode is Opcode.DOT for i in module.entry.instructions)  # type: ignore[attr-defined]


@pytest.mark.parametrize("text", [FIRST_LAYER, HEAD_GRADIENT], ids=["first_layer", "head_grad"])
def test_small_dot_is_computed_inside_its_consumer(text: str) -> None:
    fused, _ = optimise(parse(text), pipeline="hlofuse")
    plain, _ = optimise(parse(text), pipeline="xla")
    assert _top_dots(plain) == 1 and _top_dots(fused) == 0
    (event,) = _events(fused)
    assert event.verdict == "fused" and event.figures["consumers"] == 1
    assert event.figures["saved_bytes"] == 2 * 4096 * 64 * 4
    kernels = [i for i in fused.entry.instructions if i.opcode is Opcode.FUSION]
    assert len(kernels) == 1
    assert any(i.opcode is Opcode.DOT for i in kernels[0].fused_computation.instructions)
    args = _args(text)
    want = interpreter.run(parse(text), *args)
    for threads in (1, 2):
        got = hlofuse.compile(parse(text), pipeline="hlofuse", backend="cpu",
                              threads=threads)(*args)
        for g, w in zip(got if isinstance(got, list | tuple) else [got], want, strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-3)


def test_interpreter_values_unchanged_by_the_pass() -> None:
    """The dot stays a dot (inside the fusion): the interpreter computes it as before."""
    args = _args(FIRST_LAYER, 3)
    fused, _ = optimise(parse(FIRST_LAYER), pipeline="hlofuse")
    np.testing.assert_array_equal(interpreter.run(fused, *args)[0],
                                  interpreter.run(parse(FIRST_LAYER), *args)[0])


def test_refusals_carry_their_rule() -> None:
    # the dot is the result: it must be written
    root = FIRST_LAYER.replace("  ROOT t = f32[4096,64] tanh(s)\n", "  t = f32[4096,64] tanh(s)\n"
                               ).replace("  d = f32[4096,64] dot", "  ROOT d = f32[4096,64] dot")
    module, _ = optimise(parse(root), pipeline="hlofuse")
    (event,) = _events(module)
    assert event.verdict == "refused" and event.rule == "small_dot.users"
    # a consumer reading it at other positions (a transpose): each read would recompute it
    moved = FIRST_LAYER.replace(
        "  ROOT t = f32[4096,64] tanh(s)",
        "  t = f32[4096,64] tanh(s)\n  ROOT tr = f32[64,4096] transpose(t), dimensions={1,0}")
    module, _ = optimise(parse(moved), pipeline="hlofuse")
    events = _events(module)
    assert events and all(e.rule == "small_dot.reuse" for e in events)
    assert _top_dots(module) == 1


def test_contraction_limit_and_switch() -> None:
    wide = FIRST_LAYER.replace("f32[4096,4]", "f32[4096,8]").replace("f32[4,64]", "f32[8,64]")
    module, _ = optimise(parse(wide), pipeline="hlofuse")
    assert _top_dots(module) == 1 and not _events(module)  # 8 > small_dot_k = 4
    module, _ = optimise(parse(wide), pipeline="hlofuse{small_dot_k=8}")
    assert _top_dots(module) == 0
    module, _ = optimise(parse(FIRST_LAYER), pipeline="hlofuse{small_dot_k=0}")
    assert _top_dots(module) == 1


def test_explain_names_the_saving() -> None:
    text = str(hlofuse.explain(FIRST_LAYER, pipeline="hlofuse"))
    line = next(x for x in text.splitlines() if "small-dot-fusion" in x)
    assert "a dot over 4 element(s)" in line and "2.0 MiB" in line


def test_mixed_float_integer_dot_stays_a_library_call() -> None:
    """f32 operands with an s32 result: the GEMM's emitter models XLA's conversion (the sum
    rounded, truncated, saturated); the per-element form does not, so it is not fused."""
    text = """
ENTRY e {
  x = f32[4096,4] parameter(0)
  w = f32[4,64] parameter(1)
  d = s32[4096,64] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  one = s32[] constant(1)
  ones = s32[4096,64] broadcast(one), dimensions={}
  ROOT t = s32[4096,64] add(d, ones)
}"""
    module, _ = optimise(parse(text), pipeline="hlofuse")
    (event,) = _events(module)
    assert event.verdict == "refused" and event.rule == "small_dot.type"
    assert _top_dots(module) == 1
    args = [np.random.default_rng(4).uniform(-9, 9, s).astype(np.float32)
            for s in ((4096, 4), (4, 64))]
    want = interpreter.run(parse(text), *args)[0]
    got = hlofuse.compile(parse(text), pipeline="hlofuse", backend="cpu")(*args)
    np.testing.assert_array_equal(np.asarray(got[0] if isinstance(got, list | tuple) else got),
                                  want)
