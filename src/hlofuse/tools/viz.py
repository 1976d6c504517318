"""`hlofuse viz FILE -o out.html`: the computation graph before and after fusion, in one page.

    hlofuse viz cartpole.hlo -o cartpole.html          # before = pipeline none, after = xla
    hlofuse viz --example cartpole_baseline --pipeline xla-relaxed -o out.html

The page is one self-contained HTML file (the layout library, dagre, and the page's JS and CSS
are inlined from `viz_assets/`; it works offline from file://). It shows two panes, like Figure 3
of the study (paper.md): the module before fusion and after it. After fusion, each fusion is a
kernel, drawn as a cluster of the ops it fused (labelled with its name and kind) or, collapsed,
as one node; every producer->consumer edge that stayed between two kernels (a *boundary*) is
drawn in red, with the reasons the fusion trace recorded for it. While bodies, conditional
branches, calls and large fusions start collapsed and expand on click; clicking a node opens a
side panel with its ops, their source lines and, when the CPU backend can lower it, its C.

What this module computes (the page's JS only lays out and draws it):

* per computation, the nodes (one per instruction, with opcode, shape, source location, HLO
  text, fused ops for fusions) and which computations a node can expand into;
* the boundaries of the fused module: for each consumer that is a kernel or a control op
  (while/conditional/call), the producers it reads through memory, found by walking back
  through non-kernel ops (get-tuple-element, tuple, bitcast); each boundary lists the refused
  trace events of the edges on that path (pass, reason, rule code and setting, figures), latest
  first, or an explanation from the opcodes when the trace has none;
* the generated C per kernel, when `hlofuse.backends.cpu` is importable and lowers the kernel
  (best effort: any failure leaves the C out, it never fails the page).

Every string of the input (names, metadata, HLO text, C) reaches the page only inside the data
block, as `escape.html_json` (valid JSON with no `<`, `>`, `&` or U+2028/9, so no `</script>` or
`<!--` can end the block early); the page's JS shows it with `textContent` only. `render`
checks the finished page (`check_page`) and raises instead of returning a page that would not
render.

The boundaries come from `hlofuse.tools.explain` (its rule, plain reading, category and fixes)
when `viz()` runs the pipeline; `render()` of an already fused module without an explanation
falls back to `boundaries()` here, a simpler version (trace events matched by names).
"""

from __future__ import annotations

import argparse
import html
import itertools
import json
import re
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from hlofuse.analysis.kernels import count_kernels, is_kernel
from hlofuse.errors import HloError
from hlofuse.escape import html_json, terminal
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import CONTROL_FLOW_OPS, Opcode
from hlofuse.ir.shape import ArrayShape, format_shape
from hlofuse.passes.defaults import DEFAULT_PIPELINE
from hlofuse.passes.fusion.rules import setting_of
from hlofuse.passes.fusion.trace import TRACE_KEY, FusionTrace, TraceEvent

_CONTROL = CONTROL_FLOW_OPS
# Non-kernel ops a value passes through on its way from one kernel to another.
_PASS_THROUGH = frozenset({Opcode.GET_TUPLE_ELEMENT, Opcode.TUPLE, Opcode.BITCAST,
                           Opcode.OPTIMIZATION_BARRIER, Opcode.ADD_DEPENDENCY})
_MAX_HLO_CHARS = 400
_MAX_EVENTS_PER_NODE = 12
ASSETS = ("dagre.min.js", "viz.js", "viz.css", "template.html")


# ----- boundaries -----------------------------------------------------------------------------

@dataclass
class Boundary:
    """A producer->consumer edge between two kernels: the value goes through memory."""

    producer: str
    consumer: str
    computation: str
    path: list[str]  # producer, pass-through ops..., consumer
    reasons: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"from": self.producer, "to": self.consumer, "comp": self.computation,
                "path": self.path, "reasons": self.reasons, "category": "fusion"}


def _is_unit(instr: Instruction) -> bool:
    """A kernel or a control op: something whose inputs and outputs live in memory."""
    return is_kernel(instr) or instr.opcode in _CONTROL


def _event_json(e: TraceEvent) -> dict[str, Any]:
    return {"pass": e.pass_name, "verdict": e.verdict, "producer": e.producer,
            "consumer": e.consumer, "reason": e.reason, "rule": e.rule,
            "setting": setting_of(e.rule), "figures": {k: _plain(v) for k, v in e.figures.items()}}


def _plain(value: Any) -> Any:
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return str(value)


