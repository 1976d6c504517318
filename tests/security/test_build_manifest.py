"""setup.py writes the compiled core's manifest only from what this build made (issue 30):
a partly failed rebuild, an extension file on disk that is not the one this build left, or
sources edited while it ran leave no manifest (so hlofuse/native.py runs the sources), never
old code under new source digests. Tested on `write_manifest` and on a real build_ext of two
small extensions, one of which fails; no rebuild of the installed core.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

SETUP = Path(__file__).resolve().parents[2] / "setup.py"


@pytest.fixture(scope="module")
def setup_py() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hlofuse_setup_under_test", SETUP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # (its setup() runs only as __main__)
    return module


def _files(where: Path) -> dict[str, tuple[str, Path]]:
    out = {}
    for name in ("hlofuse._compiled.core__mypyc", "hlofuse.ir.a", "hlofuse.ir.b"):
        ext = name if "_compiled" in name else "hlofuse._compiled." + name[len("hlofuse."):]
        path = where / f"{name.rsplit('.', 1)[1]}.so"
        path.write_bytes(f"compiled {name}".encode())
        out[name] = (ext, path)
    return out


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_complete_build_writes_the_manifest(setup_py: ModuleType, tmp_path: Path) -> None:
    files = _files(tmp_path)
    produced = {ext: _digest(path) for ext, path in files.values()}
    sources = {"hlofuse.ir.a": "1" * 64, "hlofuse.ir.b": "2" * 64}
    manifest = tmp_path / "manifest.json"
    assert setup_py.write_manifest(manifest, files, produced, sources, dict(sources)) is None
    data = json.loads(manifest.read_text())
    assert [m["name"] for m in data["modules"]] == list(files)
    assert {m["name"]: m["source_sha256"] for m in data["modules"]}["hlofuse.ir.b"] == "2" * 64
    assert all(m["file_sha256"] == produced[files[m["name"]][0]] for m in data["modules"])


@pytest.mark.parametrize("damage", ["not-built", "old-file", "sources-changed"])
def test_partial_build_leaves_no_manifest(setup_py: ModuleType, tmp_path: Path,
                                          damage: str) -> None:
    files = _files(tmp_path)
    produced = {ext: _digest(path) for ext, path in files.values()}
    before = {"hlofuse.ir.a": "1" * 64, "hlofuse.ir.b": "2" * 64}
    now = dict(before)
    if damage == "not-built":  # its optional extension failed; an old file is still there
        del produced["hlofuse._compiled.ir.b"]
    elif damage == "old-file":  # what this build made is not what is on disk (a stale copy)
        files["hlofuse.ir.a"][1].write_bytes(b"compiled by an earlier build")
    else:
        now["hlofuse.ir.a"] = "3" * 64
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"format": 1, "modules": []}')  # an earlier build's
    reason = setup_py.write_manifest(manifest, files, produced, before, now)
    assert reason is not None
    assert {"not-built": "ir.b was not built", "old-file": "a.so is not the file",
            "sources-changed": "sources changed while building (hlofuse.ir.a)"}[damage] in reason
    assert not manifest.exists()


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler")
def test_failed_optional_extension_is_not_recorded(setup_py: ModuleType,
                                                   tmp_path: Path) -> None:
    """A real build_ext: the extension that fails is not among what the build produced, even
    though an older build left its file in place, and so no manifest is written. (One that
    build_ext skips as up to date, newer than its C, counts as this build's: mypyc rewrites
    the C of every module whose source changed.)"""
    from setuptools import Distribution, Extension

    (tmp_path / "good.c").write_text(
        "#include <Python.h>\nstatic struct PyModuleDef d = {PyModuleDef_HEAD_INIT, \"good\"};\n"
        "PyMODINIT_FUNC PyInit_good(void) { return PyModule_Create(&d); }\n")
    (tmp_path / "bad.c").write_text("this is not C;\n")
    exts = [Extension("good", [str(tmp_path / "good.c")], optional=True),
            Extension("bad", [str(tmp_path / "bad.c")], optional=True)]
    dist = Distribution({"name": "probe", "ext_modules": exts})
    cmd = setup_py.BuildExt(dist)
    cmd.build_lib = str(tmp_path / "lib")
    cmd.build_temp = str(tmp_path / "temp")
    cmd.ensure_finalized()
    stale = Path(cmd.get_ext_fullpath("bad"))
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_bytes(b"an old build's bad extension")
    os.utime(stale, (1_000_000_000, 1_000_000_000))  # older than bad.c: build_ext rebuilds it
    old_argv = sys.argv
    try:
        cmd.run()
    finally:
        sys.argv = old_argv
    assert set(cmd._produced) == {"good"}
    assert cmd._produced["good"] == _digest(Path(cmd.get_ext_fullpath("good")))
    assert not (Path(cmd.get_ext_fullpath(setup_py.GROUP + "__mypyc")).parent
                / "manifest.json").exists()
