"""Pred inputs whose bytes are not 0 or 1 (an untrusted `.npz`, `np.frombuffer(b"\\x02", bool)`)
are read as numpy and the interpreter read them, true where the byte is not 0, on the cpu
backend (`executable._canonical_preds`) and through XLA's custom call (`jax_ffi.py`); the
caller's array is never written."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import hlofuse
from hlofuse.backends import interpreter
from hlofuse.text import parse

pytestmark = pytest.mark.usefixtures("private_cpu_cache")  # (conftest.py)

RAW = bytes([2, 1, 0, 3, 255, 0, 128, 1])

_OPS = """HloModule preds
ENTRY e {
  p = pred[8] parameter(0)
  q = pred[8] parameter(1)
  x = s32[8] parameter(2)
  n = pred[8] not(p)
  a = pred[8] and(p, q)
  o = pred[8] xor(p, q)
  e = pred[8] compare(p, q), direction=EQ
  c = s32[8] convert(p)
  s = s32[8] select(p, x, c)
  ROOT t = (pred[8], pred[8], pred[8], pred[8], s32[8], s32[8]) tuple(n, a, o, e, c, s)
}
"""

_TUPLE = """HloModule tuple_param
ENTRY e {
  t = (pred[8], s32[8]) parameter(0)
  p = pred[8] get-tuple-element(t), index=0
  x = s32[8] get-tuple-element(t), index=1
  n = pred[8] not(p)
  c = s32[8] convert(n)
  ROOT r = s32[8] add(c, x)
}
"""


def _raw() -> np.ndarray:
    return np.frombuffer(RAW, dtype=bool)


def test_non_canonical_pred_inputs_are_read_as_numpy_reads_them() -> None:
    p = _raw()
    q = np.frombuffer(bytes([1, 4, 0, 0, 1, 9, 1, 0]), dtype=bool)
    x = np.arange(10, 18, dtype=np.int32)
    want = interpreter.run(parse(_OPS), p, q, x)
    truth = p.view(np.uint8) != 0
    np.testing.assert_array_equal(want[0], ~truth)  # (the interpreter is numpy here)
    for pipeline in ("hlofuse", None):
        got = hlofuse.compile(_OPS, pipeline=pipeline)(p, q, x)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
            if g.dtype == np.bool_:
                assert g.view(np.uint8).max() <= 1
    assert bytes(p.view(np.uint8)) == RAW  # the caller's array is not written


def test_a_pred_inside_a_tuple_parameter_is_canonical_too() -> None:
    x = np.arange(8, dtype=np.int32)
    got = hlofuse.compile(_TUPLE)((_raw(), x))[0]
    np.testing.assert_array_equal(got, interpreter.run(parse(_TUPLE), (_raw(), x))[0])


def test_a_writable_non_contiguous_pred_input() -> None:
    p = np.frombuffer(bytes(RAW) * 2, dtype=bool).copy()[::2]
    want = ~(p.view(np.uint8) != 0)
    got = hlofuse.compile(_OPS)(p, p, np.zeros(8, np.int32))[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("direct", [False, True])
def test_hlofuse_jit_reads_pred_arguments_as_numpy(direct: bool) -> None:
    def f(p: jnp.ndarray, x: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
        return jnp.logical_not(p), p.astype(jnp.int32), jnp.where(p, x, -x)

    g = hlofuse.jit(f)
    if direct:
        g._xla = False  # the path without XLA
    p = _raw()
    x = np.arange(1, 9, dtype=np.int32)
    truth = p.view(np.uint8) != 0
    for arg in (p, jnp.asarray(p)):
        n, c, w = g(arg, x)
        np.testing.assert_array_equal(np.asarray(n), ~truth)
        np.testing.assert_array_equal(np.asarray(c), truth.astype(np.int32))
        np.testing.assert_array_equal(np.asarray(w), np.where(truth, x, -x))


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_a_pred_returned_by_a_host_callback_is_canonical(backend: str) -> None:
    """A pred that enters a running program from outside it (a host callback's result) is read
    as numpy reads it too: the trampoline (`backends/cpu/hostcall.py`) copies it as 0 or 1."""
    import jax

    from hlofuse.frontends.jax import hlo_text

    def f(v: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
        p = jax.pure_callback(lambda a: a > 0, jax.ShapeDtypeStruct(v.shape, jnp.bool_), v)
        return jnp.logical_not(p), p.astype(jnp.int32), jnp.where(p, v, -1.0)

    x = np.arange(8, dtype=np.float32)
    exe = hlofuse.compile(hlo_text(f, x), backend=backend, host_callbacks=[lambda a: (_raw(),)])
    n, c, w = exe(x)
    truth = _raw().view(np.uint8) != 0
    assert n.view(np.uint8).max() <= 1
    np.testing.assert_array_equal(n, ~truth)
    np.testing.assert_array_equal(c, truth.astype(np.int32))
    np.testing.assert_array_equal(w, np.where(truth, x, -1.0))
