"""`hlofuse lint`: frontend patterns that cost kernels, with the source line, the fix and the
measured kernel cost.

    hlofuse lint FILE | --example NAME [--pipeline hlofuse] [--json]

Patterns are looked for on the module after `simplify` (unfused, so the ops are as the
frontend wrote them); the cost is measured on the same module after the pipeline (default:
the one `compile` runs, `DEFAULT_PIPELINE`; `--pipeline xla` for XLA's rules), run through
`api.optimise` as every compile is:

* `concatenate-multi-user`: a concatenate/stack whose result has several users. XLA refuses to
  duplicate it into its users (code-duplication rule, `allow_multi_user_concatenate`).
* `rng-in-loop`: random numbers drawn inside a while loop: an `rng`/`rng-bit-generator` op, a
  threefry custom call, or a threefry-shaped while loop (JAX's CPU lowering of `jax.random`)
  nested in the loop's body. A loop is never fused, so each draw costs its own kernels every
  iteration.
* `stacked-loop-state`: a loop-carried tuple element that the body rebuilds with a
  concatenate/stack every iteration and that the next iteration slices apart again: the
  state is copied into one array and out again, and the stacked shape differs from the
  per-element shape of everything else (multi-output fusion's "different loop shapes").
* `copy-in-loop`: `copy` instructions in a loop body (tuple-carried state that forces copies).
* `gather-as-slice`: a gather whose indices are an iota or a constant arithmetic progression.

The cost is what was measured, stated as such: the kernels (per run of the loop or the entry)
that hold the pattern's instructions or read their results under the pipeline ("2 of 74
kernels per iteration under xla"), for an RNG loop its kernels times its trip count plus the
kernels that only prepare its inputs. For the built-in CartPole variants the shipped rewrite
(`cartpole_precomputed`, `cartpole_separate`) is also run and its kernels per iteration
reported beside.

The text report quotes the input (names, source locations), so `to_text` returns it through
`escape.terminal`. Walks along user chains are iterative.
"""

from __future__ import annotations

import argparse
import functools
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from hlofuse.analysis.kernels import is_kernel, kernels_per_run
from hlofuse.analysis.loops import trip_count
from hlofuse.escape import terminal
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, format_shape
from hlofuse.passes.defaults import DEFAULT_PIPELINE
from hlofuse.tools.explain import load_input
from hlofuse.tools.explain.origins import (
    origin,
    origins,
    origins_inside,
    strip_origins,
    tag_origins,
)
from hlofuse.tools.explain.patterns import (
    CONTROL,
    inherit_call_site_locations,
    is_rng,
    is_rng_loop,
    value_location,
)

# module name -> pattern kind -> (variant without the pattern, variant with it, what changed)
REWRITES: dict[str, dict[str, tuple[str, str, str]]] = {
    "jit_cartpole_baseline": {
        "rng-in-loop": ("cartpole_baseline", "cartpole_precomputed",
                        "random numbers drawn before the loop"),
        "stacked-loop-state": ("cartpole_precomputed", "cartpole_separate",
                               "four separate state arrays"),
    },
    "jit_cartpole_precomputed": {
        "stacked-loop-state": ("cartpole_precomputed", "cartpole_separate",
                               "four separate state arrays"),
    },
}

FIXES = {
    "concatenate-multi-user": "give each user its own piece (pass the values separately, or "
                              "concatenate once at the very end) instead of one stacked array "
                              "read by several consumers",
    "rng-in-loop": "draw the random numbers before the loop and pass them in as scan inputs "
                   "(xs), or precompute them for all steps at once",
    "stacked-loop-state": "carry the state values as separate loop variables (a tuple of "
                          "arrays) instead of stacking them into one array every iteration",
    "copy-in-loop": "return loop-carried values unchanged or computed, not copied; avoid "
                    "aliasing one carried value into two tuple slots",
    "gather-as-slice": "use a slice (static start, stride) instead of indexing with "
                       "arange/constant indices: a slice fuses as index arithmetic",
}


