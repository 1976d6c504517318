"""The compile cache trusts nothing (backends/cpu/cachefs.py, build.py, artifacts.py).

- A cache directory (the root, or one under it that hlofuse uses) that is group- or
  world-writable, or owned by another user, is refused with one message naming the directory
  and HLOFUSE_CACHE_DIR, even when it holds a planted entry that would run code.
- A planted entry that is not ours (another owner) is ignored and rebuilt.
- A flipped byte in any kind of cache file (program entry, library, library digest, compiler
  probe) leads to a rebuild and the right answer.
- A read-only cache falls back to a private temporary directory with exactly one warning.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import hlofuse
from hlofuse.backends import cpu
from hlofuse.backends.cpu import artifacts, build, cachefs, runtime
from hlofuse.errors import CacheDirError

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

OTHER_UID = 65534  # nobody


def _text(tmp_path: Path) -> str:
    """A module no other test compiles (its constant comes from the test's path and time)."""
    salt = abs(hash((str(tmp_path), time.time_ns()))) % 10**6
    return f"""HloModule trust_{salt}
ENTRY e {{
  a = f32[8] parameter(0)
  c = f32[] constant({salt}.25)
  b = f32[8] broadcast(c), dimensions={{}}
  ROOT m = f32[8] multiply(a, b)
}}
"""


def _expected(text: str, a: np.ndarray) -> np.ndarray:
    salt = float(text.split("constant(")[1].split(")")[0])
    return a * np.float32(salt)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(root))
    monkeypatch.setattr(cachefs, "_FALLBACK", None)
    monkeypatch.setattr(build, "_LOADED", {})
    build._compiler_facts.cache_clear()
    yield root
    build._compiler_facts.cache_clear()


def _fresh_process_state() -> None:
    """Forget what this process remembers, as a new process would."""
    build._LOADED.clear()
    build._compiler_facts.cache_clear()


def _module_library(root: Path) -> Path:
    runtime_key = build.cache_key(runtime.RUNTIME_SOURCE)
    (lib,) = [p for p in root.rglob("*.so") if p.stem != runtime_key]
    return lib


# ----- loose or foreign directories are refused ------------------------------------------------


def _plant(root: Path, text: str, marker: Path) -> Path:
    """Rewrite the program entry for `text` into one whose C source would touch `marker` when
    loaded, with a correct digest (anyone who can write the directory can compute one)."""
    entry = next((root / "programs").glob("*.json"))
    data = json.loads(cachefs.read_entry(entry, artifacts.KIND) or b"{}")
    evil = (f'__attribute__((constructor)) static void pwn(void) {{ system("touch {marker}"); }}'
            "\n")
    data["program"]["source"] = "#include <stdlib.h>\n" + evil + data["program"]["source"]
    cachefs.write_entry(entry, artifacts.KIND, json.dumps(data).encode())
    return entry


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_loose_cache_root_with_a_planted_entry_is_refused(
        cache: Path, tmp_path: Path, mode: int) -> None:
    text, marker = _text(tmp_path), tmp_path / "pwned"
    a = np.arange(8, dtype=np.float32)
    hlofuse.compile(text)(a)
    _plant(cache, text, marker)
    os.chmod(cache, mode)
    _fresh_process_state()
    message = (rf"refusing to use the cache directory {cache}: it is group- or world-writable "
               rf"\(mode {mode:04o}\), so someone else could plant code that hlofuse would load\. "
               rf"Run `chmod go-w {cache}`, or set HLOFUSE_CACHE_DIR to a private directory\.")
    with pytest.raises(CacheDirError, match=message):
        hlofuse.compile(text)
    assert not marker.exists()


def test_loose_directory_under_the_root_is_refused(cache: Path, tmp_path: Path) -> None:
    text, marker = _text(tmp_path), tmp_path / "pwned"
    hlofuse.compile(text)(np.zeros(8, np.float32))
    _plant(cache, text, marker)
    os.chmod(cache / "programs", 0o777)
    _fresh_process_state()
    with pytest.raises(CacheDirError, match=r"programs: it is group- or world-writable.*"
                                            r"HLOFUSE_CACHE_DIR"):
        hlofuse.compile(text)
    assert not marker.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory away")
def test_cache_root_owned_by_another_user_is_refused(cache: Path, tmp_path: Path) -> None:
    text = _text(tmp_path)
    hlofuse.compile(text)(np.zeros(8, np.float32))
    os.chown(cache, OTHER_UID, OTHER_UID)
    _fresh_process_state()
    with pytest.raises(CacheDirError, match=rf"{cache}: it is owned by uid {OTHER_UID}, not by "
                                            r"you.*HLOFUSE_CACHE_DIR"):
        hlofuse.compile(text)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file away")
def test_planted_entry_owned_by_another_user_is_rebuilt(cache: Path, tmp_path: Path) -> None:
    text, marker = _text(tmp_path), tmp_path / "pwned"
    a = np.arange(8, dtype=np.float32)
    hlofuse.compile(text)(a)
    entry = _plant(cache, text, marker)
    os.chown(entry, OTHER_UID, OTHER_UID)
    _fresh_process_state()
    np.testing.assert_array_equal(hlofuse.compile(text)(a)[0], _expected(text, a))
    assert not marker.exists()
    assert entry.stat().st_uid == os.geteuid()  # rebuilt by us


