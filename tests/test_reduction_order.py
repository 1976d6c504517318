"""f16/bf16 reductions and scans associate and round as jax.jit's on CPU.

XLA's CPU compiler cuts sums of narrow floats into windows of 32 (TreeReductionRewriter) and
scans into two levels of 16 (ReduceWindowRewriter), and rounds every bf16/f16 add to the type;
`simplify` does the same rewrites (passes/simplify/tree_reduction.py, scan_rewriter.py) and both
backends accumulate narrow floats in their type, in order. Results equal jax.jit's bit for bit,
except where noted: f16 windows over several dimensions (XLA's own f16 loop order there is not
the row-major one; within JAX's f16 tolerance, 1e-3).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from hlofuse.backends import interpreter
from hlofuse.backends.cpu import build
from hlofuse.errors import CompileError
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from hlofuse.frontends.jax import jit as hjit  # noqa: E402

BF16 = ml_dtypes.bfloat16
# JAX's own test tolerances (jax._src.public_test_util._default_tolerance).
JAX_TOL = {np.dtype(BF16): 1e-2, np.dtype(np.float16): 1e-3, np.dtype(np.float32): 1e-6}


def _uniform(shape: tuple[int, ...], dt: Any, lo: float = 0.0, hi: float = 1.0) -> np.ndarray:
    return np.random.default_rng(len(shape) * 7 + shape[0]).uniform(lo, hi, shape).astype(dt)


def _normal(shape: tuple[int, ...], dt: Any) -> np.ndarray:
    return np.random.default_rng(shape[0]).standard_normal(shape).astype(dt)


def _sum(dims: tuple[int, ...]) -> Callable[[Any], Any]:
    return lambda x: lax.reduce(x, x.dtype.type(0), lax.add, dims)


CASES: list[tuple[str, Callable[[Any], Any], Callable[[Any], np.ndarray], bool]] = [
    # name, function, input for a dtype, bit for bit (else JAX's tolerance)
    ("4096 ones", _sum((0,)), lambda dt: np.ones(4096, dt), True),
    ("rows", _sum((1,)), lambda dt: _uniform((8, 3000), dt), True),
    ("columns", _sum((0,)), lambda dt: _uniform((3000, 8), dt), True),
    ("vector of 100000", _sum((0,)), lambda dt: _uniform((100000,), dt), True),
    ("full 2-D", _sum((0, 1)), lambda dt: _uniform((40, 300), dt), False),
    ("middle of 3-D", _sum((1,)), lambda dt: _uniform((4, 100, 8), dt), True),
    ("max of rows", lambda x: lax.reduce(x, x.dtype.type(-np.inf), lax.max, (1,)),
     lambda dt: _normal((8, 3000), dt), True),
    ("product of rows", lambda x: lax.reduce(x, x.dtype.type(1), lax.mul, (1,)),
     lambda dt: _uniform((4, 3000), dt, 0.98, 1.02), True),
    ("jnp.sum (upcasts)", lambda x: jnp.sum(x), lambda dt: _uniform((5000,), dt), True),
    ("lax.cumsum", lax.cumsum, lambda dt: _uniform((5000,), dt), True),
    ("jnp.cumsum axis 0", lambda x: jnp.cumsum(x, axis=0), lambda dt: _uniform((300, 4), dt),
     True),
    ("reverse cumsum", lambda x: lax.cumsum(x, reverse=True), lambda dt: _uniform((1000,), dt),
     True),
    ("cumlogsumexp", lax.cumlogsumexp, lambda dt: _normal((1000,), dt), True),
    ("cummax", lax.cummax, lambda dt: _normal((1000,), dt), True),
    ("cumprod", lax.cumprod, lambda dt: _uniform((300,), dt, 0.99, 1.01), True),
]


def _check(got: Any, want: Any, exact: bool, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if exact:
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        tol = JAX_TOL[want.dtype]
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol,
                                   atol=tol, err_msg=what)


@pytest.mark.parametrize("dtype", [BF16, np.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_narrow_reductions_match_jax_jit(case: tuple[Any, ...], dtype: Any) -> None:
    name, fn, make, exact = case
    exact = exact or dtype == BF16  # bf16's loops follow the row-major order everywhere
    x = make(dtype)
    want = jax.jit(fn)(x)
    for backend in ("interpreter", "cpu"):
        if backend == "cpu":
            try:
                build.find_compiler()
            except CompileError:
                continue
        _check(hjit(fn, backend=backend)(x), want, exact, f"{name} on {backend}")


def test_bf16_accumulates_in_bf16_without_the_rewrite() -> None:
    """The spec: a bf16 reduce rounds after every add, in order; XLA's windows (the `simplify`
    rewrite) are what keep 4096 ones at 4096. Run as lowered (pipeline None), a running bf16 sum
    stalls at 256 (the old f64 accumulation gave 4096 for the wrong reason)."""
    f = _sum((0,))
    x = np.ones(4096, BF16)
    assert float(hjit(f, backend="interpreter", pipeline=None)(x)) == 256.0
    assert float(hjit(f, backend="interpreter")(x)) == 4096.0
    # 1 + 31 * 2^-9: every add of 2^-9 to 1 rounds back to 1 in bf16 (f32 would give 1.06)
    y = np.array([1.0] + [2.0**-9] * 31, BF16)
    assert float(hjit(f, backend="interpreter", pipeline=None)(y)) == 1.0
    assert float(jax.jit(f)(y)) == 1.0


_TREE = """HloModule m
add {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT r = bf16[] add(a, b)
}
max {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT r = bf16[] maximum(a, b)
}
addf {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
ENTRY e {
  x = bf16[64,1000] parameter(0)
  f = f32[64,1000] parameter(1)
  z = bf16[] constant(0)
  zf = f32[] constant(0)
  s = bf16[64] reduce(x, z), dimensions={1}, to_apply=add
  m = bf16[64] reduce(x, z), dimensions={1}, to_apply=max
  sf = f32[64] reduce(f, zf), dimensions={1}, to_apply=addf
  ROOT t = (bf16[64], bf16[64], f32[64]) tuple(s, m, sf)
}
"""


def test_tree_reduction_rewriter_cuts_narrow_sums_only() -> None:
    module = parse(_TREE)
    run_pipeline(module, "tree-reduction-rewriter")
    windows = [i for i in module.entry.instructions if i.opcode is Opcode.REDUCE_WINDOW]
    assert len(windows) == 1  # the bf16 sum; not the max, not the f32 sum
    (w,) = windows
    assert w.array_shape.dims == (64, 32)
    assert (w.attrs["window"][1].size, w.attrs["window"][1].stride) == (32, 32)
    assert (w.attrs["window"][1].pad_lo, w.attrs["window"][1].pad_hi) == (12, 12)  # kSame


def test_scan_rewriter_keeps_values() -> None:
    """A cumulative sum before and after `reduce-window-rewriter`: integers equal, floats
    within rounding; the rewrite leaves no reduce-window longer than 16."""
    text = """HloModule m
add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT r = s32[] add(a, b)
}
addf {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
ENTRY e {
  x = s32[3,1000] parameter(0)
  f = f32[1000,3] parameter(1)
  z = s32[] constant(0)
  zf = f32[] constant(0)
  c = s32[3,1000] reduce-window(x, z), window={size=1x1000 pad=0_0x999_0}, to_apply=add
  r = f32[1000,3] reduce-window(f, zf), window={size=1000x1 pad=0_999x0_0}, to_apply=addf
  e = s32[3,1001] reduce-window(x, z), window={size=1x1000 pad=0_0x1000_0}, to_apply=add
  ROOT t = (s32[3,1000], f32[1000,3], s32[3,1001]) tuple(c, r, e)
}
"""
    rng = np.random.default_rng(0)
    x = rng.integers(-50, 50, (3, 1000)).astype(np.int32)
    f = rng.uniform(0, 1, (1000, 3)).astype(np.float32)
    before = interpreter.run(parse(text), x, f)
    module = parse(text)
    run_pipeline(module, "simplify")
    windows = [i.attrs["window"] for c in module.computations for i in c.instructions
               if i.opcode is Opcode.REDUCE_WINDOW]
    assert windows and all(w.size <= 16 for win in windows for w in win)
    after = interpreter.run(module, x, f)
    np.testing.assert_array_equal(after[0], np.cumsum(x, axis=1))
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_allclose(after[1], before[1], rtol=1e-5)
    np.testing.assert_array_equal(after[2][:, 0], 0)
    np.testing.assert_array_equal(after[2][:, 1:], before[0])
