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


# -- what jax.jit takes and returns ------------------------------------------------------------
# Each case runs the function under jax.jit and hlofuse.jit and compares the outputs: the same
# pytree, and per leaf a jax.Array of the same shape, dtype, weak type and values.


def assert_like_jax(got: object, want: object, rtol: float = 1e-6) -> None:
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    assert got_tree == want_tree, (got_tree, want_tree)
    for g, w in zip(got_leaves, want_leaves, strict=True):
        assert isinstance(g, jax.Array), type(g)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        assert getattr(g, "weak_type", False) == getattr(w, "weak_type", False), (g, w)
        if jax.dtypes.issubdtype(w.dtype, jax.dtypes.prng_key):
            assert jax.random.key_impl(g) == jax.random.key_impl(w)
            g, w = jax.random.key_data(g), jax.random.key_data(w)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol)


def same_as_jax(fn, *args, jit_options=None, backend="interpreter", **kwargs):
    """Run `fn` under both jits (hlofuse on `backend`); assert the outputs agree; return them."""
    options = jit_options or {}
    want = jax.jit(fn, **options)(*args, **kwargs)
    f = hlofuse.jit(fn, backend=backend, **options)
    got = f(*args, **kwargs)
    assert_like_jax(got, want)
    return f, got


def test_python_scalars_are_weakly_typed_like_jax() -> None:
    def f(x, step, scale, flag, z):
        return x * scale, step + 1, flag, z * 2, scale  # a weak float back out as well

    x = np.arange(3, dtype=np.float32)
    f_h, (_, step, _, z, scale) = same_as_jax(f, x, 0, 0.5, True, 1 + 2j)
    assert step.dtype == np.int32 and step.weak_type  # int: weak int32 (x64 off)
    assert scale.dtype == np.float32 and scale.weak_type
    assert z.dtype == np.complex64 and z.weak_type
    module = f_h.lower(x, 0, 0.5, True, 1 + 2j)
    kinds = [str(p.shape) for p in module.entry.parameters]
    assert kinds[1:] == ["s32[]", "f32[]", "pred[]", "c64[]"], kinds


def test_weak_and_strong_scalars_are_different_signatures() -> None:
    def f(s):
        return s * 2

    g = hlofuse.jit(f, backend="interpreter")
    assert_like_jax(g(3), jax.jit(f)(3))  # weak int32
    assert_like_jax(g(np.int32(3)), jax.jit(f)(np.int32(3)))  # strong int32
    assert_like_jax(g(3.0), jax.jit(f)(3.0))
    assert len(g._cache) == 3


def test_numpy_64_bit_arrays_are_canonicalised() -> None:
    def f(a, b, c, d):
        return a + 1, b * 2, c, d

    same_as_jax(f, np.linspace(0, 1, 4), np.arange(3, dtype=np.int64),
                np.array([1, 2], np.uint64), np.array([1 + 1j], np.complex128))
    same_as_jax(f, np.float64(1.5), np.int64(7), np.bool_(True), np.float16(2))


def test_outputs_are_jax_arrays_like_jax_jit() -> None:
    def f(x):
        return {"sum": jnp.sum(x), "pos": x > 0, "count": jnp.int32(3), "half": x / 2,
                "one": 1, "none": None, "empty": ()}

    x = np.array([-1.0, 2.0, 3.0], np.float32)
    _, out = same_as_jax(f, x)
    assert out["none"] is None and out["empty"] == ()
    assert out["sum"].shape == () and out["one"].weak_type


def test_outputs_on_the_cpu_backend_survive_the_next_call() -> None:
    from hlofuse.backends import cpu

    if not cpu.available():
        pytest.skip("no C compiler")
    f = hlofuse.jit(lambda x: (x * 2, x.sum()))
    big = np.arange(1 << 15, dtype=np.float32)  # 128 KiB: shared with the jax.Array
    first, total = f(big)
    second, _ = f(big + 1)
    np.testing.assert_array_equal(np.asarray(first), big * 2)  # not overwritten by the call
    np.testing.assert_array_equal(np.asarray(second), (big + 1) * 2)
    assert float(total) == float(big.sum())
    assert_like_jax(f(big), jax.jit(lambda x: (x * 2, x.sum()))(big))


