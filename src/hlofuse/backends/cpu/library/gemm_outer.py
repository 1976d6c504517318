"""Register-tile f32/f64 dots for a layer over a minibatch: the weight gradient `x^T dy` (long
K, small result: `hflib_gemm_outer`) and the forward and input-gradient products (tall: many
rows, few columns and terms: `hflib_gemm_rows`).

K is the minibatch (65536 rows in a PPO update) and the result a layer's inputs by its outputs
(64 x 2 for a policy head, 4 x 64 for an observation layer, 64 x 64 for a hidden layer). The
GEMM and the BLAS cut a dot into row or column blocks (`hflib_dot_split`): a 64 x 2 result is
one to four blocks, each streaming all K rows of both operands on one thread (OpenBLAS ran it
at 7-10 GB/s), and a 64 x 64 result's four row blocks each read all of `dy` again. Here:

    c[i][j] = sum_k a(i, k) * b(k, j)          v: the operand contiguous along the result's
                                                  side it spans (the vector side), s: the other
    K cut into fixed chunks of KC rows (at most CHUNKS, and PARTS partial sums: by K and the
    result's size alone); chunk q -> part[q], the chunks on the runtime's pool:
      blocks of KB rows (v's block stays in cache), each block by tiles of NS rows of s
      (broadcast) x NV vectors of v, NS x NV accumulators in registers (6 x 4 AVX-512:
      24 of 32 registers; 6 x 2 AVX2: 12 of 16), added into part[q]
    c = part[0] + part[1] + ... in chunk order: the same bits whatever the thread count

Conditions (`fits`): f32/f64 (the accumulator is the result type), one batch item, K at least
MIN_K and at least LONG times the result's size, the result at most WIDE x WIDE, and the vector
side at least MIN_WIDE and contiguous in its operand (`sam == 1` along M, `sbn == 1` along N;
the other operand may have any strides). Within a block each output is summed in k order, the
blocks and chunks in order: a reassociation of the interpreter's sum, within the dot tolerances
as the GEMM's K blocking is.

Tall products (`fits_rows`: at least TALL_M rows, N a multiple of MIN_WIDE up to WIDE, K at
most TALL_K) run in row blocks of ROWS_BLOCK as tasks, each by the same tiles with b's rows as
the vectors (packed contiguous along N first for `x @ W.T`) and a's rows broadcast: 24
accumulators where the GEMM's 6 x 2-vector tile holds 12. 65536 x 64 x 64 (PPO's hidden layers
and their input gradients): 1.5-1.65 -> 1.2-1.33 ms in the update.

PPO update (2048 x 128 samples, 4 x 4 minibatches; 2 threads, AVX-512 Zen 5), per minibatch:
64 x 2 2.41 -> 0.38 ms, 1 x 64 2.13 -> 0.38, 4 x 64 1.73 -> 0.32, 64 x 64 2.84 -> 2.03 (alone,
in cache: 2.07 ms through OpenBLAS's row blocks, 1.68 here). KC, CHUNKS, PARTS, KB and
ROWS_BLOCK are the template's HFLIB_OUTER_* and HFLIB_ROWS_BLOCK constants.
"""

from __future__ import annotations

WIDE = 256  # the most rows or columns of the result
MIN_WIDE = 16  # the fewest along the vectors: one AVX-512 vector of f32
MIN_K = 4096  # shorter products are left to the GEMM
LONG = 16  # K at least this many times M * N
TALL_M = 4096  # a tall product: at least this many rows ...
TALL_K = 256  # ... and at most this many terms per output

