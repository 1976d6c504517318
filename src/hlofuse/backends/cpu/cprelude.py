"""The C prelude every generated file starts with: includes and the `static inline hf_*` helpers
that `cexpr` expressions call.

What the helpers guarantee (each matches `backends/interpreter/elementwise.py` bit for bit):
- f16/bf16 <-> f32 conversions are branch-free integer code (vectorizable): f16 rounds to nearest
  even with correct subnormals, overflow to inf, NaN payload kept (numpy's rule); bf16 rounds to
  nearest even, NaN keeps its top payload bits (ml_dtypes would canonicalise an f32 NaN with a
  payload, but keeping them makes load/store of any bf16 NaN the identity). f64 -> f16 rounds
  once (numpy converts directly); f64 -> bf16 goes through f32 (ml_dtypes does).
- Integer division, remainder, power, shifts, clz, abs, sign, min/max exist per integer type, done
  in unsigned arithmetic where C signed overflow would be undefined: x/0 = -1 (signed) or all ones,
  INT_MIN/-1 = INT_MIN, x%0 = x, INT_MIN%-1 = 0, shift amounts read as unsigned and >= width give 0
  (or the sign fill), negative integer exponents give 0 except for base 1.
- float -> integer converts truncate, saturate and send NaN to 0.
- Float min/max propagate NaN and return the second operand when the operands compare equal, like
  numpy's minimum/maximum (so max(-0, +0) = +0 and max(+0, -0) = -0). They and sign return an
  operand, not a computed value, so a file that flushes subnormals zeroes a subnormal result
  (`fpenv.py`: the hardware mode flushes only what it computes).
- reduce-precision follows XLA's EmitReducePrecisionIR (quiet_nans=false).
- Kernel scratch memory comes from `hf_alloc`, which never returns NULL: a failure jumps back
  to `hf_entry`, which reports it (status 3, the bytes and the kernel).
Every helper is `static inline`, so unused ones cost nothing in the object file. The helpers of
the sub-byte, complex and 8-/4-bit float types and mulhi are in `cprelude_types`. <complex.h>
is included for the C library's complex functions, with its `complex` and `I` macros undone.
"""

from __future__ import annotations

import functools

from hlofuse.backends.cpu import cprelude_types, fpenv

_INCLUDES = """\
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <complex.h>
#undef complex
#undef I
#include <stdlib.h>
#include <setjmp.h>
"""

# `HF_KERNEL` is the linkage of kernel functions: static in one whole file, a hidden global in
# the units of a split build (units.units). The prelude's state (the scratch-failure record
# below, the pool pointer) is defined by every file, except the kernel units of a split build
# (`HF_EXTERN_STATE`), which share the driver unit's.
# Scratch memory for kernels. A failed allocation never returns NULL into a kernel: it records
# the bytes and jumps back to hf_entry (driver.py), which frees its arena and returns status 3.
# Only the calling thread allocates (never inside a task run on the pool), so the jump is safe.
# sigsetjmp(.., 0): plain setjmp saves the signal mask, a system call per hf_entry.
_ALLOC = r"""
#ifndef HF_KERNEL
#define HF_KERNEL static
#endif
#if defined(__GNUC__) && !defined(__clang__)  /* kernels with guarded loads (cpu/units.py) */
#define HF_NO_IFCONV __attribute__((optimize("no-tree-loop-if-convert")))
#else
#define HF_NO_IFCONV
#endif
#define HF_HIDDEN __attribute__((visibility("hidden")))
#ifdef HF_EXTERN_STATE
extern HF_HIDDEN __thread sigjmp_buf *hf_oom_jmp;
extern HF_HIDDEN __thread int64_t hf_oom_bytes, hf_oom_kernel;
#else
HF_HIDDEN __thread sigjmp_buf *hf_oom_jmp;
HF_HIDDEN __thread int64_t hf_oom_bytes, hf_oom_kernel = -1;
#endif
__attribute__((unused)) static void *hf_alloc(size_t align, size_t bytes) {
  size_t n = bytes ? bytes : 1;
  void *p = align ? aligned_alloc(align, (n + align - 1) / align * align) : malloc(n);
  if (!p) {
    hf_oom_bytes = (int64_t)bytes;
    if (hf_oom_jmp) siglongjmp(*hf_oom_jmp, 1);
    abort();
  }
  return p;
}
"""

