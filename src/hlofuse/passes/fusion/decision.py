"""`FusionDecision`: "yes", or "no" with a reason (XLA's FusionDecision, instruction_fusion.h).

Every legality or profitability check in hlofuse's fusion passes returns one of these, never a
bare bool, so a refusal can always be explained::

    FusionDecision.ok()                                   -> fusible
    FusionDecision.no("not fusing constant", "gpu_fusible.constant")  -> not fusible: reason, code
    a.and_(b)     first failure wins        (XLA And)
    a.or_(b)      fusible if either is; both reasons joined with " ; "   (XLA Or)
    all_(f1, f2, ...)  run checks lazily; first failure wins (XLA All, RETURN_IF_NOT_FUSIBLE)

Besides the reason (English, for people) every refusal carries `rule`, its code in
`rules.RULES`: the `FusionConfig` setting that decided it (so `explain` can say which setting
relaxes it), or a dotted fixed rule such as `mof_fusible.loop_shapes`; tools read the code, never
the reason (tests/test_fusion_rules.py checks every refusal names a registered code). A refusal
may also carry `figures` (the numbers the rule compared, e.g. bytes before/after for the fusion
merger).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class FusionDecision:
    """`reason is None` means "can fuse". Truthiness is "can fuse"."""

    reason: str | None = None
    rule: str = ""
    figures: Mapping[str, Any] = field(default_factory=dict)

    @staticmethod
    def ok(**figures: Any) -> FusionDecision:
        # (decisions are immutable and nothing edits their figures: one "yes" without figures
        # serves every check, which the passes ask for on every edge)
        return FusionDecision(None, "", dict(figures)) if figures else OK

    @staticmethod
    def no(reason: str, rule: str = "", **figures: Any) -> FusionDecision:
        if figures:
            return FusionDecision(reason, rule, dict(figures))
        # (a refusal without figures is asked for on most edges of every pass run: one
        # immutable object per reason and rule, instead of a frozen dataclass built each time)
        key = (reason, rule)
        made = _REFUSALS.get(key)
        if made is None:
            if len(_REFUSALS) >= _MAX_REFUSALS:  # (reasons that quote names are many)
                _REFUSALS.clear()
            made = _REFUSALS[key] = FusionDecision(reason, rule, {})
        return made

    @staticmethod
    def check(condition: bool, reason: str, rule: str = "", **figures: Any) -> FusionDecision:
        """Positive iff `condition` (XLA's `FusionDecision(bool, explanation)`)."""
        return FusionDecision.ok(**figures) if condition else FusionDecision.no(
            reason, rule, **figures)

    @property
    def can_fuse(self) -> bool:
        return self.reason is None

    def __bool__(self) -> bool:
        return self.reason is None

    def and_(self, other: FusionDecision | Callable[[], FusionDecision]) -> FusionDecision:
        if not self:
            return self
        return other() if callable(other) else other

    def or_(self, other: FusionDecision | Callable[[], FusionDecision]) -> FusionDecision:
        if self:
            return self
        other_d = other() if callable(other) else other
        if other_d:
            return other_d
        rule = self.rule or other_d.rule
        return FusionDecision(f"{self.reason} ; {other_d.reason}", rule,
                              {**self.figures, **other_d.figures})

    def with_figures(self, **figures: Any) -> FusionDecision:
        return FusionDecision(self.reason, self.rule, {**self.figures, **figures})

    def __str__(self) -> str:
        return "fusible" if self.reason is None else self.reason


def all_(*checks: Callable[[], FusionDecision] | FusionDecision) -> FusionDecision:
    """Run `checks` in order; return the first negative decision, else a positive one."""
    for check in checks:
        d = check() if callable(check) else check
        if not d:
            return d
    return FusionDecision.ok()


OK = FusionDecision(None, "", {})
_REFUSALS: dict[tuple[str, str], FusionDecision] = {}
_MAX_REFUSALS = 4096
