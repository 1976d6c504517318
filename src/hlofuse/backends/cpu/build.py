"""Build generated C into a shared library, with a content-hash cache.

    source ──sha256(source, compiler, flags, cpu)──▶ <cache>/<kk>/<key>.so    (+ <key>.so.digest)
                                                   └▶ <cache>/src/<name>-<key>.c  (kept for reading)

    units (units.units: a large program as several translation units, the driver last;
           before them the prebuilt library units they call into, library/prebuilt.py)
      each ──sha256(unit, compiler, flags + -c, cpu)──▶ <cache>/<kk>/<okey>.o (+ <okey>.o.digest)
      all  ──sha256(object keys, flags)──▶ <cache>/<kk>/<key>.so (+ .digest)    `load_units`

Conditions this module enforces:
- The compiler and its flags come from `compiler.py` (which `$CC`, which flags, which warnings
  are errors; its names are re-exported here).
- The cache key covers the source, the compiler's identity, the flags and this CPU's features
  (`-march=native` code must not be loaded on another CPU sharing the cache directory).
- The cache directory is trusted only after `cachefs`'s checks (its ancestors, its owner and
  mode, no symbolic links; 0700 when created; a private temporary directory, with one
  warning, when it is read-only, full or its parents are unsafe). Any write of a build that
  fails with ENOSPC, EDQUOT or EROFS (or a compiler saying so) falls back the same way.
- The compiler reads C only from a directory created for that compile (`mkdtemp`, 0700) and
  writes its output there: the copy kept under src/ is for reading and is never compiled, so
  whoever can touch the cache while the compiler runs cannot change what it reads.
- A library is loaded only as the bytes that match the digest kept in its `.digest` entry:
  read once, verified, written to a fresh private file that is loaded and unlinked
  (`_load_cached`), so swapping the cached file after the check changes nothing. Writes are
  atomic (temporary name, then `os.replace`), library first: concurrent processes never load a
  half-written library, and a damaged entry of any kind is rebuilt.
- A loaded library's BLAS entry points (`library/blas.py`: function pointers, never linked) are
  set once, when it is loaded; the generated C and so the cache key do not depend on the BLAS.
- What is compiled (and kept under src/ for reading) is the source with the prelude helpers it
  does not use dropped (`shake.unit`); the key is the key of the source as given.
- A compile failure raises `CCompileError` with the compiler's message and the path of the C file,
  which is kept for inspection.
- Split builds (`load_units`): each unit's object is an entry of its own, so a unit seen before
  (in this module, its profiling build, or another module) is not compiled again; missing
  ones compile in parallel, at most `jobs()` at once (the CPUs this process may run on, at
  least 1). Cached objects are linked only from verified copies: their bytes are read once,
  checked against their `.o.digest` entry and written into a private (0700) directory under
  the cache, where new objects are compiled too (each from its own C copied there); a damaged
  object entry is compiled again. Prebuilt library units are units like any other.
  Objects and the library are written atomically like any entry; the same flags, warning
  errors and CPU-specific key apply to every unit.
- Early compiles (`compile_early`): a large program's kernel units start compiling, in
  background threads (at most `jobs()` at once), as `driver.generate` prints them
  (`units.Stream`); `load_units` waits for a unit under way instead of compiling it again, and
  compiles it itself if the early compile failed (so its error is raised there, naming the
  unit). A forked child never waits on its parent's compiles: it starts a pool of its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from hlofuse.backends.cpu import cachefs, compile_errors
from hlofuse.backends.cpu.compiler import (  # noqa: F401 (re-exported: importers say build.X)
    BASE_FLAGS,
    CANDIDATES,
    WARNING_ERRORS,
    CompilerConfigError,
    CompilerNotFoundError,
    _compiler_facts,
    _compiler_identity,
    _cpu_identity,
    _find_compiler,
    _probe_warnings,
    compiler_answer,
    find_compiler,
    flags,
)
from hlofuse.errors import CompileError

if TYPE_CHECKING:  # (imported where used: a warm load starts no thread)
    from concurrent.futures import Future, ThreadPoolExecutor

COMPILE_TIMEOUT_S = 600
# What a compiler says when the cache's file system is read-only or full.
_DISK_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EDQUOT)
_DISK_ERRORS = tuple(os.strerror(e) for e in _DISK_ERRNOS)


class CCompileError(CompileError):
    """The C compiler rejected a generated file (kept at `path`). `functions`: the C functions
    the errors are in (a kernel's name, `NAME_p1` for its outlined parallel loop, `hf_entry`
    for the driver), in the order the compiler reported them; the executable adds the HLO
    instructions those kernels compute (`instructions`)."""

    def __init__(self, message: str, path: Path, functions: tuple[str, ...] = (),
                 instructions: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.path = path
        self.functions = functions
        self.instructions = instructions


def with_instructions(exc: CCompileError, kernels: Iterable[tuple[str, str]]) -> CCompileError:
    """`exc` naming, besides the C functions, the HLO instructions their kernels compute
    (`kernels`: (C function, instruction name) pairs of the program)."""
    names = compile_errors.instructions_of(exc.functions, kernels)
    if not names:
        return exc
    return CCompileError(compile_errors.with_instructions_text(str(exc.args[0]), names),
                         exc.path, exc.functions, names)


class _Unwritable(Exception):
    """The cache could not be written (read-only or full): use the private fallback."""


def build_context(extra_flags: tuple[str, ...] = ()) -> str:
    """What a build depends on besides its C: the compiler (its command and identity), the
    flags and this CPU. Part of every cache key; a library key recorded under one context
    (`load_cached`, through the compile cache) is used only under the same one."""
    argv = tuple(find_compiler())
    return hashlib.sha256("\0".join(
        [" ".join(argv), _compiler_identity(argv), " ".join(flags(extra_flags)),
         _cpu_identity()]).encode()).hexdigest()


def cache_key(source: str, extra_flags: tuple[str, ...] = ()) -> str:
    return hashlib.sha256(f"{source}\0{build_context(extra_flags)}".encode()).hexdigest()


_LOADED: dict[str, ctypes.CDLL] = {}


def load_library(
    source: str, *, name: str = "module", extra_flags: tuple[str, ...] = ()
) -> ctypes.CDLL:
    """Compile `source` (or reuse the cached build) and load it. A source that calls prebuilt
    library code (`library/prebuilt.py`) is linked with its units (`load_units`)."""
    if "#ifndef HFLIB_PREBUILT_" in source:  # (the runtime's source need not import the GEMM)
        from hlofuse.backends.cpu.library import prebuilt

        if prebuilt.units_for(source):
            return load_units([source], name=name, extra_flags=extra_flags)
    key = cache_key(source, extra_flags)
    return _load_or_build(key, name, lambda lib_path, sum_path: _build(
        source, key, name, lib_path, sum_path, extra_flags))


def prebuild_library(source: str, *, name: str, extra_flags: tuple[str, ...] = ()) -> str:
    """`load_library` ahead of need (`hlofuse prebuild`): "cached" when the cache held it,
    "built" when it was compiled now."""
    cached = load_cached(cache_key(source, extra_flags)) is not None
    load_library(source, name=name, extra_flags=extra_flags)
    return "cached" if cached else "built"


def library_key(lib: ctypes.CDLL) -> str | None:
    """The cache key this process loaded `lib` under, if it did."""
    return next((k for k, v in _LOADED.items() if v is lib), None)


def load_cached(key: str) -> ctypes.CDLL | None:
    """The library cached under `key` (a `library_key`), verified and loaded as any, or None
    when it is not there (or `key` is not a key): nothing is compiled. A warm compile loads a
    program's library this way without cutting its C into units to find the key again."""
    if not re.fullmatch(r"[0-9a-f]{64}", key):
        return None
    lib = _LOADED.get(key)
    if lib is not None:
        return lib
    try:
        lib_dir = cachefs.directory(key[:2])
    except (OSError, CompileError):
        return None
    lib = _load_cached(lib_dir / f"{key}.so", lib_dir / f"{key}.so.digest")
    return None if lib is None else _adopt(key, lib)