def _fallback_reason(producer: Instruction, consumer: Instruction) -> str:
    if producer.opcode in _CONTROL:
        return (f"the producer is a {producer.opcode.value}: its result is written to memory "
                "before anything reads it")
    if consumer.opcode in _CONTROL:
        return (f"the consumer is a {consumer.opcode.value}: its operands are materialized in "
                "memory (the loop-carried tuple)" if consumer.opcode is Opcode.WHILE else
                f"the consumer is a {consumer.opcode.value}: its operands are materialized")
    return "no fusion decision was recorded for this edge"


def boundaries(module: Module, trace: FusionTrace | None = None) -> list[Boundary]:
    """Every kernel->kernel edge of the non-fusion computations, with the trace's reasons."""
    if trace is None:
        found = module.annotations.get(TRACE_KEY)
        trace = found if isinstance(found, FusionTrace) else FusionTrace()
    by_pair: dict[tuple[str, str], list[TraceEvent]] = {}
    merger: dict[str, list[TraceEvent]] = {}
    for e in trace.events:
        if e.verdict != "refused":
            continue
        by_pair.setdefault((e.producer, e.consumer), []).append(e)
        if e.consumer in ("*", ""):
            merger.setdefault(e.producer, []).append(e)
    out: list[Boundary] = []
    for comp in module.computations:
        if comp.is_fusion_computation:
            continue
        for consumer in comp.instructions:
            if not _is_unit(consumer):
                continue
            seen: set[tuple[str, ...]] = set()
            for operand in consumer.operands:
                for path in _paths_back(operand):
                    key = tuple(i.name for i in path)
                    if key in seen:
                        continue
                    seen.add(key)
                    full = [*path, consumer]
                    out.append(_boundary(comp, full, by_pair, merger))
    return out


def _paths_back(start: Instruction, limit: int = 64) -> list[list[Instruction]]:
    """Paths producer, ..., start walking back from `start` through pass-through ops."""
    paths: list[list[Instruction]] = []
    stack: list[list[Instruction]] = [[start]]
    while stack and len(paths) < limit:
        path = stack.pop()
        head = path[0]
        if _is_unit(head):
            paths.append(path)
        elif head.opcode in _PASS_THROUGH and len(path) < 16:
            stack.extend([op, *path] for op in head.operands)
    return paths


def _boundary(comp: Computation, path: list[Instruction],
              by_pair: dict[tuple[str, str], list[TraceEvent]],
              merger: dict[str, list[TraceEvent]]) -> Boundary:
    producer, consumer = path[0], path[-1]
    pairs = [(producer.name, consumer.name)]
    pairs += [(a.name, b.name) for a, b in itertools.pairwise(path)]
    events: list[TraceEvent] = []
    for pair in pairs:
        events.extend(by_pair.get(pair, ()))
    events.extend(merger.get(producer.name, ()))
    reasons: list[dict[str, Any]] = []
    keys: set[tuple[str, str, str]] = set()
    for e in reversed(events):  # latest decision first
        key = (e.pass_name, e.reason, e.rule)
        if key not in keys:
            keys.add(key)
            reasons.append(_event_json(e))
    if not reasons or producer.opcode in _CONTROL or consumer.opcode in _CONTROL:
        # control flow is never fused: that is the reason, whatever the trace adds
        reasons.insert(0, {"pass": "", "verdict": "", "producer": producer.name,
                           "consumer": consumer.name, "rule": "", "setting": "", "figures": {},
                           "reason": _fallback_reason(producer, consumer)})
    return Boundary(producer.name, consumer.name, comp.name, [i.name for i in path], reasons)


def _refusal_json(r: Any) -> dict[str, Any]:
    return {"pass": r.pass_name, "verdict": "refused", "producer": r.producer,
            "consumer": r.consumer, "reason": r.reason, "rule": r.rule,
            "setting": r.setting, "figures": {k: _plain(v) for k, v in r.figures.items()}}


