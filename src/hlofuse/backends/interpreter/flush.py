"""`subnormals="flush"` in the interpreter: XLA's CPU runtime (FTZ and DAZ set) emulated op by op.

    rule(instr) -> Rule | None    which operands a step flushes before it runs and whether it
                                  flushes its result (None: the op never flushes)
    run(rule, handler, ...)       a step's value under its rule (the evaluation loop's call)
    flush(value)                  subnormal f32/f64/bf16 elements (and c64/c128 parts) of an
                                  array, or of a tuple's arrays, replaced by zeros of their sign

The evaluation loop (`core.Interpreter`) applies the rule of each step when the interpreter
flushes; nothing runs when it keeps subnormals. Conditions enforced (each measured against
jax.jit on CPU, `backends/subnormals.py` says which types flush):
- an arithmetic op (everything not in `MOVES`) reads flushed operands and its result is
  flushed: `x * 1`, `x + 0`, `x == 0`, max/min/clamp, sign, rounding, conversions that compute
  (f32 -> f64, f64 -> f32, float -> pred) and reductions, dots and convolutions as a whole;
- ops that only move or reinterpret bits (`MOVES`: data movement, select, negate, abs of a
  real number, bitcast-convert, reduce-precision, sort, f32 <-> bf16, e8m0 <-> f32/bf16,
  e8m0 -> f64/complex and real -> complex
  conversion, a TOTALORDER compare) do not, and neither do calls, loops, fusions and maps
  themselves: the ops inside them do;
- remainder flushes only its divisor (XLA's fmod keeps a subnormal dividend exactly);
- real `power` (f32, f64, bf16) does not flush its operands: XLA calls the C library's `pow`,
  which tells zeros, signs and integers apart by the operands' bits and only then computes
  under DAZ (`daz_power`): pow(-2, 1e-310) is NaN, not pow(-2, 0) = 1, and a subnormal base
  weighs 2^-150 (f32, bf16) or 2^-1075 (f64) whatever its mantissa; the result is flushed;
- real `atan2` (f32, f64, bf16) does not flush its operands either: XLA calls the C library's
  `atan2f` / `atan2` (glibc), which tests NaNs, zeros, infinities (and x = 1 in atan2f) by the
  operands' bits and computes the rest under DAZ (`daz_atan2`); its result is flushed, except
  atan2f(y, 1) = y, which glibc returns unchanged (a subnormal stays);
- real `cbrt` of f32 and bf16 does not flush its operand: XLA's CPU gives every nonzero
  subnormal the constant -5.595173541877215e-16 (`daz_cbrt`, measured), f64 flushes;
- complex `power` reads its operands flushed except in the argument of the base, atan2(imag,
  real), which follows `daz_atan2` on the unflushed parts ((-2+1e-310j)^0.5 is -1.414j in
  c128: atan2 gives -pi; +1.414j in c64: atan2f gives +pi); its result is flushed; so does
  complex `rsqrt` (XLA's polar form, `numerics.complex_rsqrt`); complex `divide` reads its
  operands flushed and flushes each step of Smith's method (`numerics.complex_divide`);
- real `sin`, `tan`, `expm1` (f32, bf16, f64) and `tanh` (f32, bf16) return a subnormal
  operand unflushed (`subnormals.PASSTHROUGH`; jax.jit on every size measured, 4,000 subnormal
  bit patterns of each sign); the rest of their operands are read flushed;
- an f8e8m0fnu arithmetic op runs as XLA's CPU runs it (`Via`): the same op on f32 (e8m0 ->
  f32 on the bits, so the smallest value 2^-127 is an f32 subnormal) under the f32 rules
  above, the result converted back by its bits (f32 0 is NaN in e8m0): 2^-127 + 2^-127,
  2^-127 * y, min(2^-127, y) and sqrt(2^-127) are NaN, sin(2^-127) and fmod(2^-127, y) are
  2^-127. Measured on every pair of encodings and every encoding of the unary ops; besides,
  (`subnormals.E8M0_UNFLUSHED`) ceil, floor, the roundings and sign read 2^-127 unflushed
  (ceil and sign give 1), and (`subnormals.E8M0_FOLDED`) where the other operands are scalar
  constants, the op on 2^-127 is exact (2^-127 * 2 = 2^-126: LLVM folds it at compile time) and
  a division by a constant c multiplies by 1 / c (1 / 2^-127 is NaN);
- scatter's untouched elements move unchanged; its combiner flushes (`indexing.combine_at`).
Not emulated: intermediate values inside one op (a reduction's partial sums, a dot's products)
are not flushed, only its operands and its result. f32 `log` of a subnormal: jax.jit gives
-inf (the flushed operand's log, as here) or log(2^-150) = -103.97 (glibc's logf under DAZ;
NaN for a negative subnormal) depending on the array's size and the element's position, not
on the value (-inf for 16 elements and more and every 2-D array measured). e8m0 fmod(2^-127,
c) for a constant c >= 1 is NaN in jax.jit (2^-127 here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from hlofuse.backends.interpreter.numerics import complex_divide, complex_power, complex_rsqrt
from hlofuse.backends.subnormals import E8M0_FOLDED, E8M0_UNFLUSHED, FLUSH_TYPES, PASSTHROUGH
from hlofuse.ir.dtypes import DTYPES, F32, DType, from_numpy
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import ASYNC_OPS, COLLECTIVES, OPCODES, Category, Opcode
from hlofuse.ir.shape import ArrayShape, Shape, TupleShape

# Ops that move or reinterpret values without computing on them (or run a computation whose
# own ops flush): never flushed. From the op table: every data-movement, structural, control,
# opaque and collective op (one device: they move values), except the two that reduce, plus
# the elementwise ops that only move or test bits.
_MOVING = (Category.BROADCAST, Category.INJECTIVE, Category.DATA, Category.CONTROL,
           Category.STRUCTURAL, Category.OPAQUE)
MOVES = frozenset(
    {op for op, info in OPCODES.items() if info.category in _MOVING} | COLLECTIVES | ASYNC_OPS
    | {Opcode.SELECT, Opcode.NEGATE, Opcode.ABS, Opcode.REAL, Opcode.IMAG, Opcode.COMPLEX,
       Opcode.IS_FINITE, Opcode.REDUCE_PRECISION, Opcode.BITCAST_CONVERT, Opcode.COPY}
) - {Opcode.SCAN, Opcode.COLLECTIVE_REDUCE}
# Conversions that are bit operations in XLA (a bf16 is the top half of an f32); identities and
# a real number becoming a complex one of its precision are moves too.
BIT_CONVERSIONS = frozenset({("f32", "bf16"), ("bf16", "f32")}
                            # e8m0 <-> f32/bf16 on the bits too (XLA keeps 2^-127 and reads an
                            # f32 subnormal's bits; measured against jax.jit)
                            | {(a, b) for a in ("f32", "bf16") for b in ("f8e8m0fnu",)}
                            | {(b, a) for a in ("f32", "bf16", "f64", "c64", "c128")
                               for b in ("f8e8m0fnu",)})

# Ops whose real result is never subnormal when their operands are not: one of the operands,
# an integral value, or a root of a normal number. Their results need no second look.
NO_NEW_SUBNORMALS = frozenset({
    Opcode.COMPARE, Opcode.MAXIMUM, Opcode.MINIMUM, Opcode.CLAMP, Opcode.SIGN, Opcode.FLOOR,
    Opcode.CEIL, Opcode.ROUND_AFZ, Opcode.ROUND_EVEN, Opcode.SQRT, Opcode.RSQRT, Opcode.CBRT,
})

# (exponent mask, sign mask, unsigned view) of each flushed real type's bits.
_MASKS: dict[str, tuple[int, int, str]] = {
    "bf16": (0x7F80, 0x8000, "u2"),
    "f32": (0x7F800000, 0x80000000, "u4"),
    "f64": (0x7FF0000000000000, 0x8000000000000000, "u8"),
}


@dataclass(frozen=True)
class Rule:
    """What one step flushes: the operand positions read flushed, and whether the result is."""

    operands: tuple[int, ...]
    result: bool
    # computes the step instead of its handler, from the unflushed operands (real power)
    compute: Callable[[list[Any]], Any] | None = None
    # an e8m0 op: computed as XLA's CPU computes it, on f32 values (`Via`)
    via: Via | None = None

    def acts(self) -> bool:
        """Whether the rule does anything."""
        return bool(self.operands or self.result or self.compute or self.via)


def _flushes(shape: Shape) -> bool:
    if isinstance(shape, TupleShape):
        return any(_flushes(s) for s in shape.elements)
    return isinstance(shape, ArrayShape) and shape.dtype.name in FLUSH_TYPES


def _dtype(shape: Shape) -> DType | None:
    return shape.dtype if isinstance(shape, ArrayShape) else None


def rule(instr: Instruction) -> Rule | None:
    """The flushing of `instr` under `subnormals="flush"` (None: nothing to flush)."""
    op = instr.opcode
    src = _dtype(instr.operand(0).shape) if instr.operand_count else None
    if op in MOVES and not (op is Opcode.ABS and src is not None and src.is_complex):
        return None
    if op is Opcode.COMPARE and str(instr.attrs.get("type", "")).upper() == "TOTALORDER":
        return None
    if op is Opcode.COMPARE and src is not None and src.name == "bf16" and \
            str(instr.attrs.get("direction", "")) in ("EQ", "NE") and any(
                (c := _scalar_constant(o)) is not None and float(c.reshape(())) == 0.0
                for o in instr.operands):
        return None  # == / != a constant zero: a bit test in XLA, a bf16 subnormal is nonzero
    shape0 = instr.operand(0).shape if instr.operand_count else None
    if op is Opcode.REDUCE and isinstance(shape0, ArrayShape) and all(
            shape0.dims[int(d)] == 1 for d in instr.dimensions):
        return None  # one element per output: a reshape in XLA (reductions.py), not flushed
    if op is Opcode.CONVERT:
        dst = _dtype(instr.shape)
        if src is None or dst is None or src == dst or dst.component == src \
                or (src.name, dst.name) in BIT_CONVERSIONS:
            return None
    elif _is_e8m0_arithmetic(instr):
        return _e8m0_rule(instr)
    operands = tuple(i for i, o in enumerate(instr.operands) if _flushes(o.shape))
    if src is not None and op in PASSTHROUGH.get(src.name, ()):
        return Rule((), False, partial(_passthrough_step, _FUNCTIONS[op]))
    if op is Opcode.POWER and src is not None and src.name in _MASKS:
        return Rule((), True, _power_step)
    if op is Opcode.ATAN2 and src is not None and src.name in _MASKS:
        return Rule((), False, _atan2_step)
    if op is Opcode.CBRT and src is not None and src.name in ("f32", "bf16"):
        return Rule((), False, _cbrt_step)
    if op is Opcode.POWER and src is not None and src.is_complex:
        return Rule((), True, _complex_power_step)
    if op is Opcode.RSQRT and src is not None and src.is_complex:
        return Rule((), True, _complex_rsqrt_step)
    if op is Opcode.DIVIDE and src is not None and src.is_complex:
        return Rule(operands, True, _complex_divide_step)
    if op is Opcode.REMAINDER:
        operands = tuple(i for i in operands if i == 1)
        result = False
    elif op is Opcode.CONVERT:  # only a narrowing float conversion makes new subnormals
        assert src is not None and dst is not None
        result = _flushes(instr.shape) and src.is_inexact and \
            dst.component.bits < src.component.bits
    else:
        out = _dtype(instr.shape)
        result = _flushes(instr.shape) and (
            op not in NO_NEW_SUBNORMALS or out is None or out.is_complex)
    if not operands and not result:
        return None
    return Rule(operands, result)


def run(rule: Rule, handler: Callable[[Any, Instruction, list[Any]], Any], interp: Any,
        instr: Instruction, args: list[Any]) -> Any:
    """The value of `instr` on `args` (its operands' values, a list it may change) under `rule`:
    `handler(interp, instr, args)` computes an instruction (the interpreter's handler of its
    opcode)."""
    if rule.via is not None:  # e8m0: the f32 op on the f32 values, converted back
        return rule.via.run(handler, interp, args)
    for i in rule.operands:
        args[i] = flush(args[i])
    value = handler(interp, instr, args) if rule.compute is None else rule.compute(args)
    return flush(value) if rule.result else value


def flush(value: Any) -> Any:
    """`value` with subnormal elements of the flushed types replaced by zeros of their sign (the
    same object when it has none)."""
    if isinstance(value, tuple):
        return tuple(flush(v) for v in value)
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "fcV":
        return value
    dt = from_numpy(value.dtype)
    if dt.name not in FLUSH_TYPES:
        return value
    if dt.is_complex:
        parts = np.ascontiguousarray(value).reshape(-1).view(dt.component.np)
        flushed = flush(parts)
        return value if flushed is parts else flushed.view(value.dtype).reshape(value.shape)
    tiny, bits = _subnormal(value, dt.name)
    if not tiny.any():
        return value
    u = bits.dtype.type
    out = np.where(tiny, bits & u(_MASKS[dt.name][1]), bits).astype(bits.dtype, copy=False)
    return out.view(value.dtype).reshape(value.shape)


def _subnormal(value: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(which elements of a real `name` array are subnormal, the array's bits)."""
    exp, sign, view = _MASKS[name]
    # (ascontiguousarray makes a 0-d array 1-d: the bits keep the value's shape)
    bits = np.ascontiguousarray(value).view(view).reshape(np.shape(value))
    u = bits.dtype.type
    # subnormal: magnitude bits in [1, smallest normal); as unsigned, magnitude - 1 below
    # smallest normal - 1 (a zero wraps around to the largest value)
    tiny = (bits & u(~sign & (2 ** (8 * bits.itemsize) - 1))) - u(1) < u((exp & -exp) - 1)
    return tiny.reshape(np.shape(value)), bits


def daz_power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Real `power` as XLA's CPU computes it with DAZ set (the C library's `pow`, glibc 2.28
    and later, measured against jax.jit): special cases by the operands' bits, so a subnormal
    exponent is a nonzero non-integer (it acts as the smallest normal number of its sign, which
    gives the same results) and a negative base with it is NaN; a subnormal base keeps its sign
    and weighs half the smallest subnormal, 2^-150 (f32, bf16: computed as f32) or 2^-1075
    (f64), whatever its mantissa (pow scales it by 2^23 / 2^52, which DAZ reads as zero, and
    its exponent arithmetic then lands there). The result is not flushed here."""
    name = from_numpy(a.dtype).name
    wide = "f64" if name == "f64" else "f32"
    sub_x = _subnormal(a, name)[0]
    sub_y = _subnormal(b, name)[0]
    x = np.asarray(a, np.float64)
    y = np.asarray(b, np.float64)
    normal = 2.0 ** -1022 if wide == "f64" else 2.0 ** -126
    y = np.where(sub_y, np.copysign(normal, y), y)
    with np.errstate(all="ignore"):
        if wide == "f32":  # 2^-150 is a normal f64
            x = np.where(sub_x, np.copysign(2.0 ** -150, x), x)
            return np.asarray(np.power(x, y)).astype(a.dtype)
        # 2^-1075 = 2^-1022 * 2^-53; when the first factor's power is subnormal, so is the
        # result (1022 / 1074 > 1022 / 1075), which is flushed
        x = np.where(sub_x, np.copysign(normal, x), x)
        scale = np.where(sub_x, np.power(2.0 ** -53, y), 1.0)
        return np.asarray(np.power(x, y) * scale).astype(a.dtype)


def _power_step(args: list[Any]) -> Any:
    return daz_power(args[0], args[1])


# glibc's atan2f constants (fdlibm): pi/2 and the low part of pi, as f32
_PIO2_F32 = np.uint32(0x3FC90FDB).view(np.float32)
_PI_F32 = np.uint32(0x40490FDB).view(np.float32)
_PI_LO_F32 = np.uint32(0xB3BBBD2E).view(np.float32)


def daz_atan2(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Real `atan2(a, b)` (y, x) as XLA's CPU computes it with DAZ set (glibc's `atan2f` for
    f32 and bf16, `atan2` for f64; measured against jax.jit), flushed. Wherever an operand is
    subnormal and neither is NaN:
    - f32: x = 1 returns y itself (a subnormal result kept); x = +-0 gives +-pi/2 (sign of y);
      both subnormal is NaN (y / x is 0 / 0 under DAZ); a subnormal x under a normal y gives
      pi/2 (x > 0) or pi - (pi/2 - pi_lo) = 0x3fc90fda (x < 0), with y's sign; a subnormal y
      over a normal x is the flushed y's atan2 (+-0, +-pi);
    - f64: x subnormal or zero with y nonzero by its bits gives +-pi/2 (sign of y: glibc tests
      `x == 0`, true under DAZ); y subnormal over a negative x with |x| >= 2^-966 gives -pi
      whatever y's sign (glibc's `y > 0 ? pi : -pi` is false under DAZ); otherwise the
      flushed operands' atan2.
    Zeros of y and infinities follow IEEE atan2 in both."""
    name = from_numpy(a.dtype).name
    sub_y, ybits = _subnormal(a, name)
    sub_x, xbits = _subnormal(b, name)
    with np.errstate(all="ignore"):  # in f64, rounded once (the interpreter's `float_op`)
        wide = np.arctan2(np.asarray(flush(a), np.float64), np.asarray(flush(b), np.float64))
    out = flush(np.asarray(wide).astype(a.dtype))
    if not (sub_y.any() or sub_x.any()):
        return out
    exp, sign, _ = _MASKS[name]
    u = ybits.dtype.type
    mag_y = ybits & u(sign - 1)
    mag_x = xbits & u(sign - 1)
    neg_y = (ybits & u(sign)) != 0
    neg_x = (xbits & u(sign)) != 0
    finite_y = mag_y < u(exp)
    nan = (mag_y > u(exp)) | (mag_x > u(exp))
    out = out.astype(a.dtype, copy=True)
    if name == "f64":
        half = np.where(neg_y, -np.pi / 2, np.pi / 2)
        out = np.where(~nan & (mag_y != 0) & (sub_x | (mag_x == 0)), half, out)
        big_neg_x = neg_x & ~sub_x & (mag_x >> u(52) >= u(57)) & (mag_x < u(exp))
        out = np.where(~nan & sub_y & big_neg_x, -np.pi, out)
        return out.astype(a.dtype)
    # f32 and bf16 (atan2f on the f32 values; a bf16 subnormal is an f32 subnormal)
    f32 = np.float32
    x32 = np.asarray(b, f32)
    pio2_neg = f32(_PI_F32 - f32(_PIO2_F32 - _PI_LO_F32))
    half = np.where(neg_y, -_PIO2_F32, _PIO2_F32).astype(f32)
    half_neg = np.where(neg_y, -pio2_neg, pio2_neg).astype(f32)
    wide = out.astype(f32)
    wide = np.where(sub_y & (mag_x == 0), half, wide)
    wide = np.where(sub_x & ~sub_y & (mag_y != 0) & finite_y,
                    np.where(neg_x, half_neg, half), wide)
    wide = np.where(sub_x & sub_y, f32(np.nan), wide)
    wide = np.where(sub_y & (x32 == f32(1.0)), np.asarray(a, f32), wide)
    return wide.astype(a.dtype)


