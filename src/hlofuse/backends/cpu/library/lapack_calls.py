"""jax's LAPACK custom calls, and the HLO ops cholesky and triangular-solve, as C: one function
per instruction that runs LAPACK (`lapack.py`'s pointers) on every matrix of the batch.

    NAME(in..., out...)
      lwork: LAPACK's workspace query (once, on the calling thread)
      scratch: one slot per running task (column-major copies, work arrays), allocated first
      for each matrix t (tasks on up to `threads` threads from PARALLEL_WORK flops):
          operands -> column-major scratch -> LAPACK -> results, row-major

Conditions (each routine's results are `interpreter/lapack.py`'s):
- hlofuse's buffers are row-major in the logical dimensions (the custom call's {0,1} layouts
  are physical and not kept); LAPACK's matrices are column-major, so each matrix is transposed
  into scratch and its results back. Vectors and scalars (tau, ipiv, info, eigenvalues) are
  written in place. LAPACK's integers are 32-bit (`lapack_targets` bounds every matrix).
- Each matrix reads its operands before it writes its results, so a result may share storage
  with its operand (jax's output_to_operand_aliasing) or not.
- Results LAPACK leaves destroyed hold the operand (gesdd/gesvd's a, syevd's a with mode N);
  results it does not write are zero (u and vt with mode N, gees's vectors with mode N, geev's
  vectors not asked for); geev on a matrix with a non-finite entry gives info -4 and NaN (jax's
  kernel); a failed geev (info != 0) NaN for all its results.
- Without LAPACK (a null pointer): potrf and trsm run a C version of the reference algorithm
  (`_potrf_fallback`, `_trsm_fallback`), the other routines write NaN and -1 (`lapack.py`
  makes that unreachable outside tests). The perturbed tridiagonal solve is C of its own
  (jaxlib's algorithm).
- The HLO ops: cholesky is potrf with the other triangle zeroed and an all-NaN matrix when it
  is not positive definite; triangular-solve is trsm (transpose_a ADJOINT is 'C').
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hlofuse.backends import lapack_targets
from hlofuse.backends.cpu.ctext import comment
from hlofuse.backends.cpu.library import lapack
from hlofuse.backends.cpu.library.errors import LibraryOpError
from hlofuse.backends.kernel_ir.libop import LibOp
from hlofuse.backends.kernel_ir.naming import fresh, op_word
from hlofuse.backends.lapack_targets import Call, TargetError
from hlofuse.ir.dtypes import DType
from hlofuse.ir.shape import ArrayShape, leaves

PARALLEL_WORK = 1 << 18  # flops (about) from which the matrices of a batch run on threads

C_TYPES = {"f32": "float", "f64": "double", "c64": "float _Complex", "c128": "double _Complex",
           "s32": "int32_t"}
# What a result holds when LAPACK is missing
NAN = {"f32": '__builtin_nanf("")', "f64": '__builtin_nan("")',
       "c64": '__builtin_complex(__builtin_nanf(""), __builtin_nanf(""))',
       "c128": '__builtin_complex(__builtin_nan(""), __builtin_nan(""))', "s32": "-1"}


def _common(s: str) -> str:
    """Per element type: row-major <-> column-major copies, NaN fill."""
    t = C_TYPES[s]
    return f"""
