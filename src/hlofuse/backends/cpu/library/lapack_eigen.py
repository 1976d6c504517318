"""The eigenvalue and singular value routines of `lapack_calls.py` (syevd/heevd, gesdd, gesvd,
geev, gees) and the C of jax's perturbed tridiagonal solve. The conventions are
`lapack_calls.py`'s; the workspaces are jax's (jaxlib/cpu/lapack_kernels.cc): syevd's from its
fixed formulas, gesdd's rwork and iwork too, the others from LAPACK's workspace query.
"""

from __future__ import annotations

from hlofuse.backends import lapack_targets
from hlofuse.backends.cpu.library.lapack_calls import (
    C_TYPES,
    NAN,
    Plan,
    types_of,
    workspace_query,
)
from hlofuse.backends.lapack_targets import Call, TargetError

_ONE = "(size_t)1"


def _complex_of(call: Call) -> str:
    return "c64" if call.dtype.name in ("f32", "c64") else "c128"


def _syevd(call: Call) -> Plan:
    s, t, r, fn = types_of(call)
    n = call.dims["n"]
    vectors = call.char("mode") == "V"
    cplx = call.dtype.is_complex
    if cplx:
        lw, lrw = (2 * n + n * n, 1 + 5 * n + 2 * n * n) if vectors else (n + 1, max(n, 1))
    else:
        lw, lrw = (1 + 6 * n + 2 * n * n) if vectors else 2 * n + 1, 0
    liw = 3 + 5 * n if vectors else 1
    if max(lw, lrw) > lapack_targets.INT32_MAX:
        raise TargetError(f"syevd's workspace for n={n} exceeds LAPACK's 32-bit sizes")
    rw = "rwork, &lrw, " if cplx else ""
    item = ["int info = 0;",
            f"const char jobz = '{call.char('mode')}', uplo = '{call.char('uplo')}';",
            f"const int n = {n}, lw = {lw}, lrw = {lrw}, liw = {liw}; (void)lrw;",
            f"hflib_cm_{s}(x0, wa, n, n);",
            f"{fn}(&jobz, &uplo, &n, wa, &n, x2, work, &lw, {rw}iwork, &liw, &info, {_ONE}, "
            f"{_ONE});",
            f"hflib_rm_{s}(wa, x1, n, n);" if vectors else
            f"memmove(x1, x0, sizeof({t}) * {n * n});",
            "x3[0] = info;"]
    scratch = [("wa", t, str(n * n)), ("work", t, str(lw)), ("iwork", "int", str(liw))]
    if cplx:
        scratch.append(("rwork", r, str(lrw)))
    return Plan(call, [(s, n * n, False), (s, n * n, True), (call.real.name, n, True),
                        ("s32", 1, True)], scratch, [], item, cost=9 * n ** 3 + 1)


