"""Register-tile dots (cpu/library/gemm_outer.py): long dots with a small result cut along K (a
layer's weight gradient `x^T dy` over a minibatch), and tall products by row blocks (its
forward and input-gradient products).

The C is checked on its own, compiled for 32- and 64-byte vectors whatever the host, against
numpy in float64 (every tile shape, ragged lanes, chunk counts, both wide sides, the GEMM
chunks with and without the BLAS); the result must not depend on the thread count. End to end,
such a dot compiled by hlofuse calls it and matches the interpreter.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import hlofuse
from hlofuse.backends import interpreter
from hlofuse.backends.cpu import build
from hlofuse.backends.cpu.library import blas, gemm, gemm_outer
from hlofuse.text import parse

_HARNESS = r"""
/* c = a x b with a(i, k) at a[i*sam + k*sak], b(k, j) at b[k*sbk + j*sbn] */
void hf_test_outer_f32(int64_t M, int64_t N, int64_t K, const float *a, int64_t sam,
                       int64_t sak, const float *b, int64_t sbk, int64_t sbn, float *c,
                       int threads) {
    hflib_gemm_outer_f32(M, N, K, a, sam, sak, b, sbk, sbn, c, threads);
}
void hf_test_rows_f32(int64_t M, int64_t N, int64_t K, const float *a, int64_t sam,
                      int64_t sak, const float *b, int64_t sbk, int64_t sbn, float *c,
                      int threads) {
    hflib_gemm_rows_f32(M, N, K, a, sam, sak, b, sbk, sbn, c, threads);
}
void hf_test_rows_f64(int64_t M, int64_t N, int64_t K, const double *a, int64_t sam,
                      int64_t sak, const double *b, int64_t sbk, int64_t sbn, double *c,
                      int threads) {
    hflib_gemm_rows_f64(M, N, K, a, sam, sak, b, sbk, sbn, c, threads);
}
void hf_test_outer_f64(int64_t M, int64_t N, int64_t K, const double *a, int64_t sam,
                       int64_t sak, const double *b, int64_t sbk, int64_t sbn, double *c,
                       int threads) {
    hflib_gemm_outer_f64(M, N, K, a, sam, sak, b, sbk, sbn, c, threads);
}
"""


@pytest.fixture(scope="module", params=[32, 64], ids=["vec32", "vec64"])
def outer(request: pytest.FixtureRequest) -> ctypes.CDLL:
    """The GEMM, the BLAS driver and the outer-product form, compiled as the prebuilt unit
    orders them, for 32- or 64-byte vectors; on the runtime's pool."""
    from hlofuse.backends.cpu import cexpr, runtime

    parts = [cexpr.prelude()]
    for s in ("f32", "f64"):
        parts += [gemm.gemm_helper(s), blas.declarations(s, gemm.PARALLEL_WORK),
                  gemm_outer.helper(s, gemm.PARALLEL_WORK)]
    lib = build.load_library("\n".join([*parts, _HARNESS]), name="test_gemm_outer",
                             extra_flags=(f"-DHFLIB_VBYTES={request.param}",))
    for fn in (lib.hf_test_outer_f32, lib.hf_test_outer_f64, lib.hf_test_rows_f32,
               lib.hf_test_rows_f64):
        fn.argtypes = [*[ctypes.c_int64] * 3, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                       ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                       ctypes.c_int]
    pool = runtime.parallel_address()
    if pool is not None:
        ctypes.c_void_p.in_dll(lib, "hf_parallel_ptr").value = pool
    return lib