def _load_or_build(key: str, name: str,
                   build: Callable[[Path, Path], None]) -> ctypes.CDLL:
    """The library cached under `key`, built by `build(lib_path, sum_path)` when missing or
    damaged; an unwritable cache directory falls back once (cachefs.unwritable)."""
    lib = _LOADED.get(key)
    if lib is not None:
        return lib
    for _attempt in range(2):
        lib_dir = cachefs.directory(key[:2])
        lib_path = lib_dir / f"{key}.so"
        sum_path = lib_dir / f"{key}.so.digest"
        lib = _load_cached(lib_path, sum_path)
        if lib is not None:
            break
        try:
            build(lib_path, sum_path)
        except _Unwritable as exc:
            cachefs.unwritable(str(exc))
            continue
        except OSError as exc:  # a write anywhere in the build: disk full, read-only, quota
            if exc.errno not in _DISK_ERRNOS:
                raise
            cachefs.unwritable(f"{lib_path.parent}: {exc.strerror or exc}")
            continue
        lib = _load_cached(lib_path, sum_path)
        if lib is None:
            raise CompileError(f"the library built for {name} at {lib_path} does not load")
        break
    if lib is None:
        raise CompileError(f"no usable cache directory to build {name} in")
    return _adopt(key, lib)


def _adopt(key: str, lib: ctypes.CDLL) -> ctypes.CDLL:
    """A library just loaded from the cache under `key`: its BLAS pointers set, remembered."""
    from hlofuse.backends.cpu.library import blas

    blas.bind(lib)  # a float dot's BLAS pointers (none: it runs our own GEMM)
    _LOADED[key] = lib
    return lib


