"""The LAPACK custom calls jax emits on CPU, described once for every backend.

    parse(instr) -> Call | None     None: not a target of this table; TargetError: one of them,
                                    malformed (both backends name the instruction)
    parse_call(target, operand shapes, shape, backend_config, num_batch_dims)   the same
                                    from plain data (a library call's `kernel_ir.libop.LibOp`)

jax 0.10 lowers its CPU linear algebra to typed-FFI custom calls, `lapack_<t><routine>_ffi`
with t = s/d/c/z for f32/f64/c64/c128 (jaxlib/cpu/lapack_kernels.cc), plus one of its own,
`tridiagonal_solve_perturbed_ffi`. Each routine (`ROUTINES`) fixes its operands, results and
backend_config attributes (an MLIR dictionary: `{uplo = 76 : ui8, mode = 86 : ui8}`, characters
as their ASCII codes; `{left = true}`; `{low = 1 : i32}`):

    routine  operands                 results                                     attributes
    potrf    a[n,n]                   a, info                                     uplo
    getrf    a[m,n]                   a, ipiv[min] (1-based row swaps), info
    geqrf    a[m,n]                   a, tau[min]
    geqp3    a[m,n], jpvt s32[n]      a, jpvt (1-based columns), tau[min]
    orgqr    a[m,n], tau[k]           q[m,n]                 (ungqr; m >= n >= k)
    ormqr    a[r,ka], tau[k], c[m,n]  c                      (unmqr)              left, transpose
    syevd    a[n,n]                   v[n,n], w[n] (real), info   (heevd)         uplo, mode
    gesdd    a[m,n]                   a, s[k] (real), u, vt, info  (also gesvd)   mode A/S/N
    geev     a[n,n]                   wr, wi, vl, vr (complex), info  (real)      compute_left,
                                      w, vl, vr, info                 (complex)   compute_right
    gees     a[n,n]                   t, z, wr, wi, sdim, info        (real)      mode, sort=N
                                      t, z, w, sdim, info             (complex)
    gehrd    a[n,n]                   a, tau[n-1], info                           low, high
    sytrd    a[n,n]                   a, d[n], e[n-1] (real), tau[n-1], info      uplo
             (hetrd)
    gtsv     dl[n], d[n], du[n], b[n,r]  dl, d, du, b, info
    trsm     a[k,k], b[m,n]           x[m,n]  (k = m left, n right)   side, uplo, trans_x, diag
    perturbed  dl[n], d[n], du[n], b[n,r]  x[n,r]      (tridiagonal_solve_perturbed_ffi)

Every operand and result has the same leading batch dimensions (the `num_batch_dims` frontend
attribute, when present, must count them); the shapes above are the trailing ones. `Call`
carries what a backend needs: the routine, element type, batch, the named extents and the
decoded attributes (characters as one-letter strings).

Conditions enforced (TargetError otherwise): the target's element type is the matrix's; every
result shape is exactly the one the routine produces (element types included); attribute
values are among those jax's kernels accept (gesdd's mode 'O' and gees's sort 'S', which jax
refuses too, are refused); no attribute missing or unknown; every extent is at least 1 and a
matrix's element count fits LAPACK's 32-bit integers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from hlofuse.ir.dtypes import DTYPES, DType
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.shape import ArrayShape, Shape, TupleShape

INT32_MAX = 2**31 - 1
PERTURBED_TARGET = "tridiagonal_solve_perturbed_ffi"

# LAPACK's type letter -> element type
LETTERS = {"s": "f32", "d": "f64", "c": "c64", "z": "c128"}
_LETTER_OF = {v: k for k, v in LETTERS.items()}
_TARGET = re.compile(r"lapack_([sdcz])([a-z0-9]+)_ffi")


class TargetError(ValueError):
    """A LAPACK custom call whose shapes or attributes are not the routine's (the message
    says what; the backend adds the instruction)."""


@dataclass(frozen=True)
class Call:
    """One validated LAPACK custom call."""

    target: str
    routine: str                  # the table's name: "potrf", "syevd", "perturbed", ...
    symbol: str                   # the LAPACK routine: "spotrf", "zheevd", "" for perturbed
    dtype: DType                  # the matrices' element type
    batch: tuple[int, ...]
    dims: dict[str, int] = field(default_factory=dict)
    attrs: dict[str, str | int | bool] = field(default_factory=dict)

    @property
    def count(self) -> int:
        """How many matrices the call factors (the batch's product)."""
        return math.prod(self.batch)

    @property
    def real(self) -> DType:
        """The real type of the element type (f32 for c64)."""
        return self.dtype.component

    def char(self, name: str) -> str:
        value = self.attrs[name]
        assert isinstance(value, str)
        return value


# ----- backend_config -------------------------------------------------------------------------

_ENTRY = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(true|false|-?\d+)\s*(?::\s*([a-z]+\d*))?"
                    r"\s*$")


