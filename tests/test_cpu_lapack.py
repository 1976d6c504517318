"""jax's LAPACK custom calls and the HLO cholesky / triangular-solve ops on the cpu backend
(cpu/library/lapack.py, lapack_calls.py, lapack_eigen.py): every routine against jax.jit
(tests/lapack_cases.py), raw results against the interpreter, batches on several threads, the C
fallbacks and refusals without LAPACK, and a brax physics step end to end."""

from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.backends import interpreter
from hlofuse.backends.cpu.cexpr import UnsupportedOpError
from hlofuse.backends.cpu.library import blas, lapack
from hlofuse.text import parse

jax = pytest.importorskip("jax")
lapack_cases = pytest.importorskip("lapack_cases")
needs_lapack = pytest.mark.skipif(lapack.find() is None,
                                  reason="LAPACK (the scipy-openblas32 wheel) is not installed")


@needs_lapack
@pytest.mark.parametrize("dtype", lapack_cases.DTYPES)
def test_every_routine_matches_jax(dtype: str) -> None:
    x, want = lapack_cases.reference(dtype)
    with jax.enable_x64(True):
        got = hlofuse.jit(lapack_cases.program(dtype), backend="cpu")(x)
    lapack_cases.compare(x, want, got, dtype)


@needs_lapack
@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_potrf_raw_result_is_the_interpreters(dtype: str) -> None:
    """As the root: LAPACK leaves the upper triangle as given, as the interpreter does; info."""
    text, a = lapack_cases.potrf_case(dtype)
    factor, info = hlofuse.compile(text, backend="cpu")(a)
    spec, spec_info = hlofuse.compile(text, backend="interpreter")(a)
    assert info.tolist() == spec_info.tolist() == [0, 0, 2]
    np.testing.assert_array_equal(np.triu(factor, 1), np.triu(a, 1))
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(factor[:2], spec[:2], rtol=tol, atol=tol)


@needs_lapack
def test_getrf_raw_result() -> None:
    text, a = lapack_cases.getrf_case()
    lapack_cases.check_getrf(a, hlofuse.compile(text, backend="cpu")(a))


@pytest.mark.parametrize(("text", "message"), lapack_cases.MALFORMED,
                         ids=[m for _, m in lapack_cases.MALFORMED])
def test_malformed_calls_are_refused(text: str, message: str) -> None:
    with pytest.raises(UnsupportedOpError, match=rf"instruction c in computation e: .*{message}"):
        hlofuse.compile(text, backend="cpu", pipeline="none")


_HLO_OPS = """
ENTRY e {{
  a = {t}[3,4,4] parameter(0)
  b = {t}[3,4,2] parameter(1)
  l = {t}[3,4,4] cholesky(a), lower=true
  u = {t}[3,4,4] cholesky(a), lower=false
  x = {t}[3,4,2] triangular-solve(l, b), left_side=true, lower=true, transpose_a=ADJOINT
  y = {t}[3,2,4] transpose(b), dimensions={{0,2,1}}
  z = {t}[3,2,4] triangular-solve(u, y), left_side=false, lower=false, unit_diagonal=true,
      transpose_a=NO_TRANSPOSE
  ROOT r = ({t}[3,4,4], {t}[3,4,4], {t}[3,4,2], {t}[3,2,4]) tuple(l, u, x, z)
}}
"""


@pytest.mark.parametrize("t", ["f32", "c128"])
def test_hlo_cholesky_and_triangular_solve(t: str) -> None:
    """The HLO ops run (through LAPACK or the C fallback): the interpreter's results, the other
    triangle zero, a matrix that is not positive definite all NaN."""
    dtype = {"f32": "float32", "c128": "complex128"}[t]
    rng = np.random.default_rng(7)
    a = lapack_cases.spd(rng, 3, 4, dtype)
    a[2, 2, 2] = -30
    b = lapack_cases._random(rng, (3, 4, 2), dtype)
    module = parse(_HLO_OPS.format(t=t))
    got = hlofuse.compile(module, backend="cpu")(a, b)
    want = interpreter.run(module, a, b)
    tol = 1e-4 if t == "f32" else 1e-12
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g[:2], w[:2], rtol=tol, atol=tol)
    for g, w in zip(got[:2], want[:2], strict=True):
        assert np.isnan(g[2]).all() and np.isnan(w[2]).all()
    assert not np.triu(got[0][:2], 1).any() and not np.tril(got[1][:2], -1).any()


