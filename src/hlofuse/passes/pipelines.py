"""Named pipelines, as plain functions returning a pass (a `Pipeline` or a `Fixpoint`).

    simplify = Fixpoint(call-inliner, tuple-simplifier, algebraic-simplifier,
                        tree-reduction-rewriter, reduce-window-rewriter, noop-removal,
                        constant-folding, while-loop-simplifier, cse, dce)

`run_pipeline(module, name_or_spec)` is what the CLI and `hlofuse.compile` call: a name from
`PIPELINES`, or a pass spec (`"inline,dce,unroll-while{factor=4}"`, see `registry.py`) whose
items may also name pipelines, with FusionConfig settings: `hlofuse{whole_loop_fusion=false}`,
`xla{max_operands_and_outputs=96}`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

from hlofuse.errors import PassError
from hlofuse.ir.module import Module
from hlofuse.passes.base import Context, Fixpoint, Pass, Pipeline, PipelineReport, leaf_passes
from hlofuse.passes.defaults import DEFAULT_PIPELINE  # noqa: F401  (re-exported)
from hlofuse.passes.fusion import pipelines as fusion_pipelines
from hlofuse.passes.fusion.config import FusionConfig, setting_text
from hlofuse.passes.registry import parse_pass_spec
from hlofuse.passes.simplify.algebraic import AlgebraicSimplifier
from hlofuse.passes.simplify.constant_fold import ConstantFolding
from hlofuse.passes.simplify.cse import Cse
from hlofuse.passes.simplify.dce import Dce
from hlofuse.passes.simplify.inline import CallInliner
from hlofuse.passes.simplify.noops import NoopRemoval
from hlofuse.passes.simplify.scan_rewriter import ReduceWindowRewriter
from hlofuse.passes.simplify.tree_reduction import TreeReductionRewriter
from hlofuse.passes.simplify.tuples import TupleSimplifier
from hlofuse.passes.simplify.while_loops import WhileLoopSimplifier


def simplify(max_iterations: int = 25) -> Fixpoint:
    """XLA's "simplification" fixpoint, restricted to the passes hlofuse has. With XLA CPU's
    reduction rewrites (after the algebraic simplifier, as there), so sums of f16/bf16 and scans
    associate as jax.jit's do (tree_reduction.py, scan_rewriter.py)."""
    return Fixpoint(
        Pipeline(
            "simplify",
            [
                CallInliner(),
                TupleSimplifier(),
                AlgebraicSimplifier(),
                TreeReductionRewriter(),
                ReduceWindowRewriter(),
                NoopRemoval(),
                ConstantFolding(),
                WhileLoopSimplifier(),
                Cse(),
                Dce(),
            ],
        ),
        max_iterations=max_iterations,
    )


PIPELINES: dict[str, Callable[[], Pass]] = {
    "simplify": simplify,
    "none": fusion_pipelines.none,
    "xla": fusion_pipelines.xla,
    "xla-relaxed": fusion_pipelines.xla_relaxed,
    "xla-priority": fusion_pipelines.xla_priority,
    "hlofuse": fusion_pipelines.hlofuse,
    "hlofuse-priority": fusion_pipelines.hlofuse_priority,
}


def build(name_or_spec: str) -> Pipeline | Fixpoint:
    """The pipeline named `name_or_spec`, or a pipeline of the passes the spec lists."""
    factory = PIPELINES.get(name_or_spec.strip())
    if factory is not None:
        p = factory()
        return p if isinstance(p, (Pipeline, Fixpoint)) else Pipeline(name_or_spec, [p])
    items: list[Pass] = []
    for part in _spec_items(name_or_spec):
        sub = _pipeline_item(part.strip())
        if sub is not None:
            items.append(sub)
        else:
            items.extend(parse_pass_spec(part))
    if len(items) == 1 and isinstance(items[0], (Pipeline, Fixpoint)):
        return items[0]
    return Pipeline(name_or_spec, items)


def with_settings(spec: str, **settings: object) -> str:
    """`spec` (a pipeline name, optionally with `{settings}`) with `settings` added:
    `with_settings("hlofuse", autotune=True)` -> "hlofuse{autotune=true}". PassError for a
    spec that is not one fusing pipeline."""
    m = re.fullmatch(r"\s*([a-z][a-z0-9-]*)\s*(?:\{(.*)\})?\s*", spec, re.S)
    if m is None or m.group(1) not in PIPELINES or m.group(1) in ("none", "simplify"):
        raise PassError(f"settings {sorted(settings)} need one fusing pipeline (xla, "
                        f"xla-relaxed, hlofuse), not {spec!r}")
    items = [x.strip() for x in _spec_items(m.group(2) or "") if x.strip()]
    for key, value in settings.items():
        text = setting_text(value)
        items = [x for x in items if x.partition("=")[0].strip() != key] + [f"{key}={text}"]
    return f"{m.group(1)}{{{','.join(items)}}}"


def _pipeline_item(text: str) -> Pass | None:
    """A pipeline named in a spec, with `{setting=value,...}` FusionConfig overrides
    (`hlofuse{whole_loop_fusion=false}`); None if `text` names no pipeline."""
    m = re.fullmatch(r"([a-z][a-z0-9-]*)\s*(?:\{(.*)\})?", text, re.S)
    if m is None or m.group(1) not in PIPELINES:
        return None
    name, body = m.group(1), m.group(2)
    if not body or not body.strip():
        return PIPELINES[name]()
    settings: dict[str, str] = {}
    for opt in _spec_items(body):
        key, eq, value = opt.partition("=")
        if not eq or not key.strip():
            raise PassError(f"setting {opt.strip()!r} of pipeline {name!r} needs the form "
                            "key=value")
        settings[key.strip().replace("-", "_")] = value.strip()
    if name in ("none", "simplify"):
        raise PassError(f"pipeline {name!r} takes no settings (it does not fuse)")
    config = FusionConfig.from_options(settings)  # unknown settings and bad values fail here
    built = PIPELINES[name](**{k: getattr(config, k) for k in settings})
    read = {o for p in leaf_passes(built) for o in getattr(p, "OPTIONS", ())}
    unread = [k for k in settings if k not in read]
    if unread:
        raise PassError(f"pipeline {name!r} runs no pass that reads the setting {unread[0]!r} "
                        "(each fusion pass's options: `hlofuse passes`)")
    return built


def _spec_items(spec: str) -> list[str]:
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(spec):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(spec[start:i])
            start = i + 1
    parts.append(spec[start:])
    return [p for p in parts if p.strip()] or [spec]


def run_pipeline(
    module: Module,
    name_or_spec: str,
    *,
    verify: bool = False,
    dump_dir: str | Path | None = None,
    context: Context | None = None,
) -> PipelineReport:
    """Run a named pipeline or a pass spec on `module` in place; returns the report."""
    pipeline = build(name_or_spec)
    ctx = context if context is not None else Context()
    if verify:
        ctx = dataclasses.replace(ctx, verify=True)
    return pipeline.execute(module, ctx, dump_dir=dump_dir)
