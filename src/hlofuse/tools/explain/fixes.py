"""What would remove a fusion boundary: the setting that relaxes the refusing rule, or the
frontend rewrite that avoids it, plus a plain-language reading of each reason.

Settings come from the refusal's `rule` (a `FusionConfig` field) and the figures the rule
compared: `merger_bytes_ratio` must reach the measured ratio, `max_code_duplication` the
emitted count, a switch flips. Rewrites come from a table keyed by the refusal's reason and by
what the two kernels contain (a concatenate/stack giving one kernel a different loop shape, a
random-number loop among the users). Nothing here claims a fix works: `analyse.py` can check a
setting fix by re-running the pipeline (`verify_fixes=True`) and records the measured effect.
"""

from __future__ import annotations

import math
from typing import Any

from hlofuse.tools.explain.model import Fix, Refusal

STACK_FIX = ("pass the state values separately instead of stacking them (the stack/concatenate "
             "gives {kernel} a {shape} loop while the other kernel loops over {other})")
RNG_FIX = ("draw the random numbers before the loop and pass them in as scan inputs (xs): "
           "the random-number generator is a loop of its own, never fused")
SHAPE_FIX = ("compute both values over the same shape ({a} vs {b}) so one loop can produce "
             "them: e.g. keep per-element values unstacked, or reshape at the end")

# reason substring -> plain-language reading
READINGS: list[tuple[str, str]] = [
    ("different loop shapes", "the two kernels iterate over different shapes, so they cannot "
     "share one loop"),
    ("fusion pass cannot duplicate", "the producer has several users and this instruction-fusion "
     "pass does not duplicate producers"),
    ("operand can not be duplicated", "the producer has several users and cannot be fused into "
     "all of them (one path ends at a non-fusible user), so it is not duplicated"),
    ("the producer is a fusion", "instruction fusion does not fuse a fusion producer; the merger "
     "and multi-output fusion decide those"),
    ("Producer is a multi-output fusion", "the producer became a multi-output kernel; its outputs "
     "are read through get-tuple-element, and a multi-output fusion is never fused into a "
     "consumer again"),
    ("the producer is not fusible as it is a multi-output fusion", "the producer is a "
     "multi-output kernel, which is never fused into a consumer"),
    ("the consumer is not input-fusible and not loop-fusible", "the consumer (or, for the "
     "fusion merger, one of the producer's users: it merges into all users or none) cannot take "
     "a fused producer: a library op such as dot, a while loop, a tuple"),
    ("merged-to-current-bytes-ratio", "merging would make every user re-read the producer's "
     "inputs: more bytes moved than it saves"),
    ("are connected", "the two kernels depend on each other through a third, so they cannot "
     "become siblings of one kernel"),
    ("would introduce a cycle", "another path between the two kernels would make the fused "
     "kernel depend on itself"),
    ("will execute slower if fused", "the performance model predicts the fused kernel is slower"),
    ("overly large code duplication", "fusing would duplicate too much code (the producer would "
     "be recomputed for every use)"),
    ("expensive", "the producer is expensive and would be recomputed in each user"),
    ("not fusing into the output of the root", "the producer is the computation's result"),
    ("budget", "the fused kernel would exceed a resource budget"),
    ("not loop-fusible", "the producer (a library op such as dot, or a multi-output kernel) "
     "cannot be emitted inside a loop fusion"),
]

# settings whose refusal goes away when the switch is flipped
SWITCHES: dict[str, Any] = {
    "may_duplicate": True,
    "allow_multi_user_concatenate": True,
    "relax_code_duplication": True,
    "mof_use_cost_model": False,
    "mof_skip_scalar_operands": False,
    "horizontal_require_row_major": False,
}
# setting -> figure that must fit under it
LIMITS: dict[str, str] = {
    "merger_bytes_ratio": "ratio",
    "max_code_duplication": "emitted",
    "max_operands_and_outputs": "",
    "shared_memory_budget": "shared_memory_bytes",
    "max_unnested_reductions": "unnested_reductions",
    "max_ir_size": "ir_size",
    "max_basic_block_splits": "splits",
    "horizontal_max_elements": "elements",
    "horizontal_max_instructions": "instructions",
}


def reading(reason: str) -> str:
    for key, text in READINGS:
        if key in reason:
            return text
    return ""


def setting_fix(refusal: Refusal) -> Fix | None:
    """The setting (and value) that lets `refusal`'s rule pass, from its rule and figures."""
    rule, figs = refusal.setting, refusal.figures
    if not rule:
        return None
    if rule in SWITCHES:
        value = SWITCHES[rule]
        return Fix("setting", f"switches off the rule behind \"{refusal.reason}\"", rule, value)
    if rule == "max_operands_and_outputs":
        need = int(figs.get("operands", 0)) + int(figs.get("outputs", 0))
        return Fix("setting", f"allows {need} operands and outputs per fusion", rule, need)
    if rule == "merger_expensive_escape_ratio":
        ratio = figs.get("ratio")
        if isinstance(ratio, (int, float)):
            value = math.floor(float(ratio) * 100 + 1) / 100
            return Fix("setting", "lets the merger duplicate expensive ops at this bytes ratio",
                       rule, value)
        return None
    figure = LIMITS.get(rule)
    if figure:
        have = figs.get(figure)
        if isinstance(have, (int, float)):
            value: Any = (math.ceil(float(have) * 100) / 100 if isinstance(have, float)
                          else int(have))
            return Fix("setting", f"raises the limit to the measured {figure} ({have})", rule,
                       value)
    if rule == "merger_version":
        return Fix("setting", "uses the other fusion-merger rules", rule, "2022")
    return Fix("setting", f"relaxes the rule behind \"{refusal.reason}\"", rule, None)


def rewrite_fix(refusal: Refusal, context: dict[str, Any]) -> Fix | None:
    """A frontend rewrite for `refusal`, given what the two kernels hold (`context` keys:
    stack_kernel, stack_shape, other_shape, producer_shape, consumer_shape, rng_user)."""
    reason = refusal.reason
    if "different loop shapes" in reason:
        if context.get("stack_kernel"):
            return Fix("rewrite", STACK_FIX.format(kernel=context["stack_kernel"],
                                                    shape=context["stack_shape"],
                                                    other=context["other_shape"]))
        return Fix("rewrite", SHAPE_FIX.format(a=context.get("producer_shape", "?"),
                                               b=context.get("consumer_shape", "?")))
    if context.get("rng_user") and ("not input-fusible" in reason or "duplicate" in reason
                                    or "multi-output" in reason):
        return Fix("rewrite", RNG_FIX)
    return None
