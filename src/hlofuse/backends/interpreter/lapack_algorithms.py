"""LAPACK's unblocked algorithms in numpy, for the routines numpy.linalg lacks (`lapack.py`).

Each follows the reference routine step for step, in the arrays' own precision, over a stack of
matrices ([count, ...]) where the steps do not branch per matrix:

    larfg           dlarfg/zlarfg: the reflector H = I - tau v v^H with H^H (alpha, x) = (beta, 0),
                    beta real, v[0] = 1 implied; tau = 0 when x = 0 and alpha is real
    getrf           dgetf2: partial pivoting on the first largest |re| + |im|, rows swapped
                    whole, the column scaled by the pivot's reciprocal, info = first zero pivot
    cholesky_partial  dpotf2 up to the first non-positive pivot (info)
    geqp3           dgeqp3 + dlaqp2: pinned columns first, then the column of largest remaining
                    norm, norms downdated (recomputed when they lost half their digits, tol3z)
    orgqr, ormqr    dorg2r, dorm2r (and zung2r, zunm2r: Q^H for transpose)
    gehrd           dgehd2 over rows low..high
    sytrd           dsytd2 / zhetd2, lower or upper
    gtsv            dgtsv / zgtsv (|re| + |im| for complex pivots), stopping at a zero pivot
    trsm            substitution with op(a) read from one triangle
    schur           a Schur form by deflation: an eigenvector of the trailing block (numpy's
                    eig) turned into its first column by a reflector; for a real matrix a
                    complex pair's real invariant plane, its 2x2 block rotated to equal
                    diagonal entries (LAPACK's standard form)
    left_eigenvectors  u with u^H a = w u^H from the eigenvectors of a^H, unit norm, largest
                    component real
    perturbed_solve jaxlib's tridiagonal_solve_perturbed.h (LAPACK's xLAGTF/xLAGTS pivots)
"""

from __future__ import annotations

import numpy as np


def _cabs1(x: np.ndarray) -> np.ndarray:
    return np.abs(x.real) + np.abs(x.imag) if np.iscomplexobj(x) else np.abs(x)