@dataclass
class Finding:
    kind: str
    instruction: str
    location: str  # file:line, "" when the module carries no location for it
    message: str
    fix: str
    kernels: str  # the measured kernel cost, in words
    measured: dict[str, Any] = field(default_factory=dict)

    def to_text(self) -> str:
        """The finding as text for a terminal (`escape.terminal`: it quotes input text)."""
        where = self.location or "(no source location)"
        return terminal(f"{where}: {self.kind}: {self.message}\n    fix:  {self.fix}\n"
                        f"    cost: {self.kernels}")


@dataclass
class LintReport:
    module: str
    findings: list[Finding]

    def of_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def to_json(self) -> dict[str, Any]:
        return {"module": self.module, "findings": [asdict(f) for f in self.findings]}

    def to_text(self) -> str:
        """The report as text for a terminal (`escape.terminal`: it quotes input text)."""
        head = f"hlofuse lint: {self.module}: {len(self.findings)} finding(s)"
        return terminal("\n".join([head, *(f.to_text() for f in self.findings)]))


# ----- the fused module: where each original instruction ended up ---------------------------


def _inside_kernels(module: Module) -> set[str]:
    """Names of the computations that run inside a kernel: those a fusion computation's
    loops, branches and calls reach (whole-loop fusion)."""
    out: set[str] = set()
    stack = [c for c in module.computations if c.is_fusion_computation]
    while stack:
        comp = stack.pop()
        for instr in comp.instructions:
            if instr.opcode in CONTROL:
                for called in instr.called_computations():
                    if called.name not in out:
                        out.add(called.name)
                        stack.append(called)
    return out


class _Fused:
    """The fused copy: kernels holding each original instruction, per computation. What runs
    inside a kernel (a whole-loop kernel's loop: its body and condition) is that kernel's: its
    instructions are found in the kernel, not as kernels of their own."""

    def __init__(self, module: Module, pipeline: str) -> None:
        self.module = module
        self.pipeline = pipeline
        inside = _inside_kernels(module)
        self.loops: dict[str, Instruction] = {}  # body computation name -> while
        for comp in module.computations:
            if comp.name in inside:
                continue
            for instr in comp.instructions:
                if instr.opcode is Opcode.WHILE:
                    self.loops[instr.attrs["body"].name] = instr
        self.where: dict[str, tuple[Computation, list[Instruction]]] = {}
        for comp in module.computations:
            if comp.is_fusion_computation or comp.name in inside:
                continue
            for k in comp.instructions:
                if is_kernel(k) or k.opcode in CONTROL:
                    for o in origins(k):
                        entry = self.where.setdefault(o, (comp, []))
                        if is_kernel(k):
                            entry[1].append(k)

    def section(self, comp: Computation) -> tuple[str, int | None]:
        w = self.loops.get(comp.name)
        if w is not None:
            return (f"{w.name} body", kernels_per_run(comp, w.attrs["condition"]))
        if comp is self.module.entry:
            return ("entry", kernels_per_run(comp))
        return (comp.name, kernels_per_run(comp))

    def touching(self, names: set[str]) -> tuple[Computation | None, list[Instruction]]:
        """Kernels that hold one of `names` or read a kernel that does."""
        comp: Computation | None = None
        holders: list[Instruction] = []
        for n in names:
            if n in self.where:
                comp = self.where[n][0]
                holders.extend(k for k in self.where[n][1] if k not in holders)
        readers = [u for k in holders for u in _kernel_users(k) if u not in holders]
        return comp, holders + list(dict.fromkeys(readers))

    def cost(self, names: set[str]) -> tuple[str, dict[str, Any]]:
        comp, kernels = self.touching(names)
        if comp is None:
            return (f"under {self.pipeline} no kernel holds these instructions (folded, or "
                    "unrolled and fused away)",
                    {"kernels_touching": 0})
        title, total = self.section(comp)
        unit = "per iteration" if title.endswith(" body") else "per run"
        listed = ", ".join(k.name for k in kernels[:6]) + (", ..." if len(kernels) > 6 else "")
        return (f"{len(kernels)} of {total} kernels {unit} of {title} under {self.pipeline} "
                f"hold or read it ({listed})", {"section": title, "kernels_touching": len(kernels),
                                 "kernels_per_run": total,
                                 "kernel_names": [k.name for k in kernels]})