def _atan2_step(args: list[Any]) -> Any:
    return daz_atan2(args[0], args[1])


# XLA's CPU cbrt (f32, bf16 computed as f32) of any nonzero subnormal under DAZ
_CBRT_SUBNORMAL_F32 = np.uint32(0xA6214518).view(np.float32)  # -5.595173541877215e-16


def daz_cbrt(a: np.ndarray) -> np.ndarray:
    """Real `cbrt` of f32 or bf16 as XLA's CPU computes it with DAZ set (measured against
    jax.jit on every f32 subnormal exponent and 4092 random bit patterns): a nonzero subnormal
    of either sign gives the constant -5.595173541877215e-16 (0xa6214518; bf16: that value
    rounded, -5.585809592645319e-16), the rest the cube root (of a normal number: never
    subnormal, so nothing to flush)."""
    name = from_numpy(a.dtype).name
    sub = _subnormal(a, name)[0]
    with np.errstate(all="ignore"):  # in f64, rounded once (the interpreter's `float_op`)
        out = np.asarray(np.cbrt(np.asarray(flush(a), np.float64))).astype(a.dtype)
    if not sub.any():
        return out
    return np.where(sub, _CBRT_SUBNORMAL_F32.astype(a.dtype), out).astype(a.dtype)


def _cbrt_step(args: list[Any]) -> Any:
    return daz_cbrt(np.asarray(args[0]))