def larfg(alpha: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(beta, tau, v[1:]) of the reflectors for alpha [B] and x [B, L]."""
    xnorm = (np.linalg.norm(x, axis=-1) if x.shape[-1] else
             np.zeros(alpha.shape, np.real(alpha).dtype)).astype(np.real(alpha).dtype)
    ar, ai = np.real(alpha), np.imag(alpha)
    keep = (xnorm == 0) & (ai == 0)
    beta = -np.copysign(np.hypot(np.hypot(ar, ai), xnorm), ar)
    tau = np.where(keep, 0, (beta - alpha) / beta).astype(alpha.dtype)
    scale = np.where(keep, 1, 1 / (alpha - beta)).astype(alpha.dtype)
    v = x * scale[..., None]
    beta = np.where(keep, ar, beta)
    return beta, tau, v


def _left(c: np.ndarray, v: np.ndarray, tau: np.ndarray) -> None:
    """c -= tau v (v^H c): H applied from the left (c [B, L, k], v [B, L])."""
    c -= tau[:, None, None] * v[:, :, None] * np.einsum("bl,blk->bk", np.conj(v), c)[:, None]


def _right(c: np.ndarray, v: np.ndarray, tau: np.ndarray) -> None:
    """c -= tau (c v) v^H: H applied from the right (c [B, k, L], v [B, L])."""
    c -= tau[:, None, None] * np.einsum("bkl,bl->bk", c, v)[:, :, None] * np.conj(v)[:, None]


def _with_one(v: np.ndarray, first: bool = True) -> np.ndarray:
    one = np.ones((*v.shape[:-1], 1), v.dtype)
    return np.concatenate([one, v] if first else [v, one], axis=-1)


def getrf(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LU with partial pivoting of a [B, m, n] in place: (ipiv [B, min] 1-based, info [B])."""
    count, m, n = a.shape
    k = min(m, n)
    ipiv = np.zeros((count, k), np.int32)
    info = np.zeros(count, np.int32)
    rows = np.arange(count)
    for j in range(k):
        p = j + np.argmax(_cabs1(a[:, j:, j]), axis=1)
        ipiv[:, j] = p + 1
        nz = a[rows, p, j] != 0
        swap = rows[nz & (p != j)]
        if swap.size:
            top = a[swap, j, :].copy()
            a[swap, j, :] = a[swap, p[swap], :]
            a[swap, p[swap], :] = top
        pivot = np.where(nz, a[:, j, j], 1)
        a[:, j + 1:, j] = np.where(nz[:, None], a[:, j + 1:, j] * (1 / pivot)[:, None],
                                   a[:, j + 1:, j])
        info = np.where(~nz & (info == 0), j + 1, info).astype(np.int32)
        a[:, j + 1:, j + 1:] -= a[:, j + 1:, j, None] * a[:, j, None, j + 1:]
    return ipiv, info


def cholesky_partial(full: np.ndarray) -> tuple[np.ndarray, int]:
    """dpotf2 of one Hermitian matrix that numpy found not positive definite: the factor's
    columns up to the failing one (its diagonal holds the non-positive value), info."""
    n = full.shape[0]
    low = np.tril(full)
    for j in range(n):
        d = np.real(low[j, j] - np.vdot(low[j, :j], low[j, :j]))
        if not d > 0:
            low[j, j] = d
            return low, j + 1
        low[j, j] = np.sqrt(d)
        low[j + 1:, j] = (low[j + 1:, j] - low[j + 1:, :j] @ np.conj(low[j, :j])) / low[j, j]
    return low, 0


def _householder(a: np.ndarray, i: int, row: int, tau_out: np.ndarray, conj_apply: bool,
                 stop: int | None = None) -> None:
    """One geqr2 step on one matrix a [m, n]: the reflector of column i from `row` down, applied
    to the columns right of i (up to `stop`)."""
    m = a.shape[0]
    alpha = a[None, row, i]
    beta, tau, v = larfg(alpha, a[None, row + 1:, i])
    a[row, i] = beta[0]
    a[row + 1:, i] = v[0]
    tau_out[i] = tau[0]
    end = a.shape[1] if stop is None else stop
    if i + 1 < end and row < m:
        c = a[None, row:, i + 1:end]
        _left(c, _with_one(v), np.conj(tau) if conj_apply else tau)
        a[row:, i + 1:end] = c[0]


def geqp3(a: np.ndarray, jpvt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """QR with column pivoting of one matrix a [m, n] in place: (jpvt 1-based, tau)."""
    m, n = a.shape
    k = min(m, n)
    jp = jpvt.astype(np.int64).copy()
    tau = np.zeros(k, a.dtype)
    fixed = 0
    for j in range(n):
        if jp[j] != 0:
            if j != fixed:
                a[:, [j, fixed]] = a[:, [fixed, j]]
                jp[j] = jp[fixed]
                jp[fixed] = j + 1
            else:
                jp[j] = j + 1
            fixed += 1
        else:
            jp[j] = j + 1
    for i in range(min(m, fixed)):
        _householder(a, i, i, tau, True)
    real = np.real(a).dtype
    vn1 = np.zeros(n, real)
    for j in range(fixed, n):
        vn1[j] = np.linalg.norm(a[fixed:, j])
    vn2 = vn1.copy()
    tol3z = np.sqrt(np.finfo(real).eps / 2).astype(real)
    for i in range(fixed, k):
        pvt = i + int(np.argmax(vn1[i:]))
        if pvt != i:
            a[:, [pvt, i]] = a[:, [i, pvt]]
            jp[pvt], jp[i] = jp[i], jp[pvt]
            vn1[pvt], vn2[pvt] = vn1[i], vn2[i]
        _householder(a, i, i, tau, True)
        for j in range(i + 1, n):
            if vn1[j] != 0:
                temp = max(real.type(1) - (np.abs(a[i, j]) / vn1[j]) ** 2, real.type(0))
                temp2 = temp * (vn1[j] / vn2[j]) ** 2
                if temp2 <= tol3z:
                    vn1[j] = np.linalg.norm(a[i + 1:, j]) if i < m - 1 else 0
                    vn2[j] = vn1[j]
                else:
                    vn1[j] = vn1[j] * np.sqrt(temp)
    return jp.astype(np.int32), tau


def orgqr(a: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """The first n columns of H(1) ... H(k) from reflectors a [B, m, n], tau [B, k]."""
    q = a.copy()
    n = q.shape[2]
    k = tau.shape[-1]
    q[:, :, k:] = 0
    for j in range(k, n):
        q[:, j, j] = 1
    for i in reversed(range(k)):
        if i < n - 1:
            c = q[:, i:, i + 1:]
            _left(c, _with_one(q[:, i + 1:, i]), tau[:, i])
        q[:, i + 1:, i] *= -tau[:, i, None]
        q[:, i, i] = 1 - tau[:, i]
        q[:, :i, i] = 0
    return q


def ormqr(a: np.ndarray, tau: np.ndarray, c: np.ndarray, left: bool, transpose: bool
          ) -> np.ndarray:
    """Q c, Q^H c, c Q or c Q^H with Q = H(1) ... H(k) from reflectors a, tau."""
    c = c.copy()
    r, k = a.shape[1], tau.shape[-1]
    order = range(k) if left == transpose else reversed(range(k))
    for i in order:
        t = np.conj(tau[:, i]) if transpose else tau[:, i]
        v = _with_one(a[:, i + 1:r, i])
        if left:
            _left(c[:, i:r, :], v, t)
        else:
            _right(c[:, :, i:r], v, t)
    return c


def gehrd(a: np.ndarray, low: int, high: int) -> np.ndarray:
    """Hessenberg reduction of a [B, n, n] in place over rows low..high-1 (0-based low): tau."""
    count, n, _ = a.shape
    tau = np.zeros((count, max(n - 1, 0)), a.dtype)
    for i in range(low, high - 1):
        beta, t, v = larfg(a[:, i + 1, i], a[:, i + 2:high, i])
        vv = _with_one(v)
        _right(a[:, :high, i + 1:high], vv, t)
        _left(a[:, i + 1:high, i + 1:], vv, np.conj(t))
        a[:, i + 1, i] = beta
        a[:, i + 2:high, i] = v
        tau[:, i] = t
    return tau


def sytrd(a: np.ndarray, lower: bool
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Tridiagonal reduction of the Hermitian matrices in one triangle of a [B, n, n]:
    (a with the reflectors, d, e, tau); the other triangle is kept."""
    count, n, _ = a.shape
    w = np.tril(a) if lower else np.triu(a)
    w = w + np.conj(np.swapaxes(np.tril(a, -1) if lower else np.triu(a, 1), -1, -2))
    idx = np.arange(n)
    w[:, idx, idx] = np.real(w[:, idx, idx])
    real = np.real(a).dtype
    d = np.zeros((count, n), real)
    e = np.zeros((count, max(n - 1, 0)), real)
    tau = np.zeros((count, max(n - 1, 0)), a.dtype)
    out = a.copy()
    steps = range(n - 1) if lower else range(n - 2, -1, -1)
    for i in steps:
        if lower:
            beta, t, v = larfg(w[:, i + 1, i], w[:, i + 2:, i])
            vv, block = _with_one(v), (slice(i + 1, n), slice(i + 1, n))
        else:
            beta, t, v = larfg(w[:, i, i + 1], w[:, :i, i + 1])
            vv, block = _with_one(v, first=False), (slice(0, i + 1), slice(0, i + 1))
        s = w[:, block[0], block[1]]
        x = t[:, None] * np.einsum("bij,bj->bi", s, vv)
        alpha = -0.5 * t * np.einsum("bi,bi->b", np.conj(x), vv)
        x = x + alpha[:, None] * vv
        s -= vv[:, :, None] * np.conj(x)[:, None, :] + x[:, :, None] * np.conj(vv)[:, None, :]
        j = np.arange(s.shape[-1])
        s[:, j, j] = np.real(s[:, j, j])
        e[:, i] = np.real(beta)
        tau[:, i] = t
        if lower:
            d[:, i] = np.real(w[:, i, i])
            out[:, i + 2:, i] = v
        else:
            d[:, i + 1] = np.real(w[:, i + 1, i + 1])
            out[:, :i, i + 1] = v
    last = n - 1 if lower else 0
    d[:, last] = np.real(w[:, last, last])
    out[:, idx, idx] = d
    sub = np.arange(n - 1)
    if lower:
        out[:, sub + 1, sub] = e
    else:
        out[:, sub, sub + 1] = e
    return out, d, e, tau


def gtsv(dl: np.ndarray, d: np.ndarray, du: np.ndarray, b: np.ndarray) -> np.ndarray:
    """dgtsv on [B, n] diagonals (dl[0] and du[n-1] unused) and b [B, n, r], in place: info."""
    count, n = d.shape
    info = np.zeros(count, np.int32)
    active = np.ones(count, bool)
    for k in range(n - 1):
        low = dl[:, k + 1].copy()
        keep = _cabs1(d[:, k]) >= _cabs1(low)
        fail = active & keep & (d[:, k] == 0)
        info[fail] = k + 1
        active &= ~fail
        ns, sw = active & keep, active & ~keep
        if ns.any():
            fact = low[ns] / d[ns, k]
            d[ns, k + 1] -= fact * du[ns, k]
            b[ns, k + 1] -= fact[:, None] * b[ns, k]
            if k < n - 2:
                dl[ns, k + 1] = 0
        if sw.any():
            fact = d[sw, k] / low[sw]
            d[sw, k] = low[sw]
            temp = d[sw, k + 1].copy()
            d[sw, k + 1] = du[sw, k] - fact * temp
            if k < n - 2:
                dl[sw, k + 1] = du[sw, k + 1]
                du[sw, k + 1] = -fact * dl[sw, k + 1]
            du[sw, k] = temp
            top = b[sw, k].copy()
            b[sw, k] = b[sw, k + 1]
            b[sw, k + 1] = top - fact[:, None] * b[sw, k + 1]
    fail = active & (d[:, n - 1] == 0)
    info[fail] = n
    ok = active & ~fail
    if ok.any():
        x = b[ok]
        dd, uu, ll = d[ok], du[ok], dl[ok]
        x[:, n - 1] /= dd[:, n - 1, None]
        if n > 1:
            x[:, n - 2] = (x[:, n - 2] - uu[:, n - 2, None] * x[:, n - 1]) / dd[:, n - 2, None]
        for k in range(n - 3, -1, -1):
            x[:, k] = (x[:, k] - uu[:, k, None] * x[:, k + 1] - ll[:, k + 1, None] * x[:, k + 2]
                       ) / dd[:, k, None]
        b[ok] = x
    return info


def _substitute(m: np.ndarray, r: np.ndarray, lower: bool) -> np.ndarray:
    """x with m x = r for triangular m [B, k, k] (lower or upper), r [B, k, c]."""
    k = m.shape[-1]
    x = np.zeros(np.broadcast_shapes(r.shape), np.result_type(m, r))
    for i in (range(k) if lower else range(k - 1, -1, -1)):
        done = slice(0, i) if lower else slice(i + 1, k)
        s = r[:, i] - np.einsum("bj,bjc->bc", m[:, i, done], x[:, done])
        x[:, i] = s / m[:, i, i, None]
    return x


def trsm(a: np.ndarray, b: np.ndarray, left: bool, lower: bool, trans: str, unit: bool
         ) -> np.ndarray:
    """op(a) x = b (left) or x op(a) = b, op(a) from a's `lower`/upper triangle."""
    tri = np.tril(a) if lower else np.triu(a)
    if unit:
        idx = np.arange(a.shape[-1])
        tri[..., idx, idx] = 1
    if trans != "N":
        tri = np.swapaxes(tri, -1, -2)
        if trans == "C":
            tri = np.conj(tri)
        lower = not lower
    if left:
        return _substitute(tri, b, lower)
    t = np.swapaxes
    return t(_substitute(t(tri, -1, -2), t(b, -1, -2), not lower), -1, -2)


def schur(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t, z, w): a = z t z^H, t upper triangular (quasi-triangular with standardized 2x2
    blocks for a real a), w its eigenvalues in diagonal order."""
    n = a.shape[0]
    real = not np.iscomplexobj(a)
    t = a.copy()
    z = np.eye(n, dtype=a.dtype)
    w = np.zeros(n, np.result_type(a.dtype, np.complex64))
    k = 0
    while k < n:
        if k == n - 1:
            w[k] = t[k, k]
            break
        ev, vecs = np.linalg.eig(t[k:, k:])
        if real and np.imag(ev[0]) != 0:
            plane = np.stack([vecs[:, 0].real, vecs[:, 0].imag], axis=1)
            q = np.linalg.qr(plane, mode="complete")[0].astype(a.dtype)
            _apply(t, z, k, q)
            t[k + 2:, k:k + 2] = 0
            w[k], w[k + 1] = _standardize(t, z, k)
            k += 2
            continue
        v = vecs[:, 0].real if real else vecs[:, 0]
        v = (v / np.linalg.norm(v)).astype(a.dtype)
        phase = v[0] / abs(v[0]) if v[0] != 0 else 1
        u = v.copy()
        u[0] += phase * np.linalg.norm(v)
        h = np.eye(n - k, dtype=a.dtype) - 2 * np.outer(u, np.conj(u)) / np.vdot(u, u).real
        _apply(t, z, k, h.astype(a.dtype))
        t[k + 1:, k] = 0
        w[k] = t[k, k]
        k += 1
    return t, z, w


def _apply(t: np.ndarray, z: np.ndarray, k: int, q: np.ndarray) -> None:
    """t <- Q^H t Q, z <- z Q with Q = diag(I_k, q)."""
    t[k:, :] = np.conj(q.T) @ t[k:, :]
    t[:, k:] = t[:, k:] @ q
    z[:, k:] = z[:, k:] @ q


def _standardize(t: np.ndarray, z: np.ndarray, k: int) -> tuple[complex, complex]:
    """Rotate the real 2x2 block at k to equal diagonal entries; its eigenvalues (positive
    imaginary part first)."""
    (p, q), (r, s) = t[k:k + 2, k:k + 2]
    theta = 0.5 * np.arctan2(-(p - s), q + r)
    cs, sn = np.cos(theta), np.sin(theta)
    g = np.array([[cs, -sn], [sn, cs]], dtype=t.dtype)
    t[k:k + 2, :] = g.T @ t[k:k + 2, :]
    t[:, k:k + 2] = t[:, k:k + 2] @ g
    z[:, k:k + 2] = z[:, k:k + 2] @ g
    mid = (t[k, k] + t[k + 1, k + 1]) / 2
    t[k, k] = t[k + 1, k + 1] = mid
    im = np.sqrt(abs(t[k, k + 1] * t[k + 1, k]))
    return complex(mid, im), complex(mid, -im)


def left_eigenvectors(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Columns u_j with u_j^H a = w_j u_j^H, unit norm, largest component real."""
    mu, u = np.linalg.eig(np.conj(a.T))
    free = list(range(len(mu)))
    out = np.zeros((a.shape[0], len(w)), np.result_type(a.dtype, np.complex64))
    for j, lam in enumerate(w):
        best = min(free, key=lambda i: abs(mu[i] - np.conj(lam)))
        free.remove(best)
        v = u[:, best].astype(out.dtype)
        v = v / np.linalg.norm(v)
        big = v[np.argmax(np.abs(v))]
        out[:, j] = v * (np.conj(big) / abs(big)) if big != 0 else v
    return out


def _maybe_perturb(perturb: np.number, pivot: np.number, row: np.ndarray
                   ) -> tuple[np.number, np.ndarray]:
    """jaxlib's MaybePerturbPivot: grow a tiny pivot so neither row / pivot nor 1 / pivot
    overflows."""
    fi = np.finfo(np.real(pivot).dtype)
    one, real = fi.dtype.type(1), fi.dtype.type
    small = one / fi.max
    safemin = fi.tiny if small < fi.tiny else small * (one + fi.eps)
    bignum = one / safemin
    size = abs(pivot)
    if size >= one:
        return pivot, row
    step = real(np.copysign(max(abs(perturb), safemin), np.real(pivot)))
    biggest = np.fmax.reduce(np.abs(row), initial=real(0))  # NaN entries ignored
    stop = False
    while size < one and not stop:
        if size < safemin:
            if size == 0 or biggest * safemin > size:
                pivot, step = pivot + step, step * 2
            else:
                pivot, row, stop = pivot * bignum, row * bignum, True
        elif biggest > size * bignum:
            pivot, step = pivot + step, step * 2
        else:
            stop = True
        size = abs(pivot)
    return pivot, row


def perturbed_solve(dl: np.ndarray, d: np.ndarray, du: np.ndarray, rhs: np.ndarray
                    ) -> np.ndarray:
    """jaxlib's tridiagonal solve with perturbed tiny pivots, one system: dl, d, du [n],
    rhs [n, r] -> x [n, r]."""
    n = d.shape[0]
    x = np.zeros_like(rhs)
    eps = np.finfo(np.real(d).dtype).eps
    if n == 1:
        p, row = _maybe_perturb(eps * abs(d[0]), d[0], rhs[0].copy())
        x[0] = row / p
        return x
    u = np.zeros((n, 3), d.dtype)
    u[0, 0], u[0, 1] = d[0], du[0]
    max_u = max(abs(u[0, 0]), abs(u[0, 1]))
    scale1 = abs(u[0, 0]) + abs(u[0, 1])
    x[0] = rhs[0]
    for k in range(n - 1):
        u[k + 1, 0] = d[k + 1]
        scale2 = abs(dl[k + 1]) + abs(u[k + 1, 0])
        if k < n - 2:
            scale2 += abs(du[k + 1])
        if dl[k + 1] == 0:
            scale1 = scale2
            u[k + 1, 1] = du[k + 1]
            u[k, 2] = 0
            x[k + 1] = rhs[k + 1]
        else:
            piv1 = 0 if u[k, 0] == 0 else abs(u[k, 0]) / scale1
            piv2 = abs(dl[k + 1]) / scale2
            if piv2 <= piv1:
                scale1 = scale2
                factor = dl[k + 1] / u[k, 0]
                u[k + 1, 0] -= factor * u[k, 1]
                u[k + 1, 1] = du[k + 1]
                u[k, 2] = 0
                x[k + 1] = rhs[k + 1] - factor * x[k]
            else:
                factor = u[k, 0] / dl[k + 1]
                utmp = u[k, 1]
                u[k, 0] = dl[k + 1]
                u[k + 1, 0] = utmp - factor * d[k + 1]
                u[k, 1] = d[k + 1]
                if k < n - 2:
                    u[k, 2] = du[k + 1]
                    u[k + 1, 1] = -factor * du[k + 1]
                x[k + 1] = x[k] - factor * rhs[k + 1]
                x[k] = rhs[k + 1]
                scale1 = abs(u[k + 1, 0]) + abs(u[k + 1, 1])
        if k < n - 2:
            max_u = max(max_u, *(abs(u[k, i]) for i in range(3)))
    max_u = max(max_u, abs(u[n - 1, 0]))
    perturb = eps * max_u
    for k in range(n - 1, -1, -1):
        row = x[k].copy()
        if k <= n - 2:
            row = row - u[k, 1] * x[k + 1]
        if k <= n - 3:
            row = row - u[k, 2] * x[k + 2]
        p, row = _maybe_perturb(perturb, u[k, 0], row)
        x[k] = row * (1 / p)
    return x
