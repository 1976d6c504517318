"""Build hlofuse; its pass core is compiled to native code with mypyc where it can be.

The modules in `CORE` (the HLO parser, the IR and the fusion analyses a compile spends its
Python time in)
are compiled by mypyc into extension modules under `hlofuse/_compiled/`, beside a manifest of
the sources they were built from; `hlofuse/native.py` loads them in place of those sources
while every source still matches. The pipeline's results are the same either way (the suite
runs on the compiled core; `tests/test_native.py` compares it with the sources); the compiled
core runs the `xla` pipeline about 1.9x faster (README.md, "The compiled pass core").

Where mypyc or the C compiler is missing, or `HLOFUSE_BUILD_PURE=1` is set, the build says so
and installs the Python sources alone. The manifest lists only what this build made: a build
in which any module failed, or whose sources changed while it ran, leaves no manifest
(`write_manifest`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
# Compiled, as one group (mypyc calls between them natively). A module here must type-check
# under mypy and use no class mypyc cannot make native (a subclass of `str`, a dataclass made
# at run time, a frozen dataclass that is copied): README.md, "The compiled pass core".
CORE = (
    "ir/computation.py",
    "ir/fusion.py",
    "ir/instruction.py",
    "passes/utils.py",
    "passes/fusion/analysis.py",
    "passes/fusion/decision.py",
    "passes/fusion/gpu_fusible.py",
    "passes/fusion/graph.py",
    "passes/fusion/indexing.py",
    "passes/fusion/instruction_fusion.py",
    "passes/fusion/multi_output.py",
    "passes/fusion/predicates.py",
    "text/attrs.py",
    "text/build.py",
    "text/header.py",
    "text/lexer.py",
    "text/parser.py",
)
GROUP = "hlofuse._compiled.core"  # the group's shared library: hlofuse._compiled.core__mypyc
PLACE = "hlofuse._compiled."  # where each module's extension goes (its name under it)


def _module(path: str) -> str:
    return "hlofuse." + path.removesuffix(".py").replace("/", ".")


def _note(message: str) -> None:
    print(f"hlofuse build: {message}", file=sys.stderr)


def source_digests() -> dict[str, str]:
    """Each `CORE` module's name -> the sha256 of its source as it is now."""
    return {_module(p): hashlib.sha256((HERE / "src/hlofuse" / p).read_bytes()).hexdigest()
            for p in CORE}


# The sources' digests as mypyc was about to read them (`extensions`): the manifest is written
# only if they are still the same when the build ends.
_SOURCES_BEFORE: dict[str, str] = {}


def extensions() -> list:
    """mypyc's extensions for `CORE`, renamed into `hlofuse/_compiled/`; none (the Python
    sources alone) where mypyc is missing or HLOFUSE_BUILD_PURE is set."""
    pure = os.environ.get("HLOFUSE_BUILD_PURE", "").strip().lower()
    if pure not in ("", "0", "1", "true", "false", "yes", "no", "on", "off"):
        raise SystemExit(f"hlofuse build: environment variable HLOFUSE_BUILD_PURE={pure!r}: "
                         "expected 1/true/yes/on or 0/false/no/off")
    if pure not in ("", "0", "false", "no", "off"):
        _note("HLOFUSE_BUILD_PURE is set: the pass core stays Python")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _note("mypyc is not installed: the pass core stays Python")
        return []
    _SOURCES_BEFORE.update(source_digests())
    exts = mypycify(
        ["--ignore-missing-imports", "--follow-imports=silent", "--no-site-packages",
         *(f"src/hlofuse/{p}" for p in CORE)],
        group_name=GROUP, opt_level="3", debug_level="0")
    for ext in exts:
        if ext.name.startswith("hlofuse.") and not ext.name.startswith(PLACE):
            ext.name = PLACE + ext.name.removeprefix("hlofuse.")
        ext.optional = True  # no C compiler, or it fails: the sources alone (BuildExt)
    return exts


def _file_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def write_manifest(manifest: Path, files: dict[str, tuple[str, Path]],
                   produced: dict[str, str], before: dict[str, str],
                   now: dict[str, str]) -> str | None:
    """Write `manifest` (beside the extensions) if this build made every one of `files`
    (module name -> (extension name, the file it is loaded from)): each extension is in
    `produced` (extension name -> the sha256 of what `build_extension` left, recorded as it
    returned), the file on disk still has those bytes (an in-place copy of this build's
    output, not an older file left from an earlier build), and the sources (`now`) are those
    mypyc read (`before`). Otherwise remove it and return why: the core is used all or nothing
    (a module of the group loaded from its source beside the others compiled would be two
    copies of one module), so a partly failed build runs the sources."""
    reason = None
    if before != now:
        changed = sorted(name for name in now if before.get(name) != now[name])
        reason = f"sources changed while building ({', '.join(changed) or 'the list'})"
    for ext_name, path in files.values():
        if reason is not None:
            break
        if ext_name not in produced:
            reason = f"{ext_name} was not built by this build"
        elif _file_digest(path) != produced[ext_name]:
            reason = f"{path.name} is not the file this build made for {ext_name}"
    if reason is not None:
        manifest.unlink(missing_ok=True)
        return reason
    where = manifest.parent
    tmp = manifest.with_name(manifest.name + ".tmp")
    tmp.write_text(json.dumps({
        "format": 1,
        "modules": [{"name": name, "file": path.relative_to(where).as_posix(),
                     "source_sha256": now.get(name), "file_sha256": produced[ext_name]}
                    for name, (ext_name, path) in files.items()],
    }, indent=1) + "\n")
    os.replace(tmp, manifest)
    return None


class BuildExt(build_ext):
    """build_ext, then `manifest.json` beside the extensions: each compiled module's name, file
    and source digest (hlofuse/native.py checks them before loading any). The manifest is
    removed before anything is built and written again only from what this build made
    (`write_manifest`): a partial build (an optional extension failed, leaving an older file
    in place or in build/ to be copied in place), or sources edited while it ran, leave none,
    so nothing compiled is loaded."""

    def run(self) -> None:
        if not self.extensions:
            return super().run()
        self._produced: dict[str, str] = {}
        manifest = Path(self.get_ext_fullpath(GROUP + "__mypyc")).parent / "manifest.json"
        manifest.unlink(missing_ok=True)
        for ext in self.extensions:  # (an in-place build does not make them)
            Path(self.get_ext_fullpath(ext.name)).parent.mkdir(parents=True, exist_ok=True)
        super().run()
        files = {GROUP + "__mypyc": (GROUP + "__mypyc",
                                     Path(self.get_ext_fullpath(GROUP + "__mypyc")))}
        for path in CORE:
            name = _module(path)
            ext_name = PLACE + name.removeprefix("hlofuse.")
            files[name] = (ext_name, Path(self.get_ext_fullpath(ext_name)))
        reason = write_manifest(manifest, files, self._produced, _SOURCES_BEFORE,
                                source_digests())
        if reason is not None:
            _note(f"the pass core did not compile ({reason}): it stays Python")

    def build_extension(self, ext) -> None:
        super().build_extension(ext)  # raises when it fails (filtered for optional ones)
        # what this build left for `ext` (compiled now, or up to date with the C mypyc wrote)
        digest = _file_digest(Path(self.get_ext_fullpath(ext.name)))
        if digest is not None:
            self._produced[ext.name] = digest


if __name__ == "__main__":  # (setuptools runs this file as __main__; tests import it)
    setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt})
