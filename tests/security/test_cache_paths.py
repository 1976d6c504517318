"""The cache trusts no path it did not create (backends/cpu/cachefs.py, build.py).

- An ancestor of the cache directory that another user could change (writable by others and
  not sticky, or owned by someone else) moves this process's cache to a private temporary
  directory with one warning; a sticky one (like /tmp) is fine.
- A symbolic link as the cache root, or as a directory under it, is refused; a link among the
  ancestors is followed only when it is ours or root's.
- The compiler reads its C from a directory made for that compile (0700): swapping or editing
  the copy kept under the cache's src/ while it compiles changes nothing.
- The library loaded is the bytes whose digest was checked: swapping the file between the check
  and the load changes nothing.
- A full disk (ENOSPC) while storing units, libraries or program entries, or reported by the
  compiler writing its output, falls back like a read-only cache.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import hlofuse
from hlofuse.backends import cpu
from hlofuse.backends.cpu import build, cachefs
from hlofuse.errors import CacheDirError

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

OTHER_UID = 65534  # nobody


def _text(tmp_path: Path) -> str:
    salt = abs(hash((str(tmp_path), time.time_ns()))) % 10**6
    return f"""HloModule paths_{salt}
ENTRY e {{
  a = f32[8] parameter(0)
  c = f32[] constant({salt}.5)
  b = f32[8] broadcast(c), dimensions={{}}
  ROOT m = f32[8] add(a, b)
}}
"""


def _check(text: str) -> None:
    a = np.arange(8, dtype=np.float32)
    salt = float(text.split("constant(")[1].split(")")[0])
    np.testing.assert_array_equal(hlofuse.compile(text)(a)[0], a + np.float32(salt))


def _reset() -> None:
    build._LOADED.clear()
    build._compiler_facts.cache_clear()
    build._compiler_identity.cache_clear()


@pytest.fixture
def use(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """use(path): make `path` the configured cache directory, as a new process would."""
    monkeypatch.setattr(cachefs, "_FALLBACK", None)
    monkeypatch.setattr(build, "_LOADED", {})

    def configure(path: Path) -> None:
        monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(path))
        monkeypatch.setattr(cachefs, "_FALLBACK", None)
        _reset()

    yield configure
    _reset()


def _fallbacks(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, cachefs.CacheFallbackWarning)]


# ----- ancestors -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757, 0o770])
def test_parent_writable_by_others_moves_the_cache(tmp_path: Path, use: object,
                                                   mode: int) -> None:
    parent = tmp_path / "shared"
    parent.mkdir()
    os.chmod(parent, mode)
    use(parent / "deep" / "cache")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(2):
            _check(_text(tmp_path / str(i)))
    (message,) = _fallbacks(caught)
    assert f"{parent} is writable by others (mode {mode:04o}, not sticky)" in message
    assert "HLOFUSE_CACHE_DIR" in message
    assert not (parent / "deep").exists()  # nothing created or read under it
    fallback = cachefs._FALLBACK
    assert fallback is not None and stat.S_IMODE(fallback.stat().st_mode) == 0o700
    assert list((fallback / "programs").glob("*.json"))


def test_grandparent_writable_by_others_moves_the_cache(tmp_path: Path, use: object) -> None:
    top = tmp_path / "top"
    (top / "mine").mkdir(parents=True)
    os.chmod(top, 0o777)
    use(top / "mine" / "cache")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check(_text(tmp_path))
    assert len(_fallbacks(caught)) == 1
    assert not (top / "mine" / "cache").exists()


def test_sticky_parent_is_fine(tmp_path: Path, use: object) -> None:
    parent = tmp_path / "sticky"
    parent.mkdir()
    os.chmod(parent, 0o1777)  # like /tmp
    use(parent / "cache")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check(_text(tmp_path))
    assert not _fallbacks(caught)
    assert list((parent / "cache" / "programs").glob("*.json"))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory away")
def test_parent_owned_by_another_user_moves_the_cache(tmp_path: Path, use: object) -> None:
    parent = tmp_path / "theirs"
    parent.mkdir(mode=0o755)
    os.chown(parent, OTHER_UID, OTHER_UID)
    use(parent / "cache")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check(_text(tmp_path))
    (message,) = _fallbacks(caught)
    assert f"{parent} is owned by uid {OTHER_UID}" in message
    assert not (parent / "cache").exists()


# ----- symbolic links --------------------------------------------------------------------------


def test_symlinked_cache_root_is_refused(tmp_path: Path, use: object) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    use(link)
    with pytest.raises(CacheDirError, match=rf"{link}: it is a symbolic link.*HLOFUSE_CACHE_DIR"):
        hlofuse.compile(_text(tmp_path))
    assert not any(real.iterdir())


def test_symlinked_directory_under_the_root_is_refused(tmp_path: Path, use: object) -> None:
    root = tmp_path / "cache"
    use(root)
    _check(_text(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    (root / "programs").rename(elsewhere)
    (root / "programs").symlink_to(elsewhere)
    _reset()
    with pytest.raises(CacheDirError, match=r"programs: it is a symbolic link"):
        hlofuse.compile(_text(tmp_path))


def test_our_own_link_among_the_ancestors_is_followed(tmp_path: Path, use: object) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "via").symlink_to(real)
    use(tmp_path / "via" / "cache")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check(_text(tmp_path))
    assert not _fallbacks(caught)
    assert cachefs.root() == real / "cache"  # the resolved path is what is used
    assert list((real / "cache" / "programs").glob("*.json"))


def test_link_to_a_loose_directory_is_not_trusted(tmp_path: Path, use: object) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)
    (tmp_path / "via").symlink_to(loose)
    use(tmp_path / "via" / "cache")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check(_text(tmp_path))
    (message,) = _fallbacks(caught)
    assert f"{loose} is writable by others" in message


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a link away")
def test_link_owned_by_another_user_is_not_followed(tmp_path: Path, use: object) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    link = sticky / "via"
    link.symlink_to(real)
    os.lchown(link, OTHER_UID, OTHER_UID)  # in a sticky directory its owner can replace it
    use(link / "cache")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check(_text(tmp_path))
    (message,) = _fallbacks(caught)
    assert f"{link} is a symbolic link owned by uid {OTHER_UID}" in message


# ----- the compiler's input --------------------------------------------------------------------


UNITS = ["int hf_one(void) { return 1; }\n",
         "int hf_one(void);\nint hf_value(void) { return hf_one() + 41; }\n"]
EVIL = "int hf_value(void) { return 666; }\nint hf_one(void) { return 666; }\n"


@pytest.mark.parametrize("split", [False, True])
def test_compiler_reads_a_private_copy(tmp_path: Path, use: object,
                                       monkeypatch: pytest.MonkeyPatch, split: bool) -> None:
    """Each compile's C is in a fresh 0700 directory of ours, not in the cache's src/; an
    attacker rewriting (or swapping for a link) the kept copy mid-compile changes nothing."""
    root = tmp_path / "cache"
    use(root)
    salt = f"/* {time.time_ns()} */\n"
    seen: list[tuple[str, int, int]] = []
    real = build._run_compiler

    def spy(cmd: list[str], what: str, c_path: Path, cache: Path) -> None:
        for arg in cmd:
            if arg.endswith(".c"):
                st = os.stat(Path(arg).parent)
                seen.append((arg, stat.S_IMODE(st.st_mode), st.st_uid))
                for kept in (root / "src").glob("*.c"):  # the attacker strikes
                    kept.unlink()
                    evil = tmp_path / f"evil-{kept.name}"
                    evil.write_text(EVIL)
                    kept.symlink_to(evil)
        real(cmd, what, c_path, cache)

    monkeypatch.setattr(build, "_run_compiler", spy)
    if split:
        lib = build.load_units([salt + UNITS[0], salt + UNITS[1]], name="private")
    else:
        lib = build.load_library(salt + UNITS[0] + UNITS[1].split("\n", 1)[1], name="private")
    assert lib.hf_value() == 42
    assert len(seen) == (2 if split else 1)
    for arg, mode, uid in seen:
        assert mode == 0o700 and uid == os.geteuid()
        assert not Path(arg).is_relative_to(root / "src")
        assert not Path(arg).exists()  # removed after the compile


def test_loaded_library_is_the_verified_one(tmp_path: Path, use: object,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Swap the cached library right after its digest was checked: what loads is still the
    bytes that were checked."""
    root = tmp_path / "cache"
    use(root)
    source = f"/* {time.time_ns()} */\nint hf_value(void) {{ return 42; }}\n"
    assert build.load_library(source, name="verified").hf_value() == 42
    key = build.cache_key(source)
    lib_path = root / key[:2] / f"{key}.so"
    other = tmp_path / "other.c"
    other.write_text("int hf_value(void) { return 666; }\n")
    evil = tmp_path / "evil.so"
    subprocess.run([*build.find_compiler(), "-shared", "-fPIC", str(other), "-o", str(evil)],
                   check=True)
    real = cachefs.read_verified
    swapped = []

    def swap_after_check(path: Path, digest: str) -> bytes | None:
        data = real(path, digest)
        if path == lib_path:
            os.replace(evil, path)  # between the check and the load
            swapped.append(path)
        return data

    monkeypatch.setattr(cachefs, "read_verified", swap_after_check)
    build._LOADED.clear()
    assert build.load_library(source, name="verified").hf_value() == 42
    assert swapped
    assert not list(lib_path.parent.glob("*.load-*"))  # the private copy is gone


