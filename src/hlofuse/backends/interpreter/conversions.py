"""Element type conversions with XLA's semantics: convert, bitcast-convert, reduce-precision and
stochastic-convert.

* convert float -> int: nan -> 0, out-of-range values saturate, and so does a value at or beyond
  the integer range's end rounded into the source type (XLA compares there: f4e2m1fn's +-6
  converts to the integer's max / min, `dtypes.int_saturation_bounds`); x -> pred is `x != 0`;
  integers to sub-byte integers wrap; sub-byte integers convert to floats through int64 (to
  f8e8m0fnu: 0 and negatives are NaN, others round to a power of two, half up: 3 -> 4,
  measured against jax.jit for every s2/s4/u2/u4 value); real -> complex has imaginary part 0
  (complex -> real is refused by the verifier); conversions from or to the 8- and 4-bit floats
  go through f64 (one rounding).
* bitcast-convert between widths adds or removes a minor dimension (little-endian order, the
  low bits first for types narrower than a byte).
* reduce-precision: XLA's EmitReducePrecisionIR on the bits (bf16 and the 8-bit floats via f32);
  a NaN stays NaN with no mantissa bits too (jax.jit; the IR's rule made it inf).
* stochastic-convert(x, random) float -> integer, as XLA's elemental emitter: the magnitude's
  fraction scaled to the width of `random` (`fraction * 2^bits`) rounds the magnitude up when
  `random` is below it, down otherwise; the sign is put back; nan -> 0, and values beyond the
  integer range saturate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hlofuse.backends.interpreter import numerics
from hlofuse.backends.interpreter.core import Interpreter, handles, unsupported
from hlofuse.backends.interpreter.elementwise import dtype_of, result_dtype
from hlofuse.backends.xla_facts import reduce_precision_is_identity
from hlofuse.ir.dtypes import DTYPES, DType, from_numpy, int_range, int_saturation_bounds
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape


def convert(x: np.ndarray, to: DType) -> np.ndarray:
    """XLA's convert: float->int truncates, saturates and maps nan to 0; x->pred is x != 0."""
    x = np.asarray(x)
    src = dtype_of(x)
    if to.is_pred:
        return np.asarray(x != 0)
    if src.is_complex or to.is_complex:
        return x.astype(to.np)  # real -> complex (imaginary 0), complex -> complex
    if src.is_integral and to.is_narrow_int:
        return numerics.wrap(x.astype(np.int64), to)
    if src.is_float and to.is_integral:
        x64 = x.astype(np.float64)
        t = np.trunc(x64)
        if to.is_signed:
            lo, hi = -(2.0 ** (to.bits - 1)), 2.0 ** (to.bits - 1)
        else:
            lo, hi = 0.0, 2.0**to.bits
        lowest, highest = int_range(to)
        lo_src, hi_src = int_saturation_bounds(src, to)  # f4e2m1fn: +-6 saturates
        big = (t >= hi) | (x64 >= hi_src)
        small = (t < lo) | (x64 <= lo_src)
        safe = np.where(np.isnan(t) | big | small, 0.0, t)
        res = np.where(big, highest, np.where(small, lowest, safe.astype(np.int64)))
        if to.bits == 64 and not to.is_signed:  # beyond int64
            res = np.where(big, np.uint64(highest), safe.astype(np.uint64))
        return np.asarray(res).astype(to.np)
    if src.is_pred:
        return x.astype(np.uint8).astype(to.np)
    if src.is_narrow_int and to.is_float:  # ml_dtypes has no s4 -> e8m0 cast; values are exact
        return x.astype(np.int64).astype(to.np)
    if {src.name, to.name} == {"bf16", "f16"}:
        return x.astype(np.float32).astype(to.np)
    if src.is_float and to.is_float and (src.is_small_float or to.is_small_float):
        return x.astype(np.float64).astype(to.np)  # ml_dtypes casts through f32 otherwise
    return x.astype(to.np)


# f8e8m0fnu's smallest value, 2^-127, is an f32 subnormal. XLA's CPU converts between e8m0 and
# f32/bf16 (and from e8m0 to anything) on the bits, so that value is kept (measured against
# jax.jit); from f64 below 2^-126 it has its own rule (`f64_to_e8m0`).
_F32_TINY = 2.0**-126
_E8M0_TINY = 2.0**-127


def f64_to_e8m0(x: np.ndarray) -> np.ndarray:
    """f64 -> f8e8m0fnu as XLA's CPU converts when flushing (measured against jax.jit, every
    f64 in [2^-131, 2^-125) on a grid of 4096 per binade): below 2^-126, 2^-127 exactly is
    2^-127 (encoding 0), anything between it and 2^-126 is 2^-126 (encoding 1: not ml_dtypes'
    round half up), anything smaller, zero included, is NaN; the rest as ml_dtypes."""
    wide = np.asarray(x, np.float64)
    out = np.asarray(convert(wide, DTYPES["f8e8m0fnu"])).view(np.uint8).copy()
    with np.errstate(invalid="ignore"):
        tiny = np.abs(wide) < _F32_TINY
        code = np.where(wide == _E8M0_TINY, 0, np.where(wide > _E8M0_TINY, 1, 0xFF))
    out = np.where(tiny, code, out).astype(np.uint8)
    return out.view(DTYPES["f8e8m0fnu"].np).reshape(np.shape(x))