#ifndef HFLIB_LAPACK_COMMON_{s.upper()}
#define HFLIB_LAPACK_COMMON_{s.upper()}
#define HFLIB_ALIGN64(x) (((size_t)(x) + 63) & ~(size_t)63)
/* row-major rows x cols -> column-major (leading dimension rows), and back */
__attribute__((unused)) static void hflib_cm_{s}(const {t} *src, {t} *dst, int64_t rows,
                                                 int64_t cols) {{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) dst[j * rows + i] = src[i * cols + j];
}}
__attribute__((unused)) static void hflib_rm_{s}(const {t} *src, {t} *dst, int64_t rows,
                                                 int64_t cols) {{
    for (int64_t j = 0; j < cols; j++)
        for (int64_t i = 0; i < rows; i++) dst[i * cols + j] = src[j * rows + i];
}}
__attribute__((unused)) static void hflib_fill_{s}({t} *dst, int64_t n, {t} v) {{
    for (int64_t i = 0; i < n; i++) dst[i] = v;
}}
#endif
"""


@dataclass
class Plan:
    """One routine's C: parameters (C type, elements per matrix, is a result), per-slot scratch
    (name, C type, count as a C expression in `lwork`), the workspace query, the lines for one
    matrix with LAPACK and without it (None: NaN and -1)."""

    call: Call
    params: list[tuple[str, int, bool]]
    scratch: list[tuple[str, str, str]] = field(default_factory=list)
    query: list[str] = field(default_factory=list)
    item: list[str] = field(default_factory=list)
    fallback: list[str] | None = None
    min_lwork: int = 1
    cost: int = 1
    helpers: str = ""


def _dims(call: Call, names: str) -> list[int]:
    return [call.dims[n] for n in names]


def types_of(call: Call) -> tuple[str, str, str, str]:
    """(element type name, C type, real C type, the LAPACK pointer)."""
    s = call.dtype.name
    return s, C_TYPES[s], C_TYPES[call.dtype.component.name], f"hf_lapack_{call.symbol}"


def _real_of(call: Call) -> str:
    return call.dtype.component.name


def workspace_query(fn: str, args: str, t: str) -> list[str]:
    """lwork from LAPACK's workspace query (`args` with `&q, &lw` where the query goes)."""
    size = "(int64_t)__real__ q" if t.endswith("_Complex") else "(int64_t)q"
    return ["{", f"    {t} q = 0; int lw = -1, info = 0;", f"    {fn}({args});",
            f"    if (info == 0 && {size} > lwork) lwork = {size};", "}"]


