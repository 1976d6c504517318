"""The paper's CartPole under a fusion pipeline: kernels per loop iteration and why each kernel
boundary inside the loop body exists.

    python scripts/cartpole_fusion_report.py [--pipeline xla] [--variants baseline,precomputed]

Reads the shipped HLO (`hlofuse.examples`, no jax needed), runs the pipeline, then for the time
loop (the outermost while) prints:

* kernels per iteration: the body's own kernels, the condition's, and kernels of nested loops
  (the threefry RNG rounds of the baseline) times their trip counts;
* a row per kernel (fusion kind, root, a few of the ops inside);
* a row per producer -> consumer edge between two kernels of the body, with the reason each
  fusion strategy gives for not fusing across it: the last decision the fusion trace recorded
  for exactly that edge (the final fixpoint iteration sees the final names), else the rule asked
  again on the final graph (marked "(re-asked)").

Values that leave the body through its root tuple are loop-carried state: they must be written
to memory at the end of each iteration whatever the fusion rules say ("loop state").
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field

from hlofuse import examples
from hlofuse.analysis.kernels import is_kernel
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.base import Context
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.fusion_merger import should_merge
from hlofuse.passes.fusion.graph import ReachabilityMap
from hlofuse.passes.fusion.instruction_fusion import should_fuse
from hlofuse.passes.fusion.multi_output import (
    producer_consumer_legal,
    producer_consumer_profitable,
)
from hlofuse.passes.fusion.pipelines import RELAXATIONS
from hlofuse.passes.fusion.trace import TraceEvent, trace_of
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.passes.simplify.while_loops import trip_count
from hlofuse.text import parse
from hlofuse.tools.explain.origins import NameHistory, origins, tag_origins

VARIANTS = ("baseline", "precomputed", "separate", "unrolled")
_HIDDEN = {Opcode.PARAMETER, Opcode.CONSTANT, Opcode.BROADCAST, Opcode.TUPLE,
           Opcode.GET_TUPLE_ELEMENT}




@dataclass
class Edge:
    producer: Instruction
    consumer: Instruction
    reasons: dict[str, str] = field(default_factory=dict)
    history: list[str] = field(default_factory=list)


def edge_history(module: Module, comp: Computation, edge: Edge, names: NameHistory
                 ) -> list[str]:
    """Refusals recorded while the pipeline ran whose producer is (part of) the producer
    kernel and whose consumer is (part of) the consumer kernel."""
    only_producer = origins(edge.producer) - origins(edge.consumer)
    consumer_side = origins(edge.consumer)
    out: list[str] = []
    for index, e in enumerate(trace_of(module)):
        if e.verdict != "refused" or e.computation != comp.name:
            continue
        if not names.resolve(index, e.producer) & only_producer:
            continue
        consumers: set[str] = set()
        for c in e.consumer.split(","):
            consumers |= names.resolve(index, c)
        if not consumers & consumer_side:
            continue
        line = f"{e.pass_name}: {e.reason}" + (f" [setting: {e.rule}]" if e.rule else "")
        if line not in out:
            out.append(line)
    return out


@dataclass
class LoopReport:
    variant: str
    loop: str
    body_kernels: list[Instruction]
    condition_kernels: int
    nested: list[tuple[str, int, int | None]]  # (while name, kernels per iteration, trips)
    edges: list[Edge]
    loop_state: list[str]

    @property
    def per_iteration(self) -> int | None:
        total = len(self.body_kernels) + self.condition_kernels
        for _name, kernels, trips in self.nested:
            if trips is None:
                return None
            total += kernels * trips
        return total


def kernels_of(comp: Computation) -> list[Instruction]:
    return [i for i in comp.instructions if is_kernel(i)]


def _kernels_with_nested(comp: Computation) -> tuple[int, list[tuple[str, int, int | None]]]:
    nested: list[tuple[str, int, int | None]] = []
    for w in (i for i in comp.instructions if i.opcode is Opcode.WHILE):
        body, cond = w.attrs["body"], w.attrs["condition"]
        inner = len(kernels_of(body)) + len(kernels_of(cond))
        _sub, subnested = _kernels_with_nested(body)
        nested.append((w.name, inner, trip_count(w)))
        nested.extend(subnested)
    return len(kernels_of(comp)), nested


_OPAQUE = (Opcode.WHILE, Opcode.CONDITIONAL, Opcode.CALL, Opcode.CUSTOM_CALL)


def producer_kernel(value: Instruction) -> Instruction | None:
    """The kernel (or control-flow op) that computes `value`, looking through
    get-tuple-element and bitcast."""
    while value.opcode in (Opcode.GET_TUPLE_ELEMENT, Opcode.BITCAST):
        value = value.operand(0)
    return value if is_kernel(value) or value.opcode in _OPAQUE else None


def describe(k: Instruction) -> str:
    if k.opcode is not Opcode.FUSION:
        return f"{k.opcode.value} {k.shape}"
    ops = Counter(i.opcode.value for i in k.fused_computation.instructions
                  if i.opcode not in _HIDDEN)
    top = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in ops.most_common(6))
    outs = (k.fused_computation.root.operand_count
            if k.fused_computation.root.opcode is Opcode.TUPLE else 1)
    return (f"fusion {k.fusion_kind}, {outs} output(s), root "
            f"{k.fused_computation.root.opcode.value}: {top}")


def _last(events: list[TraceEvent], pass_name: str, pred: object) -> TraceEvent | None:
    test = pred
    found = [e for e in events if e.pass_name == pass_name and test(e)]  # type: ignore[operator]
    return found[-1] if found else None


def edge_reasons(module: Module, comp: Computation, edge: Edge, operand: Instruction,
                 config: FusionConfig) -> dict[str, str]:
    """Why each strategy did not fuse across `edge` (trace first, the rule re-asked second)."""
    events = [e for e in trace_of(module) if e.computation == comp.name]
    p, c = edge.producer, edge.consumer
    out: dict[str, str] = {}
    for end in (p, c):
        if end.opcode in _OPAQUE:
            return {"all strategies": f"{end.name} is a {end.opcode.value}: control flow and "
                    "custom calls are never fusible (a kernel boundary by construction)"}
    if operand.opcode is Opcode.GET_TUPLE_ELEMENT and p.opcode is Opcode.FUSION:
        out["note"] = (f"{c.name} reads output {operand.attrs.get('index')} of multi-output "
                       f"fusion {p.name} through a get-tuple-element")
    e = _last(events, "instruction-fusion",
              lambda ev: ev.consumer == c.name and ev.producer in (p.name, operand.name))
    if e is not None and e.verdict == "refused":
        out["instruction-fusion"] = e.reason
    else:
        d = should_fuse(c, c.operands.index(operand), config)
        out["instruction-fusion"] = (d.reason or "fusible") + " (re-asked)"
    e = _last(events, "fusion-merger", lambda ev: ev.producer == p.name)
    if e is not None and e.verdict == "refused":
        out["fusion-merger"] = e.reason
    elif p.opcode is Opcode.FUSION:
        d = should_merge(p, config)
        out["fusion-merger"] = (d.reason or "fusible") + " (re-asked)"
    else:
        out["fusion-merger"] = "not a fusion"
    e = _last(events, "multi-output-fusion",
              lambda ev: (ev.producer, ev.consumer) == (p.name, c.name)) or _last(
        events, "multi-output-fusion", lambda ev: {ev.producer, ev.consumer} == {p.name, c.name})
    if e is not None and e.verdict == "refused":
        out["multi-output-fusion"] = e.reason
    else:
        reach = ReachabilityMap(comp)
        d = producer_consumer_legal(p, c, reach, config).and_(
            lambda: producer_consumer_profitable(p, c, config))
        out["multi-output-fusion"] = (d.reason or "fusible") + " (re-asked)"
    return out


def analyse(variant: str, pipeline: str) -> LoopReport:
    module = parse(examples.text(f"cartpole_{variant}"))
    tag_origins(module)
    names = NameHistory()
    run_pipeline(module, pipeline, context=Context(observers=[names]))
    config = FusionConfig(**(RELAXATIONS if pipeline == "xla-relaxed" else {}))
    loop = next(i for i in module.entry.instructions if i.opcode is Opcode.WHILE)
    body: Computation = loop.attrs["body"]
    cond: Computation = loop.attrs["condition"]
    _n, nested = _kernels_with_nested(body)
    kernels = kernels_of(body)
    edges: list[Edge] = []
    nodes = kernels + [i for i in body.instructions if i.opcode in _OPAQUE]
    for k in nodes:
        seen: set[int] = set()
        operands = list(k.operands)
        if k.opcode is Opcode.WHILE and operands[0].opcode is Opcode.TUPLE:
            operands = list(operands[0].operands)  # the loop's init tuple
        for operand in operands:
            pk = producer_kernel(operand)
            if pk is None or pk is k or id(pk) in seen:
                continue
            seen.add(id(pk))
            edge = Edge(pk, k)
            edge.reasons = edge_reasons(module, body, edge, operand, config)
            if "all strategies" not in edge.reasons:
                edge.history = edge_history(module, body, edge, names)
            edges.append(edge)
    state = []
    root = body.root
    for i, value in enumerate(root.operands):
        pk = producer_kernel(value)
        if pk is not None:
            state.append(f"tuple element {i} <- {pk.name}")
    return LoopReport(variant, loop.name, kernels, len(kernels_of(cond)), nested, edges, state)


def render(report: LoopReport) -> str:
    lines = [f"## {report.variant}: time loop {report.loop}"]
    nested = "".join(f" + {name}: {k} x {trips if trips is not None else '?'} trips"
                     for name, k, trips in report.nested)
    lines.append(f"kernels per iteration: {report.per_iteration} = body "
                 f"{len(report.body_kernels)} + condition {report.condition_kernels}{nested}")
    lines.append("kernels of the body:")
    for k in report.body_kernels:
        lines.append(f"  {k.name:<14} {describe(k)}")
    lines.append("kernel -> kernel edges inside the body, and why each strategy left them:")
    if not report.edges:
        lines.append("  (none: the body's kernels only meet through the loop state)")
    for e in report.edges:
        lines.append(f"  {e.producer.name} -> {e.consumer.name}")
        for strategy, reason in e.reasons.items():
            lines.append(f"      {strategy:<20} {reason}")
        if e.history:
            lines.append("      refusals recorded while the pipeline ran, in order:")
            lines.extend(f"        - {h}" for h in e.history)
    lines.append("loop state written each iteration (a boundary by construction):")
    lines.extend(f"  {s}" for s in report.loop_state)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipeline", default="xla", help="pipeline for the detailed report")
    ap.add_argument("--variants", default="baseline,precomputed,separate")
    ap.add_argument("--compare", default="none,xla,xla-relaxed",
                    help="pipelines for the summary table (all four variants)")
    args = ap.parse_args(argv)
    for v in args.variants.split(","):
        if v not in VARIANTS:
            print(f"unknown variant {v!r}; valid: {', '.join(VARIANTS)}", file=sys.stderr)
            return 2
        print(render(analyse(v, args.pipeline)))
        print()
    pipelines = [p for p in args.compare.split(",") if p]
    if not pipelines:
        return 0
    print("## kernels per time-loop iteration (body kernels in parentheses)")
    print(f"{'variant':<12}" + "".join(f"{p:>16}" for p in pipelines))
    for v in VARIANTS:
        cells = []
        for p in pipelines:
            r = analyse(v, p)
            per = r.per_iteration if r.per_iteration is not None else "?"
            cells.append(f"{per} ({len(r.body_kernels)})")
        print(f"{v:<12}" + "".join(f"{c:>16}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