_TEMPLATE = r"""
#ifndef HFLIB_OUTER_CONSTANTS
#define HFLIB_OUTER_CONSTANTS
/* rows per chunk (a task), the most chunks and partial sums, rows per block inside a chunk
   (the block's rows of the vector operand stay in cache while every tile reads them) */
enum {{ HFLIB_OUTER_KC = 4096, HFLIB_OUTER_CHUNKS = 16, HFLIB_OUTER_PARTS = 1 << 20,
       HFLIB_OUTER_KB = 256, HFLIB_ROWS_BLOCK = 96 }};
#endif
#ifndef HFLIB_OUTER_{S}
#define HFLIB_OUTER_{S}

/* acc[i][q*W .. q*W+W) (row stride lda) (+)= sum over k0 <= k < k1 of s[k*ssk + i*sss] *
   v[k*svk + q*W ..], i < NS, q < NV: NV x NS accumulators in registers (NS and NV constants
   where it is inlined); `add`: added to acc, else stored */
__attribute__((optimize("fp-contract=fast"), always_inline))
static inline void hflib_outer_tile_{S}(const int NV, const int NS, int64_t k0, int64_t k1,
                                        const {T} *restrict v, int64_t svk,
                                        const {T} *restrict s, int64_t ssk, int64_t sss,
                                        {T} *restrict acc, int64_t lda, int add) {{
    enum {{ W = HFLIB_VW_{S} }};
    hflib_vec_{S} x[6][4];
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
        for (int q = 0; q < NV; q++) {{
            hflib_uvec_{S} *dst = (hflib_uvec_{S} *)(acc + i * lda + q * W);
            *dst = add ? *dst + x[i][q] : x[i][q];
        }}
}}

/* acc[i][l] (ns x nv, row stride nv) = the sums of rows k0..k1 of the outer products, in
   blocks of KB rows: every tile of a block reads the block's rows of v from cache (the
   tiles' optimize attribute repeated: inlined into a caller without it, they lose the FMAs) */
__attribute__((optimize("fp-contract=fast")))
static void hflib_outer_chunk_{S}(int64_t nv, int64_t ns, int64_t k0, int64_t k1,
                                  const {T} *v, int64_t svk, const {T} *s, int64_t ssk,
                                  int64_t sss, {T} *restrict acc) {{
    /* tiles of 6 rows of s x 4 vectors of v on AVX-512 (24 of 32 registers), x 2 vectors on
       AVX2 (12 of 16: the 6 x 16 kernel) */
    enum {{ W = HFLIB_VW_{S}, NSMAX = 6, QMAX = HFLIB_VBYTES == 64 ? 4 : 2 }};
    const int64_t full = nv / W * W;
    for (int64_t b0 = k0; b0 < k1; b0 += HFLIB_OUTER_KB) {{
        const int64_t b1 = b0 + HFLIB_OUTER_KB < k1 ? b0 + HFLIB_OUTER_KB : k1;
        const int add = b0 > k0;
        for (int64_t i0 = 0; i0 < ns; i0 += NSMAX) {{
            const int r = ns - i0 < NSMAX ? (int)(ns - i0) : NSMAX;
            const {T} *si = s + i0 * sss;
            {T} *ai = acc + i0 * nv;
            for (int64_t l = 0; l < full;) {{
                const int64_t left = (full - l) / W;
                const int q = left >= QMAX ? QMAX : left >= 2 ? 2 : 1;
#define HFLIB_OUTER_CASE(Q, R) \
                if (q == Q && r == R) \
                    hflib_outer_tile_{S}(Q, R, b0, b1, v + l, svk, si, ssk, sss, ai + l, nv, \
                                         add);
#define HFLIB_OUTER_CASES(Q) HFLIB_OUTER_CASE(Q, 1) HFLIB_OUTER_CASE(Q, 2) \
                HFLIB_OUTER_CASE(Q, 3) HFLIB_OUTER_CASE(Q, 4) HFLIB_OUTER_CASE(Q, 5) \
                HFLIB_OUTER_CASE(Q, 6)
                HFLIB_OUTER_CASES(1) HFLIB_OUTER_CASES(2)
#if HFLIB_VBYTES == 64
                HFLIB_OUTER_CASES(4)
#endif
#undef HFLIB_OUTER_CASES
#undef HFLIB_OUTER_CASE
                l += q * W;
            }}
            for (int64_t l = full; l < nv; l++)  /* lanes past the last whole vector */
                for (int i = 0; i < r; i++) {{
                    {T} t = add ? ai[i * nv + l] : 0;
                    for (int64_t k = b0; k < b1; k++) t += si[k * ssk + i * sss] * v[k * svk + l];
                    ai[i * nv + l] = t;
                }}
        }}
    }}
}}

typedef struct {{
    int64_t nv, ns, K, chunk, svk, ssk, sss;
    const {T} *v, *s;
    {T} *part;
}} hflib_outer_job_{S};

static void hflib_outer_task_{S}(void *const *args, int64_t lo, int64_t hi) {{
    const hflib_outer_job_{S} *j = (const hflib_outer_job_{S} *)args[0];
    for (int64_t q = lo; q < hi; q++) {{
        const int64_t k0 = q * j->chunk, k1 = k0 + j->chunk < j->K ? k0 + j->chunk : j->K;
        hflib_outer_chunk_{S}(j->nv, j->ns, k0, k1, j->v, j->svk, j->s, j->ssk, j->sss,
                              j->part + q * j->nv * j->ns);
    }}
}}

/* c (M x N, contiguous) = a x b, a(i, k) at a[i*sam + k*sak], b(k, j) at b[k*sbk + j*sbn],
   where gemm_outer.fits holds: vectors along N (sbn == 1) or along M (sam == 1). */
HFLIB_ENTRY void hflib_gemm_outer_{S}(int64_t M, int64_t N, int64_t K, const {T} *a,
                                      int64_t sam, int64_t sak, const {T} *b, int64_t sbk,
                                      int64_t sbn, {T} *c, int threads) {{
    const int wide_n = sbn == 1 && (N >= M || sam != 1);
    hflib_outer_job_{S} j = {{wide_n ? N : M, wide_n ? M : N, K, 0, wide_n ? sbk : sak,
                             wide_n ? sak : sbk, wide_n ? sam : sbn, wide_n ? b : a,
                             wide_n ? a : b, 0}};
    const int64_t size = M * N;
    int64_t most = HFLIB_OUTER_PARTS / size;  /* the partial sums stay at most 4 MB (f32) */
    if (most > HFLIB_OUTER_CHUNKS) most = HFLIB_OUTER_CHUNKS;
    if (most < 1) most = 1;
    int64_t chunks = (K + HFLIB_OUTER_KC - 1) / HFLIB_OUTER_KC;
    if (chunks > most) chunks = most;
    j.chunk = (K + chunks - 1) / chunks;
    chunks = (K + j.chunk - 1) / j.chunk;
    j.part = hf_alloc(64, sizeof({T}) * size * chunks);
    void *const args[] = {{&j}};
    if (threads > 1 && chunks > 1 && (double)M * N * K >= {PARALLEL_WORK})
        hf_parallel_ptr(hflib_outer_task_{S}, args, 0, chunks, 1,
                        chunks < threads ? (int)chunks : threads);
    else
        hflib_outer_task_{S}(args, 0, chunks);
    for (int64_t e = 0; e < size; e++) {{  /* the chunks' sums in chunk order */
        {T} t = j.part[e];
        for (int64_t q = 1; q < chunks; q++) t += j.part[q * size + e];
        const int64_t i = e / j.nv, l = e % j.nv;
        c[wide_n ? i * N + l : l * N + i] = t;
    }}
    free(j.part);
}}

/* c (M x N, contiguous) = a x b for a tall product (M large, N and K small: a layer's forward
   or input-gradient product over a minibatch): row blocks of ROWS as tasks on the pool, each by
   the chunk tiles with b's rows as the vectors (packed contiguous along N first when they are
   not) and a's rows broadcast; each output summed over k in order. */
typedef struct {{
    int64_t M, N, K, sam, sak, svk;
    const {T} *a, *v;
    {T} *c;
}} hflib_rows_job_{S};

static void hflib_rows_task_{S}(void *const *args, int64_t lo, int64_t hi) {{
    const hflib_rows_job_{S} *j = (const hflib_rows_job_{S} *)args[0];
    for (int64_t q = lo; q < hi; q++) {{
        const int64_t m0 = q * HFLIB_ROWS_BLOCK;
        const int64_t m1 = m0 + HFLIB_ROWS_BLOCK < j->M ? m0 + HFLIB_ROWS_BLOCK : j->M;
        hflib_outer_chunk_{S}(j->N, m1 - m0, 0, j->K, j->v, j->svk, j->a + m0 * j->sam, j->sak,
                              j->sam, j->c + m0 * j->N);
    }}
}}

HFLIB_ENTRY void hflib_gemm_rows_{S}(int64_t M, int64_t N, int64_t K, const {T} *a,
                                     int64_t sam, int64_t sak, const {T} *b, int64_t sbk,
                                     int64_t sbn, {T} *c, int threads) {{
    {T} *packed = 0;
    hflib_rows_job_{S} j = {{M, N, K, sam, sak, sbk, a, b, c}};
    if (sbn != 1) {{  /* b's rows contiguous along N */
        packed = hf_alloc(64, sizeof({T}) * K * N);
        for (int64_t k = 0; k < K; k++)
            for (int64_t n = 0; n < N; n++) packed[k * N + n] = b[k * sbk + n * sbn];
        j.v = packed;
        j.svk = N;
    }}
    const int64_t blocks = (M + HFLIB_ROWS_BLOCK - 1) / HFLIB_ROWS_BLOCK;
    void *const args[] = {{&j}};
    if (threads > 1 && blocks > 1 && (double)M * N * K >= {PARALLEL_WORK})
        hf_parallel_ptr(hflib_rows_task_{S}, args, 0, blocks, 1,
                        blocks < threads ? (int)blocks : threads);
    else
        hflib_rows_task_{S}(args, 0, blocks);
    free(packed);
}}
#endif
"""