_FUNCTIONS: dict[Opcode, Callable[[np.ndarray], np.ndarray]] = {
    Opcode.SIN: np.sin, Opcode.TAN: np.tan, Opcode.TANH: np.tanh, Opcode.EXPM1: np.expm1}


def _passthrough_step(fn: Callable[[np.ndarray], np.ndarray], args: list[Any]) -> Any:
    """`fn` of the flushed operand in f64, rounded once and flushed; a subnormal operand is
    its own result."""
    x = np.asarray(args[0])
    sub = _subnormal(x, from_numpy(x.dtype).name)[0]
    with np.errstate(all="ignore"):  # the interpreter's `float_op`
        out = flush(np.asarray(fn(np.asarray(flush(x), np.float64))).astype(x.dtype))
    return np.where(sub, x, out).astype(x.dtype) if sub.any() else out


E8M0 = DTYPES["f8e8m0fnu"].np
_E8M0_TINY = 2.0 ** -127
_PASSES = (Opcode.BROADCAST, Opcode.RESHAPE, Opcode.BITCAST, Opcode.COPY)


@dataclass(frozen=True)
class Via:
    """An e8m0 op as XLA's CPU computes it: `instr`, the same op on f32 values, under `rule`
    (None: no flushing); where operand `folded` is 2^-127 (the others being constants), the
    exact op instead; with `reciprocal`, a division by a constant as a multiplication by its
    reciprocal (an e8m0 constant too)."""

    instr: Instruction
    rule: Rule | None
    folded: int | None
    reciprocal: bool = False

    def run(self, handler: Callable[[Any, Instruction, list[Any]], Any], interp: Any,
            args: list[Any]) -> np.ndarray:
        wide = [np.asarray(a).astype(np.float32) for a in args]
        if self.reciprocal:  # x / c as x * (1 / c), the reciprocal an e8m0 constant too
            with np.errstate(all="ignore"):  # (1 / 2^-127 is NaN: computed under DAZ)
                wide[1] = f32_to_e8m0(np.where(wide[1] == np.float32(_E8M0_TINY), np.inf,
                                               1 / wide[1].astype(np.float64))
                                      ).astype(np.float32)
        value = handler(interp, self.instr, list(wide)) if self.rule is None \
            else run(self.rule, handler, interp, self.instr, list(wide))
        if self.folded is not None:
            tiny = wide[self.folded] == np.float32(_E8M0_TINY)
            if tiny.any():
                exact = handler(interp, self.instr, list(wide))
                value = np.where(tiny, exact, value)
        return f32_to_e8m0(value)


