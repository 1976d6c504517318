"""Automatic unroll (beyond XLA): a loop that stays on the host is unrolled by the factor a cost
model picks, or measured (`autotune`), instead of a factor fixed in the source.

The paper's step 4 (`lax.scan(..., unroll=10)`) slows XLA down on CPU: ten copies of the body
are more code for the same kernels, and what unrolling could save (kernels that fuse across
iterations, loop-carried values that need not be written) depends on what fusion then does. So
each candidate factor k is tried: the module is cloned, the loop unrolled k times, the fusion
pipeline run on the clone, and the run costed as

    time(k) = kernels * host_kernel_overhead_ns + bytes / host_bandwidth_gbs + ops * host_ns_per_op

per run (`analysis.kernels`, `analysis.cost`: kernels, bytes moved and weighted scalar ops of one
run, loops times their trip counts; ops count what fusion duplicates). The smallest
time wins; a factor must beat no unroll by `min_unroll_gain` or the loop is left alone (less
code, the same speed). With `autotune=true` the candidates are timed instead, by the timer the
pass context carries (`passes/measure.py`; through `api`, the backends' one,
`backends/measure.py`: compiled with the default backend, run on random inputs, the times cached
in the cache directory per module, loop and machine setting); where none can time them (a
pipeline run with no timer in its context), the model decides.

Conditions (each refusal names its rule):

- `auto_unroll.trip_count`: the setting is on; the trip count is known and at least 2;
- `auto_unroll.whole_loop`: the loop is not one that whole-loop fusion will take (its kernel
  already runs every iteration inside);
- `auto_unroll.side_effect`: the condition has no side effect;
- `unroll_budget`: the factor's copies, with everything unrolling has already created in the
  module, stay within the setting (factors past it are not candidates);
- `auto_unroll.gain`: the best factor's cost beats no unroll by the setting. The loop as it
  is is costed first; when even saving every kernel call and the carried state's traffic
  could not reach the setting (`gain_bound`: iterations long beside their loop overhead, a
  training step's), the larger factors are not costed at all, and where the loop as it
  stands, before fusion, already shows that (`screen_bound`), not even the loop as it is (no
  copy, no fusion run: a training step's loops cost nothing here); `auto_unroll.cost_unknown`
  when a factor's cost cannot be modelled (a nested loop's trip count is unknown).
Candidates are the powers of two up to `max_unroll` that do not exceed the trip count.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from hlofuse.analysis.cost import ops_per_run
from hlofuse.analysis.kernels import bytes_per_run, kernels_per_run
from hlofuse.analysis.loops import body_of, condition_of, trip_count
from hlofuse.ir.clone import clone_computation, clone_instruction
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import TupleShape, leaves
from hlofuse.passes import measure
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.options import ALL_SETTINGS, FusionPass
from hlofuse.passes.fusion.trace import source_figure, trace_of
from hlofuse.passes.registry import register
from hlofuse.passes.simplify.growth import budget_limit, growth_of
from hlofuse.passes.simplify.unroll import (
    over_budget,
    unroll,
)
from hlofuse.passes.utils import (
    each_while,
    has_side_effect,
    reachable_computations,
    reachable_from,
)

PASS = "auto-unroll"


@dataclass(frozen=True)
class Estimate:
    factor: int
    kernels: int | None
    bytes: int | None
    ops: int | None
    ns: float | None  # modelled time of one run


def _budget(config: FusionConfig) -> tuple[int, int]:
    return config.unroll_budget, config.unroll_budget_per_instruction


def candidates(trips: int, config: FusionConfig) -> list[int]:
    out = [1]
    k = 2
    while k <= min(config.max_unroll, trips):
        out.append(k)
        k *= 2
    return out


def auto_unroll_legal(w: Instruction, config: FusionConfig) -> FusionDecision:
    from hlofuse.passes.fusion.loop_fusion import whole_loop_legal, whole_loop_profitable

    trips = trip_count(w)
    if trips is None or trips < 2:
        return FusionDecision.no(f"the trip count is {trips}: nothing to unroll",
                                 "auto_unroll.trip_count")
    if any(has_side_effect(i) for i in condition_of(w).instructions):
        return FusionDecision.no("the condition has a side effect", "auto_unroll.side_effect")
    if config.whole_loop_fusion and w.operand(0).opcode is Opcode.TUPLE:
        plan, _ = whole_loop_legal(w)
        if plan is not None and whole_loop_profitable(w, plan, config):
            return FusionDecision.no("whole-loop fusion runs every iteration inside one kernel",
                                     "auto_unroll.whole_loop")
    return FusionDecision.ok(trips=trips)


def gain_bound(w: Instruction, first: Estimate, config: FusionConfig) -> float | None:
    """The most any unroll factor can gain over `first` (the loop as it is, modelled): an
    unrolled loop computes the same ops and moves the same bytes within an iteration; what it
    can save is at most every kernel call and the carried state's write and read per
    iteration (`_rewritten_bytes`). Lets a loop whose iterations are long skip costing the
    larger factors (each a fusion pipeline run on k copies of the body)."""
    trips = trip_count(w)
    if first.ns is None or first.kernels is None or trips is None:
        return None
    saving = first.kernels * config.host_kernel_overhead_ns + _carried_ns(w, trips, config)
    rest = first.ns - saving
    return first.ns / rest if rest > 0 else None


# slack of the unfused screen (`screen_bound`): fusing may split an instruction into two
# kernels (a tree reduction) and simplification may drop ops, so the unfused counts are
# stretched by these factors before they bound the fused loop's
SCREEN_KERNEL_SLACK = 2
SCREEN_OPS_SLACK = 0.5


def screen_bound(w: Instruction, config: FusionConfig) -> float | None:
    """`gain_bound` before any fusion, from the loop as it stands (no copy, no pipeline run): a
    run's kernels only fall and its ops only rise as fusion duplicates producers, so with the
    unfused kernels (times `SCREEN_KERNEL_SLACK`) as the calls saved and the unfused ops
    (times `SCREEN_OPS_SLACK`) as the least time left, the result bounds what the modelled
    `gain_bound` can find. None where the bound says nothing (unknown trip counts, or the
    carried state's traffic outweighs the ops)."""
    trips = trip_count(w)
    body, cond = body_of(w), condition_of(w)
    kernels, ops = kernels_per_run(body, cond), ops_per_run(body, cond)
    if trips is None or kernels is None or ops is None:
        return None
    carried = _carried_ns(w, trips, config)
    saving = SCREEN_KERNEL_SLACK * kernels * trips * config.host_kernel_overhead_ns + carried
    rest = SCREEN_OPS_SLACK * ops * trips * config.host_ns_per_op - carried
    return 1.0 + saving / rest if rest > 0 else None


def _carried_ns(w: Instruction, trips: int, config: FusionConfig) -> float:
    """The most unrolling can save of the carried state's traffic: its write and read back
    every iteration (`_rewritten_bytes`), at the host's bandwidth."""
    return trips * 2 * _rewritten_bytes(w) / config.host_bandwidth_gbs


def _rewritten_bytes(w: Instruction) -> int:
    """Bytes of the carried leaves the body rewrites whole each iteration: not those it passes
    through, nor those it updates one row at a time (a scan's `ys`, written in place)."""
    from hlofuse.passes.fusion.loop_fusion import row_write

    body = body_of(w)
    param, root = body.parameter(0), body.root
    shape = w.shape
    if root.opcode is not Opcode.TUPLE or not isinstance(shape, TupleShape):
        return sum(leaf.nbytes for leaf in leaves(shape))
    total = 0
    for k, (new, leaf) in enumerate(zip(root.operands, shape.elements, strict=True)):
        passed = new.opcode is Opcode.GET_TUPLE_ELEMENT and new.operand(0) is param and \
            int(new.attrs["index"]) == k
        if not passed and row_write(new, param, k) is None:
            total += sum(s.nbytes for s in leaves(leaf))
    return total


def _body_computations(w: Instruction) -> list[Any]:
    """The body and condition of `w` and every computation they call."""
    from hlofuse.passes.utils import called

    out: list[Any] = []
    stack = [w.attrs["body"], w.attrs["condition"]]
    seen: set[int] = set()
    while stack:
        c = stack.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        out.append(c)
        for instr in c.instructions:
            stack.extend(called(instr))
    return out


def _settings(config: FusionConfig) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in fields(FusionConfig)}