# ----- a full disk -----------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["atomic_write", "write_bytes", "mkdtemp"])
@pytest.mark.parametrize("split", [False, True])
def test_full_disk_falls_back_like_read_only(tmp_path: Path, use: object,
                                             monkeypatch: pytest.MonkeyPatch, where: str,
                                             split: bool) -> None:
    root = tmp_path / "cache"
    use(root)
    cachefs.root()  # the directory exists; writing into it fails
    prefix = str(root)

    def full(path: object) -> None:
        if str(path).startswith(prefix):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    if where == "atomic_write":
        real_atomic = cachefs.atomic_write

        def atomic_write(path: Path, data: bytes) -> None:
            full(path)
            real_atomic(path, data)

        monkeypatch.setattr(cachefs, "atomic_write", atomic_write)
    elif where == "write_bytes":
        real_write = Path.write_bytes

        def write_bytes(self: Path, data: bytes) -> int:  # type: ignore[override]
            full(self)
            return real_write(self, data)

        monkeypatch.setattr(Path, "write_bytes", write_bytes)
        # (the objects copied for the link: give it one from the cache)
        build.load_units([f"/* {time.time_ns()} */\n" + UNITS[0], UNITS[1]], name="warm")
        build._LOADED.clear()
    else:
        import tempfile

        real_mkdtemp = tempfile.mkdtemp

        def mkdtemp(*args: object, **kwargs: object) -> str:
            full(kwargs.get("dir", ""))
            return real_mkdtemp(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    salt = f"/* {time.time_ns()} */\n"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if split:
            lib = build.load_units([salt + UNITS[0], UNITS[1]], name="full")
        else:
            lib = build.load_library(salt + UNITS[0] + UNITS[1].split("\n", 1)[1], name="full")
        assert lib.hf_value() == 42
    if where != "write_bytes" or split:
        (message,) = _fallbacks(caught)
        assert os.strerror(errno.ENOSPC) in message


@pytest.mark.parametrize("under", ["", "programs"])
def test_full_disk_while_storing_a_program_falls_back(tmp_path: Path, use: object,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      under: str) -> None:
    """Through `hlofuse.compile`: every write under the cache (libraries, objects, the program
    entry and its module), or only the program entry's, fails with ENOSPC; the values are
    right and there is one warning."""
    root = tmp_path / "cache"
    use(root)
    cachefs.root()
    prefix = str(root / under)
    real_mkstemp = cachefs.tempfile.mkstemp

    def mkstemp(*args: object, **kwargs: object) -> tuple[int, str]:
        if str(kwargs.get("dir", "")).startswith(prefix):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(kwargs["dir"]))
        return real_mkstemp(*args, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(cachefs.tempfile, "mkstemp", mkstemp)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check(_text(tmp_path))
    (message,) = _fallbacks(caught)
    assert os.strerror(errno.ENOSPC) in message
    assert not list(root.glob("programs/*.json"))
    assert bool(list(root.glob("*/*.so"))) == bool(under)  # (the library was stored first)


@pytest.mark.parametrize("split", [False, True])
def test_compiler_reporting_a_full_disk_falls_back(tmp_path: Path, use: object,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   split: bool) -> None:
    """The compiler (or linker) writing its output into the cache fails with "No space left
    on device": that is a full disk, not a compile error."""
    root = tmp_path / "cache"
    use(root)
    cachefs.root()
    prefix = str(root)
    real_run = subprocess.run
    refused: list[list[str]] = []

    def run(cmd: list[str], *args: object, **kwargs: object) -> object:
        if isinstance(cmd, list) and "-o" in cmd and cmd[cmd.index("-o") + 1].startswith(prefix):
            refused.append(cmd)
            return subprocess.CompletedProcess(
                cmd, 1, "", f"cc1: fatal error: {cmd[-1]}: {os.strerror(errno.ENOSPC)}\n")
        return real_run(cmd, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(build.subprocess, "run", run)
    salt = f"/* {time.time_ns()} */\n"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if split:
            lib = build.load_units([salt + UNITS[0], UNITS[1]], name="fullcc")
        else:
            lib = build.load_library(salt + UNITS[0] + UNITS[1].split("\n", 1)[1], name="fullcc")
        assert lib.hf_value() == 42
    assert refused
    (message,) = _fallbacks(caught)
    assert os.strerror(errno.ENOSPC) in message
