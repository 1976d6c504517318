"""dot (dot_general) as C: a canonical batched GEMM over a cache-blocked, register-tiled kernel.

    dot(lhs, rhs) ──view or copy──▶ A[batch, M, K] x B[batch, K, N] ──hflib_gemm_T──▶ C[batch, M, N]

The result of dot_general is laid out batch dims, lhs free dims, rhs free dims, so C is exactly
the output buffer (row-major). Each operand is read through three strides (batch, row, column)
when its batch, free and contracting dimensions each flatten to one stride (dimensions of extent
1 are ignored); otherwise, or when its element type is not the accumulator type, it is first
copied (transposed and converted) into a canonical scratch buffer.

f32 and f64 accumulators (f16/bf16 operands are converted to f32 first) go to OpenBLAS when
`blas.py` has bound it (the scipy-openblas32 wheel, through function pointers; the rule for when
is there), else to our GEMM; integer accumulators always to ours. Both run through one task
split (`hflib_dot_split`): below PARALLEL_WORK multiply-adds one task, else batch items, then
row or column blocks, run on up to `threads` threads of the runtime's pool (`hf_parallel_ptr`,
tasks claimed one at a time; OpenBLAS runs single-threaded inside a task).

Our GEMM is BLIS-shaped: B packed into KC x NR panels (from its columns, 4 x 4 blocks
transposed in registers, where they are contiguous: `x @ W.T`), A into MR x KC panels (in the
scratch slot of the running task: one slot per thread, allocated before the tasks start and
claimed with `hf_slot_claim`), and micro-kernels of 2, 4, 6 (MR) or 8 rows x NR
columns (two SIMD vectors, GCC/clang vector extensions) keep their accumulators in registers and
store whole tiles as vectors. Operands that few panels reuse (small M, narrow N, small B) are
read where they are instead of packed. A product of at most NR / 8 columns whose A rows are
contiguous (a policy's or a value head's outputs) is instead one vectorized dot product per
output (`hflib_gemm_narrow_*`): the tiles would compute NR columns. Single-threaded it
reaches 0.88-1.1x OpenBLAS's AVX-512 kernels on the shapes of benchmarks/gemm.py
(docs/cpu-backend.md, "Dots").
`hflib_gemm_one_*` is one single-threaded product (c = or += a x b) packing into scratch its
caller allocated (`hflib_gemm_scratch_*` elements): for callers that cut their own work into
tasks (convolutions, conv_gemm.py).

Accumulation, against the interpreter (which contracts floats in f64 and integers in 64 bits):
* f32/f16/bf16 results accumulate in float (FMA where the CPU has it), f64 in double; f16/bf16
  are rounded once at the end. Floats therefore match within a tolerance, not bit for bit.
* integer results accumulate in uint32_t (<= 32 bits) or uint64_t with wrap-around, then are
  truncated to the result type: exactly the interpreter's 64-bit sum wrapped to the result type.
* pred results are `sum != 0`.
Mixed float/integer operand kinds raise `LibraryOpError`.

Complex results (operands of any element type, as XLA defines mixed dots: each operand is
converted to the dot's complex type) are contracted by a plain loop in double over canonical
c128 copies of the operands, products by the plain formula (no Annex G), the sum scaled by
1 + 0i as Eigen's gemm does, then rounded once to the result type, like the interpreter
(interpreter/complex_dot.py); a complex operand with a real result is refused.
"""

from __future__ import annotations

import math

from hlofuse.backends.cpu import cexpr
from hlofuse.backends.cpu.cexpr_types import complex_convert
from hlofuse.backends.cpu.ctext import comment
from hlofuse.backends.cpu.library import blas, gemm_outer
from hlofuse.backends.cpu.library.errors import LibraryOpError
from hlofuse.backends.kernel_ir.ir import ScalarOp
from hlofuse.backends.kernel_ir.libop import LibOp
from hlofuse.backends.kernel_ir.naming import fresh
from hlofuse.backends.xla_facts import dot_rounds_through_f16
from hlofuse.ir.dtypes import C128, F16, F32, F64, DType
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape

PARALLEL_WORK = 1_000_000  # batch*M*N*K from which a dot is cut into tasks for several threads

# Accumulator: (C type, helper suffix) by result kind.
_ACC = {"f64": ("double", "f64"), "f32": ("float", "f32"), "u32": ("uint32_t", "u32"),
        "u64": ("uint64_t", "u64")}

