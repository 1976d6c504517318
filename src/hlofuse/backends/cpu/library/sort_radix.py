"""One long row sorted by key on every thread: a parallel LSD radix sort (library/sort.py's
single-row case).

A sort of one row of n >= PARALLEL_MIN elements whose comparator orders by one key
(`KeyOrder`: jax.random.permutation's two sorts of 262144 random u32 keys in a PPO epoch,
argsort) ran on one thread as 4 passes of 8 bits. Here the row is cut into CHUNKS fixed
slices (a function of n alone), and every phase runs the slices as tasks on the runtime's pool:

    keys     ka[j] = the key's order-preserving unsigned bits, ia[j] = j
    per pass (BITS bits, from the lowest; skipped where every key has the same digit)
      count  each slice counts its digits (cnt[slice][digit])
      offsets  serially, digit-major then slice: the stable positions
      move   each slice moves its keys and offsets to their positions, in order
    gather   out_i[j] = in_i[ia[j]] for every operand

Equal keys keep their order (each slice moves in order, slices in order), so the result is the
stable sort, the only one: the same as the merge and byte-radix sorts' whatever the thread
count. Scratch (two key and two offset arrays, the counts) is allocated before the first task.
"""

from __future__ import annotations

from hlofuse.backends.cpu import ctext

PARALLEL_MIN = 1 << 17  # a single row from this length sorts on every thread
CHUNKS = 8  # slices of the row (up to 8 threads)
BITS = 11  # bits of the key per pass (2048 counters per slice)


def function(name: str, in_types: list[str], n: int, kt: str, rt: str, key_value: str,
             key_bits: str, threads: int, what: str) -> str:
    """C functions `name(in0.., out0..)` sorting one row of `n` elements of the operands
    `in_types` by the key: `key_value` sets `v` (type `rt`) from the element at offset
    `idx[j]`, `key_bits` stores its unsigned bits (type `kt`) into `ka[j]`."""
    k = len(in_types)
    ins = "\n    ".join(f"const {t} *restrict in{i} = (const {t} *)a[{i}];"
                        for i, t in enumerate(in_types))
    outs = "\n    ".join(f"{t} *restrict out{i} = ({t} *)a[{k + i}];"
                         for i, t in enumerate(in_types))
    s = 2 * k  # the scratch pointers' first index in a[]
    passes = -(-(64 if kt == "uint64_t" else 32) // BITS)
    slice_loop = (f"for (int64_t c = lo; c < hi; c++) for (int64_t j = c * {n} / {CHUNKS}; "
                  f"j < (c + 1) * {n} / {CHUNKS}; j++)")

    def run(fn: str) -> str:
        return (f"hf_parallel_ptr({fn}, (void *const *)a, 0, {CHUNKS}, 1, {threads});"
                if threads > 1 else f"{fn}((void *const *)a, 0, {CHUNKS});")

    params = [f"const {t} *restrict in{i}" for i, t in enumerate(in_types)]
    params += [f"{t} *restrict out{i}" for i, t in enumerate(in_types)]
    ptrs = ", ".join([*(f"(void *)in{i}" for i in range(k)), *(f"(void *)out{i}" for i in range(k)),
                      "(void *)ka", "(void *)kb", "(void *)ia", "(void *)ib", "(void *)cnt",
                      "(void *)&shift"])
    gather = " ".join(f"out{i}[j] = in{i}[ia[j]];" for i in range(k))
    return f"""{ctext.comment(what)}
enum {{ {name}_B = 1 << {BITS} }};
static void {name}_keys(void *const *a, int64_t lo, int64_t hi) {{
    {ins}
    {kt} *restrict ka = ({kt} *)a[{s}];
    int64_t *restrict idx = (int64_t *)a[{s + 2}];
    {slice_loop} {{
        idx[j] = j;
        {rt} v;
        {key_value}
        {key_bits}
    }}
}}
static void {name}_count(void *const *a, int64_t lo, int64_t hi) {{
    const {kt} *restrict ka = (const {kt} *)a[{s}];
    int64_t *restrict cnt = (int64_t *)a[{s + 4}];
    const int shift = *(const int *)a[{s + 5}];
    for (int64_t c = lo; c < hi; c++) {{
        int64_t *h = cnt + c * {name}_B;
        memset(h, 0, sizeof(int64_t) * {name}_B);
        for (int64_t j = c * {n} / {CHUNKS}; j < (c + 1) * {n} / {CHUNKS}; j++)
            h[(ka[j] >> shift) & ({name}_B - 1)]++;
    }}
}}
static void {name}_move(void *const *a, int64_t lo, int64_t hi) {{
    const {kt} *restrict ka = (const {kt} *)a[{s}];
    {kt} *restrict kb = ({kt} *)a[{s + 1}];
    const int64_t *restrict ia = (const int64_t *)a[{s + 2}];
    int64_t *restrict ib = (int64_t *)a[{s + 3}];
    int64_t *restrict cnt = (int64_t *)a[{s + 4}];
    const int shift = *(const int *)a[{s + 5}];
    for (int64_t c = lo; c < hi; c++) {{
        int64_t *o = cnt + c * {name}_B;
        for (int64_t j = c * {n} / {CHUNKS}; j < (c + 1) * {n} / {CHUNKS}; j++) {{
            const int64_t p = o[(ka[j] >> shift) & ({name}_B - 1)]++;
            kb[p] = ka[j];
            ib[p] = ia[j];
        }}
    }}
}}
static void {name}_gather(void *const *a, int64_t lo, int64_t hi) {{
    {ins}
    {outs}
    const int64_t *restrict ia = (const int64_t *)a[{s + 2}];
    {slice_loop} {{ {gather} }}
}}
static void {name}({", ".join(params)}) {{
    /* scratch, allocated before any task runs (hf_alloc's rule) */
    char *buf = hf_alloc(64, (sizeof({kt}) + sizeof(int64_t)) * 2 * {n} +
                         sizeof(int64_t) * {CHUNKS} * {name}_B);
    int64_t *ia = (int64_t *)buf, *ib = ia + {n}, *cnt = ib + {n};
    {kt} *ka = ({kt} *)(cnt + {CHUNKS} * {name}_B), *kb = ka + {n};
    int shift = 0;
    void *a[] = {{{ptrs}}};
    {run(name + '_keys')}
    for (int p = 0; p < {passes}; p++) {{
        shift = p * {BITS};
        {run(name + '_count')}
        int one = 0;  /* every key has the same digit: nothing moves */
        for (int64_t d = 0; d < {name}_B && !one; d++) {{
            int64_t t = 0;
            for (int64_t c = 0; c < {CHUNKS}; c++) t += cnt[c * {name}_B + d];
            one = t == {n};
        }}
        if (one) continue;
        int64_t sum = 0;
        for (int64_t d = 0; d < {name}_B; d++)
            for (int64_t c = 0; c < {CHUNKS}; c++) {{
                const int64_t t = cnt[c * {name}_B + d];
                cnt[c * {name}_B + d] = sum;
                sum += t;
            }}
        {run(name + '_move')}
        {kt} *ks = ka; ka = kb; kb = ks;
        int64_t *is = ia; ia = ib; ib = is;
        a[{s}] = ka; a[{s + 1}] = kb; a[{s + 2}] = ia; a[{s + 3}] = ib;
    }}
    {run(name + '_gather')}
    free(buf);
}}
"""