def backend_config(text: str) -> dict[str, int | bool]:
    """The entries of an MLIR dictionary attribute of integers and booleans."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise TargetError(f"backend_config {text[:80]!r} is not a dictionary")
    out: dict[str, int | bool] = {}
    inner = body[1:-1].strip()
    for part in inner.split(",") if inner else []:
        m = _ENTRY.match(part)
        if m is None:
            raise TargetError(f"backend_config entry {part.strip()[:80]!r} is not "
                              "`name = integer : type` or `name = true/false`")
        name, value = m.group(1), m.group(2)
        if name in out:
            raise TargetError(f"backend_config names {name} twice")
        out[name] = value == "true" if value in ("true", "false") else int(value)
    return out


def num_batch_dims(text: str) -> int | None:
    """The `num_batch_dims` entry of a `frontend_attributes` text, or None."""
    m = re.search(r'(?:^|[{,\s])num_batch_dims\s*=\s*"(\d+)"', text)
    return int(m.group(1)) if m else None


# ----- the routines ---------------------------------------------------------------------------

Chars = dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class Routine:
    """A routine's attributes (character choices, or "int"/"bool") and its shape rule."""

    name: str
    attrs: dict[str, tuple[str, ...] | str]
    rule: Callable[[_Shapes], list[tuple[str, tuple[int, ...]]]]


class _Shapes:
    """The operands of one call, read against a routine's rule; results are (kind, dims) with
    kind "t" (the element type), "r" (its real type), "c" (its complex type) or "s32"."""

    def __init__(self, operands: list[ArrayShape], dtype: DType, attrs: dict) -> None:
        self.ops = operands
        self.dtype = dtype
        self.attrs = attrs
        self.dims: dict[str, int] = {}
        self.batch: tuple[int, ...] | None = None

    def operand(self, i: int, names: str, kind: str = "t") -> tuple[int, ...]:
        """Operand i's trailing dimensions, bound to `names` (one letter each)."""
        if i >= len(self.ops):
            raise TargetError(f"needs operand {i}")
        s = self.ops[i]
        want = self.dtype if kind == "t" else DTYPES["s32"]
        if s.dtype != want:
            raise TargetError(f"operand {i} is {s.dtype}, expected {want}")
        if s.rank < len(names):
            raise TargetError(f"operand {i} has rank {s.rank}, expected at least {len(names)}")
        batch, trail = s.dims[:s.rank - len(names)], s.dims[s.rank - len(names):]
        if self.batch is None:
            self.batch = batch
        elif batch != self.batch:
            raise TargetError(f"operand {i}'s batch dimensions {list(batch)} differ from "
                              f"{list(self.batch)}")
        for name, d in zip(names, trail, strict=True):
            if name in self.dims and self.dims[name] != d:
                raise TargetError(f"operand {i}: dimension {name}={d}, expected "
                                  f"{self.dims[name]}")
            self.dims[name] = d
        return trail


def _potrf(s: _Shapes) -> list:
    n, = s.operand(0, "nn")[:1]
    return [("t", (n, n)), ("s32", ())]


def _getrf(s: _Shapes) -> list:
    m, n = s.operand(0, "mn")
    return [("t", (m, n)), ("s32", (min(m, n),)), ("s32", ())]


def _geqrf(s: _Shapes) -> list:
    m, n = s.operand(0, "mn")
    return [("t", (m, n)), ("t", (min(m, n),))]