@handles(Opcode.CONVERT)
def _convert(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    x, to = np.asarray(ops[0]), result_dtype(instr)
    src = dtype_of(x)
    if interp.flush and src.name == "f64" and to.name == "f8e8m0fnu":
        return f64_to_e8m0(x)
    return convert(x, to)


@handles(Opcode.BITCAST_CONVERT)
def _bitcast_convert(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    out = result_dtype(instr)
    x = np.asarray(ops[0], order="C")
    src_bits = x.dtype.itemsize * 8
    if out.is_pred or x.dtype == np.bool_:
        raise unsupported(instr, "bitcast-convert to or from pred is not defined")
    src = dtype_of(x)
    if src.bits < 8 or out.bits < 8:
        return _bitcast_sub_byte(x, src, out, array_dims(instr))
    if src_bits == out.bits:
        return x.view(out.np).copy()
    dims = array_dims(instr)
    return x.reshape(-1).view(out.np).reshape(dims).copy()


def _bitcast_sub_byte(x: np.ndarray, src: DType, out: DType,
                      dims: tuple[int, ...]) -> np.ndarray:
    """Bit patterns between types of which one is narrower than a byte: the low bits first."""
    bits = numerics.raw_bits(x, src).reshape(-1)
    if src.bits == out.bits:
        return numerics.from_bits(bits, out).reshape(dims)
    if src.bits > out.bits:  # split: a new minor dimension, low bits first
        k = src.bits // out.bits
        parts = [(bits >> np.uint64(i * out.bits)) & np.uint64((1 << out.bits) - 1)
                 for i in range(k)]
        return numerics.from_bits(np.stack(parts, axis=-1), out).reshape(dims)
    k = out.bits // src.bits  # join the minor dimension
    groups = bits.reshape(-1, k)
    joined = sum(groups[:, i] << np.uint64(i * src.bits) for i in range(k))
    return numerics.from_bits(np.asarray(joined, dtype=np.uint64), out).reshape(dims)


def array_dims(instr: Instruction) -> tuple[int, ...]:
    shape = instr.shape
    assert isinstance(shape, ArrayShape)
    return shape.dims


_FLOAT_LAYOUT = {16: (5, 10), 32: (8, 23), 64: (11, 52)}


def reduce_precision(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """XLA's EmitReducePrecisionIR (quiet_nans=false) on the bits of f16/f32/f64 (bf16 via f32)."""
    dt = dtype_of(x)
    if dt.name == "bf16" or dt.bits < 16:
        return reduce_precision(x.astype(np.float32), exponent_bits, mantissa_bits).astype(x.dtype)
    nbits = dt.bits
    src_exp, src_man = _FLOAT_LAYOUT[nbits]
    u = np.dtype(f"u{nbits // 8}")
    one = u.type(1)
    xi = np.asarray(x, order="C").view(u).copy()
    sign_mask = u.type(1 << (nbits - 1))
    exp_mask = u.type(((1 << src_exp) - 1) << src_man)
    is_nan = (xi & ~sign_mask) > exp_mask
    if mantissa_bits < src_man:
        shift = src_man - mantissa_bits
        last = u.type(1 << shift)
        base_bias = u.type((1 << (shift - 1)) - 1)
        bias = ((xi & last) >> u.type(shift)) + base_bias
        trunc_mask = ~(last - one)
        xi = (xi + bias) & trunc_mask
    if exponent_bits < src_exp:
        exponent_bias = (1 << (src_exp - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        max_exp = u.type((exponent_bias + reduced_bias) << src_man)
        min_exp = u.type((exponent_bias - reduced_bias) << src_man)
        x_exp = xi & exp_mask
        signed_zero = xi & sign_mask
        signed_inf = signed_zero | exp_mask
        xi = np.where(x_exp > max_exp, signed_inf, xi)
        xi = np.where(x_exp <= min_exp, signed_zero, xi)
    result = np.asarray(xi, dtype=u).view(x.dtype)
    # a NaN stays NaN, with no mantissa bits too (EmitReducePrecisionIR's inf for that case is
    # not what jax.jit gives: measured for f16, bf16, f32, f64 and 2, 5, 8 exponent bits)
    return np.where(is_nan, x, result)


@handles(Opcode.REDUCE_PRECISION)
def _reduce_precision(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    e = instr.attrs.get("exponent_bits")
    m = instr.attrs.get("mantissa_bits")
    if e is None or m is None:
        raise unsupported(instr, "reduce-precision needs exponent_bits and mantissa_bits")
    if int(e) < 1:
        raise unsupported(instr, "exponent_bits must be at least 1")
    x = np.asarray(ops[0])
    if reduce_precision_is_identity(from_numpy(x.dtype), int(e), int(m)):
        return x.copy()
    return reduce_precision(x, int(e), int(m))


@handles(Opcode.STOCHASTIC_CONVERT)
def _stochastic_convert(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    out = result_dtype(instr)
    if not out.is_integral:
        raise unsupported(instr, f"stochastic-convert to {out} (only float -> integer is "
                          "defined)")
    x = np.asarray(ops[0]).astype(np.float64)
    rand = np.asarray(ops[1])
    magnitude = np.abs(x)
    floor = np.floor(magnitude)
    with np.errstate(all="ignore"):  # the fraction as a `bits`-bit integer
        scaled = np.floor((magnitude - floor) * 2.0 ** dtype_of(rand).bits)
    up = rand.astype(np.float64) < np.where(np.isfinite(scaled), scaled, 0)
    rounded = np.where(x < 0, -(floor + up), floor + up)
    return convert(rounded, out)  # saturating; nan -> 0
