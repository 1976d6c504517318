"""A whole-loop fusion (`passes/fusion/loop_fusion.py`) as one kernel: the time loop inside.

    copy state and outputs from the inputs (skipped when the driver runs them in place)
    for blk in [0, N / B):                      parallel over blocks of B batch elements
                                                (B: 256-1024, `block_size`; with
                                                column copies, what fits the stack)
        uniform state u = its init              (a per-block copy: a random key, ...)
        for t in [0, S):                        the loop's iterations, in order
            u' = uniform part of the body(u, t)
            if t == S - 1: for j in [0, B):     leaves the body never reads (`final_only`)
                write them for element n
            for j in [0, B):                    vector: n = B*blk + j
                m_d[..] = d(state[n], ...)      every dot or large reduce of the body, every batch
                                                value one reads, once per element (`heavy`)
                state_k[.., n, ..] = body_k(state[n], tables[.., n], u, t)  every coordinate
                output_k[row(t), .., n, ..] = ...                           of element n
            u = u'
    a tail nest for the last N % B elements; then the uniform state's and the counter's final
    values, and the scan outputs that depend on no batch value (`urow`: the uniform part
    replayed once, writing their rows; it does not depend on the batch)

Each element's trajectory depends only on its own state and on uniform values, so running
element by element gives the loop's results (`batch_axes.infer` checked that every instruction
keeps batch elements apart). A block's state stays in L1 across all S iterations instead of
streaming through memory once per iteration, and one kernel call replaces S times the body's
kernels. Batch state lives in the kernel's output buffers (each paired in place with its input,
so the driver may pass the same memory); the counter at iteration t is `init + step*t`, so a
table row read at the counter is an affine index.

State leaves whose element rows are wider than `COLUMN_STATE_FROM` (a 10 x 10 grid per element)
live, for the block's S iterations, in a block-local copy laid out [coordinate, element]
(`state_columns`): the element loop reads and writes them a vector at a time, where the rows
would be loaded and stored lane by lane. Such blocks hold a multiple of `COLUMN_BLOCK_STEP`
elements whose copies fit on the stack (a heap copy would keep the blocks from running in
parallel; MinAtar's 10 x 10 grid: blocks of 32, 13 KB, in L1). Leaves the body never reads
(gymnax's observation, carried only to be returned) are written by their own element loop in
the last iteration only (`final_only`, `final_leaf`: a loop over their coordinates, compiled
small), so the iterations before compute only what the next one reads.

A leaf returned as per-block partials (`loop_fusion.partial_reductions`) is folded, element by
element, into an accumulator the element loop keeps in vector partials, and stored once per
step and block (`start_partials`, `accumulate`, `store_partials`); the blocks are then the
partials' (`N / blocks` elements).

Values are lowered as expressions at an index and shared only at the same index (and scope),
so a dot's or a reduce's operand, read at every position of its loop, would be computed again
for each of its outputs (a chain of dense layers, or brax's nested 3x3 products: the cost
multiplying with the depth). Every kernel of the body that loops per element (a dot, a reduce,
a fusion holding one), and every batch value such a kernel reads, is therefore materialised
first, per element, into a buffer of its per-element size (`heavy`, `materialise`); its readers
load from there.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Affine, Buffer, Val
from hlofuse.backends.kernel_ir.lower import index as ix
from hlofuse.backends.kernel_ir.lower.builder import Builder, LoweringError, array_shape, where
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.fusion.loop_fusion import (  # (the block rule: one place)
    block_size,
    state_bytes_per_element,
)

# state leaves whose element rows are wider than this are kept in block-local copies laid out
# element-minor (`state_columns`): narrower rows load as tiles (the vectorizer's
# `TILE_STRIDE_MAX`), wider ones would load and store lane by lane
COLUMN_STATE_FROM = 64
# a block with such copies holds a multiple of this many elements whose copies fit on the
# stack (`ir.STACK_LOCAL_BYTES`: heap scratch would keep the block loop from running parallel)
COLUMN_BLOCK_STEP = 32


def lower_whole_loop(b: Builder, fusion: Instruction, inputs: list[Buffer],
                     outputs: list[Buffer]) -> dict[int, int]:
    """Emit the kernel into `b`; returns its in-place pairs (output -> input)."""
    return _WholeLoop(b, fusion, inputs, outputs).emit()


class _WholeLoop:
    def __init__(self, b: Builder, fusion: Instruction, inputs: list[Buffer],
                 outputs: list[Buffer]) -> None:
        from hlofuse.analysis.loops import body_of, induction_variable, trip_count
        from hlofuse.passes.fusion.loop_fusion import (
            fused_loop,
            leaf_of,
            partial_sums,
            whole_loop_legal,
        )

        self.b = b
        self.w = w = fused_loop(fusion)
        plan, decision = whole_loop_legal(w)
        iv = induction_variable(w)
        trips = trip_count(w)
        if plan is None or iv is None or trips is None:
            raise LoweringError(f"{where(fusion)}: not a whole-fusible loop ({decision})")
        self.plan, self.iv, self.trips = plan, iv, trips
        self.body = body_of(w)
        self.root = self.body.root
        self.shapes = [array_shape(o) for o in self.root.operands]
        init = w.operand(0)
        self.init = init
        self.ins: list[Buffer | None] = [
            inputs[leaf.parameter_number or 0] if leaf.opcode is Opcode.PARAMETER else None
            for leaf in init.operands]
        results = fusion.fused_computation.root.operands
        kept = [int(leaf_of(o).attrs["index"]) for o in results]
        self.kept = kept
        self.outs: dict[int, Buffer] = {k: outputs[j] for j, k in enumerate(kept)}
        # leaves returned as per-block partials of a reduction over the batch
        # (`loop_fusion.partial_reductions`): their reduce, and how many blocks
        self.partials: dict[int, tuple[Instruction, int]] = {}
        for k, o in zip(kept, results, strict=True):
            sums = partial_sums(o)
            if sums is not None:  # [blocks, S]
                self.partials[k] = (sums, array_shape(o).dims[0])
        self.accs: dict[int, Buffer] = {}
        self.t: list[ir.Var] = []
        self.where = where(fusion)
        self.heavy = heavy(self.body, list(plan.axes), plan.batch)
        self.last = self.final_only()
        self.columns: dict[int, Buffer] = {}
        self.column_leaves: frozenset[int] = frozenset()
        self.start: Affine = ir.ZERO
        self.size = 0

    # ----- bindings -------------------------------------------------------------------------

    def counter(self, idx: ix.Index) -> list[Val]:
        g = self.b.g
        value = g.index(ir.affine(self.iv.init) + ir.affine(self.t[-1]) * self.iv.step)
        dtype = self.shapes[self.iv.index].dtype
        return [value if dtype.name == "s64" else
                g.alu(ir.ScalarOp(Opcode.CONVERT, dtype), value)]

    def bind(self, uniform: dict[int, Buffer]) -> None:
        """Point the body's reads of its parameter at this kernel's buffers."""
        b = self.b
        p = self.body.parameter(0)
        for user in p.users:
            if user.opcode is not Opcode.GET_TUPLE_ELEMENT:
                raise LoweringError(f"{where(user)}: the loop parameter used other than by "
                                    "get-tuple-element")
            k = int(user.attrs["index"])
            kind = self.plan.kinds[k]
            b.fixed.pop(id(user), None)
            b.params.pop(id(user), None)
            b.alias.pop(id(user), None)
            if kind == "counter":
                b.fixed[id(user)] = self.counter
            elif kind in ("state", "output", "urow"):
                b.params[id(user)] = [self.outs[k]]
            elif kind == "uniform":
                b.params[id(user)] = [uniform[k]]
            elif self.ins[k] is not None:
                b.params[id(user)] = [self.ins[k]]  # type: ignore[list-item]
            else:
                b.alias[id(user)] = self.init.operand(k)  # an inlined constant

    # ----- the kernel -------------------------------------------------------------------------

    def emit(self) -> dict[int, int]:
        b = self.b
        b.hoist_scalars = False  # scalars may depend on the iteration: the hoist pass moves them
        pairs: dict[int, int] = {}
        for k, kind in enumerate(self.plan.kinds):
            if kind in ("state", "output", "urow") and k not in self.partials:
                src = self.ins[k]
                if src is None:
                    raise LoweringError(f"{self.where}: carried leaf {k} starts as a constant")
                b.emit(ir.Copy(self.outs[k], src, if_distinct=True))
                pairs[self.kept.index(k)] = src.index
        n = self.plan.batch
        size = block_size(n, state_bytes_per_element(self.w, self.plan))
        self.column_leaves = self.wide_rows()
        column_bytes = sum(self.shapes[k].size // n * self.shapes[k].dtype.itemsize
                           for k in self.column_leaves)
        if column_bytes:
            fit = ir.STACK_LOCAL_BYTES // column_bytes // COLUMN_BLOCK_STEP * COLUMN_BLOCK_STEP
            if fit:
                size = min(size, fit)
            else:
                self.column_leaves = frozenset()  # not even a step's copies fit the stack
        for _red, groups in self.partials.values():  # a block per partial
            size = n // groups
            if column_bytes * size > ir.STACK_LOCAL_BYTES:
                self.column_leaves = frozenset()
        full = n // size
        if full > 1:
            with b.loop(full, "blk") as blk:
                self.block(ir.affine(blk) * size, size)
        elif full == 1:
            self.block(ir.ZERO, size)
        if n % size:
            self.block(ir.affine(full * size), n % size)
        self.finals()
        return pairs

    def uniform_buffers(self) -> dict[int, Buffer]:
        """Per-block copies of the uniform state, initialised from the loop's init."""
        b = self.b
        out: dict[int, Buffer] = {}
        for k, kind in enumerate(self.plan.kinds):
            if kind != "uniform":
                continue
            shape = self.shapes[k]
            buf = b.local(shape.dtype, shape.size, "u")
            out[k] = buf
            src = self.ins[k]
            for i in range(shape.size):
                at = ir.affine(i)
                value = b.g.load(src, at) if src is not None else b.value(
                    self.init.operand(k), ix.of_linear(tuple(shape.dims), at))
                b.emit(ir.Store(buf, at, value))
        return out

    def block(self, start: Affine, size: int) -> None:
        b = self.b
        uniform = self.uniform_buffers()
        self.bind(uniform)
        last = self.last
        self.columns = self.state_columns(size)
        self.start, self.size = start, size
        self.copy_columns(into=True)
        with b.loop(self.trips, "t") as t:
            self.t.append(t)
            new_uniform = self.uniform_updates(uniform)
            if last:  # leaves the body never reads: only the last iteration's values count
                then: list[ir.Stmt] = []
                with b.into(then), b.loop(size, "j") as j:
                    self.element(start + ir.affine(j), last)
                b.emit(ir.If(b.ge(ir.affine(t), self.trips - 1), then))
            self.start_partials()
            with b.loop(size, "j") as j:
                self.element(start + ir.affine(j), skip=last)
            self.store_partials(ir.affine(t))
            b.assign(new_uniform)
            self.t.pop()
        self.copy_columns(into=False)
        self.columns = {}

    def wide_rows(self) -> frozenset[int]:
        """State leaves the body reads whose element rows are wider than
        `COLUMN_STATE_FROM`."""
        out = []
        for k, kind in enumerate(self.plan.kinds):
            axis = self.plan.axes[k]
            if kind == "state" and k not in self.last and axis is not None and \
                    math.prod(self.shapes[k].dims[axis + 1:]) > COLUMN_STATE_FROM:
                out.append(k)
        return frozenset(out)

    def state_columns(self, size: int) -> dict[int, Buffer]:
        """Block-local copies, element-minor (`[coordinates, block]`), of the state leaves
        whose element rows are wider than `COLUMN_STATE_FROM` (`wide_rows`; blocks sized so
        the copies fit on the stack): the element loop then reads and writes them a whole
        vector at a time instead of lane by lane (MinAtar's 10 x 10 grids). Read by the body
        through `b.fixed`; copied in before the time loop and out after it."""
        b, g = self.b, self.b.g
        out: dict[int, Buffer] = {}
        for k in sorted(self.column_leaves):
            shape, axis = self.shapes[k], self.plan.axes[k]
            assert axis is not None
            per = shape.size // self.plan.batch
            buf = b.local(shape.dtype, per * size, "st")
            out[k] = buf
            other = tuple(d for i, d in enumerate(shape.dims) if i != axis)

            def load(idx: ix.Index, buf: Buffer = buf, axis: int = axis,
                     other: tuple[int, ...] = other) -> list[Val]:
                return [g.load(buf, self.column_index(idx.coords(g), axis, other))]

            for user in self.body.parameter(0).users:
                if user.opcode is Opcode.GET_TUPLE_ELEMENT and int(user.attrs["index"]) == k:
                    b.params.pop(id(user), None)
                    b.fixed[id(user)] = load
        return out

    def column_index(self, coords: tuple[Affine, ...] | list[Affine], axis: int,
                     other: tuple[int, ...]) -> Affine:
        """Where coordinates `coords` of a state leaf lie in its block-local column copy."""
        rest = ix.linearize(tuple(c for i, c in enumerate(coords) if i != axis), other)
        return rest * self.size + (coords[axis] - self.start)

    def copy_columns(self, into: bool) -> None:
        """The block's rows of each column-copied state leaf into its copy, or back out."""
        b, g = self.b, self.b.g
        for k, buf in self.columns.items():
            dims, axis = tuple(self.shapes[k].dims), self.plan.axes[k]
            assert axis is not None
            other = tuple(d for i, d in enumerate(dims) if i != axis)
            with contextlib.ExitStack() as stack:
                loops = [ir.affine(stack.enter_context(b.loop(d, "c"))) for d in other]
                j = stack.enter_context(b.loop(self.size, "j"))
                coords = [*loops[:axis], self.start + ir.affine(j), *loops[axis:]]
                row = ix.of_multi(dims, tuple(coords)).lin()
                col = self.column_index(coords, axis, other)
                if into:
                    b.emit(ir.Store(buf, col, g.load(self.outs[k], row)))
                else:
                    b.emit(ir.Store(self.outs[k], row, g.load(buf, col)))

    def start_partials(self) -> None:
        """Each partial's accumulator at its reduce's init (an identity), before a step's
        element loop."""
        b = self.b
        self.accs = {}
        for k, (red, _groups) in self.partials.items():
            dtype = array_shape(red).dtype
            acc = b.local(dtype, 1, "part")
            b.emit(ir.Store(acc, ir.ZERO, b.value(red.operand(1), ix.zero(()))))
            self.accs[k] = acc

    def store_partials(self, t: Affine) -> None:
        """The block's partials of step `t`, after its element loop: row the block's number
        (each block's thread writes a row of its own), column t."""
        b = self.b
        for k in self.partials:
            blk = b.g.idiv(self.start, self.size)
            b.emit(ir.Store(self.outs[k], blk * self.trips + t,
                            b.g.load(self.accs[k], ir.ZERO)))

    def accumulate(self, k: int, n: Affine) -> None:
        """Element `n`'s row value of partial leaf `k` folded into the block's accumulator
        (one reassociable reducer: the vector loop keeps partial sums per lane)."""
        from hlofuse.backends.kernel_ir.lower import scalar

        b = self.b
        red, _groups = self.partials[k]
        ((_buf, _at, value),) = self.row(k, n)
        acc = self.accs[k]
        (new,) = scalar.inline(b.g, red.attrs["to_apply"], [b.g.load(acc, ir.ZERO), value])
        b.emit(ir.Store(acc, ir.ZERO, new))

    def final_only(self) -> frozenset[int]:
        """State leaves the body never reads (gymnax's observation, carried only to be
        returned): computed in the last iteration alone, by an element loop of their own, so
        the iterations before write only what the next one reads."""
        read = {int(u.attrs["index"]) for u in self.body.parameter(0).users
                if u.opcode is Opcode.GET_TUPLE_ELEMENT and u.users}
        return frozenset(k for k, kind in enumerate(self.plan.kinds)
                         if kind == "state" and k not in read)

    def uniform_updates(self, uniform: dict[int, Buffer]) -> list[tuple[Buffer, Affine, Val]]:
        """The uniform state's next values, snapshot before the elements run (they read the
        current ones)."""
        b = self.b
        out = []
        for k, buf in uniform.items():
            shape = self.shapes[k]
            for i in range(shape.size):
                at = ir.affine(i)
                v = b.value(self.root.operand(k), ix.of_linear(tuple(shape.dims), at))
                tmp = b.local(v.dtype, 1, "un")
                b.emit(ir.Store(tmp, ir.ZERO, v))
                out.append((buf, at, b.g.load(tmp, ir.ZERO)))
        return out

    def materialise(self, n: Affine) -> None:
        """Each heavy value of element `n` into a buffer of its per-element size (in post
        order, so a later one reads the earlier ones' buffers); readers load from there."""
        b, g = self.b, self.b.g
        for instr, axis in self.heavy:
            dims = tuple(array_shape(instr).dims)
            other = tuple(d for k, d in enumerate(dims) if k != axis)
            buf = b.local(array_shape(instr).dtype, math.prod(other), "e")
            b.fixed.pop(id(instr), None)
            with contextlib.ExitStack() as stack:
                coords: list[Affine] = []
                for k, d in enumerate(dims):
                    coords.append(n if k == axis else
                                  ir.affine(stack.enter_context(b.loop(d, "e"))))
                at = ix.linearize(tuple(c for k, c in enumerate(coords) if k != axis), other)
                b.emit(ir.Store(buf, at, b.value(instr, ix.of_multi(dims, tuple(coords)))))

            def load(idx: ix.Index, buf: Buffer = buf, axis: int = axis,
                     other: tuple[int, ...] = other) -> list[Val]:
                m = idx.coords(g)
                return [g.load(buf, ix.linearize(
                    tuple(c for k, c in enumerate(m) if k != axis), other))]

            b.fixed[id(instr)] = load

    def element(self, n: Affine, only: frozenset[int] | None = None,
                skip: frozenset[int] = frozenset()) -> None:
        """Every coordinate of batch element `n` of every state and output leaf (of the
        leaves `only` names, when given; not of those in `skip`)."""
        b = self.b
        self.materialise(n)
        new: list[tuple[Buffer, Affine, Val]] = []
        for k, kind in enumerate(self.plan.kinds):
            if k in skip or (only is not None and k not in only):
                continue
            if kind == "state" and only is not None:
                self.final_leaf(k, n)
            elif kind == "state":
                shape, axis = self.shapes[k], self.plan.axes[k]
                dims = tuple(shape.dims)
                other = tuple(d for i, d in enumerate(dims) if i != axis)
                for coords in _coords(dims, axis, n):
                    idx = ix.of_multi(dims, coords)
                    value = b.value(self.root.operand(k), idx)
                    if k in self.columns:
                        assert axis is not None
                        new.append((self.columns[k], self.column_index(coords, axis, other),
                                    value))
                    else:
                        new.append((self.outs[k], idx.lin(), value))
            elif kind == "output" and k not in self.partials:
                new.extend(self.row(k, n))
        if only is None:  # (before the state's stores: a value is read where it is used)
            for k in self.partials:
                self.accumulate(k, n)
        b.assign(new)
        for instr, _ in self.heavy:
            b.fixed.pop(id(instr), None)

    def final_leaf(self, k: int, n: Affine) -> None:
        """Element `n` of a leaf only the last iteration writes (`final_only`), by a loop
        over its coordinates rather than every coordinate unrolled: it runs once, so it is
        written to compile small (MinAtar's 10 x 10 x 4 observation: 400 select chains)."""
        b = self.b
        dims, axis = tuple(self.shapes[k].dims), self.plan.axes[k]
        with contextlib.ExitStack() as stack:
            coords = tuple(n if i == axis else ir.affine(stack.enter_context(b.loop(d, "o")))
                           for i, d in enumerate(dims))
            idx = ix.of_multi(dims, coords)
            b.emit(ir.Store(self.outs[k], idx.lin(), b.value(self.root.operand(k), idx)))

    def row(self, k: int, n: Affine | None) -> list[tuple[Buffer, Affine, Val]]:
        """A dynamic-update-slice's update region for element `n` (all of it for a `urow`
        leaf, n None): where it lands (starts clamped like the interpreter's) and its
        values."""
        from hlofuse.passes.fusion.loop_fusion import row_write

        b = self.b
        found = row_write(self.root.operand(k), self.body.parameter(0), k)
        assert found is not None, f"{self.where}: leaf {k} is not written one slice at a time"
        dus, fusions = found
        for f in fusions:  # the fused computations' parameters stand for their operands
            for param in f.fused_computation.parameters:
                b.alias[id(param)] = f.operand(param.parameter_number or 0)
        upd = dus.operand(1)
        od, ud = tuple(array_shape(dus).dims), tuple(array_shape(upd).dims)
        axis = self.plan.axes[k]
        starts = []
        for d, s in enumerate(dus.operands[2:]):
            starts.append(b.clamp(b.value(s, ix.zero(())), od[d] - ud[d]))
        out = []
        for coords in _coords(ud, axis, n) if n is not None else _all_coords(ud):
            target = ix.linearize(tuple(starts[d] + coords[d] for d in range(len(od))), od)
            out.append((self.outs[k], target, b.value(upd, ix.of_multi(ud, coords))))
        return out

    def finals(self) -> None:
        """The counter's final value; the uniform state's, by replaying its updates once."""
        b = self.b
        iv = self.iv
        out_c = self.outs[iv.index]
        b.emit(ir.Store(out_c, ir.ZERO, b.g.const(iv.init + iv.step * self.trips, out_c.dtype)))
        if "uniform" not in self.plan.kinds and "urow" not in self.plan.kinds:
            return
        uniform = self.uniform_buffers()
        self.bind(uniform)
        with b.loop(self.trips, "t") as t:
            self.t.append(t)
            updates = self.uniform_updates(uniform)
            b.assign([s for k, kind in enumerate(self.plan.kinds) if kind == "urow"
                      for s in self.row(k, None)])
            b.assign(updates)
            self.t.pop()
        for k, buf in uniform.items():
            # element by element, not a Copy: a local holds a narrow float (f16, bf16, fp8, f4,
            # e8m0) in its compute type, so its bytes are not the output's storage bytes
            for i in range(buf.size):
                at = ir.affine(i)
                b.emit(ir.Store(self.outs[k], at, b.g.load(buf, at)))


