"""The BLAS behind f32/f64 dots (cpu/library/blas.py).

The argument mapping (transpose flags, leading dimensions, batch strides) is checked against a
stand-in CBLAS written in numpy and bound through the same function pointers the real one uses,
so these tests do not depend on which BLAS (if any) is installed. The real OpenBLAS wheel is
exercised when `scipy_openblas32` is installed.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import hlofuse
from hlofuse.backends import interpreter
from hlofuse.backends.cpu import build
from hlofuse.backends.cpu.library import blas, gemm
from hlofuse.backends.kernel_ir.lower.library import library_op
from hlofuse.text import parse


def _module(lhs: str, rhs: str, out: str, dims: str, dtype: str = "f32") -> str:
    return f"""
ENTRY e {{
  a = {dtype}[{lhs}] parameter(0)
  b = {dtype}[{rhs}] parameter(1)
  ROOT d = {dtype}[{out}] dot(a, b), {dims}
}}"""


# (name, lhs dims, rhs dims, out dims, dimension numbers)
SHAPES = [
    ("plain", "8,20", "20,12", "8,12", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
    ("lhs_t", "20,8", "20,12", "8,12", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
    ("rhs_t", "8,20", "12,20", "8,12", "lhs_contracting_dims={1}, rhs_contracting_dims={1}"),
    ("both_t", "20,8", "12,20", "8,12", "lhs_contracting_dims={0}, rhs_contracting_dims={1}"),
    ("batch", "3,8,20", "3,12,20", "3,8,12",
     "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
     "rhs_contracting_dims={2}"),
    ("matvec", "8,20", "20", "8", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
    # large enough to be cut into tasks on a machine with several threads: row blocks,
    # column blocks (few rows), batch ranges
    ("split_rows", "300,64", "64,70", "300,70",
     "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
    ("split_cols_t", "8,400", "400,400", "8,400",
     "lhs_contracting_dims={1}, rhs_contracting_dims={1}"),
    ("split_batch", "6,64,64", "6,64,64", "6,64,64",
     "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
     "rhs_contracting_dims={1}"),
]


class FakeBlas:
    """cblas_sgemm / cblas_dgemm (and their batch_strided forms) in numpy, as C callbacks."""

    def __init__(self, ctype: type) -> None:
        self.calls: list[tuple] = []
        self.np = np.float32 if ctype is ctypes.c_float else np.float64
        p = ctypes.POINTER(ctype)
        i = ctypes.c_int
        self.single = ctypes.CFUNCTYPE(None, i, i, i, i, i, i, ctype, p, i, p, i, ctype, p, i)(
            self._single)
        self.batch = ctypes.CFUNCTYPE(None, i, i, i, i, i, i, ctype, p, i, i, p, i, i, ctype,
                                      p, i, i, i)(self._batch)

    def _mat(self, ptr, trans: int, rows: int, cols: int, ld: int, offset: int = 0):
        stored = (cols, rows) if trans == blas.CBLAS_TRANS else (rows, cols)
        n = (stored[0] - 1) * ld + stored[1]
        flat = np.ctypeslib.as_array(ptr, shape=(offset + n,))[offset:]
        m = np.lib.stride_tricks.as_strided(
            flat, shape=stored, strides=(ld * flat.itemsize, flat.itemsize))
        return m.T if trans == blas.CBLAS_TRANS else m

    def _gemm(self, order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
              oa=0, ob=0, oc=0) -> None:
        assert order == blas.CBLAS_ROW_MAJOR and alpha == 1 and beta == 0
        am = self._mat(a, ta, m, k, lda, oa).astype(np.float64)
        bm = self._mat(b, tb, k, n, ldb, ob).astype(np.float64)
        out = np.ctypeslib.as_array(c, shape=(oc + (m - 1) * ldc + n,))[oc:]
        for r in range(m):
            out[r * ldc: r * ldc + n] = (am[r] @ bm).astype(self.np)

    def _single(self, *args) -> None:
        self.calls.append(("single", *args[:6], args[8], args[10], args[13]))
        self._gemm(*args)

    def _batch(self, order, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
               count) -> None:
        self.calls.append(("batch", order, ta, tb, m, n, k, lda, sa, ldb, sb, count))
        for t in range(count):
            self._gemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                       t * sa, t * sb, t * sc)

    def table(self, with_batch: bool) -> blas.Blas:
        addr = ctypes.cast(self.single, ctypes.c_void_p).value or 0
        baddr = ctypes.cast(self.batch, ctypes.c_void_p).value or 0
        t = "s" if self.np is np.float32 else "d"
        addresses = {f"hf_blas_{t}gemm": addr}
        if with_batch:
            addresses[f"hf_blas_{t}gemm_batch"] = baddr
        return blas.Blas("fake", "", "", addresses)


def test_layout() -> None:
    assert blas.layout(8, 20, 20, 1) == (blas.CBLAS_NO_TRANS, 20)
    assert blas.layout(8, 20, 1, 8) == (blas.CBLAS_TRANS, 8)
    assert blas.layout(8, 20, 40, 1) == (blas.CBLAS_NO_TRANS, 40)   # a slice of wider rows
    assert blas.layout(1, 20, 0, 1) == (blas.CBLAS_NO_TRANS, 20)    # one row
    assert blas.layout(8, 1, 1, 0) == (blas.CBLAS_NO_TRANS, 1)      # one column
    assert blas.layout(8, 20, 60, 3) is None                        # neither unit stride
    assert blas.layout(8, 20, 10, 1) is None                        # rows overlap


def test_call_refuses_what_blas_cannot_do() -> None:
    a, b = ("a", 0, 20, 1), ("b", 0, 12, 1)
    assert blas.call("u32", 1, 8, 12, 20, a, b, "c", "own();") is None
    assert blas.call("f32", 1, 8, 12, 0, a, b, "c", "own();") is None
    assert blas.call("f32", 1, 8, 12, 20, ("a", 0, 60, 3), b, "c", "own();") is None
    big = 2**31
    assert blas.call("f32", 1, big, 12, 20, a, b, "c", "own();") is None
    stmts = blas.call("f32", 1, 8, 12, 20, a, b, "c", "own();")
    assert stmts is not None and stmts[-1] == "else own();"


def test_generated_c_does_not_depend_on_the_blas(monkeypatch: pytest.MonkeyPatch) -> None:
    op = library_op(parse(_module("8,20", "20,12", "8,12", SHAPES[0][4])).entry.root)
    with_blas = gemm.emit_dot(op, ["in0", "in1"], ["out0"], set())
    monkeypatch.setenv("HLOFUSE_BLAS", "0")
    blas.find.cache_clear()
    blas.active.cache_clear()
    try:
        assert blas.find() is None and blas.active() is None
        assert gemm.emit_dot(op, ["in0", "in1"], ["out0"], set()) == with_blas
    finally:
        monkeypatch.delenv("HLOFUSE_BLAS")
        blas.find.cache_clear()
        blas.active.cache_clear()
    assert "hf_blas_sgemm" in with_blas[0] and "hflib_gemm_f32" in with_blas[1]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("with_batch", [True, False], ids=["batch_strided", "looped"])
@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_blas_arguments(shape: tuple, dtype: str, with_batch: bool) -> None:
    """Bound to a numpy CBLAS, every layout gives the interpreter's result, through the BLAS."""
    name, lhs, rhs, out, dims = shape
    module = parse(_module(lhs, rhs, out, dims, dtype))
    # no pipeline: simplification would turn the matvec into a multiply and a sum
    exe = hlofuse.compile(module, pipeline=None, backend="cpu")
    lib = exe._runner._lib
    fake = FakeBlas(ctypes.c_float if dtype == "f32" else ctypes.c_double)
    rng = np.random.default_rng(0)
    npt = np.float32 if dtype == "f32" else np.float64
    args = [rng.uniform(-1, 1, [int(d) for d in s.split(",")]).astype(npt)
            for s in (lhs, rhs)]
    want = interpreter.run(module, *args)[0]
    assert blas.bind(lib, fake.table(with_batch))
    try:
        got = exe(*args)[0]
    finally:
        blas.bind(lib)
    assert fake.calls, "the dot did not call the BLAS"
    if name == "batch":
        assert fake.calls[0][0] == ("batch" if with_batch else "single")
    covered = sum(c[4] * c[5] * (c[-1] if c[0] == "batch" else 1) for c in fake.calls)
    assert covered == want.size  # the tasks cover the result exactly once
    tol = 1e-5 if dtype == "f32" else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_installed_openblas_is_bound_and_correct() -> None:
    pytest.importorskip("scipy_openblas32")
    if not blas.enabled():
        pytest.skip("HLOFUSE_BLAS turns the BLAS off")
    found = blas.find()
    assert found is not None and found.addresses["hf_blas_sgemm"]
    # large enough (8.4e6 multiply-adds) to be cut into tasks that call OpenBLAS concurrently
    module = parse(_module("4,130,120", "4,120,135", "4,130,135",
                           "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                           "rhs_contracting_dims={1}"))
    exe = hlofuse.compile(module, pipeline="none", backend="cpu")
    lib = exe._runner._lib
    used = blas.active()
    pointer = ctypes.c_void_p.in_dll(lib, "hf_blas_sgemm").value
    assert pointer == (used.addresses["hf_blas_sgemm"] if used is not None else None)
    rng = np.random.default_rng(1)
    args = [rng.uniform(-1, 1, (4, 130, 120)).astype(np.float32),
            rng.uniform(-1, 1, (4, 120, 135)).astype(np.float32)]
    want = interpreter.run(module, *args)[0]
    assert blas.bind(lib, found)  # the real OpenBLAS, whatever `active` decided
    try:
        np.testing.assert_allclose(exe(*args)[0], want, rtol=1e-4, atol=1e-4)
    finally:
        blas.bind(lib)


def test_missing_wheel_means_own_gemm(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "scipy_openblas32", None)  # import raises ImportError
    monkeypatch.delenv("HLOFUSE_BLAS", raising=False)
    blas.find.cache_clear()
    blas.active.cache_clear()
    try:
        assert blas.find() is None and blas.active() is None
    finally:
        monkeypatch.undo()
        blas.find.cache_clear()
        blas.active.cache_clear()


@pytest.mark.parametrize(("corename", "host", "setting", "uses_blas"), [
    ("SkylakeX", 64, "", True),
    ("Haswell", 64, "", False),     # forced to narrower kernels than the CPU has: own GEMM
    ("Haswell", 32, "", True),
    ("NeoverseN1", 32, "", True),   # unknown width: trust the BLAS
    ("Haswell", 64, "force", True),
])
def test_active_blas_rule(monkeypatch: pytest.MonkeyPatch, corename: str, host: int,
                          setting: str, uses_blas: bool) -> None:
    fake = blas.Blas("fake", "", corename, {"hf_blas_sgemm": 1, "hf_blas_dgemm": 2})
    monkeypatch.setattr(blas, "find", lambda: fake)
    monkeypatch.setattr(blas, "host_gemm_vector_bytes", lambda: host)
    monkeypatch.setenv("HLOFUSE_BLAS", setting)
    blas.active.cache_clear()
    try:
        assert (blas.active() is fake) == uses_blas
    finally:
        monkeypatch.undo()
        blas.active.cache_clear()


def test_library_without_dots_is_left_alone() -> None:
    lib = build.load_library("int hf_nothing(void) { return 0; }\n", name="no_dots")
    assert blas.bind(lib) is False


_GEMM_HARNESS = r"""
void hf_test_gemm_f32(int64_t batch, int64_t M, int64_t N, int64_t K, int ta, int tb,
                      const float *a, const float *b, float *c, int threads) {
    hflib_gemm_f32(batch, M, N, K, a, M * K, ta ? 1 : K, ta ? M : 1, b, K * N, tb ? 1 : N,
                   tb ? K : 1, c, threads);
}
void hf_test_gemm_f64(int64_t batch, int64_t M, int64_t N, int64_t K, int ta, int tb,
                      const double *a, const double *b, double *c, int threads) {
    hflib_gemm_f64(batch, M, N, K, a, M * K, ta ? 1 : K, ta ? M : 1, b, K * N, tb ? 1 : N,
                   tb ? K : 1, c, threads);
}
"""


@pytest.fixture(scope="module", params=[32, 64], ids=["vec32", "vec64"])
def own_gemm(request: pytest.FixtureRequest) -> ctypes.CDLL:
    """Our GEMM alone, compiled for 32- and 64-byte vectors whatever the host (GCC vector
    extensions lower the wider one to pairs): every tile and packing path on any CPU. Its
    `hf_parallel_ptr` points at the runtime's pool, so dots cut into tasks run on threads."""
    from hlofuse.backends.cpu import cexpr, runtime

    src = "\n".join([cexpr.prelude(), gemm.gemm_helper("f32"), gemm.gemm_helper("f64"),
                     _GEMM_HARNESS])
    lib = build.load_library(src, name="test_own_gemm",
                             extra_flags=(f"-DHFLIB_VBYTES={request.param}",))
    for fn in (lib.hf_test_gemm_f32, lib.hf_test_gemm_f64):
        fn.argtypes = [*[ctypes.c_int64] * 4, ctypes.c_int, ctypes.c_int,
                       *[ctypes.c_void_p] * 3, ctypes.c_int]
    pool = runtime.parallel_address()
    if pool is not None:
        ctypes.c_void_p.in_dll(lib, "hf_parallel_ptr").value = pool
    return lib


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_own_gemm_every_path(own_gemm: ctypes.CDLL, dtype: type) -> None:
    """Rows around the tile heights (1..9, 13, 25, 100: ragged panels, 8-row panels, 4 + 4),
    columns around the panel width (read in place or packed) and narrow ones (1-4: one dot
    product per output, `hflib_gemm_narrow`, where n * 8 <= NR and A's rows are contiguous),
    short and long K (300: past one KC block), both operand orders, batches, on 1 to 3 threads
    (the larger dots are cut into tasks): against numpy in float64."""
    fn = own_gemm.hf_test_gemm_f32 if dtype is np.float32 else own_gemm.hf_test_gemm_f64
    rng = np.random.default_rng(7)
    tol = 1e-4 if dtype is np.float32 else 1e-12
    for m in (1, 2, 3, 5, 7, 8, 9, 13, 25, 100):
        for n in (1, 2, 3, 4, 5, 16, 33, 70, 300):
            for k in (1, 7, 40, 300):
                for ta, tb in ((0, 0), (1, 0), (0, 1), (1, 1)):
                    batch = 1 + (m + n + k) % 3
                    a = rng.uniform(-1, 1, (batch, *((k, m) if ta else (m, k)))).astype(dtype)
                    b = rng.uniform(-1, 1, (batch, *((n, k) if tb else (k, n)))).astype(dtype)
                    c = np.full((batch, m, n), np.nan, dtype)
                    fn(batch, m, n, k, ta, tb, a.ctypes.data, b.ctypes.data, c.ctypes.data,
                       1 + (m + k) % 3)
                    an = np.swapaxes(a, 1, 2) if ta else a
                    bn = np.swapaxes(b, 1, 2) if tb else b
                    want = an.astype(np.float64) @ bn.astype(np.float64)
                    np.testing.assert_allclose(c, want, rtol=tol, atol=tol * np.sqrt(k),
                                               err_msg=f"{m}x{n}x{k} ta={ta} tb={tb}")
