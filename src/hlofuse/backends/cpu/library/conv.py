"""convolution as C: a direct loop nest with the interpreter's semantics.

General `dim_labels` (any layout of batch/feature/spatial dims for input, kernel and output),
window strides, padding (negative padding crops), lhs (base) and rhs (window) dilation, window
reversal, feature_group_count and batch_group_count (not both > 1), as in
`backends/interpreter/convolution.py`:

    out[b, z, s...] = sum over kernel taps k... and input features c of the group of z
                      lhs[b', c, x...] * rhs[z, c - c0, k'...]
    x_d = (s_d * stride_d + k_d * rhs_dilation_d - pad_lo_d) / lhs_dilation_d   (skipped when not
          an integer or outside the input: padding and base-dilation holes read zero)
    k'_d = K_d - 1 - k_d when the window dimension is reversed, else k_d

with, for output feature z in group g = z / (O / G): c0 = g * C / feature_group_count, and
b' = g * N_out + b when batch_group_count > 1. The innermost loop runs over the group's input
features. Floats accumulate in double and are rounded once to the result type (f16 directly,
bf16 through f32, like the interpreter); integers in uint64_t with wrap-around; pred is `!= 0`.
"""

from __future__ import annotations

import math

from hlofuse.backends.cpu import cexpr
from hlofuse.backends.cpu.ctext import comment
from hlofuse.backends.cpu.library.errors import LibraryOpError
from hlofuse.backends.interpreter.convolution import parse_dim_labels
from hlofuse.backends.kernel_ir.naming import fresh, word
from hlofuse.ir.attributes import WindowDim
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.shape import ArrayShape

PARALLEL_WORK = 1_000_000  # multiply-adds from which (batch, feature) pairs run on threads


def _strides(dims: tuple[int, ...], perm: list[int]) -> list[int]:
    """Row-major strides of the logical dimensions `perm` (physical axis per logical one)."""
    phys = [math.prod(dims[a + 1 :]) for a in range(len(dims))]
    return [phys[a] for a in perm]


def _final(out: ArrayShape, acc: str) -> str:
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
    instr: Instruction, ins: list[str], outs: list[str], names: set[str], threads: int = 1
) -> tuple[str, str]:
    """(helper definitions, statements) for a convolution of `ins` into `outs[0]`; from
    PARALLEL_WORK multiply-adds its (batch, output feature) pairs run on up to `threads`
    threads of the runtime's pool."""
    lhs, rhs = (o.shape for o in instr.operands)
    out = instr.shape
    if not (isinstance(lhs, ArrayShape) and isinstance(rhs, ArrayShape)
            and isinstance(out, ArrayShape)):
        raise LibraryOpError(instr, "convolution needs array operands and result")
    labels = instr.attrs.get("dim_labels")
    if labels is None:
        raise LibraryOpError(instr, "convolution needs dim_labels=")
    try:
        lp, rp, op = parse_dim_labels(str(labels))
    except ValueError as exc:
        raise LibraryOpError(instr, str(exc)) from None
    nsp = lhs.rank - 2
    ksizes = [rhs.dims[rp[2 + d]] for d in range(nsp)]
    window: tuple[WindowDim, ...] = instr.attrs.get("window") or tuple(
        WindowDim(size=s) for s in ksizes)
    if len(window) != nsp:
        raise LibraryOpError(instr, f"window has {len(window)} dims, convolution has {nsp}")
    fgc = int(instr.attrs.get("feature_group_count", 1))
    bgc = int(instr.attrs.get("batch_group_count", 1))
    if fgc > 1 and bgc > 1:
        raise LibraryOpError(instr, "feature_group_count and batch_group_count both > 1")
    n, c = lhs.dims[lp[0]], lhs.dims[lp[1]]
    o, ci = rhs.dims[rp[0]], rhs.dims[rp[1]]
    nb = out.dims[op[0]]
    groups = max(fgc, bgc)
    if (c % fgc or c // fgc != ci or o % groups or n % bgc or n // bgc != nb
            or out.dims[op[1]] != o):
        raise LibraryOpError(
            instr, f"feature_group_count={fgc}, batch_group_count={bgc} do not fit input "
            f"features {c}, kernel input features {ci}, output features {o}, batch {n}")
    if lhs.dtype.is_float != out.dtype.is_float and not out.dtype.is_float:
        raise LibraryOpError(instr, "float operands with an integer result are not supported")
    acc_t = "double" if out.dtype.is_float else "uint64_t"
    ls, rs, os_ = _strides(lhs.dims, lp), _strides(rhs.dims, rp), _strides(out.dims, op)
    in_sizes = [lhs.dims[lp[2 + d]] for d in range(nsp)]
    out_sizes = [out.dims[op[2 + d]] for d in range(nsp)]
    og, cg = o // groups, c // fgc

    lt, rt, ot = (cexpr.ctype(s.dtype) for s in (lhs, rhs, out))
    name = fresh(f"{word(instr)}_conv", names)
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
    lines.append(f"{ind}out[{obase}] = {_final(out, 'acc')};")
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
