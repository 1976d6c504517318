"""Explicit SIMD for the C printer: GCC/Clang vector extensions (`vector_size`) and the helpers
vector loops call. Nothing here relies on the auto-vectorizer: a vector loop's values are vector
types, its loads and stores are whole vectors, and every op below is one vector expression.

    types           hf_v8_f32 = 8 floats, hf_v8_u8 = 8 bytes (pred lanes are 0/1 bytes), ...
    loads/stores    hf_ld_v8_f32(p), hf_st_v8_f32(p, v)  (unaligned; memcpy -> one vmovups)
    tiles           hf_deint4_v8_f32(p, &a, &b, &c, &d): 32 consecutive floats of an [n, 4]
                    array -> 4 vectors of 8 rows (in-register transpose by shuffles); hf_int4_...
                    the inverse for stores
    selects         hf_sel_v8_f32(pred, a, b)   bit blend on a mask widened from 0/1 bytes
    f16/bf16        hf_vf16_to_f32_v8, hf_vf32_to_f16_v8, ... the scalar helpers' bit code on
                    vectors (bit-identical to cprelude's)

`VecLib` collects the definitions one C file needs (each once, include-guarded so kernels can be
concatenated). `vector_op` gives the vector expression of a `ScalarOp`, or None when the op has
no vector form yet; the printer then computes it lane by lane (`lane_loop`), which is correct and
usually vectorized by the compiler, but not guaranteed to be (tests/test_cpu_vectorize.py lists
which ops are explicit). f32 exp, log, tanh, logistic, sin and cos (also f16/bf16, computed in
f32) are explicit: `vmath.py`'s vector instantiation, the same operations as the scalar mathlib
function.
"""

from __future__ import annotations

import functools

from hlofuse.backends.cpu import cexpr, vmath
from hlofuse.backends.kernel_ir.ir import ScalarOp
from hlofuse.backends.subnormals import PASSTHROUGH
from hlofuse.ir.dtypes import DType
from hlofuse.ir.opcodes import Opcode

# element C types by short name: (C type, bytes)
CTYPES: dict[str, tuple[str, int]] = {
    "f32": ("float", 4), "f64": ("double", 8),
    "i8": ("int8_t", 1), "i16": ("int16_t", 2), "i32": ("int32_t", 4), "i64": ("int64_t", 8),
    "u8": ("uint8_t", 1), "u16": ("uint16_t", 2), "u32": ("uint32_t", 4), "u64": ("uint64_t", 8),
}
_INT_OF_BYTES = {1: "8", 2: "16", 4: "32", 8: "64"}
GATHER_TYPES = frozenset({"f32", "i32", "u32"})  # `VecLib.gather`'s element types
GATHER_WIDTHS = frozenset({8, 16})

# Vector math calls (exp, tanh, ...: ~20 vector ops each, `vmath.py`) a kernel inlines; past
# these, each is a call to one out-of-line copy per (op, width) (`VecLib.vmath`). GCC's time
# is about that of the inlined code, about 2.2 ms per inlined call at -O2: chain-500 (83 tanh,
# 83 exp in one loop) compiles in 0.107 s of compiler CPU with 16 inline, 0.089 s with 8 and
# 0.070 s with none, at the same run time (its chain is latency-bound). A throughput-bound
# loop pays for calls: ~20% with its only two math calls called (gelu-like: 35 -> 43 us), 1%
# with 8 of 16 called and 5% with all 16 (f32[2^20], 7.8 ms). The kernels of real programs
# have a handful (the DL benchmarks: at most 4, one of 10 in the flax MLP step, whose step
# time did not move), so they keep them inline.
INLINE_VMATH_CALLS = 8


def compute_short(dtype: DType) -> str:
    """The lane type values of `dtype` are computed in."""
    if dtype.is_float:
        return "f64" if dtype.bits == 64 else "f32"
    if dtype.is_pred:
        return "u8"
    return ("i" if dtype.is_signed else "u") + str(dtype.bits)


def storage_short(dtype: DType) -> str:
    """The lane type arrays of `dtype` hold."""
    if dtype.name in ("f16", "bf16"):
        return "u16"
    return compute_short(dtype)


def vtype(short: str, w: int) -> str:
    return f"hf_v{w}_{short}"


def convert(lib: VecLib, x: str, src: str, dst: str, w: int) -> str:
    """The vector expression converting `x` (lanes of `src`) to lanes of `dst` (short names).
    GCC 12 compiles one `__builtin_convertvector` across a 4x or 8x integer width change lane by
    lane on most targets (u8 x 8 -> i32 x 8: 32 instructions on x86-64-v3, 72 for 16 lanes on
    -v4; i32 x 8 -> u8 x 8 on -v3: 38). Those go through `VecLib.widen` (bytes and 16-bit lanes
    to 32- and 64-bit ones; integers of under 4 bytes to a float through 32-bit integers, exact)
    and `VecLib.narrow` (32-bit lanes to bytes); a 2x change is one conversion, as is narrowing
    from 8-byte lanes (the steps were no better there on -v3)."""
    if src == dst:
        return x
    a, b = CTYPES[src][1], CTYPES[dst][1]
    src_int, dst_int = src[0] in "iu", dst[0] in "iu"
    if src_int and dst_int and 4 * b <= a <= 4:
        return f"{lib.narrow(src, dst, w)}({x})"
    if src_int and dst_int and 4 * a <= b:
        return f"{lib.widen(src, dst, w)}({x})"
    if src_int and not dst_int and a < 4:  # (to a float: through 32-bit integers, exact)
        x = f"{lib.widen(src, 'i32', w)}({x})" if a == 1 else \
            f"__builtin_convertvector({x}, {lib.t('i32', w)})"
    return f"__builtin_convertvector({x}, {lib.t(dst, w)})"


