"""hlofuse.jit's path through XLA (frontends/jax_ffi.py): a compiled module runs as one XLA FFI
custom call inside jax.jit of a thin wrapper. Outputs are jax.jit's (dtypes, weak types, keys,
fresh buffers every call), signatures the custom call cannot run take the direct path, and the
handler refuses calls that name no live executable or pass other buffers."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import hlofuse  # noqa: E402
from hlofuse.backends import cpu  # noqa: E402
from hlofuse.errors import AllocationError, InputError  # noqa: E402
from hlofuse.frontends import jax_ffi  # noqa: E402
from hlofuse.text import parse  # noqa: E402

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")


def _leaves_alike(got, want) -> None:  # type: ignore[no-untyped-def]
    g, w = jax.tree_util.tree_flatten(got), jax.tree_util.tree_flatten(want)
    assert g[1] == w[1]
    for a, b in zip(g[0], w[0], strict=True):
        assert type(a) is type(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert getattr(a, "weak_type", None) == getattr(b, "weak_type", None)
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_allclose(np.asarray(a, np.float64) if a.dtype == jnp.bfloat16 else a,
                                   np.asarray(b, np.float64) if b.dtype == jnp.bfloat16 else b,
                                   rtol=1e-6)


def test_a_call_is_one_custom_call_of_the_module() -> None:
    def f(p, x):
        return {k: v * x for k, v in p.items()}, x + 1

    g = hlofuse.jit(f)
    p = {f"w{i}": jnp.full((4, 3), float(i)) for i in range(12)}
    _leaves_alike(g(p, 2.0), jax.jit(f)(p, 2.0))
    assert g._direct is None
    text = g._xla.lower(p, 2.0).as_text()  # type: ignore[union-attr]
    assert text.count("hlofuse_entry") == 1
    assert "multiply" not in text  # (the arithmetic is hlofuse's, inside the custom call)


def test_many_leaves_of_every_kind_are_returned_as_jax_jit_returns_them() -> None:
    def f(xs, s, i, key, flag):
        k1, k2 = jax.random.split(key)
        return ([x * s + i for x in xs], s * 2, i + 1, k1, jax.random.normal(k2, (3,)),
                ~flag, xs[0].astype(jnp.bfloat16), jnp.int8(3) * xs[1].astype(jnp.int8),
                xs[2].astype(jnp.complex64) * 1j)

    xs = [jnp.linspace(0.0, 1.0, 5) + k for k in range(40)]
    args = (xs, 1.5, 3, jax.random.key(7), np.array([True, False]))
    g = hlofuse.jit(f)
    _leaves_alike(g(*args), jax.jit(f)(*args))
    # numpy inputs, a 64-bit array (canonicalised) and a strong scalar: a new signature
    args = ([np.asarray(x, np.float64) for x in xs], np.float32(1.5), 3, jax.random.key(1),
            np.array([False, False]))
    _leaves_alike(g(*args), jax.jit(f)(*args))
    assert g._direct is None and len(g._cache) == 2


def test_outputs_are_fresh_buffers_every_call() -> None:
    g = hlofuse.jit(lambda x: (x * 2, jnp.sum(x)))
    big = np.arange(1 << 16, dtype=np.float32)
    first, total = g(big)
    for k in range(1, 4):
        g(big + k)
    np.testing.assert_array_equal(np.asarray(first), big * 2)
    assert float(total) == float(big.sum())


def test_calls_from_threads_agree() -> None:
    g = hlofuse.jit(lambda x, y: (x @ y, jnp.tanh(x).sum()))
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    want = jax.jit(lambda x, y: (x @ y, jnp.tanh(x).sum()))(x, x + 1)
    g(x, x + 1)
    bad: list[str] = []

    def work() -> None:
        for _ in range(20):
            got = g(x, x + 1)
            if not (np.allclose(got[0], want[0], rtol=1e-4, atol=1e-4)
                    and np.allclose(got[1], want[1], rtol=1e-5)):
                bad.append("mismatch")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_signatures_the_custom_call_cannot_run_take_the_direct_path() -> None:
    def f(x, n):
        if n == 0:
            return ()  # no output: nothing for XLA to keep the custom call for
        if n == 1:
            return x.astype(jnp.int4)  # a sub-byte output
        return x * n

    g = hlofuse.jit(f, static_argnums=1)
    x = jnp.arange(4, dtype=jnp.int8)
    for n in (0, 1, 3, 0, 1, 3):
        _leaves_alike(g(x, n), jax.jit(f, static_argnums=1)(x, n))
    assert g._direct is not None
    assert sorted(static[0][2] for _, static in g._direct) == [0, 1]


def test_the_interpreter_backend_never_goes_through_xla() -> None:
    g = hlofuse.jit(lambda x: x + 1, backend="interpreter")
    _leaves_alike(g(jnp.ones(3)), jnp.ones(3) + 1)
    assert g._xla is False


def test_input_errors_still_name_the_argument() -> None:
    g = hlofuse.jit(lambda d: d["a"] * 2)
    g({"a": jnp.ones(2)})
    with pytest.raises(InputError, match=r"args\[0\]\['a'\]"):
        g({"a": "text"})


_ADD = """HloModule add
ENTRY e {
  x = f32[8] parameter(0)
  y = f32[8] parameter(1)
  ROOT s = f32[8] add(x, y)
}
"""


def _entry() -> jax_ffi.NativeEntry:
    assert jax_ffi.available()
    return jax_ffi.NativeEntry(cpu.compile_module(parse(_ADD)))


def _call(handle: int, key: int, *args):  # type: ignore[no-untyped-def]
    out = jax.ShapeDtypeStruct((8,), jnp.float32)
    return jax.jit(lambda *a: jax.ffi.ffi_call(jax_ffi.TARGET, out)(
        *a, handle=np.int64(handle), key=np.int64(key)))(*args)


def test_the_handler_runs_a_registered_executable() -> None:
    entry = _entry()
    x = jnp.arange(8, dtype=jnp.float32)
    np.testing.assert_array_equal(_call(entry.handle, entry.key, x, x), np.asarray(x) * 2)


def test_the_handler_refuses_calls_that_name_no_live_executable() -> None:
    entry = _entry()
    x = jnp.ones(8, jnp.float32)
    with pytest.raises(Exception, match="names no live compiled function"):
        _call(entry.handle, entry.key + 1, x, x)  # not this executable's key
    with pytest.raises(Exception, match="names no live compiled function"):
        _call(1 << 40, entry.key + 1, x, x)  # no such handle, no such key
    handle, key = entry.handle, entry.key
    del entry
    gc.collect()
    with pytest.raises(Exception, match="names no live compiled function"):
        _call(handle, key, x, x)


def test_the_handler_finds_the_same_code_under_another_handle() -> None:
    # (what an executable jax kept from another registration, e.g. in its persistent cache,
    # names: the key is the library's content, so any live registration of it runs the call)
    first, second = _entry(), _entry()
    if first.key != second.key:
        pytest.skip("the library has no content key here")
    x = jnp.arange(8, dtype=jnp.float32)
    handle = first.handle
    del first
    gc.collect()
    np.testing.assert_array_equal(_call(handle, second.key, x, x), np.asarray(x) * 2)


def test_the_handler_refuses_other_buffers() -> None:
    entry = _entry()
    with pytest.raises(Exception, match="operand of the custom call is not the array"):
        _call(entry.handle, entry.key, jnp.ones(8, jnp.float32), jnp.ones(4, jnp.float32))
    with pytest.raises(Exception, match="operand or result count"):
        _call(entry.handle, entry.key, jnp.ones(8, jnp.float32))
    with pytest.raises(Exception, match="operand of the custom call is not the array"):
        _call(entry.handle, entry.key, jnp.ones(8, jnp.float32), jnp.ones(8, jnp.int16))


def test_a_failed_status_becomes_the_executables_error() -> None:
    entry = _entry()
    err = jax_ffi.failure(ValueError(f"INTERNAL: hlofuse status 1 (handle {entry.handle}): "
                                     "the compiled function failed"))
    assert isinstance(err, AllocationError) and "work arena" in str(err)
    assert jax_ffi.failure(ValueError("INTERNAL: something else")) is None


def test_xla_call_path_keeps_freed_heap_memory_unless_told_not_to(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """XLA runs hlofuse.jit's custom call inline (a custom call is "cheap" to its cost model),
    so its result buffers come from glibc's main arena, which trims and re-faults them every
    call unless freed memory is kept (backends/cpu/heap.py). Loading the handler sets glibc's
    thresholds; HLOFUSE_MALLOC=default leaves them; a bad value is a ConfigError."""
    import os
    import platform
    import subprocess
    import sys

    from hlofuse.backends.cpu import heap
    from hlofuse.errors import ConfigError

    code = ("import hlofuse, jax.numpy as jnp\n"
            "from hlofuse.backends.cpu import heap\n"
            "f = hlofuse.jit(lambda x: x * 2)\n"
            "f(jnp.ones(4))\n"
            "print(heap._done)\n")
    for value, want in (("", platform.libc_ver()[0] == "glibc"), ("default", False)):
        env = {**os.environ, "HLOFUSE_MALLOC": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip() == f"[{want}]", (value, out.stdout, out.stderr[-2000:])
    # a result of 32 MiB or more: glibc would map it fresh (and fault every page) each call
    big = ("import resource, jax, jax.numpy as jnp, hlofuse\n"
           "f = hlofuse.jit(lambda x: x * 2)\n"
           "x = jnp.ones(10_000_000, jnp.float32)\n"
           "for _ in range(3): jax.block_until_ready(f(x))\n"
           "def faults():\n"
           "    r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
           "    for _ in range(5): jax.block_until_ready(f(x))\n"
           "    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0) // 5\n"
           "print(min(faults() for _ in range(4)))\n")
    if platform.libc_ver()[0] == "glibc":
        out = subprocess.run([sys.executable, "-c", big], env={**os.environ, "HLOFUSE_MALLOC": ""},
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        # faults a call over the best of four windows of five calls: without M_MMAP_MAX = 0,
        # 9,766 in every window (each call faults every page of the result); with it, 0 (some
        # runs have a window where one call maps the result afresh: 1,953)
        assert int(out.stdout.strip()) < 1000, out.stdout
    monkeypatch.setenv("HLOFUSE_MALLOC", "sometimes")
    monkeypatch.setattr(heap, "_done", [])
    with pytest.raises(ConfigError, match="HLOFUSE_MALLOC"):
        heap.keep_freed_memory()