# Parallel loops: a kernel's parallel loop is outlined into `fn(args, lo, hi)` and run through
# this pointer. It starts serial; the executable points it at the runtime's thread pool
# (runtime.py: bounded spin, then sleep; chunks claimed from a counter).
_PARALLEL = r"""
typedef void (*hf_task_fn)(void *const *args, int64_t lo, int64_t hi);
#ifdef HF_EXTERN_STATE
extern void (*hf_parallel_ptr)(hf_task_fn, void *const *, int64_t, int64_t, int64_t, int);
#else
static void hf_parallel_serial(hf_task_fn fn, void *const *args, int64_t lo, int64_t hi,
                               int64_t step, int threads) {
  (void)step; (void)threads;
  if (lo < hi) fn(args, lo, hi);
}
__attribute__((unused)) void (*hf_parallel_ptr)(hf_task_fn, void *const *, int64_t, int64_t,
                                                int64_t, int) = hf_parallel_serial;
#endif
/* Per-thread scratch of library tasks (GEMM packing, sort offsets): the caller allocates `n`
   slots before the pool runs, each chunk claims a free one for its duration. At most
   min(threads, chunks) chunks run at once, so n = min(threads, chunks) slots always have a free
   one; a claim never waits for a descheduled thread. */
__attribute__((unused)) static int hf_slot_claim(int *busy, int n) {
  for (int s = 0;; s = s + 1 < n ? s + 1 : 0)
    if (!__atomic_load_n(&busy[s], __ATOMIC_RELAXED) &&
        !__atomic_exchange_n(&busy[s], 1, __ATOMIC_ACQUIRE))
      return s;
}
__attribute__((unused)) static void hf_slot_release(int *busy, int s) {
  __atomic_store_n(&busy[s], 0, __ATOMIC_RELEASE);
}
"""

