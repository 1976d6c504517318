"""The LAPACK behind jax's linear algebra custom calls: OpenBLAS's LAPACK from the
`scipy-openblas32` wheel, reached through function pointers exactly as the dots reach its BLAS
(`blas.py`).

    generated C                                       this module, when a library is loaded
    ───────────                                       ──────────────────────────────────────
    hf_lapack_spotrf_fn hf_lapack_spotrf = 0;  ◀────  bind(lib): the wheel's scipy_spotrf_,
    if (hf_lapack_spotrf) ... LAPACK ...              for every hf_lapack_* global the library
    else ... C fallback, or NaN                       has; UnsupportedOpError when a routine
                                                      the library needs is missing

Conditions:
- The library is the one `blas.py` finds (the wheel's `lib/libscipy_openblas*`, loaded by
  path), with its Fortran-style LAPACK symbols `scipy_<routine>_` (32-bit integers, character
  arguments by pointer, each followed at the end by its length as a `size_t`, which a C LAPACK
  ignores). `HLOFUSE_BLAS` does not apply: it chooses the GEMM of the dots, and turning it off
  must not turn the LAPACK calls off.
- The generated C, and so the cached library, does not depend on whether LAPACK is installed:
  every routine is a pointer global, null until `bind`. potrf, trsm (and the HLO cholesky and
  triangular-solve ops) have a C fallback the null pointer selects; every other routine needs
  LAPACK: `code_generation_check` refuses to compile it without one (UnsupportedOpError naming
  the instruction), the library marks it (`hf_lapack_needs_<routine>`, a weak global) and
  `bind` refuses to run a library whose marked routines it cannot bind; a null pointer there
  anyway (a test's `unbind`) makes the call write NaN (and info -1), never stale values.
- OpenBLAS is set to one thread, as `blas.py` does: the generated code runs the matrices of a
  batch on hlofuse's own threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from dataclasses import dataclass

# The LAPACK argument lists of every routine: c const char *, i const int *, I int *, a the
# element type, r its real type, f a function pointer (gees's select). A complex routine's list
# is its own entry when it differs (rwork).
SIGNATURES: dict[str, str] = {
    "potrf": "ciaiI",
    "getrf": "iiaiII",
    "geqrf": "iiaiaaiI",
    "geqp3": "iiaiIaaiI",
    "geqp3/c": "iiaiIaairI",
    "orgqr": "iiiaiaaiI",
    "ormqr": "cciiiaiaaiaiI",
    "syevd": "cciairaiIiI",
    "syevd/c": "cciairairiIiI",
    "gesdd": "ciiairaiaiaiII",
    "gesdd/c": "ciiairaiaiairII",
    "gesvd": "cciiairaiaiaiI",
    "gesvd/c": "cciiairaiaiairI",
    "geev": "cciairraiaiaiI",
    "geev/c": "cciaiaaiaiairI",
    "gees": "ccfiaiIrraiaiII",
    "gees/c": "ccfiaiIaaiairII",
    "gehrd": "iiiaiaaiI",
    "sytrd": "ciairraaiI",
    "gtsv": "iiaaaaiI",
    "trsm": "cccciiaaiai",
}
# Routines the generated code can run without LAPACK (a C fallback of its own).
FALLBACK = frozenset({"potrf", "trsm"})

_TYPES = {"f32": ("float", "float"), "f64": ("double", "double"),
          "c64": ("float _Complex", "float"), "c128": ("double _Complex", "double")}
_KINDS = {"c": "const char *", "i": "const int *", "I": "int *", "f": "void *"}


def signature(routine: str, letter: str) -> str:
    """The argument kinds of LAPACK's `routine` for type letter s/d/c/z."""
    if letter in "cz" and f"{routine}/c" in SIGNATURES:
        return SIGNATURES[f"{routine}/c"]
    return SIGNATURES[routine]


@functools.cache
def symbols() -> tuple[tuple[str, str, str], ...]:
    """(LAPACK name, table routine, type letter) of every routine a call may need."""
    from hlofuse.backends import lapack_targets

    out = []
    for routine in lapack_targets.ROUTINES:
        if routine == "perturbed":
            continue
        for letter, dtype in lapack_targets.LETTERS.items():
            name = lapack_targets.lapack_name(routine, lapack_targets.DTYPES[dtype])
            out.append((name, routine, letter))
    return tuple(out)


def prototype(name: str, routine: str, letter: str) -> str:
    """`void (*)(...)` argument list of one routine, Fortran's hidden lengths last."""
    from hlofuse.backends.lapack_targets import LETTERS

    t, r = _TYPES[LETTERS[letter]]
    kinds = signature(routine, letter)
    args = [_KINDS.get(k) or (f"{t} *" if k == "a" else f"{r} *") for k in kinds]
    args += ["size_t"] * kinds.count("c")
    return ", ".join(args)


