"""Every environment variable hlofuse reads, parsed and checked in one place.

    flag(name)            HLOFUSE_PURE, HLOFUSE_VERIFY, HLOFUSE_CHECK_KEPT: on or off
    threads()             HLOFUSE_THREADS: None, or a positive integer (ASCII digits)
    cc_opt()              HLOFUSE_CC_OPT: None, or one optimisation level of `OPT_LEVELS`
    compiler()            CC: None, or its words (split like a shell), no flag of `FP_FLAGS`
    choice(name, known)   HLOFUSE_TARGET, HLOFUSE_BLAS, HLOFUSE_MALLOC: None, or one of the
                          known words
    path(name)            HLOFUSE_CACHE_DIR, HLOFUSE_BENCHMARKS: None, or an absolute path
    raw(name)             TRITON_INTERPRET (Triton's own: "1" runs its kernels on the CPU; the
                          gpu backend asks whether it is set as Triton reads it)

A variable that is unset or empty (blank) means its default everywhere. Any other value that
is not one hlofuse can use raises `ConfigError`, whose message names the variable, quotes the
value and says what is allowed; nothing is silently ignored, clamped or replaced by a default
(a `CC` that does not exist is an error, not a quiet fall back to `cc`).

Conditions enforced:
- Numbers are ASCII decimal digits only (`str.isdigit` takes '³' and '٣'), within a bound.
- No setting can change the generated code's IEEE semantics: `HLOFUSE_CC_OPT` is one of the
  plain optimisation levels (`-Ofast` implies `-ffast-math`), and `CC` may carry no flag that
  changes floating-point results (`FP_FLAGS`: `-ffast-math`, `-ffinite-math-only`, ...) or
  hides the compiler's warnings (`-w`, which would drop the build's `-Werror=` checks).
- The values are read when asked for, never cached here: tests and callers may change them.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from pathlib import Path

from hlofuse.errors import ConfigError

MAX_THREADS = 1 << 16
# The optimisation levels HLOFUSE_CC_OPT may name (GCC's and clang's; -Ofast is not one: it
# implies -ffast-math).
OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os", "-Og", "-Oz", "-O")
# Flags (and flag prefixes) that change floating-point results or disable warnings.
FP_FLAGS = (
    "-Ofast", "-ffast-math", "-funsafe-math-optimizations", "-ffinite-math-only",
    "-fno-honor-nans", "-fno-honor-infinities", "-fassociative-math", "-freciprocal-math",
    "-fno-signed-zeros", "-ffp-contract=fast", "-ffp-contract=on", "-ffp-model=fast",
    "-ffp-model=aggressive", "-fcx-limited-range", "-fcx-fortran-rules", "-fapprox-func",
    "-menable-unsafe-fp-math", "-mrecip", "-mfpmath=387", "-fexcess-precision=fast",
    "-fsingle-precision-constant",
    "-mdaz-ftz", "-w",
)
_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def raw(name: str) -> str | None:
    """The variable's value with surrounding blanks removed; None when unset or blank."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def _bad(name: str, value: str, allowed: str) -> ConfigError:
    return ConfigError(f"environment variable {name}={value!r}: {allowed} (unset it for the "
                       "default)")


def flag(name: str) -> bool:
    """A switch: unset, empty, 0, false, no or off is off; 1, true, yes or on is on."""
    value = raw(name)
    if value is None or value.lower() in _OFF:
        return False
    if value.lower() in _ON:
        return True
    raise _bad(name, value, "expected 1/true/yes/on or 0/false/no/off")


def integer(name: str, low: int, high: int) -> int | None:
    """A decimal integer in [low, high] written in ASCII digits, or None when unset."""
    value = raw(name)
    if value is None:
        return None
    if not (value.isascii() and value.isdigit()) or not low <= int(value) <= high:
        raise _bad(name, value, f"expected a whole number from {low} to {high} in ASCII "
                                "digits")
    return int(value)


def threads() -> int | None:
    """HLOFUSE_THREADS: how many threads parallel loops may use (None: the CPUs)."""
    return integer("HLOFUSE_THREADS", 1, MAX_THREADS)


def cc_opt() -> str | None:
    """HLOFUSE_CC_OPT: the optimisation level of all generated code (None: the defaults)."""
    value = raw("HLOFUSE_CC_OPT")
    if value is None or value in OPT_LEVELS:
        return value
    why = ("it changes floating-point results (NaN and infinity semantics)"
           if value in FP_FLAGS or value.startswith("-f") else "not an optimisation level")
    raise _bad("HLOFUSE_CC_OPT", value, f"{why}; expected one of {', '.join(OPT_LEVELS)}")


def _fp_flag(word: str) -> str | None:
    for f in FP_FLAGS:
        if word == f or (f != "-w" and word.startswith(f)):
            return f
    return None


def compiler(name: str = "CC") -> list[str] | None:
    """CC: the compiler command as words (split like a shell); None when unset. A command that
    does not split, or that carries a flag of `FP_FLAGS`, raises `ConfigError`."""
    value = raw(name)
    if value is None:
        return None
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise _bad(name, value, f"it does not split into words like a shell would ({exc})") \
            from None
    if not words:
        return None
    for word in words[1:]:
        bad = _fp_flag(word)
        if bad is not None:
            raise _bad(name, value, f"{word} changes floating-point results or hides the "
                                    "compiler's warnings, which hlofuse relies on; give the "
                                    "compiler alone")
    return words


def choice(name: str, known: Iterable[str], *, lower: bool = False) -> str | None:
    """One of the words `known` (compared in lower case when `lower`), or None when unset."""
    value = raw(name)
    if value is None:
        return None
    known = tuple(known)
    if (value.lower() if lower else value) in known:
        return value.lower() if lower else value
    raise _bad(name, value, f"expected one of {', '.join(known)}")


def path(name: str) -> Path | None:
    """A directory path (`~` expanded, made absolute), or None when unset."""
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    if value != value.strip() or "\n" in value:
        raise _bad(name, value, "a path with leading or trailing blanks or a newline is "
                                "almost certainly a mistake")
    return Path(os.path.expanduser(value)).absolute()
