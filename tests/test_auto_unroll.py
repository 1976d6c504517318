"""Automatic unroll (passes/fusion/auto_unroll.py): the factor is the cost model's choice (or the
measured one with autotune, cached), every decision is recorded with its figures, values are
unchanged, and loops whole-loop fusion takes are left to it."""

from __future__ import annotations

import numpy as np
import pytest

from hlo_loops import mlp_scan, scan, stacked
from hlofuse.api import optimise
from hlofuse.backends import interpreter
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.base import Context
from hlofuse.passes.fusion.trace import TraceEvent, trace_of
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse

HOST_LOOPS = "hlofuse{whole_loop_fusion=false"


def _event(text: str, pipeline: str, context: Context | None = None,
           through_api: bool = False) -> tuple[object, TraceEvent]:
    module = parse(text)
    if through_api:  # (api's pass context carries the backends' timer)
        optimise(module, pipeline, context=context)
    else:
        run_pipeline(module, pipeline, context=context)
    (event,) = [e for e in trace_of(module) if e.pass_name == "auto-unroll"]
    return module, event


def test_the_model_picks_the_cheapest_factor_and_values_hold() -> None:
    text = stacked(64, 24)
    module, event = _event(text, HOST_LOOPS + ",min_unroll_gain=1.0}")
    model = {int(k): v for k, v in event.figures["model_ns"].items()}
    assert sorted(model) == [1, 2, 4, 8]
    best = min(model, key=lambda k: (model[k], k))
    assert event.figures["factor"] == best
    assert event.verdict == ("fused" if best > 1 else "refused")
    s0 = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    np.testing.assert_array_equal(interpreter.run(module, s0)[0],
                                  interpreter.run(parse(text), s0)[0])


def test_gain_threshold_is_a_setting() -> None:
    _, event = _event(stacked(64, 24), HOST_LOOPS + ",min_unroll_gain=1000}")
    assert event.verdict == "refused" and event.rule == "auto_unroll.gain"
    assert "pay" in event.reason  # "cannot pay" (the bound) or "does not pay" (costed)


def test_long_iterations_skip_costing_the_factors() -> None:
    """Dense layers of 256 x 64: each iteration's ops dwarf its kernel calls and its carried
    state, so no factor could gain 1.2x; the loop as it stands shows it, so nothing is costed
    (no copy of the loop is fused, not even at factor 1)."""
    _, event = _event(mlp_scan(n=256, d=64, h=64, s=24), HOST_LOOPS + "}")
    assert event.verdict == "refused" and event.rule == "auto_unroll.gain"
    assert event.figures["bound"] < 1.2 and event.figures["bound_from"] == "unfused"
    assert "model_ns" not in event.figures


@pytest.mark.parametrize("text", [mlp_scan(n=256, d=64, h=64, s=24), mlp_scan(n=64, d=16, h=32),
                                  mlp_scan(n=1024, d=4, h=8), mlp_scan(), stacked(),
                                  stacked(4096, 24), scan(), scan(n=100_000)],
                         ids=["mlp-256x64", "mlp-64x16", "mlp-1024x4", "mlp", "stacked",
                              "stacked-4096", "scan", "scan-100k"])
def test_the_unfused_screen_bounds_the_modelled_gain(text: str) -> None:
    """`screen_bound` (the loop before fusion) is never below `gain_bound` (the loop fused and
    costed; None is no bound at all): a refusal it makes is one the model would have made."""
    from hlofuse.passes.fusion.auto_unroll import gain_bound, modelled, screen_bound
    from hlofuse.passes.fusion.config import FusionConfig

    module, config = parse(text), FusionConfig()
    run_pipeline(module, "simplify")
    (w,) = [i for c in module.computations for i in c.instructions if i.opcode is Opcode.WHILE]
    screen, bound = screen_bound(w, config), gain_bound(w, modelled(module, w.name, 1, config),
                                                        config)
    assert screen is None or (bound is not None and screen >= bound)


