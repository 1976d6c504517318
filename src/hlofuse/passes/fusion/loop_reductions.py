"""Reductions over the batch leave the loop (beyond XLA): a scan's per-step scalar that sums,
averages or maxes over the batch is computed after the loop from per-element rows, so the
loop's elements stay independent and whole-loop fusion can run it as one kernel.

    while (i < S) { x = f(x); ys[i] = g(sum_n h(x)[n]); i += 1 }       a reduce per iteration
 -> while (i < S) { x = f(x); H[i, :] = h(x); i += 1 }                 every element apart
    ys = g(sum(H, dims={1}))                                           one reduce after the loop

RL code logs a reward sum or an episode count per step; a reduce over the batch inside the body
is the one op that mixes elements, and whole-loop fusion refuses it (`whole_loop.op`). Moved
out, the loop writes each element's operand to a row of a `[S, ...]` output (a per-element
output the whole-loop kernel stores with vector stores), and one reduce kernel after the loop
combines the rows in a fixed order (results do not depend on the number of threads: the
reduce kernel's order is its own, as any reduce's).

Legality (`hoist_legal`, per carried leaf; each refusal names its rule):

- `hoist.row`: the leaf is a scan output `ys` written one whole row per iteration at the
  counter (`dynamic-update-slice(ys, u, i, 0, ...)`, counter from 0 by 1, as many iterations as
  rows, so every row is written once) and read by nothing else in the loop;
- `hoist.cone`: the row `u` is computed from reduces (single-operand, a constant init) only
  through ops that lift to a leading `[S]` dimension: elementwise ops, broadcasts, reshapes,
  concatenates, slices, transposes and constants (the mean's divide, a convert, `jnp.stack` of
  several sums); nothing else of the loop state reaches it.

Profitability (`hoist_profitable`, separate): `hoist_max_bytes`, the rows the loop now writes
stay under the setting; and `hoist.whole_loop`, the rewritten loop is one that whole-loop
fusion takes (checked on a copy of the module: the rewrite only pays when it makes the loop one
kernel; no copy is made when the op whole-loop fusion names is not one of the reduces moved).

Values: every row of `ys` is the same ops applied to the same reduce of the same operand; the
reduce runs over a row of `H` instead of over the operand itself (the order of a reduce is the
backend's in both cases).

When whole-loop fusion then takes the loop, rows `H` that only an add/max/min/or/and reduce reads
never leave the kernel: it returns per-block partials and the reduce combines them
(`loop_fusion.partial_reductions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hlofuse.analysis.loops import body_of, condition_of, gte_index, induction_variable, trip_count
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.loop_fusion import row_write, whole_loop_legal, whole_loop_profitable
from hlofuse.passes.fusion.options import HOST_MODEL, FusionPass
from hlofuse.passes.fusion.trace import source_figure, trace_of
from hlofuse.passes.registry import register
from hlofuse.passes.simplify.dce import dce_computation
from hlofuse.passes.simplify.while_loops import own_computation
from hlofuse.passes.utils import callers, each_while, reachable_computations

PASS = "hoist-loop-reductions"
_LIFTED = frozenset({Opcode.BROADCAST, Opcode.RESHAPE, Opcode.CONSTANT, Opcode.CONCATENATE,
                     Opcode.SLICE, Opcode.TRANSPOSE})


@dataclass(frozen=True)
class Hoist:
    """Leaf `leaf` of a while (its `ys`) is `lift(row)` of the rows of `reduces`' operands."""

    leaf: int
    dus: Instruction  # the row write
    reduces: tuple[Instruction, ...]  # in post order
    cone: tuple[Instruction, ...]  # the row's instructions above the reduces, post order
    row_bytes: int  # bytes of the operands' rows written per iteration


def _array(instr: Instruction) -> ArrayShape:
    s = instr.shape
    assert isinstance(s, ArrayShape)
    return s


def _zero_constant(instr: Instruction) -> bool:
    lit = instr.literal
    return instr.opcode is Opcode.CONSTANT and lit is not None and \
        np.asarray(lit).size == 1 and int(np.asarray(lit).reshape(-1)[0]) == 0