def _kernel_users(k: Instruction) -> list[Instruction]:
    """The kernels reading `k`, through get-tuple-element and bitcast chains (iterative: a
    chain may be long)."""
    out: list[Instruction] = []
    stack = list(reversed(k.users))
    seen: set[int] = set()
    while stack:
        u = stack.pop()
        if u.opcode in (Opcode.GET_TUPLE_ELEMENT, Opcode.BITCAST):
            if id(u) not in seen:
                seen.add(id(u))
                stack.extend(reversed(u.users))
        elif is_kernel(u):
            out.append(u)
    return out


# ----- detectors -------------------------------------------------------------------------------


def _users(instr: Instruction) -> list[Instruction]:
    """The users of `instr`, looking through bitcasts (iterative)."""
    out: list[Instruction] = []
    stack = list(reversed(instr.users))
    seen: set[int] = set()
    while stack:
        u = stack.pop()
        if u.opcode is Opcode.BITCAST:
            if id(u) not in seen:
                seen.add(id(u))
                stack.extend(reversed(u.users))
        elif u not in out:
            out.append(u)
    return out


def _body_computations(module: Module) -> list[tuple[Instruction, Computation]]:
    return [(i, i.attrs["body"]) for c in module.computations for i in c.instructions
            if i.opcode is Opcode.WHILE]


def _find_concatenates(m: Module, fused: _Fused) -> list[Finding]:
    out = []
    for comp in m.computations:
        if comp.is_fusion_computation:
            continue
        for instr in comp.instructions:
            users = _users(instr)
            if instr.opcode is not Opcode.CONCATENATE or len(users) < 2:
                continue
            text, measured = fused.cost({origin(instr)})
            holders = [k for k in fused.where.get(origin(instr), (None, []))[1]]
            if len(holders) > 1:
                text += f"; computed again in each of {len(holders)} kernels (duplicated)"
            out.append(Finding(
                "concatenate-multi-user", instr.name, value_location(m, instr),
                f"{instr.name} ({format_shape(instr.shape, with_layout=False)}) is read by "
                f"{len(users)} users ({', '.join(u.name for u in users[:4])})",
                FIXES["concatenate-multi-user"], text, measured))
    return out


def _feeders(w: Instruction) -> list[Instruction]:
    """Kernels whose every result goes only into loop `w`'s init tuple (its input preparation)."""
    init = w.operand(0)
    out: list[Instruction] = []
    for value in init.operands if init.opcode is Opcode.TUPLE else [init]:
        if is_kernel(value) and value not in out and all(u is init or u is w
                                                         for u in value.users):
            out.append(value)
    return out


def _find_rng(m: Module, fused: _Fused) -> list[Finding]:
    out = []
    for outer, body in _body_computations(m):
        if is_rng_loop(outer):
            continue  # the RNG loop itself
        for instr in body.instructions:
            if not is_rng(instr):
                continue
            measured: dict[str, Any] = {}
            loop_title = f"{outer.name} body"
            fused_w = next((w for w in fused.loops.values() if origin(w) == origin(instr)), None)
            if instr.opcode is Opcode.WHILE and fused_w is not None:
                per = kernels_per_run(fused_w.attrs["body"], fused_w.attrs["condition"]) or 0
                trips = trip_count(fused_w)
                feeders = _feeders(fused_w)
                own = per * (trips or 0) + len(feeders)
                outer_fused = next((w for w in fused.loops.values()
                                    if origin(w) == origin(outer)), None)
                total = (kernels_per_run(outer_fused.attrs["body"],
                                         outer_fused.attrs["condition"])
                         if outer_fused is not None else None)
                text = (f"{own} of {total} kernels per iteration of {loop_title} under "
                        f"{fused.pipeline}: its loop {per} x {trips} trips + {len(feeders)} "
                        "kernel(s) preparing its inputs")
                measured = {"section": loop_title, "kernels": own, "kernels_per_run": total,
                            "loop_kernels": per, "trips": trips, "feeders": len(feeders)}
            else:  # an op, or a loop the pipeline unrolled: where its instructions went
                names = {origin(instr)}
                if instr.opcode is Opcode.WHILE:
                    names |= origins_inside(instr.attrs["body"])
                text, measured = fused.cost(names)
            what = ("a threefry2x32 random-number loop" if instr.opcode is Opcode.WHILE
                    else f"a {instr.opcode.value}")
            out.append(Finding(
                "rng-in-loop", instr.name, value_location(m, instr),
                f"{instr.name} is {what} inside the loop {outer.name}: it runs every "
                "iteration and is never fused", FIXES["rng-in-loop"], text, measured))
    return out


