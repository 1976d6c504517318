"""Static checks of the sources: mypy over `src/hlofuse` (the settings in pyproject.toml's
`[tool.mypy]`, plus unused `type: ignore` comments reported), and ruff where it is installed.
A type error here is a defect like a failing test: mypyc compiles the pass core from the same
annotations, and a wrong one found this way was a real bug (complex power under
subnormals="keep" called a numpy dtype)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_is_clean() -> None:
    api = pytest.importorskip("mypy.api")
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"),
                                "--warn-unused-ignores",
                                str(ROOT / "src" / "hlofuse")])
    assert status == 0, out + err


def test_ruff_is_clean() -> None:
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (the dev extra)")
    done = subprocess.run([ruff, "check", "src", "tests", "scripts", "benchmarks"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
