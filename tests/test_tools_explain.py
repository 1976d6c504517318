"""`hlofuse explain`: kernels per loop iteration, boundaries with the trace's rule, source lines
and fixes, on crafted modules and on the built-in CartPole variants."""

from __future__ import annotations

import argparse
import json

import pytest

from hlofuse import examples
from hlofuse.errors import HloError
from hlofuse.text import parse
from hlofuse.tools import explain as ex

# CartPole in miniature: `done` (per element, [256]) feeds a select over a stacked [2,256] state
# and an episode counter; the stack gives the select a different loop shape.
STACKED = """
HloModule stacked

ENTRY main {
  x = f32[256] parameter(0)
  y = f32[256] parameter(1)
  lim = f32[] constant(2.4)
  limb = f32[256] broadcast(lim), dimensions={}
  done = pred[256] compare(x, limb), direction=GT, metadata={source_file="model.py" source_line=3}
  xs = f32[1,256] reshape(x)
  ys = f32[1,256] reshape(y)
  st = f32[2,256] concatenate(xs, ys), dimensions={0},
    metadata={source_file="model.py" source_line=5}
  db = pred[2,256] broadcast(done), dimensions={1}
  z = f32[2,256] broadcast(lim), dimensions={}
  out1 = f32[2,256] select(db, z, st), metadata={source_file="model.py" source_line=6}
  one = s32[] constant(1)
  ones = s32[256] broadcast(one), dimensions={}
  zero = s32[] constant(0)
  zeros = s32[256] broadcast(zero), dimensions={}
  out2 = s32[256] select(done, ones, zeros), metadata={source_file="model.py" source_line=7}
  ROOT t = (f32[2,256], s32[256]) tuple(out1, out2)
}
"""

LOOP = """
HloModule loop

body {
  p = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[64] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one), metadata={source_file="loop.py" source_line=20}
  s = f32[64] sine(v), metadata={source_file="loop.py" source_line=21}
  c = f32[64] cosine(s), metadata={source_file="loop.py" source_line=22}
  ROOT t = (s32[], f32[64]) tuple(i1, c)
}

cond {
  p = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY main {
  x = f32[64] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[64]) tuple(z, x)
  w = (s32[], f32[64]) while(t), condition=cond, body=body
  ROOT r = f32[64] get-tuple-element(w), index=1
}
"""