def runs_e8m0_ops(flushing: bool, arrays: Any) -> bool:
    """Under `subnormals="flush"`, is any of `arrays` f8e8m0fnu? (Its ops then run as XLA's f32
    ops under DAZ, through `Via`, never as numpy's e8m0 arithmetic.)"""
    return flushing and any(np.asarray(a).dtype == E8M0 for a in arrays)


def f32_to_e8m0(x: Any) -> np.ndarray:
    """f32 -> f8e8m0fnu as XLA converts: an f32 subnormal by its bits (2^-127 and below:
    encoding 0, above: 1), zero, negatives, inf and NaN to NaN, the rest rounded as ml_dtypes
    (a power of two, half up)."""
    x = np.asarray(x, np.float32)
    bits = np.ascontiguousarray(x).view(np.uint32).reshape(x.shape)
    out = x.astype(np.float64).astype(E8M0).view(np.uint8)
    tiny = (bits != 0) & (bits < 0x800000)
    if tiny.any():
        out = np.where(tiny, (bits > 0x400000).astype(np.uint8), out).astype(np.uint8)
    return out.view(E8M0).reshape(x.shape)


def _is_e8m0_arithmetic(instr: Instruction) -> bool:
    """An elementwise op computing an f8e8m0fnu result from f8e8m0fnu operands (moves excluded
    by the caller)."""
    out = _dtype(instr.shape)
    if out is None or out.name != "f8e8m0fnu" or not instr.operand_count \
            or OPCODES[instr.opcode].category is not Category.ELEMENTWISE:
        return False
    return all((d := _dtype(o.shape)) is not None and d.name == "f8e8m0fnu"
               for o in instr.operands)


