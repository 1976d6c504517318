"""`explain` under the `hlofuse` pipeline: every beyond-XLA transformation that fired or was
refused, with its rule, source line and figures, and what it saved against `xla`."""

from __future__ import annotations

import json

from hlo_loops import scan_reducing_over_batch
from hlofuse import examples
from hlofuse.text import parse
from hlofuse.tools.explain import explain
from hlofuse.tools.explain.model import dumps


def _baseline_module() -> object:
    return parse(examples.text("cartpole_baseline"),
                 source_name=str(examples.path("cartpole_baseline")))


def test_cartpole_as_written_lists_rng_unrolls_and_the_whole_loop() -> None:
    expl = explain(_baseline_module(), pipeline="hlofuse")
    by_pass: dict[str, list] = {}
    for t in expl.transformations:
        by_pass.setdefault(t.pass_name, []).append(t)
    rng = by_pass["unroll-small-loops"]
    assert len(rng) == 3 and all(t.fired and t.figures["rng"] and t.figures["trips"] == 5
                                 for t in rng)
    (whole,) = by_pass["whole-loop-fusion"]
    assert whole.fired
    assert whole.figures["trips"] == 100 and whole.figures["batch"] == 2048
    assert whole.figures["kernels_per_iteration"] > 1
    assert whole.source.endswith("cartpole.py:128")
    # one kernel for the loop, against thousands per run under xla
    assert expl.kernels_per_run is not None and expl.kernels_per_run <= 6
    assert expl.baseline["pipeline"] == "xla"
    assert expl.baseline["kernels"] > 100 * whole.figures["kernels_per_iteration"] // 2
    text = expl.to_text()
    assert "beyond XLA: 5 transformation(s) fired, 1 refused" in text
    (unroll,) = by_pass["auto-unroll"]  # left to whole-loop fusion
    assert not unroll.fired and unroll.rule == "auto_unroll.whole_loop"
    (unstacked,) = by_pass["unstack-loop-state"]
    assert unstacked.fired and unstacked.figures["rows"] == 4
    assert "threefry2x32 rounds" in text and "one kernel for all 100 iterations" in text
    data = json.loads(dumps(expl))
    assert [t["pass_name"] for t in data["transformations"]].count("whole-loop-fusion") == 1
    assert data["baseline"]["kernels"] == expl.baseline["kernels"]


def test_refused_whole_loop_names_the_instruction_and_rule() -> None:
    text = scan_reducing_over_batch()
    expl = explain(text, pipeline="hlofuse")
    (t,) = [t for t in expl.transformations if t.pass_name == "whole-loop-fusion"]
    assert not t.fired
    assert t.rule == "whole_loop.op"
    assert t.figures["opcode"] == "reduce"
    assert "reduces over the batch" in t.text
    assert "beyond XLA:" in expl.to_text() and "[rule whole_loop.op]" in expl.to_text()


def test_xla_has_no_beyond_section() -> None:
    expl = explain(_baseline_module(), pipeline="xla")
    assert expl.transformations == [] and expl.baseline == {}
    assert "beyond XLA" not in expl.to_text()


def test_switched_off_transformation_is_not_listed() -> None:
    expl = explain(_baseline_module(), pipeline="hlofuse{whole_loop_fusion=false}")
    assert [t.pass_name for t in expl.transformations] == ["unroll-small-loops"] * 3 + [
        "unstack-loop-state", "auto-unroll"]
    assert expl.kernels_per_run is not None and expl.kernels_per_run > 100
