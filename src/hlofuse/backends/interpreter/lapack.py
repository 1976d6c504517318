"""jax's LAPACK custom calls (`lapack_<t><routine>_ffi`, `backends/lapack_targets.py`) in
numpy: what the cpu backend's LAPACK calls compute, and where jax's following HLO reads them,
laid out as LAPACK lays them out.

Each routine works on the matrices of the batch stacked ([count, ...]) in the element type's
own precision, as LAPACK does (an f32 call computes in f32), so discrete choices (pivots, the
order of eigenvalues) follow LAPACK's; numpy.linalg runs the routines it has (potrf, syevd/heevd,
gesdd, geev, geqrf's raw form), the others are LAPACK's unblocked algorithms written out here
(lapack_algorithms.py). What each result holds:

* potrf: the `uplo` triangle holds the factor (L with a = L L^H, or U with a = U^H U), the
  other triangle the input, as LAPACK leaves it; info = k > 0 when the leading minor of order
  k is not positive definite (the factor is then partial).
* getrf: L (unit diagonal, not stored) and U in one matrix, ipiv the 1-based row swapped with
  row i at step i, info = first zero pivot (1-based) or 0. The pivot is the first entry of
  largest |re| + |im| (LAPACK's i?amax).
* geqrf / geqp3: R on and above the diagonal, the Householder vectors below it (v[i] = 1
  implied), tau; geqp3's jpvt the 1-based original column of each column (nonzero entries of
  the jpvt operand pin those columns first, as LAPACK).
* orgqr / ormqr: the product Q = H(1) ... H(k) of those reflectors (its first n columns), or Q,
  Q^H applied to c from the left or the right.
* syevd/heevd: ascending eigenvalues; with mode V the eigenvectors in the columns of a, with N
  a holds the input (LAPACK leaves it destroyed; nothing reads it).
* gesdd/gesvd: s descending, u and vt as the mode says (zero with mode N); a holds the input.
* geev: eigenvalues in LAPACK's order; eigenvectors of unit norm, largest component real, a
  real pair unpacked into complex columns as jax does; a matrix with a non-finite entry gives
  info = -4 (jax's kernel), not computed vectors are zero.
* gees: the Schur form (real: 2x2 blocks standardized, equal diagonal, for complex pairs) and
  the Schur vectors (zero with mode N), eigenvalues in the form's diagonal order, sdim = 0.
  The form is not unique: its eigenvalue order may differ from LAPACK's.
* gehrd / sytrd/hetrd: the reduced matrix with the reflectors below its subdiagonal (or above
  the superdiagonal for sytrd's uplo U), tau; sytrd's d and e.
* gtsv: LAPACK's elimination with row interchanges; dl, d, du hold U's rows as LAPACK leaves
  them, info = the first zero pivot (the solution is then partial).
* trsm: op(a) x = b or x op(a) = b by substitution, reading the `uplo` triangle (unit diagonal
  with diag U).
* perturbed: jax's tridiagonal solve that perturbs tiny pivots (jaxlib's
  tridiagonal_solve_perturbed.h).
Failures numpy reports (no convergence) give info = 1 and nan results.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hlofuse.backends import lapack_targets
from hlofuse.backends.interpreter import lapack_algorithms as alg
from hlofuse.backends.interpreter.core import Interpreter, register_custom_call, unsupported
from hlofuse.backends.lapack_targets import Call, TargetError
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.shape import ArrayShape, Shape, TupleShape, leaves

Arrays = list[np.ndarray]


def _stack(x: Any, call: Call, trailing: int) -> np.ndarray:
    """Operand `x` as [count, trailing dims...], a copy (routines write it)."""
    a = np.array(x)
    return a.reshape((call.count, *a.shape[a.ndim - trailing:]))


def _info(call: Call) -> np.ndarray:
    return np.zeros(call.count, np.int32)


def _hermitian(a: np.ndarray, lower: bool) -> np.ndarray:
    """The Hermitian matrices whose `lower` (or upper) triangle `a` holds (real diagonal)."""
    t = np.tril(a) if lower else np.triu(a)
    off = np.tril(a, -1) if lower else np.triu(a, 1)
    full = t + np.conj(np.swapaxes(off, -1, -2))
    idx = np.arange(a.shape[-1])
    full[..., idx, idx] = np.real(full[..., idx, idx])
    return full


def _potrf(call: Call, ops: list) -> Arrays:
    a = _stack(ops[0], call, 2)
    lower = call.char("uplo") == "L"
    info = _info(call)
    factor = np.zeros_like(a)
    full = _hermitian(a, lower)
    for i in range(call.count):
        try:
            factor[i] = np.linalg.cholesky(full[i])
        except np.linalg.LinAlgError:
            factor[i], info[i] = alg.cholesky_partial(full[i])
    if not lower:
        factor = np.conj(np.swapaxes(factor, -1, -2))
    keep = np.tril(np.ones(a.shape[-2:], bool)) if lower else np.triu(np.ones(a.shape[-2:], bool))
    out = np.where(keep, factor, a)
    return [out, info]


def _getrf(call: Call, ops: list) -> Arrays:
    a = _stack(ops[0], call, 2)
    ipiv, info = alg.getrf(a)
    return [a, ipiv, info]


def _geqrf(call: Call, ops: list) -> Arrays:
    a = _stack(ops[0], call, 2)
    h, tau = np.linalg.qr(a, mode="raw")
    return [np.ascontiguousarray(np.swapaxes(h, -1, -2)).astype(a.dtype),
            tau.astype(a.dtype)]


def _geqp3(call: Call, ops: list) -> Arrays:
    a = _stack(ops[0], call, 2)
    jpvt = _stack(ops[1], call, 1).astype(np.int32)
    tau = np.zeros((call.count, min(a.shape[-2:])), a.dtype)
    for i in range(call.count):
        jpvt[i], tau[i] = alg.geqp3(a[i], jpvt[i])
    return [a, jpvt, tau]


def _orgqr(call: Call, ops: list) -> Arrays:
    a = _stack(ops[0], call, 2)
    tau = _stack(ops[1], call, 1)
    return [alg.orgqr(a, tau)]


def _ormqr(call: Call, ops: list) -> Arrays:
    a = _stack(ops[0], call, 2)
    tau = _stack(ops[1], call, 1)
    c = _stack(ops[2], call, 2)
    return [alg.ormqr(a, tau, c, bool(call.attrs["left"]), bool(call.attrs["transpose"]))]


def _each(call: Call, fn: Callable[[int], None], outs: Arrays, info: np.ndarray) -> None:
    """fn(i) for every matrix; one numpy.linalg failure gives that matrix nan and info 1."""
    for i in range(call.count):
        try:
            fn(i)
        except np.linalg.LinAlgError:
            info[i] = 1
            for o in outs:
                if o.dtype.kind in "fc":
                    o[i] = np.nan


def _syevd(call: Call, ops: list) -> Arrays:
    a = _stack(ops[0], call, 2)
    lower = call.char("uplo") == "L"
    vectors = call.char("mode") == "V"
    full = _hermitian(a, lower)
    w = np.zeros((call.count, a.shape[-1]), call.real.np)
    info = _info(call)
    out = a.copy()

    def one(i: int) -> None:
        if vectors:
            w[i], out[i] = np.linalg.eigh(full[i], "L")
        else:
            w[i] = np.linalg.eigvalsh(full[i], "L")

    _each(call, one, [out, w], info)
    return [out, w, info]


def _svd(call: Call, ops: list, result_shapes: list[tuple[int, ...]]) -> Arrays:
    a = _stack(ops[0], call, 2)
    mode = call.char("mode")
    k = min(a.shape[-2:])
    s = np.zeros((call.count, k), call.real.np)
    u = np.zeros((call.count, *result_shapes[2][-2:]), a.dtype)
    vt = np.zeros((call.count, *result_shapes[3][-2:]), a.dtype)
    info = _info(call)

    def one(i: int) -> None:
        if mode == "N":
            s[i] = np.linalg.svd(a[i], compute_uv=False)
        else:
            u[i], s[i], vt[i] = np.linalg.svd(a[i], full_matrices=mode == "A")

    _each(call, one, [s, u, vt], info)
    return [a, s, u, vt, info]


def _geev(call: Call, ops: list) -> Arrays:
    a = _stack(ops[0], call, 2)
    n = a.shape[-1]
    ctype = np.result_type(a.dtype, np.complex64)
    w = np.zeros((call.count, n), ctype)
    vl = np.zeros((call.count, n, n), ctype)
    vr = np.zeros((call.count, n, n), ctype)
    info = _info(call)
    left, right = call.char("compute_left") == "V", call.char("compute_right") == "V"

    def one(i: int) -> None:
        if not np.isfinite(a[i]).all():
            info[i] = -4
            for o in (w, vl, vr):
                o[i] = np.nan
            return
        w[i], vr_i = np.linalg.eig(a[i])
        if right:
            vr[i] = vr_i
        if left:
            vl[i] = alg.left_eigenvectors(a[i], w[i])

    _each(call, one, [w, vl, vr], info)
    if call.dtype.is_complex:
        return [w, vl, vr, info]
    return [w.real.astype(a.dtype), w.imag.astype(a.dtype), vl, vr, info]


def _gees(call: Call, ops: list) -> Arrays:
    a = _stack(ops[0], call, 2)
    n = a.shape[-1]
    t, z = a.copy(), np.zeros_like(a)
    w = np.zeros((call.count, n), np.result_type(a.dtype, np.complex64))
    info = _info(call)

    def one(i: int) -> None:
        if not np.isfinite(a[i]).all():
            raise np.linalg.LinAlgError("not finite")
        t[i], z[i], w[i] = alg.schur(a[i])

    _each(call, one, [t, z, w], info)
    if call.char("mode") == "N":
        z[:] = 0
    sdim = np.zeros(call.count, np.int32)
    if call.dtype.is_complex:
        return [t, z, w, sdim, info]
    return [t, z, w.real.astype(a.dtype), w.imag.astype(a.dtype), sdim, info]


def _gehrd(call: Call, ops: list) -> Arrays:
    a = _stack(ops[0], call, 2)
    low, high = call.attrs["low"], call.attrs["high"]
    assert isinstance(low, int) and isinstance(high, int)
    tau = alg.gehrd(a, low - 1, high)
    return [a, tau, _info(call)]


def _sytrd(call: Call, ops: list) -> Arrays:
    a = _stack(ops[0], call, 2)
    out, d, e, tau = alg.sytrd(a, call.char("uplo") == "L")
    return [out, d, e, tau, _info(call)]


def _gtsv(call: Call, ops: list) -> Arrays:
    dl, d, du = (_stack(x, call, 1) for x in ops[:3])
    b = _stack(ops[3], call, 2)
    info = alg.gtsv(dl, d, du, b)
    return [dl, d, du, b, info]


def _trsm(call: Call, ops: list) -> Arrays:
    a = _stack(ops[0], call, 2)
    b = _stack(ops[1], call, 2)
    return [alg.trsm(a, b, call.char("side") == "L", call.char("uplo") == "L",
                     call.char("trans_x"), call.char("diag") == "U")]


def _perturbed(call: Call, ops: list) -> Arrays:
    dl, d, du = (_stack(x, call, 1) for x in ops[:3])
    b = _stack(ops[3], call, 2)
    return [np.stack([alg.perturbed_solve(dl[i], d[i], du[i], b[i])
                      for i in range(call.count)]).reshape(b.shape)]


_ROUTINES: dict[str, Callable[[Call, list], Arrays]] = {
    "potrf": _potrf, "getrf": _getrf, "geqrf": _geqrf, "geqp3": _geqp3, "orgqr": _orgqr,
    "ormqr": _ormqr, "syevd": _syevd, "geev": _geev, "gees": _gees,
    "gehrd": _gehrd, "sytrd": _sytrd, "gtsv": _gtsv, "trsm": _trsm, "perturbed": _perturbed,
}


def _accepts(target: str) -> bool:
    return lapack_targets.routine_of(target) is not None


def _lapack_call(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Any:
    try:
        call = lapack_targets.parse(instr)
    except TargetError as exc:
        raise unsupported(instr, str(exc)) from None
    assert call is not None
    return run_call(call, ops, instr.shape)


def run_call(call: Call, ops: list[Any], shape: Shape) -> Any:
    """The results (of `shape`) of the validated LAPACK call `call` on `ops`."""
    arrays: list[ArrayShape] = leaves(shape)
    if call.count == 0:
        outs: Arrays = [np.zeros(s.dims, s.dtype.np) for s in arrays]
    else:
        with np.errstate(all="ignore"):
            if call.routine in ("gesdd", "gesvd"):
                outs = _svd(call, ops, [tuple(s.dims) for s in arrays])
            else:
                outs = _ROUTINES[call.routine](call, ops)
    results = [np.ascontiguousarray(o).astype(s.dtype.np, copy=False).reshape(s.dims)
               for o, s in zip(outs, arrays, strict=True)]
    return tuple(results) if isinstance(shape, TupleShape) else results[0]


register_custom_call(_accepts, _lapack_call)