_SPLIT = r"""
#ifndef HFLIB_DOT_SPLIT
#define HFLIB_DOT_SPLIT
#include <stdint.h>
#ifndef HFLIB_ENTRY
#define HFLIB_ENTRY static  /* prebuilt.py's objects make the entry points hidden globals */
#endif
/* How a dot is cut into tasks for `threads` threads: batch items first, then row (or, for fewer
   rows than columns, column) blocks of multiples of 16, at most 2 tasks per thread and about
   HFLIB_TASK_WORK multiply-adds or more each; one task below `parallel_work`. The tasks run on
   the runtime's pool (hf_parallel_ptr), claimed one at a time, so a thread the OS has
   descheduled delays only the task it holds. Each row block packs all of B again: at 4 tasks
   per thread that was a third of a 256^3 product's time (2 threads: 1.53x one thread's speed;
   2 per thread 1.78x, 1 per thread 1.89x with no task left to hand a descheduled thread's
   share to). */
enum { HFLIB_TASK_WORK = 1 << 19 };
typedef struct { int64_t bt, mt, nt, mc, nc; } hflib_split;
static hflib_split hflib_dot_split(int64_t batch, int64_t M, int64_t N, int64_t K,
                                   double parallel_work, int threads) {
    hflib_split s = {1, 1, 1, M, N};
    const double work = (double)batch * M * N * K;
    if (work < parallel_work) threads = 1;
    double want = work / HFLIB_TASK_WORK;
    if (want > 2.0 * threads) want = 2.0 * threads;
    const int64_t tasks = threads > 1 && want > 1 ? (int64_t)want : 1;
    s.bt = batch < tasks ? batch : tasks;
    const int64_t rest = (tasks + s.bt - 1) / s.bt;
    if (rest > 1) {
        if (M >= N) {
            const int64_t blocks = (M + 15) / 16;
            s.mt = rest < blocks ? rest : blocks;
            s.mc = ((M + s.mt - 1) / s.mt + 15) / 16 * 16;
            s.mt = (M + s.mc - 1) / s.mc;
        } else {
            const int64_t blocks = (N + 15) / 16;
            s.nt = rest < blocks ? rest : blocks;
            s.nc = ((N + s.nt - 1) / s.nt + 15) / 16 * 16;
            s.nt = (N + s.nc - 1) / s.nc;
        }
    }
    return s;
}
#endif
"""

