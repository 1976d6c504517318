"""sort and topk as C: a stable merge sort of row offsets, then a gather of every operand.

sort: the operands are viewed as [outer, n, inner] around the sorted dimension; each of the
outer*inner rows (stride `inner`) is sorted by sorting the offsets of its elements with the
comparator (the op's "compare" function, `LibOp.funcs`: `to_apply` lowered to kernel IR, printed
by `scalar.c_function` and called with (lhs_0, rhs_0, lhs_1, rhs_1, ...)),
then every operand is gathered through the sorted offsets. The sort is always stable (insertion
sort of runs of 16, then bottom-up merges that take the right element only when it is strictly
less), whether or not `is_stable` is set: the interpreter's order.

For a comparator that is a strict weak order (every compare of JAX's sort, which uses
type=TOTALORDER for floats, and integer compares) the stable order is unique, so the result equals
the interpreter's bit for bit. A comparator that is not one (LT on floats with NaNs) gives an
order that depends on the algorithm; XLA leaves it unspecified, and it may differ from the
interpreter's (which runs a bitonic network in that case).

topk: the k largest (or smallest) elements of each row of the last dimension and their s32
indices, ordered in float total order (-nan < -inf < ... < -0 < +0 < ... < nan), equal values by
increasing index, by the same stable merge sort on a total-order integer key.
"""

from __future__ import annotations

import math

from hlofuse.backends.cpu import cexpr, cexpr_types, ctext
from hlofuse.backends.cpu.ctext import comment
from hlofuse.backends.cpu.library import scalar, sort_radix
from hlofuse.backends.cpu.library.errors import LibraryOpError
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.libop import KeyOrder, LibOp
from hlofuse.backends.kernel_ir.naming import fresh, op_word
from hlofuse.ir.shape import ArrayShape, leaves

PARALLEL_WORK = 100_000  # elements from which rows are sorted on several threads

# The merge sort over int64 offsets `idx[0:n]` (scratch `tmp[0:n]`), with LESS(x, y) a macro
# comparing the elements at offsets x and y. The result ends in `idx`.
_MERGE_SORT = r"""
    /* stable: insertion sort of runs of 16, then bottom-up merges */
    enum {{ RUN = 16 }};
    for (int64_t lo = 0; lo < n; lo += RUN) {{
        const int64_t hi = lo + RUN < n ? lo + RUN : n;
        for (int64_t i = lo + 1; i < hi; i++) {{
            const int64_t v = idx[i];
            int64_t j = i;
            for (; j > lo && {less_v_prev}; j--) idx[j] = idx[j - 1];
            idx[j] = v;
        }}
    }}
    for (int64_t width = RUN; width < n; width *= 2) {{
        for (int64_t lo = 0; lo < n; lo += 2 * width) {{
            const int64_t mid = lo + width < n ? lo + width : n;
            const int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) tmp[o++] = {less_j_i} ? idx[j++] : idx[i++];
            while (i < mid) tmp[o++] = idx[i++];
            while (j < hi) tmp[o++] = idx[j++];
        }}
        int64_t *swap = idx; idx = tmp; tmp = swap;
    }}
"""


def _merge_sort(less: str) -> str:
    """The merge sort with `less` a C expression template in `{x}`, `{y}` (offsets)."""
    return _MERGE_SORT.format(
        less_v_prev=less.format(x="v", y="idx[j - 1]"),
        less_j_i=less.format(x="idx[j]", y="idx[i]"),
    )


# LSD radix sort of `n` unsigned keys KT (`PASSES` bytes) carrying the offsets `idx`: one pass
# counts every byte, then each byte whose digit differs between keys moves keys and offsets
# stably into the other buffer. The order of equal keys is kept, so the result is the stable
# sort; `ka` (the keys) and `idx` (the offsets) end in whichever buffer the last pass wrote.
_RADIX_SORT = r"""
    /* stable: LSD radix sort of the keys, 8 bits a pass */
    {kt} *ka = ({kt} *)(scratch + {w2}), *kb = ({kt} *)(scratch + {w3});
    for (int64_t j = 0; j < n; j++) {{
        {rt} v;
        {key_value}
        {key_bits}
    }}
    int64_t cnt[{passes}][256];
    memset(cnt, 0, sizeof cnt);
    for (int64_t j = 0; j < n; j++) {{
        const {kt} v = ka[j];
        for (int p = 0; p < {passes}; p++) cnt[p][(v >> (8 * p)) & 255]++;
    }}
    for (int p = 0; p < {passes}; p++) {{
        int64_t *c = cnt[p];
        if (c[(ka[0] >> (8 * p)) & 255] == n) continue;  /* one digit: nothing moves */
        int64_t sum = 0;
        for (int d = 0; d < 256; d++) {{ const int64_t t = c[d]; c[d] = sum; sum += t; }}
        for (int64_t j = 0; j < n; j++) {{
            const {kt} v = ka[j];
            const int64_t o = c[(v >> (8 * p)) & 255]++;
            kb[o] = v;
            tmp[o] = idx[j];
        }}
        {kt} *ks = ka; ka = kb; kb = ks;
        int64_t *is = idx; idx = tmp; tmp = is;
    }}
"""
RADIX_MIN = 256  # rows from this length sort by radix when the comparator orders by one key