def _elementwise_chain_has_concat(value: Instruction, depth: int = 4) -> Instruction | None:
    if value.opcode is Opcode.CONCATENATE:
        return value
    if depth == 0 or not value.is_elementwise:
        return None
    for o in value.operands:
        if o.shape == value.shape or (isinstance(o.shape, ArrayShape) and isinstance(
                value.shape, ArrayShape) and o.shape.dims == value.shape.dims):
            found = _elementwise_chain_has_concat(o, depth - 1)
            if found is not None:
                return found
    return None


def _find_stacked_state(m: Module, fused: _Fused) -> list[Finding]:
    out = []
    for w, body in _body_computations(m):
        if is_rng_loop(w) or body.root.opcode is not Opcode.TUPLE:
            continue
        param = body.parameters[0]
        for i, value in enumerate(body.root.operands):
            concat = _elementwise_chain_has_concat(value)
            if concat is None:
                continue
            readers = [g for g in param.users if g.opcode is Opcode.GET_TUPLE_ELEMENT
                       and int(g.attrs["index"]) == i]
            slices = [u for g in readers for u in _users(g)
                      if u.opcode in (Opcode.SLICE, Opcode.DYNAMIC_SLICE, Opcode.GATHER)]
            if len(slices) < 2:
                continue
            text, measured = fused.cost({origin(concat), *(origin(s) for s in slices)})
            out.append(Finding(
                "stacked-loop-state", concat.name, value_location(m, concat),
                f"loop {w.name} carries element {i} "
                f"({format_shape(value.shape, with_layout=False)}) stacked by {concat.name} "
                f"every iteration and sliced apart by {len(slices)} slices at the start of the "
                "next", FIXES["stacked-loop-state"], text, measured))
    return out


def _find_copies(m: Module, fused: _Fused) -> list[Finding]:
    """Copies left in a loop body, and carried tuples that force one: an element stored in a
    different slot than it was read from (a permutation) or one value stored in two slots."""
    out = []
    for w, body in _body_computations(m):
        for instr in body.instructions:
            if instr.opcode is Opcode.COPY:
                text, measured = fused.cost({origin(instr)})
                out.append(Finding(
                    "copy-in-loop", instr.name, value_location(m, instr),
                    f"{instr.name} copies a value inside the loop {w.name} every iteration",
                    FIXES["copy-in-loop"], text, measured))
        root = body.root
        if root.opcode is not Opcode.TUPLE or is_rng_loop(w):
            continue  # a threefry loop rotates its key words: JAX's lowering, not user code
        slots: dict[int, list[int]] = {}
        aliased: list[tuple[int, Instruction, str]] = []
        for j, value in enumerate(root.operands):
            slots.setdefault(id(value), []).append(j)
            if (value.opcode is Opcode.GET_TUPLE_ELEMENT and value.operand(0) is
                    body.parameters[0] and int(value.attrs["index"]) != j):
                aliased.append((j, value, f"slot {j} <- slot {value.attrs['index']}"))
            elif len(slots[id(value)]) == 2:
                aliased.append((j, value, f"{value.name} in slots {slots[id(value)][0]} and {j}"))
        if not aliased:
            continue
        nbytes = sum(v.shape.nbytes for _j, v, _t in aliased)
        first = aliased[0][1]
        out.append(Finding(
            "copy-in-loop", first.name, value_location(m, first),
            f"loop {w.name} moves carried values between tuple slots "
            f"({'; '.join(t for _j, _v, t in aliased)}): the carried buffers alias, so XLA's "
            f"copy insertion copies {nbytes} B every iteration", FIXES["copy-in-loop"],
            "not measured as kernels: hlofuse inserts no copies (XLA adds a copy per aliased "
            "slot per iteration)", {"bytes_per_iteration": nbytes, "slots": len(aliased)}))
    return out