def explained_boundaries(explanation: Any) -> list[dict[str, Any]]:
    """The page's boundaries from an `hlofuse.tools.explain.Explanation`: each with its path
    of instructions in the fused module (to highlight the edges), its rule, plain reading and
    fixes. Loop-state boundaries end at the body's root tuple."""
    module: Module = explanation.fused_module
    out: list[dict[str, Any]] = []
    for section in explanation.sections:
        comp = module.computation(section.computation)
        by_name = {i.name: i for i in comp.instructions}
        for b in section.boundaries:
            path = _path_between(comp, by_name, b.producer, b.consumer)
            reasons, seen = [], set()
            for r in ([b.rule] if b.rule else []) + list(b.earlier):
                if (r.pass_name, r.reason, r.rule) not in seen:  # same rule, other names
                    seen.add((r.pass_name, r.reason, r.rule))
                    reasons.append(_refusal_json(r))
            if not reasons:
                reasons.append({"pass": "", "verdict": "", "producer": b.producer,
                                "consumer": b.consumer, "reason": b.why, "rule": "",
                                "setting": "", "figures": {}})
            out.append({
                "from": b.producer, "to": b.consumer, "comp": comp.name, "path": path,
                "category": b.category, "value": b.value, "bytes": b.bytes,
                "source": b.source, "consumer_source": b.consumer_source,
                "why": b.why if b.rule else "", "reasons": reasons,
                "fixes": [f.text + (f" ({f.verified})" if f.verified else "") for f in b.fixes],
            })
    return out


def _path_between(comp: Computation, by_name: dict[str, Instruction], producer: str,
                  consumer: str) -> list[str]:
    """Instruction names from `producer` to `consumer` through pass-through ops; a loop-state
    consumer ("iteration+1[k]") is the root tuple's operand k."""
    if consumer in by_name:
        starts = list(by_name[consumer].operands)
        end = consumer
    elif consumer.startswith("iteration+1[") and comp.has_root:
        k = int(consumer[len("iteration+1["):-1])
        root = comp.root
        starts = [root.operand(k)] if root.opcode is Opcode.TUPLE else [root]
        end = root.name if root.opcode is Opcode.TUPLE else ""
    else:
        return [producer, consumer]
    for start in starts:
        for path in _paths_back(start):
            if path[0].name == producer:
                names = [i.name for i in path]
                return [*names, end] if end else names
    return [producer, consumer]


# ----- graph data -----------------------------------------------------------------------------

def _short_shape(instr: Instruction) -> str:
    return format_shape(instr.shape, with_layout=False)


def _hlo_text(instr: Instruction) -> str:
    from hlofuse.text.printer import format_instruction

    shape = instr.shape
    if instr.opcode is Opcode.CONSTANT and isinstance(shape, ArrayShape) and shape.size > 16:
        text = f"{instr.name} = {format_shape(shape)} constant({{...{shape.size} elements}})"
    else:
        text = format_instruction(instr)
    return text if len(text) <= _MAX_HLO_CHARS else text[:_MAX_HLO_CHARS] + " ..."


def _source(module: Module, instr: Instruction) -> str:
    loc = module.source_location(instr)
    return str(loc) if loc is not None else ""


def _calls(instr: Instruction) -> dict[str, Any]:
    a = instr.attrs
    if instr.opcode is Opcode.WHILE:
        return {"body": a["body"].name, "condition": a["condition"].name}
    if instr.opcode is Opcode.CONDITIONAL:
        return {"branches": [b.name for b in instr.branches]}
    if instr.opcode is Opcode.CALL:
        return {"to_apply": a["to_apply"].name}
    if instr.opcode is Opcode.FUSION:
        return {"fused": instr.fused_computation.name}
    return {}


def _node(module: Module, instr: Instruction) -> dict[str, Any]:
    op = instr.opcode
    if op is Opcode.FUSION:
        cls = "fusion"
    elif op in _CONTROL:
        cls = "control"
    elif op is Opcode.PARAMETER:
        cls = "param"
    elif op is Opcode.CONSTANT:
        cls = "constant"
    elif is_kernel(instr):
        cls = "kernel"
    else:
        cls = "plain"
    node: dict[str, Any] = {
        "id": instr.name, "op": op.value, "shape": _short_shape(instr), "cls": cls,
        "in": [o.name for o in instr.operands], "src": _source(module, instr),
        "hlo": _hlo_text(instr),
    }
    if instr.metadata.op_name:
        node["op_name"] = str(instr.metadata.op_name)
    if op is Opcode.PARAMETER:
        node["param"] = instr.parameter_number
    if op is Opcode.CONSTANT:
        node["scalar"] = isinstance(instr.shape, ArrayShape) and instr.shape.rank == 0
    calls = _calls(instr)
    if calls:
        node["calls"] = calls
    if op is Opcode.FUSION:
        node["kind"] = instr.fusion_kind
        node["ops"] = [[i.name, i.opcode.value, _short_shape(i), _source(module, i)]
                       for i in instr.fused_computation.instructions
                       if i.opcode is not Opcode.PARAMETER]
    others = [c.name for c in instr.called_computations() if c.name not in _flat(calls)]
    if others:
        node["applies"] = others
    return node


