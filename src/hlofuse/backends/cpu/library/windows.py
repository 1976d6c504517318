"""select-and-scatter as C (the gradient of max-pooling), with the interpreter's semantics.

    out = init everywhere
    for each source position s (row-major):
        best = the first in-bounds window element (row-major over the window) not beaten:
               a later element e replaces best unless select(best, e) is true
        out[best] = scatter(out[best], source[s])          (skipped if the window is all padding)

The window is placed at s * stride - pad_lo in the operand; padding positions are never
selected. Repeated hits on one element combine in source order, as the interpreter's
`combine_at` does (for a float add it sums in f64 and rounds once, so float results agree within
a tolerance, integers exactly). Window dilation, base dilation and reversal are rejected
(LibraryOpError), as in the interpreter.
"""

from __future__ import annotations

import math

from hlofuse.backends.cpu import cexpr
from hlofuse.backends.cpu.ctext import comment
from hlofuse.backends.cpu.library import scalar
from hlofuse.backends.cpu.library.errors import LibraryOpError
from hlofuse.backends.kernel_ir.libop import LibOp
from hlofuse.backends.kernel_ir.naming import fresh, op_word
from hlofuse.ir.shape import ArrayShape


def emit_select_and_scatter(
    op: LibOp, ins: list[str], outs: list[str], names: set[str]
) -> tuple[str, str]:
    """(helper definitions, statements): ins = (operand, source, init), outs = (result,)."""
    window = op.attr("window")
    select = op.func("select")
    scatter = op.func("scatter")
    if window is None or select is None or scatter is None:
        raise LibraryOpError(op, "select-and-scatter needs window=, select= and scatter=")
    if any(w.window_dilation != 1 or w.base_dilation != 1 or w.reversal for w in window):
        raise LibraryOpError(op, "dilated or reversed windows are not supported")
    operand, source = op.operands[0], op.operands[1]
    if not (isinstance(operand, ArrayShape) and isinstance(source, ArrayShape)):
        raise LibraryOpError(op, "select-and-scatter needs array operands")
    if len(window) != operand.rank or source.rank != operand.rank:
        raise LibraryOpError(op, "window, operand and source ranks differ")
    dt = operand.dtype
    ct, cc = cexpr.ctype(dt), cexpr.compute_type(dt)
    select_ct = cexpr.compute_type(select.results[0].dtype)
    word = op_word(op.opcode)
    sel_name = fresh(f"{word}_select", names)
    sca_name = fresh(f"{word}_scatter", names)
    name = fresh(f"{word}_rows", names)
    rank = operand.rank
    op_strides = [math.prod(operand.dims[d + 1 :]) for d in range(rank)]
    src_strides = [math.prod(source.dims[d + 1 :]) for d in range(rank)]

    lines = [
        comment("select-and-scatter: select in each window, then scatter"),
        f"static void {name}(const {ct} *restrict operand, const {ct} *restrict source, "
        f"const {ct} *restrict init, {ct} *restrict out) {{",
        f"    for (int64_t i = 0; i < {operand.size}; i++) out[i] = init[0];",
    ]
    ind = "    "
    for d in range(rank):
        lines.append(f"{ind}for (int64_t s{d} = 0; s{d} < {source.dims[d]}; s{d}++)")
        ind += "    "
    lines += [f"{ind}{{", f"{ind}int found = 0;", f"{ind}int64_t best_at = 0;",
              f"{ind}{cc} best = 0;"]
    outer = ind
    for d, w in enumerate(window):
        lines.append(f"{ind}for (int64_t k{d} = 0; k{d} < {w.size}; k{d}++) {{")
        ind += "    "
        lines.append(f"{ind}const int64_t p{d} = s{d} * {w.stride} + k{d} - ({w.pad_lo});")
        lines.append(f"{ind}if (p{d} < 0 || p{d} >= {operand.dims[d]}) continue;  /* padding */")
    at = " + ".join(f"p{d} * {op_strides[d]}" for d in range(rank)) or "0"
    lines += [
        f"{ind}const int64_t at = {at};",
        f"{ind}const {cc} cand = {cexpr.load(dt, 'operand[at]')};",
        f"{ind}{select_ct} keep = 0;",
        f"{ind}if (found) {sel_name}(best, cand, &keep);",
        f"{ind}if (!found || !keep) {{ best = cand; best_at = at; found = 1; }}",
    ]
    for _ in range(rank):
        ind = ind[:-4]
        lines.append(f"{ind}}}")
    src_at = " + ".join(f"s{d} * {src_strides[d]}" for d in range(rank)) or "0"
    lines += [
        f"{outer}if (found) {{",
        f"{outer}    {cc} r;",
        f"{outer}    {sca_name}({cexpr.load(dt, 'out[best_at]')}, "
        f"{cexpr.load(dt, f'source[{src_at}]')}, &r);",
        f"{outer}    out[best_at] = {cexpr.store(dt, 'r')};",
        f"{outer}}}",
        f"{outer}}}",
        "}",
    ]
    defs = (scalar.c_function(select, sel_name) + scalar.c_function(scatter, sca_name)
            + "\n".join(lines) + "\n")
    stmt = (f"{name}((const {ct} *)({ins[0]}), (const {ct} *)({ins[1]}), "
            f"(const {ct} *)({ins[2]}), ({ct} *)({outs[0]}));\n")
    return defs, stmt
