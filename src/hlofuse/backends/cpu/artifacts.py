"""The compile cache above the library cache: HLO text + pipeline -> optimised module + Program.

    compile(text, pipeline) ──sha256(text, pipeline, hlofuse code)──▶ <cache>/programs/<key>.pkl
                                                       holds: optimised module text, Program

A warm `hlofuse.compile(text)` then skips the pipeline and the C generation: it parses the
optimised module (for the entry signature and `Executable.module`), unpickles the `Program`, and
loads the library from `build`'s cache. Conditions enforced:
- The key covers hlofuse's own source files, so editing the compiler invalidates every entry.
- Entries are written atomically (temporary file + `os.replace`); an entry that cannot be read,
  unpickled or parsed is ignored and rebuilt, never trusted half-way.
- Only text input is cached this way (a Module given by the caller may be edited later).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
from pathlib import Path

from hlofuse.backends.cpu.build import cache_dir
from hlofuse.backends.cpu.contract import Program
from hlofuse.errors import HloError
from hlofuse.ir.module import Module

FORMAT = 1


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A digest of hlofuse's Python sources (the compiler that produced an entry)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256(str(FORMAT).encode())
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def key(text: str, pipeline: str | None) -> str:
    h = hashlib.sha256()
    for part in (code_version(), repr(pipeline), text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _path(k: str) -> Path:
    return cache_dir() / "programs" / f"{k}.pkl"


def lookup(text: str, pipeline: str | None) -> tuple[Module, Program] | None:
    """The optimised module and program compiled earlier from this text, or None."""
    from hlofuse.text import parse

    path = _path(key(text, pipeline))
    try:
        with open(path, "rb") as f:
            module_text, program = pickle.load(f)
        if not isinstance(program, Program):
            return None
        return parse(module_text), program
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            HloError):
        return None


def store(text: str, pipeline: str | None, module: Module, program: Program) -> None:
    """Remember `module` (after its pipeline) and `program` for this text; best effort."""
    from hlofuse.text import print_module

    path = _path(key(text, pipeline))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = pickle.dumps((print_module(module), program), protocol=pickle.HIGHEST_PROTOCOL)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except (OSError, pickle.PicklingError):
        pass
