"""convolution as C: which routine computes it, and the direct loop nest.

    float result, base-dilated with unit stride   conv_phases.py: one convolution per output
                                                  phase (no multiply-add on a hole), each:
    float result, >= 4 groups of <= 4 features    conv_grouped.py: all output features at once
    float result otherwise                        conv_gemm.py: im2col + GEMM (BLAS or ours)
    integer or pred result, empty extents         the direct loop nest below

General `dim_labels` (any layout of batch/feature/spatial dims for input, kernel and output),
window strides, padding (negative padding crops), lhs (base) and rhs (window) dilation, window
reversal, feature_group_count and batch_group_count (not both > 1), as in
`backends/interpreter/convolution.py` (`conv_spec.py` reads them):

    out[b, z, s...] = sum over kernel taps k... and input features c of the group of z
                      lhs[b', c, x...] * rhs[z, c - c0, k'...]
    x_d = (s_d * stride_d + k_d * rhs_dilation_d - pad_lo_d) / lhs_dilation_d   (skipped when not
          an integer or outside the input: padding and base-dilation holes are skipped)
    k'_d = K_d - 1 - k_d when the window dimension is reversed, else k_d

with, for output feature z in group g = z / (O / G): c0 = g * C / feature_group_count, and
b' = g * N_out + b when batch_group_count > 1. The direct loop nest's innermost loop runs over
the group's input features; it accumulates integers in uint64_t with wrap-around (pred is
`!= 0`), and floats (only empty windows reach it) in double, rounded once to the result type.
The float routines accumulate in float for f32/f16/bf16 results and double for f64, like XLA.
They multiply padding's zeros by the kernel, as XLA's runtime convolution does; where XLA skips
padding (`conv_plan.py`: f64, small buffers, convolutions outside the entry
computation, swapped operands, ...), a kernel holding an inf or a NaN (0 x inf = NaN) sends the
call to the direct loop nest instead, checked when it runs; `conv_cross.py` adds the NaN of
XLA's group expansions.
"""

from __future__ import annotations

import math

from hlofuse.backends import conv_plan
from hlofuse.backends.cpu import cexpr
from hlofuse.backends.cpu.ctext import comment
from hlofuse.backends.cpu.library import conv_cross, conv_spec
from hlofuse.backends.kernel_ir.libop import LibOp
from hlofuse.backends.kernel_ir.naming import fresh, op_word
from hlofuse.ir.shape import ArrayShape

PARALLEL_WORK = 1_000_000  # multiply-adds from which (batch, feature) pairs run on threads


def final_value(out: ArrayShape, acc: str) -> str:
    """C: the double (or uint64_t) accumulator `acc` as a value of the result type."""
    dt = out.dtype
    if dt.is_pred:
        return f"{acc} != 0"
    if dt.is_float:
        if dt.name == "f16":
            return f"hf_f64_to_f16({acc})"
        if dt.bits == 64:
            return acc
        return cexpr.store(dt, f"(float){acc}")
    return f"({cexpr.ctype(dt)}){acc}"  # wraps modulo 2^bits


