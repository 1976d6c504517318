"""jax's LAPACK custom calls on the interpreter (backends/interpreter/lapack.py): every routine
against jax.jit (tests/lapack_cases.py), raw results of the calls as LAPACK lays them out, and
malformed calls refused naming the instruction."""

from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.errors import InterpreterError

jax = pytest.importorskip("jax")
lapack_cases = pytest.importorskip("lapack_cases")


@pytest.mark.parametrize("dtype", lapack_cases.DTYPES)
def test_every_routine_matches_jax(dtype: str) -> None:
    x, want = lapack_cases.reference(dtype)
    with jax.enable_x64(True):
        got = hlofuse.jit(lapack_cases.program(dtype), backend="interpreter")(x)
    lapack_cases.compare(x, want, got, dtype)


@pytest.mark.parametrize("dtype", lapack_cases.DTYPES)
def test_potrf_raw_result(dtype: str) -> None:
    """As the root: the factor in the lower triangle, the upper one as given, info = the
    order of the first minor that is not positive definite."""
    text, a = lapack_cases.potrf_case(dtype)
    factor, info = hlofuse.compile(text, backend="interpreter")(a)
    assert info.tolist() == [0, 0, 2]
    np.testing.assert_array_equal(np.triu(factor[:2], 1), np.triu(a[:2], 1))
    low = np.tril(factor[:2])
    tol = 1e-5 if dtype in ("float32", "complex64") else 1e-12
    np.testing.assert_allclose(low @ np.conj(np.swapaxes(low, -1, -2)),
                               np.tril(a[:2]) + np.conj(np.swapaxes(np.tril(a[:2], -1), -1, -2)),
                               rtol=tol, atol=tol * 10)


def test_getrf_raw_result() -> None:
    text, a = lapack_cases.getrf_case()
    lapack_cases.check_getrf(a, hlofuse.compile(text, backend="interpreter")(a))


@pytest.mark.parametrize(("text", "message"), lapack_cases.MALFORMED,
                         ids=[m for _, m in lapack_cases.MALFORMED])
def test_malformed_calls_are_refused(text: str, message: str) -> None:
    exe = hlofuse.compile(text, backend="interpreter", pipeline="none")
    args = [np.zeros(p.shape.dims, p.shape.dtype.np) for p in exe.module.entry.parameters]
    with pytest.raises(InterpreterError, match=rf"custom-call .*instruction c in e\): .*{message}"):
        exe(*args)


def test_unknown_lapack_name_is_opaque() -> None:
    text = lapack_cases.custom_call("lapack_corgqr_ffi", ["c64[3,3]", "c64[3]"], ["c64[3,3]"])
    exe = hlofuse.compile(text, backend="interpreter", pipeline="none")
    with pytest.raises(InterpreterError, match="custom calls are opaque"):
        exe(np.zeros((3, 3), np.complex64), np.zeros(3, np.complex64))