def _find(module: Module, name: str) -> Instruction:
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.name == name and instr.opcode is Opcode.WHILE:
                return instr
    raise KeyError(name)


def _callees(w: Instruction) -> list[Computation]:
    """The computations `w` calls, directly or not, callees first."""
    return reachable_from(w.called_computations())


def loop_module(module: Module, name: str) -> Module:
    """A module whose entry runs only while `name` of `module` (on parameters standing for its
    init), with the computations it calls: what the candidates are costed and timed on. Only
    those computations are copied (the rest of a training step is not cloned per candidate)."""
    w = _find(module, name)
    m = Module(module.name)
    m.header_attrs = dict(module.header_attrs)
    comp_map: dict[int, Computation] = {}
    callees = _callees(w)
    for comp in callees:
        comp_map[id(comp)] = clone_computation(comp, comp_map)
        m.add_computation(comp_map[id(comp)])
    for old, new in ((c, comp_map[id(c)]) for c in callees):
        fusion = old.fusion_instruction
        if fusion is not None and fusion.parent is not None and id(fusion.parent) in comp_map:
            index = fusion.parent.instructions.index(fusion)
            new.fusion_instruction = comp_map[id(fusion.parent)].instructions[index]
    shape = w.shape
    assert isinstance(shape, TupleShape)
    entry = Computation(f"{name}.alone")
    given = w.operand(0)
    leaves: list[Instruction] = []
    for i, e in enumerate(shape.elements):
        c = given.operand(i) if given.opcode is Opcode.TUPLE else None
        if c is not None and c.opcode is Opcode.CONSTANT:  # the counter's start, ...
            leaf = Instruction.create(Opcode.CONSTANT, e, name=f"init{i}", literal=c.literal)
        else:
            number = sum(x.opcode is Opcode.PARAMETER for x in leaves)
            leaf = Instruction.create(Opcode.PARAMETER, e, name=f"init{i}",
                                      parameter_number=number)
        leaf.parent = entry
        entry.instructions.append(leaf)
        leaves.append(leaf)
    init = entry.add(Instruction.create(Opcode.TUPLE, shape, leaves, name="init"))
    entry.root = entry.add(clone_instruction(w, [init], comp_map))
    m.add_computation(entry, entry=True)
    return m


