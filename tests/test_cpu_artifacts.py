"""The compile cache above the library cache (backends/cpu/artifacts.py): a second compile of
the same HLO text runs neither the pipeline nor the C generation, and a damaged entry is rebuilt.
(Trust and damage of every kind of cache file: tests/security/test_cache_trust.py.)"""

from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.backends.cpu import artifacts, build

pytestmark = pytest.mark.skipif(not hlofuse.backends.cpu.available(), reason="no C compiler")

TEXT = """HloModule m
ENTRY e {
  a = f32[8] parameter(0)
  b = f32[8] parameter(1)
  s = f32[8] add(a, b)
  ROOT m = f32[8] multiply(s, a)
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path))
    build._LOADED.clear()
    yield tmp_path
    build._LOADED.clear()


def _args():
    a = np.arange(8, dtype=np.float32)
    return a, np.full(8, 2, np.float32)


def test_warm_compile_skips_pipeline_and_codegen(cache, monkeypatch):
    a, b = _args()
    first = hlofuse.compile(TEXT)
    np.testing.assert_array_equal(first(a, b)[0], (a + b) * a)

    def boom(*_args, **_kwargs):
        raise AssertionError("a warm compile must not run this")

    monkeypatch.setattr("hlofuse.passes.pipelines.run_pipeline", boom)
    monkeypatch.setattr("hlofuse.backends.cpu.driver.generate", boom)
    build._LOADED.clear()
    second = hlofuse.compile(TEXT)
    np.testing.assert_array_equal(second(a, b)[0], (a + b) * a)
    assert second.module.entry.root.opcode.name == "FUSION"  # the optimised module


def test_pipeline_is_part_of_the_key(cache):
    assert artifacts.key(TEXT, "xla") != artifacts.key(TEXT, "none")
    hlofuse.compile(TEXT, pipeline="xla")
    assert artifacts.lookup(TEXT, "none") is None
    assert artifacts.lookup(TEXT, "xla") is not None


def test_damaged_entry_is_rebuilt(cache):
    a, b = _args()
    hlofuse.compile(TEXT)
    entries = list((cache / "programs").glob("*.json"))
    assert len(entries) == 1
    entries[0].write_bytes(b"not an entry")
    assert artifacts.lookup(TEXT, "hlofuse") is None
    exe = hlofuse.compile(TEXT)
    np.testing.assert_array_equal(exe(a, b)[0], (a + b) * a)
    assert artifacts.lookup(TEXT, "hlofuse") is not None


def test_the_entry_is_made_while_the_library_builds_and_written_only_if_it_loads(
        cache, monkeypatch):
    import threading

    from hlofuse.backends.cpu.executable import CpuExecutable

    made_on: list[str] = []
    real_entry = artifacts.entry

    def entry(*args, **kwargs):
        made_on.append(threading.current_thread().name)
        return real_entry(*args, **kwargs)

    monkeypatch.setattr(artifacts, "entry", entry)
    hlofuse.compile(TEXT)
    assert len(made_on) == 1 and made_on[0] != threading.current_thread().name
    assert artifacts.lookup(TEXT, "hlofuse") is not None

    def no_library(*_args, **_kwargs):
        raise build.CCompileError("the C compiler failed (test)", cache / "x.c")

    monkeypatch.setattr(CpuExecutable, "__init__", no_library)
    other = TEXT.replace("HloModule m", "HloModule m2")
    with pytest.raises(build.CCompileError):
        hlofuse.compile(other)
    assert len(made_on) == 2  # made alongside, but never written
    assert artifacts.lookup(other, "hlofuse") is None


SPLIT = """HloModule split_lib
ENTRY e {
  x = f32[256,1024] parameter(0)
  e = f32[256,1024] exponential(x)
  t = f32[256,1024] tanh(x)
  a = f32[256,1024] add(e, t)
  ROOT s = f32[256,1024] multiply(a, x)
}
"""


def test_a_warm_compile_loads_the_recorded_library_without_cutting_the_c(cache, monkeypatch):
    from hlofuse.backends.cpu import units

    monkeypatch.setattr(units, "UNIT_BYTES", 1)  # a program of several units
    x = np.linspace(-2, 2, 256 * 1024, dtype=np.float32).reshape(256, 1024)
    cold = hlofuse.compile(SPLIT)
    want = cold(x)[0]
    assert artifacts.library(SPLIT, "hlofuse") == cold._runner.library_key
    build._LOADED.clear()  # as a new process

    def boom(*_args, **_kwargs):
        raise AssertionError("the recorded library key is enough")

    with monkeypatch.context() as m:
        m.setattr(units, "units", boom)
        m.setattr(build, "load_units", boom)
        warm = hlofuse.compile(SPLIT)
    np.testing.assert_array_equal(warm(x)[0], want)


def test_a_recorded_library_is_used_only_where_it_was_built(cache, monkeypatch):
    from hlofuse.backends.cpu import units

    monkeypatch.setattr(units, "UNIT_BYTES", 1)
    x = np.linspace(-2, 2, 256 * 1024, dtype=np.float32).reshape(256, 1024)
    want = hlofuse.compile(SPLIT)(x)[0]
    key = artifacts.library(SPLIT, "hlofuse")
    assert key is not None
    calls: list[int] = []
    real = build.load_units

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(build, "load_units", counting)
    # another compiler, flags or CPU: the record is ignored, the key found from the C
    build._LOADED.clear()
    with monkeypatch.context() as m:
        m.setattr(build, "build_context", lambda *_: "another machine")
        assert artifacts.library(SPLIT, "hlofuse") is None
        np.testing.assert_array_equal(hlofuse.compile(SPLIT)(x)[0], want)
    assert calls == [1]
    # the recorded library is gone: found (rebuilt) from the C again
    build._LOADED.clear()
    for f in cache.glob(f"{key[:2]}/{key}.so*"):
        f.unlink()
    np.testing.assert_array_equal(hlofuse.compile(SPLIT)(x)[0], want)
    assert calls == [1, 1]
    # a record that is not a key never becomes a path
    for bad in ("../../etc/x", key.upper(), key[:-1], ""):
        assert build.load_cached(bad) is None
