"""The `subnormals` setting (`backends/subnormals.py`) against jax.jit, on both backends.

"flush" (the default) must give jax.jit's values bit for bit on the ops where XLA's CPU runtime
flushes (arithmetic, comparisons, conversions that compute, reductions) and where it does not
(bit moves: negate, abs, select, bitcast-convert, f32 <-> bf16, a returned parameter); "keep"
must give IEEE 754's (numpy's). The cpu backend's mode must stay inside its call: the caller's
numpy keeps gradual underflow, and pool workers run each job in the caller's mode.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from hlofuse.backends.cpu import build
from hlofuse.errors import CompileError, HloError

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from hlofuse.frontends.jax import jit as hjit  # noqa: E402

BACKENDS = ("cpu", "interpreter")
F32_SUB = np.array([1e-40, -1e-40, 1.4e-45, 3e-39, 0.0, -0.0, 1.0, -2.5], np.float32)
F64_SUB = np.array([1e-310, -1e-310, 5e-324, 2e-308, 0.0, -0.0, 1.0, -2.5], np.float64)


def _compiler() -> None:
    try:
        build.find_compiler()
    except CompileError:
        pytest.skip("no C compiler")


def _bits(x: Any) -> np.ndarray:
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}") if x.dtype.kind in "fV" else x


def _same(got: Any, want: Any, what: str) -> None:
    """Bit for bit; for max/min (their name says so) a zero's sign may differ: XLA orders
    -0 < +0 there, hlofuse returns the second operand of a tie, as numpy (not a subnormal
    matter: max(+0, -0) differs the same way)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if what.startswith(("max", "min")) or " max" in what or " min" in what:
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=f"{what}: {got} != {want}")


def _run(fn: Callable[..., Any], backend: str, subnormals: str, *args: np.ndarray) -> Any:
    if backend == "cpu":
        _compiler()
    return hjit(fn, backend=backend, subnormals=subnormals)(*args)


