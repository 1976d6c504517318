"""`hlofuse lint`: the four frontend patterns on crafted modules (with source lines) and on the
built-in CartPole variants, each finding with its fix and measured kernel cost."""

from __future__ import annotations

import argparse
import json

import pytest

from hlofuse import examples
from hlofuse.tools import lint as lt

CRAFTED = """
HloModule crafted_lint

body {
  p = (s32[], u64[2], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  s = u64[2] get-tuple-element(p), index=1
  v = f32[8] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  r = (u64[2], u32[8]) rng-bit-generator(s), algorithm=rng_three_fry,
    metadata={source_file="env.py" source_line=30}
  s1 = u64[2] get-tuple-element(r), index=0
  bits = u32[8] get-tuple-element(r), index=1
  f = f32[8] convert(bits)
  v1 = f32[8] add(v, f), metadata={source_file="env.py" source_line=31}
  ROOT t = (s32[], u64[2], f32[8]) tuple(i1, s1, v1)
}

cond {
  p = (s32[], u64[2], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY main {
  x = f32[8] parameter(0)
  k = u64[2] parameter(1)
  a = f32[4] parameter(2)
  z = s32[] constant(0)
  t = (s32[], u64[2], f32[8]) tuple(z, k, x)
  w = (s32[], u64[2], f32[8]) while(t), condition=cond, body=body
  out = f32[8] get-tuple-element(w), index=2
  cat = f32[12] concatenate(out, a), dimensions={0}, metadata={source_file="env.py" source_line=40}
  e = f32[12] exponential(cat), metadata={source_file="env.py" source_line=41}
  l = f32[12] log(cat), metadata={source_file="env.py" source_line=42}
  idx = s32[3,1] constant({{0},{2},{4}})
  g = f32[3] gather(e, idx), offset_dims={}, collapsed_slice_dims={0}, start_index_map={0},
    index_vector_dim=1, slice_sizes={1}, metadata={source_file="env.py" source_line=43}
  ROOT res = (f32[12], f32[3]) tuple(l, g)
}
"""

# a loop that swaps two carried values every iteration: the buffers alias
SWAP = """
HloModule swap

body {
  p = (s32[], f32[16], f32[16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f32[16] get-tuple-element(p), index=1, metadata={source_file="swap.py" source_line=7}
  b = f32[16] get-tuple-element(p), index=2, metadata={source_file="swap.py" source_line=8}
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[16], f32[16]) tuple(i1, b, a)
}

cond {
  p = (s32[], f32[16], f32[16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY main {
  x = f32[16] parameter(0)
  y = f32[16] parameter(1)
  z = s32[] constant(0)
  t = (s32[], f32[16], f32[16]) tuple(z, x, y)
  ROOT w = (s32[], f32[16], f32[16]) while(t), condition=cond, body=body
}
"""

# the gather indices are not a progression: no finding
IRREGULAR_GATHER = """
HloModule irregular

ENTRY main {
  e = f32[12] parameter(0)
  idx = s32[3,1] constant({{0},{5},{6}})
  ROOT g = f32[3] gather(e, idx), offset_dims={}, collapsed_slice_dims={0},
    start_index_map={0}, index_vector_dim=1, slice_sizes={1}
}
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    lt.add_arguments(p)
    return p


def test_crafted_findings_lines_fixes_costs() -> None:
    report = lt.lint(CRAFTED, "xla")
    kinds = sorted(f.kind for f in report.findings)
    assert kinds == ["concatenate-multi-user", "gather-as-slice", "rng-in-loop"]
    (cat,) = report.of_kind("concatenate-multi-user")
    assert (cat.instruction, cat.location) == ("cat", "env.py:40")
    assert "2 users" in cat.message and "separately" in cat.fix
    # measured: the concatenate is duplicated into both of its users' kernels
    assert cat.measured["kernels_touching"] == 2 and "duplicated" in cat.kernels
    (rng,) = report.of_kind("rng-in-loop")
    assert (rng.instruction, rng.location) == ("r", "env.py:30")
    assert "before the loop" in rng.fix
    assert rng.measured["section"] == "w body"
    assert rng.measured["kernels_per_run"] == 4  # counter add, rng, add fusion, compare
    assert "r" in rng.measured["kernel_names"]
    (g,) = report.of_kind("gather-as-slice")
    assert (g.instruction, g.location) == ("g", "env.py:43") and "slice" in g.fix


def test_swapped_loop_state_forces_copies() -> None:
    report = lt.lint(SWAP, "xla")
    (copy,) = report.of_kind("copy-in-loop")
    assert copy.location == "swap.py:8"  # slot 1 <- slot 2 (b) comes first
    assert copy.measured == {"bytes_per_iteration": 128, "slots": 2}
    assert "slot 1 <- slot 2" in copy.message and "not measured as kernels" in copy.kernels


def test_irregular_gather_is_not_a_slice() -> None:
    assert lt.lint(IRREGULAR_GATHER).findings == []


def test_cartpole_baseline_rng_and_stack() -> None:
    report = lt.lint(examples.text("cartpole_baseline"), "xla")
    # the threefry loops rotate their key words: JAX's lowering, not reported
    assert sorted({f.kind for f in report.findings}) == [
        "concatenate-multi-user", "rng-in-loop", "stacked-loop-state"]
    rng = report.of_kind("rng-in-loop")
    assert len(rng) == 3  # key split, actions, reset states
    assert sorted(f.location.rsplit(":", 1)[1] for f in rng) == ["114", "115", "116"]
    for f in rng:
        assert f.measured["loop_kernels"] == 4 and f.measured["trips"] == 5
        assert f.measured["kernels_per_run"] == 74
        assert f.measured["rewrite"]["kernels"] == [74, 5]
    (cat,) = report.of_kind("concatenate-multi-user")
    assert cat.location.endswith("cartpole.py:114")  # jax.random.split's stack
    (state,) = report.of_kind("stacked-loop-state")
    assert state.location.endswith("cartpole.py:96")  # jnp.stack of the new state
    assert state.measured["rewrite"]["kernels"] == [5, 4]


def test_cartpole_precomputed_and_separate() -> None:
    pre = lt.lint(examples.text("cartpole_precomputed"), "xla")
    assert [f.kind for f in pre.findings] == ["stacked-loop-state"]
    assert pre.findings[0].measured["kernels_touching"] == 2
    assert pre.findings[0].measured["kernels_per_run"] == 5
    assert lt.lint(examples.text("cartpole_separate")).findings == []


def test_cli(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    f = tmp_path / "m.hlo"
    f.write_text(CRAFTED)
    assert lt.main(_parser().parse_args([str(f)])) == 0
    out = capsys.readouterr().out
    assert "env.py:30: rng-in-loop" in out and "fix:" in out and "cost:" in out
    assert lt.main(_parser().parse_args(["--example", "cartpole_separate", "--json"])) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["findings"] == [] and data["module"] == "jit_cartpole_separate"


def test_default_pipeline_is_what_compile_runs() -> None:
    """Without a pipeline, costs are measured under hlofuse (compile's): CartPole's time loop is
    one whole-loop kernel there, so its patterns live in that one kernel, and the shipped
    rewrites change no kernel count."""
    report = lt.lint(examples.text("cartpole_baseline"))
    rng = report.of_kind("rng-in-loop")
    assert len(rng) == 3
    for f in rng:
        assert f.measured["kernels_touching"] == 1 and "under hlofuse" in f.kernels
        assert len(f.measured["kernel_names"]) == 1
        assert "each run their time loop as one kernel" in f.kernels
    assert "under xla" in lt.lint(examples.text("cartpole_baseline"), "xla").findings[0].kernels
