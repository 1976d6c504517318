"""Host callbacks (backends/host_callbacks.py): jax.pure_callback, io_callback, jax.debug.print
and equinox's error checks run on the interpreter and natively on the cpu backend, against
jax.jit: values, the order of side effects (printed lines), errors, and no silent fallback."""

from __future__ import annotations

import threading

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

import hlofuse  # noqa: E402
from hlofuse.backends import cpu  # noqa: E402
from hlofuse.backends.cpu.cexpr import UnsupportedOpError  # noqa: E402
from hlofuse.errors import HostCallbackError, InterpreterError  # noqa: E402
from hlofuse.frontends.jax import hlo_text  # noqa: E402

io_callback = pytest.importorskip("jax.experimental").io_callback

BACKENDS = ["interpreter", pytest.param("cpu", marks=pytest.mark.skipif(
    not cpu.available(), reason="no C compiler"))]


def same(got: object, want: object) -> None:
    g_leaves, g_tree = jax.tree_util.tree_flatten(got)
    w_leaves, w_tree = jax.tree_util.tree_flatten(want)
    assert g_tree == w_tree
    for g, w in zip(g_leaves, w_leaves, strict=True):
        assert isinstance(g, jax.Array) and g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)


def test_pure_callback() -> None:
    def f(x):
        y = jax.pure_callback(lambda a: np.sort(a)[::-1].copy(),
                              jax.ShapeDtypeStruct(x.shape, x.dtype), jnp.sin(x))
        return y * 2, jax.pure_callback(lambda a: (a.sum(), a.max()),
                                        (jax.ShapeDtypeStruct((), x.dtype),) * 2, y)

    x = np.linspace(-2, 2, 7, dtype=np.float32)
    g = hlofuse.jit(f)
    same(g(x), jax.jit(f)(x))
    want = "cpu" if cpu.available() else "interpreter"
    assert g.backend_for(x) == want  # no fallback to the interpreter
    same(hlofuse.jit(f, backend="interpreter")(x), jax.jit(f)(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_io_callback_ordered_runs_in_program_order(backend: str) -> None:
    seen: list[tuple[str, float]] = []

    def log(tag):
        def cb(v):
            seen.append((tag, float(v)))
            return np.float32(v * 10)
        return cb

    def f(x):
        def body(i, c):
            a = io_callback(log("a"), jax.ShapeDtypeStruct((), jnp.float32), c, ordered=True)
            b = io_callback(log("b"), jax.ShapeDtypeStruct((), jnp.float32), c + 1.0,
                            ordered=True)
            return a + b + i

        return jax.lax.fori_loop(0, 3, body, x)

    x = np.float32(0.5)
    want = jax.jit(f)(x)
    jax_seen, seen[:] = list(seen), []
    g = hlofuse.jit(f, backend=backend)
    same(g(x), want)
    assert seen == jax_seen and len(seen) == 6
    assert g.backend_for(x) == backend


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ordered", [False, True])
def test_debug_print_in_a_scan_prints_like_jax(backend: str, ordered: bool,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    def f(x):
        def body(c, i):
            jax.debug.print("step {i}: c={c}", i=i, c=c, ordered=ordered)
            c = c * 1.5 + i
            return c, c.sum()

        c, ys = jax.lax.scan(body, x, jnp.arange(5.0))
        jax.debug.print("done {c}", c=c, ordered=ordered)
        return c, ys

    x = np.ones(3, np.float32)
    want = jax.jit(f)(x)
    jax.effects_barrier()
    jax_lines = capsys.readouterr().out.splitlines()
    g = hlofuse.jit(f, backend=backend)
    same(g(x), want)
    lines = capsys.readouterr().out.splitlines()
    assert lines == jax_lines and len(lines) == 6
    assert g.backend_for(x) == backend


@pytest.mark.parametrize("backend", BACKENDS)
def test_callback_in_a_conditional_runs_only_when_taken(backend: str) -> None:
    calls: list[float] = []

    def f(x):
        def hit(v):
            return io_callback(lambda a: (calls.append(float(a)), a)[1],
                               jax.ShapeDtypeStruct((), jnp.float32), v)
        return jax.lax.cond(x > 0, hit, lambda v: v * 0, x)

    g = hlofuse.jit(f, backend=backend)
    same(g(np.float32(2)), jax.jit(f)(np.float32(2)))
    same(g(np.float32(-2)), jax.jit(f)(np.float32(-2)))
    assert calls == [2.0, 2.0]  # jax's call and ours, none for the branch not taken


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_raising_callback_is_an_error_of_the_call(backend: str) -> None:
    def boom(a):
        if a.sum() > 3:
            raise ValueError("too big")
        return a

    def f(x):
        def body(i, c):
            return jax.pure_callback(boom, jax.ShapeDtypeStruct(c.shape, c.dtype), c) + 1.0

        return jax.lax.fori_loop(0, 4, body, x)

    g = hlofuse.jit(f, backend=backend)
    with pytest.raises(HostCallbackError, match="too big") as info:
        g(np.zeros(2, np.float32))  # the third iteration raises
    assert isinstance(info.value.__cause__, ValueError)
    assert "pure_callback" in str(info.value)  # the instruction
    same(g(np.full(2, -5.0, np.float32)), jax.jit(f)(np.full(2, -5.0, np.float32)))  # still fine


@pytest.mark.parametrize("backend", BACKENDS)
def test_keyboard_interrupt_in_a_callback_stops_the_run(backend: str) -> None:
    def interrupt(a):
        raise KeyboardInterrupt

    def f(x):
        return jax.lax.fori_loop(0, 10, lambda i, c: io_callback(
            interrupt, jax.ShapeDtypeStruct(c.shape, c.dtype), c), x)

    with pytest.raises(KeyboardInterrupt):
        hlofuse.jit(f, backend=backend)(np.zeros(2, np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrong_results_are_named(backend: str) -> None:
    x = np.ones(3, np.float32)
    text = hlo_text(lambda v: jax.pure_callback(lambda a: a, jax.ShapeDtypeStruct(
        v.shape, v.dtype), v) + 1, x)
    for bad, what in [(lambda a: (np.ones(4, np.float32),), r"float32\[4\], expected "
                       r"float32\[3\]"),
                      (lambda a: (a.astype(np.float64),), "float64"),
                      (lambda a: (a, a), "2 value"),
                      (lambda a: a, "ndarray")]:
        exe = hlofuse.compile(text, backend=backend, host_callbacks=[bad])
        with pytest.raises(HostCallbackError, match=what) as info:
            exe(x)
        assert "pure_callback" in str(info.value)
    exe = hlofuse.compile(text, backend=backend, host_callbacks=[lambda a: (a * 3,)])
    np.testing.assert_array_equal(exe(x)[0], x * 3 + 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_wrong_shape_from_jax_callback(backend: str) -> None:
    def f(x):
        return jax.pure_callback(lambda a: np.ones(5, np.float32),
                                 jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    with pytest.raises(HostCallbackError, match="shape"):
        hlofuse.jit(f, backend=backend)(np.ones(3, np.float32))


def test_no_table_is_refused_naming_the_instruction() -> None:
    x = np.ones(3, np.float32)
    text = hlo_text(lambda v: jax.pure_callback(lambda a: a, jax.ShapeDtypeStruct(
        v.shape, v.dtype), v), x)
    with pytest.raises(InterpreterError, match=r"pure_callback.*no callback table"):
        hlofuse.compile(text, backend="interpreter")
    with pytest.raises(InterpreterError, match="not in the table of 0"):
        hlofuse.compile(text, backend="interpreter", host_callbacks=[])
    if cpu.available():
        with pytest.raises(UnsupportedOpError, match=r"pure_callback.*no callback table"):
            hlofuse.compile(text, backend="cpu")


@pytest.mark.parametrize("backend", BACKENDS)
def test_equinox_error_if(backend: str) -> None:
    eqx = pytest.importorskip("equinox")

    def f(x):
        x = eqx.error_if(x, x < 0, "negative input")
        return jnp.sqrt(x) * 2

    g = hlofuse.jit(f, backend=backend)
    x = np.array([1.0, 4.0], np.float32)
    same(g(x), jax.jit(f)(x))
    with pytest.raises(HostCallbackError, match="negative input"):
        g(np.array([1.0, -4.0], np.float32))
    assert g.backend_for(x) == backend


@pytest.mark.skipif(not cpu.available(), reason="no C compiler")
def test_one_library_two_tables() -> None:
    """The same HLO with other callbacks: one shared library, each executable its own table."""
    x = np.ones(2, np.float32)
    text = hlo_text(lambda v: jax.pure_callback(lambda a: a, jax.ShapeDtypeStruct(
        v.shape, v.dtype), v), x)
    a = hlofuse.compile(text, backend="cpu", host_callbacks=[lambda v: (v + 1,)])
    b = hlofuse.compile(text, backend="cpu", host_callbacks=[lambda v: (v * 5,)])
    assert a.source == b.source
    for _ in range(2):
        np.testing.assert_array_equal(a(x)[0], x + 1)
        np.testing.assert_array_equal(b(x)[0], x * 5)


@pytest.mark.skipif(not cpu.available(), reason="no C compiler")
def test_callbacks_reenter_and_run_on_threads() -> None:
    """A callback may call hlofuse (even the same function); calls from several threads at
    once each run their own callbacks (no deadlock: the GIL is released around the run)."""
    inner = hlofuse.jit(lambda v: v * 2, backend="cpu")

    def f(x):
        return jax.lax.fori_loop(0, 3, lambda i, c: jax.pure_callback(
            lambda a: np.asarray(inner(a)), jax.ShapeDtypeStruct(c.shape, c.dtype), c), x)

    g = hlofuse.jit(f, backend="cpu")
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(np.asarray(g(x)), x * 8)
    results: list[np.ndarray] = []

    def work(k: int) -> None:
        for _ in range(5):
            results.append(np.asarray(g(np.full(4, k, np.float32))))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(1, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert sorted({float(r[0]) for r in results}) == [8.0, 16.0, 24.0] and len(results) == 15


@pytest.mark.skipif(not cpu.available(), reason="no C compiler")
def test_side_effects_are_kept_and_never_duplicated() -> None:
    """A print whose result nobody uses survives DCE, CSE and fusion; a pure callback used by
    several consumers runs once per evaluation, as under jax.jit."""
    calls: list[int] = []

    def f(x):
        jax.debug.print("x={x}", x=x)
        jax.debug.print("x={x}", x=x)  # the same print twice: two prints, not one
        y = jax.pure_callback(lambda a: (calls.append(1), a * 2)[1],
                              jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return jnp.exp(y) + 1, jnp.exp(y) * 2, y.sum()

    x = np.ones(3, np.float32)
    g = hlofuse.jit(f, backend="cpu")
    module = g.lower(x)
    from hlofuse.backends.host_callbacks import sites

    assert len(sites(module)) == 3
    assert all(i.parent is module.entry for i in sites(module))  # none inside a fusion
    calls.clear()
    same(g(x), jax.jit(f)(x))
    assert len(calls) == 2  # jax.jit's call and ours


def test_no_silent_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the cpu backend refuses a function, the warning names the instruction and the cost,
    once per function and reason."""
    if not cpu.available():
        pytest.skip("no C compiler")
    from hlofuse.backends.cpu import driver

    real = driver._check_supported

    def refuse(module: object) -> None:
        real(module)
        raise UnsupportedOpError("instruction sine.3 in computation main: the cpu backend "
                                 "cannot run sine: refused for this test")

    monkeypatch.setattr(driver, "_check_supported", refuse)
    g = hlofuse.jit(lambda v: jnp.sin(v))
    with pytest.warns(RuntimeWarning, match=r"sine\.3.*100-1000x slower"):
        g(np.ones(2, np.float32))
    assert g.backend_for(np.ones(2, np.float32)) == "interpreter"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g(np.ones(3, np.float32))  # another signature, the same reason: told once
    with pytest.raises(UnsupportedOpError, match="sine"):
        hlofuse.jit(lambda v: jnp.sin(v), backend="cpu")(np.ones(2, np.float32))