def _gcc_x86(isa: str, builtin: str, fallback: str) -> str:
    """C statements: `builtin` where GCC compiles for `isa` (GCC's own x86 builtins, not
    <immintrin.h>, see `vmath`; clang's differ), else `fallback`."""
    return (f"#if defined(__GNUC__) && !defined(__clang__) && defined({isa})\n{builtin}"
            f"#else\n{fallback}#endif\n")


# the 16-byte and 4-byte-lane vector types GCC's pmov builtins take
_PMOV_TYPES = ("    typedef char hf__qi __attribute__((vector_size(16)));\n"
               "    typedef int hf__si __attribute__((vector_size({})));\n")


def _utype(short: str) -> str:
    """The unsigned lane type of the same width."""
    return "u" + _INT_OF_BYTES[CTYPES[short][1]]


def _itype(short: str) -> str:
    return "i" + _INT_OF_BYTES[CTYPES[short][1]]


class VecLib:
    """The vector helper definitions a C file needs, in dependency order."""

    def __init__(self) -> None:
        self.defs: dict[str, str] = {}
        self.vmath_calls = 0  # vector math calls printed inline (INLINE_VMATH_CALLS)

    def lanes(self, vt: str, w: int, params: list[str], expr: str) -> str:
        """A function `vt NAME(params)` returning `expr` (which reads `a0[hf_l]`, `a1`, ...)
        lane by lane, out of line (noinline): one definition however many kernels call it.
        Its name is a digest of its own text (code-made: opcode expressions and C types)."""
        import hashlib

        sig = ", ".join(f"{t} a{i}" for i, t in enumerate(params))
        body = (f"{{ {vt} r; for (int hf_l = 0; hf_l < {w}; ++hf_l) r[hf_l] = {expr}; "
                f"return r; }}")
        key = "lanes_" + hashlib.sha256(f"{vt}({sig}){body}".encode()).hexdigest()[:16]
        name = "hf_" + key
        self._add(key, f"static __attribute__((noinline)) {vt} {name}({sig}) {body}")
        return name

    def text(self) -> str:
        return "".join(self.defs.values())

    def _add(self, key: str, text: str) -> str:
        if key not in self.defs:
            guard = "HF_" + key.upper()
            self.defs[key] = f"#ifndef {guard}\n#define {guard}\n{text.strip()}\n#endif\n"
        return key

    def types(self, w: int) -> None:
        key = f"types_v{w}"
        if key in self.defs:  # (asked for every vector type printed)
            return
        lines = [f"typedef {ct} {vtype(s, w)} __attribute__((vector_size({w * n})));"
                 for s, (ct, n) in CTYPES.items()]
        self._add(key, "\n".join(lines))

    def t(self, short: str, w: int) -> str:
        self.types(w)
        return vtype(short, w)

    def load(self, short: str, w: int) -> str:
        vt, (ct, _n) = self.t(short, w), CTYPES[short]
        name = f"hf_ld_{vt[3:]}"
        self._add(name, f"static inline {vt} {name}(const {ct} *p) "
                        f"{{ {vt} v; memcpy(&v, p, sizeof v); return v; }}")
        return name

    def store(self, short: str, w: int) -> str:
        vt, (ct, _n) = self.t(short, w), CTYPES[short]
        name = f"hf_st_{vt[3:]}"
        self._add(name, f"static inline void {name}({ct} *p, {vt} v) "
                        f"{{ memcpy(p, &v, sizeof v); }}")
        return name

    def gather(self, short: str, w: int) -> str:
        """`NAME(p, o)`: the `w` elements `p[o[0]] .. p[o[w-1]]` of a 4-byte `short` type, `o`
        an i64 vector of offsets that fit in int32 (`GATHER_TYPES`, `GATHER_WIDTHS`). Under
        AVX-512F one hardware gather (the 512-bit form for w = 16, the 256-bit one for w = 8);
        elsewhere an initializer of the lanes' loads. GCC 12's RTL combiner takes time far
        beyond the code's size on many such initializers in one loop: a MinAtar kernel of two
        loops of 110 16-lane gathers was 23 s of -O2, 0.7 s with hardware gathers."""
        vt, (ct, _n) = self.t(short, w), CTYPES[short]
        it, ot = self.t("i32", w), self.t("i64", w)
        name = f"hf_gather_{vt[3:]}"
        lanes = ", ".join(f"p[o[{i}]]" for i in range(w))
        if w == 16:
            hw = ("__m512i i = (__m512i)__builtin_convertvector(o, " + it + ");\n"
                  + ("    __m512 g = _mm512_i32gather_ps(i, p, 4);" if short == "f32" else
                     "    __m512i g = _mm512_i32gather_epi32(i, p, 4);"))
        else:
            hw = ("__m256i i = (__m256i)__builtin_convertvector(o, " + it + ");\n"
                  + ("    __m256 g = _mm256_i32gather_ps(p, i, 4);" if short == "f32" else
                     "    __m256i g = _mm256_i32gather_epi32((const int *)p, i, 4);"))
        self._add(name, f"""
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
static inline {vt} {name}(const {ct} *p, {ot} o) {{
#if defined(__AVX512F__)
    {hw}
    return ({vt})g;
#else
    {vt} v = {{{lanes}}};
    return v;
#endif
}}""")
        return name

    def masked_load(self, short: str, w: int) -> str:
        """`NAME(p, m)`: `p[l]` in each lane l whose pred lane `m[l]` (a 0/1 byte) is set, 0 in
        the others, which read nothing (`p` may point before or past its buffer where their
        lanes are: a window's padding, a concatenate's other piece). With GCC, one masked
        vector load where the target has it for the vector's size (AVX-512F: 64 bytes of 4- or
        8-byte lanes; AVX: 32 bytes), through GCC's own builtins (not <immintrin.h>, see
        `vmath`); elsewhere a whole vector when every lane is set, else lane by lane."""
        vt, (ct, n) = self.t(short, w), CTYPES[short]
        pt = self.t("u8", w)
        name = f"hf_mld_{vt[3:]}"
        size = n * w
        isa, fast = "", ""
        if n in (4, 8) and size == 64:
            ft, kt = ("float", "unsigned short") if n == 4 else ("double", "unsigned char")
            blt = "__builtin_ia32_loadups512_mask" if n == 4 else "__builtin_ia32_loadupd512_mask"
            bits = f"""    {kt} k = 0;
    for (int l = 0; l < {w}; ++l) k |= ({kt})((m[l] & 1) << l);
"""
            if w == 16:  # (the 16 pred bytes tested at once: one instruction)
                bits = f"""#if defined(__AVX512BW__) && defined(__AVX512VL__)
    typedef char hf__mq __attribute__((vector_size(16)));
    const {kt} k = __builtin_ia32_ptestmb128((hf__mq)m, (hf__mq)m, 0xFFFF);
#else
{bits}#endif
"""
            isa, fast = "__AVX512F__", f"""    typedef {ft} hf__mv __attribute__((vector_size(64)));
{bits}    return ({vt}){blt}((const {ft} *)p, (hf__mv){{0}}, k);
"""
        elif n in (4, 8) and size == 32:
            ft, it = ("float", "int") if n == 4 else ("double", "long long")
            blt = "__builtin_ia32_maskloadps256" if n == 4 else "__builtin_ia32_maskloadpd256"
            isa, fast = "__AVX__", f"""    typedef {ft} hf__mv __attribute__((vector_size(32)));
    typedef {it} hf__mi __attribute__((vector_size(32)));
    const hf__mi k = -(hf__mi){convert(self, "m", "u8", _itype(short), w)};
    return ({vt}){blt}((const hf__mv *)p, k);
"""
        lanes = f"""    int all = 1;
    for (int l = 0; l < {w}; ++l) all &= m[l];
    if (all) {{ {vt} v; memcpy(&v, p, sizeof v); return v; }}
    {vt} v = {{0}};
    for (int l = 0; l < {w}; ++l) if (m[l]) v[l] = p[l];
    return v;
"""
        body = _gcc_x86(isa, fast, lanes) if fast else lanes
        self._add(name, f"static inline {vt} {name}(const {ct} *p, {pt} m)\n{{\n{body}}}")
        return name

    def widen(self, src: str, dst: str, w: int) -> str:
        """`NAME(x)`: integer lanes of `src` extended to the wider `dst` (`convert`), with the
        source's signedness (sign or zero extension). Bytes to 32-bit lanes are one vpmovzxbd
        or vpmovsxbd with GCC on AVX2 (8 lanes) and AVX-512F (16 lanes), through GCC's
        builtins (one conversion instead took 33 instructions on -v3 and 73 on -v4 where the
        bytes come from a load, and the steps split the 16-lane one into 128-bit halves);
        to 64-bit lanes through those; elsewhere a doubling at a time, or one conversion with
        AVX-512BW and VL where the result is at most 64 bytes."""
        a, b = CTYPES[src][1], CTYPES[dst][1]
        if a == 1 and b == 8:
            via = self.widen(src, src[0] + "32", w)
            return self._helper(f"hf_wdn_{self.t(src, w)[3:]}_{dst}", src, dst, w,
                                f"    return __builtin_convertvector({via}(x), "
                                f"{self.t(dst, w)});\n")
        body = self._step_body(src, dst, w, 2 * a, 1)
        if a == 1 and b == 4 and w in (8, 16):
            ext = "zx" if src[0] == "u" else "sx"
            if w == 16:
                call = (f"__builtin_ia32_pmov{ext}bd512_mask((hf__qi)x, (hf__si){{0}}, "
                        "(unsigned short)-1)")
                isa, si = "__AVX512F__", 64
            else:
                call = (f"__builtin_ia32_pmov{ext}bd256((hf__qi)__builtin_shufflevector(x, x, "
                        + ", ".join(str(i % 8) for i in range(16)) + "))")
                isa, si = "__AVX2__", 32
            body = _gcc_x86(isa, _PMOV_TYPES.format(si)
                            + f"    return ({self.t(dst, w)}){call};\n", body)
        return self._helper(f"hf_wdn_{self.t(src, w)[3:]}_{dst}", src, dst, w, body)

    def narrow(self, src: str, dst: str, w: int) -> str:
        """`NAME(x)`: 32-bit integer lanes truncated to bytes (`convert`): one vpmovdb with GCC
        on AVX-512F (16 lanes) or AVX-512VL (8), through GCC's builtins (one conversion took
        66 instructions on -v4 where the lanes come from a load), elsewhere a halving at a
        time (keeping the low bits: 20-29 instructions for 8 lanes on -v3, against 38-60)."""
        body = self._step_body(src, dst, w, CTYPES[src][1] // 2, -1)
        if w in (8, 16):
            isa, mask = ("__AVX512F__", "unsigned short") if w == 16 else \
                ("__AVX512VL__", "unsigned char")
            call = f"__builtin_ia32_pmovdb{32 * w}_mask((hf__si)x, (hf__qi){{0}}, ({mask})-1)"
            low = "r" if w == 16 else "__builtin_shufflevector(r, r, 0, 1, 2, 3, 4, 5, 6, 7)"
            body = _gcc_x86(isa, _PMOV_TYPES.format(4 * w) + f"    const hf__qi r = {call};\n"
                            f"    return ({self.t(dst, w)}){low};\n", body)
        return self._helper(f"hf_nrw_{self.t(src, w)[3:]}_{dst}", src, dst, w, body)

    def _step_body(self, src: str, dst: str, w: int, first: int, way: int) -> str:
        """`return` of `x` converted a halving (way -1) or doubling (1) at a time from `first`
        bytes, or in one conversion with AVX-512BW and VL up to 64 bytes."""
        dt = self.t(dst, w)
        x, n, end, sign = "x", first, CTYPES[dst][1], (dst if way < 0 else src)[0]
        while n * way < end * way:
            x = f"__builtin_convertvector({x}, {self.t(sign + _INT_OF_BYTES[n], w)})"
            n = n * 2 if way > 0 else n // 2
        x = f"__builtin_convertvector({x}, {dt})"
        one = f"__builtin_convertvector(x, {dt})"
        if x != one and max(CTYPES[src][1], CTYPES[dst][1]) * w <= 64:
            return (f"#if defined(__AVX512BW__) && defined(__AVX512VL__)\n    return {one};\n"
                    f"#else\n    return {x};\n#endif\n")
        return f"    return {x};\n"

    def _helper(self, name: str, src: str, dst: str, w: int, body: str) -> str:
        st, dt = self.t(src, w), self.t(dst, w)
        self._add(name, f"static inline {dt} {name}({st} x)\n{{\n{body}}}")
        return name

    def splat(self, short: str, w: int) -> str:
        vt, (ct, _n) = self.t(short, w), CTYPES[short]
        name = f"hf_splat_{vt[3:]}"
        self._add(name, f"static inline {vt} {name}({ct} s) "
                        f"{{ {vt} v = {{{', '.join(['s'] * w)}}}; return v; }}")
        return name

    def iota(self, w: int, short: str = "i64") -> str:
        """Lane numbers 0..w-1: 64-bit (index arithmetic) or `u32` (32-bit indices)."""
        vt = self.t(short, w)
        name = f"hf_iota_v{w}" if short == "i64" else f"hf_iota32_v{w}"
        suffix = "u" if short.startswith("u") else ""
        self._add(name, f"static inline {vt} {name}(void) "
                        f"{{ {vt} v = {{{', '.join(f'{i}{suffix}' for i in range(w))}}}; "
                        f"return v; }}")
        return name

    def mask_to_pred(self, short: str, w: int) -> str:
        """A comparison's mask (lanes of -1/0 as wide as `short`) -> pred lanes (0/1 bytes)."""
        mt = self.t(_itype(short), w)
        name = f"hf_m2p_v{w}_{_itype(short)}"
        narrow = convert(self, "m", _itype(short), "i8", w)
        self._add(name, f"static inline {self.t('u8', w)} {name}({mt} m) "
                        f"{{ return (({self.t('u8', w)}){narrow}) & 1; }}")
        return name

    def select(self, short: str, w: int) -> str:
        vt, ut = self.t(short, w), self.t(_utype(short), w)
        name = f"hf_sel_{vt[3:]}"
        self._add(name, f"""
static inline {vt} {name}({self.t('u8', w)} p, {vt} a, {vt} b)
{{
    {ut} m = ({ut})(-{convert(self, "p", "u8", _itype(short), w)});
    return ({vt})((({ut})a & m) | (({ut})b & ~m));
}}""")
        return name

    def any_pred(self, w: int) -> str:
        """Whether any of `w` pred lanes (0/1 bytes) is set: the lanes' bytes ORed as 64-bit
        words (one vector test once GCC sees through the memcpy), never lane by lane."""
        pt = self.t("u8", w)
        name = f"hf_any_v{w}"
        if w % 8 == 0:
            body = (f"uint64_t q[{w // 8}]; memcpy(q, &p, sizeof q); uint64_t r = 0; "
                    f"for (int i = 0; i < {w // 8}; ++i) r |= q[i]; return r != 0;")
        else:
            body = f"unsigned r = 0; for (int i = 0; i < {w}; ++i) r |= p[i]; return r != 0;"
        self._add(name, f"static inline int {name}({pt} p) {{ {body} }}")
        return name

    def blend(self, short: str, w: int) -> str:
        """Like `select`, on a comparison mask of `short`'s width."""
        vt, ut, it = self.t(short, w), self.t(_utype(short), w), self.t(_itype(short), w)
        name = f"hf_blend_{vt[3:]}"
        self._add(name, f"static inline {vt} {name}({it} m, {vt} a, {vt} b) "
                        f"{{ return ({vt})((({ut})a & ({ut})m) | (({ut})b & ~({ut})m)); }}")
        return name

    def minmax(self, short: str, w: int, is_max: bool) -> str:
        """Float max/min propagate NaN; equal operands give max(+0, -0) = +0 and
        min(+0, -0) = -0 whatever their order (jax.jit's rule, as the scalar hf_max/hf_min);
        integers compare."""
        vt = self.t(short, w)
        blend = self.blend(short, w)
        word = "max" if is_max else "min"
        name = f"hf_v{word}_{vt[3:]}"
        cmp = ">" if is_max else "<"
        if short not in ("f32", "f64"):
            self._add(name, f"static inline {vt} {name}({vt} a, {vt} b) "
                            f"{{ return {blend}((a {cmp} b), a, b); }}")
            return name
        ftz = self.ftz(short, w)  # the chosen operand: zeroed if subnormal and flushing
        ut = self.t(_utype(short), w)
        # equal operands combine their bits: max(+0, -0) = +0 (and), min = -0 (or), as jax.jit
        tie = "&" if is_max else "|"
        self._add(name, f"static inline {vt} {name}({vt} a, {vt} b) {{\n"
                        f"  const {ut} e = ({ut})(a == b);\n"
                        f"  const {ut} r = ({ut}){blend}((a {cmp} b) | (a != a), a, b);\n"
                        f"  return {ftz}(({vt})((r & ~e) | ((({ut})a {tie} ({ut})b) & e)));\n}}")
        return name

    def ftz(self, short: str, w: int) -> str:
        """fpenv's hf_ftz on vectors: subnormal lanes become zeros of their sign when the file
        flushes subnormals; the identity otherwise."""
        vt, ut = self.t(short, w), self.t(_utype(short), w)
        name = f"hf_vftz_{vt[3:]}"
        exp, keep = (("0x7f800000u", "0x7fffffffu") if short == "f32" else
                     ("0x7ff0000000000000ull", "0x7fffffffffffffffull"))
        self._add(name, f"static inline {vt} {name}({vt} a) {{\n"
                        "#if HF_FLUSH_SUBNORMALS\n"
                        f"  const {ut} u = ({ut})a;\n"
                        f"  return ({vt})(u & ~(({ut})((u & {exp}) == 0) & {keep}));\n"
                        "#else\n"
                        "  return a;\n"
                        "#endif\n}")
        return name

    def sub_or(self, short: str, w: int) -> str:
        """daz_math's hf_sub_or on vectors: the lanes of `a` that are subnormal, when the file
        flushes subnormals (XLA's CPU returns them from sin, tan, tanh, expm1), else those of
        `r`."""
        vt, ut, it = self.t(short, w), self.t(_utype(short), w), self.t(_itype(short), w)
        name = f"hf_vsub_or_{vt[3:]}"
        exp, keep = (("0x7f800000u", "0x7fffffffu") if short == "f32" else
                     ("0x7ff0000000000000ull", "0x7fffffffffffffffull"))
        blend = self.blend(short, w)
        self._add(name, f"static inline {vt} {name}({vt} a, {vt} r) {{\n"
                        "#if HF_FLUSH_SUBNORMALS\n"
                        f"  const {ut} u = ({ut})a;\n"
                        f"  const {it} m = ({it})(((u & {exp}) == 0) & ((u & {keep}) != 0));\n"
                        f"  return {blend}(m, a, r);\n"
                        "#else\n"
                        "  return r;\n"
                        "#endif\n}")
        return name

    def sign(self, short: str, w: int) -> str:
        """The scalar hf_sign on vectors: NaN and zeros (subnormals too, where DAZ reads them
        as zeros) stay themselves, the rest become 1 with their sign; then flushed as hf_ftz."""
        vt, ut = self.t(short, w), self.t(_utype(short), w)
        name = f"hf_vsign_{vt[3:]}"
        blend, ftz = self.blend(short, w), self.ftz(short, w)
        sign, one = (("0x80000000u", "0x3f800000u") if short == "f32" else
                     ("0x8000000000000000ull", "0x3ff0000000000000ull"))
        self._add(name, f"static inline {vt} {name}({vt} a) {{\n"
                        f"  const {vt} s = ({vt})((({ut})a & {sign}) | {one});\n"
                        f"  return {ftz}({blend}((a != a) | (a == 0), a, s));\n}}")
        return name

    def fabs(self, short: str, w: int) -> str:
        vt, ut = self.t(short, w), self.t(_utype(short), w)
        name = f"hf_vabs_{vt[3:]}"
        mask = "0x7fffffffu" if short == "f32" else "0x7fffffffffffffffull"
        self._add(name, f"static inline {vt} {name}({vt} a) "
                        f"{{ return ({vt})(({ut})a & {mask}); }}")
        return name

    def half(self, w: int) -> dict[str, str]:
        """f16 and bf16 <-> f32 conversions on vectors (cprelude's bit code, lane-wise)."""
        f, u32, u16 = self.t("f32", w), self.t("u32", w), self.t("u16", w)
        names = {k: f"hf_v{k}_v{w}" for k in
                 ("f16_to_f32", "f32_to_f16", "bf16_to_f32", "f32_to_bf16", "round_f16",
                  "round_bf16")}
        sel = f"hf_usel_v{w}"
        self._add(sel, f"static inline {u32} {sel}({self.t('i32', w)} m, {u32} a, {u32} b) "
                       f"{{ return (a & ({u32})m) | (b & ~({u32})m); }}")
        self._add(names["f16_to_f32"], f"""
static inline {f} {names['f16_to_f32']}({u16} h)
{{
    {u32} x = __builtin_convertvector(h, {u32});
    {u32} sign = (x & 0x8000u) << 16;
    {u32} em = x & 0x7fffu;
    {u32} norm = ((em << 13) + 0x38000000u) | (({u32})(em >= 0x7c00u) & 0x7f800000u);
    {u32} sub = ({u32})(__builtin_convertvector(em, {f}) * 0x1p-24f);
    return ({f})({sel}(em < 0x400u, sub, norm) | sign);
}}""")
        self._add(names["f32_to_f16"], f"""
static inline {u16} {names['f32_to_f16']}({f} v)
{{
    {u32} x = ({u32})v;
    {u32} sign = (x >> 16) & 0x8000u;
    {u32} a = x & 0x7fffffffu;
    {u32} sub = ({u32})(({f})a + 0.5f) - 0x3f000000u;
    {u32} norm = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
    {u32} pay = (a >> 13) & 0x3ffu;
    {u32} nan = 0x7c00u | pay | (({u32})(pay == 0u) & 1u);
    {u32} big = {sel}(a > 0x7f800000u, nan, nan - nan + 0x7c00u);
    {u32} r = {sel}(a >= 0x47800000u, big, {sel}(a < 0x38800000u, sub, norm));
    return __builtin_convertvector(r | sign, {u16});
}}""")
        self._add(names["bf16_to_f32"], f"""
static inline {f} {names['bf16_to_f32']}({u16} h)
{{
    return ({f})(__builtin_convertvector(h, {u32}) << 16);
}}""")
        self._add(names["f32_to_bf16"], f"""
static inline {u16} {names['f32_to_bf16']}({f} v)
{{
    {u32} x = ({u32})v;
    {u32} r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    {u32} nan = (x >> 16) | (({u32})(((x >> 16) & 0x7fu) == 0u) & 0x40u);
    return __builtin_convertvector({sel}((x & 0x7fffffffu) > 0x7f800000u, nan, r), {u16});
}}""")
        for k in ("f16", "bf16"):
            self._add(names[f"round_{k}"], f"static inline {f} {names[f'round_{k}']}({f} v) "
                      f"{{ return {names[f'{k}_to_f32']}({names[f'f32_to_{k}']}(v)); }}")
        return names

    def vmath(self, op: str, w: int) -> str:
        """The f32 vector function of `op` (vmath.OPS: exp, log, tanh, logistic, sin, cos) on
        `w` lanes: inline for this kernel's first `INLINE_VMATH_CALLS` calls, then an
        out-of-line (noinline) copy, the same operations."""
        self.types(w)
        self._add(f"vmath_v{w}", vmath.vector(w))
        fn = vmath.function(op, w)
        if self.vmath_calls < INLINE_VMATH_CALLS:
            self.vmath_calls += 1
            return fn
        vt = vtype("f32", w)
        self._add(f"{fn}_call", f"static __attribute__((noinline, unused)) {vt} {fn}_call"
                                f"({vt} x) {{ return {fn}(x); }}")
        return f"{fn}_call"

    def shuffle_helper(self, kind: str, short: str, w: int, s: int) -> str:
        """`deint`: s vectors loaded from s*w consecutive elements -> s vectors of columns;
        `int`: the inverse (s column vectors -> s vectors to store consecutively). A vector
        wider than the target's registers (64 bytes with AVX-512F, 32 with AVX, else 16) is
        shuffled in register-sized parts, each from the parts of the sources its lanes come
        from: GCC 12 spilled the whole-vector shuffles of 64-byte vectors to the stack on
        AVX2, element by element (brax's f64 [n, 2] stores). The text is made once per
        process (`_shuffle_text`: brax's ant asks for 1,400 of them, 0.4 s of printing)."""
        name = f"hf_{kind}{s}_{self.t(short, w)[3:]}"
        if name not in self.defs:
            for _cond, parts in _shuffle_tiers(short, w):
                self.load(short, w // parts)
                self.store(short, w // parts)
            self._add(name, _shuffle_text(kind, short, w, s))
        return name

    def _shuffle_definition(self, kind: str, short: str, w: int, s: int) -> str:
        """The definition of `shuffle_helper`'s function (the loads and stores it calls added
        to `self`, per tier: what `shuffle_helper` adds when the text comes cached)."""
        vt, (ct, _n) = self.t(short, w), CTYPES[short]
        name = f"hf_{kind}{s}_{vt[3:]}"
        if kind == "deint":
            sig = f"const {ct} *p, " + ", ".join(f"{vt} *o{k}" for k in range(s))
        else:
            sig = f"{ct} *p, " + ", ".join(f"{vt} v{k}" for k in range(s))
        tiers = _shuffle_tiers(short, w)
        if len(tiers) == 1:
            body = self._shuffle_body(kind, short, w, s, 1)
        else:
            body = "\n".join(
                [(f"#{'if' if k == 0 else 'elif'} {cond}" if cond else "#else") + "\n"
                 + self._shuffle_body(kind, short, w, s, parts)
                 for k, (cond, parts) in enumerate(tiers)] + ["#endif"])
        return f"static inline void {name}({sig})\n{{\n{body}\n}}"

    def _shuffle_body(self, kind: str, short: str, w: int, s: int, parts: int) -> str:
        """`shuffle_helper`'s statements with each vector cut into `parts` pieces of w/parts
        lanes (1: whole vectors)."""
        pw = w // parts
        ld, st = self.load(short, pw), self.store(short, pw)
        body = []
        srcs: list[str] = []  # piece q of source v: srcs[v * parts + q]
        if kind == "deint":
            for j in range(s):
                for q in range(parts):
                    body.append(f"    const {self.t(short, pw)} v{j}_{q} = "
                                f"{ld}(p + {j * w + q * pw});")
                    srcs.append(f"v{j}_{q}")
        elif parts == 1:
            srcs = [f"v{j}" for j in range(s)]
        else:
            for j in range(s):
                for q in range(parts):
                    idx = ", ".join(str(q * pw + x) for x in range(pw))
                    body.append(f"    const {self.t(short, pw)} v{j}_{q} = "
                                f"__builtin_shufflevector(v{j}, v{j}, {idx});")
                    srcs.append(f"v{j}_{q}")

        def piece(lanes: list[tuple[int, int]]) -> str:
            return _shuffle_tree(srcs, [(v * parts + x // pw, x % pw) for v, x in lanes], pw)

        for j in range(s):
            if kind == "deint":  # (source vector, lane) of each lane
                lanes = [divmod(lane * s + j, w) for lane in range(w)]
            else:
                lanes = [((j * w + m) % s, (j * w + m) // s) for m in range(w)]
            cut = [piece(lanes[q * pw:(q + 1) * pw]) for q in range(parts)]
            if kind == "deint":
                whole = cut[0] if parts == 1 else _concat(cut, pw)
                body.append(f"    *o{j} = {whole};")
            else:
                body += [f"    {st}(p + {j * w + q * pw}, {c});" for q, c in enumerate(cut)]
        return "\n".join(body)


def _concat(pieces: list[str], pw: int) -> str:
    """One vector of the lanes of `pieces` (each `pw` lanes) in order, by shuffles that double
    the width."""
    while len(pieces) > 1:
        w = 2 * pw
        idx = ", ".join(str(x) for x in range(w))
        pieces = [f"__builtin_shufflevector({a}, {b}, {idx})"
                  for a, b in zip(pieces[::2], pieces[1::2], strict=True)]
        pw = w
    return pieces[0]


def _shuffle_tiers(short: str, w: int) -> list[tuple[str, int]]:
    """`shuffle_helper`'s (preprocessor test, parts per vector): registers of 64, 32, then 16
    bytes, each test implying the next; a tier cutting vectors as the next does is left out."""
    n = CTYPES[short][1]
    tiers = [(cond, max(1, w * n // r)) for cond, r in
             (("defined(__AVX512F__)", 64), ("defined(__AVX__)", 32), ("", 16))]
    return [t for k, t in enumerate(tiers) if k + 1 == len(tiers) or t[1] != tiers[k + 1][1]]


@functools.lru_cache(maxsize=1024)
def _shuffle_text(kind: str, short: str, w: int, s: int) -> str:
    return VecLib()._shuffle_definition(kind, short, w, s)


def _shuffle_tree(srcs: list[str], lanes: list[tuple[int, int]], w: int) -> str:
    """A vector whose lane l is lane lanes[l][1] of srcs[lanes[l][0]], from two-input shuffles
    (`__builtin_shufflevector`), merging halves of the source set recursively."""
    used = sorted({v for v, _ in lanes})
    if len(used) == 1:
        one = srcs[used[0]]
        return f"__builtin_shufflevector({one}, {one}, {', '.join(str(x) for _, x in lanes)})"
    if len(used) == 2:
        first, second = used
        idx = [str(x if v == first else w + x) for v, x in lanes]
        return f"__builtin_shufflevector({srcs[first]}, {srcs[second]}, {', '.join(idx)})"
    half = set(used[: len(used) // 2])
    left = [(v, x) if v in half else (used[0], 0) for v, x in lanes]
    right = [(v, x) if v not in half else (used[-1], 0) for v, x in lanes]
    idx = [str(i if v in half else w + i) for i, (v, _) in enumerate(lanes)]
    return (f"__builtin_shufflevector({_shuffle_tree(srcs, left, w)}, "
            f"{_shuffle_tree(srcs, right, w)}, {', '.join(idx)})")


_FLOAT_BINARY = {Opcode.ADD: "+", Opcode.SUBTRACT: "-", Opcode.MULTIPLY: "*",
                 Opcode.DIVIDE: "/"}
_INT_WRAP = {Opcode.ADD: "+", Opcode.SUBTRACT: "-", Opcode.MULTIPLY: "*"}
_BITWISE = {Opcode.AND: "&", Opcode.OR: "|", Opcode.XOR: "^"}
_PRED_BINARY = {Opcode.ADD: "|", Opcode.MAXIMUM: "|", Opcode.OR: "|", Opcode.MULTIPLY: "&",
                Opcode.MINIMUM: "&", Opcode.AND: "&", Opcode.XOR: "^"}
_CMP = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}
_VMATH = {Opcode.EXP: "exp", Opcode.LOG: "log", Opcode.TANH: "tanh", Opcode.LOGISTIC: "logistic",
          Opcode.SIN: "sin", Opcode.COS: "cos"}


def vector_op(lib: VecLib, op: ScalarOp, arg_dtypes: list[DType], args: list[str], w: int
              ) -> str | None:
    """The vector expression (lanes of `compute_short(op.dtype)`) of `op` on vector operands
    `args` (lanes of their compute types), or None if it has no explicit vector form."""
    dt = op.dtype
    code = op.opcode
    a = [f"({x})" for x in args]
    short = compute_short(dt)
    vt = lib.t(short, w)
    narrow = dt.name in ("f16", "bf16")

    def rounded(expr: str) -> str:
        return f"{lib.half(w)['round_' + dt.name]}({expr})" if narrow else expr

    if code is Opcode.COPY:
        return a[0]
    if code is Opcode.SELECT:
        return f"{lib.select(short, w)}({a[0]}, {a[1]}, {a[2]})"
    if code is Opcode.COMPARE:
        return _compare(lib, op, arg_dtypes[0], a, w)
    if code is Opcode.CONVERT:
        return _convert(lib, arg_dtypes[0], dt, a[0], w)
    if code is Opcode.BITCAST_CONVERT:
        src = arg_dtypes[0]
        if src.bits == dt.bits and not narrow and src.name not in ("f16", "bf16") \
                and not src.is_pred and not dt.is_pred:
            return f"(({vt}){a[0]})"
        return None
    if dt.is_float:
        if code in _FLOAT_BINARY:
            return rounded(f"({a[0]} {_FLOAT_BINARY[code]} {a[1]})")
        if code is Opcode.NEGATE:
            return f"(-{a[0]})"
        if code is Opcode.ABS:
            return f"{lib.fabs(short, w)}({a[0]})"
        if code is Opcode.SIGN:
            return rounded(f"{lib.sign(short, w)}({a[0]})")
        if code in (Opcode.MAXIMUM, Opcode.MINIMUM):
            return f"{lib.minmax(short, w, code is Opcode.MAXIMUM)}({a[0]}, {a[1]})"
        if code is Opcode.CLAMP:
            mx, mn = lib.minmax(short, w, True), lib.minmax(short, w, False)
            return f"{mn}({mx}({a[1]}, {a[0]}), {a[2]})"
        if code in _VMATH and short == "f32":  # operands flushed as cexpr's math calls
            x = a[0] if code in cexpr.DAZ_SAFE_F32 else f"{lib.ftz(short, w)}({a[0]})"
            expr = rounded(f"{lib.vmath(_VMATH[code], w)}({x})")
            if code in PASSTHROUGH[short]:  # a subnormal operand is the result
                return f"{lib.sub_or(short, w)}({a[0]}, {expr})"
            return expr
        return None
    if dt.is_pred:
        if code is Opcode.IS_FINITE and arg_dtypes[0].is_float \
                and compute_short(arg_dtypes[0]) in ("f32", "f64"):
            src_short = compute_short(arg_dtypes[0])  # (f16/bf16/fp8 values: exact in f32)
            exp = "0x7f800000u" if src_short == "f32" else "0x7ff0000000000000ull"
            ut = lib.t(_utype(src_short), w)
            return f"{lib.mask_to_pred(src_short, w)}((({ut}){a[0]} & {exp}) != {exp})"
        if code in _PRED_BINARY:
            return f"({a[0]} {_PRED_BINARY[code]} {a[1]})"
        if code is Opcode.NOT:
            return f"({a[0]} ^ 1)"
        return None
    ut = lib.t(_utype(short), w)
    if code in _INT_WRAP:
        return f"(({vt})(({ut}){a[0]} {_INT_WRAP[code]} ({ut}){a[1]}))"
    if code in _BITWISE:
        return f"({a[0]} {_BITWISE[code]} {a[1]})"
    if code is Opcode.NOT:
        return f"(~{a[0]})"
    if code is Opcode.NEGATE:
        return f"(({vt})(-({ut}){a[0]}))"
    if code in (Opcode.MAXIMUM, Opcode.MINIMUM):
        return f"{lib.minmax(short, w, code is Opcode.MAXIMUM)}({a[0]}, {a[1]})"
    if code is Opcode.CLAMP:
        mx, mn = lib.minmax(short, w, True), lib.minmax(short, w, False)
        return f"{mn}({mx}({a[1]}, {a[0]}), {a[2]})"
    if code is Opcode.SIGN and dt.is_signed:  # (XLA's sign takes no unsigned operand)
        return f"(({vt})(({a[0]} < 0) - ({a[0]} > 0)))"  # comparison lanes are -1 where true
    if code in _SHIFTS:
        return _shift(lib, code, short, a, w)
    return None


_SHIFTS = (Opcode.SHIFT_LEFT, Opcode.SHIFT_RIGHT_LOGICAL, Opcode.SHIFT_RIGHT_ARITHMETIC)


def _shift(lib: VecLib, code: Opcode, short: str, a: list[str], w: int) -> str:
    """XLA's shifts lane by lane: the amount is read unsigned; at or beyond the width a logical
    shift gives 0 and an arithmetic one the sign in every bit (C leaves both undefined, so the
    amount is masked in range and the out-of-range lanes selected afterwards)."""
    vt, ut, it = lib.t(short, w), lib.t(_utype(short), w), lib.t(_itype(short), w)
    bits = 8 * CTYPES[short][1]
    usplat = lib.splat(_utype(short), w)
    amount = f"(({ut}){a[1]})"
    inside = f"(({ut})({amount} < {usplat}({bits})))"  # all ones where the amount is in range
    if code is Opcode.SHIFT_RIGHT_ARITHMETIC:
        clamped = f"(({amount} & {inside}) | ({usplat}({bits - 1}) & ~{inside}))"
        return f"(({vt})((({it}){a[0]}) >> (({it}){clamped})))"
    sym = "<<" if code is Opcode.SHIFT_LEFT else ">>"
    return f"(({vt})(((({ut}){a[0]}) {sym} ({amount} & {usplat}({bits - 1}))) & {inside}))"


def _compare(lib: VecLib, op: ScalarOp, src: DType, a: list[str], w: int) -> str | None:
    found = compare_mask(lib, op, src, a, w)
    if found is None:
        return None
    mask, short = found
    return f"{lib.mask_to_pred(short, w)}({mask})"


def compare_mask(lib: VecLib, op: ScalarOp, src: DType, a: list[str], w: int
                 ) -> tuple[str, str] | None:
    """A comparison as a lane mask (-1/0 lanes as wide as the compared type) and that type's
    short name, or None where it has no vector form."""
    sym = _CMP.get(str(op.attr("direction")))
    kind = op.attr("type")
    kind = None if kind is None else str(kind)
    if sym is None:
        return None
    short = compute_short(src)
    x, y = a
    if src.is_float and kind == "TOTALORDER":
        if src.name not in ("f32", "f64"):
            return None  # (the narrow floats' keys are their own bits: cexpr_types)
        # cprelude's hf_tokey: the bits as a signed integer, the magnitude bits flipped
        # where negative; the keys compare as integers in IEEE's total order
        it = lib.t(_itype(short), w)
        top = "0x7fffffff" if short == "f32" else "0x7fffffffffffffffll"
        x, y = (f"(({it}){v} ^ ((({it}){v} < 0) & {top}))" for v in (x, y))
        return f"({x} {sym} {y})", _itype(short)
    if src.is_integral and kind == "UNSIGNED" and src.is_signed:
        ut = lib.t(_utype(short), w)
        x, y, short = f"(({ut}){x})", f"(({ut}){y})", _utype(short)
    elif src.is_integral and kind == "SIGNED" and not src.is_signed:
        it = lib.t(_itype(short), w)
        x, y, short = f"(({it}){x})", f"(({it}){y})", _itype(short)
    return f"({x} {sym} {y})", short


def _convert(lib: VecLib, src: DType, dst: DType, x: str, w: int) -> str | None:
    s_short, d_short = compute_short(src), compute_short(dst)
    if dst.is_pred:
        zero = "0" if not src.is_float else ("0.0f" if s_short == "f32" else "0.0")
        return f"{lib.mask_to_pred(s_short, w)}({x} != {zero})"
    if src.is_float and not dst.is_float:
        return None  # saturating float -> int: lane by lane (cexpr's hf_cvt_*)
    if src.name == dst.name:
        return x
    out = convert(lib, x, s_short, d_short, w)
    if dst.name in ("f16", "bf16"):
        if src.name == "f64" and dst.name == "f16":
            return None  # rounds once from f64 (cprelude's hf_f64_to_f16)
        if (src.name in ("f16", "bf16") and src.name != dst.name) or not src.is_float \
                or src.name in ("f32", "f64"):
            return f"{lib.half(w)['round_' + dst.name]}({out})"
    return out