_FLOAT_CORE = r"""
#define HF_INF __builtin_inff()
#define HF_NAN __builtin_nanf("")
static inline uint32_t hf_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float hf_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint64_t hf_f64_bits(double f) { uint64_t u; memcpy(&u, &f, 8); return u; }
static inline double hf_f64_from_bits(uint64_t u) { double f; memcpy(&f, &u, 8); return f; }

static inline float hf_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t em = (uint32_t)(h & 0x7fffu);
  /* normals, inf and NaN: the exponent rebiased; subnormals: the integer times 2^-24 (exact,
     and no subnormal operand, so right whether or not the hardware flushes them, fpenv.py) */
  uint32_t norm = ((em << 13) + 0x38000000u) | (em >= 0x7c00u ? 0x7f800000u : 0u);
  uint32_t sub = hf_f32_bits((float)em * 0x1p-24f);
  return hf_f32_from_bits((em < 0x400u ? sub : norm) | sign);
}
static inline uint16_t hf_f32_to_f16(float f) {
  uint32_t x = hf_f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  /* subnormal results: adding 0.5 aligns the f16 subnormal unit 2^-24 with the last bit */
  uint32_t sub = hf_f32_bits(hf_f32_from_bits(a) + 0.5f) - 0x3f000000u;
  uint32_t norm = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  uint32_t pay = (a >> 13) & 0x3ffu;
  uint32_t nan = 0x7c00u | pay | (pay == 0u ? 1u : 0u);
  uint32_t big = a > 0x7f800000u ? nan : 0x7c00u;
  uint32_t r = a >= 0x47800000u ? big : (a < 0x38800000u ? sub : norm);
  return (uint16_t)(r | sign);
}
static inline uint16_t hf_f64_to_f16(double d) {
  uint64_t x = hf_f64_bits(d);
  uint32_t sign = (uint32_t)(x >> 48) & 0x8000u;
  uint64_t a = x & 0x7fffffffffffffffull;
  /* 2^28 has ulp 2^-24, the f16 subnormal unit */
  uint64_t sub = hf_f64_bits(hf_f64_from_bits(a) + 0x1p+28) - 0x41b0000000000000ull;
  uint64_t norm = (a - 0x3f00000000000000ull + 0x1ffffffffffull + ((a >> 42) & 1u)) >> 42;
  uint32_t pay = (uint32_t)(a >> 42) & 0x3ffu;
  uint32_t nan = 0x7c00u | pay | (pay == 0u ? 1u : 0u);
  uint32_t big = a > 0x7ff0000000000000ull ? nan : 0x7c00u;
  uint32_t r = a >= 0x40f0000000000000ull ? big
             : (a < 0x3f10000000000000ull ? (uint32_t)sub : (uint32_t)norm);
  return (uint16_t)(r | sign);
}
static inline float hf_bf16_to_f32(uint16_t h) { return hf_f32_from_bits((uint32_t)h << 16); }
static inline uint16_t hf_f32_to_bf16(float f) {
  uint32_t x = hf_f32_bits(f);
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  /* NaN: keep the top bits (so bf16 -> f32 -> bf16 is the identity), quiet if they are 0 */
  uint32_t nan = (x >> 16) | (((x >> 16) & 0x7fu) == 0u ? 0x40u : 0u);
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : r);
}
static inline float hf_round_f16(float x) { return hf_f16_to_f32(hf_f32_to_f16(x)); }
static inline float hf_round_bf16(float x) { return hf_bf16_to_f32(hf_f32_to_bf16(x)); }
static inline float hf_round_f16_f64(double x) { return hf_f16_to_f32(hf_f64_to_f16(x)); }

static inline double hf_logistic_libm_f64(double x) {
  double e = exp(-fabs(x));
  return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}
static inline int32_t hf_tokey_f32(float f) {
  int32_t i = (int32_t)hf_f32_bits(f);
  return i < 0 ? i ^ INT32_MAX : i;
}
static inline int64_t hf_tokey_f64(double f) {
  int64_t i = (int64_t)hf_f64_bits(f);
  return i < 0 ? i ^ INT64_MAX : i;
}
"""

_FLOAT_T = r"""
/* -0 < +0 as in XLA: max(0, -0) = +0, min(0, -0) = -0 (either order); NaN wins */
static inline FT hf_max_SFX(FT a, FT b) {
  return hf_ftz_SFX((a > b || a != a || (a == b && !__builtin_signbit(a))) ? a : b);
}
static inline FT hf_min_SFX(FT a, FT b) {
  return hf_ftz_SFX((a < b || a != a || (a == b && __builtin_signbit(a))) ? a : b);
}
static inline FT hf_sign_SFX(FT x) {
  return hf_ftz_SFX((x != x || x == 0) ? x : COPYSIGN((FT)1, x));
}
static inline FT hf_sat_edge_SFX(FT x, FT lo, FT hi) {  /* +-inf at the bounds (saturate) */
  return x >= hi ? (FT)HF_INF : (x <= lo ? -(FT)HF_INF : x);
}
static inline FT hf_round_afz_SFX(FT x) {
  FT t = TRUNC(x);
  return FABS(x - t) >= (FT)0.5 ? t + COPYSIGN((FT)1, x) : t;
}
"""

_CVT = r"""
static inline IT hf_cvt_SFX_ISFX(FT x) {
  IT r = (IT)(WIDE)(x != x || x >= HI || x < LO ? 0 : x);
  r = x >= HI ? (IT)IMAX : r;
  return x < LO ? (IT)IMIN : r;
}
"""

