"""convolution with many groups of few output features (depthwise convolutions and their
weight gradients) as a loop over all output features at once (`conv.py` routes here).

Per group, im2col + GEMM (`conv_gemm.py`) would be a product with og <= MAX_OG columns: a
matrix-vector product per group, each gathering its own strided patches. Here instead every
output feature is computed together, the innermost loop running over the output features z
(so over the groups), where the input (group g = z / og at a fixed stride: features for
feature groups, batch for batch groups), the kernel and the result are usually contiguous
(NHWC depthwise: input and result features, HWIO kernel's output features; the weight
gradient's f01b input, i01o kernel and 01bf result):

    for each block of result positions (b, s...), RB of them (tasks on the pool):
        acc[RB][O] = 0
        for each kernel input feature c, each tap t, each position r of the block:
            x = position of r at tap t (skipped when outside the input or in a hole)
            for z in O:  acc[r][z] += lhs[b', g(z) * ci + c, x] * rhs[z, c, t]
        the block's acc -> the result (converted to its type)

RB keeps acc within 16 KiB (L1). Accumulation is in float for f32/f16/bf16 results (operands
converted as read), in double for f64, as `conv_gemm.py`.
"""

from __future__ import annotations

import math

from hlofuse.backends.cpu import cexpr
from hlofuse.backends.cpu.ctext import comment
from hlofuse.backends.cpu.library.conv_spec import ConvSpec
from hlofuse.backends.kernel_ir.naming import fresh, op_word

MAX_OG = 4                 # output features per group up to which this path is taken
MIN_GROUPS = 4             # ... with at least this many groups
ACC_BYTES = 16384          # accumulators per block
MAX_ROWS = 256             # result positions per block
PARALLEL_WORK = 1_000_000  # multiply-adds from which blocks run on several threads


def applies(spec: ConvSpec) -> bool:
    return (spec.out.dtype.is_float and spec.groups >= MIN_GROUPS and spec.og <= MAX_OG
            and not spec.empty)