def _progression(indices: Instruction) -> bool:
    """An iota, or a constant whose values form an arithmetic progression."""
    while indices.opcode in (Opcode.RESHAPE, Opcode.BITCAST, Opcode.CONVERT):
        indices = indices.operand(0)
    if indices.opcode is Opcode.IOTA:
        return True
    if indices.opcode is Opcode.CONSTANT and isinstance(indices.literal, np.ndarray):
        flat = np.asarray(indices.literal).reshape(-1).astype(np.int64)
        if flat.size < 2:
            return flat.size == 1
        return bool(np.all(np.diff(flat) == flat[1] - flat[0]))
    return False


def _find_gathers(m: Module, fused: _Fused) -> list[Finding]:
    out = []
    for comp in m.computations:
        if comp.is_fusion_computation:
            continue
        for instr in comp.instructions:
            if instr.opcode is Opcode.GATHER and _progression(instr.operand(1)):
                text, measured = fused.cost({origin(instr)})
                out.append(Finding(
                    "gather-as-slice", instr.name, value_location(m, instr),
                    f"{instr.name} gathers with indices {instr.operand(1).name}, an arithmetic "
                    "progression: the same elements a (strided) slice would read",
                    FIXES["gather-as-slice"], text, measured))
    return out


@functools.cache
def _time_loop_kernels(example: str, pipeline: str) -> int | None:
    """Kernels per iteration of the first (time) loop of a built-in example under `pipeline`
    (None where the pipeline left no loop: whole-loop fusion made it one kernel)."""
    from hlofuse import examples
    from hlofuse.api import optimise

    mod, _ = optimise(examples.text(example), pipeline)
    loop = next((i for i in mod.entry.instructions if i.opcode is Opcode.WHILE), None)
    return kernels_per_run(loop.attrs["body"], loop.attrs["condition"]) if loop else None


def _shipped_rewrite(module_name: str, finding: Finding, pipeline: str) -> None:
    """For the built-in CartPole variants: measure the shipped rewrite that removes the
    pattern and add its kernels per iteration to the finding."""
    table = REWRITES.get(module_name, {})
    if finding.kind not in table:
        return

    before, after, what = table[finding.kind]
    counts = [_time_loop_kernels(name, pipeline) for name in (before, after)]
    if counts == [None, None]:
        finding.kernels += (f"; the shipped rewrite ({what}) changes no kernel count under "
                            f"{pipeline}: {before} and {after} each run their time loop as one "
                            "kernel")
    else:
        finding.kernels += (f"; measured on the shipped rewrite ({what}): {before} "
                            f"{counts[0]} -> {after} {counts[1]} kernels per time-loop "
                            f"iteration under {pipeline}")
    finding.measured["rewrite"] = {"from": before, "to": after, "kernels": counts}


def lint(target: Module | str, pipeline: str = DEFAULT_PIPELINE) -> LintReport:
    """Lint `target` (a Module or HLO text), costs measured under `pipeline`; the input is not
    modified."""
    from hlofuse.api import optimise
    from hlofuse.tools.explain.analyse import to_module

    base = to_module(target)
    inherit_call_site_locations(base)
    tag_origins(base)
    simplified, _ = optimise(base.clone(), "simplify")
    fused_module, _ = optimise(base.clone(), pipeline)
    fused = _Fused(fused_module, pipeline)
    findings: list[Finding] = []
    for detect in (_find_concatenates, _find_rng, _find_stacked_state, _find_copies,
                   _find_gathers):
        findings.extend(detect(simplified, fused))
    for f in findings:
        _shipped_rewrite(base.name, f, pipeline)
    strip_origins(simplified)
    return LintReport(base.name, findings)


# ----- command line -------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", help="HLO text file")
    parser.add_argument("--example", metavar="NAME", help="a built-in example instead of FILE")
    parser.add_argument("--pipeline", default=DEFAULT_PIPELINE,
                        help=f"pipeline the costs are measured under (default {DEFAULT_PIPELINE},"
                             " what compile runs)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    report = lint(load_input(args), args.pipeline)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, default=str))
    else:
        print(report.to_text())
    return 0