def _key_code(key: KeyOrder) -> tuple[str, str, str]:
    """(unsigned key type, the key's compute type, statements storing the order-preserving
    bits of `v` into `ka[j]`) for `key`."""
    dt = key.dtype
    wide = dt.bits == 64
    kt = "uint64_t" if wide else "uint32_t"
    sign = "0x8000000000000000u" if wide else "0x80000000u"
    if dt.is_float:
        # total order: negative floats reverse (all bits flipped), the rest follow after them
        ft = "double" if wide else "float"
        bits = f"{kt} u; {{ {ft} f = v; memcpy(&u, &f, sizeof u); }} " \
               f"u = (u & {sign}) ? ~u : (u | {sign});"
    elif dt.is_signed:
        st = "int64_t" if wide else "int32_t"
        bits = f"{kt} u = ({kt})({st})v ^ {sign};"
    else:
        bits = f"{kt} u = ({kt})v;"
    if key.descending:
        bits += " u = ~u;"
    return kt, cexpr.compute_type(dt), bits + " ka[j] = u;"


def _radix_sort(key: KeyOrder, key_value: str, n: int) -> str:
    """The radix sort body for `key`, with `key_value` C statements setting `v` (the key's
    compute type) from the element at offset `idx[j]`."""
    kt, rt, bits = _key_code(key)
    return _RADIX_SORT.format(kt=kt, rt=rt, key_value=key_value, key_bits=bits,
                              passes=8 if kt == "uint64_t" else 4, w2=2 * n, w3=3 * n)


def _row_layout(dims: tuple[int, ...], dim: int) -> tuple[int, int, int]:
    """(outer, n, inner) of a row-major array of `dims` around dimension `dim`."""
    return math.prod(dims[:dim]), dims[dim], math.prod(dims[dim + 1 :])


def _params(types: list[str], prefix: str, const: bool) -> list[str]:
    q = "const " if const else ""
    return [f"{q}{t} *restrict {prefix}{i}" for i, t in enumerate(types)]


def _rows_function(
    name: str, in_types: list[str], out_types: list[str], outer: int, n: int, inner: int,
    sort_body: str, gather: list[str], what: str, threads: int, arrays: int = 2,
) -> str:
    """A C function sorting every row: offsets into `idx`, `sort_body`, then `gather` lines.
    From PARALLEL_WORK elements the rows run as tasks on up to `threads` threads of the
    runtime's pool, each running task with its own slot of scratch (allocated first): `arrays`
    arrays of `n` int64 each, `idx` and `tmp` the first two, `scratch` all of them."""
    rows = outer * inner
    params = _params(in_types, "in", True) + _params(out_types, "out", False)
    slots = max(1, min(threads, rows)) if rows * n >= PARALLEL_WORK else 1
    width = max(1, n)
    ins = [f"(const {t} *)a[{i}]" for i, t in enumerate(in_types)]
    outs = [f"({t} *)a[{len(in_types) + i}]" for i, t in enumerate(out_types)]
    arg_names = [f"in{i}" for i in range(len(in_types))] + \
        [f"out{i}" for i in range(len(out_types))]
    lines = [
        ctext.comment(what),
        f"static void {name}_range({', '.join(params)}, int64_t *bufs, int *busy, int slots, "
        "int64_t lo, int64_t hi) {",
        "    const int slot = hf_slot_claim(busy, slots);",
        f"    int64_t *idx_buf = bufs + {arrays * width} * (int64_t)slot;",
        "    int64_t *const scratch = idx_buf; (void)scratch;",
        f"    int64_t *tmp_buf = idx_buf + {width};",
        "    for (int64_t row = lo; row < hi; row++) {",
        f"        const int64_t n = {n};",
        f"        const int64_t base = row / {inner} * {n * inner} + row % {inner};",
        "        int64_t *idx = idx_buf, *tmp = tmp_buf;",
        f"        for (int64_t j = 0; j < n; j++) idx[j] = base + j * {inner};",
    ]
    lines += ["    " + line for line in sort_body.strip("\n").split("\n")]
    lines += ["        " + g for g in gather]
    k = len(arg_names)
    lines += [
        "    }",
        "    hf_slot_release(busy, slot);",
        "}",
        f"static void {name}_t(void *const *a, int64_t lo, int64_t hi) {{",
        f"    {name}_range({', '.join(ins + outs)}, (int64_t *)a[{k}], (int *)a[{k + 1}], "
        f"{slots}, lo, hi);",
        "}",
        f"static void {name}({', '.join(params)}) {{",
        "    /* scratch for every slot, allocated before any task runs (hf_alloc's rule) */",
        f"    int64_t *bufs = hf_alloc(0, sizeof(int64_t) * {arrays * width * slots} + "
        f"sizeof(int) * {slots});",
        f"    int *busy = (int *)(bufs + {arrays * width * slots});",
        f"    memset(busy, 0, sizeof(int) * {slots});",
        f"    void *const a[] = {{{', '.join(f'(void *){x}' for x in arg_names)}, "
        "(void *)bufs, (void *)busy};",
        f"    hf_parallel_ptr({name}_t, a, 0, {rows}, 1, {slots});" if slots > 1
        else f"    {name}_t(a, 0, {rows});",
        "    free(bufs);",
        "}",
    ]
    return "\n".join(lines) + "\n"


