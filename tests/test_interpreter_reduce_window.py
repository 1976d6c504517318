"""The interpreter's reduce-window reads its padding without building it: a window over f32[4]
padded by 2^28 runs in a few KiB (values checked against numpy on the padded array, built for
small paddings only), padding and base-dilation holes contribute nothing (as in jax.jit: the
init is folded in once per window, `test_reduce_window_padding.py`), and a reduce-window whose
work (window positions x outputs) is beyond `MAX_WINDOW_WORK` stops with a LimitError naming
the instruction before it allocates anything."""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest

from hlofuse.backends import interpreter
from hlofuse.backends.interpreter.reductions import MAX_WINDOW_WORK
from hlofuse.errors import InterpreterLimitError, LimitError
from hlofuse.text import parse
from interpreter_helpers import f32, run

BIG = 1 << 28

REDUCERS = {"add": np.add, "maximum": np.maximum, "multiply": np.multiply}
IDENTITY = {np.add: 0.0, np.maximum: -np.inf, np.multiply: 1.0}


def _module(dims: tuple[int, ...], window: str, op: str = "add", init: str = "0") -> str:
    """A reduce-window of f32[dims] by `op` from `init`; its shape is inferred (short form)."""
    shape = f"f32[{','.join(map(str, dims))}]"
    return f"""
r {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] {op}(a, b)
}}
ENTRY e {{
  x = {shape} parameter(0)
  z = f32[] constant({init})
  ROOT w = reduce-window(x, z), window={{{window}}}, to_apply=r
}}
"""


def _numpy(x: np.ndarray, init: float, ufunc: np.ufunc, size: list[int], stride: list[int],
           pad: list[tuple[int, int]], base: list[int]) -> np.ndarray:
    """reduce-window on the padded array built in memory (small paddings only): padding and
    base-dilation holes hold the reducer's identity (they contribute nothing), each window
    folded in row-major order into the init value."""
    neutral = IDENTITY[ufunc]
    dilated_dims = [(n - 1) * b + 1 if n else 0 for n, b in zip(x.shape, base)]
    dilated = np.full(dilated_dims, neutral, np.float64)
    dilated[tuple(slice(None, None, b) for b in base)] = x
    padded = np.pad(dilated, [(max(lo, 0), max(hi, 0)) for lo, hi in pad],
                    constant_values=neutral)  # then negative padding crops
    padded = padded[tuple(slice(-min(lo, 0), n + min(hi, 0) if n + min(hi, 0) > 0 else 0)
                          for (lo, hi), n in zip(pad, padded.shape))]
    out = [(p - s) // st + 1 if p >= s else 0 for p, s, st in zip(padded.shape, size, stride)]
    result = np.full(out, init, np.float64)
    for o in itertools.product(*map(range, out)):
        for k in itertools.product(*map(range, size)):
            result[o] = ufunc(result[o], padded[tuple(a * st + b for a, st, b in
                                                      zip(o, stride, k))])
    return result.astype(np.float32)


def _peak(fn) -> tuple[object, int]:
    tracemalloc.start()
    try:
        value = fn()
        return value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("op,init,expect", [
    ("add", "0", [0.0, 10.0, 0.0]),         # windows wholly in padding give the init value
    ("maximum", "-inf", [-np.inf, 4.0, -np.inf]),
    ("add", "1", [1.0, 11.0, 1.0]),         # non-identity init: folded once per window
])
def test_padding_2_to_28_runs_in_small_memory(op: str, init: str, expect: list[float]) -> None:
    # f32[4] padded by 2^28 on both sides (2^29 + 4 positions), windows of 5 every 2^28 - 1
    text = _module((4,), f"size=5 stride={BIG - 1} pad={BIG}_{BIG}", op, init)
    module = parse("HloModule t\n" + text)
    value, peak = _peak(lambda: interpreter.run(module, f32(1, 2, 3, 4))[0])
    assert np.asarray(value).tolist() == expect
    assert peak < 8 << 20, peak  # the padded operand alone would be 2 GiB


def test_huge_padding_agrees_with_a_small_padding_equivalent() -> None:
    """Padding 2^28 with stride 2^28 reads the same windows as padding 2 with stride 2 over the
    data (the windows that touch it start at the same offsets relative to it)."""
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    small = run(_module((2, 3), "size=2x3 stride=1x2 pad=1_1x2_2"), x)[0]
    big = run(_module((2, 3), f"size=2x3 stride=1x{BIG} pad=1_1x{BIG}_{BIG}"),
              x)[0]
    # columns: small reads offsets -2, 0, 2 of the data; big reads -2^28, 0, 2^28
    assert np.array_equal(big[:, 1], small[:, 1])
    assert np.array_equal(big[:, [0, 2]], np.zeros((3, 2), np.float32))


@pytest.mark.parametrize("seed", range(12))
def test_matches_numpy_on_the_padded_array(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 3))
    dims = tuple(int(d) for d in rng.integers(0, 5, rank))
    size = [int(s) for s in rng.integers(1, 4, rank)]
    stride = [int(s) for s in rng.integers(1, 3, rank)]
    pad = [tuple(int(p) for p in rng.integers(-1, 4, 2)) for _ in range(rank)]
    base = [int(b) for b in rng.integers(1, 3, rank)]
    op = ["add", "maximum", "multiply"][seed % 3]
    init = [0.0, 1.0, -np.inf, 2.0][seed % 4] if op != "multiply" else [1.0, 2.0][seed % 2]
    x = rng.standard_normal(dims).astype(np.float32)
    expect = _numpy(x, init, REDUCERS[op], size, stride, pad, base)
    window = (f"size={'x'.join(map(str, size))} stride={'x'.join(map(str, stride))} "
              f"pad={'x'.join(f'{lo}_{hi}' for lo, hi in pad)} "
              f"lhs_dilate={'x'.join(map(str, base))}")
    got = run(_module(dims, window, op, str(init)), x)[0]
    assert got.shape == expect.shape
    np.testing.assert_allclose(got, expect, rtol=1e-6)


def test_huge_work_raises_limit_error_naming_the_instruction() -> None:
    # 2^26 outputs of 2048-wide windows: 2^37 element steps, past MAX_WINDOW_WORK (2^36); the
    # output itself (256 MiB) is within the allocation limit, so only the work bound stops it
    pad = 1 << 25
    n_out = 4 + 2 * pad - 2048 + 1
    assert n_out * 2048 > MAX_WINDOW_WORK
    text = _module((4,), f"size=2048 pad={pad}_{pad}")
    with pytest.raises(LimitError) as info:
        _peak(lambda: run(text, f32(1, 2, 3, 4)))
    assert isinstance(info.value, InterpreterLimitError)
    assert "instruction w in e" in str(info.value)
    assert "MAX_WINDOW_WORK" in str(info.value)


def test_huge_window_with_non_identity_init_raises_limit_error() -> None:
    # 2^28 + 5 outputs whose windows of 2^28 positions cannot be told apart from ones that read
    # data without scanning them: the Python loop would run for hours, so the work bound
    # stops it at once
    text = _module((4,), f"size={BIG} pad={BIG}_{BIG}", "add", "1")
    with pytest.raises(InterpreterLimitError, match="instruction w in e"):
        run(text, f32(1, 2, 3, 4))


def test_huge_window_with_identity_init_skips_the_padding() -> None:
    # the same window with init 0: only the 4 offsets that read data are visited
    text = _module((4,), f"size={BIG} stride={BIG} pad={BIG}_{BIG}")
    got = run(text, f32(1, 2, 3, 4))[0]
    assert got.tolist() == [0.0, 10.0]