_GEMM_TEMPLATE = r"""
#ifndef HFLIB_GEMM_{S}
#define HFLIB_GEMM_{S}
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifndef HFLIB_VBYTES
#ifdef __AVX512F__
#define HFLIB_VBYTES 64
#else
#define HFLIB_VBYTES 32
#endif
#endif
typedef {T} hflib_vec_{S} __attribute__((vector_size(HFLIB_VBYTES)));
/* the same vector at any element-aligned address (rows of C, rows of an unpacked B) */
typedef {T} hflib_uvec_{S} __attribute__((vector_size(HFLIB_VBYTES), aligned(sizeof({T}))));
enum {{ HFLIB_VW_{S} = HFLIB_VBYTES / sizeof({T}),  /* lanes per vector */
        HFLIB_MR_{S} = 6, HFLIB_NR_{S} = 2 * HFLIB_VW_{S},  /* micro-tile */
        HFLIB_KC_{S} = 256, HFLIB_MC_{S} = 96, HFLIB_NC_{S} = 2048 }};  /* cache blocks */

{TILES}
/* dst[p*NR + j] = col_j[p] for j < nr (column j at b + j*ld, contiguous), zeros for nr <= j < NR:
   B packed from its columns (x @ W.T reads W's rows as B's columns). 4 x 4 blocks transposed in
   registers: the scalar copy was 45 us of a 256x256x256 product's 200 (2 threads). */
static void hflib_pack_cols_{S}({T} *restrict dst, const {T} *restrict b, int64_t ld, int64_t kc,
                                int64_t nr) {{
    enum {{ NR = HFLIB_NR_{S} }};
    typedef {T} q4 __attribute__((vector_size(4 * sizeof({T})), aligned(sizeof({T}))));
    int64_t j = 0;
    for (; j + 4 <= nr; j += 4) {{
        const {T} *c0 = b + j * ld, *c1 = c0 + ld, *c2 = c1 + ld, *c3 = c2 + ld;
        int64_t p = 0;
        for (; p + 4 <= kc; p += 4) {{
            const q4 r0 = *(const q4 *)(c0 + p), r1 = *(const q4 *)(c1 + p);
            const q4 r2 = *(const q4 *)(c2 + p), r3 = *(const q4 *)(c3 + p);
            const q4 t0 = __builtin_shufflevector(r0, r1, 0, 4, 1, 5);
            const q4 t1 = __builtin_shufflevector(r0, r1, 2, 6, 3, 7);
            const q4 t2 = __builtin_shufflevector(r2, r3, 0, 4, 1, 5);
            const q4 t3 = __builtin_shufflevector(r2, r3, 2, 6, 3, 7);
            *(q4 *)(dst + (p + 0) * NR + j) = __builtin_shufflevector(t0, t2, 0, 1, 4, 5);
            *(q4 *)(dst + (p + 1) * NR + j) = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
            *(q4 *)(dst + (p + 2) * NR + j) = __builtin_shufflevector(t1, t3, 0, 1, 4, 5);
            *(q4 *)(dst + (p + 3) * NR + j) = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
        }}
        for (; p < kc; p++) {{
            dst[p * NR + j] = c0[p];
            dst[p * NR + j + 1] = c1[p];
            dst[p * NR + j + 2] = c2[p];
            dst[p * NR + j + 3] = c3[p];
        }}
    }}
    for (; j < nr; j++)
        for (int64_t p = 0; p < kc; p++) dst[p * NR + j] = b[j * ld + p];
    for (int64_t p = 0; p < kc; p++)
        for (int64_t z = nr; z < NR; z++) dst[p * NR + z] = 0;
}}

/* A narrow product (n * 8 <= NR: a policy's or a value head's few outputs) whose A rows are
   contiguous: each output is a dot product of an A row with a B column (copied contiguous into
   bpack first), vectorized along K with two partial accumulators and summed across lanes in a
   tree. The micro-tiles compute NR columns whatever n is (f32 2048 x 64 x n, one thread,
   AVX-512: 40 us for every n <= 8; this form 11 us for n = 1, 13 for 2, 24 for 4, 42 for 8). */
__attribute__((optimize("fp-contract=fast", "associative-math", "no-signed-zeros",
                        "no-trapping-math")))
static void hflib_gemm_narrow_{S}(int64_t m, int64_t n, int64_t K, const {T} *a, int64_t sam,
                                  const {T} *b, int64_t sbk, int64_t sbn, {T} *c, int64_t ldc,
                                  {T} *restrict bpack, int accumulate) {{
    enum {{ W = HFLIB_VW_{S} }};
    for (int64_t j = 0; j < n; j++)
        for (int64_t p = 0; p < K; p++) bpack[j * K + p] = b[p * sbk + j * sbn];
    for (int64_t i = 0; i < m; i++) {{
        const {T} *ar = a + i * sam;
        for (int64_t j = 0; j < n; j++) {{
            const {T} *bc = bpack + j * K;
            hflib_vec_{S} s0 = {{0}}, s1 = {{0}};
            int64_t p = 0;
            for (; p + 2 * W <= K; p += 2 * W) {{
                s0 += *(const hflib_uvec_{S} *)(ar + p) * *(const hflib_uvec_{S} *)(bc + p);
                s1 += *(const hflib_uvec_{S} *)(ar + p + W) *
                      *(const hflib_uvec_{S} *)(bc + p + W);
            }}
            if (p + W <= K) {{
                s0 += *(const hflib_uvec_{S} *)(ar + p) * *(const hflib_uvec_{S} *)(bc + p);
                p += W;
            }}
            s0 += s1;
            {T} sum = 0;
            for (int q = 0; q < W; q++) sum += s0[q];  /* (reassociated: a shuffle tree) */
            for (; p < K; p++) sum += ar[p] * bc[p];
            c[i * ldc + j] = accumulate ? c[i * ldc + j] + sum : sum;
        }}
    }}
}}

/* c (m x n, row stride ldc) = a (m x K) * b (K x n), a(i, k) at a[i*sam + k*sak], b(k, j) at
   b[k*sbk + j*sbn].
   A is packed into MR-row panels (apack: MC*KC elements) unless it is row- or column-major and
   few column panels reuse it: then row panels are read where they are (a ragged last panel is
   packed). B is packed into NR-column panels (bpack: KC*NC elements) unless its rows are
   contiguous and few row panels read it or it is small: then whole panels are read where they
   are (a ragged last panel is packed). A ragged row panel of r < MR rows runs the tile of 2, 4
   or 6 rows that covers it. */
__attribute__((optimize("fp-contract=fast")))
static void hflib_gemm_block_{S}(int64_t m, int64_t n, int64_t K, const {T} *a, int64_t sam,
                                 int64_t sak, const {T} *b, int64_t sbk, int64_t sbn, {T} *c,
                                 int64_t ldc, {T} *restrict apack, {T} *restrict bpack,
                                 int accumulate) {{
    enum {{ MR = HFLIB_MR_{S}, NR = HFLIB_NR_{S}, KC = HFLIB_KC_{S}, MC = HFLIB_MC_{S},
           NC = HFLIB_NC_{S} }};
    if (sak == 1 && n * 8 <= NR && n * K <= (K < KC ? K : KC) * NR) {{
        hflib_gemm_narrow_{S}(m, n, K, a, sam, b, sbk, sbn, c, ldc, bpack, accumulate);
        return;
    }}
    const int direct_b = sbn == 1 && (m <= 4 * MR || K * sbk * (int64_t)sizeof({T}) <= 32768);
    const int direct_a = (sak == 1 || sam == 1) && n <= 4 * NR;
    /* rows of a packed A panel: 8 for 7 or 8 rows where 16 accumulators fit the registers */
    const int64_t PR = !direct_a && HFLIB_VBYTES == 64 && m > MR && m <= 8 ? 8 : MR;
    for (int64_t jc = 0; jc < n; jc += NC) {{
        const int64_t nc = n - jc < NC ? n - jc : NC;
        for (int64_t pc = 0; pc < K; pc += KC) {{
            const int64_t kc = K - pc < KC ? K - pc : KC;
            /* pack B[pc:pc+kc, jc:jc+nc] (direct: only a ragged last panel) into NR-column
               panels, zero-padded */
            for (int64_t jr = direct_b ? nc / NR * NR : 0; jr < nc; jr += NR) {{
                const int64_t nr = nc - jr < NR ? nc - jr : NR;
                {T} *dst = direct_b ? bpack : bpack + jr * kc;
                if (sbn != 1 && sbk == 1) {{
                    hflib_pack_cols_{S}(dst, b + pc + (jc + jr) * sbn, sbn, kc, nr);
                    continue;
                }}
                for (int64_t p = 0; p < kc; p++) {{
                    const {T} *src = b + (pc + p) * sbk + (jc + jr) * sbn;
                    for (int64_t j = 0; j < nr; j++) dst[p * NR + j] = src[j * sbn];
                    for (int64_t j = nr; j < NR; j++) dst[p * NR + j] = 0;
                }}
            }}
            for (int64_t ic = 0; ic < m; ic += MC) {{
                const int64_t mc = m - ic < MC ? m - ic : MC;
                /* pack A[ic:ic+mc, pc:pc+kc] (direct: only a panel of 1, 3 or 5 rows) into
                   MR-row panels, zero-padded */
                for (int64_t ir = 0; ir < mc; ir += PR) {{
                    const int64_t mr = mc - ir < PR ? mc - ir : PR;
                    if (direct_a && mr % 2 == 0) continue;
                    {T} *dst = apack + ir * kc;
                    for (int64_t p = 0; p < kc; p++) {{
                        const {T} *src = a + (ic + ir) * sam + (pc + p) * sak;
                        for (int64_t i = 0; i < mr; i++) dst[p * PR + i] = src[i * sam];
                        for (int64_t i = mr; i < PR; i++) dst[p * PR + i] = 0;
                    }}
                }}
                for (int64_t jr = 0; jr < nc; jr += NR) {{
                    const int64_t nr = nc - jr < NR ? nc - jr : NR;
                    const {T} *bp = bpack + jr * kc;
                    int64_t ldb = NR;
                    if (direct_b) {{
                        bp = nr == NR ? b + pc * sbk + jc + jr : bpack;
                        ldb = nr == NR ? sbk : NR;
                    }}
                    for (int64_t ir = 0, mr; ir < mc; ir += mr) {{
                        /* read in place, 8 rows left run as 4 + 4: twice the accumulators of
                           6 + 2 hide the FMA latency */
                        if (direct_a) mr = mc - ir == 8 ? 4 : mc - ir < MR ? mc - ir : MR;
                        else mr = mc - ir < PR ? mc - ir : PR;
                        {T} *ct = c + (ic + ir) * ldc + jc + jr;
                        const int first = pc == 0 && !accumulate;
                        /* the tiles are inlined: constant strides for packed panels */
                        if (direct_a && mr % 2 == 0) {{
                            const {T} *ap = a + (ic + ir) * sam + pc * sak;
                            if (mr == 6)
                                hflib_gemm_tile6_{S}(kc, ap, sam, sak, bp, ldb, ct, ldc, mr, nr,
                                                     first);
                            else if (mr == 4)
                                hflib_gemm_tile4_{S}(kc, ap, sam, sak, bp, ldb, ct, ldc, mr, nr,
                                                     first);
                            else
                                hflib_gemm_tile2_{S}(kc, ap, sam, sak, bp, ldb, ct, ldc, mr, nr,
                                                     first);
                        }} else {{
                            const {T} *ap = apack + ir * kc;
                            if (PR == 8)
                                hflib_gemm_tile8_{S}(kc, ap, 1, 8, bp, ldb, ct, ldc, mr, nr,
                                                     first);
                            else if (mr > 4)
                                hflib_gemm_tile6_{S}(kc, ap, 1, MR, bp, ldb, ct, ldc, mr, nr,
                                                     first);
                            else if (mr > 2)
                                hflib_gemm_tile4_{S}(kc, ap, 1, MR, bp, ldb, ct, ldc, mr, nr,
                                                     first);
                            else
                                hflib_gemm_tile2_{S}(kc, ap, 1, MR, bp, ldb, ct, ldc, mr, nr,
                                                     first);
                        }}
                    }}
                }}
            }}
        }}
    }}
}}

/* c[batch][M][N] = a[batch][M][K] * b[batch][K][N], where element (m, k) of batch t of a is
   a[t*sab + m*sam + k*sak] (likewise b); c is contiguous. Cut into tasks (hflib_dot_split) run
   on up to `threads` threads of the pool; each running task packs into its own slot of one
   scratch buffer, allocated before the tasks start. */
typedef struct {{
    int64_t batch, M, N, K, sab, sam, sak, sbb, sbk, sbn, asize, per;
    const {T} *a, *b;
    {T} *c, *scratch;
    hflib_split s;
    int *busy, slots;
}} hflib_gemm_job_{S};

static void hflib_gemm_task_{S}(void *const *args, int64_t lo, int64_t hi) {{
    const hflib_gemm_job_{S} *j = (const hflib_gemm_job_{S} *)args[0];
    const hflib_split s = j->s;
    const int slot = hf_slot_claim(j->busy, j->slots);
    {T} *apack = j->scratch + slot * j->per, *bpack = apack + j->asize;
    for (int64_t q = lo; q < hi; q++) {{
        const int64_t ib = q / (s.mt * s.nt), im = q / s.nt % s.mt, in = q % s.nt;
        const int64_t m0 = im * s.mc, n0 = in * s.nc;
        const int64_t m = j->M - m0 < s.mc ? j->M - m0 : s.mc;
        const int64_t n = j->N - n0 < s.nc ? j->N - n0 : s.nc;
        for (int64_t t = ib * j->batch / s.bt; t < (ib + 1) * j->batch / s.bt; t++)
            hflib_gemm_block_{S}(m, n, j->K, j->a + t * j->sab + m0 * j->sam, j->sam, j->sak,
                                 j->b + t * j->sbb + n0 * j->sbn, j->sbk, j->sbn,
                                 j->c + t * j->M * j->N + m0 * j->N + n0, j->N, apack, bpack,
                                 0);
    }}
    hf_slot_release(j->busy, slot);
}}

HFLIB_ENTRY void hflib_gemm_{S}(int64_t batch, int64_t M, int64_t N, int64_t K,
                                const {T} *a, int64_t sab, int64_t sam, int64_t sak,
                                const {T} *b, int64_t sbb, int64_t sbk, int64_t sbn, {T} *c,
                                int threads) {{
    enum {{ NR = HFLIB_NR_{S}, KC = HFLIB_KC_{S}, MC = HFLIB_MC_{S}, NC = HFLIB_NC_{S} }};
    if (M == 0 || N == 0) return;
    if (K == 0) {{ memset(c, 0, sizeof({T}) * batch * M * N); return; }}
    hflib_gemm_job_{S} j = {{batch, M, N, K, sab, sam, sak, sbb, sbk, sbn, 0, 0, a, b, c, 0,
                             hflib_dot_split(batch, M, N, K, {PARALLEL_WORK}, threads), 0, 1}};
    const int64_t total = j.s.bt * j.s.mt * j.s.nt;
    if (total > 1 && threads > 1) j.slots = total < threads ? (int)total : threads;
    const int64_t ncmax = j.s.nc < NC ? j.s.nc : NC, kcmax = K < KC ? K : KC;
    j.asize = (int64_t)MC * kcmax;
    const int64_t bsize = kcmax * ((ncmax + NR - 1) / NR * NR);
    j.per = (j.asize + bsize + 15) / 16 * 16;  /* keeps each slot 64-byte aligned */
    j.scratch = hf_alloc(64, sizeof({T}) * j.per * j.slots + sizeof(int) * j.slots);
    j.busy = (int *)(j.scratch + j.per * j.slots);
    memset(j.busy, 0, sizeof(int) * j.slots);
    void *const args[] = {{&j}};
    if (j.slots > 1) hf_parallel_ptr(hflib_gemm_task_{S}, args, 0, total, 1, j.slots);
    else hflib_gemm_task_{S}(args, 0, total);
    free(j.scratch);
}}

/* Single-threaded, for callers that cut their own work into tasks (convolutions, conv.py):
   c (m x n, row stride ldc) = a x b, or c += a x b when `accumulate`; a(i, k) at
   a[i*sam + k*sak], b(k, j) at b[k*sbk + j*sbn]. Packs into the caller's `scratch` of
   hflib_gemm_scratch_{S}(n, K) elements (64-byte aligned), so it allocates nothing. */
HFLIB_ENTRY int64_t hflib_gemm_scratch_{S}(int64_t n, int64_t K) {{
    enum {{ NR = HFLIB_NR_{S}, KC = HFLIB_KC_{S}, MC = HFLIB_MC_{S}, NC = HFLIB_NC_{S} }};
    const int64_t ncmax = n < NC ? n : NC, kcmax = K < KC ? K : KC;
    return ((int64_t)MC * kcmax + 15) / 16 * 16 + kcmax * ((ncmax + NR - 1) / NR * NR);
}}

HFLIB_ENTRY void hflib_gemm_one_{S}(int64_t m, int64_t n, int64_t K, const {T} *a, int64_t sam,
                                    int64_t sak, const {T} *b, int64_t sbk, int64_t sbn,
                                    {T} *c, int64_t ldc, int accumulate, {T} *scratch) {{
    enum {{ KC = HFLIB_KC_{S}, MC = HFLIB_MC_{S} }};
    if (m == 0 || n == 0) return;
    if (K == 0) {{
        if (!accumulate)
            for (int64_t i = 0; i < m; i++) memset(c + i * ldc, 0, sizeof({T}) * n);
        return;
    }}
    const int64_t kcmax = K < KC ? K : KC;
    hflib_gemm_block_{S}(m, n, K, a, sam, sak, b, sbk, sbn, c, ldc, scratch,
                         scratch + ((int64_t)MC * kcmax + 15) / 16 * 16, accumulate);
}}
#endif
"""