def hoist_legal(w: Instruction, k: int) -> tuple[Hoist | None, FusionDecision]:
    """How leaf `k` of while `w` is a row of reduces (module docstring), or why not."""
    iv = induction_variable(w)
    trips = trip_count(w)
    body = body_of(w)
    p = body.parameter(0)
    root = body.root
    found = row_write(root.operand(k), p, k) if root.opcode is Opcode.TUPLE else None
    if iv is None or trips is None or found is None or found[1]:
        return None, FusionDecision.no("not a scan output written one row per iteration",
                                       "hoist.row")
    dus = found[0]
    ys, upd = _array(dus), _array(dus.operand(1))
    starts = dus.operands[2:]
    if not ys.dims or gte_index(starts[0], p) != iv.index or iv.init != 0 or iv.step != 1 \
            or trips != ys.dims[0] or tuple(upd.dims) != (1, *ys.dims[1:]) \
            or not all(_zero_constant(s) for s in starts[1:]) \
            or any(gte_index(u, condition_of(w).parameter(0)) == k
                   for u in condition_of(w).parameter(0).users):
        return None, FusionDecision.no("the leaf is not written whole row by row at the counter "
                                       "(row i at iteration i, every row once)", "hoist.row")
    reduces: list[Instruction] = []
    cone: list[Instruction] = []
    seen: set[int] = set()

    def walk(x: Instruction) -> bool:
        if id(x) in seen:
            return True
        seen.add(id(x))
        if x.opcode is Opcode.REDUCE and len(x.operands) == 2 and \
                x.operand(1).opcode is Opcode.CONSTANT:
            reduces.append(x)
            return True
        if not (x.is_elementwise or x.opcode in _LIFTED) or \
                not isinstance(x.shape, ArrayShape) or not all(walk(o) for o in x.operands):
            return False
        cone.append(x)
        return True

    if not walk(dus.operand(1)) or not reduces:
        return None, FusionDecision.no(
            "the row is not computed from reduces through elementwise ops, broadcasts and "
            "reshapes alone", "hoist.cone")
    row_bytes = sum(_array(r.operand(0)).size * _array(r.operand(0)).dtype.itemsize
                    for r in reduces)
    return Hoist(k, dus, tuple(reduces), tuple(cone), row_bytes), FusionDecision.ok(
        reduces=len(reduces))


def hoist_profitable(w: Instruction, hoists: list[Hoist], module: Module,
                     config: FusionConfig, blocked: FusionDecision) -> FusionDecision:
    """The rewritten loop is whole-loop fusible and its rows fit `hoist_max_bytes`. Refused at
    once when whole-loop fusion's refusal of the loop as it is (`blocked`) names an op that is
    not one of the reduces moved; else tried on a copy of the module."""
    trips = trip_count(w) or 0
    total = trips * sum(h.row_bytes for h in hoists)
    named = blocked.figures.get("instruction")
    if named is not None and named not in {r.name for h in hoists for r in h.reduces}:
        return FusionDecision.no(f"the loop would still not be one kernel: {blocked.reason}",
                                 "hoist.whole_loop", bytes=total, why=blocked.rule)
    if total > config.hoist_max_bytes:
        return FusionDecision.no(
            f"the rows would take {total} bytes (more than {config.hoist_max_bytes})",
            "hoist_max_bytes", bytes=total, limit=config.hoist_max_bytes)
    copy = module.clone()
    comp_at = module.computations.index(w.parent)  # type: ignore[arg-type]
    comp = copy.computations[comp_at]
    w2 = comp.instructions[w.parent.instructions.index(w)]  # type: ignore[union-attr]
    assert w2.name == w.name and w2.opcode is Opcode.WHILE
    counts = callers(copy)
    own_computation(copy, w2, "body", counts)
    own_computation(copy, w2, "condition", counts)
    legal = [hoist_legal(w2, h.leaf)[0] for h in hoists]
    hoist(w2, [h for h in legal if h is not None])
    plan, decision = whole_loop_legal(w2)
    if plan is not None:
        decision = whole_loop_profitable(w2, plan, config)
    if not decision:
        return FusionDecision.no(f"the loop would still not be one kernel: {decision.reason}",
                                 "hoist.whole_loop", bytes=total, why=decision.rule)
    return FusionDecision.ok(bytes=total)