def _geqp3(s: _Shapes) -> list:
    m, n = s.operand(0, "mn")
    s.operand(1, "n", "s32")
    return [("t", (m, n)), ("s32", (n,)), ("t", (min(m, n),))]


def _orgqr(s: _Shapes) -> list:
    m, n = s.operand(0, "mn")
    k, = s.operand(1, "k")
    if not m >= n >= k:
        raise TargetError(f"needs rows >= columns >= reflectors, got {m}, {n}, {k}")
    return [("t", (m, n))]


def _ormqr(s: _Shapes) -> list:
    r, ka = s.operand(0, "rq")
    k, = s.operand(1, "k")
    m, n = s.operand(2, "mn")
    side = m if s.attrs.get("left") else n
    if r != side or not k <= min(ka, side):
        raise TargetError(f"reflectors {r}x{ka} with {k} factors do not apply to a {m}x{n} "
                          f"matrix from the {'left' if s.attrs.get('left') else 'right'}")
    return [("t", (m, n))]


def _syevd(s: _Shapes) -> list:
    n, = s.operand(0, "nn")[:1]
    return [("t", (n, n)), ("r", (n,)), ("s32", ())]


def _gesdd(s: _Shapes) -> list:
    m, n = s.operand(0, "mn")
    k = min(m, n)
    mode = s.attrs.get("mode")
    u, vt = {"A": ((m, m), (n, n)), "S": ((m, k), (k, n))}.get(str(mode), (None, None))
    return [("t", (m, n)), ("r", (k,)), ("t", u), ("t", vt), ("s32", ())]


def _geev(s: _Shapes) -> list:
    n, = s.operand(0, "nn")[:1]
    if s.dtype.is_complex:
        return [("t", (n,)), ("t", (n, n)), ("t", (n, n)), ("s32", ())]
    return [("t", (n,)), ("t", (n,)), ("c", (n, n)), ("c", (n, n)), ("s32", ())]


def _gees(s: _Shapes) -> list:
    n, = s.operand(0, "nn")[:1]
    w = [("t", (n,))] if s.dtype.is_complex else [("t", (n,)), ("t", (n,))]
    return [("t", (n, n)), ("t", (n, n)), *w, ("s32", ()), ("s32", ())]


def _gehrd(s: _Shapes) -> list:
    n, = s.operand(0, "nn")[:1]
    low, high = s.attrs.get("low"), s.attrs.get("high")
    if not (isinstance(low, int) and isinstance(high, int) and 1 <= low <= high <= n):
        raise TargetError(f"needs 1 <= low <= high <= {n}, got low={low}, high={high}")
    return [("t", (n, n)), ("t", (n - 1,)), ("s32", ())]


def _sytrd(s: _Shapes) -> list:
    n, = s.operand(0, "nn")[:1]
    return [("t", (n, n)), ("r", (n,)), ("r", (n - 1,)), ("t", (n - 1,)), ("s32", ())]


def _tridiagonal(s: _Shapes) -> tuple[int, int]:
    for i in range(3):
        s.operand(i, "n")
    n, r = s.operand(3, "nr")
    return n, r


def _gtsv(s: _Shapes) -> list:
    n, r = _tridiagonal(s)
    return [("t", (n,)), ("t", (n,)), ("t", (n,)), ("t", (n, r)), ("s32", ())]


def _perturbed(s: _Shapes) -> list:
    n, r = _tridiagonal(s)
    return [("t", (n, r))]


def _trsm(s: _Shapes) -> list:
    k, _ = s.operand(0, "kk")[:2]
    m, n = s.operand(1, "mn")
    if k != (m if s.attrs.get("side") == "L" else n):
        raise TargetError(f"a {k}x{k} triangular matrix does not solve a {m}x{n} system from "
                          f"the {'left' if s.attrs.get('side') == 'L' else 'right'}")
    return [("t", (m, n))]


