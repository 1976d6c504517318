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


def test_a_warm_compile_reads_the_module_only_when_it_is_asked_for(cache, monkeypatch):
    from hlofuse.backends.cpu import cachefs
    from hlofuse.text import print_module

    a, b = _args()
    first = hlofuse.compile(TEXT)
    assert len(list((cache / "programs").glob("*.hlo"))) == 1
    reads: list[str] = []
    real_read = cachefs.read_entry

    def spy(path, kind):
        reads.append(kind)
        return real_read(path, kind)

    monkeypatch.setattr(cachefs, "read_entry", spy)
    build._LOADED.clear()
    second = hlofuse.compile(TEXT)
    np.testing.assert_array_equal(second(a, b)[0], (a + b) * a)
    assert artifacts.MODULE_KIND not in reads
    assert print_module(second.module) == print_module(first.module)
    assert reads.count(artifacts.MODULE_KIND) == 1


@pytest.mark.parametrize("damage", ["missing", "garbled", "not hlo"])
def test_a_damaged_module_entry_is_made_again_from_the_text(cache, damage):
    from hlofuse.backends.cpu import cachefs
    from hlofuse.text import print_module

    a, b = _args()
    first = hlofuse.compile(TEXT)
    (module_entry,) = (cache / "programs").glob("*.hlo")
    if damage == "missing":
        module_entry.unlink()
    elif damage == "garbled":
        module_entry.write_bytes(module_entry.read_bytes()[:-5])
    else:
        cachefs.write_entry(module_entry, artifacts.MODULE_KIND, b"HloModule m\nENTRY e {")
    build._LOADED.clear()
    second = hlofuse.compile(TEXT)
    np.testing.assert_array_equal(second(a, b)[0], (a + b) * a)
    assert print_module(second.module) == print_module(first.module)
    assert second.module.entry.root.opcode.name == "FUSION"  # the pipeline ran again
    assert cachefs.read_entry(module_entry, artifacts.MODULE_KIND) == print_module(
        first.module).encode()  # and its entry was written again


def test_the_cache_remakes_a_module_only_through_the_route_it_is_given(cache):
    """The cache parses only its own entries and runs no pipeline: a damaged module entry is
    made again by the `remake` api hands `lookup`, and without one it is an error."""
    hlofuse.compile(TEXT)
    (module_entry,) = (cache / "programs").glob("*.hlo")
    module_entry.unlink()
    hit = artifacts.lookup(TEXT, "hlofuse")
    assert hit is not None
    with pytest.raises(hlofuse.HloError, match="missing or damaged"):
        hit[0]()
    made = hlofuse.parse(TEXT)
    hit = artifacts.lookup(TEXT, "hlofuse", remake=lambda: made)
    assert hit is not None and hit[0]() is made


SITES = """HloModule m
ENTRY e {
  a = f32[16] parameter(0)
  b = f32[16] parameter(1)
  u = f32[4] parameter(2)
  i = s32[] parameter(3)
  x = f32[16] exponential(a)
  y = f32[16] exponential(b)
  d = f32[16] dynamic-update-slice(x, u, i)
  ROOT t = (f32[16], f32[16], f32[16]) tuple(x, y, d)
}
"""


def test_the_kernel_table_is_stored_once_per_kernel_and_read_back_whole():
    import json

    from hlofuse.backends import cpu
    from hlofuse.text import parse

    program = cpu.generate(parse(SITES))
    assert [bool(k.source) for k in program.kernels] == [True, False, True]  # x and y share
    assert program.kernels[2].inplace == {0: 0}
    data = json.loads(json.dumps(artifacts.program_to_data(program)))
    assert len(data["kernels"]) == 3 and len(data["sites"]) == 3
    assert [row["source"] != "" for row in data["kernels"]] == [True, False, True]
    assert artifacts.program_from_data(data) == program


@pytest.mark.parametrize("site", [[3, "x"], [-1, "x"], [0], [0, 1], "0", [True, "x"]])
def test_a_bad_kernel_site_is_not_a_program(site):
    import json

    from hlofuse.backends import cpu
    from hlofuse.text import parse

    data = json.loads(json.dumps(artifacts.program_to_data(cpu.generate(parse(SITES)))))
    data["sites"][1] = site
    with pytest.raises(artifacts._Bad):
        artifacts.program_from_data(data)


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
