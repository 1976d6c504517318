"""The NaN that XLA's group expansions add to a convolution (conv_plan.py), as C
passes over a result the other routines (conv.py) have computed; both run only when a value is
not finite, checked when the convolution runs.

    kernel_cross   batch groups expanded over a dilated group dimension whose holes Eigen
                   multiplies: result feature f of group p is NaN (everywhere) when feature f of
                   another group has a non-finite kernel value;
    input_cross    depthwise feature groups expanded into one convolution with a zeroed kernel
                   (f64): a result element is NaN when its window reads (skipping padding and
                   holes) a non-finite input of another group's feature.

`finite_check` is the C test both use (every element finite).
"""

from __future__ import annotations

from hlofuse.backends.cpu import cexpr
from hlofuse.backends.cpu.library import conv_spec
from hlofuse.backends.kernel_ir.naming import fresh, op_word
from hlofuse.ir.shape import ArrayShape

NAN = '__builtin_nan("")'


def finite_check(shape: ArrayShape, stem: str, names: set[str]) -> tuple[str, str]:
    """(definition, function name): `int f(const T *v)`, 1 when every element is finite."""
    t = cexpr.ctype(shape.dtype)
    name = fresh(stem, names)
    v = cexpr.load(shape.dtype, "v[i]")
    return (f"static int {name}(const {t} *v) {{\n"
            f"    for (int64_t i = 0; i < {shape.size}; i++)\n"
            f"        if (!__builtin_isfinite((double)({v}))) return 0;\n"
            "    return 1;\n}\n"), name


def _nan(spec: conv_spec.ConvSpec) -> str:
    from hlofuse.backends.cpu.library.conv import final_value

    return final_value(spec.out, NAN)


def _loops(var: str, sizes: tuple[int, ...], ind: str) -> tuple[list[str], str]:
    """Nested `for` loops over `var`0.. of `sizes`, each opening a brace: (lines, indent)."""
    lines = []
    for d, n in enumerate(sizes):
        lines.append(f"{ind}for (int64_t {var}{d} = 0; {var}{d} < {n}; {var}{d}++) {{")
        ind += "    "
    return lines, ind


def _close(lines: list[str], count: int, ind: str) -> str:
    for _ in range(count):
        ind = ind[:-4]
        lines.append(f"{ind}}}")
    return ind


def emit_kernel_cross(spec: conv_spec.ConvSpec, ins: list[str], outs: list[str],
                      names: set[str]) -> tuple[str, str]:
    """(definitions, statement): the `kernel_cross` pass (module docstring)."""
    rt, ot = cexpr.ctype(spec.rhs.dtype), cexpr.ctype(spec.out.dtype)
    name = fresh(f"{op_word(spec.op.opcode)}_kernel_cross", names)
    g, og, rs, os_ = spec.groups, spec.og, spec.rs, spec.os
    kv = cexpr.load(spec.rhs.dtype, "k")
    lines = [
        f"static void {name}(const {rt} *restrict rhs, {ot} *restrict out) {{",
        f"    for (int64_t p = 0; p < {g}; p++)",
        f"    for (int64_t f = 0; f < {og}; f++) {{",
        "        int bad = 0;",
        f"        for (int64_t j = 0; j < {g}; j++) {{",
        "            if (j == p) continue;",
        f"            for (int64_t i = 0; i < {spec.ci}; i++) {{",
    ]
    body, ind = _loops("t", spec.ksizes, "                ")
    lines += body
    kidx = " + ".join([f"(j * {og} + f) * {rs[0]}", f"i * {rs[1]}"]
                      + [f"t{d} * {rs[2 + d]}" for d in range(spec.nsp)])
    lines += [f"{ind}const {rt} k = rhs[{kidx}];",
              f"{ind}if (!__builtin_isfinite((double)({kv}))) bad = 1;"]
    _close(lines, spec.nsp, ind)
    lines += ["            }", "        }", "        if (!bad) continue;",
              f"        for (int64_t b = 0; b < {spec.nb}; b++) {{"]
    body, ind = _loops("s", spec.out_sizes, "            ")
    lines += body
    oidx = " + ".join([f"b * {os_[0]}", f"(p * {og} + f) * {os_[1]}"]
                      + [f"s{d} * {os_[2 + d]}" for d in range(spec.nsp)])
    lines.append(f"{ind}out[{oidx}] = {_nan(spec)};")
    _close(lines, spec.nsp, ind)
    lines += ["        }", "    }", "}"]
    stmt = f"{name}((const {rt} *)({ins[1]}), ({ot} *)({outs[0]}));\n"
    return "\n".join(lines) + "\n", stmt


def emit_input_cross(spec: conv_spec.ConvSpec, ins: list[str], outs: list[str],
                     names: set[str]) -> tuple[str, str]:
    """(definitions, statement): the `input_cross` pass (module docstring), run when the input
    holds a non-finite value. One input feature per group: group g reads input feature g."""
    lt, ot = cexpr.ctype(spec.lhs.dtype), cexpr.ctype(spec.out.dtype)
    check_def, check = finite_check(spec.lhs, f"{op_word(spec.op.opcode)}_input_finite", names)
    name = fresh(f"{op_word(spec.op.opcode)}_input_cross", names)
    ls, os_ = spec.ls, spec.os
    xv = cexpr.load(spec.lhs.dtype, "x")
    lines = [
        f"static void {name}(const {lt} *restrict lhs, {ot} *restrict out) {{",
        f"    for (int64_t b = 0; b < {spec.nb}; b++)",
        f"    for (int64_t z = 0; z < {spec.o}; z++) {{",
        f"        const int64_t g = z / {spec.og};",
    ]
    body, ind = _loops("s", spec.out_sizes, "        ")
    lines += body
    lines.append(f"{ind}int bad = 0;")
    opened = 0
    for d, w in enumerate(spec.window):
        lines.append(f"{ind}for (int64_t k{d} = 0; k{d} < {spec.ksizes[d]}; k{d}++) {{")
        ind += "    "
        opened += 1
        lines.append(f"{ind}const int64_t p{d} = s{d} * {w.stride} + k{d} * "
                     f"{w.window_dilation} - ({w.pad_lo});")
        lines.append(f"{ind}if (p{d} < 0 || p{d} % {w.base_dilation}) continue;")
        lines.append(f"{ind}const int64_t x{d} = p{d} / {w.base_dilation};")
        lines.append(f"{ind}if (x{d} >= {spec.in_sizes[d]}) continue;")
    xidx = " + ".join([f"b * {ls[0]}", f"c * {ls[1]}"]
                      + [f"x{d} * {ls[2 + d]}" for d in range(spec.nsp)])
    lines += [f"{ind}for (int64_t c = 0; c < {spec.c}; c++) {{",
              f"{ind}    const {lt} x = lhs[{xidx}];",
              f"{ind}    if (c != g && !__builtin_isfinite((double)({xv}))) bad = 1;",
              f"{ind}}}"]
    ind = _close(lines, opened, ind)
    oidx = " + ".join([f"b * {os_[0]}", f"z * {os_[1]}"]
                      + [f"s{d} * {os_[2 + d]}" for d in range(spec.nsp)])
    lines.append(f"{ind}if (bad) out[{oidx}] = {_nan(spec)};")
    _close(lines, spec.nsp, ind)
    lines += ["    }", "}"]
    stmt = (f"if (!{check}((const {lt} *)({ins[0]}))) "
            f"{name}((const {lt} *)({ins[0]}), ({ot} *)({outs[0]}));\n")
    return check_def + "\n".join(lines) + "\n", stmt
