"""Smoke test of the CartPole case-study benchmark (benchmarks/cartpole.py) in a tiny
configuration, run the way `hlofuse bench cartpole` runs it: every requested row of the ablation
and of the sweep is in the JSON with a positive throughput, the paper-form table has its steps
and peers, the Markdown and the plots are written, and the C reference agrees with numpy."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

from hlofuse.tools import bench

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None
                                and shutil.which("clang") is None,
                                reason="no C compiler for the cpu backend")


@pytest.fixture(autouse=True)
def _fast_cc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HLOFUSE_CC_OPT", "-O1")


def test_tiny_run_has_every_row(tmp_path: Path) -> None:
    try:
        import matplotlib  # noqa: F401

        plots: list[str] = []
    except ImportError:
        plots = ["--no-plots"]
    options = ["--envs", "8", "--steps", "5", "--repeat", "1",
               "--variants", "precomputed", "separate", "--pipelines", "none", "xla",
               "--peers", "numpy", "c", "--slow-steps", "numpy=3", "--no-compile-times",
               "--sweep", "1", "4", "--sweep-budget", "16", "--sweep-repeat", "1",
               "--no-progress", "--out", "tiny", "--results-dir", str(tmp_path), *plots]
    assert bench.main(argparse.Namespace(benchmark="cartpole", options=options)) == 0

    payload = json.loads((tmp_path / "tiny.json").read_text())
    rows = {r["variant"]: r for r in payload["rows"]}
    assert set(rows) == {"precomputed", "separate"}
    for variant, row in rows.items():
        want = {"hlofuse-none", "hlofuse-xla", "jax.jit"}
        if variant == "separate":
            want |= {"numpy", "C reference"}
        assert set(row["env_steps_per_s"]) == want, variant
        assert all(v > 0 for v in row["env_steps_per_s"].values()), row
        assert row["ratio_vs_jax"]["jax.jit"] == pytest.approx(1.0)
    assert rows["separate"]["case_steps"]["numpy"] == 3
    assert rows["separate"]["case_steps"]["hlofuse-xla"] == 5

    steps = [e["step"] for e in payload["table"]]
    assert steps == ["1", "3", "jax.jit", "numpy eager", "C reference"]
    assert all(e["env_steps_per_s"] > 0 for e in payload["table"])

    sweep = payload["scaling"]
    assert sweep["envs"] == [1, 4]
    assert set(sweep["series"]) == {"hlofuse-none", "hlofuse-xla", "jax.jit", "numpy",
                                    "C reference"}
    assert all(v > 0 for vs in sweep["series"].values() for v in vs)

    md = (tmp_path / "tiny.md").read_text()
    assert "| 3 | four separate state arrays" in md and "C reference" in md
    if not plots:
        for name in ("tiny_ablation.png", "tiny_scaling.png"):
            assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_c_reference_matches_numpy() -> None:
    peers = bench.load("cartpole").peers
    from hlofuse.examples import cartpole

    _, args = cartpole.make("separate", 300, 9)  # two blocks of 256, the second partial
    want = cartpole.numpy_rollout(*args)
    got = peers.c_reference()(*args)
    for w, g in zip(want, got, strict=True):
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_array_equal(g, w)
    assert got[5].dtype == np.int32 and got[4][0] == 9.0