DOT = """
HloModule dot

ENTRY main {
  a = f32[16,16] parameter(0)
  e = f32[16,16] exponential(a), metadata={source_file="mm.py" source_line=4}
  d = f32[16,16] dot(e, e), lhs_contracting_dims={1}, rhs_contracting_dims={0},
    metadata={source_file="mm.py" source_line=5}
  ROOT n = f32[16,16] negate(d), metadata={source_file="mm.py" source_line=6}
}
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    ex.add_arguments(p)
    return p


def test_stacked_boundary_rule_fix_and_lines() -> None:
    expl = ex.explain(STACKED, pipeline="xla", verify_fixes=True)
    entry = expl.section("entry")
    assert entry.kernels_per_run == 2
    (b,) = [b for b in entry.boundaries if b.category == "fusion"]
    assert b.rule is not None
    assert (b.rule.pass_name, b.rule.reason) == ("multi-output-fusion", "different loop shapes")
    assert b.source == "model.py:3" and b.consumer_source == "model.py:6"
    # the earlier refusals keep the settings and figures the rules used
    merger = [r for r in b.earlier if r.pass_name == "fusion-merger"]
    assert merger and merger[-1].setting == "merger_bytes_ratio"
    assert merger[-1].figures["ratio"] > 1.10
    assert any(r.setting == "may_duplicate" for r in b.earlier)
    rewrite = [f for f in b.fixes if f.kind == "rewrite"]
    assert rewrite and "separately instead of stacking" in rewrite[0].text
    setting = [f for f in b.fixes if f.kind == "setting"]
    assert setting[0].setting == "merger_bytes_ratio"
    assert setting[0].value >= merger[-1].figures["ratio"]
    # measured by re-running the pipeline with the setting
    assert setting[0].verified.startswith("measured: removes this boundary")
    # the kernels say where their ops came from
    by_name = {k.name: k for k in entry.kernels}
    assert by_name[b.consumer].sources == ["model.py:5", "model.py:6"]
    assert by_name[b.consumer].ops["concatenate"] == 1
    text = expl.to_text()
    assert "different loop shapes" in text and "model.py:3" in text


def test_loop_sections_loop_state_and_trip_count() -> None:
    expl = ex.explain(LOOP, pipeline="xla")
    body = expl.section("w body")
    assert body.per == "iteration" and body.trip_count == 10
    # add (counter) + one sine/cosine fusion in the body, the compare in the condition
    assert [k.kind for k in body.kernels] == ["add", "kLoop"]
    assert body.kernels_per_run == 3 and len(body.condition_kernels) == 1
    assert expl.section("entry").kernels_per_run == 30
    state = [b for b in body.boundaries if b.category == "loop-state"]
    assert sorted(b.source for b in state) == ["loop.py:20", "loop.py:22"]
    assert all("loop-carried" in b.why for b in state)
    fusion = next(k for k in body.kernels if k.kind == "kLoop")
    assert fusion.sources == ["loop.py:21", "loop.py:22"]
    assert fusion.bytes_read == 256 and fusion.bytes_written == 256
    # the entry's edges into the while are control flow, with a structural reason
    js = expl.to_json()
    assert json.loads(json.dumps(js))["sections"][1]["kernels_per_run"] == 3


def test_library_consumer_has_a_reason() -> None:
    expl = ex.explain(DOT)
    bounds = [b for b in expl.section("entry").boundaries if b.category == "fusion"]
    assert bounds, "exp -> dot and dot -> negate are kernel boundaries"
    for b in bounds:
        assert b.reason, b
        assert b.source.startswith("mm.py:")


def test_none_pipeline_says_it_does_not_fuse() -> None:
    expl = ex.explain(STACKED, pipeline="none")
    bounds = expl.section("entry").boundaries
    assert bounds and all(b.why == "the `none` pipeline runs no fusion pass" for b in bounds)


def test_input_module_is_not_modified() -> None:
    module = parse(STACKED)
    before = len(module.entry.instructions)
    ex.explain(module)
    assert len(module.entry.instructions) == before
    assert all(i.metadata.get("hlofuse_origin") is None for i in module.entry.instructions)


def test_cartpole_baseline_every_body_boundary_has_reason_and_line() -> None:
    expl = ex.explain(examples.text("cartpole_baseline"), pipeline="xla")
    body = expl.section("while.74 body")
    assert body.kernels_per_run == 74
    assert len(body.boundaries) > 20
    for b in body.boundaries:
        assert b.reason, f"{b.producer} -> {b.consumer} has no reason"
        assert b.source.startswith("src/hlofuse/examples/cartpole.py:"), b
    rng = [b for b in body.boundaries if b.category == "control-flow"]
    assert rng and all("random-number loop" in b.why for b in rng)
    assert all(any("before the loop" in f.text for f in b.fixes) for b in rng)
    # the study's boundary: done -> the stacked state, refused for its loop shape
    done = [b for b in body.boundaries if b.rule is not None
            and b.rule.reason == "different loop shapes"]
    assert len(done) == 1 and done[0].source.endswith("cartpole.py:88")


def test_cartpole_precomputed_and_separate() -> None:
    pre = ex.explain(examples.text("cartpole_precomputed"), pipeline="xla").loops[0]
    assert pre.kernels_per_run == 5
    (b,) = [b for b in pre.boundaries if b.category == "fusion"]
    assert b.rule is not None and b.rule.reason == "different loop shapes"
    assert any("stacking" in f.text for f in b.fixes)
    sep = ex.explain(examples.text("cartpole_separate"), pipeline="xla").loops[0]
    assert sep.kernels_per_run == 4
    assert not [b for b in sep.boundaries if b.category == "fusion"]


def test_compare_pipelines() -> None:
    c = ex.compare(examples.text("cartpole_separate"), ["none", "xla"])
    loop = next(t for t in c.rows if t.endswith("body"))
    assert c.rows[loop]["none"][0] == 69 and c.rows[loop]["xla"][0] == 4
    none_bytes, xla_bytes = c.rows[loop]["none"][1], c.rows[loop]["xla"][1]
    assert none_bytes is not None and xla_bytes is not None and xla_bytes < none_bytes
    text = c.to_text()
    assert loop in text and "69" in text


def test_cli_json_and_text(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    assert ex.main(_parser().parse_args(["--example", "cartpole_separate", "--json"])) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pipeline"] == "hlofuse"  # the default is the pipeline compile runs
    assert ex.main(_parser().parse_args(["--example", "cartpole_separate", "--json",
                                         "--pipeline", "xla"])) == 0
    data = json.loads(capsys.readouterr().out)
    loops = [s for s in data["sections"] if s["per"] == "iteration"]
    assert loops[0]["kernels_per_run"] == 4
    f = tmp_path / "m.hlo"
    f.write_text(STACKED)
    assert ex.main(_parser().parse_args([str(f), "--pipeline", "xla"])) == 0
    out = capsys.readouterr().out
    assert "fusion -> fusion.1" in out and "rule: multi-output-fusion: different loop shapes" in out
    args = _parser().parse_args([str(f), "--pipeline", "none", "--pipeline", "xla"])
    assert ex.main(args) == 0
    table = capsys.readouterr().out
    assert "none" in table and "xla" in table and "entry" in table


def test_cli_bad_input() -> None:
    with pytest.raises(HloError, match="no such file"):
        ex.main(_parser().parse_args(["/nonexistent.hlo"]))
    with pytest.raises(HloError, match="unknown example"):
        ex.main(_parser().parse_args(["--example", "nope"]))
    with pytest.raises(HloError, match="exactly one"):
        ex.main(_parser().parse_args([]))


def test_explain_a_jax_function() -> None:
    jnp = pytest.importorskip("jax.numpy")
    import numpy as np

    def f(x):  # a JAX function
        return jnp.sum(jnp.exp(x) * 2.0)

    expl = ex.explain(f, np.ones((8,), np.float32))
    (k,) = expl.section("entry").kernels
    assert k.kind == "kInput" and k.ops["reduce"] == 1 and k.ops["exponential"] == 1
    assert k.sources and k.sources[0].endswith(f":{f.__code__.co_firstlineno + 1}")


def test_trace_records_resolved_settings_and_round_trips(tmp_path) -> None:
    from hlofuse.passes.fusion.trace import FusionTrace, trace_of
    from hlofuse.passes.pipelines import run_pipeline

    module = parse(STACKED)
    run_pipeline(module, "hlofuse{max_operands_and_outputs=96,whole_loop_fusion=false}")
    trace = trace_of(module)
    fusion = trace.settings["instruction-fusion"]
    # the override, the pipeline's own settings (BEYOND_XLA) and the pass's own switch
    assert fusion.max_operands_and_outputs == 96 and not fusion.whole_loop_fusion
    assert fusion.unstack_loop_state and fusion.may_duplicate
    assert set(trace.settings) >= {"instruction-fusion", "fusion-merger", "multi-output-fusion",
                                   "horizontal-loop-fusion", "auto-unroll"}
    path = tmp_path / "trace.jsonl"
    trace.write(path)
    assert FusionTrace.read(path) == trace
    plain = parse(STACKED)
    run_pipeline(plain, "simplify")
    assert trace_of(plain).settings == {}


def test_explain_reasks_with_the_settings_the_run_used() -> None:
    from hlofuse.passes.fusion.trace import trace_of
    from hlofuse.tools.explain.analyse import asked_config

    module = parse(STACKED)
    ex.analyse(module, "xla{max_code_duplication=3}")
    assert asked_config(module).max_code_duplication == 3
    assert trace_of(module).settings["instruction-fusion"].max_code_duplication == 3


def test_setting_fixes_are_measured_under_the_default_pipeline() -> None:
    expl = ex.explain(STACKED, pipeline="hlofuse", verify_fixes=True)
    fixes = [f for s in expl.sections for b in s.boundaries for f in b.fixes
             if f.kind == "setting" and f.value is not None]
    assert fixes, "the stacked select has a setting fix under hlofuse too"
    assert all(f.verified.startswith("measured: ") for f in fixes), fixes
