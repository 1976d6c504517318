"""Long f32/f64 dots with a small result, cut along K: a layer's weight gradient `x^T dy`.

K is the minibatch (65536 rows in a PPO update) and the result a layer's inputs by its outputs
(64 x 2 for a policy head, 4 x 64 for an observation layer, 64 x 64 for a hidden layer). The
GEMM and the BLAS cut a dot into row or column blocks (`hflib_dot_split`): a 64 x 2 result is
one to four blocks, each streaming all K rows of both operands on one thread (OpenBLAS ran it
at 7-10 GB/s), and a 64 x 64 result's four row blocks each read all of `dy` again. Here:

    c[i][j] = sum_k a(i, k) * b(k, j)
    K cut into fixed chunks (KC rows, at most CHUNKS of them: a function of K alone)
    chunk q -> part[q], on the runtime's pool:
      narrow result (one side <= NARROW): outer products, vectors of the wide side (contiguous
        for each k), the narrow side broadcast, NV x NS accumulators in registers
      both sides wider: one single-threaded BLAS call (GEMM_KC rows) where a BLAS is bound and
        the operands are row- or column-major, else our GEMM (`hflib_gemm_one`)
    c = part[0] + part[1] + ... in chunk order: the same bits whatever the thread count

Conditions (`fits`): f32/f64 (the accumulator is the result type), one batch item, K at least
MIN_K and at least LONG times the result's size; a narrow result's wide side from MIN_WIDE to
WIDE and contiguous in its operand (`sam == 1` for a wide M, `sbn == 1` for a wide N; the other
operand may have any strides), a result wide on both sides at most WIDE x WIDE. Within a chunk
each output is summed in k order (or the BLAS's), the chunks in chunk order: a reassociation
of the interpreter's sum, within the dot tolerances as the GEMM's K blocking is.

PPO update (2048 x 128 samples, 4 x 4 minibatches; 2 threads, AVX-512 Zen 5), per minibatch:
64 x 2 2.41 -> 0.36 ms, 1 x 64 2.13 -> 0.35, 4 x 64 1.73 -> 0.36, 64 x 64 2.84 -> 2.33.
"""

from __future__ import annotations

from hlofuse.backends.cpu.library.blas import CBLAS_NO_TRANS, CBLAS_ROW_MAJOR, CBLAS_TRANS

NARROW = 8  # the most columns (or rows) on the narrow side
WIDE = 256  # the most elements on the wide side
MIN_WIDE = 16  # and the fewest: one AVX-512 vector of f32
MIN_K = 4096  # shorter products are left to the GEMM
LONG = 16  # K at least this many times M * N