class _Outside:
    """Instructions added to the loop's computation after it."""

    def __init__(self, comp: Computation, like: Instruction) -> None:
        self.comp, self.like = comp, like

    def add(self, opcode: Opcode, shape: ArrayShape, operands: list[Instruction],
            **attrs: object) -> Instruction:
        return self.comp.add(Instruction.create(opcode, shape, operands, name="hoisted",
                                                attrs=dict(attrs), metadata=self.like.metadata))

    def constant(self, c: Instruction) -> Instruction:
        return self.comp.add(Instruction.create(Opcode.CONSTANT, c.shape, name=c.name,
                                                literal=c.literal, metadata=c.metadata))


def hoist(w: Instruction, hoists: list[Hoist]) -> None:
    """Rewrite while `w` (body and condition its own) so that each hoist's reduce operands are
    written as rows and its `ys` computed after the loop (module docstring)."""
    comp = w.parent
    assert comp is not None
    old = w.shape
    assert isinstance(old, TupleShape)
    body, cond = body_of(w), condition_of(w)
    p, root = body.parameter(0), body.root
    trips = trip_count(w)
    assert trips is not None
    # each reduce operand, with the row write of the first ys it feeds (its row index)
    writes: dict[Instruction, Instruction] = {}
    for h in hoists:
        for r in h.reduces:
            writes.setdefault(r.operand(0), h.dus)
    operands = list(writes)
    rows = [ArrayShape(_array(v).dtype, (trips, *_array(v).dims)) for v in operands]
    base = len(old.elements)
    new = TupleShape((*old.elements, *rows))

    # body: each reduce operand written as row i of a new leaf; the ys leaf passes through
    ops = list(root.operands)
    for h in hoists:
        ops[h.leaf] = h.dus.operand(0)
    counter = _array(hoists[0].dus.operand(2)).dtype
    zero = body.add(Instruction.create(Opcode.CONSTANT, ArrayShape(counter, ()), name="zero",
                                       literal=np.asarray(0, dtype=counter.np)), before=root)
    for j, (v, rs) in enumerate(zip(operands, rows, strict=True)):
        dus = writes[v]
        leaf = body.add(Instruction.create(Opcode.GET_TUPLE_ELEMENT, rs, [p], name="rows",
                                           attrs={"index": base + j}), before=root)
        row = body.add(Instruction.create(Opcode.RESHAPE, ArrayShape(rs.dtype, (1, *rs.dims[1:])),
                                          [v], name="row"), before=root)
        ops.append(body.add(Instruction.create(
            Opcode.DYNAMIC_UPDATE_SLICE, rs, [leaf, row, dus.operand(2),
                                              *([zero] * (rs.rank - 1))],
            name="rows_write", metadata=dus.metadata), before=root))
    body.root = body.add(Instruction.create(Opcode.TUPLE, new, ops, name=root.name,
                                            metadata=root.metadata))
    p.shape = new
    cond.parameter(0).shape = new

    # init (a tuple: `run` takes no other loop): zeros for the rows
    init = w.operand(0)
    out = _Outside(comp, w)
    elems = list(init.operands)
    for rs in rows:
        zero = comp.add(Instruction.create(Opcode.CONSTANT, ArrayShape(rs.dtype, ()),
                                           literal=np.asarray(0, dtype=rs.dtype.np),
                                           name="zero"), before=w)
        elems.append(comp.add(Instruction.create(Opcode.BROADCAST, rs, [zero], name="rows",
                                                 attrs={"dimensions": ()}), before=w))
    w.set_operand(0, comp.add(Instruction.create(Opcode.TUPLE, new, elems, name=init.name,
                                                 metadata=init.metadata), before=w))
    w.shape = new

    # after the loop: ys = the row's ops lifted over a leading [S], from reduces of the rows
    results = {v: comp.add(Instruction.create(Opcode.GET_TUPLE_ELEMENT, rs, [w],
                                              attrs={"index": base + j}))
               for j, (v, rs) in enumerate(zip(operands, rows, strict=True))}
    lifted: dict[int, Instruction] = {}
    for h in hoists:
        for r in h.reduces:
            rshape = _array(r)
            lifted[id(r)] = out.add(
                Opcode.REDUCE, ArrayShape(rshape.dtype, (trips, *rshape.dims)),
                [results[r.operand(0)], out.constant(r.operand(1))],
                dimensions=tuple(int(d) + 1 for d in r.dimensions),
                to_apply=r.attrs["to_apply"])
        for x in h.cone:
            lifted[id(x)] = _lift(out, x, lifted, trips)
        ys = _array(h.dus)
        final = out.add(Opcode.RESHAPE, ys, [lifted[id(h.dus.operand(1))]])
        for u in [u for u in w.users if gte_index(u, w) == h.leaf]:
            u.replace_all_uses_with(final)
    body.instructions = body.post_order()
    comp.instructions = comp.post_order()
    dce_computation(body)


