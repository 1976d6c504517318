"""Large column reductions cut into blocks of rows that run on threads
(kernel_ir/lower/reduce.py `column_blocks`, passes/parallel.py `written_apart`).

A bias gradient summed over a 65536-row minibatch (with the elementwise gradient it is fused
with as a second output) was one serial loop over the rows. Cut into fixed blocks, each block's
partial row is written to its own row of a shared local and the blocks' rows are folded in
block order after the parallel loop: the result matches the interpreter and does not depend on
the thread count.
"""

from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.backends import interpreter
from hlofuse.backends.kernel_ir.lower import reduce as kreduce
from hlofuse.text import parse

_REDUCERS = {
    "add": "ROOT s = {t}[] add(a, b)",
    "max": "ROOT s = {t}[] maximum(a, b)",
    "min": "ROOT s = {t}[] minimum(a, b)",
}


def _bias_grad(rows: int, cols: int, dtype: str = "f32", op: str = "add",
               init: str = "0") -> str:
    """The tanh gradient of a PPO layer, `dy * (1 - t^2)`, summed over the rows, both returned
    (XLA's multi-output kInput fusion of a bias gradient)."""
    return f"""
region {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  {_REDUCERS[op].format(t=dtype)}
}}
ENTRY e {{
  dy = {dtype}[{rows},{cols}] parameter(0)
  t = {dtype}[{rows},{cols}] parameter(1)
  one = {dtype}[] constant(1)
  ones = {dtype}[{rows},{cols}] broadcast(one), dimensions={{}}
  tt = {dtype}[{rows},{cols}] multiply(t, t)
  d = {dtype}[{rows},{cols}] subtract(ones, tt)
  g = {dtype}[{rows},{cols}] multiply(dy, d)
  z = {dtype}[] constant({init})
  r = {dtype}[{cols}] reduce(g, z), dimensions={{0}}, to_apply=region
  ROOT out = ({dtype}[{cols}], {dtype}[{rows},{cols}]) tuple(r, g)
}}"""


def _args(rows: int, cols: int, dtype: type) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    if np.issubdtype(dtype, np.integer):
        return [rng.integers(-50, 50, (rows, cols)).astype(dtype) for _ in range(2)]
    return [rng.uniform(-1, 1, (rows, cols)).astype(dtype) for _ in range(2)]


def test_bias_gradient_runs_in_parallel_blocks_and_matches() -> None:
    module = parse(_bias_grad(65536, 64))
    args = _args(65536, 64, np.float32)
    want = interpreter.run(module, *args)
    results = []
    for threads in (1, 2, 3):
        exe = hlofuse.compile(module, backend="cpu", threads=threads)
        if threads > 1:
            # the block loop is outlined for the pool and receives the partial rows
            assert "hf_parallel_ptr(" in exe.source and "part0" in exe.source
        got = exe(*args)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-2)
        np.testing.assert_array_equal(got[1], want[1])
        results.append(np.asarray(got[0]))
    assert all(np.array_equal(results[0], r) for r in results[1:])


@pytest.mark.parametrize(("dtype", "np_dtype", "op", "init"), [
    ("f64", np.float64, "add", "0.5"),
    ("s32", np.int32, "add", "7"),
    ("f32", np.float32, "max", "-inf"),
    ("s32", np.int32, "min", "3"),
])
def test_other_reducers_and_types_are_exact_or_close(dtype: str, np_dtype: type, op: str,
                                                     init: str) -> None:
    """The init is folded once, after the blocks (each block starts at the reducer's
    identity): integers and max/min exact, an f64 sum close."""
    rows, cols = 32768, 16
    module = parse(_bias_grad(rows, cols, dtype, op, init))
    assert kreduce.column_blocks(
        [(module.entry.instructions[-2], [])], (rows, cols), [0], cols) == 16
    args = _args(rows, cols, np_dtype)
    want = interpreter.run(module, *args)
    got = hlofuse.compile(module, backend="cpu", threads=2)(*args)
    if np.issubdtype(np_dtype, np.integer) or op != "add":
        np.testing.assert_array_equal(got[0], want[0])
    else:
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_array_equal(got[1], want[1])


def test_what_is_not_cut() -> None:
    """Small reductions, narrow floats (summed in their own type, in order, as the
    interpreter), and reductions whose outermost reduced dimension has no block count keep
    the serial nest."""
    def blocks(text: str, dims: tuple[int, ...], red: list[int], row: int) -> int:
        r = next(i for i in parse(text).entry.instructions if i.opcode.name == "REDUCE")
        return kreduce.column_blocks([(r, [])], dims, red, row)

    assert blocks(_bias_grad(65536, 64), (65536, 64), [0], 64) == 16
    assert blocks(_bias_grad(1024, 64), (1024, 64), [0], 64) == 1  # 65536 elements
    assert blocks(_bias_grad(65536, 64, "f16"), (65536, 64), [0], 64) == 1
    assert blocks(_bias_grad(65537, 64), (65537, 64), [0], 64) == 1  # 65537 is prime


def test_bf16_and_short_reductions_still_match() -> None:
    """Left serial: a bf16 sum keeps its order, a short f32 sum its vector form."""
    for rows, dtype in ((65536, "bf16"), (1000, "f32")):
        module = parse(_bias_grad(rows, 8, dtype))
        rng = np.random.default_rng(1)
        np_dtype = np.float32 if dtype == "f32" else None
        if np_dtype is None:
            import ml_dtypes
            np_dtype = ml_dtypes.bfloat16
        args = [rng.uniform(-1, 1, (rows, 8)).astype(np_dtype) for _ in range(2)]
        want = interpreter.run(module, *args)
        # no pipeline: `simplify` rewrites a long bf16 sum into a tree (XLA's order)
        got = hlofuse.compile(module, pipeline=None, backend="cpu", threads=2)(*args)
        np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))
        if dtype == "bf16":  # summed in bf16, in order: exactly the interpreter's
            np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
        else:  # vector partial sums
            np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-4)
