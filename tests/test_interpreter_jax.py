"""The reference interpreter against jax.jit on small programs for ops the program registry
(tests/programs.py) does not reach: convolution in its general forms, select-and-scatter,
reduce-precision, batched gather/scatter, sorts, reduce-window variants, f16/bf16 and
rng-bit-generator based keys.

Each case lowers a JAX function to HLO text, runs it through `hlofuse.text.parse` and the
interpreter, and compares with jax.jit: integers and bools exactly, floats to `rtol`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from hlofuse.backends import interpreter  # noqa: E402
from hlofuse.text import parse  # noqa: E402


def check(fn: Callable[..., Any], *args: Any, rtol: float = 1e-6, atol: float = 1e-6) -> str:
    """Run `fn` through jax.jit and through the interpreter; compare. Returns the HLO text."""
    args = tuple(np.asarray(a) for a in args)
    text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
    got = interpreter.run(parse(text), *args)
    want = [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape and g.dtype == w.dtype, (i, g.shape, w.shape, g.dtype, w.dtype)
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                       atol=atol, err_msg=f"output {i}")
    return text


def normal(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ----- convolution ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "strides,padding,lhs_dil,rhs_dil,groups",
    [
        ((1, 1), "VALID", (1, 1), (1, 1), 1),
        ((2, 1), "SAME", (1, 1), (1, 1), 1),
        ((1, 2), ((1, 2), (0, 1)), (2, 1), (1, 2), 1),
        ((1, 1), "SAME", (1, 1), (2, 2), 2),
        ((1, 1), ((-1, 1), (2, 0)), (1, 1), (1, 1), 4),
    ],
)
def test_conv_general_dilated(strides, padding, lhs_dil, rhs_dil, groups) -> None:
    x = normal(0, 2, 4, 7, 6)  # NCHW
    k = normal(1, 8, 4 // groups, 3, 2)  # OIHW

    def f(x, k):
        return lax.conv_general_dilated(x, k, strides, padding, lhs_dilation=lhs_dil,
                                        rhs_dilation=rhs_dil, feature_group_count=groups)

    assert "convolution(" in check(f, x, k, rtol=1e-5, atol=1e-5)


def test_conv_nhwc_and_gradients_with_batch_groups() -> None:
    x = normal(2, 3, 6, 5, 4)  # NHWC
    k = normal(3, 3, 3, 2, 4)  # HWIO, 2 feature groups

    def loss(x, k):
        y = lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO",
                                     "NHWC"), feature_group_count=2)
        return jnp.sum(jnp.tanh(y))

    text = check(jax.grad(loss, argnums=(0, 1)), x, k, rtol=1e-4, atol=1e-5)
    assert "batch_group_count=2" in text or "feature_group_count" in text


def test_conv1d_integer() -> None:
    x = np.arange(2 * 3 * 9, dtype=np.int32).reshape(2, 3, 9) % 7 - 3
    k = np.arange(4 * 3 * 3, dtype=np.int32).reshape(4, 3, 3) % 5 - 2
    check(lambda x, k: lax.conv(x, k, (2,), "SAME"), x, k)


# ----- windows ----------------------------------------------------------------------------


def test_max_pool_gradient_uses_select_and_scatter() -> None:
    x = normal(4, 2, 6, 7)

    def loss(x):
        y = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 2), (1, 2, 2), "SAME")
        return jnp.sum(y * y)

    text = check(jax.grad(loss), x, rtol=1e-6)
    assert "select-and-scatter(" in text


def test_reduce_window_variants() -> None:
    x = normal(5, 3, 10)

    def f(x):
        avg = lax.reduce_window(x, 0.0, lax.add, (2, 3), (1, 2), ((1, 0), (2, 1)))
        dil = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2), (1, 1), "VALID",
                                base_dilation=(1, 2), window_dilation=(1, 2))
        return avg, dil, jnp.cumsum(x, axis=1), lax.cummax(x, axis=1, reverse=True)

    check(f, x, rtol=1e-5, atol=1e-6)


# ----- precision, small floats ------------------------------------------------------------


def test_reduce_precision() -> None:
    x = np.concatenate([normal(6, 50) * 1e3, normal(7, 20) * 1e-6,
                        np.array([np.inf, -np.inf, 0.0, -0.0, 1e30, 65504, 65520], np.float32)])

    def f(x):
        return (lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10),
                lax.reduce_precision(x, exponent_bits=8, mantissa_bits=7),
                lax.reduce_precision(x, exponent_bits=4, mantissa_bits=3))

    check(f, x, rtol=0, atol=0)


def test_reduce_precision_of_narrow_types() -> None:
    import ml_dtypes

    x = normal(15, 64) * 300

    def f(h, b):
        return (lax.reduce_precision(h, exponent_bits=4, mantissa_bits=3),
                lax.reduce_precision(b, exponent_bits=5, mantissa_bits=2))

    check(f, x.astype(np.float16), x.astype(ml_dtypes.bfloat16), rtol=0, atol=0)


def test_bf16_and_f16_arithmetic() -> None:
    import ml_dtypes

    a = normal(8, 64).astype(ml_dtypes.bfloat16)
    b = normal(9, 64).astype(np.float16)

    def f(a, b):
        return (a * a + a, jnp.exp(a), b / (b + 3), jnp.sum(b), (a.astype(jnp.float32) * 3),
                jnp.maximum(a, 0).astype(jnp.float16) - b)

    check(f, a, b, rtol=1e-2, atol=1e-2)


# ----- gather, scatter, sort --------------------------------------------------------------


def test_batched_gather_and_scatter() -> None:
    x = normal(10, 4, 6, 3)
    idx = np.array([[0, 5, 2], [1, 1, 1], [5, 0, 3], [2, 4, 9]], np.int32)
    upd = normal(11, 4, 3, 3)

    def f(x, idx, upd):
        taken = jnp.take_along_axis(x, idx[:, :, None], axis=1, mode="clip")
        vg = jax.vmap(lambda row, i: row[i])(x, idx)
        vs = jax.vmap(lambda row, i, u: row.at[i].add(u, mode="drop"))(x, idx, upd)
        vset = jax.vmap(lambda row, i, u: row.at[i].set(u, mode="drop"))(x, idx, upd)
        return taken, vg, vs, vset

    check(f, x, idx, upd, rtol=1e-6)


def test_scatter_variants() -> None:
    x = normal(12, 5, 4)
    idx = np.array([[0, 1], [4, 3], [0, 1], [2, 0]], np.int32)
    u = normal(13, 4)

    def f(x, idx, u):
        return (x.at[idx[:, 0], idx[:, 1]].add(u),
                x.at[idx[:, 0], idx[:, 1]].max(u),
                x.at[idx[:, 0], idx[:, 1]].mul(u),
                x.at[idx[:, 0]].min(u[:, None]))

    check(f, x, idx, u, rtol=1e-6)


def test_sorts() -> None:
    x = np.array([3.0, np.nan, -0.0, 0.0, -np.inf, 2.0, np.nan, 1.0, -1.0], np.float32)
    k = np.array([2, 1, 2, 0, 1, 2, 0, 1, 2], np.int32)
    m = normal(14, 5, 33)

    def f(x, k, m):
        return (jnp.sort(x), jnp.argsort(x), jnp.sort(x, descending=True),
                lax.sort((k, x), num_keys=2), jnp.sort(m, axis=0), jnp.argsort(m, axis=1),
                jnp.argsort(k, stable=True))

    check(f, x, k, m, rtol=0, atol=0)


def test_top_k_total_order() -> None:
    x = np.array([[1, np.nan, -0.0, 0.0, 3, 3, -np.inf, np.inf, -np.nan, 2]], np.float32)
    i = np.array([[5, 1, 5, -3, 7, 7, 0]], np.int32)
    text = check(lambda x, i: (lax.top_k(x, 10), lax.top_k(-x, 4), lax.top_k(i, 3)), x, i,
                 rtol=0, atol=0)
    assert "topk(" in text


# ----- rng-bit-generator keys -------------------------------------------------------------


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_rbg_keys(impl: str) -> None:
    def f(seed):
        key = jax.random.key(seed, impl=impl)
        k1, k2 = jax.random.split(key)
        return (jax.random.uniform(k1, (5, 3)), jax.random.bits(k2, (7,)),
                jax.random.normal(k2, (4,)))

    text = check(f, np.array(42, np.uint32), rtol=1e-6)
    assert "rng-bit-generator(" in text
