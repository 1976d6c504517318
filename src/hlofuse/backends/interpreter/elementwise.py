"""Elementwise ops with XLA's semantics (not numpy's where they differ).

* float ops are computed in f64 and rounded once to the result type (round-to-nearest-even):
  correctly rounded for + - * / sqrt; f16 and bf16 results match XLA's CPU backend, which
  computes them in f32 and rounds back.
* Integer add/subtract/multiply/negate/abs wrap around; `x / 0` is -1 (signed) or all ones
  (unsigned); `INT_MIN / -1` is `INT_MIN`; `x % 0` is `x`; `INT_MIN % -1` is 0; division
  truncates toward zero; float remainder is C `fmod`.
* Shifts by at least the bit width (the amount read as unsigned) give 0, or the sign fill for
  shift-right-arithmetic.
* Integer power: a negative exponent gives 0, except base 1 gives 1 (XLA's EmitIntegerPow).
* compare with `type=TOTALORDER` orders floats -nan < -inf < ... < -0 < +0 < ... < inf < nan.
* sign(-0) = -0, sign(nan) = nan; round-nearest-afz rounds halves away from zero.
* sub-byte integers, complex numbers and the total order of every float type: `numerics.py`.
  The 8- and 4-bit floats compute in f64 and round once, like f16 and bf16.
* convert, bitcast-convert, reduce-precision and stochastic-convert: `conversions.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from hlofuse.backends.interpreter import numerics
from hlofuse.backends.interpreter.core import Interpreter, handles, out_np, unsupported
from hlofuse.ir.dtypes import DType, from_numpy
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape

_NARROW_FLOATS = ("f16", "bf16")


def dtype_of(x: np.ndarray) -> DType:
    return from_numpy(x.dtype)


def result_dtype(instr: Instruction) -> DType:
    shape = instr.shape
    if not isinstance(shape, ArrayShape):
        raise unsupported(instr, f"expected an array-shaped result, got {shape}")
    return shape.dtype


def float_op(fn: Callable[..., Any], out: DType, *xs: np.ndarray) -> np.ndarray:
    """Apply a float function in f64 and round the result to `out` once.

    For +, -, *, /, sqrt and fmod this is exactly the correctly rounded result of the narrower
    type (f64 has more than twice the precision of f32, f16 and bf16); for transcendental
    functions it is the (nearly always correctly rounded) reference value. f16/bf16 results
    are therefore what XLA's CPU backend gets by computing in f32 and rounding back. Complex
    values compute in complex128."""
    wide = tuple(np.asarray(x).astype(np.complex128 if np.iscomplexobj(x) else np.float64)
                 for x in xs)
    with np.errstate(all="ignore"):
        return np.asarray(fn(*wide)).astype(out.np)


# ----- unary ------------------------------------------------------------------------------


def _erf(x: np.ndarray) -> np.ndarray:
    x64 = np.asarray(x, dtype=np.float64)
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(x64), dtype=np.float64)  # (0-d: a float)


def _logistic(x: np.ndarray) -> np.ndarray:
    # Stable for large |x|: 1/(1+e^-x) for x >= 0, e^x/(1+e^x) otherwise.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _round_afz(x: np.ndarray) -> np.ndarray:
    t = np.trunc(x)
    frac = x - t  # exact in floating point
    return np.where(np.abs(frac) >= 0.5, t + np.copysign(np.ones_like(x), x), t)


def _float_sign(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x) | (x == 0), x, np.copysign(np.ones_like(x), x))


_FLOAT_UNARY: dict[Opcode, Callable[[np.ndarray], np.ndarray]] = {
    Opcode.CBRT: np.cbrt,
    Opcode.CEIL: np.ceil,
    Opcode.COS: np.cos,
    Opcode.ERF: _erf,
    Opcode.EXP: np.exp,
    Opcode.EXPM1: numerics.expm1,
    Opcode.FLOOR: np.floor,
    Opcode.LOG: np.log,
    Opcode.LOG1P: np.log1p,
    Opcode.LOGISTIC: _logistic,
    Opcode.ROUND_AFZ: _round_afz,
    Opcode.ROUND_EVEN: np.rint,
    Opcode.RSQRT: lambda x: 1 / np.sqrt(x),
    Opcode.SIN: np.sin,
    Opcode.SQRT: np.sqrt,
    Opcode.TAN: numerics.tan,
    Opcode.TANH: numerics.tanh,
    **numerics.UNARY_MATH,
}
_NOT_COMPLEX = (Opcode.CBRT, Opcode.CEIL, Opcode.FLOOR, Opcode.ROUND_AFZ, Opcode.ROUND_EVEN,
                Opcode.ERF)


@handles(*_FLOAT_UNARY)
def _float_unary(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    out = result_dtype(instr)
    op = instr.opcode
    if not out.is_inexact or (out.is_complex and op in _NOT_COMPLEX):
        raise unsupported(instr, f"{op.value} needs a floating-point type, got {out}")
    if out.is_complex and op is Opcode.LOGISTIC:
        return float_op(lambda z: numerics.complex_divide(np.ones_like(z), 1 + np.exp(-z)),
                        out, ops[0])
    if out.is_complex and op is Opcode.RSQRT:
        return float_op(numerics.complex_rsqrt, out, ops[0])
    if op is Opcode.LOG1P and out.name == "f64":  # XLA's own approximation
        return numerics.log1p_f64(ops[0])
    return float_op(_FLOAT_UNARY[op], out, ops[0])


@handles(Opcode.ABS)
def _abs(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    out = result_dtype(instr)
    x = ops[0]
    if np.iscomplexobj(x):  # |z| is real
        return float_op(numerics.complex_abs, out, x)
    if out.is_float:
        return float_op(np.abs, out, x)
    if out.is_narrow_int:
        return numerics.narrow_unary(Opcode.ABS, x, out)
    if out.kind == "unsigned" or out.is_pred:
        return np.array(x, copy=True)
    return np.abs(x).astype(out.np)  # abs(INT_MIN) wraps to INT_MIN


@handles(Opcode.NEGATE)
def _negate(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    out = result_dtype(instr)
    if out.is_inexact:
        return float_op(np.negative, out, ops[0])
    if out.is_narrow_int:
        return numerics.narrow_unary(Opcode.NEGATE, ops[0], out)
    return np.negative(ops[0]).astype(out.np)


@handles(Opcode.SIGN)
def _sign(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    out = result_dtype(instr)
    x = ops[0]
    if out.is_complex:  # |z| in the component type, as XLA (c64: f32 |z| overflows at 2^128)
        part = np.float32 if out.name == "c64" else np.float64
        return float_op(lambda z: numerics.complex_sign(z, part), out, x)
    if out.is_float:
        return float_op(_float_sign, out, x)
    if out.is_narrow_int:
        return numerics.narrow_unary(Opcode.SIGN, x, out)
    if out.kind == "unsigned" or out.is_pred:
        return (x != 0).astype(out.np)
    return np.sign(x).astype(out.np)


@handles(Opcode.NOT)
def _not(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    x = ops[0]
    if x.dtype == np.bool_:
        return np.logical_not(x)
    if result_dtype(instr).is_narrow_int:
        return numerics.narrow_unary(Opcode.NOT, x, result_dtype(instr))
    return np.invert(x)


@handles(Opcode.IS_FINITE)
def _is_finite(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    return np.asarray(np.isfinite(np.asarray(ops[0]).astype(np.float64)))


def _unsigned(x: np.ndarray) -> np.ndarray:
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


@handles(Opcode.POPCNT)
def _popcnt(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    x = np.asarray(ops[0])
    if result_dtype(instr).is_narrow_int:
        return numerics.narrow_unary(Opcode.POPCNT, x, result_dtype(instr))
    return np.bitwise_count(_unsigned(x)).astype(out_np(instr))


@handles(Opcode.CLZ)
def _clz(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    x = np.asarray(ops[0])
    if result_dtype(instr).is_narrow_int:
        return numerics.narrow_unary(Opcode.CLZ, x, result_dtype(instr))
    bits = x.dtype.itemsize * 8
    v = _unsigned(x).astype(np.uint64)
    length = np.zeros(v.shape, dtype=np.int64)
    for s in (32, 16, 8, 4, 2, 1):
        high = (v >> np.uint64(s)) != 0
        length += np.where(high, s, 0)
        v = np.where(high, v >> np.uint64(s), v)
    length += (v != 0).astype(np.int64)
    return (bits - length).astype(out_np(instr))


@handles(Opcode.REAL)
def _real(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    return np.real(np.asarray(ops[0])).astype(out_np(instr))


@handles(Opcode.IMAG)
def _imag(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    x = np.asarray(ops[0])
    if np.iscomplexobj(x):
        return np.imag(x).astype(out_np(instr))
    return np.zeros(x.shape).astype(out_np(instr))  # a real number's imaginary part (0.0,
    # whose encoding is not all zero bits in every type: e8m0 has no zero)


@handles(Opcode.COMPLEX)
def _complex(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    return numerics.make_complex(ops[0], ops[1], result_dtype(instr))


# ----- binary -----------------------------------------------------------------------------


def _int_div(a: np.ndarray, b: np.ndarray, dt: DType) -> np.ndarray:
    a, b = np.broadcast_arrays(np.asarray(a, dt.np), np.asarray(b, dt.np))
    zero = b == 0
    if dt.is_signed:
        info = np.iinfo(dt.np)
        overflow = (a == info.min) & (b == -1)
        safe_b = np.where(zero | overflow, 1, b).astype(dt.np)
        q = ((a - np.fmod(a, safe_b)) // safe_b).astype(dt.np)  # exact: truncating division
        q = np.where(overflow, a, q)
        return np.where(zero, np.array(-1, dt.np), q).astype(dt.np)
    safe_b = np.where(zero, 1, b).astype(dt.np)
    q = a // safe_b
    return np.where(zero, np.array(np.iinfo(dt.np).max, dt.np), q).astype(dt.np)


def _int_rem(a: np.ndarray, b: np.ndarray, dt: DType) -> np.ndarray:
    a, b = np.broadcast_arrays(np.asarray(a, dt.np), np.asarray(b, dt.np))
    zero = b == 0
    unsafe = zero
    if dt.is_signed:
        unsafe = zero | ((a == np.iinfo(dt.np).min) & (b == -1))
    safe_b = np.where(unsafe, 1, b).astype(dt.np)
    r = np.fmod(a, safe_b)  # C remainder: sign of the dividend; INT_MIN % -1 -> % 1 -> 0
    return np.where(zero, a, r).astype(dt.np)


def _int_pow(a: np.ndarray, b: np.ndarray, dt: DType) -> np.ndarray:
    a, b = np.broadcast_arrays(np.asarray(a, dt.np), np.asarray(b, dt.np))
    acc = np.ones(a.shape, dt.np)
    base = a.copy()
    e = b.copy()
    for _ in range(dt.bits):
        acc = np.where((e & 1) == 1, acc * base, acc).astype(dt.np)
        base = (base * base).astype(dt.np)
        e = e >> 1 if dt.kind == "unsigned" else np.where(e > 0, e >> 1, 0).astype(dt.np)
    if dt.is_signed:
        negative = b < 0
        acc = np.where(negative, np.where(a == 1, 1, 0), acc).astype(dt.np)
    return acc


def _shift(op: Opcode, a: np.ndarray, b: np.ndarray, dt: DType) -> np.ndarray:
    a, b = np.broadcast_arrays(np.asarray(a, dt.np), np.asarray(b, dt.np))
    bits = dt.bits
    u = np.dtype(f"u{bits // 8}")
    s = np.dtype(f"i{bits // 8}")
    amount = np.asarray(b, order="C").view(u)  # the shift amount is read as unsigned
    oob = amount >= bits
    amt = np.where(oob, 0, amount).astype(u)
    if op is Opcode.SHIFT_LEFT:
        r = np.where(oob, 0, np.asarray(a, order="C").view(u) << amt).astype(u)
    elif op is Opcode.SHIFT_RIGHT_LOGICAL:
        r = np.where(oob, 0, np.asarray(a, order="C").view(u) >> amt).astype(u)
    else:
        sa = np.asarray(a, order="C").view(s)
        r = np.where(oob, sa >> (bits - 1), sa >> amt.astype(s)).astype(s)
    return np.asarray(r, order="C").view(dt.np)


def _float_max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """maximum with -0 < +0 (jax.jit's max(0, -0) and max(-0, 0) are both +0), NaN wins."""
    zeros = (a == 0) & (b == 0)
    return np.where(zeros, np.where(np.signbit(a), b, a), np.maximum(a, b))


def _float_min(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """minimum with -0 < +0 (min(0, -0) and min(-0, 0) are both -0), NaN wins."""
    zeros = (a == 0) & (b == 0)
    return np.where(zeros, np.where(np.signbit(a), a, b), np.minimum(a, b))


_FLOAT_BINARY: dict[Opcode, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    Opcode.ADD: np.add,
    Opcode.SUBTRACT: np.subtract,
    Opcode.MULTIPLY: np.multiply,
    Opcode.DIVIDE: np.divide,
    Opcode.REMAINDER: np.fmod,
    Opcode.POWER: np.power,
    Opcode.MAXIMUM: _float_max,
    Opcode.MINIMUM: _float_min,
    Opcode.ATAN2: np.arctan2,
}

_INT_WRAPPING: dict[Opcode, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    Opcode.ADD: np.add,
    Opcode.SUBTRACT: np.subtract,
    Opcode.MULTIPLY: np.multiply,
    Opcode.MAXIMUM: np.maximum,
    Opcode.MINIMUM: np.minimum,
    Opcode.AND: np.bitwise_and,
    Opcode.OR: np.bitwise_or,
    Opcode.XOR: np.bitwise_xor,
}

_PRED_BINARY: dict[Opcode, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    Opcode.ADD: np.logical_or,
    Opcode.MAXIMUM: np.logical_or,
    Opcode.OR: np.logical_or,
    Opcode.MULTIPLY: np.logical_and,
    Opcode.MINIMUM: np.logical_and,
    Opcode.AND: np.logical_and,
    Opcode.XOR: np.logical_xor,
}


_COMPLEX_BINARY: dict[Opcode, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    Opcode.ADD: np.add,
    Opcode.SUBTRACT: np.subtract,
    Opcode.MULTIPLY: numerics.complex_multiply,
    Opcode.DIVIDE: numerics.complex_divide,
    Opcode.POWER: numerics.complex_power,
}


def binary(op: Opcode, a: np.ndarray, b: np.ndarray, dt: DType) -> np.ndarray:
    """One binary elementwise op on values of element type `dt`."""
    if dt.is_complex and op is Opcode.POWER:  # in the component type, as XLA
        return numerics.complex_power(a, b, dt.component.np.type).astype(dt.np)
    if dt.is_complex and op is Opcode.MULTIPLY:  # in the component type, as XLA
        return numerics.complex_multiply(a, b, dt.component.np.type).astype(dt.np)
    if dt.is_complex and op is Opcode.DIVIDE:  # in the component type, as XLA
        return numerics.complex_divide(a, b, dt.component.np.type).astype(dt.np)
    if dt.is_complex:
        fn = _COMPLEX_BINARY.get(op)
        if fn is None:
            raise ValueError(f"{op.value} is not defined for {dt}")
        return float_op(fn, dt, a, b)
    if dt.is_narrow_int:
        return numerics.narrow_binary(op, a, b, dt)
    if op is Opcode.MULHI and dt.is_integral:
        return numerics.mulhi(a, b, dt)
    if dt.is_float:
        fn = _FLOAT_BINARY.get(op)
        if fn is None:
            raise ValueError(f"{op.value} is not defined for {dt}")
        return float_op(fn, dt, a, b)
    if dt.is_pred:
        fn = _PRED_BINARY.get(op)
        if fn is None:
            raise ValueError(f"{op.value} is not defined for pred")
        return np.asarray(fn(a, b))
    wrapping = _INT_WRAPPING.get(op)
    if wrapping is not None:
        r = wrapping(a, b)
        return r if r.dtype == dt.np else np.asarray(r, dt.np)
    if op is Opcode.DIVIDE:
        return _int_div(a, b, dt)
    if op is Opcode.REMAINDER:
        return _int_rem(a, b, dt)
    if op is Opcode.POWER:
        return _int_pow(a, b, dt)
    if op in (Opcode.SHIFT_LEFT, Opcode.SHIFT_RIGHT_LOGICAL, Opcode.SHIFT_RIGHT_ARITHMETIC):
        return _shift(op, a, b, dt)
    raise ValueError(f"{op.value} is not defined for {dt}")


_BINARY_OPS = (
    Opcode.ADD,
    Opcode.SUBTRACT,
    Opcode.MULTIPLY,
    Opcode.DIVIDE,
    Opcode.REMAINDER,
    Opcode.POWER,
    Opcode.MAXIMUM,
    Opcode.MINIMUM,
    Opcode.ATAN2,
    Opcode.AND,
    Opcode.OR,
    Opcode.XOR,
    Opcode.SHIFT_LEFT,
    Opcode.SHIFT_RIGHT_LOGICAL,
    Opcode.SHIFT_RIGHT_ARITHMETIC,
    Opcode.MULHI,
)


@handles(*_BINARY_OPS)
def _binary(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    dt = result_dtype(instr)
    try:
        return binary(instr.opcode, ops[0], ops[1], dt)
    except ValueError as exc:
        raise unsupported(instr, str(exc)) from None


# ----- compare, select, clamp -------------------------------------------------------------


def total_order_key(x: np.ndarray) -> np.ndarray:
    """Signed integers that order floats totally: -nan < -inf < ... < -0 < +0 < ... < nan."""
    x = np.asarray(x, order="C")
    if x.dtype.itemsize < 2 or dtype_of(x).name == "bf16":
        return numerics.total_order_key(x)
    it = np.dtype(f"i{x.dtype.itemsize}")
    i = x.view(it)
    return np.where(i < 0, i ^ np.array(np.iinfo(it).max, it), i)


_DIRECTIONS: dict[str, Callable[[Any, Any], Any]] = {
    "EQ": np.equal,
    "NE": np.not_equal,
    "LT": np.less,
    "LE": np.less_equal,
    "GT": np.greater,
    "GE": np.greater_equal,
}


def compare(a: np.ndarray, b: np.ndarray, direction: str, kind: str | None) -> np.ndarray:
    a, b = np.asarray(a), np.asarray(b)
    dt = dtype_of(a)
    if dt.is_float and kind == "TOTALORDER":
        a, b = total_order_key(a), total_order_key(b)
    elif dt.is_complex and direction not in ("EQ", "NE"):
        raise ValueError(f"complex numbers compare only EQ and NE, not {direction}")
    elif dt.is_float and (dt.name in _NARROW_FLOATS or dt.is_small_float):
        a, b = a.astype(np.float64), b.astype(np.float64)
    elif dt.is_narrow_int and kind in ("SIGNED", "UNSIGNED"):
        unsigned = numerics.DTYPES[f"u{dt.bits}"]
        to = unsigned if kind == "UNSIGNED" else numerics.DTYPES[f"s{dt.bits}"]
        a, b = (numerics.wrap(np.asarray(v).astype(np.int64), to).astype(np.int64)
                for v in (a, b))
    elif dt.is_integral and kind == "UNSIGNED" and dt.is_signed:
        a, b = _unsigned(np.asarray(a, order="C")), _unsigned(np.asarray(b, order="C"))
    elif dt.is_integral and kind == "SIGNED" and not dt.is_signed:
        s = np.dtype(f"i{a.dtype.itemsize}")
        a, b = np.asarray(a, order="C").view(s), np.asarray(b, order="C").view(s)
    return np.asarray(_DIRECTIONS[direction](a, b))


@handles(Opcode.COMPARE)
def _compare(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    direction = str(instr.attrs.get("direction", ""))
    if direction not in _DIRECTIONS:
        raise unsupported(instr, f"unknown comparison direction {direction!r}")
    kind = instr.attrs.get("type")
    try:
        return compare(ops[0], ops[1], direction, None if kind is None else str(kind))
    except ValueError as exc:
        raise unsupported(instr, str(exc)) from None


@handles(Opcode.SELECT)
def _select(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    return np.asarray(np.where(ops[0], ops[1], ops[2]), dtype=out_np(instr))


@handles(Opcode.CLAMP)
def _clamp(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    lo, x, hi = ops
    dt = result_dtype(instr)
    if dt.is_complex:
        raise unsupported(instr, "clamp is not defined for complex numbers (no order)")
    if dt.is_float:  # max/min propagate nan, like XLA's EmitFloatMax/Min
        return float_op(lambda lo_, x_, hi_: _float_min(_float_max(x_, lo_), hi_), dt, lo, x, hi)
    return np.asarray(np.minimum(np.maximum(x, lo), hi), dtype=dt.np)
