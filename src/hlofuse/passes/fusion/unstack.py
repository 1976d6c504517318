"""Un-stacking loop state (beyond XLA; the paper's step 3, done by the compiler): a carried
array stacked from K rows is carried as K arrays.

    state = jnp.stack([x, x_dot, theta, theta_dot])      f32[4, N], rebuilt every iteration
    x, x_dot, theta, theta_dot = state                    read back row by row
 -> four carried f32[N] arrays; the stack and the slices are gone from the loop

A stacked leaf costs XLA twice per iteration: the concatenate that builds it (written whole,
often a kernel of its own because a multi-user concatenate is not fused), and the slices that
read it back (each fusion that reads a row is bounded by the stacked array). Carried as rows,
each row is produced and consumed by elementwise code that fuses.

Legality (`unstack_legal`, per carried leaf and stacking axis `a` with K = dims[a] rows; each
refusal names its rule):

- `unstack_max_rows`: 2 <= K <= the setting;
- `unstack.reads`: the body reads the leaf only through slices of one row along `a` (whole
  along every other axis), and the condition does not read it;
- `unstack.writes`: its new value is rebuilt from rows: a concatenate along `a`, possibly
  under elementwise ops, selects and broadcasts along `a` (the paper's reset-on-done select),
  so the rows of the new value are computed by pushing the row selection through those ops
  (`row_of`); anything else is sliced.

Profitability (`unstack_profitable`, separate from legality): `unstack_max_row_rank`, each row
has rank at most the setting (1: a row is one scalar per element of the batch, what
whole-loop fusion turns into registers; a row that is itself a matrix gains nothing).

The rewrite appends K leaves of the row shape to the loop state (init: rows sliced from the
leaf's init; body: each single-row slice becomes a reshape of its row leaf, the root gets the
rows of the new value; after the loop: users of the leaf read a concatenate of the K results)
and leaves the old leaf passing through unchanged, unread, for the while-loop simplifier to
remove. Values are unchanged: every row is computed by the same ops on the same rows.
"""

from __future__ import annotations

from typing import ClassVar

from hlofuse.analysis.loops import body_of, condition_of, gte_index
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.options import FusionPass
from hlofuse.passes.fusion.trace import source_figure, trace_of
from hlofuse.passes.registry import register
from hlofuse.passes.simplify.while_loops import own_computation
from hlofuse.passes.utils import callers, each_while, reachable_computations

PASS = "unstack-loop-state"
_ROW_DEPTH = 64  # deepest chain of ops `row_of` pushes a row selection through


def _array(instr: Instruction) -> ArrayShape | None:
    return instr.shape if isinstance(instr.shape, ArrayShape) else None


def _is_row_slice(s: Instruction, axis: int) -> int | None:
    """The row a slice takes along `axis` (one row, every other axis whole), else None."""
    if s.opcode is not Opcode.SLICE:
        return None
    src = _array(s.operand(0))
    assert src is not None
    for d, (lo, hi, st) in enumerate(s.attrs["slice"]):
        lo, hi, st = int(lo), int(hi), int(st)
        if d == axis:
            if hi - lo != 1:
                return None
            row = lo
        elif (lo, hi, st) != (0, src.dims[d], 1):
            return None
    return row


def _leaf_reads(body: Computation, k: int) -> list[Instruction]:
    p = body.parameter(0)
    return [u for u in p.users if gte_index(u, p) == k]


def _stacked_axis(value: Instruction, axis: int) -> bool:
    """Is `value` built from rows along `axis` (a concatenate of one-row pieces, possibly under
    elementwise ops and broadcasts)?"""
    stack = [value]
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if id(v) in seen or len(seen) > 4 * _ROW_DEPTH:
            continue
        seen.add(id(v))
        if v.opcode is Opcode.CONCATENATE and v.dimensions == (axis,):
            return True
        if v.is_elementwise:
            stack.extend(v.operands)
    return False


def unstack_legal(w: Instruction, k: int, config: FusionConfig
                  ) -> tuple[int | None, FusionDecision]:
    """(the stacking axis, yes) for carried leaf `k` of while `w`, or (None, why not)."""
    shape = w.shape
    assert isinstance(shape, TupleShape)
    leaf = shape.elements[k]
    if not isinstance(leaf, ArrayShape) or leaf.rank < 2:
        return None, FusionDecision.no("not a stacked array", "unstack.writes")
    body = body_of(w)
    root = body.root
    cond_reads = [u for u in condition_of(w).parameter(0).users
                  if gte_index(u, condition_of(w).parameter(0)) == k]
    reads = _leaf_reads(body, k)
    refusals: list[FusionDecision] = []  # per stacked axis, the first wins
    for axis, rows in enumerate(leaf.dims):
        if not _stacked_axis(root.operand(k), axis):
            continue
        if not 2 <= rows <= config.unstack_max_rows:
            refusals.append(FusionDecision.no(
                f"{rows} rows along dimension {axis}: more than unstack_max_rows="
                f"{config.unstack_max_rows}", "unstack_max_rows", rows=rows))
            continue
        if any(u.users for u in cond_reads):
            refusals.append(FusionDecision.no("the loop condition reads the stacked array",
                                              "unstack.reads"))
            continue
        bad = [u for g in reads for u in g.users if _is_row_slice(u, axis) is None
               and u is not root]
        if bad:
            refusals.append(FusionDecision.no(
                f"{bad[0].name} ({bad[0].opcode.value}) reads the stacked array other than "
                "one row at a time", "unstack.reads", instruction=bad[0].name))
            continue
        return axis, FusionDecision.ok(rows=rows, axis=axis)
    if refusals:
        return None, refusals[0]
    return None, FusionDecision.no("its new value is not built from rows", "unstack.writes")