def _load_cached(lib_path: Path, sum_path: Path) -> ctypes.CDLL | None:
    """The library at `lib_path` if its bytes match its digest entry; None if anything is off.
    What is loaded is the bytes that were checked: the file is read once, verified, and those
    bytes are written to a file of a fresh name (`mkstemp`, 0600, in the checked directory)
    that is loaded and unlinked. (Not `/proc/self/fd/N`: the loader identifies libraries by
    name, so that name, reused with the descriptor number, could return another library.)"""
    expected = cachefs.read_entry(sum_path, "library-digest")
    if expected is None:
        return None
    data = cachefs.read_verified(lib_path, expected.decode("ascii", "replace"))
    if data is None:
        return None
    try:
        fd, private = tempfile.mkstemp(prefix=f".{lib_path.stem}.load-", suffix=".so",
                                       dir=lib_path.parent)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return ctypes.CDLL(private)
    except OSError:
        return None
    finally:
        _unlink(private)


def _build(
    source: str, key: str, name: str, lib_path: Path, sum_path: Path,
    extra_flags: tuple[str, ...],
) -> None:
    text = _cut(source).encode()
    try:
        src_dir = cachefs.directory("src")
        c_name = f"{_safe(name)}-{key[:16]}.c"
        kept = src_dir / c_name  # for reading (error messages name it); never compiled
        cachefs.atomic_write(kept, text)
        work = Path(tempfile.mkdtemp(prefix=".cc-", dir=lib_path.parent))  # 0700, ours
    except OSError as exc:
        raise _Unwritable(f"{lib_path.parent}: {exc.strerror or exc}") from exc
    try:  # Ctrl-C or a failure while compiling leaves no temporary file behind
        c_path, tmp_lib = work / c_name, work / "out.so"
        _write_private(c_path, text)
        cmd = [*find_compiler(), *flags(extra_flags), str(c_path), "-o", str(tmp_lib), "-lm"]
        _run_compiler(cmd, name, kept, lib_path.parent)
        _store_library(str(tmp_lib), lib_path, sum_path)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_private(path: Path, data: bytes) -> None:
    """Create `path` (in a directory of this compile's own: `mkdtemp`, 0700) and write `data`.
    The compiler reads its source only from there: no one else can swap it while it reads."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                 | getattr(os, "O_CLOEXEC", 0), 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _store_library(tmp_lib: str, lib_path: Path, sum_path: Path) -> None:
    """Move a freshly built library into the cache, library first, then its digest entry."""
    try:
        os.chmod(tmp_lib, 0o700)  # the linker creates it with the umask's mode
        with open(tmp_lib, "rb") as f:
            digest = cachefs.digest(f.read())
        os.replace(tmp_lib, lib_path)
        cachefs.write_entry(sum_path, "library-digest", digest.encode())
    except OSError as exc:
        raise _Unwritable(f"{lib_path.parent}: {exc.strerror or exc}") from exc


def jobs() -> int:
    """How many compiler processes `load_units` runs at once: the CPUs this process may run
    on (`sched_getaffinity`, else `os.cpu_count()`), at least 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, n)


