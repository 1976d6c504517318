"""pytest configuration shared by the test suite: tests/ on sys.path (for `programs`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

# Debug checking: every pipeline run by a test verifies the module after each pass.
os.environ.setdefault("HLOFUSE_VERIFY", "1")

# The cpu backend's tests compile a few hundred generated C files on a cold cache (CI): -O1 keeps
# that fast. Benchmarks and users get the default -O3.
os.environ.setdefault("HLOFUSE_CC_OPT", "-O1")


@pytest.fixture
def private_cpu_cache(monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    """A cache directory of the test's own and no library loaded before it: what the test
    compiles, it compiles (use with `pytest.fixture(autouse=True)` or `usefixtures`)."""
    from hlofuse.backends.cpu import build

    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "_LOADED", {})


def _have_cc() -> bool:
    from hlofuse.backends.cpu import available

    return available()


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """Tests marked `pure_core` (they patch classes of the pass core) skip here when the core
    is compiled: tests/test_native.py runs them in a process of their own on the sources.
    Without a C compiler, the cpu backend's tests skip with one clear reason (everything else,
    the interpreter included, still runs)."""
    from hlofuse import native

    if native.STATE.compiled:
        elsewhere = pytest.mark.skip(reason="patches the compiled pass core: run on the sources "
                                     "by test_native.py::test_tests_that_patch_the_core")
        for item in items:
            if item.get_closest_marker("pure_core"):
                item.add_marker(elsewhere)
    if _have_cc():
        return
    skip = pytest.mark.skip(reason="no C compiler (gcc/clang/$CC): the cpu backend is off")
    for item in items:
        name = item.path.name
        if name.startswith(("test_cpu_", "test_bench_")) and "missing_compiler" not in item.name:
            item.add_marker(skip)
