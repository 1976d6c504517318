"""The BLAS behind f32/f64 dots: OpenBLAS from the `scipy-openblas32` wheel, when it is used.

    generated C                                   this module, when a library is loaded
    ───────────                                   ──────────────────────────────────────
    hf_blas_sgemm_fn hf_blas_sgemm = 0;    ◀────  bind(lib): the wheel's scipy_cblas_sgemm
    if (hf_blas_sgemm) hflib_blas_f32(...);       (and dgemm, the batch_strided forms), or 0
    else hflib_gemm_f32(...);                     when no BLAS is installed or it is not used
                                                  (`active`)
    hflib_blas_f32: the dot cut into tasks, each one single-threaded OpenBLAS call

Why function pointers and not linking: the generated C, and so the compiled library and its
cache key, do not depend on whether or which BLAS is installed. Nothing is linked, no system
library is needed, a cached `.so` can never be stale with respect to the BLAS, and a library
whose pointers are null (no BLAS, `HLOFUSE_BLAS=0`, or a library loaded by hand in a test) runs
our own GEMM (`gemm.py`) with the same result layout.

Conditions:
- The BLAS is `scipy_openblas32` (OpenBLAS built for NumPy/SciPy's wheels: 32-bit `blasint`,
  symbols prefixed `scipy_`; BSD-3-Clause, compatible with hlofuse's Apache-2.0). It is found
  where the package's own API (`get_lib_dir`, `get_library`) finds it, the `lib/` directory of
  the installed package, located without importing the package (whose import reads its
  version through importlib.metadata: 24 ms of a new process's first compile of a program with
  a dot), and loaded by path; if that directory holds no such library, the package is imported
  and asked. Nothing is searched on the system. `scipy_openblas64` (64-bit ints) is not used:
  the pointer types here are the 32-bit ABI.
- Which GEMM runs (`active`), read once per process: `HLOFUSE_BLAS=0` (or `off`, `none`,
  `false`) never uses the BLAS, `HLOFUSE_BLAS=1` (or `on`, `force`) always does when it is
  installed; unset, the BLAS is used unless the kernel set OpenBLAS picked when it loaded is
  narrower than this CPU's vectors (`OPENBLAS_CORETYPE=Haswell` on an AVX-512 machine: our
  GEMM, compiled for the CPU, is then 1.5-3.3x faster; docs/cpu-backend.md, "Dots").
- A call goes to the BLAS only when every extent, leading dimension and batch stride fits in
  32 bits, every extent is positive, and each operand is row- or column-major in its two
  dimensions (`layout`); otherwise the generated code calls our GEMM directly.
- Threads: OpenBLAS is set to one thread (its pthread pool would be a second thread runtime,
  with static work splits that wait for a descheduled thread); the generated code cuts a large
  dot into tasks (batch items, row or column blocks) and runs them on hlofuse's threads,
  handed out dynamically (`hflib_dot_split`). OpenBLAS's other environment variables
  (OPENBLAS_CORETYPE, ...) are the user's and are left alone.
- Numerics: OpenBLAS accumulates in the operand type (float for f32, double for f64), as our GEMM
  does, in its own blocked order: results match the interpreter within the dot tolerances.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from dataclasses import dataclass

INT32_MAX = 2**31 - 1
CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS = 101, 111, 112

# The pointer globals every generated file that has a float dot defines (include-guarded); the
# kernel units of a split build (`HF_EXTERN_STATE`, units.units) declare them, the driver's
# unit defines them.
DECLARATIONS = r"""
#ifndef HFLIB_BLAS_DECLS
#define HFLIB_BLAS_DECLS
/* Set by hlofuse when the library is loaded (cpu/library/blas.py): OpenBLAS's CBLAS entry points
   from the scipy-openblas32 wheel, or 0, in which case the dots run hflib_gemm_*. */
typedef void (*hf_blas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                                 const float *, int, float, float *, int);
typedef void (*hf_blas_dgemm_fn)(int, int, int, int, int, int, double, const double *, int,
                                 const double *, int, double, double *, int);
typedef void (*hf_blas_sgemm_batch_fn)(int, int, int, int, int, int, float, const float *, int,
                                       int, const float *, int, int, float, float *, int, int,
                                       int);
typedef void (*hf_blas_dgemm_batch_fn)(int, int, int, int, int, int, double, const double *,
                                       int, int, const double *, int, int, double, double *,
                                       int, int, int);