def _svd(call: Call, results: list[tuple[int, ...]]) -> Plan:
    s, t, r, fn = types_of(call)
    m, n = call.dims["m"], call.dims["n"]
    k, big = min(m, n), max(m, n)
    mode = call.char("mode")
    um, uc = results[2][-2:]
    vr, _ = results[3][-2:]
    cplx = call.dtype.is_complex
    qr = call.routine == "gesvd"
    jobs = "&job, &job, " if qr else "&job, "
    lens = f"{_ONE}, {_ONE}" if qr else _ONE
    tail = ("rwork, " if cplx else "") + ("" if qr else "iwork, ")
    head = f"const char job = '{mode}'; const int m = {m}, n = {n}, ldvt = {vr};"
    item = ["int info = 0;", head, "const int lw = (int)lwork;",
            f"hflib_cm_{s}(x0, wa, m, n);",
            f"{fn}({jobs}&m, &n, wa, &m, x2, wu, &m, wvt, &ldvt, work, &lw, {tail}&info, "
            f"{lens});",
            f"memmove(x1, x0, sizeof({t}) * {m * n});"]
    if mode == "N":
        item += [f"hflib_fill_{s}(x3, {um * uc}, 0);", f"hflib_fill_{s}(x4, {vr * n}, 0);"]
    else:
        item += [f"hflib_rm_{s}(wu, x3, m, {uc});", f"hflib_rm_{s}(wvt, x4, ldvt, n);"]
    item.append("x5[0] = info;")
    q_tail = ("0, " if cplx else "") + ("" if qr else "0, ")
    query = ["{", head, *workspace_query(fn, f"{jobs}&m, &n, 0, &m, 0, 0, &m, 0, &ldvt, &q, &lw, "
                                f"{q_tail}&info, {lens}", t), "}"]
    scratch = [("wa", t, str(m * n)), ("wu", t, "1" if mode == "N" else str(m * uc)),
               ("wvt", t, "1" if mode == "N" else str(vr * n)), ("work", t, "lwork")]
    if not qr:
        scratch.append(("iwork", "int", str(8 * k)))
    if cplx:
        rw = 5 * k if qr else (7 * k if mode == "N" else
                               max(5 * k * k + 5 * k, 2 * big * k + 2 * k * k + k))
        scratch.append(("rwork", r, str(rw)))
    return Plan(call, [(s, m * n, False), (s, m * n, True), (call.real.name, k, True),
                        (s, um * uc, True), (s, vr * n, True), ("s32", 1, True)],
                 scratch, query, item, cost=10 * m * n * k + 1)


def _geev(call: Call) -> Plan:
    s, t, r, fn = types_of(call)
    n = call.dims["n"]
    c = _complex_of(call)
    cplx = call.dtype.is_complex
    left, right = call.char("compute_left") == "V", call.char("compute_right") == "V"
    finite = ("__builtin_isfinite(__real__ x0[q]) && __builtin_isfinite(__imag__ x0[q])"
              if cplx else "__builtin_isfinite(x0[q])")
    outs = ([(s, n, True), (c, n * n, True), (c, n * n, True)] if cplx else
            [(s, n, True), (s, n, True), (c, n * n, True), (c, n * n, True)])
    first = 1
    nan = [f"hflib_fill_{o}(x{first + i}, {size}, {NAN[o]});"
           for i, (o, size, _) in enumerate(outs)]
    info = f"x{first + len(outs)}"
    head = (f"const char jobvl = '{call.char('compute_left')}', "
            f"jobvr = '{call.char('compute_right')}'; const int n = {n};")
    item = ["int info = 0;", head, "const int lw = (int)lwork;",
            f"for (int64_t q = 0; q < {n * n}; q++) if (!({finite})) {{",
            *("    " + x for x in nan), f"    {info}[0] = -4;", "    return;", "}",
            f"hflib_cm_{s}(x0, wa, n, n);"]
    vl, vr = (f"x{first + len(outs) - 2}", f"x{first + len(outs) - 1}")
    if cplx:
        item.append(f"{fn}(&jobvl, &jobvr, &n, wa, &n, x1, wvl, &n, wvr, &n, work, &lw, rwork, "
                    f"&info, {_ONE}, {_ONE});")
        vectors = [f"hflib_rm_{s}(wvl, {vl}, n, n);" if left else
                   f"hflib_fill_{s}({vl}, {n * n}, 0);",
                   f"hflib_rm_{s}(wvr, {vr}, n, n);" if right else
                   f"hflib_fill_{s}({vr}, {n * n}, 0);"]
        query_args = (f"&jobvl, &jobvr, &n, 0, &n, 0, 0, &n, 0, &n, &q, &lw, rq, &info, "
                      f"{_ONE}, {_ONE}")
        query_pre = [f"{r} rq[1] = {{0}};"]
    else:
        item.append(f"{fn}(&jobvl, &jobvr, &n, wa, &n, x1, x2, wvl, &n, wvr, &n, work, &lw, "
                    f"&info, {_ONE}, {_ONE});")
        vectors = [f"hflib_unpack_{s}(wvl, x2, {vl}, n);" if left else
                   f"hflib_fill_{c}({vl}, {n * n}, 0);",
                   f"hflib_unpack_{s}(wvr, x2, {vr}, n);" if right else
                   f"hflib_fill_{c}({vr}, {n * n}, 0);"]
        query_args = (f"&jobvl, &jobvr, &n, 0, &n, 0, 0, 0, &n, 0, &n, &q, &lw, &info, "
                      f"{_ONE}, {_ONE}")
        query_pre = []
    item += [f"{info}[0] = info;", "if (info != 0) {", *("    " + x for x in nan), "    return;",
             "}", *vectors]
    query = ["{", head, *query_pre, *workspace_query(fn, query_args, t), "}"]
    scratch = [("wa", t, str(n * n)), ("wvl", t, str(n * n)), ("wvr", t, str(n * n)),
               ("work", t, "lwork")]
    if cplx:
        scratch.append(("rwork", r, str(2 * n)))
    return Plan(call, [(s, n * n, False), *outs, ("s32", 1, True)], scratch, query, item,
                 cost=10 * n ** 3 + 1, helpers="" if cplx else _unpack(s, c))


