"""Pass infrastructure: Pipeline order, reports, verification between passes, dumps that parse
back, observers, Fixpoint convergence and its iteration limit, and the pass-spec registry."""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from hlofuse.errors import PassError
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.base import Context, Fixpoint, PassEvent, Pipeline
from hlofuse.passes.pipelines import PIPELINES, build, run_pipeline
from hlofuse.passes.registry import (
    available_passes,
    create_pass,
    parse_pass_spec,
    register,
)
from hlofuse.passes.simplify.algebraic import AlgebraicSimplifier
from hlofuse.passes.simplify.cse import Cse
from hlofuse.passes.simplify.dce import Dce
from hlofuse.passes.simplify.inline import CallInliner
from hlofuse.passes.simplify.unroll import WhileLoopUnroller
from hlofuse.text import parse

TEXT = """
HloModule m

ENTRY e {
  p0 = f32[4] parameter(0)
  a = f32[4] add(p0, p0)
  b = f32[4] add(p0, p0)
  dead = f32[4] exponential(p0)
  ROOT m = f32[4] multiply(a, b)
}
"""


@dataclass(frozen=True)
class AlwaysChanged:
    name: ClassVar[str] = "always-changed"

    def run(self, module: Module) -> bool:
        return True


@dataclass(frozen=True)
class Breaker:
    """Makes the module invalid: the root claims the wrong shape."""

    name: ClassVar[str] = "breaker"

    def run(self, module: Module) -> bool:
        root = module.entry.root
        assert isinstance(root.shape, ArrayShape)
        root.shape = root.shape.with_dims((5,))
        return True


@dataclass(frozen=True)
class Nothing:
    name: ClassVar[str] = "nothing"

    def run(self, module: Module) -> bool:
        return False


def test_pipeline_runs_in_order_and_reports() -> None:
    m = parse(TEXT)
    report = Pipeline("p", [Cse(), Dce(), Nothing()]).execute(m)
    assert [r.name for r in report.records] == ["cse", "dce", "nothing"]
    assert [r.changed for r in report.records] == [True, True, False]
    assert report.changed and report.seconds > 0
    assert all(r.seconds >= 0 for r in report.records)
    assert [i.opcode for i in m.entry.instructions].count(Opcode.ADD) == 1
    assert not any(i.opcode is Opcode.EXP for i in m.entry.instructions)
    text = str(report)
    assert "cse" in text and "dce" in text and "changed" in text


def test_run_returns_changed_flag() -> None:
    assert Pipeline("p", [Cse()]).run(parse(TEXT)) is True
    assert Pipeline("p", [Nothing()]).run(parse(TEXT)) is False


def test_verify_after_each_pass_names_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PassError, match="breaker"):
        Pipeline("p", [Breaker()], verify=True).execute(parse(TEXT))
    # without verification (and without HLOFUSE_VERIFY, which tests/conftest.py sets) the broken
    # module goes through
    monkeypatch.delenv("HLOFUSE_VERIFY", raising=False)
    Pipeline("p", [Breaker()]).execute(parse(TEXT))


def test_verify_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HLOFUSE_VERIFY", "1")
    with pytest.raises(PassError, match="invalid after pass breaker"):
        Pipeline("p", [Breaker()]).execute(parse(TEXT))


def test_dumps_before_and_after_changing_passes_parse_back(tmp_path: Path) -> None:
    m = parse(TEXT)
    report = run_pipeline(m, "cse,noop-removal,dce", dump_dir=tmp_path, verify=True)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["000-before.hlo", "001-cse.hlo", "002-dce.hlo"]  # noop-removal: no change
    assert [p.name for p in report.dumps] == names
    for path in tmp_path.iterdir():
        parse(path.read_text(), verify=True)
    last = parse((tmp_path / "002-dce.hlo").read_text())
    assert len(last.entry.instructions) == 3


def test_observers_hear_start_and_end() -> None:
    events: list[PassEvent] = []
    ctx = Context(observers=[events.append])
    Pipeline("outer", [Cse(), Pipeline("inner", [Dce()])]).execute(parse(TEXT), ctx)
    assert [(e.phase, e.path) for e in events] == [
        ("start", "outer/cse"),
        ("end", "outer/cse"),
        ("start", "outer/inner/dce"),
        ("end", "outer/inner/dce"),
    ]
    assert events[1].changed and events[3].changed


def test_pipeline_pauses_the_garbage_collector_while_it_runs() -> None:
    """The cyclic collector is off during a top-level run and back on after it (and stays off
    after a run that started with it off)."""
    seen: list[bool] = []
    ctx = Context(observers=[lambda e: seen.append(gc.isenabled())])
    assert gc.isenabled()
    Pipeline("p", [Cse(), Dce()]).execute(parse(TEXT), ctx)
    assert seen == [False] * 4 and gc.isenabled()
    gc.disable()
    try:
        Pipeline("p", [Cse()]).execute(parse(TEXT))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_fixpoint_converges() -> None:
    m = parse(TEXT)
    report = Fixpoint(Pipeline("fix", [Cse(), Dce()])).execute(m)
    assert report.converged and not report.warnings
    assert report.iterations == 2  # one changing iteration, one quiet one
    assert [r.iteration for r in report.records] == [1, 1, 2, 2]


def test_fixpoint_limit_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="hlofuse.passes"):
        report = Fixpoint(Pipeline("spin", [AlwaysChanged()]), max_iterations=3).execute(
            parse(TEXT)
        )
    assert report.iterations == 3 and not report.converged
    assert report.warnings and "limit of 3" in report.warnings[0]
    assert any("limit of 3" in r.message for r in caplog.records)
    assert "did not converge" in str(report)


