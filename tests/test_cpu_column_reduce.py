"""A column reduce read by other ops of its fusion (a bias gradient summed over the batch, then
an optimizer update) is computed whole with the unit-stride loop innermost, not per output
element with lane gathers (kernel_ir/lower/reduce.py, `_computed_whole`)."""

from __future__ import annotations

import re

import numpy as np

import hlofuse
from hlofuse.backends import interpreter
from hlofuse.text import parse

_HEAD = """HloModule {name}

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
"""

EPILOGUE = _HEAD.format(name="column_epilogue") + """
fused {
  g = f32[16,24,40] parameter(0)
  m = f32[40] parameter(1)
  z = f32[] constant(0)
  s = f32[40] reduce(g, z), dimensions={0,1}, to_apply=add
  c = f32[] constant(0.9)
  cb = f32[40] broadcast(c), dimensions={}
  mm = f32[40] multiply(m, cb)
  m2 = f32[40] add(mm, s)
  ROOT u = f32[40] multiply(m2, s)
}

ENTRY main {
  g = f32[16,24,40] parameter(0)
  m = f32[40] parameter(1)
  ROOT f = f32[40] fusion(g, m), kind=kLoop, calls=fused
}
"""

# the outer reduce reads the inner one: both computed whole, the inner first
NESTED = _HEAD.format(name="column_nested") + """
fused {
  g = f32[16,24,40] parameter(0)
  m = f32[40] parameter(1)
  z = f32[] constant(0)
  s1 = f32[24,40] reduce(g, z), dimensions={0}, to_apply=add
  two = f32[] constant(2)
  tb = f32[24,40] broadcast(two), dimensions={}
  d = f32[24,40] multiply(s1, tb)
  s2 = f32[40] reduce(d, z), dimensions={0}, to_apply=add
  ROOT u = f32[40] multiply(s2, m)
}

ENTRY main {
  g = f32[16,24,40] parameter(0)
  m = f32[40] parameter(1)
  ROOT f = f32[40] fusion(g, m), kind=kLoop, calls=fused
}
"""


def _kernel(exe: hlofuse.Executable) -> str:
    (k,) = [k for k in exe._runner.program.kernels if k.source]
    return k.source


def _check(text: str) -> str:
    exe = hlofuse.compile(text, pipeline=None)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((16, 24, 40)).astype(np.float32),
            rng.standard_normal(40).astype(np.float32)]
    np.testing.assert_allclose(exe(*args)[0], interpreter.run(parse(text), *args)[0],
                               rtol=2e-5, atol=2e-4)
    return _kernel(exe)


def test_a_column_reduce_with_an_epilogue_is_computed_whole_with_unit_stride() -> None:
    src = _check(EPILOGUE)
    assert src.count("a column reduce, computed whole") == 1
    assert not re.search(r"\[hf_l\] = in0\[", src)  # no lane gathers of the reduced input
    assert "in0 + r0 * 40 + j1" in src  # rows of the input, 16 lanes at a time


def test_a_column_reduce_of_a_column_reduce_computes_the_inner_one_first() -> None:
    """The inner reduce is asked for while the outer one's preamble nest is being built: its
    own nest goes before that one (`Builder.at_preamble`), not into it or after it."""
    src = _check(NESTED)
    assert src.count("a column reduce, computed whole") == 2


def test_a_column_reduce_read_by_a_dot_operand_is_computed_before_it() -> None:
    """A dot inside a fusion materialises its fused operand in the preamble; the column reduce
    that operand reads must be computed before that loop (it once came after it)."""
    text = _HEAD.format(name="column_dot") + """
fused {
  g = f32[16,24,40] parameter(0)
  w = f32[40,8] parameter(1)
  z = f32[] constant(0)
  s = f32[40] reduce(g, z), dimensions={0,1}, to_apply=add
  sb = f32[4,40] broadcast(s), dimensions={1}
  ROOT d = f32[4,8] dot(sb, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY main {
  g = f32[16,24,40] parameter(0)
  w = f32[40,8] parameter(1)
  ROOT f = f32[4,8] fusion(g, w), kind=kOutput, calls=fused
}
"""
    exe = hlofuse.compile(text, pipeline=None)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((16, 24, 40)).astype(np.float32),
            rng.standard_normal((40, 8)).astype(np.float32)]
    np.testing.assert_allclose(exe(*args)[0], interpreter.run(parse(text), *args)[0],
                               rtol=2e-5, atol=2e-3)
    assert "a column reduce, computed whole" in _kernel(exe)
