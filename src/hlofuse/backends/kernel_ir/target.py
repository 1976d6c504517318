"""The target a kernel is generated for: ISA name, vector register size, the C compiler flag
that selects it, and how large a local may be on the stack (`passes/place.py`).

    Target.detect()            the host, as the C compiler sees it with -march=native
    Target.named("avx2")       x86-64-v3 (AVX2, FMA): 32-byte vectors
    Target.named("avx512")     x86-64-v4 (AVX-512): 64-byte vectors
    Target.named("sse2")       x86-64 baseline: 16-byte vectors
    Target.named("neon")       AArch64: 16-byte vectors
    Target.named("scalar")     no explicit vectors (the vectorize pass does nothing)

Detection asks the compiler which macros `-march=native` defines (__AVX512F__, __AVX2__,
__ARM_NEON, __SSE2__) rather than reading /proc/cpuinfo, so what is detected is what the
compiler will generate code for. `HLOFUSE_TARGET` (one of the names above) overrides detection
(tests use it to compile for x86-64-v3 and -v4 on any host). The answer is cached per compiler.
`march()` is the flag the build uses: the named target's x86 level where the host can run it
(so `HLOFUSE_TARGET=avx2` on an AVX-512 machine generates and compiles what an AVX2 machine
would), else `-march=native`.
"""

from __future__ import annotations

import functools
import os
import subprocess
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

    @staticmethod
    def detect() -> Target:
        env = _env_target()
        if env:
            return Target.named(env)
        from hlofuse.backends.cpu import build

        try:
            argv = tuple(build.find_compiler())
        except HloError:
            return _NAMED["scalar"]
        return _detect(argv)


NATIVE_MARCH = "-march=native"


def march() -> str:
    """The -march flag generated C is compiled with: `-march=native`, or the named target's
    when `HLOFUSE_TARGET` names an x86 level the host can run (`avx2` on an AVX-512 host compiles
    for x86-64-v3, as an AVX2 machine would). A wider or foreign target keeps `-march=native`:
    its vector types still compile (64-byte vectors become two 32-byte ones on AVX2), and the
    code runs here."""
    env = _env_target()
    if not env:
        return NATIVE_MARCH
    named = Target.named(env)
    from hlofuse.backends.cpu import build

    try:
        host = _detect(tuple(build.find_compiler()))
    except HloError:
        return NATIVE_MARCH
    x86 = ("sse2", "avx2", "avx512")
    if named.name in x86 and host.name in x86 and named.vector_bytes <= host.vector_bytes:
        return named.march
    return NATIVE_MARCH


_NAMED = {
    "avx512": Target("avx512", 64, "-march=x86-64-v4"),
    "avx2": Target("avx2", 32, "-march=x86-64-v3"),
    "sse2": Target("sse2", 16, "-march=x86-64"),
    "neon": Target("neon", 16, "-march=armv8-a"),
    "scalar": Target("scalar", 0, ""),
}


def _env_target() -> str | None:
    """HLOFUSE_TARGET, checked (`hlofuse.env`: ConfigError naming it unless a known target)."""
    from hlofuse import env

    return env.choice("HLOFUSE_TARGET", _NAMED)


@functools.lru_cache(maxsize=4)
def _detect(argv: tuple[str, ...]) -> Target:
    """The host's target from the compiler's predefined macros under -march=native (asked once
    per compiler and CPU: `build.compiler_answer`)."""
    from hlofuse.backends.cpu import build

    name = build.compiler_answer(argv, "native-target", lambda: _ask_target(argv))
    native = NATIVE_MARCH
    if name in ("avx512", "avx2", "neon", "sse2"):
        return Target(name, _NAMED[name].vector_bytes, native)
    return Target("scalar", 0, native if name == "scalar" else "")


def _ask_target(argv: tuple[str, ...]) -> str:
    try:
        out = subprocess.run([*argv, NATIVE_MARCH, "-dM", "-E", "-x", "c", os.devnull],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    macros = {line.split()[1] for line in out.splitlines() if line.startswith("#define ")}
    if "__AVX512F__" in macros:
        return "avx512"
    if "__AVX2__" in macros:
        return "avx2"
    if "__ARM_NEON" in macros or "__aarch64__" in macros:
        return "neon"
    if "__SSE2__" in macros:
        return "sse2"
    return "scalar" if out else "none"


def compute_lane_bytes(dtype: DType) -> int | None:
    """The width of the vector lane a value of `dtype` is computed in (the vector targets'
    compute types: f16, bf16 and narrower floats in f32 lanes, pred in bytes); None for a type
    without one (sub-byte integers)."""
    if dtype.is_float:
        return 8 if dtype.bits == 64 else 4
    if dtype.is_pred:
        return 1
    return dtype.bits // 8 if dtype.bits in (8, 16, 32, 64) else None