_OPERANDS = {"geqp3": 2, "orgqr": 2, "ormqr": 3, "gtsv": 4, "trsm": 2, "perturbed": 4}
_UPLO = ("L", "U")
_JOB = ("N", "V")
ROUTINES: dict[str, Routine] = {r.name: r for r in [
    Routine("potrf", {"uplo": _UPLO}, _potrf),
    Routine("getrf", {}, _getrf),
    Routine("geqrf", {}, _geqrf),
    Routine("geqp3", {}, _geqp3),
    Routine("orgqr", {}, _orgqr),
    Routine("ormqr", {"left": "bool", "transpose": "bool"}, _ormqr),
    Routine("syevd", {"uplo": _UPLO, "mode": _JOB}, _syevd),
    Routine("gesdd", {"mode": ("A", "S", "N")}, _gesdd),
    Routine("gesvd", {"mode": ("A", "S", "N")}, _gesdd),
    Routine("geev", {"compute_left": _JOB, "compute_right": _JOB}, _geev),
    Routine("gees", {"mode": _JOB, "sort": ("N",)}, _gees),
    Routine("gehrd", {"low": "int", "high": "int"}, _gehrd),
    Routine("sytrd", {"uplo": _UPLO}, _sytrd),
    Routine("gtsv", {}, _gtsv),
    Routine("trsm", {"side": ("L", "R"), "uplo": _UPLO, "trans_x": ("N", "T", "C"),
                             "diag": ("N", "U")}, _trsm),
    Routine("perturbed", {}, _perturbed),
]}
# LAPACK's names for the complex (Hermitian / unitary) versions -> the table's routine
_COMPLEX_NAMES = {"ungqr": "orgqr", "unmqr": "ormqr", "heevd": "syevd", "hetrd": "sytrd"}
_REAL_NAMES = {v: k for k, v in _COMPLEX_NAMES.items()}


def lapack_name(routine: str, dtype: DType) -> str:
    """The LAPACK routine for `routine` on `dtype` ("spotrf", "zungqr", ...)."""
    base = _REAL_NAMES.get(routine, routine) if dtype.is_complex else routine
    return _LETTER_OF[dtype.name] + base


def routine_of(target: str) -> tuple[str, DType | None] | None:
    """(table routine, element type) a target names (the type is None for the perturbed
    solve, which takes its operands'), or None when the target is not in the table."""
    if target == PERTURBED_TARGET:
        return "perturbed", None
    m = _TARGET.fullmatch(target)
    if m is None:
        return None
    letter, name = m.group(1), m.group(2)
    complex_type = letter in "cz"
    if name in _COMPLEX_NAMES:
        if not complex_type:
            return None
        name = _COMPLEX_NAMES[name]
    elif complex_type and name in _REAL_NAMES:
        return None  # corgqr, zsyevd: not LAPACK routines
    if name not in ROUTINES or name == "perturbed":
        return None
    return name, DTYPES[LETTERS[letter]]


def is_target(instr: Instruction) -> bool:
    """Is `instr` a custom call of this table (well formed or not)?"""
    return routine_of(str(instr.attrs.get("custom_call_target", ""))) is not None


def _decode(routine: Routine, raw: dict[str, int | bool]) -> dict[str, str | int | bool]:
    out: dict[str, str | int | bool] = {}
    for name in raw:
        if name not in routine.attrs:
            raise TargetError(f"unknown backend_config attribute {name}")
    for name, allowed in routine.attrs.items():
        if name not in raw:
            raise TargetError(f"backend_config needs {name}")
        value = raw[name]
        if allowed == "bool":
            if not isinstance(value, bool):
                raise TargetError(f"{name} must be true or false")
            out[name] = value
        elif allowed == "int":
            if isinstance(value, bool) or not -INT32_MAX <= value <= INT32_MAX:
                raise TargetError(f"{name} must be a 32-bit integer")
            out[name] = value
        else:
            if isinstance(value, bool) or not 0 < value < 128 or chr(value) not in allowed:
                raise TargetError(f"{name}={value} is not one of "
                                  f"{', '.join(f'{c!r} ({ord(c)})' for c in allowed)}")
            out[name] = chr(value)
    return out