def test_static_argnames_and_keyword_arguments() -> None:
    def f(x, n, *, scale=1.0, mode="add"):
        return x + n * scale if mode == "add" else x * n * scale

    x = np.arange(3, dtype=np.float32)
    opts = {"static_argnames": ("n", "mode")}
    same_as_jax(f, x, 2, jit_options=opts)
    same_as_jax(f, x, 2, jit_options=opts, scale=0.5)
    same_as_jax(f, x, n=3, jit_options=opts, mode="mul")
    g = hlofuse.jit(f, backend="interpreter", **opts)
    assert g.static_argnums == (1,)  # the name gives the position, as in jax.jit
    g(x, 2, mode="mul")
    g(x, 2, mode="mul")
    assert len(g._cache) == 1
    g(x, 2, mode="add")  # another static value: another signature
    assert len(g._cache) == 2


def test_static_argnums_given_by_keyword() -> None:
    def f(x, n):
        return x * n

    x = np.ones(2, np.float32)
    same_as_jax(f, x, n=3, jit_options={"static_argnums": 1})
    g = hlofuse.jit(f, static_argnums=1, backend="interpreter")
    assert g.static_argnames == ("n",)
    np.testing.assert_array_equal(np.asarray(g(x, n=4)), [4, 4])


def test_bad_static_specifications_are_input_errors() -> None:
    def f(x, n):
        return x

    with pytest.raises(InputError, match="positional"):
        hlofuse.jit(f, static_argnums=3)
    with pytest.raises(InputError, match="does not take"):
        hlofuse.jit(f, static_argnames="m")
    with pytest.raises(InputError, match="static and donated"):
        hlofuse.jit(f, static_argnames="n", donate_argnames="n")
    with pytest.raises(InputError, match="hashable"):
        hlofuse.jit(f, static_argnums=1, backend="interpreter")(np.ones(2), [1, 2])


def test_donated_arguments_are_accepted_and_never_written() -> None:
    def f(params, grads):
        return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"w": np.ones((2, 2), np.float32), "b": jnp.zeros(2)}
    grads = {"w": np.full((2, 2), 2.0, np.float32), "b": jnp.ones(2)}
    g = hlofuse.jit(f, donate_argnums=0)
    for _ in range(2):
        out = g(params, grads)
        assert_like_jax(out, jax.jit(f)(params, grads))
    np.testing.assert_array_equal(params["w"], 1.0)  # the caller's arrays are untouched
    assert not params["b"].is_deleted()
    np.testing.assert_array_equal(np.asarray(params["b"]), 0.0)
    h = hlofuse.jit(f, donate_argnames="params", backend="interpreter")
    assert_like_jax(h(params, grads), jax.jit(f)(params, grads))
    jax.jit(f, donate_argnames="params")(params, grads)  # jax deletes the donated jax.Array
    assert params["b"].is_deleted()
    with pytest.raises(InputError, match=r"args\[0\]\['b'\].*deleted"):
        h(params, grads)


def test_namedtuples_none_leaves_and_empty_pytrees() -> None:
    from collections import namedtuple

    Point = namedtuple("Point", "x y")

    def f(p, nothing, empty, extra):
        return Point(p.y, p.x * 2), nothing, empty, {"e": extra}

    p = Point(np.ones(2, np.float32), np.zeros(3, np.int32))
    _, out = same_as_jax(f, p, None, {}, [])
    assert type(out[0]) is Point and out[1] is None and out[2] == {} and out[3] == {"e": []}
    same_as_jax(lambda: {"k": jnp.arange(3)})  # no arguments at all


def test_dataclass_pytrees_with_static_fields() -> None:
    flax_struct = pytest.importorskip("flax.struct")
    eqx = pytest.importorskip("equinox")
    chex = pytest.importorskip("chex")

    @flax_struct.dataclass
    class State:
        x: jax.Array
        step: int
        name: str = flax_struct.field(pytree_node=False, default="s")

    class Linear(eqx.Module):
        w: jax.Array
        b: jax.Array
        act: str = eqx.field(static=True)

        def __call__(self, x):
            y = self.w @ x + self.b
            return jnp.tanh(y) if self.act == "tanh" else y

    @chex.dataclass
    class Pair:
        a: jax.Array
        b: jax.Array

    def step(state, model, pair):
        y = model(state.x)
        return state.replace(x=y, step=state.step + 1), Pair(a=pair.b, b=pair.a + y.sum())

    state = State(np.ones(3, np.float32), 0)
    model = Linear(np.eye(3, dtype=np.float32) * 0.5, np.ones(3, np.float32), "tanh")
    pair = Pair(a=np.zeros(2, np.float32), b=np.ones(2, np.float32))
    g, (new_state, new_pair) = same_as_jax(step, state, model, pair)
    assert new_state.name == "s" and type(new_pair) is Pair
    assert new_state.step.weak_type  # a Python int field: weak, as under jax.jit
    identity = Linear(model.w, model.b, "identity")  # another static field: another module
    same_as_jax(step, state, identity, pair)
    g(state, identity, pair)
    assert len(g._cache) == 2


