"""Every environment variable hlofuse reads is validated (hlofuse/env.py): a value it cannot use
raises `ConfigError` naming the variable, never a ValueError, a silent default or a silent
change of floating-point semantics.

- HLOFUSE_THREADS: ASCII digits only ('³' and '٣' are digits to `str.isdigit`), in bounds.
- CC: a stray quote, a program that does not exist, a flag that changes FP results.
- HLOFUSE_CC_OPT: plain optimisation levels only (-Ofast, -ffast-math refused).
- HLOFUSE_TARGET, HLOFUSE_BLAS, HLOFUSE_PURE, HLOFUSE_VERIFY, HLOFUSE_CHECK_KEPT,
  HLOFUSE_CACHE_DIR, HLOFUSE_BENCHMARKS: known words or sane paths.
- No module outside hlofuse/env.py reads os.environ for an HLOFUSE_ variable or CC.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import hlofuse
from hlofuse import env
from hlofuse.backends.cpu import build, host_target, runtime, units
from hlofuse.backends.cpu.library import blas
from hlofuse.errors import ConfigError, HloError
from hlofuse.passes import base

NEGATE = """HloModule env_negate
ENTRY e {
  a = f32[4] parameter(0)
  ROOT n = f32[4] negate(a)
}
"""


def _threads() -> object:
    return runtime.default_threads()


def _compiler() -> object:
    build._find_compiler.cache_clear()
    return build.find_compiler()


def _flags() -> object:
    return build.flags()


def _target() -> object:
    return host_target.detect()


def _march() -> object:
    return host_target.march()


def _verify() -> object:
    return base.Context().verify_enabled


CASES: list[tuple[str, str, Callable[[], object]]] = [
    ("HLOFUSE_THREADS", "\u00b3", _threads),
    ("HLOFUSE_THREADS", "\u0663", _threads),
    ("HLOFUSE_THREADS", "0", _threads),
    ("HLOFUSE_THREADS", "-2", _threads),
    ("HLOFUSE_THREADS", "4.0", _threads),
    ("HLOFUSE_THREADS", "9" * 40, _threads),
    ("CC", 'gcc "-O2', _compiler),
    ("CC", "hlofuse-no-such-compiler-xyz", _compiler),
    ("CC", "gcc -ffast-math", _compiler),
    ("CC", "gcc -Ofast", _compiler),
    ("CC", "gcc -ffinite-math-only", _compiler),
    ("CC", "gcc -w", _compiler),
    ("HLOFUSE_CC_OPT", "-Ofast", _flags),
    ("HLOFUSE_CC_OPT", "-ffast-math", _flags),
    ("HLOFUSE_CC_OPT", "-O3 -funsafe-math-optimizations", _flags),
    ("HLOFUSE_CC_OPT", "-fplugin=/tmp/x.so", _flags),
    ("HLOFUSE_CC_OPT", "-Ofast", units.kernel_flags),
    ("HLOFUSE_TARGET", "avx1024", _target),
    ("HLOFUSE_TARGET", "avx1024", _march),
    ("HLOFUSE_BLAS", "sometimes", blas.enabled),
    ("HLOFUSE_VERIFY", "perhaps", _verify),
    ("HLOFUSE_CHECK_KEPT", "2", base.checking_kept),
    ("HLOFUSE_CACHE_DIR", " /tmp/x", lambda: __import__(
        "hlofuse.backends.cpu.cachefs", fromlist=["x"]).configured_root()),
]


@pytest.mark.parametrize(("name", "value", "read"), CASES,
                         ids=[f"{n}={v[:12]!r}-{r.__name__}" for n, v, r in CASES])
def test_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str,
                                      read: Callable[[], object]) -> None:
    monkeypatch.setenv(name, value)
    build._find_compiler.cache_clear()
    with pytest.raises(ConfigError, match=rf"environment variable {name}="):
        read()
    build._find_compiler.cache_clear()


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("HLOFUSE_THREADS", " 3 ", 3),
    ("HLOFUSE_THREADS", "", None),
    ("HLOFUSE_CC_OPT", "-O1", "-O1"),
    ("HLOFUSE_CC_OPT", "", None),
])
def test_good_values(monkeypatch: pytest.MonkeyPatch, name: str, value: str,
                     expected: object) -> None:
    monkeypatch.setenv(name, value)
    assert {"HLOFUSE_THREADS": env.threads, "HLOFUSE_CC_OPT": env.cc_opt}[name]() == expected


@pytest.mark.parametrize("value", ["1", "true", "YES", "on", " 1 "])
def test_switch_on(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("HLOFUSE_VERIFY", value)
    assert env.flag("HLOFUSE_VERIFY")


@pytest.mark.parametrize("value", ["", "0", "false", "No", "off"])
def test_switch_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("HLOFUSE_VERIFY", value)
    assert not env.flag("HLOFUSE_VERIFY")


def test_compile_reports_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: a bad value is a clean hlofuse error (an HloError) from compile."""
    monkeypatch.setenv("HLOFUSE_CC_OPT", "-Ofast")
    with pytest.raises(HloError, match=r"HLOFUSE_CC_OPT='-Ofast'.*floating-point"):
        hlofuse.compile(NEGATE + "// cc-opt\n")(np.ones(4, np.float32))


def test_missing_cc_does_not_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "hlofuse-no-such-compiler-xyz -O2")
    build._find_compiler.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"CC='hlofuse-no-such-compiler-xyz -O2'.*not an "
                                              "executable program"):
            hlofuse.compile(NEGATE + "// cc\n", backend="cpu")
    finally:
        build._find_compiler.cache_clear()


def test_bad_pure_switch_is_reported_at_import() -> None:
    proc = subprocess.run([sys.executable, "-c", "import hlofuse"], capture_output=True,
                          text=True, env={"HLOFUSE_PURE": "maybe", "PATH": "/usr/bin:/bin"},
                          timeout=120)
    assert proc.returncode != 0
    assert "ConfigError: environment variable HLOFUSE_PURE='maybe'" in proc.stderr


def test_only_env_module_reads_the_environment() -> None:
    """One module parses hlofuse's environment variables: no other reads os.environ/getenv
    (setting a variable for a child process is fine)."""
    src = Path(hlofuse.__file__).resolve().parent
    found = []
    for path in sorted(src.rglob("*.py")):
        if path.name == "env.py" and path.parent == src:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            reads = (isinstance(node, ast.Call) and re.fullmatch(
                r"os\.(environ\.get|getenv)", ast.unparse(node.func)) is not None)
            indexes = (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                       and ast.unparse(node.value) == "os.environ")
            if reads or indexes:
                found.append(f"{path.relative_to(src)}:{node.lineno}")
    allowed = {"backends/cpu/compiler.py"}  # find_compiler's lru_cache key: CC and PATH as given
    assert {f.split(":")[0] for f in found} <= allowed, found