def unrolled(module: Module, name: str, factor: int, config: FusionConfig) -> Module:
    """While `name` alone (`loop_module`), unrolled `factor` times, simplified and fused."""
    from hlofuse.passes.fusion.pipelines import fusion_fixpoint, horizontal_fixpoint
    from hlofuse.passes.pipelines import simplify

    m = loop_module(module, name)
    w = m.entry.root
    if factor > 1:
        unroll(m, m.entry, w, factor)
    simplify().run(m)
    fusion_fixpoint(config).run(m)
    horizontal_fixpoint(config).run(m)
    return m


def modelled(module: Module, name: str, factor: int, config: FusionConfig) -> Estimate:
    m = unrolled(module, name, factor, config)
    kernels, moved, ops = kernels_per_run(m.entry), bytes_per_run(m.entry), ops_per_run(m.entry)
    ns = None
    if kernels is not None and moved is not None and ops is not None:
        ns = (kernels * config.host_kernel_overhead_ns + moved / config.host_bandwidth_gbs
              + ops * config.host_ns_per_op)
    return Estimate(factor, kernels, moved, ops, ns)


def measurable(w: Instruction) -> str:
    """Why runs of loop `w` cannot be timed on random inputs ('' when they can): every loop
    inside needs a known trip count (a data-dependent one might not end on random data); the
    loop's state must be arrays (checked when timing)."""
    for comp in _body_computations(w):
        for instr in comp.instructions:
            if instr.opcode is Opcode.WHILE and trip_count(instr) is None:
                return f"the trip count of {instr.name} depends on the data"
    return ""


def _cache_key(module: Module, name: str, factors: list[int], config: FusionConfig) -> str:
    import hashlib

    from hlofuse.text import print_module

    text = "\n".join([print_module(module), name, repr(factors), repr(_settings(config))])
    return hashlib.sha256(text.encode()).hexdigest()


def autotuned(module: Module, name: str, factors: list[int], config: FusionConfig
              ) -> tuple[int, dict[int, float], bool] | None:
    """(the fastest factor, ns per factor, whether the times came from the timer's cache);
    None when nothing times here (no `Context.timer`: `passes.measure.timer`) or a candidate
    cannot run."""
    timer = measure.timer()
    if timer is None:
        return None
    found = timer(_cache_key(module, name, factors, config),
                  {k: unrolled(module, name, k, config) for k in factors})
    if found is None:
        return None
    times, cached = found
    return min(factors, key=lambda k: (times[k], k)), times, cached


