"""HLO element types and their numpy equivalents.

Every element type of XLA's text format lives in `DTYPES`, keyed by its text name (`f32`, `pred`,
`bf16`, `c64`, `s4`, `f8e4m3fn`, ...). The types numpy lacks come from `ml_dtypes`, the package
JAX itself uses: bf16, the sub-byte integers s1/s2/s4 and u1/u2/u4 (one per byte in memory, as
XLA stores them unpacked), and the 8- and 4-bit floats. Kinds: pred, signed, unsigned, float
(every real floating-point type, fp8/fp4 included), complex (c64, c128: pairs of f32/f64).

Float facts the literal parser and printer need (`FloatFormat`): whether the type has infinities
(the `fn`/`fnuz` formats and e8m0 do not), a sign bit (e8m0 has none), and whether a NaN may
carry a payload (only the IEEE-like formats: f16, bf16, f32, f64, f8e5m2, f8e4m3, f8e3m4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import ml_dtypes
import numpy as np

Kind = Literal["pred", "signed", "unsigned", "float", "complex", "token"]


@dataclass(frozen=True)
class DType:
    """One HLO element type: its text name, kind and bit width."""

    name: str
    kind: Kind
    bits: int

    def __hash__(self) -> int:
        return hash(self.name)  # (the name decides the rest; a str caches its hash)

    @property
    def np(self) -> np.dtype:
        """The numpy dtype that holds values of this type."""
        return _NUMPY[self.name]

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        """A real floating-point type (complex types are not)."""
        return self.kind == "float"

    @property
    def is_complex(self) -> bool:
        return self.kind == "complex"

    @property
    def is_inexact(self) -> bool:
        """Floating point or complex."""
        return self.kind in ("float", "complex")

    @property
    def component(self) -> DType:
        """The real type of a complex type's parts (f32 for c64); the type itself otherwise."""
        return DTYPES[f"f{self.bits // 2}"] if self.kind == "complex" else self

    @property
    def is_narrow_int(self) -> bool:
        """An integer type narrower than a byte (s1, s2, s4, u1, u2, u4)."""
        return self.kind in ("signed", "unsigned") and self.bits < 8

    @property
    def is_small_float(self) -> bool:
        """An 8- or 4-bit float (the fp8/fp4 formats of ml_dtypes)."""
        return self.kind == "float" and self.bits < 16

    @property
    def float_format(self) -> FloatFormat:
        return FLOAT_FORMATS[self.name]

    @property
    def is_integral(self) -> bool:
        return self.kind in ("signed", "unsigned")

    @property
    def is_signed(self) -> bool:
        return self.kind == "signed"

    @property
    def is_pred(self) -> bool:
        return self.kind == "pred"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"DType({self.name})"


PRED = DType("pred", "pred", 8)
S1 = DType("s1", "signed", 1)
S2 = DType("s2", "signed", 2)
S4 = DType("s4", "signed", 4)
S8 = DType("s8", "signed", 8)
S16 = DType("s16", "signed", 16)
S32 = DType("s32", "signed", 32)
S64 = DType("s64", "signed", 64)
U1 = DType("u1", "unsigned", 1)
U2 = DType("u2", "unsigned", 2)
U4 = DType("u4", "unsigned", 4)
U8 = DType("u8", "unsigned", 8)
U16 = DType("u16", "unsigned", 16)
U32 = DType("u32", "unsigned", 32)
U64 = DType("u64", "unsigned", 64)
F16 = DType("f16", "float", 16)
BF16 = DType("bf16", "float", 16)
F32 = DType("f32", "float", 32)
F64 = DType("f64", "float", 64)
F8E5M2 = DType("f8e5m2", "float", 8)
F8E4M3 = DType("f8e4m3", "float", 8)
F8E4M3FN = DType("f8e4m3fn", "float", 8)
F8E4M3B11FNUZ = DType("f8e4m3b11fnuz", "float", 8)
F8E5M2FNUZ = DType("f8e5m2fnuz", "float", 8)
F8E4M3FNUZ = DType("f8e4m3fnuz", "float", 8)
F8E3M4 = DType("f8e3m4", "float", 8)
F8E8M0FNU = DType("f8e8m0fnu", "float", 8)
F4E2M1FN = DType("f4e2m1fn", "float", 4)
C64 = DType("c64", "complex", 64)
C128 = DType("c128", "complex", 128)