_TILE = r"""
/* c[R x NR] (=|+=) a[R x kc] * b[kc x NR]: a(i, p) at ap[i*ars + p*acs] (a packed panel:
   ars = 1, acs = MR), row p of b at bp + p*ldb; stores only the mr x nr corner, whole vectors
   for a whole tile. The R*2 accumulators stay in registers. */
__attribute__((optimize("fp-contract=fast"), always_inline))
static inline void hflib_gemm_tile{R}_{S}(int64_t kc, const {T} *restrict ap, int64_t ars,
                                         int64_t acs, const {T} *restrict bp, int64_t ldb,
                                         {T} *restrict c, int64_t ldc, int64_t mr, int64_t nr,
                                         int first) {{
    enum {{ R = {R}, NR = HFLIB_NR_{S}, VW = HFLIB_VW_{S} }};
    hflib_vec_{S} acc[R][2];
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = (hflib_vec_{S}){{0}};
    for (int64_t p = 0; p < kc; p++) {{
        const hflib_vec_{S} b0 = *(const hflib_uvec_{S} *)(bp + p * ldb);
        const hflib_vec_{S} b1 = *(const hflib_uvec_{S} *)(bp + p * ldb + VW);
        for (int i = 0; i < R; i++) {{
            const hflib_vec_{S} x = (hflib_vec_{S}){{0}} + ap[i * ars + p * acs];  /* broadcast */
            acc[i][0] += x * b0;
            acc[i][1] += x * b1;
        }}
    }}
    if (mr == R && nr == NR) {{
        for (int i = 0; i < R; i++) {{
            hflib_uvec_{S} *r0 = (hflib_uvec_{S} *)(c + i * ldc);
            hflib_uvec_{S} *r1 = (hflib_uvec_{S} *)(c + i * ldc + VW);
            if (first) {{ *r0 = acc[i][0]; *r1 = acc[i][1]; }}
            else {{ *r0 += acc[i][0]; *r1 += acc[i][1]; }}
        }}
        return;
    }}
    {T} tile[R][NR];
    memcpy(tile, acc, sizeof tile);
    for (int64_t i = 0; i < mr; i++)
        for (int64_t j = 0; j < nr; j++)
            c[i * ldc + j] = first ? tile[i][j] : c[i * ldc + j] + tile[i][j];
}}
"""


