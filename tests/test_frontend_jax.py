"""The JAX frontend: from_jax lowers with stack-frame tables, jit handles pytrees and statics."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import hlofuse  # noqa: E402
from hlofuse.errors import InputError  # noqa: E402
from hlofuse.ir.opcodes import Opcode  # noqa: E402


def scaled_sin(x):
    y = jnp.sin(x)  # the line the sine must point back to
    return y * 2.0


def test_from_jax_keeps_source_lines() -> None:
    module = hlofuse.from_jax(scaled_sin, np.ones(8, np.float32))
    sines = [i for i in module.all_instructions() if i.opcode is Opcode.SIN]
    assert len(sines) == 1
    loc = module.source_location(sines[0])
    assert loc is not None
    assert loc.file.endswith("test_frontend_jax.py")
    src_line = inspect.getsource(scaled_sin).splitlines()[1]
    first = inspect.getsourcelines(scaled_sin)[1]
    assert loc.line == first + 1, (loc, src_line)
    assert loc.function == "scaled_sin"


def test_from_jax_module_runs_like_jax() -> None:
    x = np.linspace(-3, 3, 8, dtype=np.float32)
    exe = hlofuse.compile(hlofuse.from_jax(scaled_sin, x))
    (out,) = exe(x)
    np.testing.assert_allclose(out, np.asarray(jax.jit(scaled_sin)(x)), rtol=1e-6)


def test_jit_pytrees_in_and_out() -> None:
    def update(params, grads, lr):
        new = {k: params[k] - lr * grads[k] for k in params}
        return new, sum(jnp.sum(v) for v in new.values())

    params = {"w": np.ones((3, 2), np.float32), "b": np.zeros(2, np.float32)}
    grads = {"w": np.full((3, 2), 0.5, np.float32), "b": np.ones(2, np.float32)}
    lr = np.float32(0.1)
    new, total = hlofuse.jit(update)(params, grads, lr)
    ref_new, ref_total = jax.jit(update)(params, grads, lr)
    assert set(new) == {"w", "b"}
    for k in new:
        np.testing.assert_allclose(new[k], ref_new[k], rtol=1e-6)
    np.testing.assert_allclose(total, ref_total, rtol=1e-6)


def test_jit_static_argnums_and_cache() -> None:
    calls = []

    def power(x, n):
        calls.append(n)
        return x**n

    f = hlofuse.jit(power, static_argnums=1)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(f(x, 3), x**3)
    np.testing.assert_allclose(f(x, 3), x**3)
    np.testing.assert_allclose(f(x, 2), x**2)
    assert len(f._cache) == 2  # one lowering per (shape, static value) signature


def test_jit_with_pipeline_keeps_results() -> None:
    def loop(x):
        return jax.lax.fori_loop(0, 5, lambda i, v: v * 1.5 + i, x)

    x = np.arange(6, dtype=np.float32)
    f = hlofuse.jit(loop, pipeline="simplify")
    np.testing.assert_allclose(f(x), jax.jit(loop)(x), rtol=1e-6)
    assert not any(i.opcode is Opcode.CALL for i in f.lower(x).all_instructions())


def test_jit_decorator_with_options() -> None:
    @hlofuse.jit(static_argnums=(1,))
    def head(x, k):
        return x[:k]

    np.testing.assert_array_equal(head(np.arange(5, dtype=np.int32), 2), [0, 1])


def test_typed_prng_keys_are_rejected_clearly() -> None:
    key = jax.random.key(0)
    with pytest.raises(InputError, match="key_data"):
        hlofuse.jit(lambda k: jax.random.uniform(k, (2,)))(key)


# -- backend choice ------------------------------------------------------------------------------


def test_jit_default_backend_is_cpu_when_a_compiler_exists() -> None:
    from hlofuse.backends import cpu

    def update(params, grads, lr):
        new = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
        return new, sum(jnp.sum(v) for v in jax.tree_util.tree_leaves(new))

    params = {"w": np.ones((3, 2), np.float32), "b": np.zeros(2, np.float32)}
    grads = {"w": np.full((3, 2), 0.5, np.float32), "b": np.ones(2, np.float32)}
    f = hlofuse.jit(update)
    new, total = f(params, grads, np.float32(0.1))
    want_new, want_total = jax.jit(update)(params, grads, np.float32(0.1))
    np.testing.assert_allclose(new["w"], want_new["w"], rtol=1e-6)
    np.testing.assert_allclose(new["b"], want_new["b"], rtol=1e-6)
    np.testing.assert_allclose(total, want_total, rtol=1e-6)
    expected = "cpu" if cpu.available() else "interpreter"
    assert f.backend_for(params, grads, np.float32(0.1)) == expected


def test_jit_without_compiler_uses_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv("PATH", "")
    f = hlofuse.jit(scaled_sin)
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    np.testing.assert_allclose(f(x), np.sin(x) * 2, rtol=1e-6)
    assert f.backend_for(x) == "interpreter"
    with pytest.raises(hlofuse.CompileError, match="interpreter"):
        hlofuse.jit(scaled_sin, backend="cpu")(x)