def helper(suffix: str, parallel_work: int) -> str:
    """C text of `hflib_gemm_outer_<suffix>`, placed after the GEMM template (whose vector types
    and entry-point macro it uses)."""
    ctype = {"f32": "float", "f64": "double"}[suffix]
    return _TEMPLATE.format(T=ctype, S=suffix, PARALLEL_WORK=parallel_work)


def fits_rows(suffix: str, batch: int, m: int, n: int, k: int) -> bool:
    """Does c = a x b (one batch item) run as a tall product by row blocks (`hflib_gemm_rows`):
    at least TALL_M rows, N a multiple of MIN_WIDE up to WIDE (whole vectors on AVX2 and
    AVX-512), K at most TALL_K (b stays in cache)?"""
    return (suffix in ("f32", "f64") and batch == 1 and m >= TALL_M
            and MIN_WIDE <= n <= WIDE and n % MIN_WIDE == 0 and 1 <= k <= TALL_K)


def fits(suffix: str, batch: int, m: int, n: int, k: int, sam: int, sbn: int) -> bool:
    """Does c = a x b (one batch item, M x N x K) run cut along K?"""
    if suffix not in ("f32", "f64") or batch != 1 or k < MIN_K or k < LONG * m * n:
        return False
    if m > WIDE or n > WIDE:
        return False
    return (sbn == 1 and n >= MIN_WIDE) or (sam == 1 and m >= MIN_WIDE)
