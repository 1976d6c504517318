"""Each fusion pass declares the `FusionConfig` settings it reads (passes/fusion/options.py):
pass specs and keywords take only those, a pipeline refuses a setting none of its passes reads,
`hlofuse passes` lists them with their kind, and a run reads no setting its pass left out."""

from __future__ import annotations

import dataclasses
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from hlofuse import cli, examples
from hlofuse.errors import PassError
from hlofuse.passes.base import leaf_passes
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.core_passes import InstructionFusion
from hlofuse.passes.fusion.fusion_merger import FusionMerger
from hlofuse.passes.fusion.options import ALL_SETTINGS, FusionPass, option_info
from hlofuse.passes.pipelines import build, run_pipeline
from hlofuse.passes.registry import available_passes, parse_pass_spec, pass_class
from hlofuse.text import parse

HLO = Path(__file__).resolve().parent / "hlo"


def _fusion_passes() -> list[type[FusionPass]]:
    out = [pass_class(n) for n in available_passes()]
    return [c for c in out if issubclass(c, FusionPass)]


def test_every_fusion_pass_declares_real_settings() -> None:
    classes = _fusion_passes()
    assert len(classes) == 12
    for cls in classes:
        assert cls.OPTIONS and set(cls.OPTIONS) <= set(ALL_SETTINGS), cls
        assert len(set(cls.OPTIONS)) == len(cls.OPTIONS), cls
    # the narrow passes take only their own settings
    assert set(pass_class("unstack-loop-state").OPTIONS) == {
        "unstack_loop_state", "unstack_max_rows", "unstack_max_row_rank"}
    assert "merger_bytes_ratio" not in InstructionFusion.OPTIONS
    assert set(pass_class("small-dot-fusion").OPTIONS) == {"small_dot_k"}


def test_options_outside_the_declaration_are_refused() -> None:
    with pytest.raises(PassError, match="'fusion-merger' has no option 'unroll_small_loops'"):
        parse_pass_spec("fusion-merger{unroll_small_loops=3}")
    with pytest.raises(PassError, match="has no option 'merger_bytes_ratio'"):
        InstructionFusion(merger_bytes_ratio=2.0)
    (p,) = parse_pass_spec("instruction-fusion{may_duplicate=false,gpu_cheap_ops={divide,sqrt}}")
    assert isinstance(p, InstructionFusion)
    assert not p.config().may_duplicate
    assert {o.value for o in p.config().gpu_cheap_ops} == {"divide", "sqrt"}
    assert p == InstructionFusion(may_duplicate=False, gpu_cheap_ops="{sqrt,divide}")
    assert hash(p) == hash(InstructionFusion(may_duplicate=False, gpu_cheap_ops="{sqrt,divide}"))
    assert p != InstructionFusion()
    assert repr(FusionMerger(merger_bytes_ratio=2.0)) == "FusionMerger(merger_bytes_ratio=2.0)"


def test_a_pipeline_hands_its_one_config_to_every_pass() -> None:
    p = build("xla{max_operands_and_outputs=96,gpu_cheap_ops={divide}}")
    fusing = [q for q in leaf_passes(p) if isinstance(q, FusionPass)]
    assert [q.name for q in fusing] == ["instruction-fusion", "instruction-fusion",
                                        "fusion-merger", "multi-output-fusion",
                                        "horizontal-loop-fusion", "horizontal-input-fusion"]
    assert all(q.config().max_operands_and_outputs == 96 for q in fusing)
    assert [q.config().may_duplicate for q in fusing[:2]] == [False, True]
    h = build("hlofuse{whole_loop_fusion=false}")
    configs = {q.config() for q in leaf_passes(h) if isinstance(q, FusionPass)}
    assert all(not c.whole_loop_fusion and c.unstack_loop_state for c in configs)


def test_a_pipeline_refuses_a_setting_none_of_its_passes_reads() -> None:
    with pytest.raises(PassError, match="'xla' runs no pass that reads the setting "
                                        "'whole_loop_fusion'"):
        build("xla{whole_loop_fusion=true}")
    with pytest.raises(PassError, match="unknown fusion setting 'no_such_setting'"):
        build("xla{no_such_setting=1}")
    build("hlofuse{whole_loop_fusion=true,autotune=false}")  # read there


def test_option_metadata_comes_from_the_type_and_the_rule_registry() -> None:
    assert option_info("may_duplicate").kind == "switch"
    ratio = option_info("merger_bytes_ratio")
    assert (ratio.kind, ratio.figures, ratio.default) == ("limit", ("ratio",), 1.1)
    assert option_info("max_operands_and_outputs").figures == ("operands", "outputs")
    assert option_info("merger_version").kind == "choice"
    assert option_info("gpu_cheap_ops").kind == "set"
    with pytest.raises(PassError):
        option_info("nope")


def test_cli_lists_the_passes_and_their_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["passes", "unstack-loop-state", "dce"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "unstack-loop-state"
    assert "  unstack_loop_state: bool = false [switch]" in out
    assert any(line.startswith("  unstack_max_rows: int = ") and "[limit" in line
               for line in out)
    assert "dce" in out
    assert cli.main(["passes", "no-such-pass"]) != 0


# ----- a run reads only the settings its pass declares ------------------------------------


@pytest.mark.pure_core
def test_runs_read_only_declared_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Record every setting a pass's run reads (outside the config's own methods) over the
    built-in examples and tests/hlo under xla, xla-relaxed and hlofuse: each is declared."""
    fields = {f.name for f in dataclasses.fields(FusionConfig)}
    reads: dict[str, set[str]] = defaultdict(set)
    current: list[str] = []
    original = FusionConfig.__getattribute__

    def getattribute(self: FusionConfig, name: str) -> Any:
        if name in fields and current:
            caller = sys._getframe(1).f_code.co_filename
            if not caller.endswith(("config.py", "dataclasses.py", "options.py", "trace.py",
                                    "<string>")):
                reads[current[-1]].add(name)
        return original(self, name)

    monkeypatch.setattr(FusionConfig, "__getattribute__", getattribute)
    for cls in _fusion_passes():
        run = cls.run

        def recorded(self: Any, module: Any, _run: Any = run, _name: str = cls.name) -> bool:
            current.append(_name)
            try:
                return bool(_run(self, module))
            finally:
                current.pop()

        monkeypatch.setattr(cls, "run", recorded)
    texts = [p.read_text() for p in sorted(HLO.glob("*.hlo"))]
    texts += [examples.text(n) for n in examples.names()]
    for text in texts:
        for pipeline in ("xla", "xla-relaxed", "hlofuse"):
            run_pipeline(parse(text), pipeline)
    assert len(reads) >= 6, dict(reads)
    for name, read in reads.items():
        assert read <= set(pass_class(name).OPTIONS), (name, read - set(pass_class(name).OPTIONS))