def _flat(calls: dict[str, Any]) -> set[str]:
    out: set[str] = set()
    for v in calls.values():
        out.update(v if isinstance(v, list) else [v])
    return out


def _comp_kinds(module: Module) -> dict[str, str]:
    kinds = {module.entry.name: "entry"}
    for comp in module.computations:
        for instr in comp.instructions:
            for role, names in _calls(instr).items():
                for name in names if isinstance(names, list) else [names]:
                    kinds.setdefault(name, role)
    return kinds


def graph_data(module: Module, *, label: str, kernel_sources: dict[str, str] | None = None,
               with_boundaries: bool = True,
               boundary_data: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The JSON the page draws for one module (one pane)."""
    kinds = _comp_kinds(module)
    comps: dict[str, Any] = {}
    for comp in module.computations:
        nodes = [_node(module, i) for i in comp.instructions]
        comps[comp.name] = {"name": comp.name, "kind": kinds.get(comp.name, "applied"),
                            "root": comp.root.name if comp.has_root else None,
                            "nodes": nodes}
    sources = kernel_sources or {}
    for comp in comps.values():
        for node in comp["nodes"]:
            if node["id"] in sources:
                node["c"] = sources[node["id"]]
    report = count_kernels(module)
    data: dict[str, Any] = {
        "label": label, "entry": module.entry.name, "comps": comps,
        "kernels": {"entry": report.entry, "loops": report.loops,
                    "branches": report.branches},
        "instructions": sum(len(c.instructions) for c in module.computations),
        "boundaries": [], "events": {},
    }
    trace = module.annotations.get(TRACE_KEY)
    if boundary_data is not None:
        data["boundaries"] = boundary_data
    elif with_boundaries:
        data["boundaries"] = [b.to_json() for b in boundaries(
            module, trace if isinstance(trace, FusionTrace) else None)]
    if isinstance(trace, FusionTrace):
        names = {n["id"] for c in comps.values() for n in c["nodes"]}
        events: dict[str, list[dict[str, Any]]] = {}
        for e in reversed(trace.events):
            for name in {e.producer, e.consumer} & names:
                bucket = events.setdefault(name, [])
                if len(bucket) < _MAX_EVENTS_PER_NODE:
                    bucket.append(_event_json(e))
        data["events"] = events
    return data


# ----- generated C (optional) -----------------------------------------------------------------

def generated_c(module: Module) -> dict[str, str]:
    """Kernel instruction name -> C source from the cpu backend, or {} when the backend is not
    available here or cannot compile the module (its error says why; the page only leaves the
    sources out)."""
    from hlofuse.backends import registry

    backend = registry.get("cpu")
    if not backend.available():
        return {}
    from hlofuse.backends.cpu import driver

    try:
        program = driver.generate(module.clone())
    except HloError:
        return {}
    return {k.instruction: k.source for k in program.kernels}


# ----- the page -------------------------------------------------------------------------------

def _asset(name: str) -> str:
    return (resources.files("hlofuse.tools") / "viz_assets" / name).read_text(encoding="utf-8")


_MARKER = re.compile(r"/\*(TITLE|CSS|DAGRE|VIZ|DATA)\*/")
_DATA_SCRIPT = re.compile(r'<script type="application/json" id="viz-data">(.*?)</script>', re.S)


def check_page(page: str) -> None:
    """Raise `HloError` unless the page's embedded data is one valid JSON document that the
    HTML parser cannot end early (no `<`, so no `</script>` or `<!--` inside it)."""
    found = _DATA_SCRIPT.findall(page)
    if len(found) != 1:
        raise HloError(f"viz built a page with {len(found)} data blocks instead of 1: it "
                       "cannot render")
    text = found[0]
    if "<" in text:
        raise HloError("viz built a page whose data contains '<': it cannot render")
    try:
        json.loads(text)
    except ValueError as exc:
        raise HloError(f"viz built a page whose data is not valid JSON ({exc}): it cannot "
                       "render") from None


def render(module_before: Module, module_after: Module, *, title: str,
           kernel_sources: dict[str, str] | None = None,
           labels: tuple[str, str] = ("Before fusion", "After fusion"),
           explanation: Any = None, notes: list[str] | None = None) -> str:
    """The HTML page for the two modules (not modified); `kernel_sources` maps a kernel's
    instruction name in `module_after` to its C. With `explanation` (an
    `hlofuse.tools.explain.Explanation` whose `fused_module` is `module_after`) the
    boundaries are explain's; without, the simple ones of `boundaries()`."""
    bdata = explained_boundaries(explanation) if explanation is not None else None
    data = {
        "title": title,
        "notes": list(notes or []) + list(getattr(explanation, "notes", []) or []),
        "views": {
            "before": graph_data(module_before, label=labels[0], with_boundaries=False),
            "after": graph_data(module_after, label=labels[1], kernel_sources=kernel_sources,
                                boundary_data=bdata),
        },
    }
    replacements = {
        "TITLE": html.escape(terminal(title)),
        "CSS": _asset("viz.css"),
        "DAGRE": _asset("dagre.min.js").replace("//# sourceMappingURL=dagre.min.js.map", ""),
        "VIZ": _asset("viz.js"),
        "DATA": html_json(data),
    }
    # One pass over the template: inserted text is never searched for markers again.
    page = _MARKER.sub(lambda m: replacements[m.group(1)], _asset("template.html"))
    check_page(page)
    return page


def viz(module_or_text: Module | str, pipeline: str = DEFAULT_PIPELINE, *, title: str | None = None,
        with_c: bool = True) -> str:
    """Render `module_or_text` (a Module, not modified, or HLO text) before fusion (pipeline
    `none`: simplification only) and after `pipeline`."""
    from hlofuse.api import optimise

    if isinstance(module_or_text, str):
        from hlofuse.text import parse

        module = parse(module_or_text)
    else:
        module = module_or_text
    before = module.clone()
    optimise(before, "none")
    from hlofuse.tools.explain.analyse import analyse
    from hlofuse.tools.explain.model import Explanation

    explanation: Explanation | None = None
    notes: list[str] = []
    try:
        explanation = analyse(module.clone(), pipeline)
    except HloError:
        raise
    except Exception as e:  # explain is optional: keep the page, say what is missing
        notes.append(f"hlofuse explain failed ({type(e).__name__}: {e}); boundaries "
                     "shown with the fusion trace's reasons only")
    if explanation is not None:
        after = explanation.fused_module
    else:
        after, _ = optimise(module.clone(), pipeline)
    sources = generated_c(after) if with_c else {}
    return render(before, after, title=title or f"{module.name} ({pipeline})",
                  kernel_sources=sources, explanation=explanation, notes=notes,
                  labels=("Before fusion (pipeline none)", f"After fusion (pipeline {pipeline})"))


# ----- command line ---------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", help="HLO text file (or use --example)")
    parser.add_argument("--example", metavar="NAME",
                        help="a built-in example module (see hlofuse.examples)")
    parser.add_argument("-o", "--output", metavar="OUT.html",
                        help="where to write the page (default: the input's name with .html)")
    parser.add_argument("--pipeline", default=DEFAULT_PIPELINE,
                        help=f"the fusion pipeline for the 'after' pane (default: "
                             f"{DEFAULT_PIPELINE}, what compile runs)")
    parser.add_argument("--title", help="the page title (default: module and pipeline)")
    parser.add_argument("--no-c", action="store_true",
                        help="do not generate C for the kernels (faster)")


def main(args: argparse.Namespace) -> int:
    from hlofuse.text import parse

    if bool(args.file) == bool(args.example):
        print("hlofuse viz: give exactly one of FILE or --example NAME", file=sys.stderr)
        return 2
    try:
        if args.example:
            from hlofuse import examples

            text = examples.text(args.example)
            source_name, stem = str(examples.path(args.example)), args.example
        else:
            path = Path(args.file)
            if not path.is_file():
                print(terminal(f"hlofuse viz: {args.file}: no such file"), file=sys.stderr)
                return 1
            text, source_name, stem = path.read_text(), str(path), path.stem
        module = parse(text, source_name=source_name)
        page = viz(module, args.pipeline, title=args.title, with_c=not args.no_c)
    except KeyError as e:
        print(terminal(f"hlofuse viz: {e.args[0]}"), file=sys.stderr)
        return 1
    except HloError as e:
        print(terminal(f"hlofuse viz: {e}"), file=sys.stderr)
        return 1
    out = Path(args.output or f"{stem}.html")
    out.write_text(page, encoding="utf-8")
    print(terminal(f"wrote {out} ({len(page) // 1024} KiB): open it in a browser"))
    return 0