def _run(lib: ctypes.CDLL, dtype: type, m: int, n: int, k: int, a_t: bool, b_t: bool,
         threads: int, seed: int = 0, form: str = "outer") -> tuple[np.ndarray, np.ndarray]:
    """(result, float64 reference) of a (m x k, stored transposed when a_t) times b (k x n,
    stored transposed when b_t)."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (k, m) if a_t else (m, k)).astype(dtype)
    b = rng.uniform(-1, 1, (n, k) if b_t else (k, n)).astype(dtype)
    sam, sak = (1, m) if a_t else (k, 1)
    sbk, sbn = (1, k) if b_t else (n, 1)
    c = np.full((m, n), np.nan, dtype)
    fn = getattr(lib, f"hf_test_{form}_{'f32' if dtype is np.float32 else 'f64'}")
    fn(m, n, k, a.ctypes.data, sam, sak, b.ctypes.data, sbk, sbn, c.ctypes.data, threads)
    an = a.T if a_t else a
    bn = b.T if b_t else b
    return c, an.astype(np.float64) @ bn.astype(np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_tile_and_chunk(outer: ctypes.CDLL, dtype: type) -> None:
    """Narrow sides 1..8 (tiles of 1-6 rows, several row groups), wide sides around the vector
    widths (whole vectors in 4-, 2- and 1-vector strips, lanes past the last vector), K from
    one row to past the chunk cap (1 block, a ragged last block and chunk, 16 chunks of more
    than KC rows), the vector side as M (A transposed: x^T dy) and as N, and results wide on
    both sides (many row groups and strips): against numpy."""
    tol = 1e-4 if dtype is np.float32 else 1e-12
    for narrow in (1, 2, 3, 5, 7, 8):
        for wide in (16, 17, 40, 64, 100):
            for k in (1, 7, 1025, 70_001):
                for wide_m in (True, False):
                    m, n = (wide, narrow) if wide_m else (narrow, wide)
                    c, want = _run(outer, dtype, m, n, k, a_t=wide_m, b_t=False,
                                   threads=1 + (m + k) % 3)
                    np.testing.assert_allclose(c, want, rtol=tol, atol=tol * np.sqrt(k),
                                               err_msg=f"{m}x{n}x{k}")
    for m, n, b_t in ((64, 64, False), (33, 20, True), (9, 9, False)):
        c, want = _run(outer, dtype, m, n, 20_000, a_t=True, b_t=b_t, threads=2)
        np.testing.assert_allclose(c, want, rtol=tol, atol=tol * 150, err_msg=f"{m}x{n}")


def test_result_does_not_depend_on_threads(outer: ctypes.CDLL) -> None:
    """K is cut into chunks by K alone and the chunks' sums are added in chunk order: one, two
    and three threads give the same bits."""
    for m, n in ((64, 2), (4, 64), (64, 64)):
        got = [_run(outer, np.float32, m, n, 65_536, a_t=True, b_t=False, threads=t)[0]
               for t in (1, 2, 3)]
        assert all(np.array_equal(got[0], g) for g in got[1:])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tall_products_by_row_blocks(outer: ctypes.CDLL, dtype: type) -> None:
    """`hflib_gemm_rows`: rows around the 96-row blocks and 6-row tiles, widths of whole
    vectors in 4-, 2- and 1-vector strips, K of one term to three cache blocks (256 rows of b),
    b read in place or packed from its columns (x @ W.T), a transposed, on 1-3 threads."""
    tol = 1e-4 if dtype is np.float32 else 1e-12
    for m in (1, 5, 6, 97, 200, 4099):
        for n in (16, 32, 48, 64, 80, 256):
            for k in (1, 7, 64, 600):
                for a_t, b_t in ((False, False), (False, True), (True, False)):
                    c, want = _run(outer, dtype, m, n, k, a_t=a_t, b_t=b_t,
                                   threads=1 + (m + n + k) % 3, form="rows")
                    np.testing.assert_allclose(c, want, rtol=tol, atol=tol * np.sqrt(k),
                                               err_msg=f"{m}x{n}x{k} {a_t} {b_t}")


def test_fits_weight_gradients_only() -> None:
    """The form is chosen for long products with a result of at most 256 x 256 whose vector
    side is contiguous; never for short K, a batch, integers, or a vector side read with a
    stride."""
    assert gemm_outer.fits("f32", 1, 64, 2, 65_536, 1, 1)  # x^T dy of a policy head
    assert gemm_outer.fits("f32", 1, 4, 64, 65_536, 1, 1)  # of an observation layer
    assert gemm_outer.fits("f64", 1, 64, 64, 65_536, 1, 1)  # a hidden layer's
    assert not gemm_outer.fits("f32", 1, 64, 2, 2048, 1, 1)  # short
    assert not gemm_outer.fits("f32", 1, 64, 64, 32_768, 1, 1)  # K < LONG * M * N
    assert not gemm_outer.fits("f32", 2, 64, 2, 65_536, 1, 1)  # batched
    assert not gemm_outer.fits("u32", 1, 64, 2, 65_536, 1, 1)
    assert not gemm_outer.fits("f32", 1, 64, 2, 65_536, 65_536, 65_536)  # wide side strided
    assert not gemm_outer.fits("f32", 1, 4, 8, 65_536, 1, 1)  # no side a vector wide


def test_fits_tall_products() -> None:
    assert gemm_outer.fits_rows("f32", 1, 65_536, 64, 64)  # a hidden layer's forward
    assert gemm_outer.fits_rows("f64", 1, 4096, 256, 256)
    assert not gemm_outer.fits_rows("f32", 1, 512, 64, 64)  # short
    assert not gemm_outer.fits_rows("f32", 1, 65_536, 100, 64)  # not whole vectors
    assert not gemm_outer.fits_rows("f32", 1, 65_536, 64, 512)  # long K
    assert not gemm_outer.fits_rows("f32", 2, 65_536, 64, 64)  # batched
    assert not gemm_outer.fits_rows("s32", 1, 65_536, 64, 64)


@pytest.mark.parametrize("dims", [
    ("65536,64", "65536,2", "64,2", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
    ("65536,4", "65536,64", "4,64", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
    ("2,8192", "8192,40", "2,40", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
    ("8192,64", "64,64", "8192,64", "lhs_contracting_dims={1}, rhs_contracting_dims={1}"),
], ids=["policy_head_grad", "obs_layer_grad", "row_major_lhs", "tall_x_wt"])
def test_compiled_weight_gradient_matches_interpreter(dims: tuple[str, ...]) -> None:
    lhs, rhs, out, numbers = dims
    module = parse(f"""
ENTRY e {{
  x = f32[{lhs}] parameter(0)
  dy = f32[{rhs}] parameter(1)
  ROOT dw = f32[{out}] dot(x, dy), {numbers}
}}""")
    exe = hlofuse.compile(module, pipeline=None, backend="cpu")
    form = "rows" if lhs == "8192,64" else "outer"
    assert f"hflib_gemm_{form}_f32(" in exe.source
    rng = np.random.default_rng(3)
    args = [rng.uniform(-1, 1, [int(d) for d in s.split(",")]).astype(np.float32)
            for s in (lhs, rhs)]
    want = interpreter.run(module, *args)[0]
    np.testing.assert_allclose(exe(*args)[0], want, rtol=1e-4, atol=1e-3)