def _lift(out: _Outside, x: Instruction, lifted: dict[int, Instruction], trips: int
          ) -> Instruction:
    """`x` computed for every iteration at once: its shape with a leading [trips]."""
    s = _array(x)
    shape = ArrayShape(s.dtype, (trips, *s.dims))
    if x.opcode is Opcode.CONSTANT:
        return out.add(Opcode.BROADCAST, shape, [out.constant(x)],
                       dimensions=tuple(range(1, shape.rank)))
    ops = [lifted[id(o)] for o in x.operands]
    if x.opcode is Opcode.BROADCAST:
        return out.add(Opcode.BROADCAST, shape, ops,
                       dimensions=(0, *(int(d) + 1 for d in x.dimensions)))
    if x.opcode is Opcode.RESHAPE:
        return out.add(Opcode.RESHAPE, shape, ops)
    if x.opcode is Opcode.CONCATENATE:
        return out.add(Opcode.CONCATENATE, shape, ops, dimensions=(int(x.dimensions[0]) + 1,))
    if x.opcode is Opcode.TRANSPOSE:
        return out.add(Opcode.TRANSPOSE, shape, ops,
                       dimensions=(0, *(int(d) + 1 for d in x.dimensions)))
    if x.opcode is Opcode.SLICE:
        return out.add(Opcode.SLICE, shape, ops, slice=((0, trips, 1), *x.attrs["slice"]))
    return out.add(x.opcode, shape, ops, **x.attrs)


@register(PASS)
class HoistLoopReductions(FusionPass):
    """Move per-step reductions over the batch out of loops that whole-loop fusion then takes
    (module docstring); off unless `hoist_loop_reductions` (the `hlofuse` pipeline)."""

    OPTIONS: ClassVar[tuple[str, ...]] = (
        "hoist_loop_reductions", "hoist_max_bytes", "whole_loop_min_trips",
        "whole_loop_max_uniform_elements", "whole_loop_scalar_slowdown",
        "whole_loop_dot_slowdown", *HOST_MODEL)
    name: ClassVar[str] = PASS

    def run(self, module: Module) -> bool:
        config: FusionConfig = self.run_config(module)
        if not config.hoist_loop_reductions:
            return False
        trace = trace_of(module)
        changed = False
        comps = reachable_computations(module)
        counts = callers(module, comps)
        for comp, w in each_while(comps):
            if body_of(w).root.opcode is not Opcode.TUPLE or \
                    w.operand(0).opcode is not Opcode.TUPLE or w.is_root or any(
                        gte_index(u, w) is None for u in w.users):
                continue
            _, why = whole_loop_legal(w)
            if why or why.rule not in ("whole_loop.op", "whole_loop.uniform"):
                continue  # fusible already, or refused for a reason this cannot fix
            tup = w.shape
            assert isinstance(tup, TupleShape)
            hoists = [h for k in range(len(tup.elements))
                      for h in [hoist_legal(w, k)[0]] if h is not None]
            if not hoists:
                continue
            figures = {"leaves": [h.leaf for h in hoists], **source_figure(module, w)}
            decision = hoist_profitable(w, hoists, module, config, why)
            if not decision:
                trace.record(PASS, w.name, w.name, decision.with_figures(**figures),
                             comp.name)
                continue
            own_computation(module, w, "body", counts)
            own_computation(module, w, "condition", counts)
            hoists = [h for h in (hoist_legal(w, h.leaf)[0] for h in hoists)
                      if h is not None]
            hoist(w, hoists)
            trace.record(PASS, w.name, w.name, decision.with_figures(
                **figures, reduces=sum(len(h.reduces) for h in hoists)), comp.name, True)
            changed = True
        return changed