#ifdef HF_EXTERN_STATE
extern hf_blas_sgemm_fn hf_blas_sgemm;
extern hf_blas_dgemm_fn hf_blas_dgemm;
extern hf_blas_sgemm_batch_fn hf_blas_sgemm_batch;
extern hf_blas_dgemm_batch_fn hf_blas_dgemm_batch;
#else
hf_blas_sgemm_fn hf_blas_sgemm = 0;
hf_blas_dgemm_fn hf_blas_dgemm = 0;
hf_blas_sgemm_batch_fn hf_blas_sgemm_batch = 0;
hf_blas_dgemm_batch_fn hf_blas_dgemm_batch = 0;
#endif

#endif
"""

# The task driver per element type: c[batch][M][N] = a x b through the bound BLAS, cut into
# tasks by `hflib_dot_split` (gemm.py, which is always emitted first).
_DRIVER = r"""
#ifndef HFLIB_BLAS_{S}
#define HFLIB_BLAS_{S}
typedef struct {{
    int ta, tb, lda, ldb;
    int64_t batch, M, N, K, sab, sam, sbb, sbn;
    const {T} *a, *b;
    {T} *c;
    hflib_split s;
}} hflib_blas_job_{S};

static void hflib_blas_task_{S}(void *const *args, int64_t lo, int64_t hi) {{
    const hflib_blas_job_{S} *j = (const hflib_blas_job_{S} *)args[0];
    const hflib_split s = j->s;
    const int64_t M = j->M, N = j->N, K = j->K;
    for (int64_t q = lo; q < hi; q++) {{
        const int64_t ib = q / (s.mt * s.nt), im = q / s.nt % s.mt, in = q % s.nt;
        const int64_t t0 = ib * j->batch / s.bt, t1 = (ib + 1) * j->batch / s.bt;
        const int64_t m0 = im * s.mc, n0 = in * s.nc;
        const int64_t m = M - m0 < s.mc ? M - m0 : s.mc, n = N - n0 < s.nc ? N - n0 : s.nc;
        const {T} *at = j->a + t0 * j->sab + m0 * j->sam, *bt = j->b + t0 * j->sbb + n0 * j->sbn;
        {T} *ct = j->c + t0 * M * N + m0 * N + n0;
        if (t1 - t0 > 1 && hf_blas_{t}gemm_batch)
            hf_blas_{t}gemm_batch({ROW_MAJOR}, j->ta, j->tb, m, n, K, 1, at, j->lda, j->sab, bt,
                                  j->ldb, j->sbb, 0, ct, N, M * N, t1 - t0);
        else
            for (int64_t t = t0; t < t1; t++)
                hf_blas_{t}gemm({ROW_MAJOR}, j->ta, j->tb, m, n, K, 1, at + (t - t0) * j->sab,
                                j->lda, bt + (t - t0) * j->sbb, j->ldb, 0, ct + (t - t0) * M * N,
                                N);
    }}
}}

/* c = a x b through the bound BLAS, cut into tasks (hflib_dot_split) run on up to `threads`
   threads of the runtime's pool, each task one single-threaded BLAS call. */
