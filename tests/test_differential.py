"""Differential suite: the reference interpreter against `jax.jit` on every program in
tests/programs.py.

Each program is lowered with `jax.jit(fn, keep_unused=True).lower(*args).as_text(dialect="hlo",
debug_info=True)`, parsed with `hlofuse.text.parse`, run by the interpreter, and compared leaf by
leaf with jax.jit's outputs: exactly for integer and bool results, with the program's
`rtol`/`atol` for floats (nan positions must agree).

Why float results may differ from XLA's CPU backend (why a program loosens its tolerance);
the interpreter computes every float op in f64 and rounds once to the result type:

| op(s)                                  | XLA CPU                            | typical gap        |
|----------------------------------------|------------------------------------|--------------------|
| add, sub, mul, div, sqrt, convert     | correctly rounded                  | exact              |
| exp, log, tanh, sin, cos, tan, expm1,  | polynomial approximations in f32   | a few ulp          |
| log1p, atan2, power, cbrt, rsqrt       |                                    | (~2e-7..5e-7 rel.) |
| logistic                               | expanded to exp/tanh form          | a few ulp          |
| erf                                    | rational approximation             | ~1e-7 absolute     |
| reduce (sum, product), reduce-window   | accumulates in the element type    | ~n ulp relative    |
| dot, convolution                       | f32 (Eigen) blocked accumulation   | ~k ulp relative    |
| chains of f16 / bf16 ops               | may keep f32 between fused ops     | 1 ulp of the type  |
| any op on subnormal inputs or results  | flushes subnormals to zero         | not comparable:    |
|                                        | (DAZ/FTZ); the interpreter keeps   | programs avoid     |
|                                        | IEEE subnormals                    | subnormals         |
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from hlofuse.backends import interpreter  # noqa: E402
from hlofuse.text import parse  # noqa: E402
from programs import PROGRAMS, Program, lower_to_hlo  # noqa: E402


def _jax_outputs(p: Program, args: tuple) -> list[np.ndarray]:
    out = jax.jit(p.fn, keep_unused=True)(*args)
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(out)]


def _compare(name: str, got: list[np.ndarray], want: list[np.ndarray], p: Program) -> None:
    assert len(got) == len(want), f"{name}: {len(got)} outputs, jax.jit gave {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        where = f"{name} output {i}"
        assert g.shape == w.shape, f"{where}: shape {g.shape} != {w.shape}"
        assert g.dtype == w.dtype, f"{where}: dtype {g.dtype} != {w.dtype}"
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=where)
        else:
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            np.testing.assert_array_equal(np.isnan(g64), np.isnan(w64), err_msg=where + " (nan)")
            np.testing.assert_allclose(g64, w64, rtol=p.rtol, atol=p.atol, err_msg=where)


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_interpreter_matches_jax(program: Program) -> None:
    args = tuple(np.asarray(a) for a in program.make_args())
    module = parse(lower_to_hlo(program))
    got = interpreter.run(module, *args)
    _compare(program.name, got, _jax_outputs(program, args), program)