def emit_convolution(
    op: LibOp, ins: list[str], outs: list[str], names: set[str], threads: int = 1
) -> tuple[str, str]:
    """(helper definitions, statements) for a convolution of `ins` into `outs[0]`, on up to
    `threads` threads of the runtime's pool: float results through `conv_grouped.py` (many
    groups of few output features) or `conv_gemm.py` (im2col + GEMM), the rest (integer and
    pred results, empty extents) through the direct loop nest below."""
    spec = conv_spec.parse(op)
    if not spec.out.dtype.is_float:
        return emit_direct(spec, ins, outs, names, threads)
    from hlofuse.backends.cpu.library import conv_phases

    plan = conv_plan.plan(conv_plan.facts_of(spec.lhs, spec.rhs, spec.out, spec.labels,
                                             spec.window, spec.fgc, spec.bgc,
                                             bool(op.attr("in_entry", True))))
    defs, stmt = _emit_fast(spec, ins, outs, names, threads)
    # Padding and holes differ only when the kernel holds an inf or a NaN (0 x inf = NaN); then
    # where XLA skips them and the routines above multiply their zeros, the direct loop nest
    # runs, and where XLA multiplies them and the phases skip holes, the unphased routines;
    # XLA's batch-group expansion adds NaN across groups (conv_cross.py)
    holes = any(w.pad_lo > 0 or w.pad_hi > 0 or w.base_dilation > 1 for w in spec.window)
    kdefs, kstmt = "", stmt
    if plan.skips and holes:
        kdefs, kstmt = emit_direct(spec, ins, outs, names, threads)
    elif not plan.skips and conv_phases.split(spec) is not None:
        kdefs, kstmt = _emit_float(spec, ins, outs, names, threads)
    if plan.kernel_cross:
        cdefs, cstmt = conv_cross.emit_kernel_cross(spec, ins, outs, names)
        kdefs, kstmt = kdefs + cdefs, kstmt + cstmt
    if kstmt != stmt:
        rt = cexpr.ctype(spec.rhs.dtype)
        fdef, check = conv_cross.finite_check(spec.rhs, f"{op_word(op.opcode)}_kernel_finite",
                                              names)
        defs = defs + kdefs + fdef
        stmt = f"if ({check}((const {rt} *)({ins[1]}))) {{\n{stmt}}} else {{\n{kstmt}}}\n"
    if plan.input_cross:  # depthwise f64: other groups' non-finite inputs times zeros
        idefs, istmt = conv_cross.emit_input_cross(spec, ins, outs, names)
        defs, stmt = defs + idefs, stmt + istmt
    return defs, stmt


def _emit_fast(
    spec: conv_spec.ConvSpec, ins: list[str], outs: list[str], names: set[str], threads: int
) -> tuple[str, str]:
    from hlofuse.backends.cpu.library import conv_phases

    phases = conv_phases.split(spec)
    if phases is None:
        return _emit_float(spec, ins, outs, names, threads)
    rt, ot = cexpr.ctype(spec.rhs.dtype), cexpr.ctype(spec.out.dtype)
    defs: list[str] = []
    stmts: list[str] = []
    for ph in phases:
        d, s = _emit_float(ph.spec, [ins[0], f"((const {rt} *)({ins[1]}) + {ph.rhs_offset})"],
                           [f"(({ot} *)({outs[0]}) + {ph.out_offset})"], names, threads)
        defs.append(d)
        stmts.append(s)
    return "".join(defs), "".join(stmts)


def _emit_float(
    spec: conv_spec.ConvSpec, ins: list[str], outs: list[str], names: set[str], threads: int
) -> tuple[str, str]:
    from hlofuse.backends.cpu.library import conv_gemm, conv_grouped

    if conv_grouped.applies(spec):
        return conv_grouped.emit(spec, ins, outs, names, threads)
    if conv_gemm.applies(spec):
        return conv_gemm.emit(spec, ins, outs, names, threads)
    return emit_direct(spec, ins, outs, names, threads)