HFLIB_ENTRY void hflib_blas_{S}(int ta, int tb, int64_t batch, int64_t M, int64_t N,
                                int64_t K, const {T} *a, int64_t sab, int64_t sam, int lda,
                                const {T} *b, int64_t sbb, int64_t sbn, int ldb, {T} *c,
                                int threads) {{
    const hflib_blas_job_{S} j = {{ta, tb, lda, ldb, batch, M, N, K, sab, sam, sbb, sbn, a, b, c,
                                  hflib_dot_split(batch, M, N, K, {PARALLEL_WORK}, threads)}};
    const int64_t total = j.s.bt * j.s.mt * j.s.nt;
    void *const args[] = {{(void *)&j}};
    if (total > 1 && threads > 1)
        hf_parallel_ptr(hflib_blas_task_{S}, args, 0, total, 1,
                        total < threads ? (int)total : threads);
    else
        hflib_blas_task_{S}(args, 0, total);
}}
#endif
"""


def declarations(suffix: str, parallel_work: int) -> str:
    """File-scope C for dots of `suffix` (f32/f64) through the BLAS (include-guarded)."""
    ctype, t = ("float", "s") if suffix == "f32" else ("double", "d")
    return DECLARATIONS + _DRIVER.format(S=suffix, T=ctype, t=t, ROW_MAJOR=CBLAS_ROW_MAJOR,
                                         PARALLEL_WORK=parallel_work)


# pointer global in the generated C -> CBLAS symbol (without the wheel's `scipy_` prefix)
_SYMBOLS = {
    "hf_blas_sgemm": "cblas_sgemm",
    "hf_blas_dgemm": "cblas_dgemm",
    "hf_blas_sgemm_batch": "cblas_sgemm_batch_strided",
    "hf_blas_dgemm_batch": "cblas_dgemm_batch_strided",
}
_PREFIX = "scipy_"
_OFF = ("0", "off", "none", "false", "no")
_FORCE = ("1", "on", "force", "true", "yes")
# OpenBLAS's x86 kernel sets (`openblas_get_corename`, lower case) by vector width in bytes;
# anything else (ARM, older x86, unknown names) counts as not narrower than the host.
_CORE_VECTOR_BYTES = {
    **dict.fromkeys(("skylakex", "cooperlake", "sapphirerapids"), 64),
    **dict.fromkeys(("haswell", "zen", "sandybridge", "excavator", "steamroller",
                     "piledriver", "bulldozer"), 32),
    **dict.fromkeys(("nehalem", "core2", "penryn", "dunnington", "prescott", "atom",
                     "barcelona", "opteron", "opteron_sse3", "athlon", "bobcat", "katmai",
                     "coppermine", "northwood", "banias", "nano"), 16),
}


@dataclass(frozen=True)
class Blas:
    """A loaded BLAS: where it came from and the addresses of its entry points."""

    name: str        # the Python package, e.g. "scipy_openblas32"
    path: str        # the shared library
    corename: str    # the kernel set OpenBLAS picked for this CPU (e.g. "SkylakeX", "Haswell")
    addresses: dict[str, int]  # pointer global -> function address (missing: not provided)

    @property
    def version(self) -> str:
        """The package's version (read when asked: only reports need it)."""
        from importlib import metadata

        try:
            return metadata.version(self.name)
        except metadata.PackageNotFoundError:
            return "unknown"

    @property
    def vector_bytes(self) -> int | None:
        """The SIMD width of its kernel set, when known."""
        return _CORE_VECTOR_BYTES.get(self.corename.strip().lower())


def _setting() -> str:
    from hlofuse import env

    return env.choice("HLOFUSE_BLAS", ("auto", *_OFF, *_FORCE), lower=True) or ""


def enabled() -> bool:
    """Is the BLAS allowed (`HLOFUSE_BLAS` is not one of 0/off/none/false/no)?"""
    return _setting() not in _OFF


def host_gemm_vector_bytes() -> int:
    """The vector width our own GEMM is compiled with on this host (`gemm.py`: 64 with
    AVX-512, else 32)."""
    from hlofuse.backends.cpu import host_target

    return 64 if host_target.detect().vector_bytes >= 64 else 32


@functools.lru_cache(maxsize=1)
def active() -> Blas | None:
    """The BLAS the dots of this process use, or None: our own GEMM (see the module
    docstring for the rule). Decided once per process."""
    found = find()
    if found is None or _setting() in _FORCE:
        return found
    width = found.vector_bytes
    if width is not None and width < host_gemm_vector_bytes():
        return None
    return found


@functools.lru_cache(maxsize=1)
def find() -> Blas | None:
    """The installed BLAS, loaded, or None (not installed, not loadable, or turned off by
    `HLOFUSE_BLAS`). Looked up once per process; `active()` says whether dots use it."""
    if not enabled():
        return None
    path = _library_path()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    addresses: dict[str, int] = {}
    for glob, sym in _SYMBOLS.items():
        fn = getattr(lib, _PREFIX + sym, None)
        if fn is not None:
            addresses[glob] = ctypes.cast(fn, ctypes.c_void_p).value or 0
    if not addresses.get("hf_blas_sgemm") or not addresses.get("hf_blas_dgemm"):
        return None
    corename = ""
    with contextlib.suppress(AttributeError):
        get = lib.scipy_openblas_get_corename
        get.restype = ctypes.c_char_p
        corename = (get() or b"").decode("ascii", "replace")
    with contextlib.suppress(AttributeError):  # threads are ours (see the module docstring)
        lib.scipy_openblas_set_num_threads(ctypes.c_int(1))
    # keep the CDLL alive for the process: the addresses point into it
    _KEEP.append(lib)
    return Blas(_PACKAGE, path, corename, addresses)


