"""Build hlofuse; its pass core is compiled to native code with mypyc where it can be.

The modules in `CORE` (the HLO parser, the IR and the fusion analyses a compile spends its
Python time in)
are compiled by mypyc into extension modules under `hlofuse/_compiled/`, beside a manifest of
the sources they were built from; `hlofuse/native.py` loads them in place of those sources
while every source still matches. The pipeline's results are the same either way (the suite
runs on the compiled core; `tests/test_native.py` compares it with the sources); the compiled
core runs the `xla` pipeline about 1.9x faster (README.md, "The compiled pass core").

Where mypyc or the C compiler is missing, or `HLOFUSE_BUILD_PURE=1` is set, the build says so
and installs the Python sources alone.
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


def extensions() -> list:
    """mypyc's extensions for `CORE`, renamed into `hlofuse/_compiled/`; none (the Python
    sources alone) where mypyc is missing or HLOFUSE_BUILD_PURE is set."""
    if os.environ.get("HLOFUSE_BUILD_PURE", "") not in ("", "0"):
        _note("HLOFUSE_BUILD_PURE is set: the pass core stays Python")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _note("mypyc is not installed: the pass core stays Python")
        return []
    exts = mypycify(
        ["--ignore-missing-imports", "--follow-imports=silent", "--no-site-packages",
         *(f"src/hlofuse/{p}" for p in CORE)],
        group_name=GROUP, opt_level="3", debug_level="0")
    for ext in exts:
        if ext.name.startswith("hlofuse.") and not ext.name.startswith(PLACE):
            ext.name = PLACE + ext.name.removeprefix("hlofuse.")
        ext.optional = True  # no C compiler, or it fails: the sources alone (BuildExt)
    return exts


class BuildExt(build_ext):
    """build_ext, then `manifest.json` beside the extensions: each compiled module's name, file
    and source digest (hlofuse/native.py checks them before loading any). A partial build
    (an optional extension failed) leaves no manifest, so nothing compiled is loaded."""

    def run(self) -> None:
        if not self.extensions:
            return super().run()
        for ext in self.extensions:  # (an in-place build does not make them)
            Path(self.get_ext_fullpath(ext.name)).parent.mkdir(parents=True, exist_ok=True)
        super().run()
        lib = self.get_ext_fullpath(GROUP + "__mypyc")
        where = Path(lib).parent
        manifest = where / "manifest.json"
        files = {GROUP + "__mypyc": Path(lib)}
        for path in CORE:
            name = _module(path)
            files[name] = Path(self.get_ext_fullpath(PLACE + name.removeprefix("hlofuse.")))
        if not all(f.is_file() for f in files.values()):
            manifest.unlink(missing_ok=True)
            _note("the pass core did not compile: it stays Python")
            return
        sources = {_module(p): hashlib.sha256((HERE / "src/hlofuse" / p).read_bytes()).hexdigest()
                   for p in CORE}
        manifest.write_text(json.dumps({
            "format": 1,
            "modules": [{"name": name, "file": f.relative_to(where).as_posix(),
                         "source_sha256": sources.get(name)}
                        for name, f in files.items()],
        }, indent=1) + "\n")


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt})
