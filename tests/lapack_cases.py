"""jnp.linalg / jax.scipy.linalg functions that lower to every LAPACK custom call jax emits on CPU
(potrf, getrf, geqrf, geqp3, orgqr, ormqr, syevd, gesdd, gesvd, geev, gees, gehrd, sytrd, gtsv,
trsm, and jax's perturbed tridiagonal solve), gathered in one function per element type so a
backend compiles it once; and how to compare each result with jax.jit's (directly where the
result is unique, by reconstruction where it is not: eigenvectors, singular vectors, Schur forms).

Used by test_interpreter_lapack.py and test_cpu_lapack.py. Every result is a raw output of a
jax function: nothing reconstructs inside the program (the cpu backend has no complex dot).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

DTYPES = ["float32", "float64", "complex64", "complex128"]


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    x = rng.standard_normal(shape)
    if dtype.startswith("complex"):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def inputs(dtype: str, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = _random(rng, (2, 4, 4), dtype)
    m = _random(rng, (2, 4, 4), dtype)
    spd = m @ np.conj(np.swapaxes(m, -1, -2)) + 4 * np.eye(4)
    return {
        "a": a,                                        # general, batched
        "h": spd.astype(dtype),                        # Hermitian positive definite, batched
        "tall": _random(rng, (5, 3), dtype),
        "wide": _random(rng, (3, 5), dtype),
        "b": _random(rng, (2, 4, 3), dtype),           # right-hand sides
        "diag": _random(rng, (3, 4), dtype) + np.array([0, 5, 0])[:, None].astype(dtype),
    }


def program(dtype: str) -> Any:
    """The function (of `inputs(dtype)`) whose results cover every routine."""
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    from jax import lax
    from jax._src.lax.linalg import geqrf  # (not exported: the reflectors ormqr applies)

    complex_type = dtype.startswith("complex")

    def f(x: dict) -> dict:
        a, h, tall, wide, b = x["a"], x["h"], x["tall"], x["wide"], x["b"]
        eye = jnp.eye(4, dtype=a.dtype)
        lower = jnp.tril(a) + 4 * eye
        out = {
            "chol": jnp.linalg.cholesky(h),
            "chol_upper": jsl.cholesky(h, lower=False),
            "chol_not_pd": jnp.linalg.cholesky(h - 20 * eye),
            "lu": jsl.lu_factor(a),
            "lu_wide": lax.linalg.lu(wide),
            "qr": jnp.linalg.qr(tall),
            "qr_complete": jnp.linalg.qr(wide, mode="complete"),
            "qr_pivoting": jsl.qr(tall, pivoting=True),
            "geqrf": geqrf(tall),
            "ormqr_left": lax.linalg.ormqr(*geqrf(tall), tall[:, :2] + 1,
                                           left=True, transpose=True),
            "ormqr_right": lax.linalg.ormqr(*geqrf(tall), tall.T[:2] + 1,
                                            left=False, transpose=False),
            "eigh": jnp.linalg.eigh(h),
            "eigvalsh_upper": jnp.linalg.eigvalsh(h, UPLO="U"),
            "svd": jnp.linalg.svd(tall),
            "svd_thin": jnp.linalg.svd(wide, full_matrices=False),
            "svdvals": jnp.linalg.svd(a, compute_uv=False),
            "svd_qr": lax.linalg.svd(tall, algorithm=lax.linalg.SvdAlgorithm.QR),
            "eig": jnp.linalg.eig(a),
            "eig_left": lax.linalg.eig(a[0], compute_left_eigenvectors=True,
                                       compute_right_eigenvectors=False),
            "schur": jsl.schur(a[0]),
            "hessenberg": jsl.hessenberg(a[0], calc_q=True),
            "tridiagonal": lax.linalg.tridiagonal(h, lower=True),
            "tridiagonal_upper": lax.linalg.tridiagonal(h, lower=False),
            "gtsv": lax.linalg.tridiagonal_solve(x["diag"][0], x["diag"][1], x["diag"][2], b[0]),
            "trsm": jsl.solve_triangular(lower, b, lower=True),
            "trsm_trans": jsl.solve_triangular(lower, b, lower=True, trans=2 if complex_type
                                               else 1),
            "trsm_right": lax.linalg.triangular_solve(
                jnp.swapaxes(lower, -1, -2), jnp.swapaxes(b, -1, -2), left_side=False,
                lower=False, transpose_a=True, conjugate_a=complex_type, unit_diagonal=True),
        }
        dl, d, du = x["diag"]
        out["perturbed"] = lax.linalg.tridiagonal_solve(dl, d, du, b[0], perturb_singular=True)
        ones = jnp.ones_like(d)  # singular: every row of [[1, 1, 0, 0], [1, 1, 1, 0], ...]
        out["perturbed_singular"] = lax.linalg.tridiagonal_solve(
            ones.at[0].set(0), ones, ones.at[-1].set(0), b[0], perturb_singular=True)
        return out

    return f


@functools.cache
def reference(dtype: str) -> tuple[dict[str, np.ndarray], dict]:
    """(inputs, jax.jit's results) for `dtype`, computed once per process (with x64 on).
    jax compiles at optimization level 0: the values are LAPACK's either way, the compile
    takes half the time."""
    import jax

    with jax.enable_x64(True):
        x = inputs(dtype)
        fn = jax.jit(program(dtype), compiler_options={"xla_backend_optimization_level": 0})
        return x, jax.tree.map(np.asarray, fn(x))


def _unit_columns(v: np.ndarray) -> np.ndarray:
    """Columns scaled so their largest entry is real and positive (eigenvector phases)."""
    idx = np.argmax(np.abs(v), axis=-2)[..., None, :]
    big = np.take_along_axis(v, idx, axis=-2)
    return v * (np.conj(big) / np.abs(big))


def compare(x: dict[str, np.ndarray], want: dict, got: dict, dtype: str) -> None:
    """Assert `got` (a backend's results of `program(dtype)(x)`) matches jax's `want`."""
    single = dtype in ("float32", "complex64")
    tol = 2e-4 if single else 1e-10
    gap = tol * 50

    def close(w: Any, g: Any, t: float = tol) -> None:
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=t, atol=t)

    unique = ["chol", "chol_upper", "chol_not_pd", "lu", "lu_wide", "qr", "qr_complete",
              "qr_pivoting", "geqrf", "ormqr_left", "ormqr_right", "eigvalsh_upper", "svdvals",
              "hessenberg", "tridiagonal", "tridiagonal_upper", "gtsv", "trsm", "trsm_trans",
              "trsm_right"]
    for key in unique:
        w, g = want[key], got[key]
        for wl, gl in zip(_leaves(w), _leaves(g), strict=True):
            close(wl, gl)
    assert np.isnan(np.tril(np.asarray(got["chol_not_pd"]))[..., [0, 3], [0, 3]]).all()
    a = x["a"]
    # eigh: eigenvalues, eigenvectors up to phase
    (ww, wv), (gw, gv) = want["eigh"], got["eigh"]
    close(ww, gw)
    close(_unit_columns(np.asarray(wv)), _unit_columns(np.asarray(gv)), gap)
    # svd: singular values, reconstruction, orthonormal factors
    for key, m in (("svd", x["tall"]), ("svd_thin", x["wide"]), ("svd_qr", x["tall"])):
        (_, ws, _), (gu, gs, gvt) = want[key], got[key]
        gu, gs, gvt = np.asarray(gu), np.asarray(gs), np.asarray(gvt)
        close(ws, gs)
        k = len(gs)
        close(m, (gu[:, :k] * gs) @ gvt[:k], gap)
        close(np.eye(gu.shape[1]), np.conj(gu.T) @ gu, gap)
    # eig: eigenvalues (sorted), A v = v w, unit vectors
    (ww, _), (gw, gv) = want["eig"], got["eig"]
    close(np.sort_complex(np.asarray(ww)), np.sort_complex(np.asarray(gw)), gap)
    gv, gw = np.asarray(gv), np.asarray(gw)
    close(a @ gv, gv * gw[..., None, :], gap)
    close(np.ones(gv.shape[:-2] + gv.shape[-1:]), np.linalg.norm(gv, axis=-2), gap)
    gw, gl = (np.asarray(v) for v in got["eig_left"])
    close(np.conj(gl.T) @ a[0], gw[:, None] * np.conj(gl.T), gap)
    # schur: a = z t z^H, z unitary, t (quasi-)upper triangular with a's eigenvalues
    t, z = (np.asarray(v) for v in got["schur"])
    close(a[0], z @ t @ np.conj(z.T), gap)
    close(np.eye(4), np.conj(z.T) @ z, gap)
    assert np.abs(np.tril(t, -2)).max() <= gap
    sub = np.abs(np.diagonal(t, -1)) > gap
    if dtype.startswith("complex"):
        assert not sub.any()
    for i in np.flatnonzero(sub):  # a real form's 2x2 blocks: standardized, not touching
        assert not (i + 1 < len(sub) and sub[i + 1])
        assert abs(t[i, i] - t[i + 1, i + 1]) <= gap and t[i + 1, i] * t[i, i + 1] < 0
    close(want["perturbed"], got["perturbed"])
    w, g = np.asarray(want["perturbed_singular"]), np.asarray(got["perturbed_singular"])
    assert np.isfinite(w).all() and np.isfinite(g).all()
    close(w / np.abs(w).max(), g / np.abs(w).max(), gap)


def _leaves(x: Any) -> list[np.ndarray]:
    if isinstance(x, (tuple, list)):
        return [leaf for v in x for leaf in _leaves(v)]
    return [np.asarray(x)]


def custom_call(target: str, operands: list[str], results: list[str], config: str = "",
                batch_dims: int | None = None) -> str:
    """An HLO module whose root is one custom call of `target` on parameters of `operands`
    (shapes like "f32[2,3,3]") with tuple result `results`."""
    params = "\n".join(f"  p{i} = {s} parameter({i})" for i, s in enumerate(operands))
    names = ", ".join(f"p{i}" for i in range(len(operands)))
    shape = results[0] if len(results) == 1 else f"({', '.join(results)})"
    attrs = f'custom_call_target="{target}", api_version=API_VERSION_TYPED_FFI'
    if batch_dims is not None:
        attrs += f', frontend_attributes={{num_batch_dims="{batch_dims}"}}'
    attrs += f", backend_config={{{config}}}"
    root = f"  ROOT c = {shape} custom-call({names}), {attrs}"
    return f"HloModule m\n\nENTRY e {{\n{params}\n{root}\n}}\n"


def spd(rng: np.random.Generator, count: int, n: int, dtype: str) -> np.ndarray:
    m = _random(rng, (count, n, n), dtype)
    return (m @ np.conj(np.swapaxes(m, -1, -2)) + n * np.eye(n)).astype(dtype)


def potrf_case(dtype: str) -> tuple[str, np.ndarray]:
    """potrf of 3 matrices as the root: junk in the upper triangle LAPACK must leave alone,
    the third not positive definite at order 2."""
    t = {"float32": "f32", "float64": "f64", "complex64": "c64", "complex128": "c128"}[dtype]
    a = spd(np.random.default_rng(3), 3, 4, dtype)
    a[:, 0, 3] = 99  # not read (lower)
    a[2, 1, 1] = -50  # leading minor of order 2 not positive definite
    text = custom_call(f"lapack_{'sdcz'[DTYPES.index(dtype)]}potrf_ffi", [f"{t}[3,4,4]"],
                       [f"{t}[3,4,4]", "s32[3]"], "uplo = 76 : ui8", 1)
    return text, a


def getrf_case() -> tuple[str, np.ndarray]:
    """getrf of 2 f64 matrices as the root, the second singular (a zero column)."""
    a = np.random.default_rng(4).standard_normal((2, 4, 3))
    a[1, :, 1] = 0
    text = custom_call("lapack_dgetrf_ffi", ["f64[2,4,3]"], ["f64[2,4,3]", "s32[2,3]", "s32[2]"],
                       "", 1)
    return text, a


def check_getrf(a: np.ndarray, out: list[np.ndarray]) -> None:
    """P a = L U from LAPACK's packed result and 1-based row swaps; info."""
    lu, ipiv, info = out
    assert info.tolist() == [0, 2]
    for i in range(2):
        m, n = a[i].shape
        rows = list(range(m))
        for j, p in enumerate(ipiv[i]):
            rows[j], rows[p - 1] = rows[p - 1], rows[j]
        lower = np.tril(lu[i], -1)[:, :n] + np.eye(m, n)
        np.testing.assert_allclose(lower @ np.triu(lu[i])[:n], a[i][rows], atol=1e-12)


# Malformed LAPACK calls: (HLO text, what the error says). Both backends refuse them naming
# the instruction (c) before running anything.
MALFORMED = [
    (custom_call("lapack_spotrf_ffi", ["f32[3,3]"], ["f32[3,3]", "s32[]"], "uplo = 88 : ui8"),
     "uplo=88 is not one of"),
    (custom_call("lapack_spotrf_ffi", ["f32[3,3]"], ["f32[3,3]", "s32[]"]),
     "backend_config needs uplo"),
    (custom_call("lapack_spotrf_ffi", ["f32[3,3]"], ["f32[3,3]", "s32[]"],
                 "uplo = 76 : ui8, extra = 1 : i32"), "unknown backend_config attribute extra"),
    (custom_call("lapack_spotrf_ffi", ["f32[3,3]"], ["f32[3,3]", "s32[]"], "uplo = 'L'"),
     "is not `name = integer"),
    (custom_call("lapack_spotrf_ffi", ["f32[3,4]"], ["f32[3,4]", "s32[]"], "uplo = 76 : ui8"),
     "dimension n=4, expected 3"),
    (custom_call("lapack_spotrf_ffi", ["f32[2,3,3]"], ["f32[2,3,3]", "s32[3]"],
                 "uplo = 76 : ui8"), r"result 1 is s32\[3\], expected s32\[2\]"),
    (custom_call("lapack_dpotrf_ffi", ["f32[3,3]"], ["f32[3,3]", "s32[]"], "uplo = 76 : ui8"),
     "operand 0 is f32, expected f64"),
    (custom_call("lapack_spotrf_ffi", ["f32[2,3,3]"], ["f32[2,3,3]", "s32[2]"],
                 "uplo = 76 : ui8", batch_dims=2), "num_batch_dims=2"),
    (custom_call("lapack_sgehrd_ffi", ["f32[3,3]"], ["f32[3,3]", "f32[2]", "s32[]"],
                 "high = 1 : i32, low = 2 : i32"), "needs 1 <= low <= high <= 3"),
    (custom_call("lapack_sgees_ffi", ["f32[2,2]"],
                 ["f32[2,2]", "f32[2,2]", "f32[2]", "f32[2]", "s32[]", "s32[]"],
                 "mode = 86 : ui8, sort = 83 : ui8"), "sort=83 is not one of"),
    (custom_call("lapack_sorgqr_ffi", ["f32[2,3]", "f32[2]"], ["f32[2,3]"]),
     "needs rows >= columns >= reflectors"),
]