def _scalar_constant(instr: Instruction) -> np.ndarray | None:
    """The value of a scalar constant `instr` is (through broadcasts and reshapes), or None."""
    while instr.opcode in _PASSES and instr.operand_count == 1:
        instr = instr.operand(0)
    value = instr.literal if instr.opcode is Opcode.CONSTANT else None
    return value if isinstance(value, np.ndarray) and value.size == 1 else None


def _e8m0_rule(instr: Instruction) -> Rule:
    """The f32 instruction XLA's CPU computes an e8m0 op as (on f32 parameters of the operands'
    dimensions, the same attributes), with its flushing and folding (`subnormals.E8M0_*`)."""
    op = instr.opcode
    consts = [_scalar_constant(o) for o in instr.operands]
    runtime = [i for i, c in enumerate(consts) if c is None]
    folded = runtime[0] if op in E8M0_FOLDED and len(consts) > 1 and len(runtime) == 1 \
        else None
    reciprocal = op is Opcode.DIVIDE and consts[1] is not None  # x * (1 / c), as XLA
    params = [Instruction.create(Opcode.PARAMETER, ArrayShape(F32, _dims(o.shape)),
                                 name=f"p{i}", parameter_number=i)
              for i, o in enumerate(instr.operands)]
    via = Instruction.create(Opcode.MULTIPLY if reciprocal else op,
                             ArrayShape(F32, _dims(instr.shape)), params, name=instr.name,
                             attrs=instr.attrs)
    inner = None if op in E8M0_UNFLUSHED else rule(via)
    return Rule((), False, via=Via(via, inner, folded, reciprocal))


def _dims(shape: Shape) -> tuple[int, ...]:
    assert isinstance(shape, ArrayShape)
    return shape.dims


def _complex_rsqrt_step(args: list[Any]) -> Any:
    a = np.asarray(args[0])
    angle = daz_atan2(np.ascontiguousarray(a.imag), np.ascontiguousarray(a.real))
    return complex_rsqrt(flush(a), angle).astype(a.dtype).reshape(a.shape)


def _complex_divide_step(args: list[Any]) -> Any:
    a, b = np.asarray(args[0]), np.asarray(args[1])  # (flushed by the rule)
    shape = np.broadcast_shapes(a.shape, b.shape)
    return complex_divide(a, b, a.real.dtype.type, flush).astype(a.dtype).reshape(shape)


def _complex_power_step(args: list[Any]) -> Any:
    a, b = np.asarray(args[0]), np.asarray(args[1])
    part = a.real.dtype.type
    angle = daz_atan2(np.ascontiguousarray(a.imag), np.ascontiguousarray(a.real))
    shape = np.broadcast_shapes(a.shape, b.shape)  # (0-d operands stay 0-d)
    return complex_power(flush(a), flush(b), part, angle).astype(a.dtype).reshape(shape)