def _potrf(call: Call, hlo: bool = False) -> Plan:
    s, t, _, fn = types_of(call)
    n, = _dims(call, "n")
    params = [(s, n * n, False), (s, n * n, True)] + ([] if hlo else [("s32", 1, True)])
    lower = call.char("uplo") == "L"
    item = ["int info = 0;", f"const char uplo = '{call.char('uplo')}'; const int n = {n};",
            f"hflib_cm_{s}(x0, wa, n, n);",
            f"{fn}(&uplo, &n, wa, &n, &info, (size_t)1);",
            f"hflib_rm_{s}(wa, x1, n, n);"]
    fallback = [f"int info = hflib_potrf_fb_{s}(x0, x1, {n}, {int(lower)});"]
    done = ["x2[0] = info;"] if not hlo else [
        f"if (info != 0) hflib_fill_{s}(x1, {n * n}, {NAN[s]});",
        f"else for (int64_t i = 0; i < {n}; i++) for (int64_t j = 0; j < {n}; j++)",
        f"    if ({'j > i' if lower else 'j < i'}) x1[i * {n} + j] = 0;"]
    return Plan(call, params, [("wa", t, str(n * n))], [], item + done, fallback + done,
                 cost=n ** 3 // 3 + 1, helpers=_potrf_fallback(s))


def _trsm(call: Call) -> Plan:
    s, t, _, fn = types_of(call)
    k, m, n = _dims(call, "kmn")
    side, uplo, trans, diag = (call.char(a) for a in ("side", "uplo", "trans_x", "diag"))
    item = [f"const char side = '{side}', uplo = '{uplo}', trans = '{trans}', diag = '{diag}';",
            f"const int k = {k}, m = {m}, n = {n}; {t} one = 1;",
            f"hflib_cm_{s}(x0, wa, k, k); hflib_cm_{s}(x1, wb, m, n);",
            f"{fn}(&side, &uplo, &trans, &diag, &m, &n, &one, wa, &k, wb, &m, (size_t)1, "
            "(size_t)1, (size_t)1, (size_t)1);",
            f"hflib_rm_{s}(wb, x2, m, n);"]
    fallback = [f"hflib_trsm_fb_{s}({int(side == 'L')}, {int(uplo == 'L')}, "
                f"{'NTC'.index(trans)}, {int(diag == 'U')}, {m}, {n}, x0, x1, x2);"]
    return Plan(call, [(s, k * k, False), (s, m * n, False), (s, m * n, True)],
                 [("wa", t, str(k * k)), ("wb", t, str(m * n))], [], item, fallback,
                 cost=m * n * k + 1, helpers=_trsm_fallback(s))


def _getrf(call: Call) -> Plan:
    s, t, _, fn = types_of(call)
    m, n = _dims(call, "mn")
    item = ["int info = 0;", f"const int m = {m}, n = {n};", f"hflib_cm_{s}(x0, wa, m, n);",
            f"{fn}(&m, &n, wa, &m, (int *)x2, &info);", f"hflib_rm_{s}(wa, x1, m, n);",
            "x3[0] = info;"]
    return Plan(call, [(s, m * n, False), (s, m * n, True), ("s32", min(m, n), True),
                        ("s32", 1, True)], [("wa", t, str(m * n))], [], item,
                 cost=m * n * min(m, n) + 1)


def _geqrf(call: Call) -> Plan:
    s, t, _, fn = types_of(call)
    m, n = _dims(call, "mn")
    head = f"const int m = {m}, n = {n};"
    item = ["int info = 0;", head, "const int lw = (int)lwork;", f"hflib_cm_{s}(x0, wa, m, n);",
            f"{fn}(&m, &n, wa, &m, x2, work, &lw, &info);", f"hflib_rm_{s}(wa, x1, m, n);"]
    query = ["{", head, *workspace_query(fn, "&m, &n, 0, &m, 0, &q, &lw, &info", t), "}"]
    return Plan(call, [(s, m * n, False), (s, m * n, True), (s, min(m, n), True)],
                 [("wa", t, str(m * n)), ("work", t, "lwork")], query, item, min_lwork=n,
                 cost=2 * m * n * min(m, n) + 1)


def _geqp3(call: Call) -> Plan:
    s, t, r, fn = types_of(call)
    m, n = _dims(call, "mn")
    cplx = call.dtype.is_complex
    head = f"const int m = {m}, n = {n};"
    rw = "rwork, " if cplx else ""
    item = ["int info = 0;", head, "const int lw = (int)lwork;", f"hflib_cm_{s}(x0, wa, m, n);",
            f"memmove(x3, x1, sizeof(int32_t) * {n});",
            f"{fn}(&m, &n, wa, &m, (int *)x3, x4, work, &lw, {rw}&info);",
            f"hflib_rm_{s}(wa, x2, m, n);"]
    rq = "0, " if cplx else ""
    query = ["{", head, *workspace_query(fn, f"&m, &n, 0, &m, 0, 0, &q, &lw, {rq}&info", t), "}"]
    scratch = [("wa", t, str(m * n)), ("work", t, "lwork")]
    if cplx:
        scratch.append(("rwork", r, str(2 * n)))
    return Plan(call, [(s, m * n, False), ("s32", n, False), (s, m * n, True), ("s32", n, True),
                        (s, min(m, n), True)], scratch, query, item,
                 min_lwork=3 * n + 1, cost=2 * m * n * min(m, n) + 1)


def _orgqr(call: Call) -> Plan:
    s, t, _, fn = types_of(call)
    m, n, k = _dims(call, "mnk")
    head = f"const int m = {m}, n = {n}, k = {k};"
    item = ["int info = 0;", head, "const int lw = (int)lwork;", f"hflib_cm_{s}(x0, wa, m, n);",
            f"{fn}(&m, &n, &k, wa, &m, ({t} *)x1, work, &lw, &info);",
            f"hflib_rm_{s}(wa, x2, m, n);"]
    query = ["{", head, *workspace_query(fn, "&m, &n, &k, 0, &m, 0, &q, &lw, &info", t), "}"]
    return Plan(call, [(s, m * n, False), (s, k, False), (s, m * n, True)],
                 [("wa", t, str(m * n)), ("work", t, "lwork")], query, item, min_lwork=n,
                 cost=4 * m * n * k + 1)


def _ormqr(call: Call) -> Plan:
    s, t, _, fn = types_of(call)
    r, ka, k, m, n = _dims(call, "rqkmn")
    left, transpose = bool(call.attrs["left"]), bool(call.attrs["transpose"])
    tc = ("C" if call.dtype.is_complex else "T") if transpose else "N"
    head = (f"const char side = '{'L' if left else 'R'}', trans = '{tc}'; "
            f"const int m = {m}, n = {n}, k = {k}, r = {r};")
    item = ["int info = 0;", head, "const int lw = (int)lwork;",
            f"hflib_cm_{s}(x0, wa, r, {ka}); hflib_cm_{s}(x2, wc, m, n);",
            f"{fn}(&side, &trans, &m, &n, &k, wa, &r, ({t} *)x1, wc, &m, work, &lw, &info, "
            "(size_t)1, (size_t)1);",
            f"hflib_rm_{s}(wc, x3, m, n);"]
    query = ["{", head, *workspace_query(
        fn, "&side, &trans, &m, &n, &k, 0, &r, 0, 0, &m, &q, &lw, &info, (size_t)1, (size_t)1",
        t), "}"]
    return Plan(call, [(s, r * ka, False), (s, k, False), (s, m * n, False), (s, m * n, True)],
                 [("wa", t, str(r * ka)), ("wc", t, str(m * n)), ("work", t, "lwork")], query,
                 item, min_lwork=max(m, n), cost=4 * m * n * k + 1)


def _gehrd(call: Call) -> Plan:
    s, t, _, fn = types_of(call)
    n, = _dims(call, "n")
    head = f"const int n = {n}, ilo = {call.attrs['low']}, ihi = {call.attrs['high']};"
    item = ["int info = 0;", head, "const int lw = (int)lwork;", f"hflib_cm_{s}(x0, wa, n, n);",
            f"{fn}(&n, &ilo, &ihi, wa, &n, x2, work, &lw, &info);",
            f"hflib_rm_{s}(wa, x1, n, n);", "x3[0] = info;"]
    query = ["{", head, *workspace_query(fn, "&n, &ilo, &ihi, 0, &n, 0, &q, &lw, &info", t), "}"]
    return Plan(call, [(s, n * n, False), (s, n * n, True), (s, n - 1, True), ("s32", 1, True)],
                 [("wa", t, str(n * n)), ("work", t, "lwork")], query, item, min_lwork=n,
                 cost=4 * n ** 3 + 1)


def _sytrd(call: Call) -> Plan:
    s, t, _, fn = types_of(call)
    n, = _dims(call, "n")
    rs = _real_of(call)
    head = f"const char uplo = '{call.char('uplo')}'; const int n = {n};"
    item = ["int info = 0;", head, "const int lw = (int)lwork;", f"hflib_cm_{s}(x0, wa, n, n);",
            f"{fn}(&uplo, &n, wa, &n, x2, x3, x4, work, &lw, &info, (size_t)1);",
            f"hflib_rm_{s}(wa, x1, n, n);", "x5[0] = info;"]
    query = ["{", head, *workspace_query(fn, "&uplo, &n, 0, &n, 0, 0, 0, &q, &lw, &info, (size_t)1",
                                t), "}"]
    return Plan(call, [(s, n * n, False), (s, n * n, True), (rs, n, True), (rs, n - 1, True),
                        (s, n - 1, True), ("s32", 1, True)],
                 [("wa", t, str(n * n)), ("work", t, "lwork")], query, item, min_lwork=1,
                 cost=2 * n ** 3 + 1)


def _gtsv(call: Call) -> Plan:
    s, t, _, fn = types_of(call)
    n, r = _dims(call, "nr")
    item = ["int info = 0;", f"const int n = {n}, r = {r};",
            *(f"memmove(x{4 + i}, x{i}, sizeof({t}) * {n});" for i in range(3)),
            f"hflib_cm_{s}(x3, wb, n, r);",
            f"{fn}(&n, &r, x4 + 1, x5, x6, wb, &n, &info);", f"hflib_rm_{s}(wb, x7, n, r);",
            "x8[0] = info;"]
    vec = [(s, n, False)] * 3
    return Plan(call, [*vec, (s, n * r, False), *[(s, n, True)] * 3, (s, n * r, True),
                        ("s32", 1, True)], [("wb", t, str(n * r))], [], item, cost=8 * n * r + 1)


def _perturbed(call: Call) -> Plan:
    s, t, _, _ = types_of(call)
    n, r = _dims(call, "nr")
    line = [f"hflib_perturbed_{s}({n}, {r}, x0, x1, x2, x3, x4, wu, wrow);"]
    from hlofuse.backends.cpu.library.lapack_eigen import perturbed_helper

    return Plan(call, [(s, n, False)] * 3 + [(s, n * r, False), (s, n * r, True)],
                 [("wu", t, str(3 * n)), ("wrow", t, str(r))], [], line, line,
                 cost=8 * n * r + 1, helpers=perturbed_helper(s))


# ----- the fallbacks -------------------------------------------------------------------------

def _scalar_ops(s: str) -> dict[str, str]:
    """C snippets for the element type: conj, real part, |x|^2, sqrt of a real."""
    r = "float" if s in ("f32", "c64") else "double"
    f = "f" if r == "float" else ""
    if s in ("c64", "c128"):
        return {"CONJ": f"__builtin_conj{f}", "RE": "__real__", "R": r,
                "ABS2": "hflib_abs2", "SQRT": f"__builtin_sqrt{f}",
                "abs2": f"static inline {r} hflib_abs2_{s}({C_TYPES[s]} x) {{ return __real__ x * "
                        f"__real__ x + __imag__ x * __imag__ x; }}"}
    return {"CONJ": "", "RE": "", "R": r, "ABS2": "hflib_abs2", "SQRT": f"__builtin_sqrt{f}",
            "abs2": f"static inline {r} hflib_abs2_{s}({r} x) {{ return x * x; }}"}


def _potrf_fallback(s: str) -> str:
    """dpotf2 on a row-major matrix: the factor in the `lower` (or upper, as L^H) triangle of
    out, the other triangle the input's; info."""
    o = _scalar_ops(s)
    t = C_TYPES[s]
    return f"""
#ifndef HFLIB_POTRF_FB_{s.upper()}
#define HFLIB_POTRF_FB_{s.upper()}
{o['abs2']}
/* L(i, j), i >= j, in the lower triangle, or conj(U(j, i)) in the upper one */
#define HFLIB_L(i, j) (lower ? out[(i) * n + (j)] : {o['CONJ']}(out[(j) * n + (i)]))
#define HFLIB_SET(i, j, v) do {{ if (lower) out[(i) * n + (j)] = (v); \\
                                else out[(j) * n + (i)] = {o['CONJ']}(v); }} while (0)
__attribute__((unused)) static int hflib_potrf_fb_{s}(const {t} *a, {t} *out, int64_t n,
                                                      int lower) {{
    for (int64_t q = 0; q < n * n; q++) out[q] = a[q];
    for (int64_t j = 0; j < n; j++) {{
        {o['R']} d = {o['RE']}(HFLIB_L(j, j));
        for (int64_t k = 0; k < j; k++) d -= hflib_abs2_{s}(HFLIB_L(j, k));
        if (!(d > 0)) {{ HFLIB_SET(j, j, d); return (int)(j + 1); }}
        const {o['R']} root = {o['SQRT']}(d);
        HFLIB_SET(j, j, root);
        for (int64_t i = j + 1; i < n; i++) {{
            {t} v = HFLIB_L(i, j);
            for (int64_t k = 0; k < j; k++) v -= HFLIB_L(i, k) * {o['CONJ']}(HFLIB_L(j, k));
            HFLIB_SET(i, j, v / root);
        }}
    }}
    return 0;
}}
#undef HFLIB_L
#undef HFLIB_SET
#endif
"""


def _trsm_fallback(s: str) -> str:
    """Substitution on row-major matrices: op(a) x = b (left) or x op(a) = b, op(a) read from
    a's `lower` (or upper) triangle, trans 0 N, 1 T, 2 C."""
    o = _scalar_ops(s)
    t = C_TYPES[s]
    return f"""
#ifndef HFLIB_TRSM_FB_{s.upper()}
#define HFLIB_TRSM_FB_{s.upper()}
#define HFLIB_OPA(i, j) (trans == 0 ? a[(i) * k + (j)] : trans == 1 ? a[(j) * k + (i)] \\
                         : {o['CONJ']}(a[(j) * k + (i)]))
__attribute__((unused)) static void hflib_trsm_fb_{s}(int left, int lower, int trans, int unit,
                                                      int64_t m, int64_t n, const {t} *a,
                                                      const {t} *b, {t} *x) {{
    const int64_t k = left ? m : n;
    const int low = trans == 0 ? lower : !lower; /* is op(a) lower triangular? */
    for (int64_t q = 0; q < m * n; q++) x[q] = b[q];
    if (left) {{
        for (int64_t c = 0; c < n; c++)
            for (int64_t s = 0; s < m; s++) {{
                const int64_t i = low ? s : m - 1 - s;
                {t} v = x[i * n + c];
                for (int64_t r = low ? 0 : i + 1; r < (low ? i : m); r++)
                    v -= HFLIB_OPA(i, r) * x[r * n + c];
                x[i * n + c] = unit ? v : v / HFLIB_OPA(i, i);
            }}
    }} else {{
        for (int64_t row = 0; row < m; row++)
            for (int64_t s = 0; s < n; s++) {{
                const int64_t j = low ? n - 1 - s : s;
                {t} v = x[row * n + j];
                for (int64_t r = low ? j + 1 : 0; r < (low ? n : j); r++)
                    v -= x[row * n + r] * HFLIB_OPA(r, j);
                x[row * n + j] = unit ? v : v / HFLIB_OPA(j, j);
            }}
    }}
}}
#undef HFLIB_OPA
#endif
"""


# ----- the function ----------------------------------------------------------------------------

def _function(plan: Plan, name: str, threads: int, what: str) -> str:
    call = plan.call
    count = call.count
    fn = f"hf_lapack_{call.symbol}" if call.symbol else None
    slots = min(threads, count) if count > 1 and plan.cost * count >= PARALLEL_WORK else 1
    slots = max(1, slots)
    params = [f"{'' if out else 'const '}{C_TYPES[s]} *p{i}" for i, (s, _, out) in
              enumerate(plan.params)]
    fields = "; ".join(params)
    views = [f"{'' if out else 'const '}{C_TYPES[s]} *x{i} = j->p{i} + t * {size};"
             for i, (s, size, out) in enumerate(plan.params)]
    carve = [f"{ct} *{v} = ({ct} *)ws; ws += HFLIB_ALIGN64(sizeof({ct}) * (size_t)({c}));"
             for v, ct, c in plan.scratch]
    per = [f"per += HFLIB_ALIGN64(sizeof({ct}) * (size_t)({c}));" for _, ct, c in plan.scratch]
    nan = [f"hflib_fill_{s}(x{i}, {size}, {NAN[s]});"
           for i, (s, size, out) in enumerate(plan.params) if out]
    body = plan.item
    if fn is not None:
        other = plan.fallback if plan.fallback is not None else nan
        body = [f"if ({fn}) {{", *("    " + ln for ln in plan.item), "} else {",
                *("    " + ln for ln in other), "}"]
    lines = [
        comment(what),
        f"typedef struct {{ {fields}; int64_t lwork; size_t per; char *scratch; int *busy; "
        f"int slots; }} {name}_job;",
        f"static void {name}_one(const {name}_job *j, int64_t t, char *ws) {{",
        "    const int64_t lwork = j->lwork; (void)lwork; (void)ws;",
        *("    " + ln for ln in views + carve), *("    " + ln for ln in body), "}",
        f"static void {name}_t(void *const *args, int64_t lo, int64_t hi) {{",
        f"    const {name}_job *j = (const {name}_job *)args[0];",
        "    const int slot = hf_slot_claim(j->busy, j->slots);",
        "    char *ws = j->scratch + (size_t)slot * j->per;",
        f"    for (int64_t t = lo; t < hi; t++) {name}_one(j, t, ws);",
        "    hf_slot_release(j->busy, slot);", "}",
        f"static void {name}({', '.join(params)}) {{",
        f"    int64_t lwork = {plan.min_lwork};",
    ]
    if plan.query and fn is not None:
        lines += [f"    if ({fn}) {{", *("        " + ln for ln in plan.query), "    }"]
    lines += [
        "    size_t per = 0;", *("    " + ln for ln in per),
        f"    const int slots = {slots};",
        f"    {name}_job j = {{{', '.join(f'p{i}' for i in range(len(plan.params)))}, lwork, "
        "per, 0, 0, slots};",
        "    j.scratch = hf_alloc(64, per * (size_t)slots + sizeof(int) * (size_t)slots);",
        "    j.busy = (int *)(j.scratch + per * (size_t)slots);",
        "    memset(j.busy, 0, sizeof(int) * (size_t)slots);",
        "    void *const args[] = {(void *)&j};",
        f"    if (slots > 1) hf_parallel_ptr({name}_t, args, 0, {count}, 1, slots);"
        if slots > 1 else f"    {name}_t(args, 0, {count});",
        "    free(j.scratch);", "}",
    ]
    return "\n".join(lines) + "\n"


def _emit(plan: Plan, op: LibOp, ins: list[str], outs: list[str], names: set[str],
          threads: int, what: str) -> tuple[str, str]:
    name = fresh(f"{op_word(op.opcode)}_lapack", names)
    types = {s for s, _, _ in plan.params} | {plan.call.dtype.name, "s32"}
    defs = "".join(_common(s) for s in sorted(types))
    if plan.call.symbol:
        defs += lapack.declaration(plan.call.symbol)
    defs += plan.helpers
    if plan.call.symbol and plan.fallback is None:
        defs += lapack.needs(plan.call.symbol)
    defs += _function(plan, name, threads, what)
    if len(ins) + len(outs) != len(plan.params):
        raise LibraryOpError(op, f"expected {len(plan.params)} operand and result buffers, "
                             f"got {len(ins) + len(outs)}")
    args = [f"({'' if out else 'const '}{C_TYPES[s]} *)({p})"
            for (s, _, out), p in zip(plan.params, [*ins, *outs], strict=True)]
    return defs, f"{name}({', '.join(args)});\n"


_PLANS = {"potrf": _potrf, "trsm": _trsm, "getrf": _getrf, "geqrf": _geqrf, "geqp3": _geqp3,
          "orgqr": _orgqr, "ormqr": _ormqr, "gehrd": _gehrd, "sytrd": _sytrd, "gtsv": _gtsv,
          "perturbed": _perturbed}


def _plan(call: Call, op: LibOp) -> Plan:
    found = _PLANS.get(call.routine)
    if found is not None:
        return found(call)
    from hlofuse.backends.cpu.library import lapack_eigen

    return lapack_eigen.plan(call, [tuple(s.dims) for s in leaves(op.shape)])


def code_generation_check(site: str, call: Call) -> None:
    """UnsupportedOpError when `call` needs LAPACK and none is installed; `site` (`instruction
    NAME in COMPUTATION`, input text) opens the message."""
    if not call.symbol or call.routine in lapack.FALLBACK or lapack.available(call.symbol):
        return
    from hlofuse.backends.cpu.cexpr import UnsupportedOpError

    raise UnsupportedOpError(
        f"{site}: custom-call {call.target!r} runs LAPACK's "
        f"{call.symbol}, which is not available: the cpu backend needs the scipy-openblas32 "
        "wheel (`pip install scipy-openblas32`); the interpreter backend runs it without")


def parse(op: LibOp) -> Call:
    """The validated call of a LAPACK custom call (LibraryOpError when malformed)."""
    try:
        call = lapack_targets.parse_call(
            str(op.attr("custom_call_target", "")), list(op.operands), op.shape,
            str(op.attr("backend_config", "{}")), op.attr("num_batch_dims"))
    except TargetError as exc:
        raise LibraryOpError(op, str(exc)) from None
    if call is None:
        raise LibraryOpError(op, "not a LAPACK custom call the cpu backend implements")
    return call


def emit_custom_call(op: LibOp, ins: list[str], outs: list[str], names: set[str],
                     threads: int = 1) -> tuple[str, str]:
    """(definitions, statements) of a LAPACK custom call."""
    call = parse(op)
    code_generation_check(op.site, call)
    name = lapack_targets.PERTURBED_TARGET if not call.symbol else f"lapack_{call.symbol}_ffi"
    what = f"{name}: {call.count} matrices, {call.dims}"  # made by the code (the table's name)
    try:
        plan = _plan(call, op)
    except TargetError as exc:
        raise LibraryOpError(op, str(exc)) from None
    return _emit(plan, op, ins, outs, names, threads, what)


def _hlo_call(op: LibOp, routine: str, attrs: dict) -> Call:
    shapes = list(op.operands)
    if not all(isinstance(s, ArrayShape) and s.rank >= 2 for s in shapes):
        raise LibraryOpError(op, "needs operands of rank >= 2")
    a: ArrayShape = shapes[0]  # type: ignore[assignment]
    if a.dtype.name not in lapack_targets.LETTERS.values():
        raise LibraryOpError(op, f"element type {a.dtype} (f32, f64, c64 or c128 needed)")
    k = a.dims[-1]
    if a.dims[-2] != k or k < 1:
        raise LibraryOpError(op, "needs non-empty square matrices in the minor dimensions")
    batch = a.dims[:-2]
    dims = {"n": k}
    if routine == "trsm":
        b: ArrayShape = shapes[1]  # type: ignore[assignment]
        m, n = b.dims[-2:]
        if b.dtype != a.dtype or b.dims[:-2] != batch or min(m, n) < 1 or \
                k != (m if attrs["side"] == "L" else n):
            raise LibraryOpError(op, "operand shapes do not agree")
        dims = {"k": k, "m": m, "n": n}
    for s in leaves(op.shape):
        if math.prod(s.dims[len(batch):]) > lapack_targets.INT32_MAX:
            raise LibraryOpError(op, "matrices too large for LAPACK's 32-bit indices")
    dtype: DType = a.dtype
    return Call(op.opcode.value, routine, lapack_targets.lapack_name(routine, dtype), dtype,
                tuple(batch), dims, attrs)


def emit_cholesky(op: LibOp, ins: list[str], outs: list[str], names: set[str],
                  threads: int = 1) -> tuple[str, str]:
    """The HLO cholesky op: potrf, the other triangle zero, NaN when not positive definite."""
    lower = bool(op.attr("lower", False))
    call = _hlo_call(op, "potrf", {"uplo": "L" if lower else "U"})
    return _emit(_potrf(call, hlo=True), op, ins, outs, names, threads,
                 f"cholesky ({'lower' if lower else 'upper'}) of {call.count} matrices")


_TRANS = {"NO_TRANSPOSE": "N", "TRANSPOSE": "T", "ADJOINT": "C"}


def emit_triangular_solve(op: LibOp, ins: list[str], outs: list[str], names: set[str],
                          threads: int = 1) -> tuple[str, str]:
    """The HLO triangular-solve op as trsm."""
    mode = str(op.attr("transpose_a", "NO_TRANSPOSE"))
    if mode not in _TRANS:
        raise LibraryOpError(op, f"unknown transpose_a={mode}")
    attrs = {"side": "L" if op.attr("left_side", False) else "R",
             "uplo": "L" if op.attr("lower", False) else "U",
             "trans_x": _TRANS[mode], "diag": "U" if op.attr("unit_diagonal") else "N"}
    call = _hlo_call(op, "trsm", attrs)
    return _emit(_trsm(call), op, ins, outs, names, threads,
                 f"triangular-solve of {call.count} systems")