def object_key(unit: str, extra_flags: tuple[str, ...] = ()) -> str:
    """The cache key of one translation unit's object file (`cache_key` with `-c`)."""
    return cache_key(unit, (*extra_flags, "-c"))


def load_units(
    units: list[str], *, name: str = "module", extra_flags: tuple[str, ...] = (),
    kernel_flags: tuple[str, ...] = (),
) -> ctypes.CDLL:
    """Compile the translation units `units` (the last one the driver; `extra_flags`, e.g.
    `-DHF_PROFILE`, apply to it alone, `kernel_flags` to the others: `units.kernel_flags()`),
    link them into one library and load it. Each unit's
    object is a cache entry of its own (`object_key`): a unit seen before, in this module or
    another, is not compiled again; the others compile in parallel (`jobs()` at once). The
    library is cached under a key of its objects' keys, so a warm load compiles and links
    nothing. The prebuilt library units the others call into (`library/prebuilt.py`) come
    first: compiled once, by the first program that needs them."""
    from hlofuse.backends.cpu.library import prebuilt

    needed = dict.fromkeys(u for unit in units for u in prebuilt.units_for(unit))
    units = [*needed, *units]
    unit_flags = [() if i < len(needed) else kernel_flags for i in range(len(units) - 1)]
    unit_flags.append(extra_flags)
    keys = [object_key(u, f) for u, f in zip(units, unit_flags, strict=True)]
    h = hashlib.sha256(b"link\0")
    for part in (*keys, " ".join(flags(extra_flags))):
        h.update(part.encode())
        h.update(b"\0")
    return _load_or_build(h.hexdigest(), name, lambda lib_path, sum_path: _build_units(
        units, keys, name, lib_path, sum_path, unit_flags))