@needs_lapack
def test_batches_run_on_threads() -> None:
    """A batch large enough to be cut into tasks: every matrix is the one jax computes."""
    rng = np.random.default_rng(8)
    a = lapack_cases.spd(rng, 40, 24, "float64")

    def f(a):  # type: ignore[no-untyped-def]
        return jax.numpy.linalg.cholesky(a), jax.numpy.linalg.eigvalsh(a)

    with jax.enable_x64(True):
        module = hlofuse.from_jax(f, a)
        want = jax.jit(f)(a)
    exe = hlofuse.compile(module, backend="cpu", threads=2)
    assert "hf_parallel_ptr(custom_call" in exe.source
    for g, w in zip(exe(a), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@needs_lapack
@pytest.mark.usefixtures("private_cpu_cache")
def test_split_build_defines_the_pointers_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kernel a translation unit of its own: the kernel units declare the LAPACK pointers,
    the driver's unit defines them, and `bind` finds them."""
    from hlofuse.backends.cpu import units

    monkeypatch.setattr(units, "UNIT_BYTES", 1)
    rng = np.random.default_rng(10)
    a = lapack_cases.spd(rng, 2, 4, "float32")

    def f(a):  # type: ignore[no-untyped-def]
        low = jax.numpy.linalg.cholesky(a)
        return jax.scipy.linalg.lu_factor(low + 1)[0], jax.numpy.linalg.eigvalsh(a)

    exe = hlofuse.compile(hlofuse.from_jax(f, a), backend="cpu")
    assert units.units(exe._runner.program) is not None
    for g, w in zip(exe(a), jax.jit(f)(a), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_custom_calls_stay_unfused() -> None:
    """The fusion passes leave a LAPACK call a kernel of its own (an opaque library op)."""
    from hlofuse.ir.opcodes import Opcode
    from hlofuse.passes.pipelines import run_pipeline

    def f(x):  # type: ignore[no-untyped-def]
        q, r = jax.numpy.linalg.qr(x * 2)
        return q + 1, jax.scipy.linalg.solve_triangular(r + 1, x, lower=False) * 3

    module = hlofuse.from_jax(f, np.eye(4, dtype=np.float32))
    run_pipeline(module, "hlofuse")
    calls = [i for c in module.computations for i in c.instructions
             if i.opcode is Opcode.CUSTOM_CALL]
    assert len(calls) == 3 and all(i.parent is module.entry for i in calls)


# ----- without LAPACK -------------------------------------------------------------------------

@pytest.fixture
def no_lapack(monkeypatch: pytest.MonkeyPatch, private_cpu_cache: None) -> None:
    """A process where the wheel is missing: `find` finds nothing."""
    monkeypatch.setattr(lapack, "find", lambda: None)


@pytest.mark.usefixtures("no_lapack")
def test_without_lapack_cholesky_and_solves_run_their_fallback() -> None:
    rng = np.random.default_rng(9)
    a = lapack_cases.spd(rng, 2, 5, "complex64")
    b = lapack_cases._random(rng, (2, 5, 3), "complex64")

    def f(a, b):  # type: ignore[no-untyped-def]
        low = jax.numpy.linalg.cholesky(a)
        return low, jax.scipy.linalg.solve_triangular(low, b, lower=True, trans=2)

    module = hlofuse.from_jax(f, a, b)
    got = hlofuse.compile(module, backend="cpu")(a, b)
    want = jax.jit(f)(a, b)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.usefixtures("no_lapack")
def test_without_lapack_other_routines_are_refused() -> None:
    text, _ = lapack_cases.getrf_case()
    with pytest.raises(UnsupportedOpError, match=r"instruction c in e: .*lapack_dgetrf_ffi.*"
                                                 r"dgetrf.*scipy-openblas32"):
        hlofuse.compile(text, backend="cpu")


@needs_lapack
def test_unbound_pointers_give_nan_never_stale_values() -> None:
    """A library whose pointers are null (a test's unbind): getrf writes NaN and info -1;
    binding a LAPACK without the routine it needs is refused."""
    text, a = lapack_cases.getrf_case()
    exe = hlofuse.compile(text, backend="cpu")
    lib = exe._runner._lib
    lapack.unbind(lib)
    try:
        lu, ipiv, info = exe(a)
        assert np.isnan(lu).all() and (ipiv == -1).all() and (info == -1).all()
        with pytest.raises(UnsupportedOpError, match=r"dgetrf.*scipy-openblas32"):
            lapack.bind(lib, lapack.Lapack("", {}))
    finally:
        assert lapack.bind(lib)
    lapack_cases.check_getrf(a, exe(a))


def test_blas_setting_leaves_lapack_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """HLOFUSE_BLAS=0 chooses our GEMM for dots; LAPACK is still found."""
    pytest.importorskip("scipy_openblas32")
    monkeypatch.setenv("HLOFUSE_BLAS", "0")
    blas.find.cache_clear()
    lapack.find.cache_clear()
    try:
        assert blas.find() is None
        found = lapack.find()
        assert found is not None and found.addresses["dpotrf"]
    finally:
        monkeypatch.undo()
        blas.find.cache_clear()
        lapack.find.cache_clear()


@needs_lapack
@pytest.mark.slow
def test_brax_generalized_step_matches_jax() -> None:
    """brax's generalized pipeline with the exact mass-matrix inverse (potrf, trsm)."""
    envs = pytest.importorskip("brax.envs")
    env = envs.get_environment("inverted_pendulum", backend="generalized")
    env.sys = env.sys.replace(matrix_inv_iterations=0)
    state = jax.jit(env.reset)(jax.random.PRNGKey(0))
    action = jax.numpy.full(env.action_size, 0.3)
    assert "lapack_spotrf_ffi" in jax.jit(env.step).lower(state, action).as_text()
    want = jax.jit(env.step)(state, action)
    got = hlofuse.jit(env.step, backend="cpu")(state, action)
    for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)


# Modes jax's functions do not reach: the raw call as the root, against the interpreter.
_RAW_MODES = [
    ("syevd_no_vectors", "lapack_cheevd_ffi", ["c64[2,3,3]"],
     ["c64[2,3,3]", "f32[2,3]", "s32[2]"], "mode = 78 : ui8, uplo = 85 : ui8"),
    ("gehrd_rows_2_3", "lapack_sgehrd_ffi", ["f32[4,4]"], ["f32[4,4]", "f32[3]", "s32[]"],
     "high = 3 : i32, low = 2 : i32"),
    ("gesvd_thin", "lapack_zgesvd_ffi", ["c128[2,3]"],
     ["c128[2,3]", "f64[2]", "c128[2,2]", "c128[2,3]", "s32[]"], "mode = 83 : ui8"),
    ("gesdd_no_vectors_thin", "lapack_dgesdd_ffi", ["f64[3,2]"],
     ["f64[3,2]", "f64[2]", "f64[3,2]", "f64[2,2]", "s32[]"], "mode = 78 : ui8"),
    ("gees_no_vectors", "lapack_dgees_ffi", ["f64[4,4]"],
     ["f64[4,4]", "f64[4,4]", "f64[4]", "f64[4]", "s32[]", "s32[]"],
     "mode = 78 : ui8, sort = 78 : ui8"),
]


@needs_lapack
@pytest.mark.parametrize(("name", "target", "operands", "results", "config"), _RAW_MODES,
                         ids=[c[0] for c in _RAW_MODES])
def test_raw_modes_match_the_interpreter(name: str, target: str, operands: list[str],
                                         results: list[str], config: str) -> None:
    text = lapack_cases.custom_call(target, operands, results, config)
    module = parse(text)
    rng = np.random.default_rng(11)
    shape = module.entry.parameters[0].shape
    a = lapack_cases._random(rng, shape.dims, str(shape.dtype.np))
    if name == "syevd_no_vectors":
        a = a + np.conj(np.swapaxes(a, -1, -2))
    got = hlofuse.compile(module, backend="cpu")(a)
    want = interpreter.run(module, a)
    tol = 1e-4 if shape.dtype.name in ("f32", "c64") else 1e-10
    if name == "gees_no_vectors":  # the form's eigenvalue order is the algorithm's
        eig = np.sort_complex(np.linalg.eigvals(a))
        for out in (got, want):
            np.testing.assert_allclose(np.sort_complex(out[2] + 1j * out[3]), eig, atol=tol)
            assert not out[1].any() and out[4] == 0 and out[5] == 0
        return
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if name.startswith("gesvd") and i in (2, 3):  # singular vectors: up to phase
            g, w = np.abs(g), np.abs(w)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