def gemm_helper(suffix: str) -> str:
    """C text of `hflib_gemm_<suffix>` (guarded: safe to include more than once per file)."""
    ctype = next(t for t, s in _ACC.values() if s == suffix)
    tiles = "".join(_TILE.format(T=ctype, S=suffix, R=r) for r in (8, 6, 4, 2))
    return _SPLIT + _GEMM_TEMPLATE.format(T=ctype, S=suffix, PARALLEL_WORK=PARALLEL_WORK,
                                          TILES=tiles)


def _accumulator(op: LibOp, out: DType, operands: list[DType]) -> tuple[str, str]:
    if out.is_complex or any(d.is_complex for d in operands):
        raise cexpr.UnsupportedOpError(
            f"{op.site}: a complex operand with a {out} result is not defined here")
    if out.is_float:
        if any(not (d.is_float or d.is_integral or d.is_pred) for d in operands):
            raise LibraryOpError(op, f"cannot contract {operands} into {out}")
        return _ACC["f64"] if out.bits == 64 else _ACC["f32"]
    floats = [d for d in operands if d.is_float]
    if floats:  # summed as floats (the widest operand type), then converted (`emit_dot`)
        return _ACC["f64"] if any(d.bits == 64 for d in floats) else _ACC["f32"]
    return _ACC["u64"] if out.bits == 64 else _ACC["u32"]