def _build_units(
    units: list[str], keys: list[str], name: str, lib_path: Path, sum_path: Path,
    unit_flags: list[tuple[str, ...]],
) -> None:
    """Objects from the cache (verified, copied into a private directory), from an early
    compile (`compile_early`, waited for) or compiled there in parallel (each with its
    `unit_flags`) and then cached; one link of those copies into `lib_path`. A damaged object
    entry is compiled again."""
    extra_flags = unit_flags[-1]
    try:
        src_dir = cachefs.directory("src")
        work = Path(tempfile.mkdtemp(prefix=".link-", dir=lib_path.parent))  # 0700
    except OSError as exc:
        raise _Unwritable(f"{lib_path.parent}: {exc.strerror or exc}") from exc
    try:
        objs = [work / f"u{i}.o" for i in range(len(units))]
        todo = []
        for i, okey in enumerate(keys):
            data = _cached_object(okey)
            if data is not None:
                objs[i].write_bytes(data)
            else:
                todo.append(i)

        def compile_unit(i: int) -> None:
            if _early_done(keys[i]):  # compiled while the program was generated
                data = _cached_object(keys[i])
                if data is not None:
                    objs[i].write_bytes(data)
                    return
            _compile_object(units[i], keys[i], name, f"{name} (unit {i + 1} of {len(units)})",
                            objs[i], unit_flags[i])

        if len(todo) == 1 or jobs() == 1:
            for i in todo:
                compile_unit(i)
        elif todo:
            from concurrent.futures import ThreadPoolExecutor

            # units no early compile has started (the driver's) first: a worker that only
            # waits for an early compile would hold them back
            with _EARLY_LOCK:
                started = {i for i in todo if _early_key(keys[i]) in _EARLY}
            with ThreadPoolExecutor(max_workers=min(jobs(), len(todo))) as pool:
                submitted = {i: pool.submit(compile_unit, i)
                             for i in sorted(todo, key=started.__contains__)}
                futures = [submitted[i] for i in todo]
                try:
                    for f in futures:
                        f.result()  # the first failure, in unit order
                except BaseException:
                    for f in futures:
                        f.cancel()
                    raise
        fd, tmp_lib = tempfile.mkstemp(prefix=f".{lib_path.stem}.", suffix=".so",
                                       dir=lib_path.parent)
        os.close(fd)
        cmd = [*find_compiler(), *flags(extra_flags), *map(str, objs), "-o", tmp_lib, "-lm"]
        try:
            _run_compiler(cmd, f"{name} (link)", src_dir, lib_path.parent)
            _store_library(tmp_lib, lib_path, sum_path)
        finally:
            _unlink(tmp_lib)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _cached_object(okey: str) -> bytes | None:
    """The cached object `okey`'s bytes if they match its digest entry, else None."""
    obj_dir = cachefs.directory(okey[:2])
    expected = cachefs.read_entry(obj_dir / f"{okey}.o.digest", "object-digest")
    if expected is None:
        return None
    return cachefs.read_verified(obj_dir / f"{okey}.o", expected.decode("ascii", "replace"))


def _compile_object(unit: str, okey: str, name: str, what: str, obj: Path,
                    extra_flags: tuple[str, ...]) -> None:
    """Compile the translation unit `unit` to `obj` (in a private directory made for this
    compile: the C is compiled from there, and kept for reading under the cache's src/) and
    store the object in the cache under `okey`."""
    src_dir = cachefs.directory("src")
    c_name = f"{_safe(name)}-{okey[:16]}.c"
    kept = src_dir / c_name
    text = _cut(unit).encode()
    try:
        cachefs.atomic_write(kept, text)
        private = obj.parent / f"{obj.stem}-{c_name}"  # (ends like `kept`: compile_errors)
        _write_private(private, text)
    except OSError as exc:
        raise _Unwritable(f"{src_dir}: {exc.strerror or exc}") from exc
    cmd = [*find_compiler(), *flags((*extra_flags, "-c")), str(private), "-o", str(obj)]
    _run_compiler(cmd, what, kept, src_dir.parent)
    data = obj.read_bytes()
    obj_dir = cachefs.directory(okey[:2])
    try:
        cachefs.atomic_write(obj_dir / f"{okey}.o", data)
        cachefs.write_entry(obj_dir / f"{okey}.o.digest", "object-digest",
                            cachefs.digest(data).encode())
    except OSError as exc:
        raise _Unwritable(f"{obj_dir}: {exc.strerror or exc}") from exc


# Kernel units being compiled while their program is still generated (`compile_early`), by
# object key; `load_units` waits for them (`_early_done`).
# early compiles under way, by (cache root, object key): an early compile writes into the
# cache that was configured when it started, so a program under another root (a changed
# HLOFUSE_CACHE_DIR) never waits for it
_EARLY: dict[tuple[str, str], Future[None]] = {}


def _early_key(okey: str) -> tuple[str, str]:
    return (str(cachefs.configured_root()), okey)
_EARLY_LOCK = threading.Lock()
_EARLY_POOL: list[tuple[int, ThreadPoolExecutor]] = []  # (the process it belongs to, pool)


