"""Index edge cases as XLA defines them, checked against jax.jit on the interpreter and the cpu
backend: u64 start indices at or above 2^63 clamp to the largest valid start (dynamic-slice,
dynamic-update-slice, gather), and a scatter index near 2^63 drops the update (no overflow)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
import pytest
from jax import lax

from jax_oracle import BACKENDS, run_on, x64  # noqa: F401  (x64: an autouse fixture)


def check(f: Callable[..., Any], *args: np.ndarray, backends: Sequence[str] = BACKENDS) -> None:
    want = jax.tree_util.tree_leaves(jax.jit(f)(*args))
    for backend in backends:
        got = run_on(backend, f, args)
        assert len(got) == len(want), backend
        for g, w in zip(got, want, strict=True):
            w = np.asarray(w)
            assert g.shape == w.shape and g.dtype == w.dtype, backend
            np.testing.assert_array_equal(g, w, err_msg=backend)


BIG = [2**63, 2**63 + 5, 2**64 - 1, 2**63 - 1, 3]
X = np.arange(24, dtype=np.float32).reshape(4, 6)


@pytest.mark.parametrize("i", BIG)
def test_dynamic_slice_u64(i: int) -> None:
    check(lambda x, s: lax.dynamic_slice(x, (s, np.uint64(1)), (2, 3)), X, np.uint64(i))


@pytest.mark.parametrize("i", BIG)
def test_dynamic_update_slice_u64(i: int) -> None:
    upd = -np.ones((2, 3), np.float32)
    check(lambda x, u, s: lax.dynamic_update_slice(x, u, (np.uint64(0), s)), X, upd, np.uint64(i))


@pytest.mark.parametrize("i", BIG)
def test_gather_u64(i: int) -> None:
    idx = np.array([[i, 1], [1, i]], dtype=np.uint64)
    dn = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                    start_index_map=(0, 1))
    check(lambda x, j: lax.gather(x, j, dn, (1, 3), mode="clip"), X, idx)


@pytest.mark.parametrize("i", [2**63 - 1, 2**63 - 2, -(2**63), 2])
@pytest.mark.parametrize("op", ["add", "set", "mul"])
def test_scatter_huge_index_dropped(i: int, op: str) -> None:
    idx = np.array([[i], [1]], dtype=np.int64)
    upd = np.array([[10.0, 20.0], [30.0, 40.0]], dtype=np.float32)
    x = np.ones((4, 2), np.float32)
    fn = {"add": lambda a, j, u: a.at[j[:, 0]].add(u, mode="drop"),
          "set": lambda a, j, u: a.at[j[:, 0]].set(u, mode="drop"),
          "mul": lambda a, j, u: a.at[j[:, 0]].multiply(u, mode="drop")}[op]
    check(fn, x, idx, upd)


def test_scatter_u64_index() -> None:
    idx = np.array([[2**63 + 1], [2]], dtype=np.uint64)
    upd = np.array([[10.0, 20.0], [30.0, 40.0]], dtype=np.float32)
    check(lambda a, j, u: a.at[j[:, 0]].add(u, mode="drop"), np.ones((4, 2), np.float32), idx,
          upd)