def test_created_directories_are_private(cache: Path, tmp_path: Path) -> None:
    hlofuse.compile(_text(tmp_path))
    dirs = [cache, *(p for p in cache.rglob("*") if p.is_dir())]
    assert {stat.S_IMODE(d.stat().st_mode) for d in dirs} == {0o700}
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert files and all(stat.S_IMODE(f.stat().st_mode) & 0o077 == 0 for f in files)


# ----- damage of every kind leads to a rebuild -------------------------------------------------


def _flip(path: Path, where: int) -> bytes:
    """Flip one byte of `path` (a new file: a loaded library keeps its old mapping)."""
    data = bytearray(path.read_bytes())
    data[where % len(data)] ^= 0x20
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(bytes(data))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return bytes(data)


KINDS = {
    "program": lambda root: next((root / "programs").glob("*.json")),
    "library": _module_library,
    "library-digest": lambda root: _module_library(root).with_suffix(".so.digest"),
    "compiler-probe": lambda root: next(root.glob("probe-*")),
}


@pytest.mark.parametrize("where", ["header", "middle", "end"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_flipped_byte_is_rebuilt(cache: Path, tmp_path: Path, kind: str, where: str) -> None:
    text = _text(tmp_path)
    a = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(hlofuse.compile(text)(a)[0], _expected(text, a))
    path = KINDS[kind](cache)
    size = path.stat().st_size
    damaged = _flip(path, {"header": 3, "middle": size // 2, "end": size - 1}[where])
    _fresh_process_state()
    np.testing.assert_array_equal(hlofuse.compile(text)(a)[0], _expected(text, a))
    assert path.read_bytes() != damaged  # rewritten
    if kind in ("library", "library-digest"):
        lib = _module_library(cache)
        digest = cachefs.read_entry(lib.with_suffix(".so.digest"), "library-digest")
        assert digest == cachefs.digest(lib.read_bytes()).encode()
    else:
        assert cachefs.read_entry(path, "program" if kind == "program" else kind) is not None


def test_probe_memo_cannot_smuggle_flags(cache: Path, tmp_path: Path) -> None:
    hlofuse.compile(_text(tmp_path))
    memo = next(cache.glob("probe-*"))
    cachefs.write_entry(memo, "compiler-probe", json.dumps(
        {"warning_errors": ["-fplugin=/tmp/evil.so"]}).encode())
    _fresh_process_state()
    assert "-fplugin=/tmp/evil.so" not in build.flags()


# ----- read-only cache: a private fallback, one warning ----------------------------------------


def _read_only_dir(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        path = tmp_path / "ro"
        path.mkdir(mode=0o500)
        return path
    # root writes through any mode: use a read-only file system directory owned by root
    for candidate in ("/sys/kernel", "/sys/fs", "/proc/sys"):
        p = Path(candidate)
        try:
            st = p.stat()
            (p / "hlofuse-write-probe").mkdir()
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and st.st_uid == 0 \
                    and not st.st_mode & 0o022:
                return p
            continue
        (p / "hlofuse-write-probe").rmdir()
    pytest.skip("no read-only directory to test with")


def test_read_only_cache_falls_back_with_one_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ro = _read_only_dir(tmp_path)
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(ro))
    monkeypatch.setattr(cachefs, "_FALLBACK", None)
    monkeypatch.setattr(build, "_LOADED", {})
    build._compiler_facts.cache_clear()
    a = np.arange(8, dtype=np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for salt in range(2):
            text = _text(tmp_path / str(salt))
            np.testing.assert_array_equal(hlofuse.compile(text)(a)[0], _expected(text, a))
    build._compiler_facts.cache_clear()
    fallbacks = [w for w in caught if issubclass(w.category, cachefs.CacheFallbackWarning)]
    assert len(fallbacks) == 1, [str(w.message) for w in caught]
    assert "HLOFUSE_CACHE_DIR" in str(fallbacks[0].message)
    fallback = cachefs._FALLBACK
    assert fallback is not None and stat.S_IMODE(fallback.stat().st_mode) == 0o700
    assert list((fallback / "programs").glob("*.json"))


def test_nothing_in_src_unpickles() -> None:
    """No pickle, marshal or shelve anywhere in hlofuse: cached data cannot execute."""
    import ast

    src = Path(hlofuse.__file__).resolve().parent
    found = []
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.keyword) and node.arg == "allow_pickle" and not (
                    isinstance(node.value, ast.Constant) and node.value.value is False):
                found.append(f"{path.name}:{node.value.lineno} allow_pickle")
            for n in names:
                if n.split(".")[0] in ("pickle", "marshal", "shelve", "dill", "cloudpickle"):
                    found.append(f"{path.relative_to(src)}:{node.lineno} {n}")
    assert not found, found
