"""f32 tanh is XLA's CPU approximation (vmath.py): on a host with FMA, the same bits as
jax.jit's tanh, vector loops and scalar tails alike."""

from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.backends.cpu import host_target

jax = pytest.importorskip("jax")
jnp = jax.numpy


@pytest.mark.skipif(host_target.detect().name not in ("avx2", "avx512", "neon"),
                    reason="XLA's tanh without FMA rounds every product; compared with FMA only")
def test_tanh_is_jax_jits_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(200_003).astype(np.float32) * s
                        for s in (1e-3, 0.1, 1.0, 4.0, 9.0)]
                       + [np.array([0.0, -0.0, 3.9e-4, 4e-4, 7.9, 8.0, -8.0, np.inf, -np.inf],
                                   np.float32)])
    got = np.asarray(hlofuse.jit(jnp.tanh, backend="cpu")(x))
    want = np.asarray(jax.jit(jnp.tanh)(x))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.isnan(np.asarray(hlofuse.jit(jnp.tanh, backend="cpu")(np.float32(np.nan))))
