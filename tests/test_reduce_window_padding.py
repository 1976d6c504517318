"""reduce-window folds only the operand elements of a window: padding and base-dilation holes
contribute nothing, as in XLA's CPU backend (jax.jit), which matters when the init is not the
reducer's identity. Both backends against jax.jit."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from tests.jax_oracle import BACKENDS, run_on, x64  # noqa: F401  (x64: autouse fixture)


def _argmax_window(x: np.ndarray) -> tuple:
    def pick(a, b):
        take = (a[0] > b[0]) | ((a[0] == b[0]) & (a[1] < b[1]))
        return lax.select(take, a[0], b[0]), lax.select(take, a[1], b[1])

    idx = jnp.arange(x.shape[0], dtype=jnp.int32)
    return lax.reduce_window((x, idx), (jnp.float32(0.25), jnp.int32(7)), pick, (3,), (1,),
                             [(2, 1)])


CASES = {
    "add_init_1_padding": (
        lambda x: lax.reduce_window(x, np.float32(1.0), lax.add, (3,), (1,), [(1, 1)]),
        np.ones(4, np.float32)),
    "add_init_1_base_dilation": (
        lambda x: lax.reduce_window(x, np.float32(1.0), lax.add, (3,), (1,), [(1, 1)],
                                    base_dilation=(2,)),
        np.ones(4, np.float32)),
    "mul_init_2_2d_dilated": (
        lambda x: lax.reduce_window(x, np.float32(2.0), lax.mul, (2, 3), (1, 2), [(1, 0), (2, 2)],
                                    window_dilation=(1, 2)),
        np.linspace(0.5, 1.5, 30, dtype=np.float32).reshape(5, 6)),
    "add_s32_init_5": (
        lambda x: lax.reduce_window(x, np.int32(5), lax.add, (2, 2), (2, 1), [(1, 1), (0, 1)]),
        np.arange(12, dtype=np.int32).reshape(3, 4)),
    "sum_pool_identity_init": (  # identity init: the unguarded form, same values
        lambda x: lax.reduce_window(x, np.float32(0.0), lax.add, (3, 3), (1, 1), "SAME"),
        np.random.default_rng(0).standard_normal((8, 9)).astype(np.float32)),
    "variadic_argmax_init": (
        _argmax_window, np.array([0.1, -2.0, 0.3, 0.3, -1.0, 0.2], np.float32)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_padding_contributes_nothing(name: str, backend: str) -> None:
    import jax

    f, x = CASES[name]
    want = [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(f)(x))]
    got = run_on(backend, f, [x], pipeline="hlofuse")
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
