"""The fusion rules as data: every code a refusal can carry, with its plain-language reading,
the `FusionConfig` setting that relaxes it (if any) and the frontend rewrite that avoids it.

A fusion pass refuses with `FusionDecision.no(reason, code)`; the reason is English for people
(it may quote instruction names and figures), the code is what tools read. Two kinds of code:

    merger_bytes_ratio         a `FusionConfig` setting name: the setting decides the rule, so
                               changing it relaxes it (`explain` suggests the new value)
    mof_fusible.loop_shapes    a dotted `family.rule`: a fixed rule (the family is the pass or
                               the predicate module that owns it); no setting relaxes it

The setting names are kept as codes because the fusion trace, `explain`'s `setting` field and
its `verify_fixes` re-runs read them. For each setting code the table says how a setting fix is
made (`relax`):

    switch   set the setting to `value` (a switch that turns the rule off)
    limit    raise the limit to the measured figure `figures[0]` (rounded up)
    sum      raise the limit to the sum of `figures` (operands + outputs)
    above    set it just above the figure `figures[0]` (the merger's expensive-op escape ratio)
    ""       the setting is named, but no value follows from the figures

and `advice` names the rewrite `explain` offers when the kernels' contents allow it:
"loop-shape" (stacked state, or two shapes: compute both over one shape) or "rng" (a
random-number loop among the users: draw the numbers before the loop).

Conditions enforced (tests/test_fusion_rules.py): every refusal under `passes/` names a code
from `RULES`, as a literal; every code without a dot is a `FusionConfig` field; nothing in
`tools/explain` reads meaning from a reason's text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RELAX_KINDS = ("", "switch", "limit", "sum", "above")
ADVICE_KINDS = ("", "loop-shape", "rng")


@dataclass(frozen=True)
class Rule:
    code: str
    reading: str  # what the refusal means, in plain language
    relax: str = ""  # RELAX_KINDS: how a setting fix is made (setting codes only)
    value: Any = None  # switch: the value that turns the rule off
    figures: tuple[str, ...] = ()  # limit, sum, above: the figures the setting is compared with
    fix: str = ""  # the setting fix's text, when not the relax kind's usual one ({value})
    advice: str = ""  # ADVICE_KINDS: the frontend rewrite that avoids it

    @property
    def setting(self) -> str:
        """The `FusionConfig` setting that relaxes the rule; "" for a fixed rule."""
        return "" if "." in self.code else self.code


# (readings shared by several rules)
_EXPENSIVE = "the producer is expensive and would be recomputed in each user"
_BUDGET = "the fused kernel would exceed a resource budget"
_DUPLICATION = ("fusing would duplicate too much code (the producer would be recomputed for "
                "every use)")
_SLOWER = "the performance model predicts the fused kernel is slower"
_NOT_LOOP_FUSIBLE = ("the producer (a library op such as dot, or a multi-output kernel) cannot "
                     "be emitted inside a loop fusion")
_HUGE_IR = ("the merged kernel's code would grow too large: the producer's code is repeated "
            "for each use and each split of the loop body")
_REEVALUATED = ("the consumer reads several producer elements per result, so fusing would "
                "repeat the producer's code for each of them")
_SIDE_EFFECT = "the loop condition has a side effect, which must run once per iteration"
_TRIPS_UNKNOWN = "the loop's trip count is not known when compiling"
_BUDGET_UNROLL = ("the module has already grown by as many copied instructions as the unroll "
                  "budget allows")
_IN_PLACE = ("the consumer updates a buffer in place, and the producer's reads of that buffer "
             "would see partly updated values")


_TABLE: tuple[Rule, ...] = (
    # ----- instruction fusion (passes/fusion/instruction_fusion.py) --------------------------
    Rule("instruction_fusion.root", "the producer is the computation's result"),
    Rule("instruction_fusion.expensive_duplicate", _EXPENSIVE, advice="rng"),
    Rule("may_duplicate", "the producer has several users and this instruction-fusion pass "
         "does not duplicate producers", "switch", True, advice="rng"),
    Rule("instruction_fusion.producer_fusion", "instruction fusion does not fuse a fusion "
         "producer; the merger and multi-output fusion decide those"),
    Rule("instruction_fusion.expensive_reuse", _EXPENSIVE),
    Rule("max_reevaluated_ops", _REEVALUATED),
    Rule("instruction_fusion.coalescing", "the producer transposes its data: fused into a "
         "reduction it would make the reduction read memory out of order"),
    Rule("max_inputs_per_output", "the fused kernel would read too many inputs for each "
         "output element (a heavy computation)"),
    Rule("instruction_fusion.not_duplicable", "the producer has several users and cannot be "
         "fused into all of them (one path ends at a non-fusible user), so it is not "
         "duplicated", advice="rng"),
    # ----- producer-consumer fusibility (gpu_fusible.py) ---------------------------------------
    Rule("gpu_fusible.producer_not_loop_fusible", _NOT_LOOP_FUSIBLE),
    Rule("gpu_fusible.reduction_epilogue", "the producer is a reduction and the consumer is "
         "not an elementwise epilogue the reduction emitter can take"),
    Rule("gpu_fusible.reduction_users", "the producer is a reduction with several users; a "
         "reduction is fused into its consumer only when that is its one user"),
    Rule("gpu_fusible.consumer_not_fusible", "the consumer (or, for the fusion merger, one of "
         "the producer's users: it merges into all users or none) cannot take a fused "
         "producer: a library op such as dot, a while loop, a tuple", advice="rng"),
    Rule("gpu_fusible.producer_multi_output", "the producer is a multi-output kernel, which is "
         "never fused into a consumer", advice="rng"),
    Rule("gpu_fusible.constant", "a constant that is not a scalar (or not read by a fusion) "
         "stays a buffer of its own instead of being copied into the kernel"),
    Rule("shared_memory_budget", _BUDGET, "limit", figures=("shared_memory_bytes",)),
    Rule("max_unnested_reductions", _BUDGET, "limit", figures=("unnested_reductions",)),
    Rule("max_operands_and_outputs", _BUDGET, "sum", figures=("operands", "outputs"),
         fix="allows {value} operands and outputs per fusion"),
    # ----- code duplication (indexing.py) ----------------------------------------------------
    Rule("max_code_duplication", _DUPLICATION, "limit", figures=("emitted",)),
    Rule("allow_multi_user_concatenate", _DUPLICATION, "switch", True),
    Rule("relax_code_duplication", _DUPLICATION, "switch", True),
    # ----- in-place operands (predicates.py, ShouldFuseInPlaceOp) ------------------------------
    Rule("in_place.non_elementwise_read", _IN_PLACE),
    Rule("in_place.not_dus", "the consumer is not a dynamic-update-slice, or the producer "
         "fusion has several non-elementwise ops: its in-place update cannot be checked"),
    Rule("in_place.slice_index", "the producer slices the updated buffer at another offset "
         "than the consumer's dynamic-update-slice writes"),
    Rule("in_place.dynamic_slice_index", "the producer's dynamic-slice reads the updated "
         "buffer at another index than the consumer's dynamic-update-slice writes"),
    Rule("in_place.unrecognized", "the producer's non-elementwise op is neither a slice nor a "
         "dynamic-slice, so its reads of the in-place buffer cannot be checked"),
    # ----- multi-output fusibility (mof_fusible.py) ------------------------------------------
    Rule("mof_fusible.producer_multi_output", "the producer became a multi-output kernel; its "
         "outputs are read through get-tuple-element, and a multi-output fusion is never fused "
         "into a consumer again", advice="rng"),
    Rule("mof_fusible.in_place", "the producer updates a buffer in place"),
    Rule("mof_fusible.producer_not_loop_fusible", _NOT_LOOP_FUSIBLE),
    Rule("mof_fusible.transposing", "the producer transposes its data in memory"),
    Rule("mof_fusible.reduction_shapes", "the two kernels are reductions over different shapes "
         "or dimensions, which one reduction loop cannot produce"),
    Rule("mof_fusible.transpose_shapes", "the two kernels are tiled transposes of different "
         "shapes, which one tiled loop cannot produce"),
    Rule("mof_fusible.transpose_and_reduction", "one kernel is a tiled transpose and the other a "
         "reduction: their loops are tiled differently"),
    Rule("mof_fusible.untiled_transpose", "fusing would leave the tiled transpose without the "
         "tiled loop it needs"),
    Rule("mof_fusible.loop_shapes", "the two kernels iterate over different shapes, so they "
         "cannot share one loop", advice="loop-shape"),
    # ----- multi-output fusion (multi_output.py) ---------------------------------------------
    Rule("mof_skip_scalar_operands", "the shared operand is a scalar: reading it twice costs "
         "nothing, so sharing it is no reason to fuse", "switch", False),
    Rule("multi_output.no_users", "the kernel has no users"),
    Rule("multi_output.root", "the kernel cannot be the root of a multi-output fusion (a library "
         "op, control flow, or an op the emitters take only alone)", advice="rng"),
    Rule("multi_output.variadic_reduction", "a variadic reduction cannot be merged with "
         "another kernel"),
    Rule("multi_output.read_whole", "the kernel's tuple is read whole by some user, so it "
         "cannot take on another output", advice="rng"),
    Rule("multi_output.multiple_dus", "the in-place emitter handles one dynamic-update-slice "
         "root per kernel"),
    Rule("multi_output.connected", "the two kernels depend on each other through a third, so "
         "they cannot become siblings of one kernel"),
    Rule("multi_output.cycle", "another path between the two kernels would make the fused "
         "kernel depend on itself"),
    # ----- the performance model and the IR-size guard (perf_model.py) -------------------------
    Rule("mof_use_cost_model", _SLOWER, "switch", False),
    Rule("max_basic_block_splits", _HUGE_IR, "limit", figures=("splits",)),
    Rule("max_ir_size", _HUGE_IR, "limit", figures=("ir_size",)),
    # ----- the fusion merger (fusion_merger.py) ----------------------------------------------
    Rule("fusion_merger.no_users", "the fusion has no users to merge into"),
    Rule("fusion_merger.not_loop", "only single-output loop fusions are merged into their "
         "users"),
    Rule("fusion_merger.bitcast", "a user is a bitcast, which the merger leaves alone"),
    Rule("transposes_most_data", "most of the producer's data is transposed: merged into a "
         "reduction it would be read out of order"),
    Rule("merger_bytes_ratio", "merging would make every user re-read the producer's inputs: "
         "more bytes moved than it saves", "limit", figures=("ratio",)),
    Rule("merger_expensive_escape_ratio", _EXPENSIVE, "above", figures=("ratio",),
         fix="lets the merger duplicate expensive ops at this bytes ratio"),
    Rule("merger_version", _SLOWER, "switch", "2022", fix="uses the other fusion-merger rules"),
    # ----- horizontal loop fusion (horizontal.py) --------------------------------------------
    Rule("horizontal.control_deps", "the kernel has control dependencies"),
    Rule("horizontal.not_elementwise_or_loop", "only elementwise ops and loop fusions are "
         "fused horizontally"),
    Rule("horizontal.variadic_reduction", "a variadic reduction is not fused horizontally"),
    Rule("horizontal.element_types", "the kernel's outputs have several element types, which "
         "one concatenated output cannot hold"),
    Rule("horizontal.not_only_user", "the consumer is not the kernel's only non-root user, so "
         "fusing could create a cycle"),
    Rule("horizontal.shared_parameter", "the kernel reads a parameter another candidate reads "
         "too"),
    Rule("horizontal_max_elements", "the kernel is large enough that its launch cost does not "
         "matter", "limit", figures=("elements",)),
    Rule("horizontal_max_instructions", "the kernel has too many instructions to be fused "
         "horizontally", "limit", figures=("instructions",)),
    Rule("horizontal_require_row_major", "the kernel has a layout that is not row-major",
         "switch", False),
    # ----- beyond XLA: unroll-small-loops (small_loops.py) -----------------------------------
    Rule("small_loop.trip_count", _TRIPS_UNKNOWN),
    Rule("unroll_small_loops", "the loop runs more iterations than small loops are unrolled "
         "for", "limit", figures=("trips",)),
    Rule("small_loop.side_effect", _SIDE_EFFECT),
    Rule("small_loop.cost", "an op in the body never fuses, so the unrolled copies would launch "
         "as many kernels as the loop"),
    Rule("small_loop_max_instructions", "the unrolled copies would be too many instructions",
         "limit", figures=("instructions",)),
    Rule("unroll_budget", _BUDGET_UNROLL),
    # ----- beyond XLA: small-dot-fusion (small_dots.py) ----------------------------------------
    Rule("small_dot_k", "the dot contracts more elements than a small dot, fused into its "
         "consumers, may", "limit", figures=("contraction",)),
    Rule("small_dot.type", "a complex dot stays a library call"),
    Rule("small_dot.users", "a user of the dot is not a loop or input fusion, so its result "
         "is needed in memory"),
    Rule("small_dot.reuse", "a consumer reads the dot's elements at other positions than its "
         "own, so every read would compute them again"),
    # ----- beyond XLA: auto-unroll (auto_unroll.py) ------------------------------------------
    Rule("auto_unroll.trip_count", "the loop runs fewer than two iterations, or an unknown "
         "number"),
    Rule("auto_unroll.side_effect", _SIDE_EFFECT),
    Rule("auto_unroll.whole_loop", "whole-loop fusion takes the loop: one kernel runs every "
         "iteration"),
    Rule("max_unroll_instructions", "every unroll factor above 1 would copy the body past the "
         "instruction limit"),
    Rule("auto_unroll.gain", "the cost model predicts unrolling gains less than the minimum"),
    Rule("auto_unroll.cost_unknown", "the cost of a run is unknown (a nested loop's trip count "
         "is not known)"),
    # ----- beyond XLA: whole-loop fusion (loop_fusion.py, batch_axes.py) -----------------------
    Rule("whole_loop.trip_count", _TRIPS_UNKNOWN),
    Rule("whole_loop.leaf", "the loop's state is not a flat tuple of arrays with a batch "
         "dimension"),
    Rule("whole_loop.side_effect", _SIDE_EFFECT),
    Rule("whole_loop.uniform", "too much of the loop's state does not depend on the batch: "
         "every block would compute it again"),
    Rule("whole_loop.op", "an op in the loop mixes the batch's elements, so the elements cannot "
         "run independently"),
    Rule("whole_loop_min_trips", "the loop runs too few iterations to gain over its kernel "
         "calls"),
    Rule("whole_loop_max_uniform_elements", "too much of the loop's state does not depend on "
         "the batch: every block would compute it again", "limit", figures=("uniform",)),
    Rule("whole_loop.cost", "the cost model predicts one kernel is slower than the body's "
         "kernels, or cannot tell"),
    # ----- priority fusion (priority_fusion.py) -----------------------------------------------
    Rule("priority.producer_not_fusible", "the producer is not an op XLA GPU fuses"),
    Rule("priority.consumer_not_fusible", "the consumer is not an op XLA GPU fuses"),
    Rule("priority.bitcast_consumer", "nothing is fused into a lone bitcast"),
    Rule("priority.scatter", "a scatter's in-place operand is not fused into it"),
    Rule("priority.coalescing", "a tiled transpose is not fused into a consumer that would read "
         "its output uncoalesced"),
    Rule("priority.reduce_into_reduce", "both sides hold a significant reduce: the cost model "
         "cannot tile reduce-into-reduce"),
    Rule("priority.root", "the computation's root is not fused into a consumer"),
    Rule("priority.constant", "constants are not queued: small ones are fused at the end"),
    Rule("priority.no_users", "the producer has no users to fuse into"),
    Rule("priority.only_bitcast_users", "the producer's only users are bitcasts"),
    Rule("priority.not_profitable", "the performance model estimates fusing into all users "
         "slower than not fusing"),
    # ----- beyond XLA: hoist-loop-reductions (loop_reductions.py) ----------------------------
    Rule("hoist.row", "the carried array is not a scan output written one whole row per "
         "iteration at the counter"),
    Rule("hoist.cone", "the row is not computed from reductions through ops that can run for "
         "every iteration at once after the loop"),
    Rule("hoist.whole_loop", "with the reductions moved out the loop would still not be one "
         "kernel, so moving them gains nothing"),
    Rule("hoist_max_bytes", "the per-element rows the loop would write take more memory than "
         "the setting", "limit", figures=("bytes",)),
    # ----- beyond XLA: unstack-loop-state (unstack.py) ---------------------------------------
    Rule("unstack.writes", "the carried array is not written row by row"),
    Rule("unstack.reads", "the carried array is read other than one row at a time"),
    Rule("unstack_max_rows", "the carried array has more rows than are split into separate "
         "arrays", "limit", figures=("rows",)),
    Rule("unstack_max_row_rank", "each row is itself an array of rank above the setting: "
         "carried as rows it is processed block by block all the same", "limit",
         figures=("row_rank",)),
)

RULES: dict[str, Rule] = {r.code: r for r in _TABLE}


def rule(code: str) -> Rule | None:
    """The registry's entry for `code` (None for "" or a code it does not know)."""
    return RULES.get(code)


def setting_of(code: str) -> str:
    """The `FusionConfig` setting that relaxes the rule `code` ("" for a fixed rule)."""
    r = RULES.get(code)
    return r.setting if r is not None else ""
