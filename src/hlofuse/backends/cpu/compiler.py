"""The C compiler of the cpu backend: which program, which flags, which warnings are errors.

`find_compiler()` is the command, `flags()` the full flag list of every compile and link
(`build.py` runs them; its cache keys include `compiler_answer`'s version line and this CPU).

Conditions this module enforces:
- The compiler is `$CC`, else the first of cc, gcc, clang on PATH; none gives
  `CompilerNotFoundError`, whose message names the interpreter backend as the fallback. A `$CC`
  that does not split, carries a flag that changes floating-point results, or names no program
  is a `ConfigError` naming CC (`hlofuse.env`; the last also a `CompilerNotFoundError`), never
  a quiet fall back to cc.
- Flags never change IEEE semantics: `-O3 -march=native` (under `HLOFUSE_TARGET`, that x86
  level where the host runs it: `target.march`) plus `-fno-math-errno` (lets sqrt
  vectorize; errno is never read), `-fno-trapping-math` (FP exception traps are off, as in numpy),
  `-ffp-contract=off` (no a*b+c -> fma contraction the interpreter would not do). Never
  `-ffast-math`. No `-fopenmp`: threads are the runtime's own pool (`runtime.py`), reached
  through `hf_parallel_ptr`. `HLOFUSE_CC_OPT` replaces `-O3` (tests use `-O1` to compile
  faster); it can only name a plain level (`env.OPT_LEVELS`: never `-Ofast`).
- Never `-w`: warnings that mean a truncated or overflowed constant, a shift past the width, a
  division by a constant zero or a type confusion are errors (`WARNING_ERRORS`, those of them
  this compiler knows: GCC and clang name some differently). The generated code triggers none
  of them on valid input; a module that would makes the build fail with `build.CCompileError`
  rather than run with a silently truncated loop bound.
- The compiler's answer (which warning flags it knows) is probed once and kept
  as a verified cache entry; a damaged one is probed again, and only flags from
  `WARNING_ERRORS` are ever read back from it.
- What the compiler said (its version line, its native target for `kernel_ir.target`) is kept
  by `compiler_answer` as a verified cache entry keyed by the question, the command, this CPU
  and the compiler binary as it is on disk; a changed binary is asked anew.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from hlofuse import env
from hlofuse.backends.cpu import cachefs
from hlofuse.errors import CompileError, ConfigError, HloError

BASE_FLAGS: tuple[str, ...] = (  # after -march (target.march(): native unless HLOFUSE_TARGET)
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=off",
    "-fPIC",
    "-shared",
    "-std=gnu11",
    # GCC 12 may pass a 64-byte vector argument of a tail call through the caller's own
    # incoming argument area, 16-byte aligned, with an aligned store: a kernel with many
    # pointer parameters that tail-calls an interleaving store helper (9 vectors, AVX-512:
    # the 9th on the stack) crashed MJX's humanoid on an AVX-512 host. No sibling calls.
    "-fno-optimize-sibling-calls",
)
# Truncation, overflow and type-confusion warnings as errors; each is kept only if the compiler
# knows it (GCC: overflow, div-by-zero; clang: constant-conversion, integer-overflow, ...).
WARNING_ERRORS: tuple[str, ...] = (
    "-Werror=overflow",
    "-Werror=constant-conversion",
    "-Werror=integer-overflow",
    "-Werror=implicitly-unsigned-literal",
    "-Werror=shift-count-overflow",
    "-Werror=shift-count-negative",
    "-Werror=shift-overflow",
    "-Werror=div-by-zero",
    "-Werror=division-by-zero",
    "-Werror=int-conversion",
    "-Werror=implicit-function-declaration",
    "-Werror=incompatible-pointer-types",
    "-Werror=return-type",
    "-Werror=implicit-int",
)
CANDIDATES = ("cc", "gcc", "clang")


class CompilerNotFoundError(CompileError):
    """No C compiler: the cpu backend cannot build anything."""


class CompilerConfigError(CompilerNotFoundError, ConfigError):
    """`$CC` names a program that does not exist: no compiler (as `CompilerNotFoundError`:
    the backend is not available), and a configuration error naming CC (never a quiet fall
    back to `cc`)."""


def find_compiler() -> list[str]:
    """The compiler command: `$CC` (split like a shell would; `ConfigError` naming CC when it
    does not split, carries a flag that changes floating-point results, or names no program),
    else the first of cc, gcc, clang. Looked up once per value of `$CC` and `$PATH` (kernel
    lowering asks for it once per kernel)."""
    return list(_find_compiler(os.environ.get("CC"), os.environ.get("PATH")))


@functools.lru_cache(maxsize=8)
def _find_compiler(cc: str | None, path: str | None) -> tuple[str, ...]:
    tried: list[str] = []
    argv = env.compiler("CC")  # (cc is its value: the key of this cache)
    if argv:
        found = shutil.which(argv[0], path=path)
        if not found:
            raise CompilerConfigError(
                f"no C compiler: environment variable CC={cc!r}: {argv[0]!r} is not an "
                "executable program (on PATH, or at that path), and hlofuse does not guess "
                "another; set CC to an installed C compiler, or unset it to use cc, gcc or "
                "clang. The interpreter backend (backend='interpreter') runs without one.")
        return (found, *argv[1:])
    for name in CANDIDATES:
        found = shutil.which(name, path=path)
        if found:
            return (found,)
        tried.append(name)
    raise CompilerNotFoundError(
        "no C compiler found (tried " + ", ".join(tried) + "); install gcc or clang, or set "
        "$CC. The interpreter backend (backend='interpreter') runs without one."
    )


@functools.lru_cache(maxsize=8)
def _compiler_identity(argv: tuple[str, ...]) -> str:
    return compiler_answer(argv, "version", lambda: _ask_version(argv))


def _ask_version(argv: tuple[str, ...]) -> str:
    try:
        out = subprocess.run(
            [*argv, "--version"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompilerNotFoundError(
            f"the C compiler {argv[0]} does not run ({exc}); the interpreter backend "
            "(backend='interpreter') runs without one"
        ) from exc
    return out.splitlines()[0] if out else argv[0]


def compiler_answer(argv: tuple[str, ...], question: str, ask: Callable[[], str]) -> str:
    """What the compiler `argv` answers to `question` (`ask()` runs it: its version line, its
    target's macros), kept as a verified cache entry keyed by the question, the command, this
    CPU and the compiler binary as it is on disk (resolved path, size, modification time,
    inode): a new process does not start the compiler to ask again (~25 ms a process), and a
    changed binary is asked anew. Without a usable cache entry it asks."""
    try:
        path = os.path.realpath(argv[0])
        st = os.stat(path)
    except OSError:
        return ask()
    key = hashlib.sha256("\0".join(
        [question, *argv, path, str(st.st_size), str(st.st_mtime_ns), str(st.st_ino),
         _cpu_identity()]).encode()).hexdigest()[:24]
    try:
        memo = cachefs.root() / f"ask-{key}"
        payload = cachefs.read_entry(memo, "compiler-answer")
    except (OSError, HloError):
        return ask()
    if payload is not None:
        try:
            return payload.decode("utf-8")
        except UnicodeDecodeError:
            pass
    answer = ask()
    with contextlib.suppress(OSError):
        cachefs.write_entry(memo, "compiler-answer", answer.encode("utf-8", "replace"))
    return answer


@functools.lru_cache(maxsize=1)
def _cpu_identity() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return hashlib.sha256(line.encode()).hexdigest()[:16]
    except OSError:
        pass
    return platform.machine() + platform.processor()


@functools.lru_cache(maxsize=8)
def _compiler_facts(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The `WARNING_ERRORS` this compiler knows. Probed once per compiler; the answer is a
    verified cache entry, so a warm process does not pay for probe compiles."""
    ident = hashlib.sha256(  # "2": the warning flags probed one by one (_probe_warnings)
        "\0".join([*argv, _compiler_identity(argv), *WARNING_ERRORS, "2"]).encode()).hexdigest()
    memo = cachefs.root() / f"probe-{ident[:24]}"
    facts = _parse_facts(cachefs.read_entry(memo, "compiler-probe"))
    if facts is not None:
        return facts
    facts = _probe_warnings(argv)
    payload = json.dumps({"warning_errors": list(facts)}).encode()
    try:
        cachefs.write_entry(cachefs.root() / memo.name, "compiler-probe", payload)
    except OSError as exc:
        cachefs.unwritable(f"{memo.parent}: {exc.strerror or exc}")
    return facts


def _parse_facts(payload: bytes | None) -> tuple[str, ...] | None:
    if payload is None:
        return None
    try:
        flags = json.loads(payload)["warning_errors"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(flags, list):
        return None
    if not all(isinstance(f, str) and f in WARNING_ERRORS for f in flags):
        return None  # only our own flags are ever read back
    return tuple(flags)


def _probe_warnings(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The flags of `WARNING_ERRORS` the compiler accepts without complaint."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "w.c"
        src.write_text("int hf_probe(void) { return 0; }\n")

        def complaints(flags: list[str]) -> tuple[bool, str]:
            cmd = [*argv, "-fsyntax-only", *flags, str(src)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            except (OSError, subprocess.TimeoutExpired):
                return False, ""
            return proc.returncode == 0 and not proc.stderr.strip(), proc.stderr

        flags = list(WARNING_ERRORS)
        if complaints(flags)[0]:
            return tuple(flags)
        # One by one: an error message cannot tell which flags it is about (GCC rejecting
        # clang's -Werror=integer-overflow suggests "-Wno-overflow", so dropping every flag
        # the message names dropped GCC's own -Werror=overflow and -Werror=div-by-zero).
        return tuple(f for f in flags if complaints([f])[0])


def flags(extra_flags: tuple[str, ...] = ()) -> list[str]:
    """The full flag list for this machine's compiler."""
    argv = tuple(find_compiler())
    opt = env.cc_opt() or "-O3"
    from hlofuse.backends.cpu.host_target import march

    return [opt, march(), *BASE_FLAGS, *_compiler_facts(argv), *extra_flags]