def emit_sort(
    op: LibOp, ins: list[str], outs: list[str], names: set[str], threads: int = 1
) -> tuple[str, str]:
    """(helper definitions, statements) for a sort of `ins` into `outs`."""
    compare = op.func("compare")
    dims_attr = tuple(op.attr("dimensions", ()))
    if compare is None or len(dims_attr) != 1:
        raise LibraryOpError(op, "sort needs to_apply= and exactly one dimension")
    shapes = list(op.operands)
    if not all(isinstance(s, ArrayShape) for s in shapes) or len(shapes) != len(outs):
        raise LibraryOpError(op, "sort needs array operands, one result per operand")
    arrays: list[ArrayShape] = shapes  # type: ignore[assignment]
    dims = arrays[0].dims
    if any(s.dims != dims for s in arrays):
        raise LibraryOpError(op, "sort operands must all have the same dimensions")
    dim = dims_attr[0]
    if not 0 <= dim < len(dims):
        raise LibraryOpError(op, f"sort dimension {dim} out of range for rank {len(dims)}")
    outer, n, inner = _row_layout(dims, dim)
    types = [cexpr.ctype(s.dtype) for s in arrays]

    word = op_word(op.opcode)
    cmp_name = fresh(f"{word}_compare", names)
    less_name = fresh(f"{word}_less", names)
    rows_name = fresh(f"{word}_rows", names)
    in_params = _params(types, "in", True)
    result_ct = cexpr.compute_type(compare.results[0].dtype)
    args = []
    for i, s in enumerate(arrays):
        args += [cexpr.load(s.dtype, f"in{i}[x]"), cexpr.load(s.dtype, f"in{i}[y]")]
    less_fn = "\n".join([
        comment("does the element at offset x sort before the one at y?"),
        f"static inline int {less_name}({', '.join(in_params)}, int64_t x, int64_t y) {{",
        f"    {result_ct} r;",
        f"    {cmp_name}({', '.join(args)}, &r);",
        "    return r != 0;",
        "}",
    ]) + "\n"
    in_args = ", ".join(f"in{i}" for i in range(len(types)))
    less = f"{less_name}({in_args}, {{x}}, {{y}})"
    gather = [
        f"for (int64_t j = 0; j < n; j++) out{i}[base + j * {inner}] = in{i}[idx[j]];"
        for i in range(len(types))
    ]
    key: KeyOrder | None = op.attr("sort_key") if n >= RADIX_MIN else None
    if key is not None:
        key_value, key_fn = _key_value(key, op.func("key"), arrays,
                                       fresh(f"{word}_key", names))
        what = f"sort: {len(types)} operand(s) along dimension {dim}, {outer * inner} rows " \
               f"of {n}, stable, by radix on operand {key.operand}'s key"
        if outer * inner == 1 and n >= sort_radix.PARALLEL_MIN:
            kt, rt, bits = _key_code(key)
            defs = key_fn + sort_radix.function(rows_name, types, n, kt, rt, key_value, bits,
                                                threads, what + f", {sort_radix.BITS} bits a "
                                                "pass, on every thread")
        else:
            defs = key_fn + _rows_function(rows_name, types, types, outer, n, inner,
                                           _radix_sort(key, key_value, n), gather, what,
                                           threads, arrays=4)
    else:
        what = f"sort: {len(types)} operand(s) along dimension {dim}, {outer * inner} rows " \
               f"of {n}, stable"
        rows_fn = _rows_function(rows_name, types, types, outer, n, inner, _merge_sort(less),
                                 gather, what, threads)
        defs = scalar.c_function(compare, cmp_name) + less_fn + rows_fn
    call_args = [f"(const {t} *)({p})" for t, p in zip(types, ins, strict=True)]
    call_args += [f"({t} *)({p})" for t, p in zip(types, outs, strict=True)]
    return defs, f"{rows_name}({', '.join(call_args)});\n"


