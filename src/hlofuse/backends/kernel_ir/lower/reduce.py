"""Reductions: reduce (also variadic, e.g. argmax) and reduce-window, as loops over local
accumulator buffers.

* `reduce` as a value (read by some other value of the kernel): a local accumulator per input
  starts at the init value; a loop over the reduced dimensions folds the (fused) input in, in
  row-major order of the reduced elements. A column reduction (at least COLUMN_MINOR
  contiguous kept elements after the last reduced dimension: a bias gradient summed over
  the batch, then used by an optimizer update) is instead computed whole, once, into local
  buffers by the same nest as a root reduce (a row of accumulators, the unit-stride loop
  innermost), and read from them: the per-element loop would stride across rows, and the
  vectorizer could only gather its lanes.
* `reduction_nest` — the loop nest of root reduces (kInput fusions, unfused reduce). Roots
  reducing the same input shape over the same dimensions share one nest; roots shaped like the
  reduce input (multi-output siblings) are written in it, once per input element. Row reduction
  (reduced dims minor): one accumulator per output element. Column reduction (kept dims after
  the last reduced one): a row of accumulators whose innermost loop is unit stride.

The combiner is the reducer computation inlined (`scalar.inline`), so a float narrower than f32
(f16, bf16) accumulates in its own type, rounded after every application, in order, as the
interpreter and XLA's CPU backend do (their order comes from `simplify`'s tree-reduction and
scan rewrites). Reordering (vectorized partial accumulators) is the `vectorize` pass's
business: it only reassociates reducers `scalar.simple_reducer` recognises, never a sum or
product of a narrow float, or lane-wise combinations XLA's semantics allow. Where a reduction
is short and strided along its reduced dimension (the middle one of [64, 11, 3]: a row nest
whose accumulator row is short), `vectorize` puts its outputs in lanes and keeps the order.
reduce-window folds the window positions in XLA's loop order (`window_order`: row-major, or one
window dimension's last offsets in a second nest) and only the operand elements: a position in
the padding or a base-dilation hole contributes nothing (XLA's CPU, the interpreter). A simple
reducer (sum, max, ...: `scalar.simple_reducer`) folds its identity there instead (-0.0 for a
float sum, -inf for max: exactly nothing, whatever the init), which keeps the loop a select the
vectorizer takes; any other reducer's fold is itself guarded.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Affine, Buffer, Val
from hlofuse.backends.kernel_ir.lower import index as ix
from hlofuse.backends.kernel_ir.lower import scalar
from hlofuse.backends.kernel_ir.lower.builder import (
    Builder,
    LoweringError,
    array_shape,
    dims_of,
    handles,
    where,
)
from hlofuse.backends.kernel_ir.lower.index import Index
from hlofuse.backends.subnormals import e8m0_init_last
from hlofuse.backends.window_order import peeled_offset
from hlofuse.ir.computation import Computation
from hlofuse.ir.dtypes import F32, PRED, DType
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import leaves
from hlofuse.passes.fusion.batch_axes import unrolled_reduce


def _given(v: Val) -> Callable[[], Val]:
    """A case value already computed (`Builder.cases` takes thunks)."""
    return lambda: v


ACC_ROW_STACK = 4096  # a row of accumulators up to this long lives on the stack
COLUMN_BLOCKS = 16  # a large column reduction's blocks of rows (`column_blocks`)
COLUMN_BLOCK_TOTAL = 1 << 18  # ... of at least this many input elements
COLUMN_BLOCK_ELEMENTS = 1 << 14  # ... each block folding at least this many
COLUMN_MINOR = 8  # contiguous kept elements for a reduce value to be computed whole


def reducer_identity(comp: Computation, dtype: DType) -> Any:
    """The identity of `comp` if it is a simple reducer (`scalar.simple_reducer`: -0.0 for a
    float sum, -inf for max, ...) with one on `dtype`; None otherwise."""
    op = scalar.simple_reducer(comp)
    if op is None:
        return None
    try:
        return scalar.identity(op, dtype)
    except KeyError:  # an op without an identity on this type
        return None


def reducer(instr: Instruction) -> Computation:
    comp = instr.attrs.get("to_apply")
    if comp is None:
        raise LoweringError(f"{where(instr)}: missing to_apply= reducer")
    return comp


class Accumulators:
    """The accumulators of one reduce: a local buffer per input (one element, or a row)."""

    def __init__(self, b: Builder, instr: Instruction, row: int = 1) -> None:
        self.b = b
        self.instr = instr
        self.comp = reducer(instr)
        n = instr.operand_count // 2
        self.inputs = list(instr.operands[:n])
        self.inits = list(instr.operands[n:])
        self.dtypes = [array_shape(x).dtype for x in self.inputs]
        self.bufs: list[Buffer] = [b.local(t, row, "acc") for t in self.dtypes]
        self.row = row
        # a reduce of one element per output is that element (XLA's algebraic simplifier makes
        # it a reshape: the init and the reducer are not applied)
        self.single = instr.opcode is Opcode.REDUCE and all(
            dims_of(self.inputs[0])[int(d)] == 1 for d in instr.dimensions)
        # e8m0 from the constant 2^-127: the init is folded last (`results`) for the outputs
        # `last` names (independent outputs decide each for itself), a flag per accumulator
        # says whether an element has been folded yet
        self.last = e8m0_init_last(instr) if not self.single else ()
        self.started = b.local(PRED, row, "started") if any(self.last) else None

    def init(self, at: Affine = ir.ZERO) -> None:
        b = self.b
        for buf, i in zip(self.bufs, self.inits, strict=True):
            b.emit(ir.Store(buf, at, b.value(i, ix.zero(dims_of(i)))))
        if self.started is not None:
            b.emit(ir.Store(self.started, at, b.g.const(False, PRED)))

    def init_identity(self, at: Affine = ir.ZERO) -> None:
        """acc[at] = the reducer's identity (a block's start: `column_blocks` checked there
        is one)."""
        value = self.neutral()
        assert value is not None
        self.b.emit(ir.Store(self.bufs[0], at, value))

    def fold(self, xs: list[Val], at: Affine = ir.ZERO) -> None:
        """acc[at] = reducer(acc[at], xs) (acc[at] = xs for a reduce of one element, and for
        the first element of an init-last reduce)."""
        b = self.b
        if self.single:
            b.assign([(buf, at, v) for buf, v in zip(self.bufs, xs, strict=True)])
            return
        accs = [b.g.load(buf, at) for buf in self.bufs]
        new = scalar.inline(b.g, self.comp, accs + xs)
        if self.started is not None:
            started = b.g.load(self.started, at)
            new = [b.cases(t, [(started, _given(v)), (None, _given(x))]) if lst else v
                   for t, v, x, lst in zip(self.dtypes, new, xs, self.last, strict=True)]
            b.assign([*((buf, at, v) for buf, v in zip(self.bufs, new, strict=True)),
                      (self.started, at, b.g.const(True, PRED))])
            return
        b.assign([(buf, at, v) for buf, v in zip(self.bufs, new, strict=True)])

    def fold_where(self, inside: Val, xs: list[Callable[[], Val]], at: Affine = ir.ZERO) -> None:
        """acc[at] = reducer(acc[at], xs) where `inside` holds (the xs computed only there),
        acc[at] unchanged elsewhere."""
        b = self.b
        accs = [b.g.load(buf, at) for buf in self.bufs]

        def folded(k: int) -> Val:
            return scalar.inline(b.g, self.comp, accs + [x() for x in xs])[k]

        new = [b.cases(t, [(inside, functools.partial(folded, k)), (None, _given(a))])
               for k, (t, a) in enumerate(zip(self.dtypes, accs, strict=True))]
        b.assign([(buf, at, v) for buf, v in zip(self.bufs, new, strict=True)])

    def neutral(self) -> Val | None:
        """A value the reducer may fold at a padding position without changing anything: the
        identity of a simple reducer (-0.0 for a float sum, -inf for max, ...); None when the
        reducer has none (then the fold itself is guarded: `fold_where`)."""
        if len(self.dtypes) != 1:
            return None
        value = reducer_identity(self.comp, self.dtypes[0])
        return None if value is None else self.b.g.const(value, self.dtypes[0])

    def results(self, at: Affine = ir.ZERO) -> list[Val]:
        b = self.b
        accs = [b.g.load(buf, at) for buf in self.bufs]
        if self.started is None:
            return accs
        started = b.g.load(self.started, at)
        inits = [b.value(i, ix.zero(dims_of(i))) for i in self.inits]
        last = scalar.inline(b.g, self.comp, accs + inits)
        return [b.cases(t, [(started, _given(v)), (None, _given(a))]) if lst else a
                for t, v, a, lst in zip(self.dtypes, last, accs, self.last, strict=True)]


def _split(instr: Instruction) -> tuple[tuple[int, ...], list[int]]:
    in_dims = dims_of(instr.operand(0))
    return in_dims, sorted(int(d) for d in instr.dimensions)


@handles(Opcode.REDUCE)
def _reduce_value(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    """The reduce's result leaves at output index `idx` (an inner accumulation loop, or a load
    from the whole reduce computed once: `_column_buffers`)."""
    if _computed_whole(b, instr):
        return [b.load(buf, idx) for buf in _column_buffers(b, instr)]
    in_dims, red = _split(instr)
    out = idx.coords(b.g)
    kept = [d for d in range(len(in_dims)) if d not in red]
    acc = Accumulators(b, instr)
    acc.init()
    full: list[Affine] = [ir.ZERO] * len(in_dims)
    for k, d in enumerate(kept):
        full[d] = out[k]
    if any(in_dims[d] == 0 for d in red):
        return acc.results()
    _fold_over(b, acc, in_dims, [d for d in red if in_dims[d] != 1], full)
    return acc.results()


def _computed_whole(b: Builder, instr: Instruction) -> bool:
    """Is `instr` a column reduction to compute whole (see the module docstring)? Not inside a
    whole loop (whose body computes each element itself), and only in default layouts."""
    if not b.hoist_scalars:
        return False
    in_dims, red = _split(instr)
    if not red or max(red) == len(in_dims) - 1:
        return False  # a row reduction: its innermost loop is the unit-stride one already
    if math.prod(in_dims[max(red) + 1:]) < COLUMN_MINOR:
        return False
    inputs = instr.operands[:instr.operand_count // 2]
    return all(s.has_default_layout for s in (*map(array_shape, inputs), *leaves(instr.shape)))


def _column_buffers(b: Builder, instr: Instruction) -> list[Buffer]:
    """Local buffers holding the whole reduce (one per leaf), computed in the preamble by
    `reduction_nest` the first time it is asked for (before any preamble loop being built
    that reads it: `Builder.at_preamble`)."""
    key = ("column-reduce", id(instr))
    found = b.scopes[0].get(key)
    if isinstance(found, list):
        return found
    with b.at_preamble():
        outs = [b.local(s.dtype, s.size, "col") for s in leaves(instr.shape)]
        b.comment("a column reduce, computed whole")
        reduction_nest(b, [(instr, list(enumerate(outs)))], [])
        b.scopes[0][key] = outs
    return outs


def _fold_over(b: Builder, acc: Accumulators, in_dims: tuple[int, ...], loops: list[int],
               full: list[Affine]) -> None:
    if not loops:
        at = ix.of_multi(in_dims, full)
        acc.fold([b.value(x, at) for x in acc.inputs])
        return
    d = loops[0]
    if not b.hoist_scalars and unrolled_reduce(acc.instr):
        for k in range(in_dims[d]):  # inside a whole loop: straight-line, the same order
            _fold_over(b, acc, in_dims, loops[1:], [*full[:d], ir.affine(k), *full[d + 1:]])
        return
    with b.loop(in_dims[d], "r") as r:
        full = list(full)
        full[d] = ir.affine(r)
        _fold_over(b, acc, in_dims, loops[1:], full)


@handles(Opcode.REDUCE_WINDOW)
def _reduce_window_value(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    """reduce-window at output index `idx`: a loop over the window; positions in the padding
    or in base-dilation holes contribute the init value."""
    acc = Accumulators(b, instr)
    in_dims = dims_of(acc.inputs[0])
    window = instr.attrs.get("window")
    if window is None and not in_dims:
        window = ()  # a scalar's window is empty (XLA's verifier allows leaving it out)
    if window is None or len(window) != len(in_dims):
        raise LoweringError(f"{where(instr)}: needs a window= with one entry per dimension")
    if any(w.reversal for w in window):
        raise LoweringError(f"{where(instr)}: window reversal is not defined for reduce-window")
    out = idx.coords(b.g)
    acc.init()
    spans = [(0, w.size) for w in window]
    peel = peeled_offset(in_dims, window, leaves(instr.shape)[0].dims)
    if peel is None:
        _window_loops(b, acc, in_dims, window, out, spans, [])
    else:  # XLA's loop order: the peeled dimension's last offsets in a second nest
        k, v = peel
        _window_loops(b, acc, in_dims, window, out, [*spans[:k], (0, v), *spans[k + 1:]], [])
        _window_loops(b, acc, in_dims, window, out,
                      [*spans[:k], (v, window[k].size), *spans[k + 1:]], [])
    return acc.results()


def _window_loops(b: Builder, acc: Accumulators, in_dims: tuple[int, ...], window: list,
                  out: tuple[Affine, ...], spans: list[tuple[int, int]],
                  pos: list[Affine]) -> None:
    d = len(pos)
    if d < len(window):
        lo, hi = spans[d]
        if hi - lo == 1:
            _window_loops(b, acc, in_dims, window, out, spans, [*pos, ir.affine(lo)])
        elif hi > lo:
            with b.loop(hi, "w", lo) as v:
                _window_loops(b, acc, in_dims, window, out, spans, [*pos, ir.affine(v)])
        return
    conds: list[Val] = []
    src: list[Affine] = []
    for k, w in enumerate(window):
        p = out[k] * w.stride + pos[k] * w.window_dilation - w.pad_lo
        hi = (in_dims[k] - 1) * w.base_dilation
        conds += [b.ge(p, 0), b.lt(p, hi + 1)]
        if w.base_dilation > 1:
            shifted = p + w.base_dilation * (1 + abs(w.pad_lo))
            r = b.g.imod(shifted, w.base_dilation)
            from hlofuse.backends.kernel_ir.lower.builder import EQ, S64

            conds.append(b.g.alu(EQ, b.index_val(r), b.g.const(0, S64)))
            src.append(b.g.idiv(shifted, w.base_dilation) - (1 + abs(w.pad_lo)))
        else:
            src.append(p)
    inside = b.all_of(conds)
    neutral = acc.neutral()
    if neutral is None:
        def read(x: Instruction) -> Callable[[], Val]:
            return lambda: b.value(x, ix.of_multi(in_dims, src))

        acc.fold_where(inside, [read(x) for x in acc.inputs])
        return
    (x,) = acc.inputs
    acc.fold([b.cases(array_shape(x).dtype, [
        (inside, lambda: b.value(x, ix.of_multi(in_dims, src))),
        (None, lambda: neutral),
    ])])


# ----- kernel-level nests of root reduces ------------------------------------------------------


def reduction_nest(b: Builder, reduces: list[tuple[Instruction, list[tuple[int, Buffer]]]],
                   siblings: list[tuple[Instruction, int, Buffer]]) -> None:
    """One loop nest computing every reduce in `reduces` (same input dims and reduced dims; each
    with its (leaf, output buffer) list) and writing the input-shaped `siblings`."""
    first = reduces[0][0]
    in_dims, red = _split(first)
    kept = [d for d in range(len(in_dims)) if d not in red]
    last = max(red) if red else -1
    minor = [d for d in kept if d > last and red]
    outer = [d for d in kept if d not in minor]
    row = math.prod(in_dims[d] for d in minor)
    out_dims = tuple(in_dims[d] for d in kept)
    if math.prod(out_dims) == 0:
        return
    full: list[Affine] = [ir.ZERO] * len(in_dims)
    _outer(b, reduces, siblings, in_dims, red, minor, [d for d in outer if in_dims[d] != 1],
           outer, row, full)


def _outer(b: Builder, reduces: list[tuple[Instruction, list[tuple[int, Buffer]]]],
           siblings: list[tuple[Instruction, int, Buffer]], in_dims: tuple[int, ...],
           red: list[int], minor: list[int], loops: list[int], outer: list[int], row: int,
           full: list[Affine]) -> None:
    if loops:
        d = loops[0]
        with b.loop(in_dims[d], "i") as v:
            full = list(full)
            full[d] = ir.affine(v)
            _outer(b, reduces, siblings, in_dims, red, minor, loops[1:], outer, row, full)
        return
    out_base = ix.linearize(tuple(full[d] for d in outer), tuple(in_dims[d] for d in outer))
    blocks = column_blocks(reduces, in_dims, red, row) if b.column_blocks and not any(
        in_dims[d] != 1 for d in outer) else 1
    if blocks > 1:
        _blocked_column(b, reduces, siblings, in_dims, red, minor, row, full, out_base, blocks)
        return
    accs = [Accumulators(b, r, row) for r, _ in reduces]
    if row == 1:
        for a in accs:
            a.init()
    else:
        with b.loop(row, "j") as j:
            for a in accs:
                a.init(ir.affine(j))
    _inner(b, accs, siblings, in_dims, [d for d in red if in_dims[d] != 1], minor, full)
    if row == 1:
        for a, (_r, outs) in zip(accs, reduces, strict=True):
            vals = a.results()
            for k, buf in outs:
                b.emit(ir.Store(buf, out_base, vals[k]))
    else:
        with b.loop(row, "j") as j:
            at = ir.affine(j)
            for a, (_r, outs) in zip(accs, reduces, strict=True):
                vals = a.results(at)
                for k, buf in outs:
                    b.emit(ir.Store(buf, out_base * row + at, vals[k]))


def column_blocks(reduces: list[tuple[Instruction, list[tuple[int, Buffer]]]],
                  in_dims: tuple[int, ...], red: list[int], row: int) -> int:
    """How many blocks of rows a large column reduction is cut into (1: not cut). Cut: every
    reduce has one input of f32/f64 or an integer type, a simple reducer with an identity
    (`scalar.simple_reducer`: a sum, max, min, and, or ...) and no e8m0 init-last rule; the
    reduction folds at least COLUMN_BLOCK_TOTAL input elements, and its outermost reduced
    dimension divides into COLUMN_BLOCKS (or 8, 4, 2) blocks of at least COLUMN_BLOCK_ELEMENTS
    each."""
    total = math.prod(in_dims[d] for d in red) * row
    if row <= 1 or not red or total < COLUMN_BLOCK_TOTAL:
        return 1
    for r, _ in reduces:
        if r.opcode is not Opcode.REDUCE or r.operand_count != 2 or any(e8m0_init_last(r)):
            return 1
        dtype = array_shape(r.operands[0]).dtype
        if (dtype.is_float and dtype.bits < 32) or dtype.is_complex or \
                reducer_identity(reducer(r), dtype) is None:
            return 1
    outermost = in_dims[min(red)]
    for blocks in (COLUMN_BLOCKS, 8, 4, 2):
        if outermost % blocks == 0 and total // blocks >= COLUMN_BLOCK_ELEMENTS:
            return blocks
    return 1


def _blocked_column(b: Builder, reduces: list[tuple[Instruction, list[tuple[int, Buffer]]]],
                    siblings: list[tuple[Instruction, int, Buffer]], in_dims: tuple[int, ...],
                    red: list[int], minor: list[int], row: int, full: list[Affine],
                    out_base: Affine, blocks: int) -> None:
    """A column reduction cut along its outermost reduced dimension into `blocks` blocks of
    rows: each block folds its rows into its own row of accumulators (started at the reducer's
    identity) and stores them into `part[block]`; the block loop is a top-level loop the
    `parallel` pass may run on threads (the blocks write disjoint rows of `part`). Then each
    output is the init folded with the blocks' rows in block order: the same result whatever
    the thread count."""
    d = min(red)
    size = in_dims[d] // blocks
    parts = [[b.local(array_shape(x).dtype, blocks * row, "part")
              for x in r.operands[: r.operand_count // 2]] for r, _ in reduces]
    with b.loop(blocks, "blk") as blk:
        accs = [Accumulators(b, r, row) for r, _ in reduces]
        with b.loop(row, "j") as j:
            for a in accs:
                a.init_identity(ir.affine(j))
        with b.loop(size, "r") as r_var:
            inner = list(full)
            inner[d] = ir.affine(blk) * size + ir.affine(r_var)
            _inner(b, accs, siblings, in_dims, [x for x in red if x != d and in_dims[x] != 1],
                   minor, inner)
        with b.loop(row, "j") as j:
            at = ir.affine(blk) * row + ir.affine(j)
            for a, bufs in zip(accs, parts, strict=True):
                for buf, v in zip(bufs, a.results(ir.affine(j)), strict=True):
                    b.emit(ir.Store(buf, at, v))
    final = [Accumulators(b, r, row) for r, _ in reduces]
    with b.loop(row, "j") as j:
        at = ir.affine(j)
        for a, bufs, (_r, outs) in zip(final, parts, reduces, strict=True):
            a.init(at)
            with b.loop(blocks, "blk") as blk:
                a.fold([b.g.load(buf, ir.affine(blk) * row + at) for buf in bufs], at)
            vals = a.results(at)
            for k, buf in outs:
                b.emit(ir.Store(buf, out_base * row + at, vals[k]))


def _inner(b: Builder, accs: list[Accumulators], siblings: list[tuple[Instruction, int, Buffer]],
           in_dims: tuple[int, ...], loops: list[int], minor: list[int],
           full: list[Affine]) -> None:
    if loops:
        d = loops[0]
        with b.loop(in_dims[d], "r") as v:
            full = list(full)
            full[d] = ir.affine(v)
            _inner(b, accs, siblings, in_dims, loops[1:], minor, full)
        return
    big_minor = [d for d in minor if in_dims[d] != 1]
    if big_minor:
        d = big_minor[0]
        with b.loop(in_dims[d], "j") as v:
            full = list(full)
            full[d] = ir.affine(v)
            _inner(b, accs, siblings, in_dims, [], [m for m in minor if m != d], full)
        return
    at = ix.of_vars(in_dims, full)
    jrow = ix.linearize(tuple(full[d] for d in _minor_of(in_dims, accs)),
                        tuple(in_dims[d] for d in _minor_of(in_dims, accs)))
    for a in accs:
        a.fold([b.value(x, at) for x in a.inputs], jrow if a.row > 1 else ir.ZERO)
    for s, k, buf in siblings:
        b.emit(ir.Store(buf, at.lin(), b.values(s, at)[k]))


def _minor_of(in_dims: tuple[int, ...], accs: list[Accumulators]) -> list[int]:
    red = sorted(int(d) for d in accs[0].instr.dimensions)
    last = max(red) if red else -1
    return [d for d in range(len(in_dims)) if d > last and d not in red and red]


def dot_value(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    """A dot's element at `idx` as its own reduction over the contracting dimensions (used
    inside a whole loop, where each batch element computes its own matrix-vector product;
    elsewhere a dot is a library GEMM). Accumulates in f32 for f32/f16/bf16, f64 for f64, and in
    the result type for integers (wrapping), like the GEMM."""
    from hlofuse.ir.dtypes import F64, S32, S64

    def dims_dtype(x: Instruction) -> DType:
        return array_shape(x).dtype

    lhs, rhs = instr.operand(0), instr.operand(1)
    ld, rd = dims_of(lhs), dims_of(rhs)
    a = instr.attrs
    lb = [int(d) for d in a.get("lhs_batch_dims", ())]
    rb = [int(d) for d in a.get("rhs_batch_dims", ())]
    lc = [int(d) for d in a.get("lhs_contracting_dims", ())]
    rc = [int(d) for d in a.get("rhs_contracting_dims", ())]
    lf = [d for d in range(len(ld)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rd)) if d not in rb and d not in rc]
    out = array_shape(instr).dtype
    acc_t = (F64 if out.bits == 64 else F32) if out.is_float else (S64 if out.bits == 64
                                                                  else S32)
    floats = [d for d in (dims_dtype(lhs), dims_dtype(rhs)) if d.is_float]
    if not out.is_float:
        acc_t = out
        if floats:  # float operands, integral result: summed as floats, then converted
            acc_t = F64 if any(d.bits == 64 for d in floats) else F32
    m = idx.coords(b.g)
    lm: list[Affine] = [ir.ZERO] * len(ld)
    rm: list[Affine] = [ir.ZERO] * len(rd)
    for i, (x, y) in enumerate(zip(lb, rb, strict=True)):
        lm[x] = rm[y] = m[i]
    for i, x in enumerate(lf):
        lm[x] = m[len(lb) + i]
    for i, y in enumerate(rf):
        rm[y] = m[len(lb) + len(lf) + i]
    acc = b.local(acc_t, 1, "dot")
    g = b.g
    b.emit(ir.Store(acc, ir.ZERO, g.const(0, acc_t)))

    def cvt(v: Val) -> Val:
        if out.is_float and not v.dtype.is_float:  # XLA: integral operands become `out` first
            v = g.alu(ir.ScalarOp(Opcode.CONVERT, out), v)
        return v if v.dtype == acc_t else g.alu(ir.ScalarOp(Opcode.CONVERT, acc_t), v)

    def fold(k: int) -> None:
        if k == len(lc):
            x = cvt(b.value(lhs, ix.of_multi(ld, lm)))
            y = cvt(b.value(rhs, ix.of_multi(rd, rm)))
            prod = g.alu(ir.ScalarOp(Opcode.MULTIPLY, acc_t), x, y)
            b.emit(ir.Store(acc, ir.ZERO, g.alu(ir.ScalarOp(Opcode.ADD, acc_t),
                                                g.load(acc, ir.ZERO), prod)))
            return
        with b.loop(ld[lc[k]], "c") as c:
            lm[lc[k]] = rm[rc[k]] = ir.affine(c)
            fold(k + 1)

    fold(0)
    result = g.load(acc, ir.ZERO)
    return [result if acc_t == out else g.alu(ir.ScalarOp(Opcode.CONVERT, out), result)]
