"""Build generated C into a shared library, with a content-hash cache.

    source ──sha256(source, compiler, flags, cpu)──▶ <cache>/<kk>/<key>.so   (+ <key>.sha256)
                                                   └▶ <cache>/src/<key>.c     (kept for reading)

Conditions this module enforces:
- The compiler is `$CC`, else the first of cc, gcc, clang on PATH; none gives
  `CompilerNotFoundError`, whose message names the interpreter backend as the fallback.
- Flags never change IEEE semantics: `-O3 -march=native` plus `-fno-math-errno` (lets sqrt
  vectorize; errno is never read), `-fno-trapping-math` (FP exception traps are off, as in numpy),
  `-ffp-contract=off` (no a*b+c -> fma contraction the interpreter would not do). Never
  `-ffast-math`. `-fopenmp` when the compiler supports it. `HLOFUSE_CC_OPT` replaces `-O3`
  (tests use `-O1` to compile faster).
- The cache key covers the source, the compiler's identity, the flags and this CPU's features
  (`-march=native` code must not be loaded on another CPU sharing the cache directory).
- Writes are atomic: the library and its checksum are written to temporary names and moved into
  place with `os.replace`, library first. A reader that finds no checksum, or a checksum that does
  not match the library's bytes, or a library the loader rejects, rebuilds the entry: concurrent
  processes never load a half-written library, and a corrupt entry is rebuilt.
- A compile failure raises `CCompileError` with the compiler's message and the path of the C file,
  which is kept for inspection.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from hlofuse.errors import CompileError

COMPILE_TIMEOUT_S = 600
BASE_FLAGS: tuple[str, ...] = (
    "-march=native",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=off",
    "-fPIC",
    "-shared",
    "-std=gnu11",
    "-w",
)
CANDIDATES = ("cc", "gcc", "clang")


class CompilerNotFoundError(CompileError):
    """No C compiler: the cpu backend cannot build anything."""


class CCompileError(CompileError):
    """The C compiler rejected a generated file (kept at `path`)."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


