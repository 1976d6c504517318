"""The compiled pass core (hlofuse/native.py, setup.py): it is used all or nothing, only while
its manifest matches the sources, never under HLOFUSE_PURE; and it gives the sources' results."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import hlofuse
from hlofuse import native

SRC = Path(hlofuse.__file__).resolve().parent.parent
COMPILED = native.STATE.compiled
needs_compiled = pytest.mark.skipif(
    not COMPILED, reason=f"no compiled core here: {native.STATE.reason}")


def _python(code: str, *, pure: bool = False, path: Path = SRC) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(path)}
    env.pop("HLOFUSE_PURE", None)
    if pure:
        env["HLOFUSE_PURE"] = "1"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300, check=False)


# ----- the manifest check, on a made-up tree -------------------------------------------------

SUFFIX = EXTENSION_SUFFIXES[0]


def _tree(tmp_path: Path, **change: object) -> tuple[Path, Path]:
    """A package tree with one source module and one 'compiled' file (not loaded by `check`)
    and its manifest, with `change` applied to the module's entry."""
    src = tmp_path / "src"
    (src / "hlofuse" / "ir").mkdir(parents=True)
    source = src / "hlofuse" / "ir" / "fusion.py"
    source.write_text("X = 1\n")
    built = src / "hlofuse" / "_compiled"
    (built / "ir").mkdir(parents=True)
    (built / "ir" / f"fusion{SUFFIX}").write_bytes(b"\x7fELF")
    (built / f"core__mypyc{SUFFIX}").write_bytes(b"\x7fELF")
    entry = {"name": "hlofuse.ir.fusion", "file": f"ir/fusion{SUFFIX}",
             "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest(), **change}
    manifest = built / "manifest.json"
    manifest.write_text(json.dumps({"format": 1, "modules": [
        {"name": "hlofuse._compiled.core__mypyc", "file": f"core__mypyc{SUFFIX}",
         "source_sha256": None}, entry]}))
    return manifest, src


def test_check_accepts_a_manifest_that_matches(tmp_path: Path) -> None:
    manifest, src = _tree(tmp_path)
    files, reason = native.check(manifest, src)
    assert files is not None, reason
    assert sorted(files) == ["hlofuse._compiled.core__mypyc", "hlofuse.ir.fusion"]
    assert files["hlofuse.ir.fusion"] == (manifest.parent / "ir" / f"fusion{SUFFIX}").resolve()


def test_check_refuses_a_changed_source(tmp_path: Path) -> None:
    manifest, src = _tree(tmp_path)
    (src / "hlofuse" / "ir" / "fusion.py").write_text("X = 2\n")
    files, reason = native.check(manifest, src)
    assert files is None
    assert reason == "hlofuse/ir/fusion.py changed since the core was compiled"


@pytest.mark.parametrize(("change", "says"), [
    ({"file": "ir/gone" + SUFFIX}, "is missing"),
    ({"file": "../../hlofuse/ir/fusion.py"}, "is missing"),  # outside _compiled
    ({"file": "ir/fusion.cpython-299-x86_64-linux-gnu.so"}, "is missing"),
    ({"name": "os.path"}, "not an hlofuse module"),
    ({"name": 3}, "not an hlofuse module"),
    ({"source_sha256": "0" * 64}, "changed since the core was compiled"),
    ({"name": "hlofuse.ir.nothing"}, "its source is missing"),
])
def test_check_refuses_a_manifest_that_does_not_match(
        tmp_path: Path, change: dict[str, object], says: str) -> None:
    manifest, src = _tree(tmp_path, **change)
    files, reason = native.check(manifest, src)
    assert files is None
    assert says in reason


def test_check_refuses_a_file_built_for_another_python(tmp_path: Path) -> None:
    manifest, src = _tree(tmp_path)
    other = manifest.parent / "ir" / "fusion.cpython-299-x86_64-linux-gnu.so"
    other.write_bytes(b"\x7fELF")
    data = json.loads(manifest.read_text())
    data["modules"][1]["file"] = "ir/" + other.name
    manifest.write_text(json.dumps(data))
    files, reason = native.check(manifest, src)
    assert files is None
    assert reason.endswith("was built for another Python")


@pytest.mark.parametrize("text", ["", "{", "[]", '{"format": 2, "modules": []}',
                                  '{"format": 1, "modules": []}',
                                  '{"format": 1, "modules": [{"name": "hlofuse.x"}]}',
                                  '{"format": 1, "modules": 7}'])
def test_check_refuses_a_malformed_manifest(tmp_path: Path, text: str) -> None:
    manifest, src = _tree(tmp_path)
    manifest.write_text(text)
    files, reason = native.check(manifest, src)
    assert files is None
    assert str(manifest) in reason


def test_no_manifest_means_the_sources(tmp_path: Path) -> None:
    files, reason = native.check(tmp_path / "manifest.json", tmp_path)
    assert files is None
    assert reason.startswith("no compiled core")


# ----- the installed core ---------------------------------------------------------------------


def test_state_matches_this_installation() -> None:
    """Compiled exactly when the installation has a matching manifest and HLOFUSE_PURE is
    unset; then every listed module came from its extension."""
    files, reason = native.check()
    pure = os.environ.get("HLOFUSE_PURE", "") not in ("", "0")
    assert (files is not None and not pure) == COMPILED, (reason, native.STATE)
    if COMPILED:
        assert files is not None
        for name, file in files.items():
            module = sys.modules.get(name) or __import__(name, fromlist=["_"])
            # (mypyc sets __file__ and the spec from its own library's path and the name)
            assert module.__file__.endswith(file.name), name
            assert Path(module.__file__).is_relative_to(native.COMPILED), name


@needs_compiled
def test_hlofuse_pure_runs_the_sources() -> None:
    out = _python("import hlofuse, hlofuse.native as n, hlofuse.ir.fusion as f; "
                  "print(n.STATE.compiled, f.__file__)", pure=True)
    assert out.returncode == 0, out.stderr
    compiled, file = out.stdout.split()
    assert compiled == "False"
    assert file.endswith(os.path.join("ir", "fusion.py"))


@needs_compiled
def test_a_changed_source_runs_the_sources_with_one_warning(tmp_path: Path) -> None:
    """An editable install edited after it was built: the edit runs (not the stale core)."""
    shutil.copytree(SRC / "hlofuse", tmp_path / "hlofuse",
                    ignore=shutil.ignore_patterns("__pycache__"))
    fusion = tmp_path / "hlofuse" / "ir" / "fusion.py"
    fusion.write_text(fusion.read_text() + "\nEDITED = True\n")
    out = _python("import warnings; warnings.simplefilter('always'); "
                  "import hlofuse, hlofuse.native as n, hlofuse.ir.fusion as f; "
                  "print(n.STATE.compiled, f.EDITED)", path=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]
    assert out.stderr.count("NativeCoreWarning") == 1
    assert "hlofuse/ir/fusion.py changed since the core was compiled" in out.stderr


_FUSED = r"""
import hashlib, sys
from pathlib import Path
import hlofuse
from hlofuse.passes.fusion.trace import trace_of
from hlofuse.passes.pipelines import run_pipeline
for path in sorted(Path(hlofuse.__file__).parent.joinpath("examples").glob("*.hlo")):
    for pipeline in ("xla", "hlofuse"):
        m = hlofuse.parse(path.read_text())
        run_pipeline(m, pipeline)
        decisions = [e.to_json() for e in trace_of(m).events]
        print(path.name, pipeline, len(decisions), hashlib.sha256(
            (str(m) + "\n".join(decisions)).encode()).hexdigest())
"""


@needs_compiled
def test_the_compiled_core_gives_the_sources_results() -> None:
    """Every built-in example through both pipelines: the same fused module and the same
    recorded decisions, compiled and from the sources."""
    compiled = _python(_FUSED)
    pure = _python(_FUSED, pure=True)
    assert compiled.returncode == 0, compiled.stderr
    assert pure.returncode == 0, pure.stderr
    assert len(compiled.stdout.splitlines()) >= 10
    assert compiled.stdout == pure.stdout


@needs_compiled
def test_tests_that_patch_the_core() -> None:
    """The tests marked `pure_core` patch classes of the core, which native classes refuse:
    they skip in this process and run here, on the sources (HLOFUSE_PURE=1)."""
    tests = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": str(SRC), "HLOFUSE_PURE": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-p", "no:cacheprovider",
         "-p", "no:xdist",
         "-m", "pure_core", str(tests / "test_fusion_incremental.py"),
         str(tests / "test_compile_scaling.py"), str(tests / "test_text.py"),
         str(tests / "test_fusion_options.py")],
        env=env, capture_output=True, text=True, timeout=600, check=False, cwd=tests.parent)
    assert out.returncode == 0, out.stdout[-3000:]
    summary = out.stdout.strip().splitlines()[-1]
    assert "skipped" not in summary and "deselected" in summary, summary
    assert int(summary.split(" passed")[0].split()[-1]) >= 20, summary