_INT_T = r"""
static inline IT hf_div_ISFX(IT a, IT b) {
  int bad = (b == 0) | DIVOVF;
  IT q = (IT)(a / (bad ? (IT)1 : b));
  return b == 0 ? (IT)ZERODIV : (bad ? a : q);
}
static inline IT hf_rem_ISFX(IT a, IT b) {
  int bad = (b == 0) | DIVOVF;
  IT r = (IT)(a % (bad ? (IT)1 : b));
  return b == 0 ? a : r;
}
static inline IT hf_pow_ISFX(IT a, IT b) {
  if (NEGEXP) return (IT)(a == 1);
  WU acc = 1, base = (WU)(UT)a;
  UT e = (UT)b;
  while (e) { if (e & 1u) acc *= base; base *= base; e = (UT)(e >> 1); }
  return (IT)(UT)acc;
}
static inline IT hf_shl_ISFX(IT a, IT b) {
  UT n = (UT)b;
  return n >= BITS ? (IT)0 : (IT)(UT)((WU)(UT)a << (n & (BITS - 1)));
}
static inline IT hf_shrl_ISFX(IT a, IT b) {
  UT n = (UT)b;
  return n >= BITS ? (IT)0 : (IT)(UT)((UT)a >> (n & (BITS - 1)));
}
static inline IT hf_shra_ISFX(IT a, IT b) {
  UT n = (UT)b;
  return (IT)(ST)((ST)a >> (n >= BITS ? BITS - 1 : n));
}
static inline IT hf_clz_ISFX(IT a) {
  UT x = (UT)a;
  return x == 0 ? (IT)BITS : (IT)(CLZ(x) - (CLZBITS - BITS));
}
static inline IT hf_popcnt_ISFX(IT a) { return (IT)POPCOUNT((UT)a); }
static inline IT hf_abs_ISFX(IT a) { return ABSEXPR; }
static inline IT hf_sign_ISFX(IT a) { return SIGNEXPR; }
static inline IT hf_max_ISFX(IT a, IT b) { return a > b ? a : b; }
static inline IT hf_min_ISFX(IT a, IT b) { return a < b ? a : b; }
"""

_RP = r"""
static inline UT hf_rp_bits_BITS(UT x, int64_t e, int64_t m) {
  if (m < MAN) {
    int64_t shift = MAN - m;
    UT last = (UT)((UT)1 << shift);
    UT bias = (UT)(((x & last) >> shift) + (((UT)1 << (shift - 1)) - 1u));
    x = (UT)((x + bias) & (UT)~(UT)(last - 1u));
  }
  if (e < EXP) {
    UT ebias = (UT)(((UT)1 << (EXP - 1)) - 1u);
    UT rbias = (UT)(((UT)1 << (e - 1)) - 1u);
    UT maxe = (UT)((ebias + rbias) << MAN), mine = (UT)((ebias - rbias) << MAN);
    UT xe = (UT)(x & EMASK), sz = (UT)(x & SMASK);
    x = xe > maxe ? (UT)(sz | EMASK) : x;
    x = xe <= mine ? sz : x;
  }
  return x;
}
"""

_RP_WRAP = r"""
static inline float hf_reduce_precision_f16(float f, int64_t e, int64_t m) {
  uint16_t x = hf_f32_to_f16(f);
  float r = hf_f16_to_f32(hf_rp_bits_16(x, e, m));
  return f != f ? f : r;  /* NaN stays NaN, m = 0 too (jax.jit) */
}
static inline float hf_reduce_precision_f32(float f, int64_t e, int64_t m) {
  float r = hf_f32_from_bits(hf_rp_bits_32(hf_f32_bits(f), e, m));
  return f != f ? f : r;  /* NaN stays NaN, m = 0 too (jax.jit) */
}
static inline double hf_reduce_precision_f64(double f, int64_t e, int64_t m) {
  double r = hf_f64_from_bits(hf_rp_bits_64(hf_f64_bits(f), e, m));
  return f != f ? f : r;
}
"""

_INT_TYPES = {  # name: (C type, bits, signed)
    "s8": ("int8_t", 8, True),
    "s16": ("int16_t", 16, True),
    "s32": ("int32_t", 32, True),
    "s64": ("int64_t", 64, True),
    "u8": ("uint8_t", 8, False),
    "u16": ("uint16_t", 16, False),
    "u32": ("uint32_t", 32, False),
    "u64": ("uint64_t", 64, False),
}