def _unpack(s: str, c: str) -> str:
    """jax's UnpackEigenvectors: LAPACK's real pairs (column j real part, j+1 imaginary part)
    as complex columns, row-major."""
    r, cc = C_TYPES[s], C_TYPES[c]
    return f"""
#ifndef HFLIB_UNPACK_{s.upper()}
#define HFLIB_UNPACK_{s.upper()}
__attribute__((unused)) static void hflib_unpack_{s}(const {r} *packed, const {r} *wi,
                                                     {cc} *out, int64_t n) {{
    for (int64_t j = 0; j < n;) {{
        if (wi[j] == 0 || wi[j] != wi[j] || j == n - 1) {{
            for (int64_t i = 0; i < n; i++)
                out[i * n + j] = __builtin_complex(packed[j * n + i], ({r})0);
            j += 1;
        }} else {{
            for (int64_t i = 0; i < n; i++) {{
                const {r} re = packed[j * n + i], im = packed[(j + 1) * n + i];
                out[i * n + j] = __builtin_complex(re, im);
                out[i * n + j + 1] = __builtin_complex(re, -im);
            }}
            j += 2;
        }}
    }}
}}
#endif
"""


def _gees(call: Call) -> Plan:
    s, t, r, fn = types_of(call)
    n = call.dims["n"]
    cplx = call.dtype.is_complex
    vectors = call.char("mode") == "V"
    head = f"const char jobvs = '{call.char('mode')}', sort = 'N'; const int n = {n};"
    w = (s, n, True)
    if cplx:
        params = [(s, n * n, False), (s, n * n, True), (s, n * n, True), w, ("s32", 1, True),
                  ("s32", 1, True)]
        call_line = (f"{fn}(&jobvs, &sort, 0, &n, wa, &n, &sdim, x3, wvs, &n, work, &lw, "
                     f"rwork, 0, &info, {_ONE}, {_ONE});")
        query_args = f"&jobvs, &sort, 0, &n, 0, &n, &sd, 0, 0, &n, &q, &lw, 0, 0, &info, " \
                     f"{_ONE}, {_ONE}"
        sdim, info = "x4", "x5"
    else:
        params = [(s, n * n, False), (s, n * n, True), (s, n * n, True), w, w,
                  ("s32", 1, True), ("s32", 1, True)]
        call_line = (f"{fn}(&jobvs, &sort, 0, &n, wa, &n, &sdim, x3, x4, wvs, &n, work, &lw, 0, "
                     f"&info, {_ONE}, {_ONE});")
        query_args = f"&jobvs, &sort, 0, &n, 0, &n, &sd, 0, 0, 0, &n, &q, &lw, 0, &info, " \
                     f"{_ONE}, {_ONE}"
        sdim, info = "x5", "x6"
    item = ["int info = 0, sdim = 0;", head, "const int lw = (int)lwork;",
            f"hflib_cm_{s}(x0, wa, n, n);", call_line, f"hflib_rm_{s}(wa, x1, n, n);",
            f"hflib_rm_{s}(wvs, x2, n, n);" if vectors else f"hflib_fill_{s}(x2, {n * n}, 0);",
            f"{sdim}[0] = sdim;", f"{info}[0] = info;"]
    query = ["{", head, "int sd = 0;", *workspace_query(fn, query_args, t), "}"]
    scratch = [("wa", t, str(n * n)), ("wvs", t, str(n * n)), ("work", t, "lwork")]
    if cplx:
        scratch.append(("rwork", r, str(n)))
    return Plan(call, params, scratch, query, item, min_lwork=3 * n, cost=25 * n ** 3 + 1)


