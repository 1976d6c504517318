"""Sort comparators that order by one key (backends/sort_key.py), and the cpu backend's radix
sort for them against jax.jit: jnp.sort, argsort and random.permutation, whose comparators are
the ones JAX emits, with ties, NaNs, signed zeros, infinities and subnormals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.jax_oracle import BACKENDS, run_on, x64  # noqa: F401  (x64: autouse fixture)

from hlofuse.backends.sort_key import sort_key
from hlofuse.ir.opcodes import Opcode
from hlofuse.text import parse


def _comparators(f, *args) -> list:
    module = parse(jax.jit(f).lower(*args).as_text(dialect="hlo"))
    return [i.attrs["to_apply"] for c in module.computations for i in c.instructions
            if i.opcode is Opcode.SORT]


def _cmp(params: list[str], root: str):
    lines = [f"  p{i} = {t}[] parameter({i})" for i, t in enumerate(params)]
    text = "cmp {\n" + "\n".join(lines) + "\n" + root + "\n}\n" \
        f"ENTRY e {{\n  x = {params[0]}[8] parameter(0)\n" \
        f"  ROOT s = {params[0]}[8] sort(x), dimensions={{0}}, to_apply=cmp\n}}"
    if len(params) > 2:
        text = text.replace(f"  ROOT s = {params[0]}[8] sort(x)",
                            f"  y = {params[2]}[8] parameter(1)\n"
                            f"  ROOT s = ({params[0]}[8], {params[2]}[8]) sort(x, y)")
    return parse(text).computation("cmp")


def test_jax_comparators_order_by_one_key() -> None:
    f32 = np.zeros(16, np.float32)
    for f, arg, dtype, descending in [
        (jnp.sort, f32, "f32", False),  # canonicalised NaN and zero, TOTALORDER
        (jnp.argsort, np.zeros(16, np.int32), "s32", False),
        (lambda k: jax.random.permutation(k, 300), jax.random.PRNGKey(0), "u32", False),
    ]:
        comps = _comparators(f, arg)
        assert comps, f
        for comp in comps:
            key = sort_key(comp)
            assert key is not None and key.operand == 0
            assert key.dtype.name == dtype and key.descending is descending


@pytest.mark.parametrize("root,params,operand,descending", [
    ("compare(p0, p1), direction=LT", ["s32", "s32"], 0, False),
    ("compare(p0, p1), direction=GT, type=TOTALORDER", ["f32", "f32"], 0, True),
    ("compare(p1, p0), direction=LT, type=TOTALORDER", ["f64", "f64"], 0, True),
    ("compare(p2, p3), direction=LT", ["f32", "f32", "u8", "u8"], 1, False),
])
def test_one_key(root: str, params: list[str], operand: int, descending: bool) -> None:
    key = sort_key(_cmp(params, f"  ROOT r = pred[] {root}"))
    assert key is not None and key.operand == operand and key.descending is descending
    assert key.is_parameter


@pytest.mark.parametrize("body,params", [
    ("  ROOT r = pred[] compare(p0, p1), direction=LT", ["f32", "f32"]),  # NaN: no weak order
    ("  ROOT r = pred[] compare(p0, p1), direction=LE", ["s32", "s32"]),  # not strict
    ("  ROOT r = pred[] compare(p0, p2), direction=LT", ["s32", "s32", "s32", "s32"]),
    ("  ROOT r = pred[] compare(p0, p1), direction=LT", ["pred", "pred"]),
    ("  ROOT r = pred[] compare(p0, p1), direction=LT, type=TOTALORDER",
     ["f8e4m3fn", "f8e4m3fn"]),
    ("  a = s32[] negate(p0)\n  b = s32[] abs(p1)\n"  # different expressions on the two sides
     "  ROOT r = pred[] compare(a, b), direction=LT", ["s32", "s32"]),
    ("  a = s32[] add(p0, p2)\n  b = s32[] add(p1, p3)\n"  # the key reads two operands
     "  ROOT r = pred[] compare(a, b), direction=LT", ["s32", "s32", "s32", "s32"]),
    ("  lt = pred[] compare(p0, p1), direction=LT\n  eq = pred[] compare(p0, p1), direction=EQ\n"
     "  gt = pred[] compare(p2, p3), direction=GT\n  t = pred[] and(eq, gt)\n"
     "  ROOT r = pred[] or(lt, t)", ["s32", "s32", "s32", "s32"]),  # lexicographic
])
def test_not_one_key(body: str, params: list[str]) -> None:
    assert sort_key(_cmp(params, body)) is None


def test_expression_key() -> None:
    key = sort_key(_cmp(["s32", "s32"], "  a = s32[] negate(p0)\n  b = s32[] negate(p1)\n"
                                         "  ROOT r = pred[] compare(a, b), direction=LT"))
    assert key is not None and not key.is_parameter and key.expr.opcode is Opcode.NEGATE


def _floats(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(-6, 6, size=n).astype(np.float32)
    special = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 1e-39,
                        -3e-39, np.float32(np.nan).view(np.uint32) + 0], np.float32)
    special[-1] = np.array([0x7FC00123], np.uint32).view(np.float32)[0]  # a NaN payload
    x[rng.choice(n, size=4 * len(special), replace=False)] = np.resize(special, 4 * len(special))
    return x


PROGRAMS = {
    "sort_f32": (jnp.sort, lambda: [_floats(700, 1)]),
    "sort_f32_rows": (lambda x: jnp.sort(x, axis=0), lambda: [_floats(1200, 2).reshape(400, 3)]),
    "argsort_f32_descending": (lambda x: jnp.argsort(x, descending=True, stable=True),
                               lambda: [_floats(600, 3)]),
    "argsort_s8": (lambda x: jnp.argsort(x, stable=True),
                   lambda: [np.random.default_rng(4).integers(-128, 128, 900).astype(np.int8)]),
    "sort_u64": (jnp.sort, lambda: [np.random.default_rng(5).integers(0, 2**64, 500,
                                                                      dtype=np.uint64)]),
    "permutation": (lambda k: jax.random.permutation(k, 5000),
                    lambda: [np.asarray(jax.random.key_data(jax.random.PRNGKey(7)))]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_key_sorts_match_jax(name: str, backend: str) -> None:
    f, make = PROGRAMS[name]
    args = make()
    if name == "permutation":
        g = f
        f = lambda k: g(jax.random.wrap_key_data(k))  # noqa: E731
    want = [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(f)(*args))]
    got = run_on(backend, f, args)
    for g_, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g_.view(np.uint8), w.view(np.uint8))


LONG = {
    "sort_f32": (jnp.sort, lambda: [_floats(140_000, 8)]),
    "argsort_f32_descending": (lambda x: jnp.argsort(x, descending=True, stable=True),
                               lambda: [_floats(131_072, 9)]),
    "sort_u64": (jnp.sort, lambda: [np.random.default_rng(10).integers(0, 2**64, 150_000,
                                                                       dtype=np.uint64)]),
    "three_operands": (lambda k, a, b: jax.lax.sort((k, a, b), num_keys=1, is_stable=True),
                       lambda: [np.random.default_rng(11).integers(-9, 9, 200_000)
                                .astype(np.int32), np.arange(200_000, dtype=np.float32),
                                np.arange(200_000, dtype=np.int64)]),
    "permutation": (lambda k: jax.random.permutation(jax.random.wrap_key_data(k), 262_144),
                    lambda: [np.asarray(jax.random.key_data(jax.random.PRNGKey(12)))]),
}


@pytest.mark.parametrize("name", sorted(LONG))
def test_long_rows_sort_on_every_thread(name: str) -> None:
    """One row of at least 2^17 elements sorts by the parallel radix sort (sort_radix.py):
    ties in order, NaNs, signed zeros, 64-bit keys, extra operands, a descending key, the same
    bits as jax.jit on one, two and three threads."""
    import hlofuse

    f, make = LONG[name]
    args = make()
    want = [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(f)(*args))]
    text = jax.jit(f).lower(*args).as_text(dialect="hlo")
    for threads in (1, 2, 3):
        exe = hlofuse.compile(text, pipeline="xla", backend="cpu", threads=threads)
        assert "on every thread" in exe.source
        got = exe(*args)
        got = got if isinstance(got, list | tuple) else [got]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.asarray(g).view(np.uint8), w.view(np.uint8))