def _cases(x: np.ndarray) -> list[tuple[str, Callable[..., Any], tuple[np.ndarray, ...]]]:
    one, zero = np.ones_like(x), np.zeros_like(x)
    tiny = x.dtype.type(1e-20 if x.dtype == np.float32 else 1e-160)
    return [
        ("x * y (y = 1)", lambda a, b: a * b, (x, one)),
        ("x + y (y = 0)", lambda a, b: a + b, (x, zero)),
        ("x == 0", lambda a: a == 0, (x,)),
        ("x > y (y = 0)", lambda a, b: a > b, (x, zero)),
        ("tiny * tiny", lambda a: a * a, (x * tiny,)),
        ("sqrt", jnp.sqrt, (np.abs(x),)),
        ("max(y, x)", lambda a, b: jnp.maximum(b, a), (x, zero)),
        ("min(x, y)", lambda a, b: jnp.minimum(a, b), (x, zero)),
        ("sign", jnp.sign, (x,)),
        ("floor", jnp.floor, (x,)),
        ("x -> pred", lambda a: a.astype(bool), (x,)),
        ("x -> s32", lambda a: (a * a.dtype.type(1e30)).astype(jnp.int32), (x,)),
        ("sum", lambda a: jnp.sum(a), (np.resize(x[:4], 4096),)),
        ("sum of rows", lambda a: jnp.sum(a, axis=1), (np.resize(x, (16, 300)),)),
        ("dot", lambda a, b: a @ b, (np.resize(x, (8, 8)), np.ones((8, 8), x.dtype))),
        ("negate (kept)", lambda a: -a, (x,)),
        ("abs (kept)", jnp.abs, (x,)),
        ("select (kept)", lambda a, b: jnp.where(b > 0, a, b), (x, one)),
        ("returned (kept)", lambda a: (a, a + 1), (x,)),
        ("bitcast (kept)", lambda a: lax.bitcast_convert_type(
            lax.bitcast_convert_type(a, jnp.int32 if a.dtype == np.float32 else jnp.int64)
            + 1, a.dtype), (x,)),
    ]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_flush_matches_jax_jit(backend: str, dtype: str) -> None:
    x = F32_SUB if dtype == "f32" else F64_SUB
    with jax.enable_x64(dtype == "f64"):
        for name, fn, args in _cases(x):
            want = jax.jit(fn)(*args)
            got = _run(fn, backend, "flush", *args)
            for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want),
                            strict=True):
                _same(g, w, f"{dtype} {name} on {backend}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_flush_conversions_and_bf16_match_jax_jit(backend: str) -> None:
    bf = ml_dtypes.bfloat16
    b = np.array([1e-39, -1e-40, 1e-20, 1.0], bf)
    h = np.array([1e-5, 6e-8, -3e-5, 1.0], np.float16)  # f16 subnormals: never flushed
    cases: list[tuple[str, Callable[..., Any], tuple[np.ndarray, ...]]] = [
        ("f32 -> bf16 (kept)", lambda a: a.astype(jnp.bfloat16), (F32_SUB,)),
        ("bf16 -> f32 (kept)", lambda a: a.astype(jnp.float32), (b,)),
        ("bf16 * 1", lambda a, c: a * c, (b, np.ones(4, bf))),
        ("bf16 tiny * tiny", lambda a: a * a, (b,)),
        ("bf16 max", lambda a, c: jnp.maximum(c, a), (b, np.zeros(4, bf))),
        ("f16 * 1 (kept)", lambda a, c: a * c, (h, np.ones(4, np.float16))),
        ("f16 -> f32 (kept)", lambda a: a.astype(jnp.float32), (h,)),
        ("f32 -> f16 (kept)", lambda a: a.astype(jnp.float16), (h.astype(np.float32),)),
        ("f32 -> f64", lambda a: a.astype(jnp.float64), (F32_SUB,)),
        ("f64 -> f32", lambda a: a.astype(jnp.float32), (np.array([1e-40, 2e-38], np.float64),)),
    ]
    with jax.enable_x64(True):
        for name, fn, args in cases:
            _same(_run(fn, backend, "flush", *args), jax.jit(fn)(*args), f"{name} on {backend}")


def test_log_of_a_subnormal() -> None:
    """f64 log(1e-310) is -inf in jax.jit, ours too. f32: ours, with the operand flushed, is
    -inf, as jax.jit for this size; jax.jit gives log(2^-150) = -103.97 for some array sizes
    (3, 5-7 elements: docs/cpu-backend.md, test_fuzz_regressions.test_log_of_subnormal)."""
    with jax.enable_x64(True):
        x64 = np.array([1e-310, 1.0], np.float64)
        assert np.asarray(jax.jit(jnp.log)(x64))[0] == -np.inf
        for backend in BACKENDS:
            assert np.asarray(_run(jnp.log, backend, "flush", x64))[0] == -np.inf
    x32 = np.array([1e-40, 1.0], np.float32)
    for backend in BACKENDS:
        assert np.asarray(_run(jnp.log, backend, "flush", x32))[0] == -np.inf
        kept = np.asarray(_run(jnp.log, backend, "keep", x32))[0]
        np.testing.assert_allclose(kept, np.log(np.float64(x32[0])), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_keep_is_ieee(backend: str, dtype: str) -> None:
    x = F32_SUB if dtype == "f32" else F64_SUB
    with jax.enable_x64(dtype == "f64"), np.errstate(all="ignore"):
        one, zero = np.ones_like(x), np.zeros_like(x)
        _same(_run(lambda a, b: a * b, backend, "keep", x, one), x * one, "x * 1")
        _same(_run(lambda a, b: a + b, backend, "keep", x, zero), x + zero, "x + 0")
        _same(_run(lambda a: a == 0, backend, "keep", x), x == 0, "x == 0")
        _same(_run(lambda a, b: jnp.maximum(b, a), backend, "keep", x, zero),
              np.maximum(zero, x), "max")
        many = np.full(4096, x[0])
        got = np.asarray(_run(lambda a: jnp.sum(a), backend, "keep", many))
        np.testing.assert_allclose(got, 4096 * x[0], rtol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_keep_complex_arithmetic(backend: str) -> None:
    """Complex power, multiply, divide and product-reduce under "keep" take the component
    type (the interpreter once handed them a numpy dtype where a scalar type was called:
    power raised TypeError); values as jax.jit's, which computes them in the same type."""
    a = np.array([1 + 2j, 3j, -0.5 + 0.25j, 2 - 1j], np.complex64)
    b = np.array([2 + 0j, 0.5 - 1j, 3 + 1j, -1 + 0.5j], np.complex64)
    cases: list[tuple[str, Callable[..., Any], tuple[np.ndarray, ...]]] = [
        ("power", jnp.power, (a, b)), ("multiply", jnp.multiply, (a, b)),
        ("divide", jnp.divide, (a, b)), ("prod", jnp.prod, (a,))]
    for what, fn, args in cases:
        got = np.asarray(_run(fn, backend, "keep", *args))
        want = np.asarray(jax.jit(fn)(*args))
        assert got.dtype == want.dtype, what
        np.testing.assert_allclose(got, want, rtol=2e-6, err_msg=what)


def test_reductions_of_subnormals() -> None:
    """Sums, maxima and a column reduction of subnormals, both settings, both backends."""
    x = np.full((64, 130), 1e-40, np.float32)
    x[::3] *= -1
    fns = [lambda a: jnp.sum(a), lambda a: jnp.max(a, axis=1), lambda a: jnp.sum(a, axis=0),
           lambda a: jnp.cumsum(a[0])]
    for fn in fns:
        want = jax.jit(fn)(x)
        for backend in BACKENDS:
            _same(_run(fn, backend, "flush", x), want, f"flush on {backend}")
        keep = [np.asarray(_run(fn, b, "keep", x)) for b in BACKENDS]
        np.testing.assert_allclose(keep[0], keep[1], rtol=1e-5, atol=0)
        assert np.any(keep[0] != 0)


def test_vector_loops_flush() -> None:
    """Long arrays go through the vector paths (vector max, vmath's exp/log/tanh/sin/logistic,
    f16 lanes); subnormal lanes flush there exactly as in scalar code."""
    _compiler()
    n = 4099
    x = np.resize(F32_SUB, n)
    h = np.resize(np.array([1e-5, 6e-8, -3e-5, 2.0], np.float16), n)
    text = f"""HloModule m
ENTRY e {{
  x = f32[{n}] parameter(0)
  h = f16[{n}] parameter(1)
  z = f32[] constant(0)
  zb = f32[{n}] broadcast(z), dimensions={{}}
  mx = f32[{n}] maximum(zb, x)
  ex = f32[{n}] exponential(x)
  lg = f32[{n}] log(x)
  th = f32[{n}] tanh(x)
  sn = f32[{n}] sine(x)
  lo = f32[{n}] logistic(x)
  hf = f32[{n}] convert(h)
  hm = f16[{n}] multiply(h, h)
  ROOT t = ({", ".join([f"f32[{n}]"] * 7)}, f16[{n}]) tuple(mx, ex, lg, th, sn, lo, hf, hm)
}}"""
    for mode in ("flush", "keep"):
        got = hlofuse.compile(text, backend="cpu", subnormals=mode)(x, h)
        want = hlofuse.compile(text, backend="interpreter", subnormals=mode)(x, h)
        tiny = np.abs(x) < np.finfo(np.float32).tiny
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if i in (0, 6, 7):  # exact ops: every lane
                _same(g, w, f"{mode} output {i}")
            else:  # transcendentals of the subnormal lanes (exact: f(0) or f(x) ~ x)
                np.testing.assert_allclose(g[tiny], w[tiny], rtol=1e-6, atol=0,
                                           err_msg=f"{mode} output {i}")
        if mode == "flush":
            assert np.all(got[0][tiny] == 0) and np.all(got[2][tiny] == -np.inf)


def test_caller_keeps_gradual_underflow() -> None:
    """The cpu backend restores the calling thread's floating-point mode: numpy computes with
    subnormals after a call that flushed them."""
    _compiler()
    exe = hlofuse.compile("HloModule m\nENTRY e {\n  x = f32[8] parameter(0)\n"
                          "  ROOT y = f32[8] multiply(x, x)\n}\n", backend="cpu",
                          subnormals="flush")
    assert np.all(exe(np.full(8, 1e-20, np.float32))[0] == 0)
    tiny = np.array([1e-40, 3e-39], np.float32)
    assert np.all(tiny * np.float32(1) == tiny) and not np.any(tiny == 0)
    assert np.float64(1e-310) * 1.0 == 1e-310
    assert float(np.float32(1e-20) * np.float32(1e-20)) != 0.0


_TASK = r"""
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
""" + "{fpenv}" + r"""
typedef void (*hf_task_fn)(void *const *args, int64_t lo, int64_t hi);
typedef void (*hf_pfor)(hf_task_fn, void *const *, int64_t, int64_t, int64_t, int);
/* Each index records the control register and the thread that ran it (a chunk sleeps 2 ms, so
   the worker joins). */
static void task(void *const *args, int64_t lo, int64_t hi) {
  uint64_t *fpcr = (uint64_t *)args[0];
  uint64_t *who = (uint64_t *)args[1];
  struct timespec t = {0, 2000000};
  nanosleep(&t, NULL);
  for (int64_t i = lo; i < hi; ++i) {
    fpcr[i] = (uint64_t)hf_fpcr_get();
    who[i] = (uint64_t)pthread_self();
  }
}
uint64_t flush_bits(void) { return (uint64_t)HF_FPCR_FLUSH; }
/* Run the pool (`pfor`, the runtime's hf_rt_parallel_for) from this thread in mode `flush`. */
void run(void *pfor, uint64_t *fpcr, uint64_t *who, int64_t n, int flush) {
  void *args[2] = {fpcr, who};
  const hf_fpcr_t saved = hf_fpcr_get();
  hf_fpcr_set(flush ? saved | HF_FPCR_FLUSH : saved & ~(hf_fpcr_t)HF_FPCR_FLUSH);
  ((hf_pfor)pfor)(task, args, 0, n, 1, 2);
  hf_fpcr_set(saved);
}
"""


def test_pool_workers_run_in_the_callers_mode() -> None:
    """Every chunk of a job, on the caller or a worker, runs under the caller's control
    register; a later job in the other mode switches the workers back."""
    _compiler()
    from hlofuse.backends.cpu import fpenv, runtime

    pfor = runtime.parallel_address()
    if pfor is None:
        pytest.skip("no runtime")
    lib = build.load_library(_TASK.replace("{fpenv}", fpenv.C), name="test_subnormals_pool")
    lib.flush_bits.restype = ctypes.c_uint64
    bits = int(lib.flush_bits())
    if bits == 0:
        pytest.skip("this host has no flush mode we can set")
    n = 16
    for flush in (1, 0, 1, 0):
        fpcr, who = np.zeros(n, np.uint64), np.zeros(n, np.uint64)
        lib.run(ctypes.c_void_p(pfor), ctypes.c_void_p(fpcr.ctypes.data),
                ctypes.c_void_p(who.ctypes.data), ctypes.c_int64(n), ctypes.c_int(flush))
        assert len(set(who.tolist())) == 2, "the worker thread ran no chunk"
        flushing = (fpcr & np.uint64(bits)) == np.uint64(bits)
        assert np.all(flushing) if flush else not np.any(fpcr & np.uint64(bits))


def test_parallel_kernel_flushes_in_every_chunk() -> None:
    """A kernel big enough to run on the pool (threads=2): subnormals in every chunk."""
    _compiler()
    n = 1 << 20
    text = (f"HloModule m\nENTRY e {{\n  x = f32[{n}] parameter(0)\n  y = f32[{n}] parameter(1)\n"
            f"  ROOT z = f32[{n}] multiply(x, y)\n}}\n")
    exes = {m: hlofuse.compile(text, backend="cpu", threads=2, subnormals=m)
            for m in ("flush", "keep")}
    assert "hf_parallel_ptr" in exes["flush"].source.split("HF_KERNEL", 1)[1]
    x = np.full(n, 1e-40, np.float32)
    one = np.ones(n, np.float32)
    for mode in ("flush", "keep", "flush", "keep"):
        z = exes[mode](x, one)[0]
        if mode == "flush":
            assert not np.any(z), f"{np.count_nonzero(z)} subnormals survived"
        else:
            _same(z, x, "keep")


def test_bad_setting() -> None:
    with pytest.raises(HloError, match="subnormals='fast'"):
        hlofuse.compile("HloModule m\nENTRY e {\n  ROOT x = f32[] parameter(0)\n}\n",
                        backend="interpreter", subnormals="fast")
    with pytest.raises(HloError, match="subnormals"):
        hjit(lambda a: a, subnormals="on")
