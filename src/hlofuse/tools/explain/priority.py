"""The priority-fusion part of `explain` (`--pipeline xla-priority`, or any pipeline that runs
`priority-fusion`): the queue's steps in the order it took them, each with the saving the
performance model estimated for it, and the producers it left unfused.

    priority fusion: 6 steps (best estimated saving first), 2 producers left unfused
      step  producer  into                    saving      unfused -> fused
         1  ex        d (fusion), sm (fusion.3)  0.981 us  2.911 -> 1.930 us
         ...
      left unfused (each edge's rule is under its boundary above):
        mx -> mb: Reductions from/to continuous dims epilogue not fusible [rule ...]

Only what the pass recorded is read (`TraceEvent`s of `priority-fusion`: step, saving_us,
unfused_us, fused_us, into); nothing is estimated again here.
"""

from __future__ import annotations

from hlofuse.ir.module import Module
from hlofuse.passes.fusion.priority_fusion import PASS
from hlofuse.passes.fusion.trace import TraceEvent, trace_of
from hlofuse.tools.explain.model import PriorityStep

# steps listed in the text (the JSON has all)
TEXT_STEPS = 40


def steps(module: Module) -> tuple[list[PriorityStep], list[TraceEvent]]:
    """The queue's steps (one per producer fused, its consumers gathered), in the order every
    run of `priority-fusion` took them (a fixpoint runs it again: its `run` counts them), and
    the edges it left unfused: each (producer, consumer) once, its last refusal, and none of a
    producer a later step fused (the step's `run` figure: which run over the computation)."""
    out: dict[tuple[str, int, int], PriorityStep] = {}
    refused: dict[tuple[str, str, str], TraceEvent] = {}
    for e in trace_of(module):
        if e.pass_name != PASS:
            continue
        if e.verdict != "fused":
            refused[(e.computation, e.producer, e.consumer)] = e
            continue
        for key in [k for k in refused if k[:2] == (e.computation, e.producer)]:
            del refused[key]
        f = e.figures
        number, run = int(f.get("step", 0)), int(f.get("run", 1))
        step = out.get((e.computation, run, number))
        if step is None:
            step = out[(e.computation, run, number)] = PriorityStep(
                number, e.producer, e.computation, [], _float(f.get("saving_us")),
                _float(f.get("unfused_us")), _float(f.get("fused_us")), run)
        step.consumers.append(f"{e.consumer} ({f.get('into', '?')})")
    return list(out.values()), list(refused.values())


def _float(x: object) -> float | None:
    if isinstance(x, int | float):
        return float(x)
    if x == "inf":
        return float("inf")
    return None


def lines(taken: list[PriorityStep], refused: list[TraceEvent]) -> list[str]:
    out = [f"priority fusion: {len(taken)} step(s) (best estimated saving first), "
           f"{len({(e.computation, e.producer) for e in refused})} producer(s) left unfused"]
    if taken:
        out.append("  step  producer -> into: estimated saving (unfused -> fused)")
    for s in taken[:TEXT_STEPS]:
        run = f" (run {s.run} of {s.computation})" if s.run > 1 else ""
        times = ""
        if s.unfused_us is not None and s.fused_us is not None:
            times = f" ({s.unfused_us:.3f} -> {s.fused_us:.3f} us)"
        out.append(f"  {s.step:>4}  {s.producer} -> {', '.join(s.consumers)}: "
                   f"{_us(s.saving_us)}{times}{run}")
    if len(taken) > TEXT_STEPS:
        out.append(f"  ... {len(taken) - TEXT_STEPS} more step(s) in --json")
    if refused:
        out.append("  left unfused:")
        for e in refused:
            edge = e.producer if e.consumer == e.producer else f"{e.producer} -> {e.consumer}"
            rule = f" [rule {e.rule}]" if e.rule else ""
            out.append(f"    {edge}: {e.reason}{rule}")
    return out


def _us(x: float | None) -> str:
    if x is None:
        return "?"
    return "always (a bitcast)" if x == float("inf") else f"{x:.3f} us"
