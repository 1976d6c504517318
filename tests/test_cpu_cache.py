"""The cpu backend's build cache seen from the user's side: several processes compiling the same new
module into an empty cache at once all succeed with equal results, a corrupt cached library is
rebuilt, and a warm load (same process or a new one) reuses the cache without compiling.

Every test uses its own empty cache directory (`HLOFUSE_CACHE_DIR`) and a module no other test
compiles (a constant derived from the test's temporary path), so nothing is shared by accident.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import hlofuse
from hlofuse.backends import cpu, interpreter
from hlofuse.backends.cpu import build, cachefs, runtime
from hlofuse.text import parse

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _module_text(salt: int) -> str:
    return f"""HloModule cache_probe_{salt}
ENTRY main {{
  p0 = f32[64]{{0}} parameter(0)
  p1 = s32[64]{{0}} parameter(1)
  c = f32[] constant({salt}.5)
  b = f32[64]{{0}} broadcast(c), dimensions={{}}
  m = f32[64]{{0}} multiply(p0, b)
  e = f32[64]{{0}} exponential(m)
  n = s32[64]{{0}} negate(p1)
  ROOT t = (f32[64]{{0}}, s32[64]{{0}}) tuple(e, n)
}}
"""


def _salt(tmp_path: Path) -> int:
    return abs(hash((str(tmp_path), time.time_ns()))) % 10**6


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal(64).astype(np.float32) * 1e-7,
            rng.integers(-100, 100, 64).astype(np.int32))


_WORKER = """
import json, sys, time
import numpy as np
sys.path.insert(0, {src!r})
import hlofuse
text, start = sys.argv[1], float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
exe = hlofuse.compile(text)
rng = np.random.default_rng(0)
x = rng.standard_normal(64).astype(np.float32) * 1e-7
n = rng.integers(-100, 100, 64).astype(np.int32)
outs = exe(x, n)
print(json.dumps([o.tobytes().hex() for o in outs]))
"""


def _spawn(text: str, cache: Path, start: float) -> subprocess.Popen[str]:
    env = {**os.environ, "HLOFUSE_CACHE_DIR": str(cache)}
    return subprocess.Popen(
        [sys.executable, "-c", _WORKER.format(src=SRC), text, repr(start)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _cache_files(cache: Path) -> dict[str, int]:
    """The cache's libraries, checksums and kept C files, with their modification times (the
    SIGINT runtime library aside: each cache builds it once, whichever process comes first)."""
    runtime_key = build.cache_key(runtime.RUNTIME_SOURCE)
    return {str(p.relative_to(cache)): p.stat().st_mtime_ns
            for p in cache.rglob("*") if p.suffix in (".so", ".digest", ".c", ".json")
            and runtime_key not in p.name and runtime_key[:16] not in p.name}


def test_concurrent_processes_share_an_empty_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    text = _module_text(_salt(tmp_path))
    start = time.time() + 3.0  # after every worker has imported hlofuse
    procs = [_spawn(text, cache, start) for _ in range(4)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r == results[0] for r in results)
    want = interpreter.run(parse(text), *_inputs())
    got = [np.frombuffer(bytes.fromhex(h), w.dtype).reshape(w.shape)
           for h, w in zip(results[0], want, strict=True)]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_array_equal(got[1], want[1])
    libs = _module_libraries(cache)
    assert len(libs) == 1, libs  # one entry, no leftover temporary libraries
    assert not [p for p in cache.rglob(".*") if p.is_file()]


def _module_libraries(cache: Path) -> list[Path]:
    """The cache's libraries, without the SIGINT runtime library (runtime.py) every process
    builds or loads once."""
    runtime_key = build.cache_key(runtime.RUNTIME_SOURCE)
    return [p for p in cache.rglob("*.so") if p.stem != runtime_key]


def _replace_bytes(path: Path, data: bytes) -> None:
    """Write a new file over `path` (a new inode: this process keeps its mapping of the old one,
    which truncating in place would turn into a SIGBUS)."""
    tmp = path.with_name(path.name + ".damaged")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@pytest.mark.parametrize("damage", ["truncate", "garble", "no-checksum"])
def test_corrupt_entry_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  damage: str) -> None:
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path))
    text = _module_text(_salt(tmp_path))
    first = hlofuse.compile(text)(*_inputs())
    (lib,) = _module_libraries(tmp_path)
    checksum = lib.with_name(lib.name + ".digest")
    data = lib.read_bytes()
    if damage == "truncate":
        _replace_bytes(lib, data[: len(data) // 3])
    elif damage == "garble":
        _replace_bytes(lib, bytes(b ^ 0x5A for b in data))
    else:
        checksum.unlink()
    # a new process finds the damaged entry, rebuilds it and gets the same results
    proc = _spawn(text, tmp_path, 0.0)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == [o.tobytes().hex() for o in first]
    assert cachefs.read_entry(checksum, "library-digest") == \
        cachefs.digest(lib.read_bytes()).encode()
    assert lib.read_bytes() == data  # the same compiler and flags rebuild the same library


def test_warm_load_does_not_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path))
    text = _module_text(_salt(tmp_path))
    x, n = _inputs()
    first = hlofuse.compile(text)(x, n)
    before = _cache_files(tmp_path)

    def no_compiles(*args: object, **kwargs: object) -> None:
        raise AssertionError("a warm load ran the C compiler")

    monkeypatch.setattr(build, "_build", no_compiles)
    same_process = hlofuse.compile(text)(x, n)
    monkeypatch.setattr(build, "_LOADED", {})
    reloaded = hlofuse.compile(text)(x, n)
    for a, b, c in zip(first, same_process, reloaded, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    # and a new process finds the entry without writing anything
    proc = _spawn(text, tmp_path, 0.0)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == [o.tobytes().hex() for o in first]
    assert _cache_files(tmp_path) == before


@pytest.mark.parametrize(("first", "second"), [("avx2", "sse2"), ("sse2", "avx2"),
                                               ("avx512", "sse2"), ("avx2", "scalar")])
def test_program_cache_key_covers_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             first: str, second: str) -> None:
    """A program generated for one target (HLOFUSE_TARGET, or the detected host) is never
    reused for another: the second compile generates its own C, with its own vector width."""
    from hlofuse.backends.cpu import artifacts

    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path))
    text = _module_text(_salt(tmp_path))
    x, n = _inputs()
    expected = interpreter.run(parse(text), x, n)
    sources = {}
    for name in (first, second):
        monkeypatch.setenv("HLOFUSE_TARGET", name)
        exe = hlofuse.compile(text)
        for got, want in zip(exe(x, n), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=2e-6)
        sources[name] = exe.source
    assert len(list((tmp_path / "programs").glob("*.json"))) == 2
    assert sources[first] != sources[second]
    monkeypatch.setenv("HLOFUSE_TARGET", first)
    k1 = artifacts.key(text, "xla")
    monkeypatch.setenv("HLOFUSE_TARGET", second)
    assert artifacts.key(text, "xla") != k1