_TRIVIAL = frozenset({Opcode.PARAMETER, Opcode.GET_TUPLE_ELEMENT, Opcode.CONSTANT})


def heavy(body: Computation, leaf_axes: list[int | None], n: int
          ) -> list[tuple[Instruction, int]]:
    """The values of `body` to materialise per element, in post order, with their batch axes:
    every kernel of the body that runs a loop per element (a dot, a reduce), and every batch
    value with more than one element per element that such a kernel reads. The others (a
    per-element map, CartPole's step) stay expressions, so the element loop vectorizes."""
    from hlofuse.passes.fusion import batch_axes
    from hlofuse.passes.fusion.batch_axes import loops_per_element as _reduces

    axes = batch_axes.infer(body, leaf_axes, n)
    out = []
    for instr in body.post_order():
        shape = instr.shape
        axis = axes[id(instr)][0] if id(instr) in axes and axes[id(instr)] else None
        if axis is None or not isinstance(shape, ArrayShape) or instr.opcode in _TRIVIAL:
            continue
        if _reduces(instr) or (shape.size // n > 1 and any(_reduces(u) for u in instr.users)):
            out.append((instr, axis))
    return out


def _coords(dims: tuple[int, ...], axis: int | None, n: Affine) -> list[tuple[Affine, ...]]:
    """Every multi-index of `dims` whose batch coordinate is `n` (others unrolled)."""
    assert axis is not None
    others = [range(d) if i != axis else [0] for i, d in enumerate(dims)]
    out = []
    for c in itertools.product(*others):
        out.append(tuple(n if i == axis else ir.affine(int(v)) for i, v in enumerate(c)))
    if math.prod(dims) == 0:
        return []
    return out


def _all_coords(dims: tuple[int, ...]) -> list[tuple[Affine, ...]]:
    """Every multi-index of `dims` (unrolled)."""
    return [tuple(ir.affine(int(v)) for v in c) for c in itertools.product(*map(range, dims))]


Coords = Callable[[int], list[tuple[Affine, ...]]]