DTYPES: dict[str, DType] = {
    d.name: d for d in (PRED, S1, S2, S4, S8, S16, S32, S64, U1, U2, U4, U8, U16, U32, U64,
                        F16, BF16, F32, F64, F8E5M2, F8E4M3, F8E4M3FN, F8E4M3B11FNUZ,
                        F8E5M2FNUZ, F8E4M3FNUZ, F8E3M4, F8E8M0FNU, F4E2M1FN, C64, C128)
}


@dataclass(frozen=True)
class FloatFormat:
    """Encoding facts of a real float type: exponent and mantissa bits, whether it has
    infinities and a sign bit, whether NaNs carry payloads (else a NaN is one fixed pattern)."""

    exponent_bits: int
    mantissa_bits: int
    has_inf: bool = True
    has_sign: bool = True
    nan_payloads: bool = True


FLOAT_FORMATS: dict[str, FloatFormat] = {
    "f16": FloatFormat(5, 10),
    "bf16": FloatFormat(8, 7),
    "f32": FloatFormat(8, 23),
    "f64": FloatFormat(11, 52),
    "f8e5m2": FloatFormat(5, 2),
    "f8e4m3": FloatFormat(4, 3),
    "f8e3m4": FloatFormat(3, 4),
    "f8e4m3fn": FloatFormat(4, 3, has_inf=False, nan_payloads=False),
    "f8e4m3b11fnuz": FloatFormat(4, 3, has_inf=False, nan_payloads=False),
    "f8e5m2fnuz": FloatFormat(5, 2, has_inf=False, nan_payloads=False),
    "f8e4m3fnuz": FloatFormat(4, 3, has_inf=False, nan_payloads=False),
    "f8e8m0fnu": FloatFormat(8, 0, has_inf=False, has_sign=False, nan_payloads=False),
    "f4e2m1fn": FloatFormat(2, 1, has_inf=False, nan_payloads=False),
}

_NUMPY: dict[str, np.dtype] = {
    "pred": np.dtype(np.bool_),
    "s8": np.dtype(np.int8),
    "s16": np.dtype(np.int16),
    "s32": np.dtype(np.int32),
    "s64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "s1": np.dtype(ml_dtypes.int1),
    "s2": np.dtype(ml_dtypes.int2),
    "s4": np.dtype(ml_dtypes.int4),
    "u1": np.dtype(ml_dtypes.uint1),
    "u2": np.dtype(ml_dtypes.uint2),
    "u4": np.dtype(ml_dtypes.uint4),
    "f8e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "f8e4m3": np.dtype(ml_dtypes.float8_e4m3),
    "f8e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8e4m3b11fnuz": np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    "f8e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f8e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "f8e3m4": np.dtype(ml_dtypes.float8_e3m4),
    "f8e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
    "f4e2m1fn": np.dtype(ml_dtypes.float4_e2m1fn),
    "c64": np.dtype(np.complex64),
    "c128": np.dtype(np.complex128),
}
assert set(_NUMPY) == set(DTYPES), "every element type needs a numpy dtype"

_FROM_NUMPY: dict[np.dtype, DType] = {v: DTYPES[k] for k, v in _NUMPY.items()}


def from_numpy(dtype: np.dtype | type) -> DType:
    """The HLO element type for a numpy dtype; raises ValueError for unsupported ones."""
    dt = np.dtype(dtype)
    try:
        return _FROM_NUMPY[dt]
    except KeyError:
        raise ValueError(f"numpy dtype {dt} has no HLO element type") from None


def unsigned_of(dtype: DType) -> DType:
    """The unsigned type of the same width (used for bit-level integer semantics)."""
    return DTYPES[f"u{dtype.bits}"]


def int_range(dtype: DType) -> tuple[int, int]:
    """The smallest and largest value of an integer type (pred: 0 and 1)."""
    if dtype.is_pred:
        return 0, 1
    if dtype.is_signed:
        return -(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1
    return 0, (1 << dtype.bits) - 1


def int_saturation_bounds(src: DType, dst: DType) -> tuple[float, float]:
    """The values of the float type `src` at and beyond which XLA's float -> integer convert to
    `dst` saturates to the integer's smallest / largest value: the integer range's ends rounded
    into `src`, as XLA compares in the source type. Only a float that saturates on overflow
    (f4e2m1fn: 127 rounds to its largest value 6) brings a bound inside the integer range, so
    its +-6 converts to the integer's max / min (measured against jax.jit on all 16 f4 values);
    for every other type the bound is at or beyond the range's end (or NaN, never reached)."""
    lowest, highest = int_range(dst)
    with np.errstate(over="ignore", invalid="ignore"):
        lo, hi = np.array([lowest, highest], np.float64).astype(src.np).astype(np.float64)
    return float(lo), float(hi)