def test_flax_train_state_step() -> None:
    pytest.importorskip("flax")
    optax = pytest.importorskip("optax")
    import flax.linen as nn
    from flax.training.train_state import TrainState

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2)(nn.relu(nn.Dense(4)(x)))

    model = MLP()
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    params = model.init(jax.random.key(0), x)
    state = TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-2))
    assert state.step == 0 and type(state.step) is int  # the case that used to be refused

    def train_step(state, x):
        def loss(p):
            return jnp.mean(state.apply_fn(p, x) ** 2)

        value, grads = jax.value_and_grad(loss)(state.params)
        return state.apply_gradients(grads=grads), value

    g = hlofuse.jit(train_step)
    want_state, want_loss = jax.jit(train_step)(state, x)
    got_state, got_loss = g(state, x)
    # (a training step: the layers' small dots are sums in another order than XLA's)
    assert_like_jax((got_state.params, got_state.opt_state, got_state.step, got_loss),
                    (want_state.params, want_state.opt_state, want_state.step, want_loss),
                    rtol=1e-5)
    again, _ = g(got_state, x)  # its own outputs (jax.Arrays, strong int32 step) back in
    assert int(again.step) == 2


def test_jax_array_inputs() -> None:
    x = jnp.arange(6.0).reshape(2, 3)
    same_as_jax(lambda a, b: (a @ b.T, a.sum(0)), x, jnp.ones((2, 3)))
    same_as_jax(lambda a: a * 2, jnp.asarray(1.0))  # weakly typed jax.Array: weak stays weak


def test_typed_prng_keys_in_and_out() -> None:
    def f(key, n):
        k1, k2 = jax.random.split(key)
        return k1, jax.random.uniform(k2, (n,)), jax.random.split(k1, 3)

    key = jax.random.key(0)
    g, (k1, _, ks) = same_as_jax(f, key, 4, jit_options={"static_argnums": 1})
    assert jax.dtypes.issubdtype(k1.dtype, jax.dtypes.prng_key) and ks.shape == (3,)
    module = g.lower(key, 4)
    param = module.entry.parameters[0].shape
    assert (param.dtype.name, tuple(param.dims)) == ("u32", (2,))  # the key's data
    same_as_jax(lambda k: jax.random.normal(k, (2,)), jax.random.key(1, impl="rbg"))
    same_as_jax(lambda k: jax.random.bits(k), jax.random.PRNGKey(3))  # raw uint32 keys


def test_inputs_jax_rejects_are_input_errors() -> None:
    def f(x, y):
        return x

    g = hlofuse.jit(f, backend="interpreter")
    x = np.ones(2, np.float32)
    with pytest.raises(InputError, match=r"args\[1\].*str"):
        g(x, "text")
    with pytest.raises(InputError, match=r"args\[1\]\['k'\]"):
        g(x, {"k": object()})
    with pytest.raises(InputError, match="too large"):
        g(x, 1 << 40)
    with pytest.raises(InputError, match="not a valid JAX type"):
        g(x, np.array(["a"]))
    with pytest.raises(InputError, match="callable"):
        hlofuse.jit(3)


def test_traced_calls_are_inlined_like_jax_jit() -> None:
    g = hlofuse.jit(lambda x: jnp.sin(x) * x)
    grad = jax.grad(g)(1.5)
    np.testing.assert_allclose(grad, np.cos(1.5) * 1.5 + np.sin(1.5), rtol=1e-6)
    np.testing.assert_allclose(jax.vmap(g)(jnp.arange(3.0)), jnp.sin(jnp.arange(3.0))
                               * jnp.arange(3.0), rtol=1e-6)