_PACKAGE = "scipy_openblas32"


def _library_path() -> str | None:
    """The wheel's shared library: `lib/libscipy_openblas*` in the installed package, as its
    `get_lib_dir()` and `get_library(fullname=True)` say, found without importing it; else
    (another layout) the package imported and asked. None when it is not installed."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for where in spec.submodule_search_locations or ():
        lib_dir = os.path.join(where, "lib")
        with contextlib.suppress(OSError):
            names = sorted(n for n in os.listdir(lib_dir) if n.startswith("libscipy_openblas")
                           and os.path.isfile(os.path.join(lib_dir, n)))
            if names:
                return os.path.join(lib_dir, names[0])
    try:
        import scipy_openblas32 as pkg

        return os.path.join(pkg.get_lib_dir(), pkg.get_library(fullname=True))
    except Exception:  # not installed, or its library does not load on this system
        return None


_KEEP: list[ctypes.CDLL] = []


def bind(lib: ctypes.CDLL, blas: Blas | None = None) -> bool:
    """Point a freshly loaded library's `hf_blas_*` globals at the BLAS (`active()` unless
    given), or at nothing; its `hf_lapack_*` globals too (`lapack.bind`, whatever BLAS is
    used: it raises UnsupportedOpError when the library needs a LAPACK routine that is
    missing). True if the library has BLAS globals and they now point at a BLAS."""
    from hlofuse.backends.cpu.library import lapack

    lapack.bind(lib)
    try:
        ctypes.c_void_p.in_dll(lib, "hf_blas_sgemm")
    except ValueError:
        return False  # no float dot in this library
    if blas is None:
        blas = active()
    for glob in _SYMBOLS:
        with contextlib.suppress(ValueError):
            ctypes.c_void_p.in_dll(lib, glob).value = (
                blas.addresses.get(glob) if blas is not None else None)
    return blas is not None


def unbind(lib: ctypes.CDLL) -> None:
    """Null a library's `hf_blas_*` globals: its dots run our own GEMM (tests, benchmarks)."""
    for glob in _SYMBOLS:
        with contextlib.suppress(ValueError):
            ctypes.c_void_p.in_dll(lib, glob).value = None


def layout(rows: int, cols: int, s_row: int, s_col: int) -> tuple[int, int] | None:
    """(CBLAS transpose flag, leading dimension) reading a rows x cols operand whose element
    (i, j) is at i*s_row + j*s_col, or None when it is neither row- nor column-major."""
    if (cols <= 1 or s_col == 1) and (rows <= 1 or s_row >= max(1, cols)):
        return CBLAS_NO_TRANS, (s_row if rows > 1 else max(1, cols))
    if (rows <= 1 or s_row == 1) and (cols <= 1 or s_col >= max(1, rows)):
        return CBLAS_TRANS, (s_col if cols > 1 else max(1, rows))
    return None


def call(
    suffix: str, batch: int, m: int, n: int, k: int,
    a: tuple[str, int, int, int], b: tuple[str, int, int, int], c: str, own: str,
    threads: int = 1,
) -> list[str] | None:
    """C statements computing c = a x b with the BLAS when one is bound, else `own` (the
    statement calling our GEMM); None when this dot cannot go to the BLAS at all. `a` and `b`
    are (pointer expression, batch stride, row stride, column stride); `threads`: the most
    threads of the runtime's pool its tasks may use."""
    if suffix not in ("f32", "f64") or min(batch, m, n, k) <= 0:
        return None
    la = layout(m, k, a[2], a[3])
    lb = layout(k, n, b[2], b[3])
    if la is None or lb is None:
        return None
    sab, sbb = (a[1], b[1]) if batch > 1 else (m * k, k * n)
    if max(m, n, k, batch, la[1], lb[1], sab, sbb, m * n) > INT32_MAX or min(sab, sbb) < 0:
        return None
    t = "s" if suffix == "f32" else "d"
    return [f"if (hf_blas_{t}gemm) hflib_blas_{suffix}({la[0]}, {lb[0]}, {batch}, {m}, {n}, "
            f"{k}, {a[0]}, {sab}, {a[2]}, {la[1]}, {b[0]}, {sbb}, {b[3]}, {lb[1]}, {c}, "
            f"{threads});",
            f"else {own}"]
