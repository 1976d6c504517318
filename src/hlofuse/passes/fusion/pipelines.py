"""The fusion pipelines, as plain functions returning a `Pipeline` (registered in
`hlofuse.passes.pipelines.PIPELINES` under these names).

    none         simplify                                  every op its own kernel ("eager")
    xla          simplify
                 fusion fixpoint:      instruction-fusion{may_duplicate=false}
                                       instruction-fusion{may_duplicate=true}
                                       fusion-merger, multi-output-fusion, cse*, dce
                 horizontal fixpoint:  horizontal-loop-fusion, horizontal-input-fusion, cse*,
                                       dce
                 (cse*: inside fusion computations only, as XLA's
                 HloCSE(only_fusion_computations=true) there)
    xla-priority simplify, fusion fixpoint: priority-fusion, multi-output-fusion, cse*, dce;
                 horizontal fixpoint (XLA GPU's order since priority fusion, 2024)
    xla-relaxed  xla with the study's relaxations: allow_multi_user_concatenate,
                 relax_code_duplication
    hlofuse      beyond XLA (`BEYOND_XLA`, docs/beyond-xla.md): simplify
                 unroll-small-loops            threefry's rounds become elementwise code
                 simplify, unstack-loop-state  stacked loop state carried as rows
                 simplify, hoist-loop-reductions  per-step reductions over the batch
                                               computed after the loop from rows
                 simplify, auto-unroll         host loops unrolled when the cost model says so
                 simplify (the peeled iterations' counters fold back into constants)
                 simplify, xla's fusion fixpoint
                 small-dot-fusion              dots over a few elements computed inside
                                               the kernels that read them
                 xla's horizontal fixpoint
                 whole-loop-fusion             a per-element loop becomes one kernel, time
                                               loop inside
    hlofuse-priority  hlofuse with priority fusion under the CPU cost model as its vertical
                 fusion (`fusion_algorithm=priority`, `priority_cost_model=cpu`)

This is XLA's GPU pass order of era E2 (spec section 9, `FusionPipeline` and
`HorizontalFusionPipeline` in gpu_compiler.cc / fusion_pipeline.cc), each fixpoint limited to 25
iterations like `HloPassFix`. A pipeline builds one `FusionConfig` from its settings and hands
it to every fusion pass whole, so `xla(max_operands_and_outputs=96)` changes the rule in all of
them at once (each pass declares the settings it reads: `options.py`).
"""

from __future__ import annotations

from typing import Any

from hlofuse.passes.base import Fixpoint, Pipeline
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.core_passes import InstructionFusion, MultiOutputFusion
from hlofuse.passes.fusion.fusion_merger import FusionMerger
from hlofuse.passes.fusion.horizontal import HorizontalInputFusion, HorizontalLoopFusion
from hlofuse.passes.simplify.cse import Cse
from hlofuse.passes.simplify.dce import Dce
from hlofuse.passes.simplify.dot_strength import DotStrengthReduction

# The study's relaxations (paper.md, CartPole step 2): one switch each.
RELAXATIONS: dict[str, Any] = {"allow_multi_user_concatenate": True,
                               "relax_code_duplication": True}
# The hlofuse pipeline's transformations, each a FusionConfig setting (off in `xla`), so
# `hlofuse{whole_loop_fusion=false}` leaves one out. 8 iterations: JAX lowers threefry2x32 on
# CPU to a loop of 5 (of 4 rounds each).
BEYOND_XLA: dict[str, Any] = {"unroll_small_loops": 8, "unstack_loop_state": True,
                              "small_dot_k": 4,
                              "hoist_loop_reductions": True,
                              "auto_unroll": True, "whole_loop_fusion": True,
                              "gpu_cheap_ops": frozenset(), "max_reevaluated_ops": 40}
# The passes that make those transformations (their trace events are what `explain` lists).
BEYOND_PASSES = ("unroll-small-loops", "unstack-loop-state", "hoist-loop-reductions",
                 "auto-unroll", "small-dot-fusion", "whole-loop-fusion")


def _simplify() -> Fixpoint:
    from hlofuse.passes.pipelines import simplify  # late: that module imports this one

    return simplify()