def declaration(name: str) -> str:
    """File-scope C declaring LAPACK routine `name`'s pointer global (include-guarded): the
    kernel units of a split build (`HF_EXTERN_STATE`, units.units) declare it, the driver's unit
    (`declarations()`) and a one-file program define it. Also the weak marker `hf_lapack_used`
    that tells `bind` the library has LAPACK calls."""
    routine, letter = _routine_of()[name]
    guard = f"HFLIB_LAPACK_{name.upper()}"
    return "\n".join([
        "#ifndef HFLIB_LAPACK_USED", "#define HFLIB_LAPACK_USED",
        "/* Set by hlofuse when the library is loaded (cpu/library/lapack.py): LAPACK from the",
        "   scipy-openblas32 wheel, or 0. */",
        "__attribute__((weak)) const char hf_lapack_used = 1;", "#endif",
        f"#ifndef {guard}", f"#define {guard}",
        f"typedef void (*hf_lapack_{name}_fn)({prototype(name, routine, letter)});",
        "#ifdef HF_EXTERN_STATE", f"extern hf_lapack_{name}_fn hf_lapack_{name};", "#else",
        f"hf_lapack_{name}_fn hf_lapack_{name} = 0;", "#endif", "#endif", ""])


@functools.cache
def _routine_of() -> dict[str, tuple[str, str]]:
    return {name: (routine, letter) for name, routine, letter in symbols()}


@functools.cache
def declarations() -> str:
    """Every routine's pointer, defined: the driver's unit of a split build whose kernels call
    LAPACK (units.units)."""
    return "".join(declaration(name) for name in _routine_of())


def needs(name: str) -> str:
    """C marking that the library needs routine `name` (no fallback): a weak global `bind`
    looks for, so a split build may define it in several units."""
    guard = f"HFLIB_LAPACK_NEEDS_{name.upper()}"
    return (f"#ifndef {guard}\n#define {guard}\n"
            f"__attribute__((weak)) const char hf_lapack_needs_{name} = 1;\n#endif\n")


@dataclass(frozen=True)
class Lapack:
    """The loaded LAPACK: where it came from and its routines' addresses."""

    path: str
    addresses: dict[str, int]   # LAPACK name ("spotrf") -> function address


@functools.lru_cache(maxsize=1)
def find() -> Lapack | None:
    """The installed LAPACK, loaded, or None (not installed or not loadable). Looked up once
    per process, whatever `HLOFUSE_BLAS` says."""
    from hlofuse.backends.cpu.library import blas

    path = blas._library_path()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    addresses: dict[str, int] = {}
    for name, _, _ in symbols():
        fn = getattr(lib, f"{blas._PREFIX}{name}_", None)
        if fn is not None:
            addresses[name] = ctypes.cast(fn, ctypes.c_void_p).value or 0
    if not addresses:
        return None
    with contextlib.suppress(AttributeError):  # threads are hlofuse's (blas.py)
        lib.scipy_openblas_set_num_threads(ctypes.c_int(1))
    blas._KEEP.append(lib)
    return Lapack(path, addresses)


def available(name: str) -> bool:
    """Can a call to LAPACK's `name` (e.g. "dgeev") run here?"""
    found = find()
    return found is not None and bool(found.addresses.get(name))


def bind(lib: ctypes.CDLL, lapack: Lapack | None = None) -> bool:
    """Point a freshly loaded library's `hf_lapack_*` globals at LAPACK (`find()` unless given)
    or at nothing. True if it has such globals and LAPACK is bound. Raises UnsupportedOpError
    when the library needs a routine that cannot be bound."""
    try:
        ctypes.c_char.in_dll(lib, "hf_lapack_used")
    except ValueError:
        return False  # no LAPACK call in this library
    if lapack is None:
        lapack = find()
    missing = []
    for name, _, _ in symbols():
        address = lapack.addresses.get(name) if lapack is not None else None
        with contextlib.suppress(ValueError):
            ctypes.c_void_p.in_dll(lib, f"hf_lapack_{name}").value = address or None
        if not address:
            with contextlib.suppress(ValueError):
                ctypes.c_char.in_dll(lib, f"hf_lapack_needs_{name}")
                missing.append(name)
    if missing:
        from hlofuse.backends.cpu.cexpr import UnsupportedOpError

        raise UnsupportedOpError(
            f"this program calls LAPACK's {', '.join(missing)}, which is not available: "
            "install the scipy-openblas32 wheel (`pip install scipy-openblas32`)")
    return lapack is not None


def unbind(lib: ctypes.CDLL) -> None:
    """Null a library's `hf_lapack_*` globals (tests): potrf and trsm run their C fallback,
    the other calls write NaN."""
    for name, _, _ in symbols():
        with contextlib.suppress(ValueError):
            ctypes.c_void_p.in_dll(lib, f"hf_lapack_{name}").value = None
