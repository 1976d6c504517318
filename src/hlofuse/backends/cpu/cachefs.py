"""The cache directory and its files, trusted only after checks (docs/security.md).

    root()                    the cache root: checked, created 0700, or the private fallback
    directory(*names)         a checked directory under the root, created 0700
    read_entry(path, kind)    the payload of a verified entry, or None (missing or damaged)
    write_entry(path, kind, payload)        atomic; a verified entry for `read_entry`
    open_verified(path, digest)             an open file whose bytes have that sha256, or None
    read_verified(path, digest)             the bytes of such a file, or None
    unwritable(reason)        switch this process to the private fallback (one warning)
    untrusted(reason)         the same, for a cache directory whose parents are not safe

Whoever can write the cache directory, or replace it, can make hlofuse run code: it holds
shared libraries that are loaded, and C sources that are compiled. So, as ssh refuses a loose
`~/.ssh` and the path to it:

- Every ancestor of the root (`$HLOFUSE_CACHE_DIR`, else the user cache directory) is walked
  from `/`, each directory opened relative to the last without following links, and must be
  owned by root or this user and writable by no one else, unless it is sticky (like `/tmp`:
  there others cannot rename or remove what is ours). A symbolic link on the way is followed
  only if it is root's or ours. An ancestor that fails makes this process cache in a private
  temporary directory instead, with one warning (`CacheFallbackWarning`) naming it.
- The root and every directory under it that hlofuse uses must be directories (not symbolic
  links) owned by this user and writable by no one else (no group or other write bit);
  otherwise `CacheDirError`, whose one message names the directory, what is wrong, and
  `HLOFUSE_CACHE_DIR`. Directories hlofuse creates are created 0700, missing parents included.
  As every directory on the path can be changed only by this user or root once checked, later
  operations by path see what was checked.
- A file is read only if it is a regular file (opened with O_NOFOLLOW) owned by this user and
  writable by no one else; anything else is treated as missing and rebuilt.
- Every entry carries the sha256 of its content: `hlofuse-cache 1 KIND DIGEST\\n` then the
  payload. An entry whose header, kind or digest does not match is treated as missing, so any
  damage leads to a rebuild, never to a wrong answer and never to a permanent error. Libraries
  (which must stay plain ELF files) are checked against a digest kept in a separate entry.
  Nothing in the cache is pickled: payloads are JSON, HLO text, C source.
- A root that cannot be created or written (read-only file system, no permission, disk full)
  makes this process use a private temporary directory (0700, removed at exit) instead, with one
  warning (`CacheFallbackWarning`) per process. The temporary directory's parents are checked
  like the root's (`CacheDirError` if even they are not safe).
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

from hlofuse import env
from hlofuse.errors import CacheDirError

ENV = "HLOFUSE_CACHE_DIR"
MAGIC = b"hlofuse-cache 1 "
_FALLBACK: Path | None = None


class CacheFallbackWarning(UserWarning):
    """The cache directory is not writable: this process uses a private temporary one."""


def configured_root() -> Path:
    """`$HLOFUSE_CACHE_DIR`, else the user cache directory (e.g. ~/.cache/hlofuse/cpu)."""
    given = env.path(ENV)
    if given is not None:
        return given
    import platformdirs

    return Path(platformdirs.user_cache_dir("hlofuse")).absolute() / "cpu"


def _refuse(path: Path, problem: str, fix: str) -> CacheDirError:
    return CacheDirError(
        f"refusing to use the cache directory {path}: {problem}, so someone else could plant "
        f"code that hlofuse would load. {fix}, or set {ENV} to a private directory."
    )


class _Untrusted(Exception):
    """An ancestor of the cache directory that another user could change (`_trusted_parent`)."""


# O_PATH (Linux): a directory we may pass through but not list (mode 0711) still opens
_O_DIR = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_MAX_LINKS = 40  # symbolic links followed while walking to the cache directory (as Linux)


def _trusted_owner(st: os.stat_result) -> bool:
    return st.st_uid in (0, os.geteuid())


def _check_ancestor(st: os.stat_result, where: Path) -> None:
    """An ancestor directory must be owned by root or us, and writable by no one else unless it
    is sticky (like /tmp: there only an entry's owner can rename or remove it, and every entry
    we pass through must be ours or root's)."""
    if not _trusted_owner(st):
        raise _Untrusted(f"{where} is owned by uid {st.st_uid}, neither you nor root")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise _Untrusted(f"{where} is writable by others (mode "
                         f"{stat.S_IMODE(st.st_mode):04o}, not sticky)")


def _trusted_parent(path: Path) -> Path:
    """The directory `path.parent`, checked from `/` down like OpenSSH's `safe_path`: each
    directory opened relative to the last one without following links (openat, O_NOFOLLOW)
    and checked (`_check_ancestor`); a symbolic link on the way is followed only if it is
    root's or ours (it then cannot be replaced by anyone else), and its target is walked and
    checked the same way. Missing directories are created 0700. Returns the path with every
    link resolved: each directory on it can be changed by no one but us and root, so later
    operations by path see what was checked. Raises `_Untrusted`, or OSError when a directory
    cannot be created."""
    todo = list(path.parent.parts[1:])
    stack: list[tuple[Path, int]] = []
    try:
        fd = os.open("/", _O_DIR)
        stack.append((Path("/"), fd))
        _check_ancestor(os.fstat(fd), Path("/"))
        links = 0
        while todo:
            name = todo.pop(0)
            where, fd = stack[-1]
            if name in ("", "."):
                continue
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop()[1])
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=fd)
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                if not _trusted_owner(st):
                    raise _Untrusted(f"{where / name} is a symbolic link owned by uid "
                                     f"{st.st_uid}, neither you nor root")
                links += 1
                if links > _MAX_LINKS:
                    raise _Untrusted(f"{where / name}: too many symbolic links")
                target = os.readlink(name, dir_fd=fd)
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop()[1])
                todo[:0] = Path(target).parts[1 if target.startswith("/") else 0:]
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise _Untrusted(f"{where / name} is not a directory")
            nfd = os.open(name, _O_DIR | os.O_NOFOLLOW, dir_fd=fd)
            stack.append((where / name, nfd))
            _check_ancestor(os.fstat(nfd), where / name)  # (what was opened is what counts)
        return stack[-1][0]
    finally:
        for _, fd in stack:
            os.close(fd)