def cache_dir() -> Path:
    """`$HLOFUSE_CACHE_DIR`, else the user cache directory (e.g. ~/.cache/hlofuse/cpu)."""
    env = os.environ.get("HLOFUSE_CACHE_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("hlofuse")) / "cpu"


def find_compiler() -> list[str]:
    """The compiler command: `$CC` (split like a shell would), then cc, gcc, clang."""
    env = os.environ.get("CC")
    tried: list[str] = []
    if env:
        argv = shlex.split(env)
        if argv and shutil.which(argv[0]):
            return [shutil.which(argv[0]) or argv[0], *argv[1:]]
        tried.append(f"$CC={env!r}")
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return [path]
        tried.append(name)
    raise CompilerNotFoundError(
        "no C compiler found (tried " + ", ".join(tried) + "); install gcc or clang, or set "
        "$CC. The interpreter backend (backend='interpreter') runs without one."
    )


@functools.lru_cache(maxsize=8)
def _compiler_identity(argv: tuple[str, ...]) -> str:
    try:
        out = subprocess.run(
            [*argv, "--version"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompilerNotFoundError(
            f"the C compiler {argv[0]} does not run ({exc}); the interpreter backend "
            "(backend='interpreter') runs without one"
        ) from exc
    return out.splitlines()[0] if out else argv[0]


@functools.lru_cache(maxsize=1)
def _cpu_identity() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return hashlib.sha256(line.encode()).hexdigest()[:16]
    except OSError:
        pass
    return platform.machine() + platform.processor()


@functools.lru_cache(maxsize=8)
def _supports_openmp(argv: tuple[str, ...]) -> bool:
    """Probe once per compiler; the answer is remembered in the cache directory, so a warm
    process does not pay for a probe compile."""
    ident = hashlib.sha256((" ".join(argv) + _compiler_identity(argv)).encode()).hexdigest()
    memo = cache_dir() / f"openmp-{ident[:16]}"
    try:
        return memo.read_text().strip() == "1"
    except OSError:
        pass
    ok = _probe_openmp(argv)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(memo, b"1" if ok else b"0")
    except OSError:
        pass
    return ok


def _probe_openmp(argv: tuple[str, ...]) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "omp.c"
        src.write_text("#include <omp.h>\nint f(void) { return omp_get_max_threads(); }\n")
        cmd = [*argv, "-fopenmp", "-fPIC", "-shared", str(src), "-o", str(Path(tmp) / "o.so")]
        try:
            return subprocess.run(cmd, capture_output=True, timeout=120).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False


def flags(extra_flags: tuple[str, ...] = ()) -> list[str]:
    """The full flag list for this machine's compiler."""
    argv = tuple(find_compiler())
    opt = os.environ.get("HLOFUSE_CC_OPT", "-O3")
    out = [opt, *BASE_FLAGS]
    if _supports_openmp(argv):
        out.append("-fopenmp")
    return out + list(extra_flags)


def cache_key(source: str, extra_flags: tuple[str, ...] = ()) -> str:
    argv = tuple(find_compiler())
    h = hashlib.sha256()
    for part in (source, " ".join(argv), _compiler_identity(argv), " ".join(flags(extra_flags)),
                 _cpu_identity()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


_LOADED: dict[str, ctypes.CDLL] = {}


def load_library(
    source: str, *, name: str = "module", extra_flags: tuple[str, ...] = ()
) -> ctypes.CDLL:
    """Compile `source` (or reuse the cached build) and load it."""
    key = cache_key(source, extra_flags)
    lib = _LOADED.get(key)
    if lib is not None:
        return lib
    root = cache_dir()
    lib_path = root / key[:2] / f"{key}.so"
    sum_path = lib_path.with_suffix(".sha256")
    lib = _load_cached(lib_path, sum_path)
    if lib is None:
        _build(source, key, name, lib_path, sum_path, extra_flags)
        lib = _load_cached(lib_path, sum_path)
        if lib is None:
            raise CompileError(f"the library built for {name} at {lib_path} does not load")
    _LOADED[key] = lib
    return lib


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load_cached(lib_path: Path, sum_path: Path) -> ctypes.CDLL | None:
    try:
        expected = sum_path.read_text().strip()
        if _digest(lib_path) != expected:
            return None
        return ctypes.CDLL(str(lib_path))
    except OSError:
        return None


def _build(
    source: str, key: str, name: str, lib_path: Path, sum_path: Path,
    extra_flags: tuple[str, ...],
) -> None:
    root = cache_dir()
    src_dir = root / "src"
    src_dir.mkdir(parents=True, exist_ok=True)
    lib_path.parent.mkdir(parents=True, exist_ok=True)
    c_path = src_dir / f"{_safe(name)}-{key[:16]}.c"
    _atomic_write(c_path, source.encode())
    fd, tmp_lib = tempfile.mkstemp(prefix=f".{key}.", suffix=".so", dir=lib_path.parent)
    os.close(fd)
    cmd = [*find_compiler(), *flags(extra_flags), str(c_path), "-o", tmp_lib, "-lm"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        os.unlink(tmp_lib)
        raise CCompileError(
            f"compiling {name} timed out after {COMPILE_TIMEOUT_S} s; the C file is kept at "
            f"{c_path}", c_path,
        ) from exc
    if proc.returncode != 0:
        os.unlink(tmp_lib)
        errors = "\n".join(proc.stderr.strip().splitlines()[:20])
        raise CCompileError(
            f"the C compiler failed on {name} (exit {proc.returncode}); the generated C is kept "
            f"at {c_path}:\n{errors}", c_path,
        )
    digest = _digest(Path(tmp_lib))
    os.replace(tmp_lib, lib_path)
    _atomic_write(sum_path, digest.encode())


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60] or "module"