@register(PASS)
class AutoUnroll(FusionPass):
    """Unroll host loops by the factor the cost model (or autotuning) picks; off unless
    `auto_unroll` is on (module docstring)."""

    # every setting: it runs the fusion passes on each candidate
    OPTIONS: ClassVar[tuple[str, ...]] = ALL_SETTINGS
    name: ClassVar[str] = PASS

    def run(self, module: Module) -> bool:
        config: FusionConfig = self.run_config(module)
        if not config.auto_unroll:
            return False
        trace = trace_of(module)
        changed = False
        for comp, w in each_while(reachable_computations(module)):
            decision = auto_unroll_legal(w, config).with_figures(
                **source_figure(module, w))
            if decision:
                decision = self.choose(module, w, config, decision)
            if decision:
                changed |= unroll(module, comp, w, int(decision.figures["factor"]),
                                  floor=config.unroll_budget,
                                  per_instruction=config.unroll_budget_per_instruction)
            trace.record(PASS, w.name, w.name, decision, comp.name)
        return changed

    def choose(self, module: Module, w: Instruction, config: FusionConfig,
               legal: FusionDecision) -> FusionDecision:
        trips = trip_count(w)
        assert trips is not None
        size = sum(len(c.instructions) for c in _body_computations(w))
        factors = [k for k in candidates(trips, config)
                   if k == 1 or k * size <= config.max_unroll_instructions]
        figures: dict[str, Any] = dict(legal.figures, body_instructions=size)
        within = [k for k in factors
                  if k == 1 or not over_budget(module, w, k, *_budget(config))]
        if len(factors) > 1 and len(within) == 1:
            return FusionDecision.no(
                over_budget(module, w, factors[1], *_budget(config)), "unroll_budget",
                created=growth_of(module), limit=budget_limit(module, *_budget(config)),
                **figures)
        factors = within
        if len(factors) == 1:
            return FusionDecision.no(
                f"no factor above 1 within max_unroll={config.max_unroll} and "
                f"max_unroll_instructions={config.max_unroll_instructions} ({size} instructions "
                "per iteration)", "max_unroll_instructions", **figures)
        why_not = measurable(w) if config.autotune else ""
        if why_not:
            figures["autotune"] = f"not measured: {why_not}"
        if config.autotune and not why_not:
            tuned = autotuned(module, w.name, factors, config)
            if tuned is None:
                figures["autotune"] = "not measured: nothing here times these candidates"
            else:
                best, times, cached = tuned
                figures.update(measured_ns={str(k): round(v) for k, v in times.items()},
                               cached=cached, factor=best)
                gain = times[1] / times[best]
                return self._verdict(best, gain, config, figures, "measured")
        screen = screen_bound(w, config)
        if screen is not None and screen < config.min_unroll_gain:
            figures.update(bound=round(screen, 3), bound_from="unfused")
            return self._cannot_pay(screen, config, figures)
        first = modelled(module, w.name, 1, config)
        bound = gain_bound(w, first, config)
        if bound is not None and bound < config.min_unroll_gain:
            figures.update(bound=round(bound, 3), bound_from="modelled",
                           model_ns={"1": round(first.ns or 0)})
            return self._cannot_pay(bound, config, figures)
        est = {1: first, **{k: modelled(module, w.name, k, config) for k in factors[1:]}}
        if any(e.ns is None for e in est.values()):
            return FusionDecision.no("the cost of a run is unknown (a nested trip count)",
                                     "auto_unroll.cost_unknown", **figures)
        best = min(factors, key=lambda k: (est[k].ns, k))
        figures.update(factor=best, kernels_before=est[1].kernels, kernels_after=est[best].kernels,
                       bytes_before=est[1].bytes, bytes_after=est[best].bytes,
                       model_ns={str(k): round(e.ns or 0) for k, e in est.items()})
        gain = (est[1].ns or 0) / (est[best].ns or 1)
        return self._verdict(best, gain, config, figures, "modelled")

    @staticmethod
    def _cannot_pay(bound: float, config: FusionConfig, figures: dict[str, Any]
                    ) -> FusionDecision:
        return FusionDecision.no(
            f"unrolling cannot pay: it saves at most the loop's kernel calls and its carried "
            f"state's traffic, a gain of at most {bound:.2f}x (needs {config.min_unroll_gain}x)",
            "auto_unroll.gain", **figures)

    @staticmethod
    def _verdict(best: int, gain: float, config: FusionConfig, figures: dict[str, Any],
                 how: str) -> FusionDecision:
        figures["gain"] = round(gain, 3)
        if best == 1 or gain < config.min_unroll_gain:
            return FusionDecision.no(
                f"unrolling does not pay: best factor {best}, {how} gain {gain:.2f}x (needs "
                f"{config.min_unroll_gain}x)", "auto_unroll.gain", **figures)
        return FusionDecision.ok(**figures)