def _check_dir(path: Path) -> None:
    """Raise `CacheDirError` unless `path` is a directory (not a symbolic link) owned by us
    that only we can write. (Its parent is checked already: it cannot be swapped.)"""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "it is a symbolic link (a link's target can be swapped)",
                      f"Point {ENV} at the directory itself")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "it is not a directory", f"Remove {path}")
    if st.st_uid != os.geteuid():
        raise _refuse(path, f"it is owned by uid {st.st_uid}, not by you (uid "
                            f"{os.geteuid()})", "Use a directory you own")
    if st.st_mode & 0o022:
        raise _refuse(path, f"it is group- or world-writable (mode {stat.S_IMODE(st.st_mode):04o})",
                      f"Run `chmod go-w {path}`")


def _make_dir(path: Path) -> None:
    """Create the directory `path` 0700 unless it exists (its parent exists and is checked)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)


def root() -> Path:
    """The checked cache root (see the module docstring); the fallback once one is in use."""
    if _FALLBACK is not None:
        return _FALLBACK
    configured = configured_root()
    if configured.name in ("", ".", ".."):
        raise _refuse(configured, "it does not end in a directory name",
                      "Name the directory itself")
    try:
        path = _trusted_parent(configured) / configured.name
    except _Untrusted as exc:
        return untrusted(f"{configured}: {exc}")
    except OSError as exc:
        return unwritable(f"{configured} cannot be created ({exc.strerror or exc})")
    try:
        _make_dir(path)
    except OSError as exc:
        return unwritable(f"{path} cannot be created ({exc.strerror or exc})")
    _check_dir(path)
    if not os.access(path, os.W_OK | os.X_OK):
        return unwritable(f"{path} is not writable")
    return path


def directory(*names: str) -> Path:
    """`root()/names...`, each created 0700 if missing and checked like the root."""
    base = root()
    for attempt in range(2):
        path = base
        try:
            for name in names:
                if name in ("", ".", "..") or "/" in name:
                    raise ValueError(f"bad cache directory name {name!r}")
                path = path / name
                _make_dir(path)
                _check_dir(path)
        except OSError as exc:
            if attempt:
                raise
            base = unwritable(f"{path} cannot be created ({exc.strerror or exc})")
            continue
        return path
    raise AssertionError("unreachable")


def unwritable(reason: str) -> Path:
    """Use a private temporary directory for the rest of this process (warns once)."""
    return _fallback(f"the compile cache is not usable ({reason})")


def untrusted(reason: str) -> Path:
    """The configured directory's parents could be changed by another user: use a private
    temporary directory for the rest of this process (warns once)."""
    return _fallback(f"the compile cache directory is not safe to use ({reason}: another user "
                     "could swap it, or what is in it, for code that hlofuse would load)")


def _fallback(why: str) -> Path:
    global _FALLBACK
    if _FALLBACK is None:
        fallback = Path(tempfile.mkdtemp(prefix="hlofuse-cache-"))  # 0700, a fresh name
        atexit.register(shutil.rmtree, fallback, True)
        try:
            fallback = _trusted_parent(fallback) / fallback.name
        except (_Untrusted, OSError) as exc:
            raise CacheDirError(
                f"{why}, and the temporary directory is not safe either ({exc}); set {ENV} to "
                "a private directory whose parents only you and root can write") from None
        _FALLBACK = fallback
        warnings.warn(
            f"hlofuse: {why}; this process caches in the private temporary directory "
            f"{fallback} instead (set {ENV} to a private, writable directory to keep compiled "
            "modules between runs)",
            CacheFallbackWarning, stacklevel=3,
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