def compile_early(unit: str, name: str, kernel_flags: tuple[str, ...]) -> None:
    """Start compiling the kernel unit `unit` of program `name` (with `kernel_flags`, as
    `load_units` will) into the object cache, in the background (at most `jobs()` at once),
    while the caller goes on generating the rest of the program (`units.Stream`);
    `load_units` then finds the object cached, or waits for it. Not started when the object is
    cached or under way already. A failure here is not raised: the unit is compiled again by
    `load_units`, which raises it there."""
    okey = object_key(unit, kernel_flags)
    with _EARLY_LOCK:
        if _early_key(okey) in _EARLY:
            return
        try:
            obj_dir = cachefs.directory(okey[:2])
        except (OSError, CompileError):
            return  # load_units meets (and reports) the cache's problem itself
        if (obj_dir / f"{okey}.o.digest").exists():
            return
        if not _EARLY_POOL or _EARLY_POOL[0][0] != os.getpid():
            from concurrent.futures import ThreadPoolExecutor

            # (a forked child inherits the parent's pool without its threads: work submitted
            # there would never run, so the child makes its own, and forgets the parent's work)
            _EARLY.clear()
            _EARLY_POOL[:] = [(os.getpid(), ThreadPoolExecutor(
                max_workers=jobs(), thread_name_prefix="hlofuse-cc"))]
        _EARLY[_early_key(okey)] = _EARLY_POOL[0][1].submit(_compile_early, unit, okey, name,
                                                kernel_flags)


def compile_object(unit: str, name: str, kernel_flags: tuple[str, ...] = ()) -> bool:
    """Compile the translation unit `unit` into the object cache now (as `load_units` would,
    with `kernel_flags`), unless a valid object is cached: whether it compiled. Errors are
    raised (`CCompileError`, `CompilerNotFoundError`)."""
    okey = object_key(unit, kernel_flags)
    if _cached_object(okey) is not None:
        return False
    _compile_early(unit, okey, name, kernel_flags)
    return True


def _compile_early(unit: str, okey: str, name: str, kernel_flags: tuple[str, ...]) -> None:
    work = Path(tempfile.mkdtemp(prefix=".early-", dir=cachefs.root()))  # 0700
    try:
        _compile_object(unit, okey, name, f"{name} (unit, early)", work / "u.o", kernel_flags)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _early_done(okey: str) -> bool:
    """Wait for the early compile of `okey`, if one was started: whether it succeeded."""
    with _EARLY_LOCK:
        future = _EARLY.pop(_early_key(okey), None)
        if future is not None and _EARLY_POOL[0][0] != os.getpid():
            return False  # the parent's, in a forked child: never runs here
    if future is None:
        return False
    try:
        future.result()
    except Exception:
        return False
    return True


def _run_compiler(cmd: list[str], what: str, c_path: Path, cache: Path) -> None:
    """Run one compile or link; `CCompileError` (naming the kept C file) or `_Unwritable`."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise CCompileError(
            f"compiling {what} timed out after {COMPILE_TIMEOUT_S} s; the C file is kept at "
            f"{c_path}", c_path,
        ) from exc
    if proc.returncode != 0:
        if any(e in proc.stderr for e in _DISK_ERRORS):
            raise _Unwritable(f"{cache}: {proc.stderr.strip().splitlines()[-1]}")
        functions = compile_errors.failing_functions(proc.stderr, c_path)
        where = f" in {', '.join(functions)}" if functions else ""
        errors = "\n".join(compile_errors.errors_first(proc.stderr.strip().splitlines())[:20])
        raise CCompileError(
            f"the C compiler failed on {what}{where} (exit {proc.returncode}); the generated C "
            f"is kept at {c_path}:\n{errors}", c_path, functions,
        )


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _cut(source: str) -> str:
    """What is compiled of `source`: its prelude cut to the helpers it uses (`shake.unit`;
    imported here, so that loading a cached library does not import the C generator)."""
    from hlofuse.backends.cpu import shake

    return shake.unit(source)


def _safe(name: str) -> str:
    """A file name part from a module name (input text): ASCII letters, digits, `-_.` only."""
    out = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in name)
    return out.lstrip(".")[:60] or "module"
