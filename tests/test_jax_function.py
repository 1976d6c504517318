"""hlofuse.jax_function: an hlofuse-compiled function inside the user's own jax.jit, grad,
vmap and shard_map (frontends/jax_function.py, frontends/jax_primitive.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.experimental import io_callback  # noqa: E402

import hlofuse  # noqa: E402
from hlofuse.backends import cpu  # noqa: E402
from hlofuse.errors import CompileError, InputError  # noqa: E402
from hlofuse.frontends import jax_ffi  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (cpu.available() and jax_ffi.available()),
    reason="needs a C compiler and jax.ffi")

ROOT = Path(__file__).resolve().parents[1]


def _mlp(params: dict, x: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return h @ params["w2"]


def _loss(params: dict, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((_mlp(params, x) - y) ** 2)


def _data(seed: int = 0) -> tuple[dict, jax.Array, jax.Array]:
    rng = np.random.default_rng(seed)
    params = {"w1": jnp.asarray(rng.standard_normal((6, 16)) * 0.3, jnp.float32),
              "b1": jnp.asarray(rng.standard_normal(16) * 0.1, jnp.float32),
              "w2": jnp.asarray(rng.standard_normal((16, 3)) * 0.3, jnp.float32)}
    x = jnp.asarray(rng.standard_normal((32, 6)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((32, 3)), jnp.float32)
    return params, x, y


def _close(a: object, b: object, rtol: float = 2e-5, atol: float = 1e-6) -> None:
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=rtol, atol=atol)


def _calls(text: str) -> int:
    return text.count("custom_call @hlofuse_entry")


def _compiles(fn: hlofuse.frontends.jax_function.JaxFunction) -> dict[str, int]:
    return {p.name: p.compiles for top in fn.programs for p in top.family()}


def test_inside_jit_the_function_is_one_custom_call() -> None:
    params, x, y = _data()
    g = hlofuse.jax_function(_loss)
    step = jax.jit(lambda p, x, y: g(p, x, y) * 2.0)
    text = step.lower(params, x, y).as_text()
    assert _calls(text) == 1 and "tanh" not in text  # jax lowered none of the body
    _close(step(params, x, y), 2.0 * _loss(params, x, y))
    out = g(params, x, y)  # outside a trace: a jitted function, jax arrays out
    assert isinstance(out, jax.Array) and out.dtype == jnp.float32
    _close(out, _loss(params, x, y))
    assert _compiles(g) == {"_loss": 1}  # one signature, compiled once for both


def test_grad_is_compiled_by_hlofuse_and_matches_jax() -> None:
    params, x, y = _data(1)
    g = hlofuse.jax_function(_loss)
    vg = jax.jit(jax.value_and_grad(g))
    text = vg.lower(params, x, y).as_text()
    # the forward and the backward program (the transpose of the jvp): no jax-lowered math
    assert _calls(text) == 2 and "tanh" not in text
    _close(vg(params, x, y), jax.value_and_grad(_loss)(params, x, y))
    _close(jax.grad(g, argnums=(0, 2))(params, x, y),  # eagerly, and w.r.t. two arguments
           jax.grad(_loss, argnums=(0, 2))(params, x, y))
    compiles = _compiles(g)
    assert compiles["_loss"] == 1 and compiles["transpose(jvp(_loss))"] >= 1
    again = dict(compiles)
    vg(params, x, y)
    jax.grad(g, argnums=(0, 2))(params, x, y)
    assert _compiles(g) == again  # a transformation applied again compiles nothing


def test_forward_mode_and_higher_derivatives() -> None:
    params, x, y = _data(2)
    g = hlofuse.jax_function(_loss)
    t = jax.tree_util.tree_map(jnp.ones_like, params)
    _close(jax.jvp(lambda p: g(p, x, y), (params,), (t,)),
           jax.jvp(lambda p: _loss(p, x, y), (params,), (t,)))
    w2 = params["w2"]

    def f(w: jax.Array, fn: object) -> jax.Array:
        return fn({**params, "w2": w}, x, y)  # type: ignore[operator]

    _close(jax.jit(jax.hessian(lambda w: f(w, g)))(w2), jax.hessian(lambda w: f(w, _loss))(w2),
           rtol=1e-4, atol=1e-5)
    _close(jax.jacfwd(lambda w: f(w, g))(w2), jax.jacfwd(lambda w: f(w, _loss))(w2))


def test_a_custom_vjp_inside_keeps_its_own_backward_rule() -> None:
    """The backward program is jax's transpose of the linear program it traces: a custom_vjp
    inside the function (diffrax's and equinox's checkpointed loops) is never differentiated
    a second time (its jvp is a `custom_lin`, which has no derivative of its own)."""
    @jax.custom_vjp
    def scaled(x: jax.Array) -> jax.Array:
        return jnp.sin(x)

    def fwd(x: jax.Array) -> tuple:
        return jnp.sin(x), x

    def bwd(x: jax.Array, ct: jax.Array) -> tuple:
        return (3.0 * ct * jnp.cos(x),)  # not the true derivative: the rule must be used

    scaled.defvjp(fwd, bwd)

    def f(x: jax.Array) -> jax.Array:
        return jnp.sum(scaled(x) * x)

    x = jnp.linspace(-1.0, 1.0, 9, dtype=jnp.float32)
    got = jax.jit(jax.grad(hlofuse.jax_function(f)))(x)
    _close(got, jax.grad(f)(x))
    _close(got, 3.0 * jnp.cos(x) * x + jnp.sin(x))


def test_vmap_batches_the_program_instead_of_looping() -> None:
    params, x, _ = _data(3)
    g = hlofuse.jax_function(_mlp)
    xs = jnp.stack([x, x * 0.5, -x, x + 1.0])  # [4, 32, 6]
    batched = jax.vmap(g, in_axes=(None, 0))
    eqns = jax.make_jaxpr(batched)(params, xs).eqns
    inner = [e for e in eqns[0].params["jaxpr"].eqns if e.primitive.name == "hlofuse_call"]
    assert [str(e.params["program"]) for e in inner] == ["vmap(_mlp)"]
    _close(jax.jit(batched)(params, xs), jax.vmap(_mlp, in_axes=(None, 0))(params, xs))
    # per-example gradients: vmap of grad, one batched backward program
    pe = jax.jit(jax.vmap(jax.grad(lambda p, x: jnp.sum(g(p, x[None]))), in_axes=(None, 0)))
    ref = jax.vmap(jax.grad(lambda p, x: jnp.sum(_mlp(p, x[None]))), in_axes=(None, 0))
    _close(pe(params, x), ref(params, x))


def test_keys_static_arguments_keywords_and_weak_types() -> None:
    def noisy(key: jax.Array, x: jax.Array, n: int, scale: float = 1.0) -> tuple:
        key, sub = jax.random.split(key)
        return key, x * scale + jax.random.normal(sub, x.shape) * n

    g = hlofuse.jax_function(noisy, static_argnames="n")
    key = jax.random.key(7)
    x = jnp.arange(8.0, dtype=jnp.float32)
    for n in (1, 2):
        k1, y1 = jax.jit(g, static_argnames="n")(key, x, n=n, scale=0.5)
        k2, y2 = noisy(key, x, n=n, scale=0.5)
        assert jax.random.key_impl(k1) == jax.random.key_impl(k2)
        np.testing.assert_array_equal(jax.random.key_data(k1), jax.random.key_data(k2))
        _close(y1, y2)
    assert len(g.programs) == 2  # one program per static value
    half = hlofuse.jax_function(lambda v: v * 0.5)(3.0)  # a Python scalar stays weakly typed
    assert half.dtype == jnp.float32 and jax.typeof(half).weak_type


def test_integer_operands_take_no_cotangent() -> None:
    def pick(table: jax.Array, idx: jax.Array) -> jax.Array:
        return jnp.sum(table[idx] ** 2)

    g = hlofuse.jax_function(pick)
    table = jnp.arange(12.0, dtype=jnp.float32).reshape(4, 3)
    idx = jnp.array([0, 2, 2], jnp.int32)
    _close(jax.jit(jax.grad(g))(table, idx), jax.grad(pick)(table, idx))


def test_a_function_with_io_effects_is_refused() -> None:
    def logs(x: jax.Array) -> jax.Array:
        io_callback(lambda v: None, None, x, ordered=True)
        return x + 1

    with pytest.raises(InputError, match="side effects"):
        jax.jit(hlofuse.jax_function(logs))(jnp.ones(3))


def test_what_hlofuse_cannot_compile_runs_as_jax_lowers_it_with_a_warning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from hlofuse.frontends import jax as frontend

    def refuse(*args: object) -> None:
        raise CompileError("cpu backend: no kernel for the test's op")

    monkeypatch.setattr(frontend, "compile_flat", refuse)
    params, x, y = _data(4)
    g = hlofuse.jax_function(_loss)
    with pytest.warns(RuntimeWarning, match="no kernel for the test's op.*jax compiles it"):
        out = jax.jit(g)(params, x, y)
    _close(out, _loss(params, x, y))
    assert _calls(jax.jit(g).lower(params, x, y).as_text()) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per program
        jax.jit(lambda *a: g(*a) + 1)(params, x, y)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(InputError, match="expects a callable"):
        hlofuse.jax_function(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Non-hashable static arguments"):  # (jax.jit's own)
        hlofuse.jax_function(lambda x, n: x, static_argnums=1)(jnp.ones(2), [1])


# Programs of the differential suite (tests/programs.py) whose gradient goes through loops,
# branches, scans in reverse and per-example vmaps: benchmarks/jax_function.py runs all of them
GRAD_PROGRAMS = ["cartpole_separate", "rollout_scan_linear_policy", "vmap_per_example_grad",
                 "scan_cumulative_reverse", "cond_two_branches", "nested_scan_fori"]


@pytest.mark.parametrize("name", GRAD_PROGRAMS)
def test_grad_through_suite_programs_matches_jax(name: str) -> None:
    import programs

    p = programs.by_name(name)
    args = tuple(p.make_args())
    grad_at = [i for i, a in enumerate(args) if jnp.issubdtype(jnp.asarray(a).dtype, jnp.inexact)]

    def total(fn: object) -> object:
        def s(*xs: jax.Array) -> jax.Array:
            call = list(args)
            for i, x in zip(grad_at, xs, strict=True):
                call[i] = x
            outs = [o for o in jax.tree_util.tree_leaves(fn(*call))  # type: ignore[operator]
                    if jnp.issubdtype(o.dtype, jnp.inexact)]
            return sum(jnp.sum(o) for o in outs)
        return s

    xs = [jnp.asarray(args[i]) for i in grad_at]
    argnums = tuple(range(len(xs)))
    g = hlofuse.jax_function(p.fn)
    got = jax.jit(jax.grad(total(g), argnums=argnums))(*xs)
    assert _compiles(g).get(f"transpose(jvp({p.fn.__name__}))", 0) == 1  # hlofuse's backward
    _close(got, jax.jit(jax.grad(total(p.fn), argnums=argnums))(*xs), rtol=1e-4, atol=1e-5)


def _run(script: str, timeout: int = 240, **env: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **env}, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_shard_map_runs_the_program_on_each_local_block() -> None:
    """Two CPU devices: each runs the program on its shard; the gradient of a replicated
    parameter is summed over devices as jax's own (check_vma on and off), and an output that
    varies over the devices cannot be declared replicated."""
    out = _run("""
        from functools import partial
        import jax, jax.numpy as jnp, numpy as np, hlofuse
        from jax.sharding import Mesh, PartitionSpec as P
        mesh = Mesh(np.array(jax.devices()), ("d",))
        def loss(w, x, y): return jnp.mean((jnp.tanh(x @ w) - y) ** 2)
        g = hlofuse.jax_function(loss)
        rng = np.random.default_rng(0)
        w = jnp.asarray(rng.standard_normal((8, 4)), jnp.float32)
        x = jnp.asarray(rng.standard_normal((64, 8)), jnp.float32)
        y = jnp.asarray(rng.standard_normal((64, 4)), jnp.float32)
        for vma in (True, False):
            def make(fn):
                @jax.jit
                @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P("d"), P("d")),
                         out_specs=(P(), P()), check_vma=vma)
                def step(w, x, y):
                    l, gr = jax.value_and_grad(fn)(w, x, y)
                    return jax.lax.pmean(l, "d"), jax.lax.pmean(gr, "d")
                return step
            a, b = make(g)(w, x, y), make(loss)(w, x, y)
            assert "hlofuse_entry" in make(g).lower(w, x, y).as_text()
            for u, v in zip(a, b):
                np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-7)
        bad = jax.jit(partial(jax.shard_map, mesh=mesh, in_specs=(P(), P("d"), P("d")),
                              out_specs=P())(g))
        try:
            bad(w, x, y)
        except ValueError as exc:
            assert "replicated" in str(exc)
        else:
            raise AssertionError("a varying output passed as replicated")
        print("ok", jax.device_count())
        """, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    assert out.split() == ["ok", "2"]


def test_two_processes_train_as_one() -> None:
    """Data-parallel training on jax.distributed (gloo) over two processes, the model step an
    hlofuse program inside each process's jax.jit: the same losses as one process."""
    script = ROOT / "benchmarks" / "data_parallel.py"
    one = _run(f"import runpy, sys; sys.argv = ['x', '--processes', '1', '--steps', '4', "
               f"'--print-losses']; runpy.run_path({str(script)!r}, run_name='__main__')")
    two = _run(f"import runpy, sys; sys.argv = ['x', '--processes', '2', '--steps', '4', "
               f"'--print-losses']; runpy.run_path({str(script)!r}, run_name='__main__')")
    l1 = [float(v) for v in one.split("losses:")[1].split()[:4]]
    l2 = [float(v) for v in two.split("losses:")[1].split()[:4]]
    assert len(l1) == 4 and l1[0] > l1[-1]  # it trains
    np.testing.assert_allclose(l2, l1, rtol=1e-4)