def unstack_profitable(leaf: ArrayShape, config: FusionConfig) -> FusionDecision:
    """Whether carrying `leaf` (a legal stacked leaf) as rows pays: its rows (one dimension
    fewer) have rank at most `unstack_max_row_rank`."""
    row_rank = leaf.rank - 1
    if row_rank > config.unstack_max_row_rank:
        return FusionDecision.no(
            f"rows of rank {row_rank}: more than unstack_max_row_rank="
            f"{config.unstack_max_row_rank}", "unstack_max_row_rank", row_rank=row_rank)
    return FusionDecision.ok(row_rank=row_rank)


class _Rows:
    """Row `r` along `axis` of values of one computation, pushed through the ops that build
    them (memoised; a slice where the selection cannot go further)."""

    def __init__(self, comp: Computation, axis: int, anchor: Instruction,
                 leaf_rows: dict[int, list[Instruction]]) -> None:
        self.comp, self.axis, self.anchor = comp, axis, anchor
        self.leaf_rows = leaf_rows  # id(stacked leaf read) -> its row leaves
        self.memo: dict[tuple[int, int], Instruction] = {}

    def add(self, opcode: Opcode, shape: ArrayShape, operands: list[Instruction],
            like: Instruction, **attrs: object) -> Instruction:
        instr = Instruction.create(opcode, shape, operands, name=f"{like.name}.row",
                                   attrs=dict(attrs), metadata=like.metadata)
        return self.comp.add(instr, before=self.anchor)

    def row_shape(self, v: Instruction) -> ArrayShape:
        s = _array(v)
        assert s is not None
        return ArrayShape(s.dtype, tuple(d for i, d in enumerate(s.dims) if i != self.axis))

    def of(self, v: Instruction, r: int, depth: int = 0) -> Instruction:
        key = (id(v), r)
        found = self.memo.get(key)
        if found is None:
            found = self._of(v, r, depth)
            self.memo[key] = found
        return found

    def _of(self, v: Instruction, r: int, depth: int) -> Instruction:
        a = self.axis
        rows = self.leaf_rows.get(id(v))
        if rows is not None:
            return rows[r]
        if depth < _ROW_DEPTH:
            if v.opcode is Opcode.CONCATENATE and v.dimensions == (a,):
                at = 0
                for piece in v.operands:
                    n = _array(piece).dims[a]  # type: ignore[union-attr]
                    if at <= r < at + n:
                        return self.of(piece, r - at, depth + 1)
                    at += n
            if v.is_elementwise and v.operands and all(
                    _array(o) is not None and _array(o).dims == _array(v).dims  # type: ignore
                    for o in v.operands):
                ops = [self.of(o, r, depth + 1) for o in v.operands]
                return self.add(v.opcode, self.row_shape(v), ops, v, **v.attrs)
            if v.opcode is Opcode.BROADCAST and a not in v.dimensions:
                dims = tuple(d - (d > a) for d in v.dimensions)
                return self.add(Opcode.BROADCAST, self.row_shape(v), [v.operand(0)], v,
                                dimensions=dims)
        s = _array(v)
        assert s is not None
        spec = tuple((r, r + 1, 1) if i == a else (0, d, 1) for i, d in enumerate(s.dims))
        one = ArrayShape(s.dtype, tuple(1 if i == a else d for i, d in enumerate(s.dims)))
        sl = self.add(Opcode.SLICE, one, [v], v, slice=spec)
        return self.add(Opcode.RESHAPE, self.row_shape(v), [sl], v)