def _group_stride(dims: tuple[int, ...], group: list[int]) -> tuple[int, int] | None:
    """(extent, stride) of the flattened index over `group` (axes, slowest first) of a row-major
    array of `dims`, or None when they do not flatten to one stride."""
    axes = [a for a in group if dims[a] != 1]
    extent = math.prod(dims[a] for a in group)
    if not axes:
        return extent, 0
    if axes != list(range(axes[0], axes[0] + len(axes))):
        return None
    return extent, math.prod(dims[axes[-1] + 1 :])


def _copy_canonical(
    name: str, src: str, src_ct: str, dtype: DType, dims: tuple[int, ...],
    order: list[int], acc_t: str, via: DType | None = None,
) -> list[str]:
    """Statements copying `src` (row-major `dims`) into `name` (acc_t), axes in `order`; each
    element converted to `via` first where given (an integral operand of a float dot)."""
    strides = [math.prod(dims[a + 1 :]) for a in range(len(dims))]
    lines = [f"{acc_t} *{name} = hf_alloc(0, sizeof({acc_t}) * {max(1, math.prod(dims))});",
             "{", f"    {acc_t} *dst = {name};"]
    indent = "    "
    for level, axis in enumerate(order):
        lines.append(f"{indent}for (int64_t i{level} = 0; i{level} < {dims[axis]}; i{level}++)")
        indent += "    "
    offset = " + ".join(f"i{lv} * {strides[a]}" for lv, a in enumerate(order)) or "0"
    value = cexpr.load(dtype, f"((const {src_ct} *)({src}))[{offset}]")
    if via is not None:
        value = cexpr.elementwise_op(ScalarOp(Opcode.CONVERT, via), [dtype], [value], name)
    lines.append(f"{indent}*dst++ = ({acc_t})({value});")
    lines.append("}")
    return lines