def test_code_size_bounds_the_candidates() -> None:
    _, event = _event(stacked(64, 24), HOST_LOOPS + ",max_unroll_instructions=10}")
    assert event.verdict == "refused" and event.rule == "max_unroll_instructions"


def test_whole_loops_are_left_to_whole_loop_fusion() -> None:
    _, event = _event(scan(), "hlofuse")
    assert event.verdict == "refused" and event.rule == "auto_unroll.whole_loop"


def test_off_in_xla() -> None:
    module = parse(stacked())
    run_pipeline(module, "xla")
    assert not [e for e in trace_of(module) if e.pass_name == "auto-unroll"]


def test_autotune_measures_once_then_reads_the_cache(tmp_path: object,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("hlofuse.backends.cpu.build").find_compiler()
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path))
    pipeline = HOST_LOOPS + ",autotune=true,max_unroll=4}"
    _, first = _event(stacked(32, 16), pipeline, through_api=True)
    assert first.figures["cached"] is False
    assert sorted(int(k) for k in first.figures["measured_ns"]) == [1, 2, 4]
    _, again = _event(stacked(32, 16), pipeline, through_api=True)
    assert again.figures["cached"] is True
    assert again.figures["factor"] == first.figures["factor"]
    assert again.figures["measured_ns"] == first.figures["measured_ns"]


def test_the_timer_comes_from_the_pass_context() -> None:
    """Passes never call a backend: autotune times through `Context.timer` (here a fake that
    makes factor 2 fastest), and a run whose context has no timer decides by the model."""
    asked: list[tuple[str, list[int]]] = []

    def fake(key: str, candidates: dict[int, Module]) -> tuple[dict[int, float], bool]:
        asked.append((key, sorted(candidates)))
        return {k: 100.0 if k == 2 else 1000.0 for k in candidates}, False

    pipeline = HOST_LOOPS + ",autotune=true,max_unroll=4}"
    _, event = _event(stacked(32, 16), pipeline, Context(timer=fake))
    assert [factors for _, factors in asked] == [[1, 2, 4]]
    assert event.figures["factor"] == 2 and event.figures["measured_ns"] == {
        "1": 1000, "2": 100, "4": 1000}
    _, event = _event(stacked(32, 16), pipeline, through_api=True, context=Context(timer=fake))
    assert len(asked) == 2 and event.figures["factor"] == 2  # (api keeps the caller's timer)
    _, alone = _event(stacked(32, 16), pipeline)
    assert alone.figures["autotune"] == "not measured: nothing here times these candidates"
    assert "measured_ns" in event.figures and "measured_ns" not in alone.figures


def test_autotune_option_on_compile(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    import hlofuse

    pytest.importorskip("hlofuse.backends.cpu.build").find_compiler()
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path))
    text = stacked(32, 16)
    exe = hlofuse.compile(text, pipeline="hlofuse{whole_loop_fusion=false,max_unroll=2}",
                          autotune=True)
    assert exe.pipeline == "hlofuse{whole_loop_fusion=false,max_unroll=2,autotune=true}"
    s0 = np.random.default_rng(1).normal(size=(32, 3)).astype(np.float32)
    np.testing.assert_allclose(exe(s0)[0], interpreter.run(parse(text), s0)[0], rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(hlofuse.HloError, match="fusing pipeline"):
        hlofuse.compile(text, pipeline="none", autotune=True)


def test_loop_module_copies_only_what_the_loop_calls() -> None:
    """The module each candidate is costed on holds the loop's own computations and a new
    entry, not the rest of the program (which used to be cloned per candidate)."""
    from hlofuse.ir.opcodes import Opcode
    from hlofuse.passes.fusion.auto_unroll import _callees, loop_module

    module = parse(stacked(64, 24))
    (w,) = [i for c in module.computations for i in c.instructions if i.opcode is Opcode.WHILE]
    alone = loop_module(module, w.name)
    names = sorted(c.name for c in alone.computations if c is not alone.entry)
    assert names == sorted(c.name for c in _callees(w))
    assert module.entry.name not in names and alone.entry.root.opcode is Opcode.WHILE
    assert {c.name for c in alone.entry.root.called_computations()} <= set(names)
