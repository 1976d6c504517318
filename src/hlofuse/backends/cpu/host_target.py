"""The cpu backend's target: the host as the C compiler sees it, or the one `HLOFUSE_TARGET`
names, and the `-march` flag the build compiles for.

    detect()     Target.named(HLOFUSE_TARGET), else the host (`-march=native`'s macros)
    march()      the -march flag generated C is compiled with

Detection asks the compiler which macros `-march=native` defines (__AVX512F__, __AVX2__,
__ARM_NEON, __SSE2__) rather than reading /proc/cpuinfo, so what is detected is what the
compiler will generate code for. `HLOFUSE_TARGET` (a `Target.named` name) overrides detection
(tests use it to compile for x86-64-v3 and -v4 on any host). The answer is cached per compiler.
`march()` is the flag the build uses: the named target's x86 level where the host can run it
(so `HLOFUSE_TARGET=avx2` on an AVX-512 machine generates and compiles what an AVX2 machine
would), else `-march=native`. The kernel IR never asks: the backend hands it a `Target`.
"""

from __future__ import annotations

import functools
import os
import subprocess

from hlofuse.backends.cpu import build
from hlofuse.backends.kernel_ir.target import Target, target_names
from hlofuse.errors import HloError


def detect() -> Target:
    """The target kernels are generated for: `HLOFUSE_TARGET`'s, else the host's."""
    env = _env_target()
    if env:
        return Target.named(env)
    try:
        argv = tuple(build.find_compiler())
    except HloError:
        return Target.named("scalar")
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
    try:
        host = _detect(tuple(build.find_compiler()))
    except HloError:
        return NATIVE_MARCH
    x86 = ("sse2", "avx2", "avx512")
    if named.name in x86 and host.name in x86 and named.vector_bytes <= host.vector_bytes:
        return named.march
    return NATIVE_MARCH


def _env_target() -> str | None:
    """HLOFUSE_TARGET, checked (`hlofuse.env`: ConfigError naming it unless a known target)."""
    from hlofuse import env

    return env.choice("HLOFUSE_TARGET", target_names())


@functools.lru_cache(maxsize=4)
def _detect(argv: tuple[str, ...]) -> Target:
    """The host's target from the compiler's predefined macros under -march=native (asked once
    per compiler and CPU: `build.compiler_answer`)."""
    name = build.compiler_answer(argv, "native-target", lambda: _ask_target(argv))
    native = NATIVE_MARCH
    if name in ("avx512", "avx2", "neon", "sse2"):
        return Target(name, Target.named(name).vector_bytes, native)
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