def emit_dot(
    op: LibOp, ins: list[str], outs: list[str], names: set[str], threads: int = 1
) -> tuple[str, str]:
    """(helper definitions, statements) computing the dot `op` from `ins` into `outs[0]`, cut
    into tasks for up to `threads` threads of the runtime's pool when it is large enough."""
    lhs_shape, rhs_shape = op.operands
    out_shape = op.shape
    if not (isinstance(lhs_shape, ArrayShape) and isinstance(rhs_shape, ArrayShape)
            and isinstance(out_shape, ArrayShape)):
        raise LibraryOpError(op, "dot needs array operands and an array result")
    lb = [int(d) for d in op.attr("lhs_batch_dims", ())]
    rb = [int(d) for d in op.attr("rhs_batch_dims", ())]
    lc = [int(d) for d in op.attr("lhs_contracting_dims", ())]
    rc = [int(d) for d in op.attr("rhs_contracting_dims", ())]
    if len(lb) != len(rb) or len(lc) != len(rc):
        raise LibraryOpError(op, "batch/contracting dimension lists differ in length")
    ld, rd = lhs_shape.dims, rhs_shape.dims
    lf = [a for a in range(len(ld)) if a not in lb and a not in lc]
    rf = [a for a in range(len(rd)) if a not in rb and a not in rc]
    batch = math.prod(ld[a] for a in lb)
    m = math.prod(ld[a] for a in lf)
    k = math.prod(ld[a] for a in lc)
    n = math.prod(rd[a] for a in rf)
    if out_shape.size != batch * m * n or math.prod(rd[a] for a in rc) != k:
        raise LibraryOpError(op, "operand and result shapes do not agree")
    if out_shape.dtype.is_complex:
        return "", _complex_dot(ins, outs, names, lhs_shape, rhs_shape, out_shape,
                                ([lb, lf, lc], [rb, rc, rf]), (batch, m, n, k))
    acc_t, suffix = _accumulator(op, out_shape.dtype, [lhs_shape.dtype, rhs_shape.dtype])
    from hlofuse.backends.cpu.library import prebuilt

    defs = prebuilt.declarations(suffix)  # the GEMM itself is a prebuilt unit

    body: list[str] = [
        comment(f"dot: [{batch} x] ({m} x {k}) * ({k} x {n}) in {acc_t}")
    ]
    scratch: list[str] = []

    def operand(src: str, shape: ArrayShape, groups: list[list[int]], role: str
                ) -> tuple[str, int, int, int]:
        """The operand as (pointer, batch stride, row stride, column stride)."""
        ct = cexpr.ctype(shape.dtype)
        strides = [_group_stride(shape.dims, g) for g in groups]
        same_repr = ct == acc_t or _same_integer(shape.dtype, acc_t)
        # XLA converts an integral operand to a float result's type first (u16 65535 is f16
        # inf, 2049 is 2048; measured against jax.jit)
        via = out_shape.dtype if out_shape.dtype.is_float and not shape.dtype.is_float \
            else None
        if same_repr and via is None and all(s is not None for s in strides):
            sb, sr, sc = (s[1] for s in strides)  # type: ignore[index]
            return f"(const {acc_t} *)({src})", sb, sr, sc
        name = fresh(f"{role}_packed", names)
        body.extend(_copy_canonical(name, src, ct, shape.dtype, shape.dims,
                                    [a for g in groups for a in g], acc_t, via))
        scratch.append(name)
        e = [math.prod(shape.dims[a] for a in g) for g in groups]
        return name, e[1] * e[2], e[2], 1

    a_op = operand(ins[0], lhs_shape, [lb, lf, lc], "lhs")
    b_op = operand(ins[1], rhs_shape, [rb, rc, rf], "rhs")
    a, sab, sam, sak = a_op
    b, sbb, sbk, sbn = b_op
    out_ct = cexpr.ctype(out_shape.dtype)
    direct = out_ct == acc_t or _same_integer(out_shape.dtype, acc_t)
    if direct:
        c = f"({acc_t} *)({outs[0]})"
    else:
        c = fresh("acc", names)
        body.append(f"{acc_t} *{c} = hf_alloc(0, sizeof({acc_t}) * {max(1, out_shape.size)});")
        scratch.append(c)
    own = (f"hflib_gemm_{suffix}({batch}, {m}, {n}, {k}, {a}, {sab}, {sam}, {sak}, "
           f"{b}, {sbb}, {sbk}, {sbn}, {c}, {threads});")
    if direct and gemm_outer.fits(suffix, batch, m, n, k, sam, sbn):
        body.append(f"hflib_gemm_outer_{suffix}({m}, {n}, {k}, {a}, {sam}, {sak}, {b}, {sbk}, "
                    f"{sbn}, {c}, {threads});")
    elif direct and gemm_outer.fits_rows(suffix, batch, m, n, k):
        body.append(f"hflib_gemm_rows_{suffix}({m}, {n}, {k}, {a}, {sam}, {sak}, {b}, {sbk}, "
                    f"{sbn}, {c}, {threads});")
    else:
        body.extend(blas.call(suffix, batch, m, n, k, a_op, b_op, c, own, threads) or [own])
    if not direct:
        dt = out_shape.dtype
        if dt.is_pred:
            value = f"{c}[i] != 0"
        elif dt.is_float:
            value = cexpr.store(dt, f"{c}[i]")
        elif acc_t in ("float", "double"):  # XLA's convert: truncate, saturate, NaN -> 0
            src = F64 if acc_t == "double" else F32
            x = f"{c}[i]"
            small = lhs_shape.dtype
            if small == rhs_shape.dtype and small.is_float and small.bits < 32:
                # an f16/bf16/fp8 dot's f32 sum is rounded to the operand type before the
                # conversion (jax.jit, measured on f16/bf16/f8e5m2/f8e4m3fn/f8e4m3fnuz); fp8
                # through f16 (`xla_facts.dot_rounds_through_f16`)
                if dot_rounds_through_f16(small):
                    x = cexpr.elementwise_op(ScalarOp(Opcode.CONVERT, F16), [src], [x],
                                             op.label)
                    src = F16
                x = cexpr.elementwise_op(ScalarOp(Opcode.CONVERT, small), [src], [x],
                                         op.label)
                src = small
            value = cexpr.elementwise_op(ScalarOp(Opcode.CONVERT, dt), [src], [x], op.label)
        else:
            value = f"({out_ct}){c}[i]"  # wraps modulo 2^bits
        body.append(f"for (int64_t i = 0; i < {out_shape.size}; i++) "
                    f"(({out_ct} *)({outs[0]}))[i] = {value};")
    body.extend(f"free({s});" for s in scratch)
    stmts = "{\n" + "\n".join("    " + line for line in body) + "\n}\n"
    return defs, stmts