def fusion_fixpoint(config: FusionConfig) -> Fixpoint:
    """XLA's HloPassFix "fusion" (vertical, merger, multi-output, cleanup); with
    `fusion_algorithm=priority`, XLA GPU's since 2024 (priority fusion in place of instruction
    fusion and the merger)."""
    if config.fusion_algorithm == "priority":
        from hlofuse.passes.fusion.priority_fusion import PriorityFusion

        return Fixpoint(Pipeline("fusion", [PriorityFusion(config), MultiOutputFusion(config),
                                            Cse(only_fusion_computations=True), Dce()]))
    return Fixpoint(Pipeline("fusion", [
        InstructionFusion(config.replace(may_duplicate=False)),
        InstructionFusion(config.replace(may_duplicate=True)),
        FusionMerger(config),
        MultiOutputFusion(config),
        Cse(only_fusion_computations=True),
        Dce(),
    ]))


def horizontal_fixpoint(config: FusionConfig) -> Fixpoint:
    """XLA's HloPassFix "horizontal fusion"."""
    return Fixpoint(Pipeline("horizontal-fusion", [
        HorizontalLoopFusion(config),
        HorizontalInputFusion(config),
        Cse(only_fusion_computations=True),
        Dce(),
    ]))


def none() -> Pipeline:
    """No fusion: simplification only, so every non-trivial op is its own kernel."""
    return Pipeline("none", [_simplify()])


def xla(name: str = "xla", **settings: Any) -> Pipeline:
    """The paper-era XLA GPU fusion pipeline; `settings` are FusionConfig overrides. Dots with
    a vector operand or tiny per-batch products become multiplies and sums before fusion, as
    XLA's algebraic simplifier strength-reduces them (`dot-strength-reduction`; the `none`
    pipeline, the eager baseline, keeps them dots)."""
    config = FusionConfig.from_options(settings)
    return Pipeline(name, [_simplify(), DotStrengthReduction(), fusion_fixpoint(config),
                           horizontal_fixpoint(config)])


def xla_priority(**settings: Any) -> Pipeline:
    """XLA GPU's current fusion order (spec 8.7, 9): priority fusion in place of the two
    instruction-fusion passes and the fusion merger; multi-output fusion, CSE and DCE after it
    in the fixpoint, then the horizontal fixpoint."""
    config = FusionConfig.from_options({"fusion_algorithm": "priority", **settings})
    return Pipeline("xla-priority", [_simplify(), DotStrengthReduction(),
                                     fusion_fixpoint(config), horizontal_fixpoint(config)])


def xla_relaxed(**settings: Any) -> Pipeline:
    """`xla` with the study's relaxations switched on."""
    return xla("xla-relaxed", **{**RELAXATIONS, **settings})


def hlofuse_priority(**settings: Any) -> Pipeline:
    """`hlofuse` with priority fusion, costed by the CPU model (perf_model_cpu.py), in place
    of instruction fusion and the fusion merger (in auto-unroll's trials too)."""
    return hlofuse(**{"fusion_algorithm": "priority", "priority_cost_model": "cpu", **settings})


def hlofuse(**settings: Any) -> Pipeline:
    """`xla` with the transformations XLA cannot make (docs/beyond-xla.md); `settings` are
    FusionConfig overrides on top of `BEYOND_XLA`."""
    from hlofuse.passes.fusion.auto_unroll import AutoUnroll
    from hlofuse.passes.fusion.loop_fusion import WholeLoopFusion
    from hlofuse.passes.fusion.loop_reductions import HoistLoopReductions
    from hlofuse.passes.fusion.small_dots import SmallDotFusion
    from hlofuse.passes.fusion.small_loops import UnrollSmallLoops
    from hlofuse.passes.fusion.unstack import UnstackLoopState

    c = FusionConfig.from_options({**BEYOND_XLA, **settings})
    return Pipeline("hlofuse", [_simplify(), DotStrengthReduction(), UnrollSmallLoops(c),
                                _simplify(),
                                UnstackLoopState(c), _simplify(), HoistLoopReductions(c),
                                _simplify(), AutoUnroll(c),
                                _simplify(), fusion_fixpoint(c), SmallDotFusion(c),
                                horizontal_fixpoint(c), WholeLoopFusion(c)])
