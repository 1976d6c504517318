"""The element types beyond the byte-sized integers and IEEE floats, for the interpreter's
elementwise ops: sub-byte integers (s1/s2/s4, u1/u2/u4), complex numbers, and the helpers the
8- and 4-bit floats need. `elementwise.py` hands these types here.

Sub-byte integers (held one per byte by ml_dtypes) follow the same rules as the wide ones at their
own width: every result wraps to the width; `x / 0` is -1 (signed) or all ones, `INT_MIN / -1`
is `INT_MIN`, `x % 0` is `x`; shift amounts are read as unsigned and a shift by at least the width
gives 0 (or the sign fill: an arithmetic shift reads the bits as signed, for unsigned types
too); popcnt and count-leading-zeros count within the width (s4's popcnt, as XLA's CPU, the
sign-extended byte's bits). They are
computed in int64 and wrapped (`wrap`).

Complex numbers are computed in complex128 and rounded once to c64 where the result is c64 (the
float rule of `float_op`), except multiplication, XLA's formula with fused multiply-adds in the
component type (`complex_multiply`), and power; division is Smith's method with XLA's recovery
of a NaN result (zero or infinite divisor, infinite numerator), each step rounded (what the cpu
backend computes, bit for bit; XLA contracts the steps to FMAs, a last-bit difference); power
is XLA's elemental formula in the component type (`complex_power`). `sign(z)`
is each part divided by `|z|` (0 for 0);
`abs` (`hypot` of the parts), `real` and `imag` give the component type.
Comparing complex numbers is defined for EQ and NE only.

Total order (`total_order_key`) for every float type: -NaN < -inf < ... < -0 < +0 < ... < +inf <
+NaN from the raw bits, fp4 (4 bits in a byte) and e8m0 (no sign bit) included.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np

from hlofuse.ir.dtypes import DTYPES, DType, from_numpy
from hlofuse.ir.opcodes import Opcode

Op = Opcode
__all__ = [
    "DTYPES",
    "UNARY_MATH",
    "complex_abs",
    "complex_divide",
    "complex_multiply",
    "complex_power",
    "complex_rsqrt",
    "complex_sign",
    "expm1",
    "fma",
    "from_bits",
    "log1p_f64",
    "make_complex",
    "mulhi",
    "narrow_binary",
    "narrow_unary",
    "raw_bits",
    "tan",
    "tanh",
    "total_order_key",
    "wrap",
]


def wrap(x: np.ndarray, dt: DType) -> np.ndarray:
    """int64 values -> `dt` (an integer type of any width), wrapping modulo 2^bits."""
    bits = dt.bits
    u = np.asarray(x, dtype=np.int64) & ((1 << bits) - 1)
    if dt.is_signed:
        u = np.where(u >> (bits - 1) & 1, u - (1 << bits), u)
    return u.astype(dt.np)


def raw_bits(x: np.ndarray, dt: DType) -> np.ndarray:
    """The `dt.bits` bits of each element, as uint64 (sub-byte types keep their low bits)."""
    x = np.ascontiguousarray(x)
    u = x.view(np.dtype(f"u{x.dtype.itemsize}")).astype(np.uint64)
    return u & np.uint64((1 << dt.bits) - 1) if dt.bits < 64 else u


def from_bits(bits: np.ndarray, dt: DType) -> np.ndarray:
    """The inverse of `raw_bits`."""
    if dt.is_integral and dt.bits < 8:
        return wrap(np.asarray(bits, dtype=np.int64), dt)
    storage = np.dtype(f"u{dt.itemsize}")
    return np.asarray(bits, dtype=np.uint64).astype(storage).view(dt.np)


def _trunc_div(a: np.ndarray, b: np.ndarray, signed: bool, bits: int) -> np.ndarray:
    zero = b == 0
    safe = np.where(zero, 1, b)
    q = np.where((a < 0) != (safe < 0), -(np.abs(a) // np.abs(safe)), np.abs(a) // np.abs(safe))
    return np.where(zero, -1 if signed else (1 << bits) - 1, q)


def narrow_binary(op: Opcode, a: np.ndarray, b: np.ndarray, dt: DType) -> np.ndarray:
    """A binary op on a sub-byte integer type."""
    x, y = np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)
    bits = dt.bits
    simple: dict[Opcode, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
        Op.ADD: np.add, Op.SUBTRACT: np.subtract, Op.MULTIPLY: np.multiply,
        Op.AND: np.bitwise_and, Op.OR: np.bitwise_or, Op.XOR: np.bitwise_xor,
        Op.MAXIMUM: np.maximum, Op.MINIMUM: np.minimum,
    }
    if op in simple:
        return wrap(simple[op](x, y), dt)
    if op is Op.DIVIDE:
        return wrap(_trunc_div(x, y, dt.is_signed, bits), dt)
    if op is Op.REMAINDER:
        zero = y == 0
        safe = np.where(zero, 1, y)
        return wrap(np.where(zero, x, np.fmod(x, safe)), dt)
    if op is Op.POWER:
        acc = np.ones_like(x)
        base, e = x.copy(), y.copy()
        for _ in range(bits):
            acc = np.where(e & 1, acc * base, acc) & 0xFFFF
            base = (base * base) & 0xFFFF
            e = np.where(e > 0, e >> 1, 0)
        if dt.is_signed:
            acc = np.where(y < 0, np.where(x == 1, 1, 0), acc)
        return wrap(acc, dt)
    if op in (Op.SHIFT_LEFT, Op.SHIFT_RIGHT_LOGICAL, Op.SHIFT_RIGHT_ARITHMETIC):
        amount = y & ((1 << bits) - 1)
        oob = amount >= bits
        amt = np.where(oob, 0, amount)
        if op is Op.SHIFT_LEFT:
            r = np.where(oob, 0, x << amt)
        elif op is Op.SHIFT_RIGHT_LOGICAL:
            r = np.where(oob, 0, (x & ((1 << bits) - 1)) >> amt)
        else:  # on the bits read as signed (unsigned types too), sign-filled
            sx = wrap(x, DTYPES[f"s{bits}"]).astype(np.int64)
            r = np.where(oob, sx >> (bits - 1), sx >> amt)
        return wrap(r, dt)
    if op is Op.MULHI:
        return mulhi(a, b, dt)
    raise ValueError(f"{op.value} is not defined for {dt}")


def narrow_unary(op: Opcode, a: np.ndarray, dt: DType) -> np.ndarray:
    """A unary op on a sub-byte integer type."""
    x = np.asarray(a).astype(np.int64)
    bits = dt.bits
    if op is Op.NEGATE:
        return wrap(-x, dt)
    if op is Op.ABS:
        return wrap(np.abs(x), dt)
    if op is Op.SIGN:
        return wrap(np.sign(x), dt)
    if op is Op.NOT:
        return wrap(~x, dt)
    u = x & ((1 << bits) - 1)
    if op is Op.POPCNT:
        # s4 as XLA's CPU: the bits of the value sign-extended to a byte (popcnt(-1) = 8,
        # wrapped: -8; measured on all 16 values); s2 and the unsigned types count in the width
        counted = x & 0xFF if dt.name == "s4" else u
        return wrap(np.bitwise_count(counted.astype(np.uint64)).astype(np.int64), dt)
    if op is Op.CLZ:
        length = np.zeros_like(u)
        for k in range(bits):
            length = np.where(u >> k != 0, k + 1, length)
        return wrap(bits - length, dt)
    raise ValueError(f"{op.value} is not defined for {dt}")


def mulhi_shift(dt: DType) -> int:
    """How far XLA's CPU shifts the product in mulhi: the type's width, except for the 4-bit
    integers, which it shifts by a byte as if they were 8 bits wide (every value pair of s4, u4,
    s2 and u2 measured against jax.jit: s4 gives -1 for a negative product and 0 otherwise, u4
    always 0; the 2-bit types shift by 2)."""
    return 8 if dt.name in ("s4", "u4") else dt.bits


def mulhi(a: np.ndarray, b: np.ndarray, dt: DType) -> np.ndarray:
    """The high bits of the double-width product (signed for signed types), shifted as
    `mulhi_shift` says."""
    bits = mulhi_shift(dt)
    if bits <= 32:
        product = np.asarray(a).astype(np.int64) * np.asarray(b).astype(np.int64)
        return wrap(product >> bits, dt)
    x = np.asarray(a).astype(object).reshape(-1)
    y = np.asarray(b).astype(object).reshape(-1)
    high = [(int(p) * int(q)) >> bits for p, q in zip(x, y, strict=True)]
    out = np.array([h & ((1 << bits) - 1) for h in high], dtype=np.uint64)
    return out.view(dt.np).reshape(np.shape(a)) if dt.is_signed else \
        out.astype(dt.np).reshape(np.shape(a))


# ----- complex ----------------------------------------------------------------------------


def _parts(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = np.asarray(z, dtype=np.complex128)
    return z.real.copy(), z.imag.copy()


_SPLIT = 134217729.0  # 2^27 + 1: Veltkamp's splitter for f64


def fma(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """x * y + z with the product exact, as a fused multiply-add: f32 operands exactly (the
    product is exact in f64; the f64 sum rounded to f32, a rare last-bit double rounding),
    f64 operands within an ulp (Dekker's exact product, then two-sum). Non-finite results as
    IEEE's fma: the product never overflows or cancels an infinite z on its own."""
    x, y, z = np.broadcast_arrays(np.asarray(x), np.asarray(y), np.asarray(z))
    single = x.dtype == np.float32
    x, y, z = (np.asarray(v, np.float64) for v in (x, y, z))
    with np.errstate(all="ignore"):
        p = x * y
        if single:
            return np.asarray(p + z, np.float32)
        xh = _SPLIT * x - (_SPLIT * x - x)
        yh = _SPLIT * y - (_SPLIT * y - y)
        xl, yl = x - xh, y - yh
        e = ((xh * yh - p) + xh * yl + xl * yh) + xl * yl
        s = p + z
        bz = s - p
        corr = ((p - (s - bz)) + (z - bz)) + e
        r = np.where(corr == 0, s, s + corr)  # (a zero keeps p + z's sign: -0 + -0 is -0)
        r = np.where(np.isfinite(x) & np.isfinite(y) & np.isfinite(z), r, p + z)
        r = np.where(np.isinf(z) & np.isfinite(x) & np.isfinite(y), z, r)
    big = np.isfinite(x) & np.isfinite(y) & np.isfinite(z) & (
        (np.abs(x) > 2.0 ** 995) | (np.abs(y) > 2.0 ** 995) | ~np.isfinite(p)
        | ((p != 0) & (np.abs(p) < 2.0 ** -960) & (np.abs(z) < 2.0 ** -900))
        | ((p == 0) & (x != 0) & (y != 0) & (z == 0)))  # underflowed: the zero's sign is x*y's
    if np.any(big):  # outside Dekker's range: exactly, in rationals
        flat = np.array(r, dtype=np.float64).reshape(-1)
        xs, ys, zs = (v.reshape(-1) for v in (x, y, z))
        for i in np.flatnonzero(big):
            exact = Fraction(float(xs[i])) * Fraction(float(ys[i])) + Fraction(float(zs[i]))
            try:
                flat[i] = float(exact)
            except OverflowError:
                flat[i] = np.inf if exact > 0 else -np.inf
        r = flat.reshape(np.shape(r))
    return r


# Cephes' log1p rational approximation, highest degree first, as XLA's (log1p.cc)
_LOG1P_P = (4.5270000862445199635215e-5, 4.9854102823193375972212e-1, 6.5787325942061044846969,
            2.9911919328553073277375e1, 6.0949667980987787057556e1, 5.7112963590585538103336e1,
            2.0039553499201281259648e1)
_LOG1P_Q = (1.0, 1.5062909083469192043167e1, 8.3047565967967209469434e1,
            2.2176239823732856465394e2, 3.0909872225312059774938e2, 2.1642788614495947685003e2,
            6.0118660497603843919306e1)


def log1p_f64(x: np.ndarray) -> np.ndarray:
    """XLA's f64 log-plus-one (xla/codegen/intrinsic/log1p.cc): for |x| < sqrt(2) - 1 Cephes'
    rational approximation x - x^2/2 + x^3 P(x)/Q(x), its Horner steps fused multiply-adds (XLA's
    CPU always allows FMA fusion), else log(1 + x). Up to 128 ulps from the true log1p near
    |x| = 0.414 (so atanh, 0.5 * (log1p(x) - log1p(-x)), differs by a few ulps)."""
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        x2 = x * x
        num = np.full_like(x, _LOG1P_P[0])
        for c in _LOG1P_P[1:]:
            num = fma(num, x, np.full_like(x, c))
        den = np.ones_like(x)
        for c in _LOG1P_Q[1:]:
            den = fma(den, x, np.full_like(x, c))
        small = x + fma(np.full_like(x, -0.5), x2, (x * x2) * (num / den))
        large = np.log(x + 1.0)
    return np.where(np.abs(x) < 0.41421356237309504880, small, large)


def complex_multiply(a: np.ndarray, b: np.ndarray, part: type = np.float64) -> np.ndarray:
    """XLA's complex multiply (MLIR's complex.mul, contracted to fused multiply-adds on the
    CPU): re = fma(ar, br, -(ai * bi)), im = fma(ai, br, ar * bi), in the component type
    `part` (c64: f32, whose products overflow at 2^128): an infinite part does not always make
    the other NaN ((5e299+1.5e300j) * (1e300-infj) = inf-infj), no C99 Annex G recovery."""
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    ar, ai, br, bi = (np.asarray(v, part) for v in (ar, ai, br, bi))
    with np.errstate(all="ignore"):
        re = fma(ar, br, -(ai * bi))
        im = fma(ai, br, ar * bi)
    return _pack(re, im)


def complex_divide(a: np.ndarray, b: np.ndarray, part: type = np.float64,
                   flush: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Smith's method as XLA's CPU computes it: in the component type `part` (c64: f32, whose
    steps overflow at 2^128), the steps contracted to fused multiply-adds (den = fma(d, r, c);
    the numerators fma(b, r, a), fma(-a, r, b) or fma(a, r, b), fma(b, r, -a)), the parts divided by
    the denominator (a reciprocal of a huge one would be subnormal, flushed on cpu), each step
    passed through `flush` (the DAZ/FTZ emulation, `flush.py`; None keeps subnormals); measured
    bit for bit against jax.jit on 200,000 c64 pairs of magnitudes 1e-38 to 1e38. Then XLA's
    recovery (`EmitComplexDivide`, C99
    Annex G) where both parts are NaN: a zero divisor (numerator not all NaN) multiplies each
    part by copysign(inf, re b) ((1+1j) / (-0-0j) = -inf-infj); an infinite numerator over a
    finite divisor is inf times the divisor against the numerator's infinite parts reduced to
    +-1 (others +-0); a finite numerator over an infinite divisor (the other part may be NaN)
    is 0 times the numerator against the divisor's infinite parts reduced to +-1 (others
    +-0): 1 / (inf+infj) = 0."""
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    ar, ai, br, bi = (np.asarray(v, part) for v in np.broadcast_arrays(ar, ai, br, bi))
    f = flush if flush is not None else (lambda v: v)
    big = np.abs(br) >= np.abs(bi)
    with np.errstate(all="ignore"):
        rat1 = f(bi / br)
        den1 = f(fma(bi, rat1, br))
        rat2 = f(br / bi)
        den2 = f(fma(br, rat2, bi))
        re = np.where(big, f(fma(ai, rat1, ar)) / den1, f(fma(ar, rat2, ai)) / den2)
        im = np.where(big, f(fma(-ar, rat1, ai)) / den1, f(fma(ai, rat2, -ar)) / den2)
        ar, ai, br, bi, re, im = (np.asarray(v, np.float64) for v in (ar, ai, br, bi, re, im))
        nan = np.isnan(re) & np.isnan(im)
        if np.any(nan):
            inf = np.inf
            fin_a = (np.abs(ar) < inf) & (np.abs(ai) < inf)  # NaN is neither
            fin_b = (np.abs(br) < inf) & (np.abs(bi) < inf)
            inf_a, inf_b = np.isinf(ar) | np.isinf(ai), np.isinf(br) | np.isinf(bi)
            zero = (br == 0) & (bi == 0) & ~(np.isnan(ar) & np.isnan(ai))
            sb = np.copysign(inf, br)
            unit = lambda v: np.copysign(np.isinf(v).astype(np.float64), v)  # noqa: E731
            uar, uai, ubr, ubi = unit(ar), unit(ai), unit(br), unit(bi)
            case2 = inf_a & fin_b
            case3 = inf_b & fin_a
            re2, im2 = inf * (uar * br + uai * bi), inf * (uai * br - uar * bi)
            re3, im3 = 0.0 * (ar * ubr + ai * ubi), 0.0 * (ai * ubr - ar * ubi)
            re = np.where(nan, np.where(zero, sb * ar, np.where(case2, re2, np.where(
                case3, re3, re))), re)
            im = np.where(nan, np.where(zero, sb * ai, np.where(case2, im2, np.where(
                case3, im3, im))), im)
    return _pack(re, im)


def complex_power(a: np.ndarray, b: np.ndarray, part: type = np.float64,
                  angle: np.ndarray | None = None) -> np.ndarray:
    """a ** b by XLA's elemental formula (`EmitComplexPower`), each step in the component
    type `part` (f32 for c64: an f32 overflow inside it shows, (1e20+0j)^2 = inf+nanj; the
    functions computed in f64 and rounded to it):
    |a|^c * exp(-d * arg a) * (cos q + i sin q), q = c * arg a + d * log|a|, where |a| is
    XLA's complex abs (max * sqrt(1 + (min / max)^2), or min where that is NaN) and arg a is
    `angle` (default atan2(imag a, real a)); then, later rules winning: |a| = 0, d = 0,
    c >= 0 gives 1 (c = 0) or 0; b = 0 gives 1; a = 1 gives 1; a = inf + 0j with real b gives
    inf (c > 0) or 0 (c < 0). Everything else, inf and NaN operands included, is what the
    formula computes (mostly nan+nanj, where C99's cpow has inf+nanj). Returns complex128."""
    a = np.asarray(a)
    b = np.asarray(b)
    ar: np.ndarray = np.real(a).astype(part)
    ai: np.ndarray = np.imag(a).astype(part)
    br: np.ndarray = np.real(b).astype(part)
    bi: np.ndarray = np.imag(b).astype(part)
    zero, one, inf = part(0), part(1), part(np.inf)

    def fn(f: Callable[..., np.ndarray], *xs: np.ndarray) -> np.ndarray:
        # a function in f64, rounded to the part once (the cpu backend's, bit for bit nearly
        # always: |q| can be huge, where one ulp of log|a| moves sin q anywhere)
        return np.asarray(f(*(np.asarray(x, np.float64) for x in xs))).astype(part)

    with np.errstate(all="ignore"):
        big = np.maximum(np.abs(ar), np.abs(ai))  # NaN if either part is NaN
        small = np.minimum(np.abs(ar), np.abs(ai))
        ratio = small / big
        mag = big * np.sqrt(one + ratio * ratio)
        mag = np.where(np.isnan(mag), small, mag)
        arg = fn(np.arctan2, ai, ar) if angle is None else np.asarray(angle).astype(part)
        coeff = fn(np.power, mag, br) * fn(np.exp, -bi * arg)
        q = br * arg + bi * fn(np.log, mag)
        re, im = coeff * fn(np.cos, q), coeff * fn(np.sin, q)
    real_b = bi == 0
    cut = (mag == 0) & real_b & (br >= 0)
    re = np.where(cut, np.where(br == 0, one, zero), re)
    im = np.where(cut, zero, im)
    cut = ((br == 0) & real_b) | ((ar == 1) & (ai == 0))
    re, im = np.where(cut, one, re), np.where(cut, zero, im)
    inf_base = (ar == inf) & (ai == 0) & real_b
    re = np.where(inf_base & (br > 0), inf, np.where(inf_base & (br < 0), zero, re))
    im = np.where(inf_base & ((br > 0) | (br < 0)), zero, im)
    return _pack(re, im)


def _pack(re: np.ndarray, im: np.ndarray) -> np.ndarray:
    out = np.empty(np.broadcast_shapes(np.shape(re), np.shape(im)), dtype=np.complex128)
    out.real, out.imag = re, im
    return out


def complex_abs(z: np.ndarray) -> np.ndarray:
    """|z| as the C library's hypot (correctly rounded), not numpy's complex abs."""
    return np.hypot(np.real(z), np.imag(z))


def complex_rsqrt(z: np.ndarray, angle: np.ndarray | None = None) -> np.ndarray:
    """XLA's EmitComplexRsqrt (polar form): r * (cos(-t/2) + i sin(-t/2)), t = atan2(im, re),
    r = rsqrt(max) * rsqrt(sqrt(1 + (min/max)^2)) over the parts' magnitudes (rsqrt(min) where
    that is NaN); 0 gives inf+nanj, an infinite real part (or an infinite imaginary part with
    a NaN real one) gives copysign(0, re) - copysign(0, im) i. Not 1 / sqrt(z): rsqrt(1+0j) is
    1-0j, and rsqrt(inf+infj) is 0-0j where the division gives NaN (measured on jax.jit).
    `angle`: t when given (flush.py's DAZ atan2 of the unflushed parts)."""
    a, b = _parts(z)
    with np.errstate(all="ignore"):
        aa, ab = np.abs(a), np.abs(b)
        hi = np.where(np.isnan(aa) | np.isnan(ab), np.nan, np.maximum(aa, ab))
        lo = np.where(np.isnan(aa) | np.isnan(ab), np.nan, np.minimum(aa, ab))
        root = np.sqrt(1 + (lo / hi) ** 2)
        r = (1 / np.sqrt(hi)) * (1 / np.sqrt(root))
        r = np.where(np.isnan(r), 1 / np.sqrt(lo), r)
        half = (np.arctan2(b, a) if angle is None else np.asarray(angle, np.float64)) * -0.5
        re, im = r * np.cos(half), r * np.sin(half)
        edge = (np.isinf(b) & np.isnan(a)) | np.isinf(a)
        re = np.where(edge, np.copysign(0.0, a), re)
        im = np.where(edge, -np.copysign(0.0, b), im)
        zero = (a == 0) & (b == 0)
        re, im = np.where(zero, np.inf, re), np.where(zero, np.nan, im)
    return _pack(re, im)


def complex_sign(z: np.ndarray, part: type = np.float64) -> np.ndarray:
    """Each part divided by |z| (XLA's elemental sign; not a complex division, whose 1 / |z|
    underflows for huge z and which loses a zero part's sign), 0 for 0."""
    with np.errstate(over="ignore"):
        mag = np.asarray(complex_abs(z)).astype(part).astype(np.float64)
    re, im = _parts(z)
    safe = np.where(mag == 0, 1, mag)
    with np.errstate(all="ignore"):
        return np.where(mag == 0, z, _pack(re / safe, im / safe))


def tanh(x: np.ndarray) -> np.ndarray:
    """tanh; for a complex operand, XLA's CPU result where C99's differs: a zero real part
    with an infinite or NaN imaginary part gives NaN + NaN i (C99 and numpy: +-0 + NaN i;
    jax.jit measured on c64 and c128, fuzz seed 3501). Everything else is the C library's."""
    return _complex_nan_where(np.tanh(x), x, real_zero=True)


def tan(x: np.ndarray) -> np.ndarray:
    """tan; for a complex operand, XLA's CPU result where C99's differs (tan(z) is
    -i tanh(iz)): an infinite or NaN real part with a zero imaginary part gives NaN + NaN i
    (C99 and numpy: NaN +- 0 i; jax.jit measured on c64 and c128, fuzz seed 3601)."""
    return _complex_nan_where(np.tan(x), x, real_zero=False)


def expm1(x: np.ndarray) -> np.ndarray:
    """expm1; for a complex operand with a zero imaginary part, XLA's: expm1 of the real part
    (+ 0, so -0 gives +0) and a +0 imaginary part (expm1(inf + 0i) = inf + 0i and
    expm1(NaN + 0i) = NaN + 0i, where numpy gives NaN imaginary parts; fuzz seed 3801)."""
    out = np.expm1(x)
    if np.iscomplexobj(x):
        re, im = _parts(x)
        real = im == 0
        if real.any():
            with np.errstate(all="ignore"):
                fixed = _pack(np.expm1(re) + 0.0, np.zeros_like(re)).astype(out.dtype)
            out = np.where(real, fixed, out)
    return np.asarray(out)


def _complex_nan_where(out: np.ndarray, x: np.ndarray, real_zero: bool) -> np.ndarray:
    """`out` with NaN + NaN i where `x`'s real (`real_zero`; else imaginary) part is zero and
    the other part is not finite; real operands unchanged."""
    if np.iscomplexobj(x):
        re, im = _parts(x)
        zero, other = (re, im) if real_zero else (im, re)
        bad = (zero == 0) & ~np.isfinite(other)
        if bad.any():
            out = np.where(bad, np.array(complex(np.nan, np.nan), dtype=out.dtype), out)
    return np.asarray(out)


def make_complex(re: np.ndarray, im: np.ndarray, out: DType) -> np.ndarray:
    """The `complex` op: parts exactly as given (no arithmetic on infinities or NaNs)."""
    result = np.empty(np.broadcast_shapes(np.shape(re), np.shape(im)), dtype=out.np)
    result.real = re
    result.imag = im
    return result


# ----- floats -----------------------------------------------------------------------------


def total_order_key(x: np.ndarray) -> np.ndarray:
    """Signed integers ordering floats totally (module docstring), any float type."""
    x = np.asarray(x)
    dt = from_numpy(x.dtype)
    fmt = dt.float_format
    bits = raw_bits(x, dt).astype(np.int64)
    if not fmt.has_sign:
        return bits
    sign = bits >> (dt.bits - 1) & 1
    magnitude = bits & ((1 << (dt.bits - 1)) - 1)
    key = np.where(sign == 1, -magnitude - 1, magnitude)
    if dt.name.endswith("fnuz"):  # the NaN has -0's encoding; XLA orders it below everything
        key = np.where(bits == 1 << (dt.bits - 1), -(1 << (dt.bits - 1)) - 1, key)
    return key


UNARY_MATH: dict[Opcode, Callable[[np.ndarray], np.ndarray]] = {
    Op.ACOS: np.arccos,
    Op.ACOSH: np.arccosh,
    Op.ASIN: np.arcsin,
    Op.ASINH: np.arcsinh,
    Op.ATAN: np.arctan,
    Op.ATANH: np.arctanh,
    Op.COSH: np.cosh,
    Op.SINH: np.sinh,
}