def _complex_dot(
    ins: list[str], outs: list[str], names: set[str], lhs: ArrayShape, rhs: ArrayShape,
    out: ArrayShape, groups: tuple[list[list[int]], list[list[int]]],
    sizes: tuple[int, int, int, int],
) -> str:
    """Statements of a dot with a complex result: each operand converted to XLA's complex
    type for the dot (c128 where an operand or the result is c128, else c64: an f64 operand
    of a c64 dot is rounded to f32 parts) and copied as c128 in canonical order
    (A[batch, M, K], B[batch, K, N]); the products summed as Eigen's gemm (XLA's CPU dot)
    sums them: in the component type (f32 for c64: a product past 2^128 is inf), four sums
    (ar*br, ai*bi, ar*bi, ai*br) combined at the end (re = sum ar*br - sum ai*bi: C's `*` on
    _Complex values recovers infinities by C99 Annex G, XLA's dot does not), the result
    scaled by 1 + 0i (a part that is not finite makes the other one NaN). A one-term dot
    (K = 1) is XLA's complex multiply instead, unscaled (interpreter/complex_dot.py)."""
    batch, m, n, k = sizes
    wide = any(d.is_complex and d.bits == 128 for d in (lhs.dtype, rhs.dtype, out.dtype))
    part = "double" if wide else "float"
    body = [comment(f"dot: [{batch} x] ({m} x {k}) * ({k} x {n}) in complex {part}")]
    packed = []
    for src, shape, group, role in ((ins[0], lhs, groups[0], "lhs"),
                                    (ins[1], rhs, groups[1], "rhs")):
        name = fresh(f"{role}_c128", names)
        dims = shape.dims
        strides = [math.prod(dims[a + 1 :]) for a in range(len(dims))]
        order = [a for g in group for a in g]
        body += [f"hf_c128 *{name} = hf_alloc(0, sizeof(hf_c128) * {max(1, shape.size)});",
                 "{", f"    hf_c128 *dst = {name};"]
        indent = "    "
        for level, axis in enumerate(order):
            body.append(f"{indent}for (int64_t i{level} = 0; i{level} < {dims[axis]}; "
                        f"i{level}++)")
            indent += "    "
        offset = " + ".join(f"i{lv} * {strides[a]}" for lv, a in enumerate(order)) or "0"
        ct = cexpr.ctype(shape.dtype)
        value = cexpr.load(shape.dtype, f"((const {ct} *)({src}))[{offset}]")
        if not shape.dtype.is_complex:
            value = f"__builtin_complex(({part})({value}), ({part})0)"
        elif not wide:  # c64 stays c64
            value = f"((hf_c64)({value}))"
        body += [f"{indent}*dst++ = (hf_c128)({value});", "}"]
        packed.append(name)
    a, b = packed
    out_ct = cexpr.ctype(out.dtype)
    result = complex_convert(C128, out.dtype, "acc")
    if k == 1:  # XLA computes a one-term dot as a complex multiply (its fused formula)
        mul = "hf_cmul_c128" if wide else "hf_cmul_c64"
        ct = "hf_c128" if wide else "hf_c64"
        body += [
            f"for (int64_t bi = 0; bi < {batch}; bi++)",
            f"    for (int64_t i = 0; i < {m}; i++)",
            f"        for (int64_t j = 0; j < {n}; j++) {{",
            f"            hf_c128 acc = (hf_c128){mul}(({ct}){a}[bi * {m} + i], "
            f"({ct}){b}[bi * {n} + j]);",
            f"            (({out_ct} *)({outs[0]}))[(bi * {m} + i) * {n} + j] = {result};",
            "        }",
            f"free({a});", f"free({b});"]
        return "{\n" + "\n".join("    " + line for line in body) + "\n}\n"
    body += [
        f"for (int64_t bi = 0; bi < {batch}; bi++)",
        f"    for (int64_t i = 0; i < {m}; i++)",
        f"        for (int64_t j = 0; j < {n}; j++) {{",
        f"            {part} rr = 0, ii = 0, ri = 0, ir = 0;",
        f"            for (int64_t p = 0; p < {k}; p++) {{",
        f"                hf_c128 x = {a}[(bi * {m} + i) * {k} + p];",
        f"                hf_c128 y = {b}[(bi * {k} + p) * {n} + j];",
        f"                {part} xr = __real__ x, xi = __imag__ x, yr = __real__ y, "
        "yi = __imag__ y;",
        "                rr += xr * yr; ii += xi * yi; ri += xr * yi; ir += xi * yr;",
        "            }",
        f"            {part} re = rr - ii, im = ri + ir;",
        f"            hf_c128 acc = __builtin_complex((double)(re - im * ({part})0), "
        f"(double)(re * ({part})0 + im));",
        f"            (({out_ct} *)({outs[0]}))[(bi * {m} + i) * {n} + j] = {result};",
        "        }",
        f"free({a});", f"free({b});"]
    return "{\n" + "\n".join("    " + line for line in body) + "\n}\n"


def _same_integer(dtype: DType, acc_t: str) -> bool:
    """Is `dtype` an integer type with the representation of the unsigned accumulator?"""
    bits = {"uint32_t": 32, "uint64_t": 64}.get(acc_t)
    return bits is not None and dtype.is_integral and not dtype.is_pred and dtype.bits == bits
