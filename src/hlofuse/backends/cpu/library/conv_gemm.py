"""convolution as im2col + GEMM, for float results (`conv.py` routes here).

Per group g, a convolution is one matrix product (`conv_spec.py` for the notation):

    C_g[M, og] = P_g[M, K] x W_g[K, og]
    M = (b, s...)   the result's positions, in the result's physical order
    K = (c, t...)   kernel input feature and taps, in the input's physical order
    P_g[(b, s), (c, t)] = lhs[b', c0 + c, x(s, t)...]   (0 for padding and base-dilation holes)
    W_g[(c, t), z]      = rhs[g * og + z, c, t...]

P (the patches) is gathered into a bounded workspace, one chunk of rows (or of columns) at a
time, stored row-major [M][K] or transposed [K][M], whichever makes the innermost copy a run of
unit stride in the input (a run of input features for NHWC inputs, of batch for the weight
gradient's f01b input, of positions when there is one feature); padding outside a run is
filled with zeros without a test per element. W is read in place when its K dimensions flatten
to one stride in the kernel's layout and its type is the accumulator's (the HWIO kernel of a
forward convolution, the i01o "kernel" of a weight gradient), else packed once. C is the result
itself when its positions flatten to one stride and its features have stride 1 (NHWC results,
the 01bf weight gradient), else a workspace written to the result afterwards.

Two ways to cut the product into tasks (chunks of the flattened M or K range, at most
CHUNK_ELEMS workspace elements each; tasks run on up to `threads` threads of the runtime's pool
from PARALLEL_WORK multiply-adds, each task claiming one slot of a scratch buffer allocated
before the pool starts):
- by rows of M (forward and input-gradient convolutions: many positions): each task gathers
  its rows of P and writes its rows of C;
- by K (weight gradients: few output rows, a long contraction over batch x positions): each
  task gathers a range of P's columns and accumulates P_k x W_k into its slot's copy of C; the
  slots' copies are summed into the result at the end.

Each chunk's product is one single-threaded GEMM: OpenBLAS's sgemm/dgemm when `blas.py` has
bound it (every extent and stride fits in 32 bits), else `hflib_gemm_one_*` (gemm.py, packing
into the slot's scratch). Accumulation is in the GEMM's type: float for f32/f16/bf16 results
(f16/bf16 operands converted into the workspace, the result rounded once), double for f64, as
XLA's CPU convolutions; so results match the interpreter's f64 sums within a tolerance.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from hlofuse.backends.cpu import cexpr
from hlofuse.backends.cpu.ctext import comment
from hlofuse.backends.cpu.library import blas, prebuilt
from hlofuse.backends.cpu.library.conv_spec import ConvSpec
from hlofuse.backends.kernel_ir.naming import fresh, op_word

PARALLEL_WORK = 1_000_000  # multiply-adds from which the chunks run on several threads
CHUNK_ELEMS = 1 << 17      # workspace elements of P per task (512 KiB of f32)
ACC_LIMIT = 1 << 24        # bytes of per-slot result copies allowed when cutting K


@dataclass(frozen=True)
class Dim:
    """One dimension of P: the result's batch (b) or positions (s), or the kernel's input
    features (c) or taps (t); `d` is the spatial dimension of s and t."""

    kind: str
    d: int
    extent: int

    @property
    def var(self) -> str:
        return f"v{self.kind}{self.d if self.d >= 0 else ''}"


@dataclass(frozen=True)
class Plan:
    m_dims: tuple[Dim, ...]      # M, slowest first (result's physical order), extents > 1
    k_dims: tuple[Dim, ...]      # K, slowest first (input's physical order), extents > 1
    mk: bool                     # P stored [M][K] (else [K][M])
    cut_m: bool                  # tasks cut M (else K)
    prefix: int                  # the cut group's leading dims flattened into units
    units: int                   # how many units
    inner: int                   # P rows (or columns) per unit
    per_chunk: int               # units per task
    w_strides: tuple[int, int] | None  # (K, z) strides of W read in place, else None: packed
    row_stride: int | None       # C rows straight into the result at this stride, else None
    slots: int
    tasks: int

    @property
    def m_total(self) -> int:
        return math.prod(d.extent for d in self.m_dims)

    @property
    def k_total(self) -> int:
        return math.prod(d.extent for d in self.k_dims)


def applies(spec: ConvSpec) -> bool:
    """Float results of non-empty operands (the rest runs the direct loop nest)."""
    return spec.out.dtype.is_float and not spec.empty


def _acc(spec: ConvSpec) -> tuple[str, str]:
    """(C type, GEMM suffix) of the accumulator."""
    return ("double", "f64") if spec.out.dtype.bits == 64 else ("float", "f32")


def _lhs_stride(spec: ConvSpec, dim: Dim) -> int:
    """Input elements between neighbours along `dim` (0 when not a plain stride)."""
    if dim.kind == "b":
        return spec.ls[0]
    if dim.kind == "c":
        return spec.ls[1]
    w = spec.window[dim.d]
    if w.base_dilation > 1 or (dim.kind == "t" and w.reversal):
        return 0
    step = w.stride if dim.kind == "s" else w.window_dilation
    return step * spec.ls[2 + dim.d]


def _flat_stride(dims: tuple[Dim, ...], strides: dict[Dim, int]) -> int | None:
    """The stride of the flattened index over `dims` (slowest first) or None."""
    for a, b in itertools.pairwise(dims):
        if strides[a] != strides[b] * b.extent:
            return None
    return strides[dims[-1]] if dims else 1


def plan(spec: ConvSpec, threads: int) -> Plan:
    """How `spec` is computed on up to `threads` threads (the module docstring)."""
    nsp = spec.nsp
    m_all = [Dim("b", -1, spec.nb)] + [Dim("s", d, spec.out_sizes[d]) for d in range(nsp)]
    k_all = [Dim("c", -1, spec.ci)] + [Dim("t", d, spec.ksizes[d]) for d in range(nsp)]
    o_stride = {m_all[0]: spec.os[0], **{m_all[1 + d]: spec.os[2 + d] for d in range(nsp)}}
    l_stride = {k_all[0]: spec.ls[1], **{k_all[1 + d]: spec.ls[2 + d] for d in range(nsp)}}
    r_stride = {k_all[0]: spec.rs[1], **{k_all[1 + d]: spec.rs[2 + d] for d in range(nsp)}}
    m_dims = tuple(sorted((d for d in m_all if d.extent > 1), key=lambda d: -o_stride[d]))
    k_dims = tuple(sorted((d for d in k_all if d.extent > 1), key=lambda d: -l_stride[d]))
    m_total = math.prod(d.extent for d in m_dims)
    k_total = math.prod(d.extent for d in k_dims)
    acc_t, _ = _acc(spec)
    og = spec.og

    # P's layout: the innermost copy along the dimension of unit input stride, the longer run
    def score(dims: tuple[Dim, ...]) -> tuple[int, int]:
        if not dims:
            return (0, 0)
        return (int(_lhs_stride(spec, dims[-1]) == 1), dims[-1].extent)

    mk = score(k_dims) >= score(m_dims)

    # W in place: K flattens to one stride in the kernel, a BLAS-readable matrix
    w_strides = None
    if cexpr.ctype(spec.rhs.dtype) == acc_t:
        sk = _flat_stride(k_dims, r_stride)
        if sk is not None and blas.layout(k_total, og, sk, spec.rs[0]) is not None:
            w_strides = (sk, spec.rs[0])

    # C in place: positions flatten to one stride, features of stride 1 (or one per group)
    row_stride = None
    if cexpr.ctype(spec.out.dtype) == acc_t and (spec.os[1] == 1 or og == 1):
        rs = _flat_stride(m_dims, o_stride)
        if rs is not None and (rs >= og or m_total == 1):
            row_stride = rs if m_total > 1 else og

    parallel = threads > 1 and spec.work >= PARALLEL_WORK
    cut_m = not (k_total > m_total and
                 threads * spec.groups * m_total * og * (8 if acc_t == "double" else 4)
                 <= ACC_LIMIT)
    group, other = (m_dims, k_total) if cut_m else (k_dims, m_total)
    prefix = len(group)
    for j in range(1, len(group) + 1):
        if math.prod(d.extent for d in group[j:]) * other <= CHUNK_ELEMS:
            prefix = j
            break
    while parallel and prefix < len(group) and (
            math.prod(d.extent for d in group[:prefix]) < 4 * threads):
        prefix += 1  # units enough for every thread
    units = math.prod(d.extent for d in group[:prefix])
    inner = math.prod(d.extent for d in group[prefix:])
    per_chunk = max(1, CHUNK_ELEMS // (inner * other))
    if parallel:
        per_chunk = min(per_chunk, -(-units // (4 * threads)))
    chunks = -(-units // per_chunk)
    tasks = chunks * spec.groups
    slots = min(threads, tasks) if parallel and tasks > 1 else 1
    return Plan(m_dims, k_dims, mk, cut_m, prefix, units, inner, per_chunk, w_strides,
                row_stride, slots, tasks)


class _Gather:
    """Prints `name_gather(lhs, dst, u0, u1)`: units [u0, u1) of P's cut group (and all of the
    other group), written in P's layout order to dst, zeros where the input is not read; lhs
    points at the group's input. One loop per dimension of P, the cut group's leading
    dimensions as one loop over units; a position is checked once both its output position
    and its tap are bound (outside: the block below is zeroed and skipped); the innermost
    dimension is a copy with the zeros at its ends set without a test per element."""

    def __init__(self, spec: ConvSpec, p: Plan, at: str) -> None:
        self.spec, self.at = spec, at
        order = (p.m_dims + p.k_dims) if p.mk else (p.k_dims + p.m_dims)
        cut = (p.m_dims if p.cut_m else p.k_dims)[: p.prefix]
        self.levels: list[tuple[Dim, ...]] = []
        self.chunk = -1  # index of the units loop
        for dim in order:
            if cut and dim == cut[0]:
                self.chunk = len(self.levels)
                self.levels.append(cut)
            elif dim not in cut:
                self.levels.append((dim,))
        self.present = {(d.kind, d.d) for d in order}
        self.bound: set[tuple[str, int]] = set()

    def val(self, kind: str, d: int) -> str:
        return f"v{kind}{d if d >= 0 else ''}" if (kind, d) in self.present else "0"

    def tap(self, d: int) -> str:
        t = self.val("t", d)
        return f"({self.spec.ksizes[d] - 1} - {t})" if self.spec.window[d].reversal else t

    def rest(self, i: int) -> str:
        """Elements written per iteration of level i (-1: the whole call), a C expression."""
        size = math.prod(lv[0].extent for j, lv in enumerate(self.levels)
                         if j > i and j != self.chunk)
        return f"(u1 - u0) * {size}" if self.chunk > i else str(size)

    def complete(self, d: int) -> bool:
        return all((k, d) in self.bound or (k, d) not in self.present for k in "st")

    def check(self, d: int, ind: str, size: str, leave: str) -> list[str]:
        """x{d} from the bound position and tap; outside the input: zero `size`, `leave`."""
        w, n = self.spec.window[d], self.spec.in_sizes[d]
        pos = (f"{self.val('s', d)} * {w.stride} + {self.tap(d)} * {w.window_dilation} "
               f"- ({w.pad_lo})")
        bd = w.base_dilation
        bad = (f"p{d} < 0 || p{d} % {bd} || p{d} / {bd} >= {n}" if bd > 1
               else f"p{d} < 0 || p{d} >= {n}")
        return [f"{ind}const int64_t p{d} = {pos};",
                f"{ind}if ({bad}) {{",
                f"{ind}    memset(dst, 0, sizeof({self.at}) * ({size})); dst += {size}; {leave}",
                f"{ind}}}",
                f"{ind}const int64_t x{d} = p{d}{f' / {bd}' if bd > 1 else ''};"]

    def bind(self, dims: tuple[Dim, ...], ind: str, size: str, leave: str
             ) -> tuple[list[str], list[str]]:
        """(lines, offset terms) once `dims` are bound."""
        lines: list[str] = []
        terms: list[str] = []
        spec = self.spec
        for dim in dims:
            self.bound.add((dim.kind, dim.d))
            if dim.kind in "bc":
                terms.append(f"{dim.var} * {spec.ls[0 if dim.kind == 'b' else 1]}")
        done = sorted({dim.d for dim in dims if dim.kind in "st"} if dims else
                      {d for d in range(spec.nsp) if self.complete(d)})
        for d in done:
            if self.complete(d):
                lines += self.check(d, ind, size, leave)
                terms.append(f"x{d} * {spec.ls[2 + d]}")
        return lines, terms

    def conv(self, expr: str) -> str:
        return f"({self.at})({cexpr.load(self.spec.lhs.dtype, expr)})"

    def print(self, name: str, lt: str) -> list[str]:
        at = self.at
        lines = [f"static void {name}_gather(const {lt} *restrict lhs, {at} *restrict dst, "
                 "int64_t u0, int64_t u1) {", "    (void)u0; (void)u1;"]
        more, terms = self.bind((), "    ", self.rest(-1), "return;")
        lines += [*more, f"    const {lt} *lp0 = lhs + {' + '.join(terms) or '0'};"]
        ind, opened = "    ", 0
        for i, lv in enumerate(self.levels):
            last = i == len(self.levels) - 1
            if last and i != self.chunk:
                lines += self.run(lv[0], ind, f"lp{i}")
                break
            if i == self.chunk:
                lines.append(f"{ind}for (int64_t u = u0; u < u1; u++) {{")
                ind += "    "
                for j, dim in enumerate(lv):
                    div = math.prod(x.extent for x in lv[j + 1:])
                    expr = f"u / {div}" if div > 1 else "u"
                    lines.append(f"{ind}const int64_t {dim.var} = "
                                 f"{f'{expr} % {dim.extent}' if j else expr};")
            else:
                v = lv[0].var
                lines.append(f"{ind}for (int64_t {v} = 0; {v} < {lv[0].extent}; {v}++) {{")
                ind += "    "
            opened += 1
            more, terms = self.bind(lv, ind, self.rest(i), "continue;")
            offset = " + ".join(terms) or "0"
            lines += [*more, f"{ind}const {lt} *lp{i + 1} = lp{i} + {offset};"]
            if last:
                lines.append(f"{ind}*dst++ = {self.conv(f'*lp{i + 1}')};")
        if not self.levels:
            lines.append(f"    *dst = {self.conv('*lp0')};")
        for _ in range(opened):
            ind = ind[:-4]
            lines.append(f"{ind}}}")
        lines.append("}")
        return lines

    def run(self, dim: Dim, ind: str, lp: str) -> list[str]:
        """The innermost copy: `dim.extent` elements along `dim`, zeros where outside."""
        spec, e, at = self.spec, dim.extent, self.at
        if dim.kind in "bc":
            st = spec.ls[0 if dim.kind == "b" else 1]
            return [f"{ind}for (int64_t i = 0; i < {e}; i++) "
                    f"dst[i] = {self.conv(f'{lp}[i * {st}]')};", f"{ind}dst += {e};"]
        d = dim.d
        w, n, ls = spec.window[d], spec.in_sizes[d], spec.ls[2 + d]
        if dim.kind == "s":
            off, step = f"{self.tap(d)} * {w.window_dilation} - ({w.pad_lo})", w.stride
        elif w.reversal:
            off = (f"{self.val('s', d)} * {w.stride} + "
                   f"{(spec.ksizes[d] - 1) * w.window_dilation} - ({w.pad_lo})")
            step = -w.window_dilation
        else:
            off, step = f"{self.val('s', d)} * {w.stride} - ({w.pad_lo})", w.window_dilation
        lines = [f"{ind}{{", f"{ind}    const int64_t o = {off};"]
        if w.base_dilation == 1 and step > 0:
            lines += [
                f"{ind}    int64_t lo = o >= 0 ? 0 : (-o + {step - 1}) / {step};",
                f"{ind}    int64_t hi = o >= {n} ? 0 : ({n - 1} - o) / {step} + 1;",
                f"{ind}    if (hi > {e}) hi = {e};",
                f"{ind}    if (lo > hi) lo = hi;",
                f"{ind}    for (int64_t i = 0; i < lo; i++) dst[i] = 0;",
                f"{ind}    for (int64_t i = lo; i < hi; i++) "
                f"dst[i] = {self.conv(f'{lp}[(o + i * {step}) * {ls}]')};",
                f"{ind}    for (int64_t i = hi; i < {e}; i++) dst[i] = 0;",
            ]
        else:
            bd = w.base_dilation
            lines += [
                f"{ind}    for (int64_t i = 0; i < {e}; i++) {{",
                f"{ind}        const int64_t p = o + i * ({step});",
                f"{ind}        dst[i] = p >= 0 && p % {bd} == 0 && p / {bd} < {n} ? "
                f"{self.conv(f'{lp}[p / {bd} * {ls}]')} : ({at})0;",
                f"{ind}    }}",
            ]
        return [*lines, f"{ind}    dst += {e};", f"{ind}}}"]


def _wpack(spec: ConvSpec, p: Plan, name: str, rt: str, at: str) -> list[str]:
    """`name_wpack(rhs, w)`: W of every group as [group][K][og] in the accumulator type."""
    rs = {"c": spec.rs[1], **{f"t{d}": spec.rs[2 + d] for d in range(spec.nsp)}}
    lines = [f"static void {name}_wpack(const {rt} *restrict rhs, {at} *restrict w) {{",
             f"    for (int64_t g = 0; g < {spec.groups}; g++) {{",
             f"        const {rt} *r0 = rhs + g * {spec.og * spec.rs[0]};"]
    ind = "        "
    for i, dim in enumerate(p.k_dims):
        key = "c" if dim.kind == "c" else f"t{dim.d}"
        lines += [f"{ind}for (int64_t k{i} = 0; k{i} < {dim.extent}; k{i}++) {{",
                  f"{ind}    const {rt} *r{i + 1} = r{i} + k{i} * {rs[key]};"]
        ind += "    "
    last = f"r{len(p.k_dims)}"
    value = f"({at})({cexpr.load(spec.rhs.dtype, f'{last}[z * {spec.rs[0]}]')})"
    lines.append(f"{ind}for (int64_t z = 0; z < {spec.og}; z++) *w++ = {value};")
    for _ in p.k_dims:
        ind = ind[:-4]
        lines.append(f"{ind}}}")
    return [*lines, "    }", "}"]


def _store(spec: ConvSpec, p: Plan, name: str, ot: str, at: str) -> list[str]:
    """`name_store(c, nsum, sstride, out, g, r0, r1)`: rows [r0, r1) of group g's C (the sum
    of `nsum` copies `sstride` apart) into the result, converted to its type."""
    og, os1 = spec.og, spec.os[1]
    ostride = {"b": spec.os[0], **{f"s{d}": spec.os[2 + d] for d in range(spec.nsp)}}
    terms = []
    for i, dim in enumerate(p.m_dims):
        div = math.prod(x.extent for x in p.m_dims[i + 1:])
        idx = f"r / {div}" if div > 1 else "r"
        if i:
            idx = f"({idx} % {dim.extent})"
        terms.append(f"{idx} * {ostride['b' if dim.kind == 'b' else f's{dim.d}']}")
    final = "v" if cexpr.ctype(spec.out.dtype) == at else cexpr.store(spec.out.dtype, "v")
    return [
        f"static void {name}_store(const {at} *restrict c, int64_t nsum, int64_t sstride, "
        f"{ot} *restrict out, int64_t g, int64_t r0, int64_t r1) {{",
        "    for (int64_t r = r0; r < r1; r++) {",
        f"        const {at} *cr = c + (r - r0) * {og};",
        f"        {ot} *orow = out + g * {og * os1} + {' + '.join(terms) or '0'};",
        f"        for (int64_t z = 0; z < {og}; z++) {{",
        f"            {at} v = cr[z];",
        "            for (int64_t q = 1; q < nsum; q++) v += cr[q * sstride + z];",
        f"            orow[z * {os1}] = {final};",
        "        }",
        "    }",
        "}",
    ]


def _fits_blas(spec: ConvSpec, p: Plan) -> bool:
    """Every extent, leading dimension and stride of the chunk products fits in 32 bits."""
    chunk = p.per_chunk * p.inner
    values = [p.m_total, p.k_total, spec.og, chunk, p.row_stride or 0,
              *(p.w_strides or (p.k_total * spec.og, 1))]
    return max(values) <= blas.INT32_MAX


def emit(spec: ConvSpec, ins: list[str], outs: list[str], names: set[str], threads: int = 1
         ) -> tuple[str, str]:
    """(definitions, statements) computing the convolution `spec` from `ins` into `outs[0]`."""
    p = plan(spec, threads)
    at, suffix = _acc(spec)
    lt, rt, ot = (cexpr.ctype(s.dtype) for s in (spec.lhs, spec.rhs, spec.out))
    name = fresh(f"{op_word(spec.op.opcode)}_conv", names)
    og, groups, mt, kt = spec.og, spec.groups, p.m_total, p.k_total
    chunks = p.tasks // groups
    lines = [comment(
        f"convolution as im2col + GEMM: dim_labels={spec.labels}, groups (feature "
        f"{spec.fgc}, batch {spec.bgc}); per group C[{mt} x {og}] = P[{mt} x {kt}] x "
        f"W[{kt} x {og}], P stored {'[M][K]' if p.mk else '[K][M]'}, tasks cut "
        f"{'M' if p.cut_m else 'K'} ({chunks} chunks of {p.per_chunk * p.inner}), W "
        f"{'in place' if p.w_strides else 'packed'}, C "
        f"{'in place' if p.row_stride and p.cut_m else 'a workspace'}")]
    lines += _Gather(spec, p, at).print(name, lt)
    if p.w_strides is None:
        lines += _wpack(spec, p, name, rt, at)
    direct = p.cut_m and p.row_stride is not None
    if not direct:
        lines += _store(spec, p, name, ot, at)
    # one product, single-threaded: the BLAS when bound and the sizes fit, else our GEMM
    t = "s" if suffix == "f32" else "d"
    use_blas = _fits_blas(spec, p)
    lines += [
        f"static void {name}_mm(int64_t m, int64_t k, const {at} *a, int64_t sam, int64_t sak, "
        f"const {at} *b, int64_t sbk, int64_t sbn, {at} *c, int64_t ldc, int acc, "
        f"{at} *gs) {{",
    ]
    if use_blas:
        lines += [
            f"    if (hf_blas_{t}gemm) {{",
            # as blas.layout: a one-row or one-column operand's other stride is free (W of
            # one output feature, read in place at a tap stride > 1, is no transpose)
            f"        const int ta = (k <= 1 || sak == 1) && (m <= 1 || sam >= k) ? "
            f"{blas.CBLAS_NO_TRANS} : {blas.CBLAS_TRANS};",
            f"        const int tb = ({og} <= 1 || sbn == 1) && (k <= 1 || sbk >= {og}) ? "
            f"{blas.CBLAS_NO_TRANS} : {blas.CBLAS_TRANS};",
            f"        const int64_t lda = ta == {blas.CBLAS_NO_TRANS} ? (m > 1 ? sam : k) "
            ": (k > 1 ? sak : m);",
            f"        const int64_t ldb = tb == {blas.CBLAS_NO_TRANS} ? (k > 1 ? sbk : {og}) "
            f": ({og} > 1 ? sbn : k);",
            f"        hf_blas_{t}gemm({blas.CBLAS_ROW_MAJOR}, ta, tb, (int)m, {og}, (int)k, 1, a, "
            f"(int)(lda > 1 ? lda : 1), b, (int)(ldb > 1 ? ldb : 1), acc ? 1 : 0, c, "
            "(int)ldc);",
            "        return;",
            "    }",
        ]
    lines += [f"    hflib_gemm_one_{suffix}(m, {og}, k, a, sam, sak, b, sbk, sbn, c, ldc, acc, "
              "gs);", "}"]
    # the tasks
    psize = -(-p.per_chunk * p.inner * (kt if p.cut_m else mt) // 16) * 16
    csize = (0 if direct else p.per_chunk * p.inner * og) if p.cut_m else groups * mt * og
    csize = -(-csize // 16) * 16
    wg = og * spec.rs[0] if p.w_strides else kt * og
    sk, sn = p.w_strides or (og, 1)
    goff = spec.group_offset("g")
    if p.cut_m:
        c_arg = (f"j->out + g * {og * spec.os[1]} + u0 * {p.inner * (p.row_stride or 0)}, "
                 f"{p.row_stride}" if direct else f"cb, {og}")
        body = [f"        const int64_t m = (u1 - u0) * {p.inner};",
                f"        {name}_mm(m, {kt}, p, {f'{kt}, 1' if p.mk else '1, m'}, "
                f"j->w + g * {wg}, {sk}, {sn}, {c_arg}, 0, gs);"]
        if not direct:
            body.append(f"        {name}_store(cb, 1, 0, j->out, g, u0 * {p.inner}, "
                        f"u0 * {p.inner} + m);")
    else:
        body = [f"        const int64_t kc = (u1 - u0) * {p.inner};",
                f"        {name}_mm({mt}, kc, p, {'kc, 1' if p.mk else f'1, {mt}'}, "
                f"j->w + g * {wg} + u0 * {p.inner * sk}, {sk}, {sn}, cb + g * {mt * og}, "
                f"{og}, 1, gs);"]
    kmax = kt if p.cut_m else p.per_chunk * p.inner
    lines += [
        "typedef struct {",
        f"    const {lt} *lhs;",
        f"    const {at} *w;",
        f"    {ot} *out;",
        f"    {at} *scratch;",
        "    int64_t per, gsize;",
        "    int *busy, slots;",
        f"}} {name}_job;",
        f"static void {name}_task(void *const *args, int64_t lo, int64_t hi) {{",
        f"    const {name}_job *j = (const {name}_job *)args[0];",
        "    const int slot = j->slots > 1 ? hf_slot_claim(j->busy, j->slots) : 0;",
        f"    {at} *p = j->scratch + slot * j->per, *gs = p + {psize}, *cb = gs + j->gsize;",
        "    (void)cb;",
        "    for (int64_t q = lo; q < hi; q++) {",
        f"        const int64_t g = q / {chunks}, u0 = q % {chunks} * {p.per_chunk};",
        f"        const int64_t u1 = u0 + {p.per_chunk} < {p.units} ? u0 + {p.per_chunk} : "
        f"{p.units};",
        f"        {name}_gather(j->lhs + {goff}, p, u0, u1);",
        *body,
        "    }",
        "    if (j->slots > 1) hf_slot_release(j->busy, slot);",
        "}",
        f"static void {name}(const {lt} *lhs, const {rt} *rhs, {ot} *out) {{",
    ]
    if p.w_strides:
        lines.append(f"    const {at} *w = (const {at} *)rhs;")
    else:
        lines += [f"    {at} *w = hf_alloc(64, sizeof({at}) * {groups * kt * og});",
                  f"    {name}_wpack(rhs, w);"]
    lines += [
        f"    const int64_t gsize = (hflib_gemm_scratch_{suffix}({og}, {kmax}) + 15) / 16 * 16;",
        f"    const int64_t per = {psize} + gsize + {csize};",
        f"    const int slots = {p.slots};",
        f"    {at} *scratch = hf_alloc(64, sizeof({at}) * per * slots + sizeof(int) * slots);",
        "    int *busy = (int *)(scratch + per * slots);",
        "    memset(busy, 0, sizeof(int) * slots);",
    ]
    if not p.cut_m:
        lines.append(f"    for (int s = 0; s < slots; s++) memset(scratch + s * per + {psize} "
                     f"+ gsize, 0, sizeof({at}) * {csize});")
    lines += [
        f"    {name}_job j = {{lhs, w, out, scratch, per, gsize, busy, slots}};",
        "    void *const args[] = {(void *)&j};",
        f"    if (slots > 1) hf_parallel_ptr({name}_task, args, 0, {p.tasks}, 1, slots);",
        f"    else {name}_task(args, 0, {p.tasks});",
    ]
    if not p.cut_m:
        lines.append(f"    for (int64_t g = 0; g < {groups}; g++) {name}_store(scratch + "
                     f"{psize} + gsize + g * {mt * og}, slots, per, out, g, 0, {mt});")
    lines.append("    free(scratch);")
    if not p.w_strides:
        lines.append("    free(w);")
    lines.append("}")
    defs = prebuilt.declarations(suffix) + "\n".join(lines) + "\n"
    stmt = f"{name}((const {lt} *)({ins[0]}), (const {rt} *)({ins[1]}), ({ot} *)({outs[0]}));\n"
    return defs, stmt