_TEMPLATE = r"""
#ifndef HFLIB_OUTER_CONSTANTS
#define HFLIB_OUTER_CONSTANTS
/* rows per chunk (outer products; GEMM chunks), the most chunks, the narrow side's limit */
enum {{ HFLIB_OUTER_KC = 1024, HFLIB_OUTER_GEMM_KC = 8192, HFLIB_OUTER_CHUNKS = 64,
       HFLIB_OUTER_NARROW = {NARROW} }};
#endif
#ifndef HFLIB_OUTER_{S}
#define HFLIB_OUTER_{S}

/* acc[i][q*W .. q*W+W) (row stride lda) = sum over k0 <= k < k1 of s[k*ssk + i*sss] *
   v[k*svk + q*W ..], i < NS, q < NV: NV x NS accumulators in registers (NS and NV constants
   where it is inlined) */
__attribute__((optimize("fp-contract=fast"), always_inline))
static inline void hflib_outer_tile_{S}(const int NV, const int NS, int64_t k0, int64_t k1,
                                        const {T} *restrict v, int64_t svk,
                                        const {T} *restrict s, int64_t ssk, int64_t sss,
                                        {T} *restrict acc, int64_t lda) {{
    enum {{ W = HFLIB_VW_{S} }};
    hflib_vec_{S} x[4][4];
    for (int i = 0; i < NS; i++)
        for (int q = 0; q < NV; q++) x[i][q] = (hflib_vec_{S}){{0}};
    for (int64_t k = k0; k < k1; k++) {{
        hflib_vec_{S} y[4];
        for (int q = 0; q < NV; q++) y[q] = *(const hflib_uvec_{S} *)(v + k * svk + q * W);
        for (int i = 0; i < NS; i++) {{
            const hflib_vec_{S} b = (hflib_vec_{S}){{0}} + s[k * ssk + i * sss];  /* broadcast */
            for (int q = 0; q < NV; q++) x[i][q] += b * y[q];
        }}
    }}
    for (int i = 0; i < NS; i++)
        for (int q = 0; q < NV; q++) *(hflib_uvec_{S} *)(acc + i * lda + q * W) = x[i][q];
}}

/* acc[i][l] (ns x nv, row stride nv) = the sums of rows k0..k1 of the outer products */
static void hflib_outer_chunk_{S}(int64_t nv, int64_t ns, int64_t k0, int64_t k1,
                                  const {T} *v, int64_t svk, const {T} *s, int64_t ssk,
                                  int64_t sss, {T} *restrict acc) {{
    enum {{ W = HFLIB_VW_{S}, NSMAX = HFLIB_VBYTES == 64 ? 4 : 2 }};
    const int64_t full = nv / W * W;
    for (int64_t i0 = 0; i0 < ns; i0 += NSMAX) {{
        const int r = ns - i0 < NSMAX ? (int)(ns - i0) : NSMAX;
        const {T} *si = s + i0 * sss;
        {T} *ai = acc + i0 * nv;
        for (int64_t l = 0; l < full;) {{
            const int64_t left = (full - l) / W;
            const int q = left >= 4 ? 4 : left >= 2 ? 2 : 1;
#define HFLIB_OUTER_CASE(Q, R) \
            if (q == Q && r == R) \
                hflib_outer_tile_{S}(Q, R, k0, k1, v + l, svk, si, ssk, sss, ai + l, nv);
            HFLIB_OUTER_CASE(4, 1) HFLIB_OUTER_CASE(4, 2) HFLIB_OUTER_CASE(2, 1)
            HFLIB_OUTER_CASE(2, 2) HFLIB_OUTER_CASE(1, 1) HFLIB_OUTER_CASE(1, 2)
#if HFLIB_VBYTES == 64
            HFLIB_OUTER_CASE(4, 3) HFLIB_OUTER_CASE(4, 4) HFLIB_OUTER_CASE(2, 3)
            HFLIB_OUTER_CASE(2, 4) HFLIB_OUTER_CASE(1, 3) HFLIB_OUTER_CASE(1, 4)
#endif
#undef HFLIB_OUTER_CASE
            l += q * W;
        }}
        for (int64_t l = full; l < nv; l++)  /* lanes past the last whole vector */
            for (int i = 0; i < r; i++) {{
                {T} t = 0;
                for (int64_t k = k0; k < k1; k++) t += si[k * ssk + i * sss] * v[k * svk + l];
                ai[i * nv + l] = t;
            }}
    }}
}}

typedef struct {{
    int64_t nv, ns, K, chunk, svk, ssk, sss;
    const {T} *v, *s;
    {T} *part;
    /* a result wider than NARROW on both sides: each chunk one GEMM (gemm_one) */
    int64_t M, N, sam, sak, sbk, sbn, per;
    const {T} *a, *b;
    {T} *scratch;
    int *busy, slots;
}} hflib_outer_job_{S};

/* the chunk [k0, k1) of a product wider than NARROW on both sides into part (M x N): one
   single-threaded BLAS call where a BLAS is bound and both operands are row- or column-major,
   else our GEMM in the slot's scratch */
static void hflib_outer_gemm_{S}(const hflib_outer_job_{S} *j, int64_t k0, int64_t k1,
                                 {T} *part, {T} *scratch) {{
    const {T} *a = j->a + k0 * j->sak, *b = j->b + k0 * j->sbk;
    const int64_t lda = j->sak == 1 ? j->sam : j->sak, ldb = j->sbn == 1 ? j->sbk : j->sbn;
    if (hf_blas_{t}gemm && (j->sak == 1 || j->sam == 1) && (j->sbn == 1 || j->sbk == 1) &&
        lda <= INT32_MAX && ldb <= INT32_MAX)
        hf_blas_{t}gemm({ROW_MAJOR}, j->sak == 1 ? {NO_TRANS} : {TRANS},
                        j->sbn == 1 ? {NO_TRANS} : {TRANS}, (int)j->M, (int)j->N, (int)(k1 - k0),
                        1, a, (int)lda, b, (int)ldb, 0, part, (int)j->N);
    else
        hflib_gemm_one_{S}(j->M, j->N, k1 - k0, a, j->sam, j->sak, b, j->sbk, j->sbn, part,
                           j->N, 0, scratch);
}}

static void hflib_outer_task_{S}(void *const *args, int64_t lo, int64_t hi) {{
    const hflib_outer_job_{S} *j = (const hflib_outer_job_{S} *)args[0];
    if (j->scratch) {{
        const int slot = hf_slot_claim(j->busy, j->slots);
        for (int64_t q = lo; q < hi; q++) {{
            const int64_t k0 = q * j->chunk, k1 = k0 + j->chunk < j->K ? k0 + j->chunk : j->K;
            hflib_outer_gemm_{S}(j, k0, k1, j->part + q * j->M * j->N,
                                 j->scratch + slot * j->per);
        }}
        hf_slot_release(j->busy, slot);
        return;
    }}
    for (int64_t q = lo; q < hi; q++) {{
        const int64_t k0 = q * j->chunk, k1 = k0 + j->chunk < j->K ? k0 + j->chunk : j->K;
        hflib_outer_chunk_{S}(j->nv, j->ns, k0, k1, j->v, j->svk, j->s, j->ssk, j->sss,
                              j->part + q * j->nv * j->ns);
    }}
}}

/* c (M x N, contiguous) = a x b, a(i, k) at a[i*sam + k*sak], b(k, j) at b[k*sbk + j*sbn],
   where gemm_outer.fits holds: N wide with sbn == 1, or M wide with sam == 1. */
HFLIB_ENTRY void hflib_gemm_outer_{S}(int64_t M, int64_t N, int64_t K, const {T} *a,
                                      int64_t sam, int64_t sak, const {T} *b, int64_t sbk,
                                      int64_t sbn, {T} *c, int threads) {{
    /* both sides wider than NARROW: each chunk one GEMM into c's layout */
    const int gemm = M > HFLIB_OUTER_NARROW && N > HFLIB_OUTER_NARROW;
    const int wide_n = gemm || (sbn == 1 && (N >= M || sam != 1));
    hflib_outer_job_{S} j = {{wide_n ? N : M, wide_n ? M : N, K, 0, wide_n ? sbk : sak,
                             wide_n ? sak : sbk, wide_n ? sam : sbn, wide_n ? b : a,
                             wide_n ? a : b, 0, M, N, sam, sak, sbk, sbn, 0, a, b, 0, 0, 1}};
    const int64_t kc = gemm ? HFLIB_OUTER_GEMM_KC : HFLIB_OUTER_KC;
    int64_t chunks = (K + kc - 1) / kc;
    if (chunks > HFLIB_OUTER_CHUNKS) chunks = HFLIB_OUTER_CHUNKS;
    j.chunk = (K + chunks - 1) / chunks;
    chunks = (K + j.chunk - 1) / j.chunk;
    const int64_t size = M * N, parts = (size * chunks + 15) / 16 * 16;
    const int par = threads > 1 && chunks > 1 && (double)M * N * K >= {PARALLEL_WORK};
    j.slots = par ? (chunks < threads ? (int)chunks : threads) : 1;
    if (gemm) j.per = (hflib_gemm_scratch_{S}(N, j.chunk) + 15) / 16 * 16;
    j.part = hf_alloc(64, sizeof({T}) * (parts + j.per * j.slots) + sizeof(int) * j.slots);
    if (gemm) {{
        j.scratch = j.part + parts;
        j.busy = (int *)(j.scratch + j.per * j.slots);
        memset(j.busy, 0, sizeof(int) * j.slots);
    }}
    void *const args[] = {{&j}};
    if (par) hf_parallel_ptr(hflib_outer_task_{S}, args, 0, chunks, 1, j.slots);
    else hflib_outer_task_{S}(args, 0, chunks);
    for (int64_t e = 0; e < size; e++) {{  /* the chunks' sums in chunk order */
        {T} t = j.part[e];
        for (int64_t q = 1; q < chunks; q++) t += j.part[q * size + e];
        const int64_t i = e / j.nv, l = e % j.nv;
        c[wide_n ? i * N + l : l * N + i] = t;
    }}
    free(j.part);
}}
#endif
"""


