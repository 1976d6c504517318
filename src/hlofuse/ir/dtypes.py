"""HLO element types and their numpy equivalents.

Every element type XLA's text format names that hlofuse supports lives in `DTYPES`, keyed by its
text name (`f32`, `pred`, `bf16`, ...). bf16 comes from `ml_dtypes`, the package JAX itself uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import ml_dtypes
import numpy as np

Kind = Literal["pred", "signed", "unsigned", "float", "token"]


@dataclass(frozen=True)
class DType:
    """One HLO element type: its text name, kind and bit width."""

    name: str
    kind: Kind
    bits: int

    @property
    def np(self) -> np.dtype:
        """The numpy dtype that holds values of this type."""
        return _NUMPY[self.name]

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

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
S8 = DType("s8", "signed", 8)
S16 = DType("s16", "signed", 16)
S32 = DType("s32", "signed", 32)
S64 = DType("s64", "signed", 64)
U8 = DType("u8", "unsigned", 8)
U16 = DType("u16", "unsigned", 16)
U32 = DType("u32", "unsigned", 32)
U64 = DType("u64", "unsigned", 64)
F16 = DType("f16", "float", 16)
BF16 = DType("bf16", "float", 16)
F32 = DType("f32", "float", 32)
F64 = DType("f64", "float", 64)

DTYPES: dict[str, DType] = {
    d.name: d for d in (PRED, S8, S16, S32, S64, U8, U16, U32, U64, F16, BF16, F32, F64)
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
}

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