def plan(call: Call, results: list[tuple[int, ...]]) -> Plan:
    """The plan of an eigenvalue or singular value routine."""
    if call.routine == "syevd":
        return _syevd(call)
    if call.routine in ("gesdd", "gesvd"):
        return _svd(call, results)
    if call.routine == "geev":
        return _geev(call)
    assert call.routine == "gees", call.routine
    return _gees(call)


def perturbed_helper(s: str) -> str:
    """jaxlib's SolveWithGaussianEliminationWithPivotingAndPerturbSingular and
    MaybePerturbPivot (tridiagonal_solve_perturbed.h) for one system, row-major x and rhs."""
    t = C_TYPES[s]
    single = s in ("f32", "c64")
    r = "float" if single else "double"
    f = "f" if single else ""
    flt = "FLT" if single else "DBL"
    cplx = s in ("c64", "c128")
    absf = f"__builtin_cabs{f}" if cplx else f"__builtin_fabs{f}"
    re = "__real__ " if cplx else ""
    return f"""
#ifndef HFLIB_PERTURBED_{s.upper()}
#define HFLIB_PERTURBED_{s.upper()}
#include <float.h>
#define HFLIB_MAXR(a, b) ((a) < (b) ? (b) : (a))
static void hflib_perturb_{s}({r} perturb, {t} *pivot, {t} *row, int64_t r) {{
    const {r} one = 1, tiny = {flt}_MIN, small = one / {flt}_MAX;
    const {r} safemin = small < tiny ? tiny : small * (one + {flt}_EPSILON);
    const {r} bignum = one / safemin;
    {r} size = {absf}(*pivot);
    if (size >= one) return;
    perturb = __builtin_copysign{f}(HFLIB_MAXR(__builtin_fabs{f}(perturb), safemin),
                                    {re}(*pivot));
    int stop = 0;
    {r} biggest = 0;
    for (int64_t c = 0; c < r; c++)
        if ({absf}(row[c]) > biggest) biggest = {absf}(row[c]);
    while (size < one && !stop) {{
        if (size < safemin) {{
            if (size == 0 || biggest * safemin > size) {{ *pivot += perturb; perturb *= 2; }}
            else {{
                *pivot *= bignum;
                for (int64_t c = 0; c < r; c++) row[c] *= bignum;
                stop = 1;
            }}
        }} else if (biggest > size * bignum) {{ *pivot += perturb; perturb *= 2; }}
        else stop = 1;
        size = {absf}(*pivot);
    }}
}}
__attribute__((unused)) static void hflib_perturbed_{s}(int64_t n, int64_t r, const {t} *dl,
                                                        const {t} *d, const {t} *du,
                                                        const {t} *rhs, {t} *x, {t} *u,
                                                        {t} *row) {{
#define HFLIB_PU(i, c) u[(i) * 3 + (c)]
#define HFLIB_PX(i, c) x[(i) * r + (c)]
#define HFLIB_PB(i, c) rhs[(i) * r + (c)]
    const {r} eps = {flt}_EPSILON;
    if (n == 1) {{
        {t} p = d[0];
        for (int64_t c = 0; c < r; c++) row[c] = HFLIB_PB(0, c);
        hflib_perturb_{s}(eps * {absf}(p), &p, row, r);
        for (int64_t c = 0; c < r; c++) HFLIB_PX(0, c) = row[c] / p;
        return;
    }}
    for (int64_t q = 0; q < 3 * n; q++) u[q] = 0;
    HFLIB_PU(0, 0) = d[0];
    HFLIB_PU(0, 1) = du[0];
    {r} max_u = HFLIB_MAXR({absf}(HFLIB_PU(0, 0)), {absf}(HFLIB_PU(0, 1)));
    {r} scale1 = {absf}(HFLIB_PU(0, 0)) + {absf}(HFLIB_PU(0, 1));
    for (int64_t c = 0; c < r; c++) HFLIB_PX(0, c) = HFLIB_PB(0, c);
    for (int64_t k = 0; k < n - 1; k++) {{
        HFLIB_PU(k + 1, 0) = d[k + 1];
        {r} scale2 = {absf}(dl[k + 1]) + {absf}(HFLIB_PU(k + 1, 0));
        if (k < n - 2) scale2 += {absf}(du[k + 1]);
        if (dl[k + 1] == 0) {{
            scale1 = scale2;
            HFLIB_PU(k + 1, 1) = du[k + 1];
            HFLIB_PU(k, 2) = 0;
            for (int64_t c = 0; c < r; c++) HFLIB_PX(k + 1, c) = HFLIB_PB(k + 1, c);
        }} else {{
            const {r} piv1 = HFLIB_PU(k, 0) == 0 ? 0 : {absf}(HFLIB_PU(k, 0)) / scale1;
            const {r} piv2 = {absf}(dl[k + 1]) / scale2;
            if (piv2 <= piv1) {{
                scale1 = scale2;
                const {t} factor = dl[k + 1] / HFLIB_PU(k, 0);
                HFLIB_PU(k + 1, 0) -= factor * HFLIB_PU(k, 1);
                HFLIB_PU(k + 1, 1) = du[k + 1];
                HFLIB_PU(k, 2) = 0;
                for (int64_t c = 0; c < r; c++)
                    HFLIB_PX(k + 1, c) = HFLIB_PB(k + 1, c) - factor * HFLIB_PX(k, c);
            }} else {{
                const {t} factor = HFLIB_PU(k, 0) / dl[k + 1];
                const {t} utmp = HFLIB_PU(k, 1);
                HFLIB_PU(k, 0) = dl[k + 1];
                HFLIB_PU(k + 1, 0) = utmp - factor * d[k + 1];
                HFLIB_PU(k, 1) = d[k + 1];
                if (k < n - 2) {{
                    HFLIB_PU(k, 2) = du[k + 1];
                    HFLIB_PU(k + 1, 1) = -factor * du[k + 1];
                }}
                for (int64_t c = 0; c < r; c++) {{
                    HFLIB_PX(k + 1, c) = HFLIB_PX(k, c) - factor * HFLIB_PB(k + 1, c);
                    HFLIB_PX(k, c) = HFLIB_PB(k + 1, c);
                }}
                scale1 = {absf}(HFLIB_PU(k + 1, 0)) + {absf}(HFLIB_PU(k + 1, 1));
            }}
        }}
        if (k < n - 2)
            for (int c = 0; c < 3; c++) max_u = HFLIB_MAXR(max_u, {absf}(HFLIB_PU(k, c)));
    }}
    max_u = HFLIB_MAXR(max_u, {absf}(HFLIB_PU(n - 1, 0)));
    const {r} perturb = eps * max_u;
    for (int64_t k = n - 1; k >= 0; k--) {{
        {t} p = HFLIB_PU(k, 0);
        for (int64_t c = 0; c < r; c++) {{
            {t} v = HFLIB_PX(k, c);
            if (k <= n - 2) v -= HFLIB_PU(k, 1) * HFLIB_PX(k + 1, c);
            if (k <= n - 3) v -= HFLIB_PU(k, 2) * HFLIB_PX(k + 2, c);
            row[c] = v;
        }}
        hflib_perturb_{s}(k == n - 1 ? perturb : __builtin_copysign{f}(perturb, {re}p), &p, row,
                          r);
        const {t} inv = ({t})1 / p;
        for (int64_t c = 0; c < r; c++) HFLIB_PX(k, c) = row[c] * inv;
    }}
#undef HFLIB_PU
#undef HFLIB_PX
#undef HFLIB_PB
}}
#endif
"""
