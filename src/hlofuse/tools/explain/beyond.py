"""The "beyond XLA" part of `explain`: every transformation of the `hlofuse` pipeline that fired
or was refused, read from the fusion trace, and what they saved against `xla`.

    beyond XLA: 2 transformations fired, 0 refused
      unroll-small-loops  while.12 (cartpole.py:41): 5 iterations unrolled into straight-line
                          code; threefry2x32 rounds: the random bits are computed inside the
                          kernels that use them
      whole-loop-fusion   while.144 (cartpole.py:80): one kernel for 10000 iterations (was 4
                          kernels per iteration), batch of 2048 elements
    saved against `xla`: kernels per run 40001 -> 3, bytes moved per run 3.2 GiB -> 96.0 KiB

Only what the passes recorded is read (`TraceEvent` figures: trips, batch, kernels per
iteration, the loop's and the refusing instruction's source lines); the `xla` figures come from
explaining a copy of the input under `xla`.
"""

from __future__ import annotations

from typing import Any

from hlofuse.ir.module import Module
from hlofuse.passes.base import Pass, leaf_passes
from hlofuse.passes.fusion.pipelines import BEYOND_PASSES
from hlofuse.passes.fusion.trace import trace_of
from hlofuse.tools.explain.model import Transformation


def has_beyond_passes(p: Pass) -> bool:
    """Does pipeline `p` (nested pipelines and fixpoints included) run a beyond-XLA pass?"""
    return any(leaf.name in BEYOND_PASSES for leaf in leaf_passes(p))


def transformations(module: Module) -> list[Transformation]:
    """The beyond-XLA decisions of the trace, in the order they were taken."""
    out = []
    for e in trace_of(module):
        if e.pass_name not in BEYOND_PASSES:
            continue
        figures = dict(e.figures)
        source = str(figures.pop("source", ""))
        out.append(Transformation(e.pass_name, e.producer, e.verdict == "fused", e.reason,
                                  e.rule, figures, source, describe(e.pass_name,
                                                                    e.verdict == "fused",
                                                                    e.reason, e.rule, figures)))
    return out


def describe(pass_name: str, fired: bool, reason: str, rule: str, f: dict[str, Any]) -> str:
    """One sentence: what the transformation did and saved, or why it did not fire."""
    if not fired:
        text = f"not applied: {reason}"
        if rule:
            text += f" [rule {rule}]"
        if f.get("instruction_source"):
            text += f"; the instruction is at {f['instruction_source']}"
        return text
    if pass_name == "whole-loop-fusion":
        per = f.get("kernels_per_iteration")
        was = f" (was {per} kernels per iteration)" if per is not None else ""
        text = (f"one kernel for all {f.get('trips', '?')} iterations{was}, batch of "
                f"{f.get('batch', '?')} elements, time loop inside")
        if f.get("separate_ns") is not None and f.get("whole_ns") is not None:
            text += (f" (modelled {f['separate_ns'] / 1e3:.1f} -> {f['whole_ns'] / 1e3:.1f} us "
                     "per iteration)")
        return text
    if pass_name == "hoist-loop-reductions":
        return (f"{f.get('reduces', '?')} reduction(s) over the batch per iteration computed "
                f"after the loop from per-element rows ({_size(f.get('bytes', 0))}), so the "
                "loop can be one kernel")
    if pass_name == "unroll-small-loops":
        text = f"{f.get('trips', '?')} iterations unrolled into straight-line code"
        if f.get("rng"):
            text += ("; threefry2x32 rounds: the random bits are computed inside the kernels "
                     "that use them")
        return text
    if pass_name == "small-dot-fusion":
        return (f"a dot over {f.get('contraction', '?')} element(s) computed per element inside "
                f"its {f.get('consumers', '?')} consumer kernel(s): its result "
                f"({_size(f.get('saved_bytes', 0))} written and read back) no longer goes "
                "through memory, one GEMM kernel fewer")
    if pass_name == "unstack-loop-state":
        return (f"a stacked {f.get('shape', '?')} carried array becomes {f.get('rows', '?')} "
                f"carried arrays of {f.get('row_shape', '?')}")
    if pass_name == "auto-unroll":
        return (f"unrolled {f.get('factor', '?')}x (cost model: "
                f"{f.get('kernels_before', '?')} -> {f.get('kernels_after', '?')} kernels per "
                "original iteration)")
    return ", ".join(f"{k}={v}" for k, v in f.items())


def _size(n: object) -> str:
    b = float(n) if isinstance(n, int | float) else 0.0
    for unit in ("B", "KiB", "MiB"):
        if b < 1024 or unit == "MiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024
    return f"{b:.1f} GiB"