def unstack(w: Instruction, k: int, axis: int) -> int:
    """Carry leaf `k` of while `w` as its rows along `axis` (module docstring); returns K. The
    body and condition must belong to `w` alone."""
    comp = w.parent
    assert comp is not None
    old = w.shape
    assert isinstance(old, TupleShape)
    leaf = old.elements[k]
    assert isinstance(leaf, ArrayShape)
    rows = leaf.dims[axis]
    row_shape = ArrayShape(leaf.dtype, tuple(d for i, d in enumerate(leaf.dims) if i != axis))
    base = len(old.elements)
    new = TupleShape((*old.elements, *([row_shape] * rows)))
    body, cond = body_of(w), condition_of(w)
    p = body.parameter(0)
    root = body.root

    # body: row leaves, reads through them, the new value's rows at the root
    leaf_rows = [body.add(Instruction.create(Opcode.GET_TUPLE_ELEMENT, row_shape, [p],
                                             name=f"row{r}", attrs={"index": base + r}),
                          before=root) for r in range(rows)]
    reads = _leaf_reads(body, k)
    for g in reads:
        for s in [u for u in g.users if u is not root]:
            r = _is_row_slice(s, axis)
            assert r is not None
            reshaped = body.add(Instruction.create(Opcode.RESHAPE, s.shape, [leaf_rows[r]],
                                                   name=s.name, metadata=s.metadata),
                                before=root)
            s.replace_all_uses_with(reshaped)
    rowsof = _Rows(body, axis, root, {id(g): leaf_rows for g in reads})
    new_rows = [rowsof.of(root.operand(k), r) for r in range(rows)]
    passthrough = next((g for g in reads), None) or body.add(Instruction.create(
        Opcode.GET_TUPLE_ELEMENT, leaf, [p], name="stacked", attrs={"index": k}), before=root)
    ops = list(root.operands)
    ops[k] = passthrough
    new_root = body.add(Instruction.create(Opcode.TUPLE, new, [*ops, *new_rows],
                                           name=root.name, metadata=root.metadata))
    body.root = new_root
    p.shape = new
    cond.parameter(0).shape = new

    # init: the rows of the leaf's initial value
    init = w.operand(0)
    if init.opcode is Opcode.TUPLE:
        elems = list(init.operands)
    else:
        elems = [comp.add(Instruction.create(Opcode.GET_TUPLE_ELEMENT, e, [init],
                                             attrs={"index": i}), before=w)
                 for i, e in enumerate(old.elements)]
    outer = _Rows(comp, axis, w, {})
    elems += [outer.of(elems[k], r) for r in range(rows)]
    new_init = comp.add(Instruction.create(Opcode.TUPLE, new, elems, name=init.name,
                                           metadata=init.metadata), before=w)
    w.set_operand(0, new_init)
    w.shape = new

    # after the loop: the stacked value, restacked from the row results
    users = [u for u in w.users if gte_index(u, w) == k]
    if users or w.is_root:
        one = ArrayShape(leaf.dtype, tuple(1 if i == axis else d for i, d in
                                           enumerate(leaf.dims)))
        pieces = []
        for r in range(rows):
            g = comp.add(Instruction.create(Opcode.GET_TUPLE_ELEMENT, row_shape, [w],
                                            attrs={"index": base + r}))
            pieces.append(comp.add(Instruction.create(Opcode.RESHAPE, one, [g])))
        stacked = comp.add(Instruction.create(Opcode.CONCATENATE, leaf, pieces,
                                              attrs={"dimensions": (axis,)},
                                              metadata=w.metadata))
        for u in users:
            u.replace_all_uses_with(stacked)
    # new instructions went in before anchors, their readers may come earlier: definitions
    # before uses again (what later passes and the backends read the lists in)
    body.instructions = body.post_order()
    comp.instructions = comp.post_order()
    return rows


@register(PASS)
class UnstackLoopState(FusionPass):
    """Carry stacked loop state as rows (module docstring); off unless `unstack_loop_state`."""

    OPTIONS: ClassVar[tuple[str, ...]] = ("unstack_loop_state", "unstack_max_rows",
                                          "unstack_max_row_rank")
    name: ClassVar[str] = PASS

    def run(self, module: Module) -> bool:

        config: FusionConfig = self.run_config(module)
        if not config.unstack_loop_state:
            return False
        trace = trace_of(module)
        changed = False
        comps = reachable_computations(module)
        counts = callers(module, comps)
        for comp, w in each_while(comps):
            if body_of(w).root.opcode is not Opcode.TUPLE:
                continue
            tup = w.shape
            assert isinstance(tup, TupleShape)
            for k in range(len(tup.elements)):
                axis, decision = unstack_legal(w, k, config)
                if axis is None and decision.rule == "unstack.writes":
                    continue  # not stacked at all: nothing to report
                leaf = tup.elements[k]
                figures = {"leaf": k, "shape": str(leaf), **source_figure(module, w)}
                if axis is not None:
                    assert isinstance(leaf, ArrayShape)
                    worth = unstack_profitable(leaf, config)
                    decision = decision if worth else worth
                if axis is None or not decision:
                    trace.record(PASS, w.name, w.name, decision.with_figures(**figures),
                                 comp.name)
                    continue
                own_computation(module, w, "body", counts)
                own_computation(module, w, "condition", counts)
                rows = unstack(w, k, axis)
                tup = w.shape  # (the rows are new elements at its end)
                assert isinstance(tup, TupleShape)
                trace.record(PASS, w.name, w.name, decision.with_figures(
                    **figures, rows=rows, row_shape=str(tup.elements[-1])), comp.name, True)
                changed = True
        return changed
