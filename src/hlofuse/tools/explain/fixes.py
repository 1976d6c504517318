"""What would remove a fusion boundary: the setting that relaxes the refusing rule, or the
frontend rewrite that avoids it, plus a plain-language reading of each refusal.

All three are looked up by the refusal's rule code in the registry (`passes/fusion/rules.py`),
never read from the reason's text: a code's `reading`, its setting and how the setting is
relaxed (`relax`: a switch flips, a limit must reach the figure the rule compared, e.g.
`merger_bytes_ratio` the measured ratio, `max_code_duplication` the emitted count), and its
rewrite `advice`, which becomes a concrete rewrite from what the two kernels contain (a
concatenate/stack giving one kernel a different loop shape, a random-number loop among the
users). Nothing here claims a fix works: `analyse.py` can check a setting fix by re-running the
pipeline (`verify_fixes=True`) and records the measured effect.
"""

from __future__ import annotations

import math
from typing import Any

from hlofuse.passes.fusion.rules import rule
from hlofuse.tools.explain.model import Fix, Refusal

STACK_FIX = ("pass the state values separately instead of stacking them (the stack/concatenate "
             "gives {kernel} a {shape} loop while the other kernel loops over {other})")
RNG_FIX = ("draw the random numbers before the loop and pass them in as scan inputs (xs): "
           "the random-number generator is a loop of its own, never fused")
SHAPE_FIX = ("compute both values over the same shape ({a} vs {b}) so one loop can produce "
             "them: e.g. keep per-element values unstacked, or reshape at the end")


def reading(code: str) -> str:
    """The plain-language reading of the rule `code` ("" for a code the registry lacks)."""
    r = rule(code)
    return r.reading if r is not None else ""


def setting_fix(refusal: Refusal) -> Fix | None:
    """The setting (and value) that lets `refusal`'s rule pass, from its rule code and the
    figures the rule compared; None for a fixed rule."""
    r = rule(refusal.rule)
    if r is None or not r.setting:
        return None
    setting, figs = r.setting, refusal.figures
    if r.relax == "switch":
        text = (r.fix.format(value=r.value) if r.fix
                else f"switches off the rule behind \"{refusal.reason}\"")
        return Fix("setting", text, setting, r.value)
    if r.relax == "sum":
        need = sum(int(figs.get(f, 0)) for f in r.figures)
        return Fix("setting", r.fix.format(value=need), setting, need)
    if r.relax == "above":
        have = figs.get(r.figures[0])
        if not isinstance(have, (int, float)):
            return None
        value = math.floor(float(have) * 100 + 1) / 100
        return Fix("setting", r.fix.format(value=value), setting, value)
    if r.relax == "limit":
        figure = r.figures[0]
        have = figs.get(figure)
        if isinstance(have, (int, float)):
            limit: Any = (math.ceil(float(have) * 100) / 100 if isinstance(have, float)
                          else int(have))
            return Fix("setting", f"raises the limit to the measured {figure} ({have})",
                       setting, limit)
    return Fix("setting", f"relaxes the rule behind \"{refusal.reason}\"", setting, None)


def rewrite_fix(refusal: Refusal, context: dict[str, Any]) -> Fix | None:
    """A frontend rewrite for `refusal`, from its rule's advice and what the two kernels hold
    (`context` keys: stack_kernel, stack_shape, other_shape, producer_shape, consumer_shape,
    rng_user)."""
    r = rule(refusal.rule)
    advice = r.advice if r is not None else ""
    if advice == "loop-shape":
        if context.get("stack_kernel"):
            return Fix("rewrite", STACK_FIX.format(kernel=context["stack_kernel"],
                                                    shape=context["stack_shape"],
                                                    other=context["other_shape"]))
        return Fix("rewrite", SHAPE_FIX.format(a=context.get("producer_shape", "?"),
                                               b=context.get("consumer_shape", "?")))
    if advice == "rng" and context.get("rng_user"):
        return Fix("rewrite", RNG_FIX)
    return None