def test_a_converged_fixpoint_is_skipped_until_the_module_changes() -> None:
    def fix() -> Fixpoint:  # equal by value each time
        return Fixpoint(Pipeline("fix", [Cse(), Dce()]))

    report = Pipeline("p", [fix(), Nothing(), fix()]).execute(parse(TEXT))
    assert [r.name for r in report.records] == ["cse", "dce", "cse", "dce", "nothing"]
    report = Pipeline("p", [fix(), AlwaysChanged(), fix()]).execute(parse(TEXT))
    assert [r.name for r in report.records].count("cse") == 3  # 2 + 1 after the change
    # a fixpoint that did not converge is never skipped
    spin = Fixpoint(Pipeline("spin", [AlwaysChanged()]), max_iterations=2)
    report = Pipeline("p", [spin, Nothing(), spin]).execute(parse(TEXT))
    assert [r.name for r in report.records].count("always-changed") == 4


@pytest.mark.parametrize("program", ["cartpole_baseline", "mlp_train_step"])
def test_skipping_settled_fixpoints_changes_no_result(
        program: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hlofuse pipeline's repeated simplifications, skipped where nothing changed since
    the last one converged, leave the same module as running each of them."""
    from hlofuse.passes import base
    from hlofuse.text import print_module

    text = _example(program)
    skipped = parse(text)
    report = run_pipeline(skipped, "hlofuse")
    monkeypatch.setattr(base, "_hashable", lambda p: False)
    every = parse(text)
    full = run_pipeline(every, "hlofuse")
    assert print_module(skipped) == print_module(every)
    simplify_runs = [r for r in report.records if r.path.startswith("hlofuse/simplify/")]
    all_runs = [r for r in full.records if r.path.startswith("hlofuse/simplify/")]
    assert len(simplify_runs) <= len(all_runs)
    if program == "mlp_train_step":  # no loop: the simplifications after the first skipped
        assert len(simplify_runs) < len(all_runs)


def _example(program: str) -> str:
    import hlofuse.examples

    return (Path(hlofuse.examples.__file__).parent / f"{program}.hlo").read_text()


def test_parse_pass_spec_with_options_and_aliases() -> None:
    passes = parse_pass_spec(
        "inline,dce,algebraic-simplifier{max_iterations=3},unroll-while{factor=4}"
    )
    assert passes == [
        CallInliner(),
        Dce(),
        AlgebraicSimplifier(max_iterations=3),
        WhileLoopUnroller(factor=4),
    ]
    assert parse_pass_spec("dce{remove_computations=false}") == [Dce(remove_computations=False)]
    p = parse_pass_spec("constant-folding{max_elements=16, max_expand_elements=2}")[0]
    assert (p.max_elements, p.max_expand_elements) == (16, 2)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("dce,no-such-pass", "unknown pass 'no-such-pass'.*call-inliner.*while-loop-unroller"),
        ("unroll-while{speed=3}", "no option 'speed'.*factor: int"),
        ("unroll-while{factor=many}", "must be an integer"),
        ("dce{remove_computations=maybe}", "true or false"),
        ("dce{remove_computations}", "key=value"),
        ("dce{", "unbalanced"),
        ("", "empty"),
        ("unroll-while{factor=0}", "at least 1"),
    ],
)
def test_bad_pass_specs(spec: str, message: str) -> None:
    with pytest.raises(PassError, match=message):
        parse_pass_spec(spec)


def test_registry_lists_every_simplification_pass() -> None:
    assert set(available_passes()) >= {
        "call-inliner",
        "dce",
        "cse",
        "constant-folding",
        "tuple-simplifier",
        "noop-removal",
        "algebraic-simplifier",
        "while-loop-simplifier",
        "while-loop-unroller",
    }
    with pytest.raises(ValueError, match="already registered"):
        register("dce")(AlwaysChanged)
    with pytest.raises(ValueError, match="kebab-case"):
        register("Not_Kebab")(AlwaysChanged)
    assert create_pass("cse") == Cse()


def test_named_pipelines_and_specs_with_pipelines() -> None:
    assert "simplify" in PIPELINES
    p = build("simplify")
    assert isinstance(p, Fixpoint) and p.max_iterations == 25
    assert [q.name for q in p.pipeline.passes] == [
        "call-inliner",
        "tuple-simplifier",
        "algebraic-simplifier",
        "tree-reduction-rewriter",
        "reduce-window-rewriter",
        "noop-removal",
        "constant-folding",
        "while-loop-simplifier",
        "cse",
        "dce",
    ]
    mixed = build("simplify,unroll-while{factor=2},dce")
    assert isinstance(mixed, Pipeline)
    assert [q.name for q in mixed.passes] == ["simplify", "while-loop-unroller", "dce"]
    with pytest.raises(PassError):
        run_pipeline(parse(TEXT), "simplify,bogus")


def test_nested_pipeline_verify_flag_and_invalid_input() -> None:
    with pytest.raises(PassError, match="breaker"):
        Pipeline("outer", [Cse(), Pipeline("inner", [Breaker()], verify=True)]).execute(
            parse(TEXT))
    broken = parse(TEXT)
    Breaker().run(broken)
    with pytest.raises(PassError, match="the input"):
        Pipeline("p", [Nothing()], verify=True).execute(broken)