def _key_value(key: KeyOrder, expr: ir.Func | None, arrays: list[ArrayShape], key_name: str
               ) -> tuple[str, str]:
    """(C statements setting `v` to the key of the element at offset `idx[j]`, the key
    function's definition) for a comparator ordering by `key`, whose key expression is `expr`
    (None: the element itself)."""
    k = key.operand
    element = cexpr.load(arrays[k].dtype, f"in{k}[idx[j]]")
    if expr is None:
        return f"v = {element};", ""
    # f(x) of the comparator, evaluated with x for both of its key parameters (the expression
    # reads only parameter 2k) and zeros for the others
    args = [element if i in (2 * k, 2 * k + 1) else "0" for i in range(len(expr.params))]
    return f"{key_name}({', '.join(args)}, &v);", scalar.c_function(expr, key_name)


_TOTAL_KEY = r"""
#ifndef HFLIB_TOTAL_KEY_{B}
#define HFLIB_TOTAL_KEY_{B}
/* a signed integer ordering floats of {B} bits totally: -nan < -inf < ... < -0 < +0 < ... < nan */
static inline int{B}_t hflib_total_key_{B}(const void *p) {{
    int{B}_t i;
    memcpy(&i, p, sizeof i);
    return i < 0 ? (int{B}_t)(i ^ INT{B}_MAX) : i;
}}
#endif
"""

def emit_topk(
    op: LibOp, ins: list[str], outs: list[str], names: set[str], threads: int = 1
) -> tuple[str, str]:
    """(helper definitions, statements) for topk: values and s32 indices of the k largest
    (largest=true) or smallest elements of each row of the last dimension."""
    shape = op.operands[0]
    k = op.attr("k")
    if not isinstance(shape, ArrayShape) or shape.rank == 0 or not isinstance(k, int):
        raise LibraryOpError(op, "topk needs an integer k= and an operand of rank >= 1")
    res = leaves(op.shape)
    if len(res) != 2 or len(outs) != 2:
        raise LibraryOpError(op, "topk returns a (values, indices) tuple")
    n = shape.dims[-1]
    if not 0 <= k <= n:
        raise LibraryOpError(op, f"k={k} out of range for rows of {n}")
    rows = shape.size // n if n else 0
    ct = cexpr.ctype(shape.dtype)
    idx_ct = cexpr.ctype(res[1].dtype)
    defs = ""
    if shape.dtype.is_small_float:  # by encoding, as a TOTALORDER compare (e8m0 unsigned,
        # the fnuz NaN lowest)
        key = cexpr_types.small_key(shape.dtype, "((const uint8_t *)in0)[{v}]")
    elif shape.dtype.is_float:
        defs = _TOTAL_KEY.format(B=shape.dtype.bits)
        key = f"hflib_total_key_{shape.dtype.bits}(&in0[{{v}}])"
    else:
        key = "in0[{v}]"
    largest = bool(op.attr("largest", True))
    sign = ">" if largest else "<"
    less = f"({key.format(v='{x}')} {sign} {key.format(v='{y}')})"
    name = fresh(f"{op_word(op.opcode)}_rows", names)
    gather = [
        f"for (int64_t j = 0; j < {k}; j++) {{",
        f"    out0[row * {k} + j] = in0[idx[j]];",
        f"    out1[row * {k} + j] = ({idx_ct})(idx[j] - base);",
        "}",
    ]
    what = f"top-k: the {k} {'largest' if largest else 'smallest'} of {rows} rows of {n}"
    defs += _rows_function(name, [ct], [ct, idx_ct], rows, n, 1, _merge_sort(less), gather, what,
                           threads)
    stmt = f"{name}((const {ct} *)({ins[0]}), ({ct} *)({outs[0]}), ({idx_ct} *)({outs[1]}));\n"
    return defs, stmt
