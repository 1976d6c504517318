"""The cache directory and its files, trusted only after checks (docs/security.md).

    root()                    the cache root: checked, created 0700, or the private fallback
    directory(*names)         a checked directory under the root, created 0700
    read_entry(path, kind)    the payload of a verified entry, or None (missing or damaged)
    write_entry(path, kind, payload)        atomic; a verified entry for `read_entry`
    open_verified(path, digest)             an open file whose bytes have that sha256, or None
    read_verified(path, digest)             the bytes of such a file, or None
    unwritable(reason)        switch this process to the private fallback (one warning)

Whoever can write the cache directory can make hlofuse run code: it holds shared libraries that
are loaded, and C sources that are compiled. So, as ssh refuses a loose `~/.ssh`:

- The root (`$HLOFUSE_CACHE_DIR`, else the user cache directory) and every directory under it
  that hlofuse uses must be directories owned by this user and writable by no one else (no
  group or other write bit); otherwise `CacheDirError`, whose one message names the directory,
  what is wrong, and `HLOFUSE_CACHE_DIR`. Directories hlofuse creates are created 0700, missing
  parents included.
- A file is read only if it is a regular file (not followed through a symbolic link) owned by
  this user and writable by no one else; anything else is treated as missing and rebuilt.
- Every entry carries the sha256 of its content: `hlofuse-cache 1 KIND DIGEST\\n` then the
  payload. An entry whose header, kind or digest does not match is treated as missing, so any
  damage leads to a rebuild, never to a wrong answer and never to a permanent error. Libraries
  (which must stay plain ELF files) are checked against a digest kept in a separate entry.
  Nothing in the cache is pickled: payloads are JSON, HLO text, C source.
- A root that cannot be created or written (read-only file system, no permission, disk full)
  makes this process use a private temporary directory (0700, removed at exit) instead, with one
  warning (`CacheFallbackWarning`) per process.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
import warnings
from pathlib import Path

from hlofuse.errors import CacheDirError

ENV = "HLOFUSE_CACHE_DIR"
MAGIC = b"hlofuse-cache 1 "
_FALLBACK: Path | None = None


class CacheFallbackWarning(UserWarning):
    """The cache directory is not writable: this process uses a private temporary one."""


def configured_root() -> Path:
    """`$HLOFUSE_CACHE_DIR`, else the user cache directory (e.g. ~/.cache/hlofuse/cpu)."""
    env = os.environ.get(ENV)
    if env:
        return Path(env).absolute()
    import platformdirs

    return Path(platformdirs.user_cache_dir("hlofuse")).absolute() / "cpu"


def _refuse(path: Path, problem: str, fix: str) -> CacheDirError:
    return CacheDirError(
        f"refusing to use the cache directory {path}: {problem}, so someone else could plant "
        f"code that hlofuse would load. {fix}, or set {ENV} to a private directory."
    )


def _check_dir(path: Path) -> None:
    """Raise `CacheDirError` unless `path` is a directory owned by us that only we can write."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "it is not a directory", f"Remove {path}")
    if st.st_uid != os.geteuid():
        raise _refuse(path, f"it is owned by uid {st.st_uid}, not by you (uid "
                            f"{os.geteuid()})", "Use a directory you own")
    if st.st_mode & 0o022:
        raise _refuse(path, f"it is group- or world-writable (mode {stat.S_IMODE(st.st_mode):04o})",
                      f"Run `chmod go-w {path}`")


def _make_dirs(path: Path) -> None:
    """Create `path` and its missing parents, each 0700."""
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)


def root() -> Path:
    """The checked cache root (see the module docstring); the fallback once one is in use."""
    if _FALLBACK is not None:
        return _FALLBACK
    path = configured_root()
    try:
        _make_dirs(path)
    except OSError as exc:
        return unwritable(f"{path} cannot be created ({exc.strerror or exc})")
    _check_dir(path)
    if not os.access(path, os.W_OK | os.X_OK):
        return unwritable(f"{path} is not writable")
    return path


def directory(*names: str) -> Path:
    """`root()/names...`, created 0700 if missing and checked like the root."""
    path = root().joinpath(*names)
    try:
        _make_dirs(path)
    except OSError as exc:
        path = unwritable(f"{path} cannot be created ({exc.strerror or exc})").joinpath(*names)
        _make_dirs(path)
    _check_dir(path)
    return path


def unwritable(reason: str) -> Path:
    """Use a private temporary directory for the rest of this process (warns once)."""
    global _FALLBACK
    if _FALLBACK is None:
        fallback = Path(tempfile.mkdtemp(prefix="hlofuse-cache-"))
        atexit.register(shutil.rmtree, fallback, True)
        _FALLBACK = fallback
        warnings.warn(
            f"hlofuse: the compile cache is not usable ({reason}); this process caches in "
            f"the private temporary directory {fallback} instead (set {ENV} to a writable "
            "directory to keep compiled modules between runs)",
            CacheFallbackWarning, stacklevel=2,
        )
    return _FALLBACK


def _open_trusted(path: Path) -> int | None:
    """A read-only descriptor of `path` if it is a regular file we own that only we can write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        return None
    return fd


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_trusted(path: Path) -> bytes | None:
    """The bytes of `path` if it is trusted (`_open_trusted`) and readable, else None."""
    fd = _open_trusted(path)
    if fd is None:
        return None
    try:
        return _read_all(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_entry(path: Path, kind: str) -> bytes | None:
    """The payload of the entry at `path` if it is trusted, of `kind`, and matches its digest."""
    data = _read_trusted(path)
    if data is None:
        return None
    head, sep, payload = data.partition(b"\n")
    if not sep or not head.startswith(MAGIC):
        return None
    fields = head[len(MAGIC):].split(b" ")
    if len(fields) != 2 or fields[0] != kind.encode() or fields[1] != digest(payload).encode():
        return None
    return payload


def write_entry(path: Path, kind: str, payload: bytes) -> None:
    """Write a verified entry atomically (a temporary file in the same directory, then
    `os.replace`). Raises OSError like any write."""
    if " " in kind or "\n" in kind:
        raise ValueError(f"bad cache entry kind {kind!r}")
    atomic_write(path, MAGIC + f"{kind} {digest(payload)}\n".encode() + payload)


def atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_verified(path: Path, sha256: str) -> bytes | None:
    """The bytes of the trusted file `path` if they have the digest `sha256`, else None (read
    once: what is checked is what is returned)."""
    data = _read_trusted(path)
    return data if data is not None and digest(data) == sha256 else None


def open_verified(path: Path, sha256: str) -> int | None:
    """A descriptor of the trusted file `path` whose bytes have the digest `sha256`, else None."""
    fd = _open_trusted(path)
    if fd is None:
        return None
    try:
        ok = digest(_read_all(fd)) == sha256
    except OSError:
        ok = False
    if not ok:
        os.close(fd)
        return None
    return fd