def emit(spec: ConvSpec, ins: list[str], outs: list[str], names: set[str], threads: int = 1
         ) -> tuple[str, str]:
    """(definitions, statements) computing the convolution `spec` from `ins` into `outs[0]`."""
    at = "double" if spec.out.dtype.bits == 64 else "float"
    lt, rt, ot = (cexpr.ctype(s.dtype) for s in (spec.lhs, spec.rhs, spec.out))
    name = fresh(f"{op_word(spec.op.opcode)}_conv", names)
    nsp, o, og, groups = spec.nsp, spec.o, spec.og, spec.groups
    # result positions (b, s...), slowest first in the result's layout
    pos = [("b", spec.nb, spec.os[0])] + [(f"s{d}", spec.out_sizes[d], spec.os[2 + d])
                                          for d in range(nsp)]
    pos = sorted((p for p in pos if p[1] > 1), key=lambda p: -p[2])
    rows = math.prod(p[1] for p in pos)
    rb = max(1, min(rows, MAX_ROWS, ACC_BYTES // (o * (8 if at == "double" else 4))))
    blocks = -(-rows // rb)
    lz = spec.nb * spec.ls[0] if spec.bgc > 1 else spec.ci * spec.ls[1]  # input per group

    def lhs_v(expr: str) -> str:
        return f"({at})({cexpr.load(spec.lhs.dtype, expr)})"

    def rhs_v(expr: str) -> str:
        return f"({at})({cexpr.load(spec.rhs.dtype, expr)})"

    final = "a[z]" if cexpr.ctype(spec.out.dtype) == at else cexpr.store(spec.out.dtype, "a[z]")
    meta = 2 + nsp  # per row: input offset, result offset, first position per spatial dim
    lines = [
        comment(f"convolution over all {o} output features at once ({groups} groups of {og}): "
                f"dim_labels={spec.labels}, {rows} result positions in blocks of {rb}"),
        '__attribute__((optimize("fp-contract=fast")))',
        f"static void {name}_rows(const {lt} *restrict lhs, const {rt} *restrict rhs, "
        f"{ot} *restrict out, {at} *restrict acc, int64_t r0, int64_t r1) {{",
        f"    int64_t meta[{rb}][{meta}];",
        "    for (int64_t r = r0; r < r1; r++) {",
        "        int64_t *m = meta[r - r0];",
    ]
    idx = {}
    for i, (key, ext, _) in enumerate(pos):
        div = math.prod(p[1] for p in pos[i + 1:])
        e = f"r / {div}" if div > 1 else "r"
        idx[key] = f"({e} % {ext})" if i else e
    b = idx.get("b", "0")
    lines.append(f"        m[0] = {b} * {spec.ls[0]};")
    oterms = [f"{b} * {spec.os[0]}"] + [f"{idx.get(f's{d}', '0')} * {spec.os[2 + d]}"
                                        for d in range(nsp)]
    lines.append(f"        m[1] = {' + '.join(oterms)};")
    for d, w in enumerate(spec.window):
        lines.append(f"        m[{2 + d}] = {idx.get(f's{d}', '0')} * {w.stride} - "
                     f"({w.pad_lo});")
    lines += ["    }", f"    for (int64_t i = 0; i < (r1 - r0) * {o}; i++) acc[i] = 0;",
              f"    for (int64_t c = 0; c < {spec.ci}; c++) {{"]
    ind = "        "
    for d in range(nsp):
        lines.append(f"{ind}for (int64_t t{d} = 0; t{d} < {spec.ksizes[d]}; t{d}++) {{")
        ind += "    "
    rterms = [f"c * {spec.rs[1]}"] + [f"t{d} * {spec.rs[2 + d]}" for d in range(nsp)]
    lines += [f"{ind}const {rt} *rp = rhs + {' + '.join(rterms)};",
              f"{ind}for (int64_t r = r0; r < r1; r++) {{",
              f"{ind}    const int64_t *m = meta[r - r0];"]
    ind += "    "
    lterms = ["m[0]", f"c * {spec.ls[1]}"]
    for d, w in enumerate(spec.window):
        k = f"({spec.ksizes[d] - 1} - t{d})" if w.reversal else f"t{d}"
        bd, n = w.base_dilation, spec.in_sizes[d]
        lines.append(f"{ind}const int64_t p{d} = m[{2 + d}] + {k} * {w.window_dilation};")
        if bd > 1:
            lines += [f"{ind}if (p{d} < 0 || p{d} % {bd} || p{d} / {bd} >= {n}) continue;",
                      f"{ind}const int64_t x{d} = p{d} / {bd};"]
        else:
            lines += [f"{ind}if (p{d} < 0 || p{d} >= {n}) continue;",
                      f"{ind}const int64_t x{d} = p{d};"]
        lterms.append(f"x{d} * {spec.ls[2 + d]}")
    lines += [f"{ind}const {lt} *lp = lhs + {' + '.join(lterms)};",
              f"{ind}{at} *restrict a = acc + (r - r0) * {o};"]
    if og == 1:
        lines.append(f"{ind}for (int64_t z = 0; z < {o}; z++) a[z] += "
                     f"{lhs_v(f'lp[z * {lz}]')} * {rhs_v(f'rp[z * {spec.rs[0]}]')};")
    else:
        lines += [f"{ind}for (int64_t g = 0; g < {groups}; g++) {{",
                  f"{ind}    const {at} l = {lhs_v(f'lp[g * {lz}]')};",
                  f"{ind}    for (int64_t z = g * {og}; z < (g + 1) * {og}; z++) "
                  f"a[z] += l * {rhs_v(f'rp[z * {spec.rs[0]}]')};",
                  f"{ind}}}"]
    for _ in range(nsp + 2):
        ind = ind[:-4]
        lines.append(f"{ind}}}")
    lines += [
        "    for (int64_t r = r0; r < r1; r++) {",
        f"        const {at} *a = acc + (r - r0) * {o};",
        f"        {ot} *orow = out + meta[r - r0][1];",
        f"        for (int64_t z = 0; z < {o}; z++) orow[z * {spec.os[1]}] = {final};",
        "    }",
        "}",
    ]
    parallel = threads > 1 and blocks > 1 and spec.work >= PARALLEL_WORK
    slots = min(threads, blocks) if parallel else 1
    lines += [
        f"static void {name}_task(void *const *a, int64_t lo, int64_t hi) {{",
        "    int *busy = (int *)a[4];",
        f"    const int slot = {slots} > 1 ? hf_slot_claim(busy, {slots}) : 0;",
        f"    {at} *acc = ({at} *)a[3] + slot * {rb * o};",
        "    for (int64_t q = lo; q < hi; q++)",
        f"        {name}_rows((const {lt} *)a[0], (const {rt} *)a[1], ({ot} *)a[2], acc, "
        f"q * {rb}, q * {rb} + {rb} < {rows} ? q * {rb} + {rb} : {rows});",
        f"    if ({slots} > 1) hf_slot_release(busy, slot);",
        "}",
        f"static void {name}(const {lt} *lhs, const {rt} *rhs, {ot} *out) {{",
        f"    {at} *acc = hf_alloc(64, sizeof({at}) * {slots * rb * o} + sizeof(int) * {slots});",
        f"    int *busy = (int *)(acc + {slots * rb * o});",
        f"    memset(busy, 0, sizeof(int) * {slots});",
        "    void *const a[] = {(void *)lhs, (void *)rhs, (void *)out, (void *)acc, "
        "(void *)busy};",
        f"    if ({slots} > 1) hf_parallel_ptr({name}_task, a, 0, {blocks}, 1, {slots});",
        f"    else {name}_task(a, 0, {blocks});",
        "    free(acc);",
        "}",
    ]
    stmt = f"{name}((const {lt} *)({ins[0]}), (const {rt} *)({ins[1]}), ({ot} *)({outs[0]}));\n"
    return "\n".join(lines) + "\n", stmt