def helper(suffix: str, parallel_work: int) -> str:
    """C text of `hflib_gemm_outer_<suffix>`, placed after the GEMM template (whose vector types,
    entry-point macro and `hflib_gemm_one` it uses) and the BLAS driver (whose pointers)."""
    ctype, t = {"f32": ("float", "s"), "f64": ("double", "d")}[suffix]
    return _TEMPLATE.format(T=ctype, S=suffix, t=t, PARALLEL_WORK=parallel_work, NARROW=NARROW,
                            ROW_MAJOR=CBLAS_ROW_MAJOR, TRANS=CBLAS_TRANS,
                            NO_TRANS=CBLAS_NO_TRANS)


def fits(suffix: str, batch: int, m: int, n: int, k: int, sam: int, sbn: int) -> bool:
    """Does c = a x b (one batch item, M x N x K) run cut along K?"""
    if suffix not in ("f32", "f64") or batch != 1 or k < MIN_K or k < LONG * m * n:
        return False
    if m > NARROW and n > NARROW:  # a chunk is a GEMM
        return m <= WIDE and n <= WIDE
    wide_n = sbn == 1 and m <= NARROW and MIN_WIDE <= n <= WIDE
    wide_m = sam == 1 and n <= NARROW and MIN_WIDE <= m <= WIDE
    return wide_n or wide_m
