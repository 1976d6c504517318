"""The target a kernel is generated for: ISA name, vector register size, the C compiler flag
that selects it, and how large a local may be on the stack (`passes/place.py`). Plain data: a
backend hands it to the kernel-IR passes (the cpu backend detects the host's:
`backends/cpu/host_target.py`).

    Target.named("avx2")       x86-64-v3 (AVX2, FMA): 32-byte vectors
    Target.named("avx512")     x86-64-v4 (AVX-512): 64-byte vectors
    Target.named("sse2")       x86-64 baseline: 16-byte vectors
    Target.named("neon")       AArch64: 16-byte vectors
    Target.named("scalar")     no explicit vectors (the vectorize pass does nothing)
"""

from __future__ import annotations

from dataclasses import dataclass

from hlofuse.backends.kernel_ir.ir import STACK_LOCAL_BYTES
from hlofuse.errors import HloError
from hlofuse.ir.dtypes import DType


@dataclass(frozen=True)
class Target:
    name: str
    vector_bytes: int  # 0: no explicit vectorization
    march: str  # the -march flag the generated C is compiled with
    stack_local_bytes: int = STACK_LOCAL_BYTES  # larger locals live on the heap (passes/place)

    @staticmethod
    def named(name: str) -> Target:
        try:
            return _NAMED[name]
        except KeyError:
            raise HloError(f"unknown target {name!r}; known: {', '.join(_NAMED)}") from None


_NAMED = {
    "avx512": Target("avx512", 64, "-march=x86-64-v4"),
    "avx2": Target("avx2", 32, "-march=x86-64-v3"),
    "sse2": Target("sse2", 16, "-march=x86-64"),
    "neon": Target("neon", 16, "-march=armv8-a"),
    "scalar": Target("scalar", 0, ""),
}


def target_names() -> tuple[str, ...]:
    """The names `Target.named` knows."""
    return tuple(_NAMED)


def compute_lane_bytes(dtype: DType) -> int | None:
    """The width of the vector lane a value of `dtype` is computed in (the vector targets'
    compute types: f16, bf16 and narrower floats in f32 lanes, pred in bytes); None for a type
    without one (sub-byte integers)."""
    if dtype.is_float:
        return 8 if dtype.bits == 64 else 4
    if dtype.is_pred:
        return 1
    return dtype.bits // 8 if dtype.bits in (8, 16, 32, 64) else None
