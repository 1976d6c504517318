"""The `hlofuse` pipeline's CPU costs (`gpu_cheap_ops={}`): exp, divide, sqrt and rsqrt are
expensive, so instruction fusion never duplicates them into a second kernel (XLA's GPU rules,
in `xla`, do). Softmax computes its exp once, and the values do not change."""

from __future__ import annotations

import numpy as np

import hlofuse
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse

SOFTMAX = """HloModule softmax
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[64,96] parameter(0)
  ninf = f32[] constant(-inf)
  m = f32[64] reduce(x, ninf), dimensions={1}, to_apply=max
  mb = f32[64,96] broadcast(m), dimensions={0}
  s = f32[64,96] subtract(x, mb)
  e = f32[64,96] exponential(s)
  zero = f32[] constant(0)
  z = f32[64] reduce(e, zero), dimensions={1}, to_apply=add
  zb = f32[64,96] broadcast(z), dimensions={0}
  ROOT p = f32[64,96] divide(e, zb)
}
"""


def _exps(pipeline: str) -> int:
    """How many exponentials the fused module computes (inside fusions or not)."""
    module = parse(SOFTMAX)
    run_pipeline(module, pipeline)
    return sum(i.opcode is Opcode.EXP for c in module.computations for i in c.instructions)


def test_exp_is_computed_once_under_hlofuse_and_twice_under_xla() -> None:
    assert _exps("xla") == 2  # GPU rules: exp is cheap, duplicated into both consumers
    assert _exps("hlofuse") == 1
    assert _exps("hlofuse{gpu_cheap_ops={exponential}}") == 2


def test_the_values_are_the_same_either_way() -> None:
    x = np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32) * 4
    got = {p: hlofuse.compile(SOFTMAX, pipeline=p, backend="interpreter")(x)[0]
           for p in ("xla", "hlofuse", "none")}
    assert np.array_equal(got["xla"], got["hlofuse"])
    assert np.array_equal(got["none"], got["hlofuse"])