def _result_shapes(shape: Shape) -> list[ArrayShape]:
    elements = shape.elements if isinstance(shape, TupleShape) else (shape,)
    if not all(isinstance(s, ArrayShape) for s in elements):
        raise TargetError("results must be arrays")
    return list(elements)  # type: ignore[arg-type]


def parse(instr: Instruction) -> Call | None:
    """The validated call `instr` makes, or None when it is not a target of this table."""
    return parse_call(str(instr.attrs.get("custom_call_target", "")),
                      [o.shape for o in instr.operands], instr.shape,
                      str(instr.attrs.get("backend_config", "{}")),
                      num_batch_dims(str(instr.attrs.get("frontend_attributes", ""))))


def parse_call(target: str, operands: list[Shape], shape: Shape, config: str,
               nbd: int | None) -> Call | None:
    """`parse` from plain data: the target, the operands' and the result's shapes, the
    backend_config text and the `num_batch_dims` frontend attribute (None when absent)."""
    found = routine_of(target)
    if found is None:
        return None
    name, dtype = found
    routine = ROUTINES[name]
    if not all(isinstance(s, ArrayShape) for s in operands):
        raise TargetError("operands must be arrays")
    arrays: list[ArrayShape] = operands  # type: ignore[assignment]
    if dtype is None:
        if not arrays or not arrays[0].dtype.is_inexact or arrays[0].dtype.name not in (
                _LETTER_OF):
            raise TargetError("operands must be f32, f64, c64 or c128")
        dtype = arrays[0].dtype
    if len(arrays) != _OPERANDS.get(name, 1):
        raise TargetError(f"takes {_OPERANDS.get(name, 1)} operand(s), got {len(arrays)}")
    attrs = _decode(routine, backend_config(config))
    shapes = _Shapes(arrays, dtype, attrs)
    wanted = routine.rule(shapes)
    batch = shapes.batch or ()
    results = _result_shapes(shape)
    if name == "gesdd" or name == "gesvd":
        wanted = _svd_results(wanted, results, batch)
    kinds = {"t": dtype, "r": dtype.component, "s32": DTYPES["s32"],
             "c": DTYPES["c64" if dtype.bits <= 32 else "c128"]}
    if len(results) != len(wanted):
        raise TargetError(f"returns {len(wanted)} result(s), the instruction has "
                          f"{len(results)}")
    for i, (res, (kind, dims)) in enumerate(zip(results, wanted, strict=True)):
        want = ArrayShape(kinds[kind], batch + tuple(dims))
        if res.dtype != want.dtype or res.dims != want.dims:
            raise TargetError(f"result {i} is {res.dtype}{list(res.dims)}, expected "
                              f"{want.dtype}{list(want.dims)}")
    if nbd is not None and nbd != len(batch):
        raise TargetError(f"num_batch_dims={nbd} but the operands have {len(batch)} batch "
                          "dimension(s)")
    for name_, d in shapes.dims.items():
        if d < 1 and not (name_ == "k" and routine.name in ("orgqr", "ormqr")):
            raise TargetError(f"matrices need every dimension >= 1 ({name_}={d})")
    for s in [*arrays, *results]:
        trailing = s.dims[len(batch):]
        if math.prod(trailing) > INT32_MAX:
            raise TargetError(f"a {list(trailing)} matrix is too large for LAPACK's 32-bit "
                              "indices")
    symbol = "" if name == "perturbed" else lapack_name(name, dtype)
    return Call(target, name, symbol, dtype, batch, dict(shapes.dims), attrs)


def _svd_results(wanted: list, results: list[ArrayShape], batch: tuple[int, ...]) -> list:
    """gesdd/gesvd with mode N: jax allocates u and vt full (m x m, n x n) or thin (m x k,
    k x n), as full_matrices says; either is accepted."""
    if wanted[2][1] is not None:
        return wanted
    m, n = wanted[0][1]
    k = min(m, n)
    u = vt = None
    if len(results) == 5:
        u = results[2].dims[len(batch):]
        vt = results[3].dims[len(batch):]
    u = u if u in ((m, m), (m, k)) else (m, m)
    vt = vt if vt in ((n, n), (k, n)) else (n, n)
    return [wanted[0], wanted[1], ("t", u), ("t", vt), wanted[4]]