def emit_direct(
    spec: conv_spec.ConvSpec, ins: list[str], outs: list[str], names: set[str], threads: int = 1
) -> tuple[str, str]:
    """The direct loop nest (module docstring); from PARALLEL_WORK multiply-adds its (batch,
    output feature) pairs run on up to `threads` threads of the runtime's pool."""
    lhs, rhs, out = spec.lhs, spec.rhs, spec.out
    labels, window, ksizes = spec.labels, spec.window, spec.ksizes
    nsp, fgc, bgc = spec.nsp, spec.fgc, spec.bgc
    o, ci, nb, og, cg = spec.o, spec.ci, spec.nb, spec.og, spec.c // spec.fgc
    acc_t = "double" if out.dtype.is_float else "uint64_t"
    ls, rs, os_ = spec.ls, spec.rs, spec.os
    in_sizes, out_sizes = spec.in_sizes, spec.out_sizes

    lt, rt, ot = (cexpr.ctype(s.dtype) for s in (lhs, rhs, out))
    name = fresh(f"{op_word(spec.op.opcode)}_conv", names)
    work = out.size * ci * math.prod(ksizes)
    lines = [
        comment(f"convolution: dim_labels={labels}, {nsp} spatial dims, groups "
                f"(feature {fgc}, batch {bgc})"),
        f"static void {name}_range(const {lt} *restrict lhs, const {rt} *restrict rhs, "
        f"{ot} *restrict out, int64_t q0, int64_t q1) {{",
        "    for (int64_t q = q0; q < q1; q++) {",
        f"        const int64_t b = q / {o}, z = q % {o};",
        f"        const int64_t g = z / {og};",
        f"        const int64_t lhs_b = {'g * ' + str(nb) + ' + b' if bgc > 1 else 'b'};",
        f"        const int64_t c0 = {'g * ' + str(cg) if fgc > 1 else '0'};",
    ]
    ind = "        "
    for d in range(nsp):
        lines.append(f"{ind}for (int64_t s{d} = 0; s{d} < {out_sizes[d]}; s{d}++)")
        ind += "    "
    if nsp:
        lines[-1] += " {"
    else:
        lines.append(ind + "{")
    lines.append(f"{ind}{acc_t} acc = 0;")
    for d, w in enumerate(window):
        lines.append(f"{ind}for (int64_t k{d} = 0; k{d} < {ksizes[d]}; k{d}++) {{")
        ind += "    "
        pos = f"s{d} * {w.stride} + k{d} * {w.window_dilation} - ({w.pad_lo})"
        lines.append(f"{ind}const int64_t p{d} = {pos};  /* in the padded, dilated input */")
        if w.base_dilation > 1:
            lines.append(f"{ind}if (p{d} < 0 || p{d} % {w.base_dilation}) continue;")
            lines.append(f"{ind}const int64_t x{d} = p{d} / {w.base_dilation};")
        else:
            lines.append(f"{ind}if (p{d} < 0) continue;")
            lines.append(f"{ind}const int64_t x{d} = p{d};")
        lines.append(f"{ind}if (x{d} >= {in_sizes[d]}) continue;")
        tap = f"{ksizes[d] - 1} - k{d}" if w.reversal else f"k{d}"
        lines.append(f"{ind}const int64_t t{d} = {tap};")
    lbase = " + ".join([f"lhs_b * {ls[0]}", f"c0 * {ls[1]}"]
                       + [f"x{d} * {ls[2 + d]}" for d in range(nsp)])
    rbase = " + ".join([f"z * {rs[0]}"] + [f"t{d} * {rs[2 + d]}" for d in range(nsp)])
    lv = cexpr.load(lhs.dtype, f"lp[i * {ls[1]}]")
    rv = cexpr.load(rhs.dtype, f"rp[i * {rs[1]}]")
    lines += [
        f"{ind}const {lt} *lp = lhs + {lbase};",
        f"{ind}const {rt} *rp = rhs + {rbase};",
        f"{ind}for (int64_t i = 0; i < {ci}; i++) acc += ({acc_t})({lv}) * ({acc_t})({rv});",
    ]
    for _ in range(nsp):
        ind = ind[:-4]
        lines.append(f"{ind}}}")
    obase = " + ".join([f"b * {os_[0]}", f"z * {os_[1]}"]
                       + [f"s{d} * {os_[2 + d]}" for d in range(nsp)])
    lines.append(f"{ind}out[{obase}] = {final_value(out, 'acc')};")
    lines += ["        }", "    }", "}"]
    pairs = nb * o
    par = threads > 1 and pairs > 1 and work >= PARALLEL_WORK
    lines += [
        f"static void {name}_t(void *const *a, int64_t lo, int64_t hi) {{",
        f"    {name}_range((const {lt} *)a[0], (const {rt} *)a[1], ({ot} *)a[2], lo, hi);",
        "}",
        f"static void {name}(const {lt} *lhs, const {rt} *rhs, {ot} *out) {{",
        "    void *const a[] = {(void *)lhs, (void *)rhs, (void *)out};",
        f"    hf_parallel_ptr({name}_t, a, 0, {pairs}, 1, {min(threads, pairs)});" if par
        else f"    {name}_t(a, 0, {pairs});",
        "}",
    ]
    stmt = f"{name}((const {lt} *)({ins[0]}), (const {rt} *)({ins[1]}), ({ot} *)({outs[0]}));\n"
    return "\n".join(lines) + "\n", stmt