def _fill(template: str, subs: dict[str, str]) -> str:
    # longest keys first so e.g. ISFX is replaced before SFX
    for key in sorted(subs, key=len, reverse=True):
        template = template.replace(key, subs[key])
    return template


def _int_helpers(name: str) -> str:
    ct, bits, signed = _INT_TYPES[name]
    ut = f"uint{bits}_t"
    st = f"int{bits}_t"
    wu = "uint64_t" if bits == 64 else "uint32_t"
    return _fill(
        _INT_T,
        {
            "ISFX": name,
            "IT": ct,
            "UT": ut,
            "ST": st,
            "WU": wu,
            "BITS": str(bits),
            "CLZBITS": "64" if bits == 64 else "32",
            "CLZ": "__builtin_clzll" if bits == 64 else "__builtin_clz",
            "POPCOUNT": "__builtin_popcountll" if bits == 64 else "__builtin_popcount",
            "DIVOVF": f"((a == INT{bits}_MIN) & (b == -1))" if signed else "0",
            "ZERODIV": "-1" if signed else f"UINT{bits}_MAX",
            "NEGEXP": "b < 0" if signed else "0",
            "ABSEXPR": f"(IT)(a < 0 ? ({wu})0 - ({wu})a : ({wu})a)" if signed else "a",
            "SIGNEXPR": "(IT)((a > 0) - (a < 0))" if signed else "(IT)(a != 0)",
        },
    ).replace("IT", ct)


def _cvt_helpers(fsfx: str) -> str:
    ft = "float" if fsfx == "f32" else "double"
    suffix = "f" if fsfx == "f32" else ""
    out = []
    for name, (ct, bits, signed) in _INT_TYPES.items():
        if signed:
            hi, lo = f"0x1p{bits - 1}{suffix}", f"-0x1p{bits - 1}{suffix}"
            imax, imin = f"INT{bits}_MAX", f"INT{bits}_MIN"
            wide = "int64_t" if bits == 64 else "int32_t"
        else:
            hi, lo = f"0x1p{bits}{suffix}", f"0{'.0f' if suffix else '.0'}"
            imax, imin = f"UINT{bits}_MAX", "0"
            wide = "uint64_t" if bits >= 32 else "int32_t"
        out.append(
            _fill(
                _CVT,
                {"SFX": fsfx, "ISFX": name, "IT": ct, "FT": ft, "HI": f"({hi})", "LO": f"({lo})",
                 "IMAX": imax, "IMIN": imin, "WIDE": wide},
            )
        )
    return "".join(out)


def _float_helpers(fsfx: str) -> str:
    f32 = fsfx == "f32"
    return _fill(
        _FLOAT_T,
        {"SFX": fsfx, "FT": "float" if f32 else "double",
         "COPYSIGN": "copysignf" if f32 else "copysign",
         "TRUNC": "truncf" if f32 else "trunc", "FABS": "fabsf" if f32 else "fabs"},
    )


def _rp_helpers() -> str:
    out = []
    for bits, (exp, man) in ((16, (5, 10)), (32, (8, 23)), (64, (11, 52))):
        ut = f"uint{bits}_t"
        smask = 1 << (bits - 1)
        emask = ((1 << exp) - 1) << man
        suffix = "ull" if bits == 64 else "u"
        out.append(
            _fill(_RP, {"UT": ut, "BITS": str(bits), "MAN": str(man), "EXP": str(exp),
                        "EMASK": f"(UT){emask:#x}{suffix}", "SMASK": f"(UT){smask:#x}{suffix}"})
            .replace("UT", ut)
        )
    return "".join(out) + _RP_WRAP


@functools.cache
def helpers() -> str:
    """The helper functions (no includes, no mathlib)."""
    parts = [_ALLOC, fpenv.C, _PARALLEL, _FLOAT_CORE, _float_helpers("f32"),
             _float_helpers("f64")]
    parts += [_cvt_helpers("f32"), _cvt_helpers("f64")]
    parts += [_int_helpers(name) for name in _INT_TYPES]
    parts.append(_rp_helpers())
    parts.append(cprelude_types.helpers())
    return "".join(parts)


def includes() -> str:
    return _INCLUDES
