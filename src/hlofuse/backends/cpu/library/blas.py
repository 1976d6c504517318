"""The optional BLAS behind f32/f64 dots: OpenBLAS from the `scipy-openblas32` wheel.

    generated C                                   this module, when a library is loaded
    ───────────                                   ──────────────────────────────────────
    hf_blas_sgemm_fn hf_blas_sgemm = 0;    ◀────  bind(lib): the wheel's scipy_cblas_sgemm
    if (hf_blas_sgemm) hf_blas_sgemm(...);        (and dgemm, the batch_strided forms), or 0
    else hflib_gemm_f32(...);                     when no BLAS is installed or it is turned off

Why function pointers and not linking: the generated C, and so the compiled library and its
cache key, do not depend on whether or which BLAS is installed. Nothing is linked, no system
library is needed, a cached `.so` can never be stale with respect to the BLAS, and a library
whose pointers are null (no BLAS, `HLOFUSE_BLAS=0`, or a library loaded by hand in a test) runs
our own GEMM (`gemm.py`) with the same result layout.

Conditions:
- The BLAS is `scipy_openblas32` (OpenBLAS built for NumPy/SciPy's wheels: 32-bit `blasint`,
  symbols prefixed `scipy_`; BSD-3-Clause, compatible with hlofuse's Apache-2.0). It is found
  through the package's own API (`get_lib_dir`, `get_library`) and loaded by path; nothing is
  searched on the system. `scipy_openblas64` (64-bit ints) is not used: the pointer types here
  are the 32-bit ABI.
- `HLOFUSE_BLAS=0` (or `off`, `none`, `false`) turns it off; read once per process.
- A call goes to the BLAS only when every extent, leading dimension and batch stride fits in
  32 bits, every extent is positive, and each operand is row- or column-major in its two
  dimensions (`layout`); otherwise the generated code calls our GEMM directly.
- OpenBLAS runs its own thread pool. `HLOFUSE_THREADS=N` (when set) also sets its thread count;
  OpenBLAS's own environment variables (OPENBLAS_NUM_THREADS, OPENBLAS_CORETYPE, ...) are the
  user's and are left alone.
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

# The pointer globals every generated file that has a float dot defines (include-guarded).
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
hf_blas_sgemm_fn hf_blas_sgemm = 0;
hf_blas_dgemm_fn hf_blas_dgemm = 0;
hf_blas_sgemm_batch_fn hf_blas_sgemm_batch = 0;
hf_blas_dgemm_batch_fn hf_blas_dgemm_batch = 0;
#endif
"""

# pointer global in the generated C -> CBLAS symbol (without the wheel's `scipy_` prefix)
_SYMBOLS = {
    "hf_blas_sgemm": "cblas_sgemm",
    "hf_blas_dgemm": "cblas_dgemm",
    "hf_blas_sgemm_batch": "cblas_sgemm_batch_strided",
    "hf_blas_dgemm_batch": "cblas_dgemm_batch_strided",
}
_PREFIX = "scipy_"
_OFF = ("0", "off", "none", "false", "no")


@dataclass(frozen=True)
class Blas:
    """A loaded BLAS: where it came from and the addresses of its entry points."""

    name: str        # the Python package, e.g. "scipy_openblas32"
    version: str     # the package's version
    path: str        # the shared library
    corename: str    # the kernel set OpenBLAS picked for this CPU (e.g. "SkylakeX", "Haswell")
    addresses: dict[str, int]  # pointer global -> function address (missing: not provided)


def enabled() -> bool:
    """Is the BLAS allowed (`HLOFUSE_BLAS` is not one of 0/off/none/false/no)?"""
    return os.environ.get("HLOFUSE_BLAS", "").strip().lower() not in _OFF


@functools.lru_cache(maxsize=1)
def find() -> Blas | None:
    """The BLAS this process uses, or None (not installed, not loadable, or turned off).
    Looked up once per process."""
    if not enabled():
        return None
    try:
        import scipy_openblas32 as pkg  # the wheel loads its library on import
    except Exception:  # not installed, or its library does not load on this system
        return None
    try:
        path = os.path.join(pkg.get_lib_dir(), pkg.get_library(fullname=True))
        lib = ctypes.CDLL(path)
    except (OSError, IndexError, AttributeError):
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
    threads = os.environ.get("HLOFUSE_THREADS", "").strip()
    if threads.isdigit() and int(threads) > 0:
        with contextlib.suppress(AttributeError):
            lib.scipy_openblas_set_num_threads(ctypes.c_int(int(threads)))
    version = str(getattr(pkg, "__version__", "unknown"))
    # keep the CDLL alive for the process: the addresses point into it
    _KEEP.append(lib)
    return Blas("scipy_openblas32", version, path, corename, addresses)


_KEEP: list[ctypes.CDLL] = []


def bind(lib: ctypes.CDLL, blas: Blas | None = None) -> bool:
    """Point a freshly loaded library's `hf_blas_*` globals at the BLAS (`find()` unless given),
    or at nothing. True if the library has such globals and they now point at a BLAS."""
    try:
        ctypes.c_void_p.in_dll(lib, "hf_blas_sgemm")
    except ValueError:
        return False  # no float dot in this library
    if blas is None:
        blas = find()
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
) -> list[str] | None:
    """C statements computing c = a x b with the BLAS when one is bound, else `own` (the
    statement calling our GEMM); None when this dot cannot go to the BLAS at all. `a` and `b`
    are (pointer expression, batch stride, row stride, column stride)."""
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
    one, zero = ("1.0f", "0.0f") if suffix == "f32" else ("1.0", "0.0")
    head = f"{CBLAS_ROW_MAJOR}, {la[0]}, {lb[0]}, {m}, {n}, {k}, {one}"
    single = f"hf_blas_{t}gemm({head}, {a[0]}, {la[1]}, {b[0]}, {lb[1]}, {zero}, {c}, {n});"
    if batch == 1:
        return [f"if (hf_blas_{t}gemm) {single}", f"else {own}"]
    looped = (f"for (int64_t hf_t = 0; hf_t < {batch}; hf_t++) hf_blas_{t}gemm({head}, "
              f"{a[0]} + hf_t * {a[1]}, {la[1]}, {b[0]} + hf_t * {b[1]}, {lb[1]}, {zero}, "
              f"{c} + hf_t * {m * n}, {n});")
    return [
        f"if (hf_blas_{t}gemm_batch) hf_blas_{t}gemm_batch({head}, {a[0]}, {la[1]}, {sab}, "
        f"{b[0]}, {lb[1]}, {sbb}, {zero}, {c}, {n}, {m * n}, {batch});",
        f"else if (hf_blas_{t}gemm) {looped}",
        f"else {own}",
    ]
