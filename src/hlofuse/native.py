"""The compiled pass core: load the modules the build compiled with mypyc, or their sources.

`setup.py` compiles the modules of its `CORE` (the parser, the IR, the fusion analyses) into
extension modules under `hlofuse/_compiled/`, with a `manifest.json` naming each one's file
and the sha256 of the source it was built from. `install()`, run by `hlofuse/__init__.py` before any
other hlofuse module is imported, puts a finder first on `sys.meta_path` that loads those
modules from their extensions. Python runs the same code either way; the compiled core runs
the `xla` pipeline about 1.9x faster.

Conditions enforced:
- All or nothing: mypyc calls between the compiled modules directly, so one built from older
  source cannot stand beside one imported from newer. The finder is installed only if the
  manifest is well formed, every file it names is a regular file inside `_compiled/` built for
  this interpreter (its suffix is this interpreter's own, `EXTENSION_SUFFIXES[0]`), and every
  module's source file on disk still has the recorded digest.
- A mismatch (an editable install whose sources changed after it was built, or a build made
  by another Python) means the sources, with one `NativeCoreWarning` that names the first
  mismatch and says how to rebuild; no manifest (a build without mypyc or a C compiler) means
  the sources, silently.
- `HLOFUSE_PURE=1` (any value but empty or 0) means the sources, always: to debug, profile or
  patch the core in Python.
- Only names under `hlofuse.` are ever served, and only those the manifest lists.
- `STATE` says which was chosen and why.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
import warnings
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
COMPILED = HERE / "_compiled"
MANIFEST = COMPILED / "manifest.json"


class NativeCoreWarning(UserWarning):
    """The compiled pass core is there but does not match its sources: the sources run."""


@dataclass(frozen=True)
class State:
    compiled: bool  # the finder is installed: the core's modules load compiled
    reason: str  # why (one line)
    modules: tuple[str, ...] = ()  # the modules it serves, when compiled


STATE = State(False, "not installed yet")


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the compiled core's modules (and nothing else) in their extension files."""

    def __init__(self, files: dict[str, Path]) -> None:
        self._files = files

    def find_spec(self, fullname: str, path: Any = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        file = self._files.get(fullname)
        if file is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(file))
        return importlib.util.spec_from_file_location(fullname, file, loader=loader)


def check(manifest: Path = MANIFEST, sources: Path = HERE.parent
          ) -> tuple[dict[str, Path] | None, str]:
    """The compiled modules' files by name, or None and why not (see the module docstring).
    `sources`: the directory the `hlofuse` package's sources are in."""
    try:
        data = json.loads(manifest.read_text())
    except FileNotFoundError:
        return None, "no compiled core in this installation (the sources run)"
    except (OSError, ValueError) as exc:
        return None, f"{manifest} is unreadable ({exc})"
    root = manifest.parent.resolve()
    try:
        entries = data["modules"] if data.get("format") == 1 else None
        files: dict[str, Path] = {}
        for entry in entries or ():
            name, rel, digest = entry["name"], entry["file"], entry["source_sha256"]
            if not (isinstance(name, str) and name.startswith("hlofuse.")
                    and isinstance(rel, str)):
                return None, f"{manifest} lists {name!r}, not an hlofuse module"
            file = (root / rel).resolve()
            if root not in file.parents or not file.is_file():
                return None, f"{name}: {rel} is missing"
            if not rel.endswith(importlib.machinery.EXTENSION_SUFFIXES[0]):
                return None, f"{name}: {rel} was built for another Python"
            if digest is not None:
                source = sources.joinpath(*name.split(".")).with_suffix(".py")
                try:
                    actual = hashlib.sha256(source.read_bytes()).hexdigest()
                except OSError:
                    return None, f"{name}: its source is missing"
                if actual != digest:
                    return None, (f"{source.relative_to(sources)} changed since the core was "
                                  "compiled")
            files[name] = file
    except (AttributeError, KeyError, TypeError) as exc:
        return None, f"{manifest} is malformed ({exc!r})"
    if not files:
        return None, f"{manifest} lists no module"
    return files, f"compiled ({len(files)} extension modules)"


def install() -> State:
    """Choose the compiled core or the sources, once per process (`STATE`)."""
    global STATE
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return STATE
    from hlofuse import env

    if env.flag("HLOFUSE_PURE"):
        STATE = State(False, "HLOFUSE_PURE is set (the sources run)")
        return STATE
    files, reason = check()
    if files is None:
        if MANIFEST.exists():
            warnings.warn(f"hlofuse's compiled pass core is not used: {reason}. The Python "
                          "sources run (pipelines about 1.9x slower); reinstall to rebuild it "
                          "(pip install -e .).", NativeCoreWarning, stacklevel=3)
        STATE = State(False, reason)
        return STATE
    sys.meta_path.insert(0, _Finder(files))
    STATE = State(True, reason, tuple(sorted(files)))
    return STATE
