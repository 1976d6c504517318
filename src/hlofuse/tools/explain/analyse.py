"""`explain`: run a pipeline on a copy of a module and say, per computation that launches
kernels, what each kernel holds and why every boundary between kernels is there.

Steps: stamp original names into metadata (`origins.py`), run the pipeline with a
`NameHistory` observer, then walk the entry, while bodies (per iteration, condition included,
nested loops times their trip count), conditional branches and called computations. For each
kernel: its kind, ops, source lines and bytes read/written (operand and result sizes). For each
edge where a value leaves one kernel (or loop) for another:

* both ends kernels: the refusals the fusion trace recorded between parts of the two kernels
  (producer side: originals only in the producer kernel; consumer side: originals in the
  consumer kernel). The last one is *the* rule; earlier ones are kept. With no record, the
  instruction-fusion rule is asked again on the final graph ("re-asked"), else the structure
  is named;
* a while/conditional/call or custom call at either end: a structural boundary (control flow
  is never fused); a random-number loop says so and gets the RNG rewrite;
* a while body's root tuple: loop-carried state, written every iteration.

Fixes come from `fixes.py`; with `verify_fixes=True` each setting fix is checked by re-running
the pipeline with that setting and looking for the two values in one kernel.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from hlofuse.analysis.kernels import bytes_read, is_kernel, kernels_of
from hlofuse.analysis.loops import trip_count
from hlofuse.errors import HloError
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import FusionKind, Opcode
from hlofuse.ir.shape import ArrayShape, format_shape, leaves
from hlofuse.passes.base import Context
from hlofuse.passes.defaults import DEFAULT_PIPELINE
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.pipelines import BEYOND_PASSES
from hlofuse.passes.fusion.rules import setting_of
from hlofuse.passes.fusion.trace import TraceEvent, trace_of
from hlofuse.tools.explain import fixes as fx
from hlofuse.tools.explain.model import Boundary, Explanation, KernelInfo, Refusal, Section
from hlofuse.tools.explain.origins import (
    NameHistory,
    origin,
    origins,
    strip_origins,
    tag_origins,
)
from hlofuse.tools.explain.patterns import (
    CONTROL,
    all_ops,
    inherit_call_site_locations,
    is_rng_loop,
    reader_location,
    value_location,
)

_HIDDEN = frozenset({Opcode.PARAMETER, Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT, Opcode.CONSTANT})
# ops XLA's GPU emitters never fuse into (library calls) when they stay on their own
_LIBRARY = frozenset(op for op in Opcode if op.value in (
    "dot", "convolution", "sort", "fft", "triangular-solve", "cholesky", "custom-call",
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute"))


class ExplainError(HloError):
    """`explain` was given something it cannot turn into a module."""


# ----- input ------------------------------------------------------------------------------------


def to_module(target: Any, *args: Any) -> Module:
    """A fresh Module from a Module (cloned), HLO text, a path, or a JAX function + args."""
    from hlofuse.text import parse

    if isinstance(target, Module):
        return target.clone()
    if isinstance(target, Path):
        return parse(target.read_text(), source_name=str(target))
    if isinstance(target, str):
        if target.lstrip().startswith("HloModule") or "ENTRY" in target:
            return parse(target)
        p = Path(target)
        if p.is_file():
            return parse(p.read_text(), source_name=target)
        raise ExplainError(f"{target[:60]!r}: neither HLO text nor an existing file")
    if callable(target):
        from hlofuse.frontends.jax import from_jax  # jax only on this path

        return from_jax(target, *args)
    raise ExplainError(f"cannot explain a {type(target).__name__}: expected a Module, HLO text, "
                       "a path or a JAX function")


# ----- kernels ---------------------------------------------------------------------------------


def _leaf_bytes(shape: Any) -> int:
    return sum(s.nbytes for s in leaves(shape))


def loop_shape(k: Instruction) -> str:
    """The shape a kernel iterates over (its first output's)."""
    shape = k.shape
    while not isinstance(shape, ArrayShape):
        elements = getattr(shape, "elements", ())
        if not elements:
            return format_shape(shape, with_layout=False)
        shape = elements[0]
    return format_shape(shape, with_layout=False)


def _sources(module: Module, ops: list[Instruction]) -> list[str]:
    found: set[tuple[str, int]] = set()
    for op in ops:
        loc = module.source_location(op)
        if loc is not None:
            found.add((loc.file, loc.line))
    return [f"{f}:{line}" for f, line in sorted(found)]


def kernel_info(module: Module, k: Instruction) -> KernelInfo:
    ops = list(all_ops(k))
    if k.opcode is Opcode.FUSION:
        kind = k.fusion_kind or FusionKind.LOOP
        inner = [o for o in ops if o.opcode not in _HIDDEN and o.opcode is not Opcode.FUSION]
        counts = Counter(o.opcode.value for o in inner)
        root = k.fused_computation.root
        outputs = root.operand_count if root.opcode is Opcode.TUPLE else 1
    else:
        kind, counts, outputs = k.opcode.value, Counter({k.opcode.value: 1}), 1
    read = bytes_read(k)
    return KernelInfo(k.name, kind, loop_shape(k), dict(counts), _sources(module, ops), read,
                      _leaf_bytes(k.shape), outputs)


# ----- edges -----------------------------------------------------------------------------------


def producer_of(value: Instruction) -> tuple[Instruction, Instruction] | None:
    """(kernel or control op that computes `value`, the instruction whose result crosses),
    looking through get-tuple-element, tuple and bitcast; None for parameters/constants."""
    index: int | None = None
    while True:
        if value.opcode is Opcode.GET_TUPLE_ELEMENT:
            inner = value.operand(0)
            if inner.opcode is Opcode.TUPLE:
                value = inner.operand(int(value.attrs["index"]))
                continue
            index = int(value.attrs["index"])
            value = inner
            continue
        if value.opcode is Opcode.BITCAST:
            value = value.operand(0)
            continue
        break
    if not (is_kernel(value) or value.opcode in CONTROL):
        return None
    crossing = value
    if value.opcode is Opcode.FUSION:
        crossing = value.fused_computation.root
        if crossing.opcode is Opcode.TUPLE and index is not None:
            crossing = crossing.operand(index)
    return value, crossing


def _reads(k: Instruction) -> list[tuple[int, Instruction]]:
    """(operand index, value) pairs `k` reads; tuple operands of control ops expanded."""
    out: list[tuple[int, Instruction]] = []
    for i, operand in enumerate(k.operands):
        if k.opcode in CONTROL and operand.opcode is Opcode.TUPLE:
            out.extend((i, o) for o in operand.operands)
        else:
            out.append((i, operand))
    return out


def _reader_origin(consumer: Instruction, operand_index: int) -> str:
    """The original name of the op inside `consumer` that reads its operand `operand_index`."""
    if consumer.opcode is Opcode.FUSION:
        param = consumer.fused_computation.parameter(operand_index)
        for user in param.users:
            if user.opcode not in _HIDDEN or user.opcode is Opcode.TUPLE:
                return origin(user)
        return origin(param.users[0]) if param.users else origin(consumer)
    return origin(consumer)


def _control_why(end: Instruction) -> str:
    if end.opcode is Opcode.WHILE and is_rng_loop(end):
        return (f"{end.name} is a random-number loop (threefry2x32 rounds, as JAX lowers "
                "jax.random): a while loop is never fused, its inputs and outputs are "
                "materialised")
    if end.opcode is Opcode.WHILE:
        return (f"{end.name} is a while loop: control flow is never fused; its inputs are "
                "materialised before it runs and its results after")
    if end.opcode is Opcode.CONDITIONAL:
        return f"{end.name} is a conditional: its branches run as separate kernels"
    return f"{end.name} is a call: the called computation's kernels run on their own"


class _Analysis:
    def __init__(self, module: Module, pipeline: str, history: NameHistory,
                 config: FusionConfig) -> None:
        self.module = module
        self.pipeline = pipeline
        self.history = history
        self.config = config
        self.fuses = bool(trace_of(module).settings)  # did any fusion pass run?
        self.events: dict[str, list[tuple[int, TraceEvent]]] = {}
        for index, e in enumerate(trace_of(module)):
            if e.verdict == "refused" and e.pass_name not in BEYOND_PASSES:
                self.events.setdefault(e.computation, []).append((index, e))
        self._resolved: dict[tuple[int, str], set[str]] = {}
        self.walked: dict[str, Section] = {}  # section title -> section (see `_walk`)

    def resolve(self, index: int, name: str) -> set[str]:
        key = (index, name)
        if key not in self._resolved:
            self._resolved[key] = self.history.resolve(index, name)
        return self._resolved[key]

    def refusals(self, comp: Computation, producer: Instruction, consumer: Instruction
                 ) -> list[Refusal]:
        only_producer = origins(producer) - origins(consumer)
        consumer_side = origins(consumer)
        out: list[Refusal] = []
        for index, e in self.events.get(comp.name, []):
            if not self.resolve(index, e.producer) & only_producer:
                continue
            if not any(self.resolve(index, c) & consumer_side for c in e.consumer.split(",")):
                continue
            out.append(Refusal(e.pass_name, e.reason, setting_of(e.rule), dict(e.figures),
                               e.producer, e.consumer, e.rule))
        return out

    def boundary(self, comp: Computation, pk: Instruction, crossing: Instruction,
                 k: Instruction, operand_index: int) -> Boundary:
        m = self.module
        b = Boundary(pk.name, k.name, "fusion", crossing.name,
                     _leaf_bytes(crossing.shape), value_location(m, crossing),
                     value_origin=origin(crossing), reader_origin=_reader_origin(k, operand_index))
        if k.opcode is Opcode.FUSION:
            b.consumer_source = reader_location(m, k.fused_computation.parameter(operand_index))
        elif k.opcode not in CONTROL:
            b.consumer_source = value_location(m, k)
        control = next((e for e in (pk, k) if e.opcode in CONTROL), None)
        if control is not None:
            b.category, b.origin, b.why = "control-flow", "structure", _control_why(control)
            if is_rng_loop(control):
                b.fixes.append(fx.Fix("rewrite", fx.RNG_FIX))
            return b
        if Opcode.CUSTOM_CALL in (pk.opcode, k.opcode):
            cc = pk if pk.opcode is Opcode.CUSTOM_CALL else k
            b.category, b.origin = "custom-call", "structure"
            b.why = f"{cc.name} is a custom call: an opaque library kernel, never fused"
            return b
        history = self.refusals(comp, pk, k)
        if history:
            b.rule, b.earlier = history[-1], history[:-1]
            b.why = fx.reading(b.rule.rule)
        elif not self.fuses:
            b.origin, b.why = "structure", f"the `{self.pipeline}` pipeline runs no fusion pass"
        else:
            self._reask(b, pk, k, operand_index)
        self._add_fixes(b, pk, k, history)
        return b

    def _reask(self, b: Boundary, pk: Instruction, k: Instruction, operand_index: int) -> None:
        from hlofuse.passes.fusion.instruction_fusion import should_fuse

        if k.opcode in _LIBRARY or pk.opcode in _LIBRARY:
            lib = k if k.opcode in _LIBRARY else pk
            b.origin = "structure"
            b.why = (f"{lib.name} is a {lib.opcode.value}, a library op XLA never fuses "
                     "with its neighbours")
            return
        d = should_fuse(k, operand_index, self.config)
        if not d:
            b.origin = "re-asked"
            b.rule = Refusal("instruction-fusion", d.reason or "", setting_of(d.rule),
                             dict(d.figures), pk.name, k.name, d.rule)
            b.why = fx.reading(b.rule.rule)
        else:
            b.origin = "structure"
            b.why = ("no fusion pass recorded a refusal between these kernels; "
                     f"{pk.name} has {pk.user_count} user(s)")

    def _add_fixes(self, b: Boundary, pk: Instruction, k: Instruction,
                   history: list[Refusal]) -> None:
        last_per_pass: dict[str, Refusal] = {}
        for r in history if history else ([b.rule] if b.rule else []):
            last_per_pass[r.pass_name] = r
        ordered = sorted(last_per_pass.values(), key=lambda r: -history.index(r)
                         if r in history else 0)
        context = self._context(pk, k)
        seen: set[str] = set()
        for r in ordered:
            for fix in (fx.rewrite_fix(r, context), fx.setting_fix(r)):
                if fix is not None and str(fix) not in seen:
                    seen.add(str(fix))
                    b.fixes.append(fix)

    def _context(self, pk: Instruction, k: Instruction) -> dict[str, Any]:
        ctx: dict[str, Any] = {"producer_shape": loop_shape(pk), "consumer_shape": loop_shape(k)}
        for a, other in ((pk, k), (k, pk)):
            if any(o.opcode is Opcode.CONCATENATE for o in all_ops(a)):
                ctx.update(stack_kernel=a.name, stack_shape=loop_shape(a),
                           other_shape=loop_shape(other))
                break
        ctx["rng_user"] = any(_feeds_rng_loop(pk))
        return ctx

    # ----- sections --------------------------------------------------------------------------

    def computation_boundaries(self, comp: Computation, is_body: bool) -> list[Boundary]:
        out: list[Boundary] = []
        nodes = [i for i in comp.instructions if is_kernel(i) or i.opcode in CONTROL]
        for k in nodes:
            seen: set[int] = set()
            for operand_index, value in _reads(k):
                found = producer_of(value)
                if found is None:
                    continue
                pk, crossing = found
                if pk is k or id(pk) in seen:
                    continue
                seen.add(id(pk))
                out.append(self.boundary(comp, pk, crossing, k, operand_index))
        if is_body and comp.root.opcode is Opcode.TUPLE:
            for i, value in enumerate(comp.root.operands):
                found = producer_of(value)
                if found is None:
                    continue
                pk, crossing = found
                b = Boundary(pk.name, f"iteration+1[{i}]", "loop-state", crossing.name,
                             _leaf_bytes(crossing.shape), value_location(self.module, crossing))
                b.origin = "structure"
                b.why = ("loop-carried state: written to memory at the end of every iteration "
                         "and read back by the next")
                out.append(b)
        return out


def _feeds_rng_loop(instr: Instruction) -> list[bool]:
    """Per final user of `instr` (through get-tuple-element, tuple and bitcast chains,
    iteratively): is it an RNG loop?"""
    out = []
    stack = list(reversed(instr.users))
    seen: set[int] = set()
    while stack:
        user = stack.pop()
        if user.opcode in (Opcode.GET_TUPLE_ELEMENT, Opcode.TUPLE, Opcode.BITCAST):
            if id(user) not in seen:
                seen.add(id(user))
                stack.extend(reversed(user.users))
        else:
            out.append(user.opcode is Opcode.WHILE and is_rng_loop(user))
    return out


def _walk(an: _Analysis, comp: Computation, title: str, per: str, sections: list[Section],
          cond: Computation | None = None, trips: int | None = None) -> Section:
    """The section of `comp` (and, nested, of every loop body, branch and call in it), each
    walked once: a computation several loops share (a call graph that is a DAG) is reached
    by many paths but its title (`<instruction> body`) is the same on each, so the walk is
    linear in the module, not exponential in its nesting. Recursion depth is the call depth,
    which the verifier bounds (`ir.limits.MAX_CALL_DEPTH`)."""
    done = an.walked.get(title)
    if done is not None:
        return done
    m = an.module
    section = Section(title, comp.name, per, [kernel_info(m, k) for k in kernels_of(comp)],
                      trip_count=trips)
    if cond is not None:
        section.condition_kernels = [kernel_info(m, k) for k in kernels_of(cond)]
    sections.append(section)
    an.walked[title] = section
    section.boundaries = an.computation_boundaries(comp, is_body=cond is not None)
    for instr in comp.instructions:
        if instr.opcode is Opcode.WHILE:
            n = trip_count(instr)
            sub = _walk(an, instr.attrs["body"], f"{instr.name} body", "iteration", sections,
                        instr.attrs["condition"], n)
            section.nested.append((instr.name, sub.kernels_per_run or 0, n))
        elif instr.opcode is Opcode.CONDITIONAL:
            branches = instr.branches
            subs = [_walk(an, b, f"{instr.name} branch {j}", "branch execution", sections)
                    for j, b in enumerate(branches)]
            most = max((s.kernels_per_run or 0 for s in subs), default=0)
            section.nested.append((f"{instr.name} (largest branch)", most, 1))
        elif instr.opcode is Opcode.CALL:
            sub = _walk(an, instr.attrs["to_apply"], f"{instr.name} call", "call", sections)
            section.nested.append((instr.name, sub.kernels_per_run or 0, 1))
    return section


def _bytes(sections: list[Section]) -> dict[str, int | None]:
    by_title = {s.title: s for s in sections}
    memo: dict[str, int | None] = {}

    def total(s: Section) -> int | None:
        if s.title in memo:
            return memo[s.title]
        n: int | None = s.own_bytes()
        for name, _k, trips in s.nested:
            sub = by_title.get(f"{name} body") or by_title.get(f"{name} call")
            if sub is None:
                continue  # conditionals: bytes of the branches are listed per branch
            inner = total(sub)
            n = None if n is None or inner is None or trips is None else n + inner * trips
        memo[s.title] = n
        return n

    return {s.title: total(s) for s in sections}


def asked_config(module: Module) -> FusionConfig:
    """The rules instruction fusion ran with (its last run's settings, from the trace), for
    asking it again; XLA's defaults when no instruction fusion ran (`none`, a pass list)."""
    return trace_of(module).settings.get("instruction-fusion") or FusionConfig()


def analyse(module: Module, pipeline: str = DEFAULT_PIPELINE, *, verify_fixes: bool = False
            ) -> Explanation:
    """Run `pipeline` on `module` (in place: pass a copy) and explain the result."""
    from hlofuse.api import optimise
    from hlofuse.passes.pipelines import build
    from hlofuse.tools.explain import beyond, priority

    beyond_xla = beyond.has_beyond_passes(build(pipeline))
    original = module.clone() if verify_fixes or beyond_xla else None
    inherit_call_site_locations(module)
    tag_origins(module)
    history = NameHistory()
    optimise(module, pipeline, context=Context(observers=[history]))  # (api: with its timer)
    an = _Analysis(module, pipeline, history, asked_config(module))
    sections: list[Section] = []
    _walk(an, module.entry, "entry", "execution", sections)
    expl = Explanation(module.name, pipeline, sections, _bytes(sections), fused_module=module)
    if not any(loc for s in sections for k in s.kernels for loc in k.sources):
        expl.notes.append("the module carries no source locations (metadata source_file/"
                          "source_line or stack frames): no lines to show")
    expl.priority_steps, expl.priority_refused = priority.steps(module)
    if beyond_xla:
        assert original is not None
        expl.transformations = beyond.transformations(module)
        base = analyse(original.clone(), "xla")
        expl.baseline = {"pipeline": "xla", "kernels": base.kernels_per_run,
                         "bytes": base.bytes_per_run.get("entry")}
    if verify_fixes:
        from hlofuse.tools.explain.verify import verify_setting_fixes

        assert original is not None
        verify_setting_fixes(expl, original, pipeline)
    strip_origins(module)
    return expl
