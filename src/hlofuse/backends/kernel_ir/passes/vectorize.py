"""Vectorize innermost loops explicitly: W lanes per step, then a scalar tail.

    for i in [0, 2051): out[i] = sin(a[i]) * 2
 -> for i in [0, 2048) vector 8: out[i] = sin(a[i]) * 2       (lanes: i .. i+7)
    for i in [2048, 2051):       out[i] = sin(a[i]) * 2       (the tail, scalar)

The width W comes from the target's vector register size (`target.Target`) and the narrowest
compute type in the loop (4-byte lanes -> vbytes/4 lanes). Before a loop is vectorized, inner
loops shorter than W (up to `UNROLL_MAX` iterations, and only while the body stays within
`UNROLL_VALUES_MAX` values) are unrolled into it, so an [n, 4] layout
vectorizes over n with the 4 columns as separate vectors instead of not at all; a row of
accumulators then read and written only at constant positions becomes one accumulator per
position (`scalarize`). Short strided reductions put their outputs in lanes instead of being
vectorized along themselves (below). Then:

* strided loads whose rows are read whole become `tile` values (a contiguous block of
  `stride * W` elements loaded and transposed in registers), other non-contiguous loads stay
  per-lane gathers;
* a group of stores covering every offset of a stride-s row becomes one `StoreTile`
  (transposed in registers, stored contiguously);
* locals used only inside the loop (accumulators of small reductions, guarded temporaries) are
  privatised: each becomes a `lanes` buffer, one register per lane;
* a reduction into an accumulator the loop does not index (a row reduction) keeps partial
  accumulators in `lanes` buffers that start at the reducer's identity: up to ACCUMULATORS
  vectors (shared among the loop's reductions), the loop running that many copies of its body
  per iteration (`step`), copy j on lanes v + j*W into partial j, so the chains of adds are
  independent; whole vectors left over run into the first partial, then the partials are
  combined pairwise and across lanes by a tree (`lanes_reduce`, before the scalar tail). Only
  reducers that may be reassociated (the op table's `REASSOCIATIVE_REDUCERS` on one type, not
  the sums and products of f16/bf16, which round after every add in XLA's order, nor float
  products, which XLA multiplies in order: under FTZ the grouping decides where a partial
  product underflows to 0 and meets an infinity) are, others leave the loop scalar.
  The order is XLA CPU's kind (YNNPACK's row reduction: vector partials, lanes combined
  pairwise), not the interpreter's (numpy's pairwise sum in f64).

Outputs in lanes (`short_reduction`, `outputs_in_lanes`): a reduction loop shorter than
SHORT_REDUCTION_VECTORS * W that reads an operand with a stride other than 0 or 1 along itself
(the middle dimension of [64, 11, 3], a transposed minor one) would be a vector step of lane
gathers, a horizontal combine and a scalar tail per output. Instead the loop over its outputs
is vectorized: short inner loops unrolled, the reduction loops kept (sequential, inside the
vector loop, one accumulator register per lane) and jammed together (`jam.regroup`), so
every lane sums its own output in the scalar loop's order (exact for every type, f16/bf16
included; the same on any vector width and thread count) and operands shared by several
reductions load once. A contiguous row (stride 1) keeps the partial-accumulator schedule.

Legality, checked before any change: the body holds only stores, lets, comments and such kept
reduction loops (no `If`, no other inner loop after unrolling, no library call or copy; a kept
loop stores only privatised accumulators); every store to a buffer that is not
privatised either writes a lane-distinct address (the index has a nonzero coefficient on the
loop variable and no value term that depends on it) with loads of that buffer only at the same
address (read-modify-write per lane) or at addresses only that lane writes, before the first
store (`_own_row_reads`), or is a recognised reduction; a `cond` whose condition
varies by lane computes both sides on every lane, so each load it guards must be contiguous
along the loop, read as a masked load (`mload`, `mask_guarded`) that touches only the lanes
their conditions select (a window's padding, the first taps of jnp.cumsum's row scan) unless it
stays in bounds over the whole loop, or the same on every lane and in bounds; a guarded gather
keeps the loop scalar (read on every lane it costs more than the branch saves). Loops that
fail stay scalar and correct.
"""

from __future__ import annotations

import math

from hlofuse.backends.kernel_ir import ir, naming
from hlofuse.backends.kernel_ir.ir import Affine, Buffer, Graph, Stmt, Val, Var
from hlofuse.backends.kernel_ir.lower.scalar import identity
from hlofuse.backends.kernel_ir.passes.jam import regroup
from hlofuse.backends.kernel_ir.rewrite import Rewriter
from hlofuse.backends.kernel_ir.target import Target
from hlofuse.ir.dtypes import PRED, DType
from hlofuse.ir.opcodes import REASSOCIATIVE_REDUCERS, Opcode

# Element types with vector lanes (the cpu backend's `cvec` tables).
LANE_TYPES = frozenset({"pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16",
                        "bf16", "f32", "f64"})
# Strided loads of rows up to this many elements wide are read as tiles (whole vectors and
# shuffles, `hf_deintN`), wider ones lane by lane. An initializer of 16 lane loads costs GCC
# 12 about 7 ms of -O2 where a tile's column costs 2-3: brax's ant (positional; rows of 27,
# 36 and 64) compiled its kernels in 16.3 s of compiler CPU with 16 here, 12.2 s with 64, its
# rollout as fast (152/150 against 154/148 ms, alternated runs on AVX-512 Zen).
TILE_STRIDE_MAX = 64
WIDE_TILE_FROM = 16  # wider rows are tiles only where half their columns are read
UNROLL_MAX = 16  # inner loops up to this many iterations may be unrolled into a vector loop
# Values (loads, arithmetic, ...) the body of a vector loop may hold once its inner loops are
# unrolled; a larger one keeps its loop nest (scalar). GCC's time on one basic block grows
# faster than its size: brax's ant (positional) unrolled a [64, 9, 3] gather chain into 3,607
# values, 60 s of -O2 (2 GB), a 2,000-value one 7 s; with this limit the whole program compiled
# in 17 s instead of 90 and ran faster (168 -> 155 ms; ant (spring) 86 -> 63 ms, hopper (MJX)
# 40 -> 35 ms): a body that large spills its registers anyway (AVX-512 host, measured at 500,
# 1000 and 3000: 500 made hopper slower again).
UNROLL_VALUES_MAX = 1000
# Outputs in lanes: a reduction loop shorter than this many vectors runs sequentially inside a
# vector loop over its outputs (`short_reduction`), not vectorized along itself.
SHORT_REDUCTION_VECTORS = 2
LANES_UNROLL_MAX = 64  # statements the outputs-in-lanes schedule may unroll a body into
ACCUMULATORS = 4  # vector partial accumulators of a reduction loop (shared by its reductions)
# Reducers whose result depends on the order for floats narrower than f32 (rounded to the type
# after every application): never reassociated there.
IN_ORDER = frozenset({Opcode.ADD, Opcode.MULTIPLY})


def vectorize(kernel: ir.Kernel, target: Target) -> None:
    if target.vector_bytes <= 0:
        return
    kernel.body = _Vectorizer(kernel, target).block(kernel.body)


def compute_bytes(dtype: DType) -> int:
    if dtype.is_float:
        return 8 if dtype.bits == 64 else 4
    return max(1, dtype.bits // 8)




class _Vectorizer:
    def __init__(self, kernel: ir.Kernel, target: Target) -> None:
        self.k = kernel
        self.g: Graph = kernel.graph
        self.target = target
        self._all: dict[Buffer, int] | None = None  # accesses of each buffer in the kernel
        self._names: set[str] | None = None  # buffer names taken (`fresh`)

    # ----- traversal ------------------------------------------------------------------------

    def block(self, body: list[Stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for s in body:
            if isinstance(s, ir.Loop):
                out.extend(self.loop(s))
            elif isinstance(s, ir.If):
                out.append(ir.If(s.cond, self.block(s.then), self.block(s.orelse)))
            else:
                out.append(s)
        return out

    def loop(self, loop: ir.Loop) -> list[Stmt]:
        if loop.vector:
            return [loop]
        width = self.width(loop)
        private = self.accessed_only_in(loop.body)  # before unrolling changes the counts
        inner = [s for s in loop.body if isinstance(s, ir.Loop)]
        if inner:
            n = loop.hi - loop.lo
            if n >= width and all(_unrollable(s, width) for s in inner):
                before = len(self.k.locals)
                body = self.unroll(loop.body)
                private |= dict.fromkeys(self.k.locals[before:])
                body = self.scalarize(body, private)
                private |= dict.fromkeys(self.k.locals[before:])
                unrolled = ir.Loop(loop.var, loop.lo, loop.hi, body, loop.parallel)
                plan = (self.plan(unrolled, self.width(unrolled), private)
                        if len(ir.body_values(body)) <= UNROLL_VALUES_MAX else None)
                if plan is not None:
                    return plan
                # not vectorizable, or too large unrolled: the loop nest as it was (the
                # unrolled copies would only multiply the C the compiler reads; MJX's gathers
                # from concatenated pieces grew to 200+ KB kernels that way)
                del self.k.locals[before:]
            else:
                lanes = self.outputs_in_lanes(loop, width, private)
                if lanes is not None:
                    return lanes
            loop.body = self.block(loop.body)
            return [loop]
        plan = self.plan(loop, self.width(loop), private)
        return plan if plan is not None else [loop]

    def width(self, loop: ir.Loop) -> int:
        sizes = [compute_bytes(v.dtype) for v in ir.body_values(loop.body)
                 if v.op in ("load", "alu", "cond", "tile")]
        sizes += [compute_bytes(s.buf.dtype) for s in ir.walk(loop.body)
                  if isinstance(s, ir.Store)]
        narrow = min(sizes, default=4)
        return self.target.vector_bytes // (4 if narrow <= 4 else 8)

    def unroll(self, body: list[Stmt], keep: int = 0, outer: Var | None = None
               ) -> list[Stmt]:
        """Inner loops fully unrolled, except short reductions when `keep` (the vector width)
        is given (`short_reduction`: they stay loops, their own inner loops unrolled); locals
        used only inside an unrolled loop get one copy per iteration (so copies never share
        an accumulator)."""
        out: list[Stmt] = []
        for s in body:
            if isinstance(s, ir.Loop) and keep and short_reduction(s, keep, outer):
                out.append(ir.Loop(s.var, s.lo, s.hi, self.unroll(s.body), s.parallel))
            elif isinstance(s, ir.Loop):
                mine = self.accessed_only_in(s.body)
                for x in range(s.lo, s.hi):
                    clones = {b: self.clone(b) for b in mine}
                    copy = Rewriter(self.g, {s.var: ir.affine(x)}, clones).stmts(s.body)
                    out.extend(self.unroll(copy, keep, outer))
            else:
                out.append(s)
        return out

    def outputs_in_lanes(self, loop: ir.Loop, width: int, private: dict[Buffer, None]
                         ) -> list[Stmt] | None:
        """The outputs-in-lanes schedule of a loop over the outputs of short reductions:

            for i in [0, 64):                        for i in [0, 64) vector 8:
              for j in [0, 3):                         acc0..acc8 = 0   (lanes: i .. i+7)
                acc0 = 0                               for r in [0, 11):
                for r in [0, 11): acc0 += f(i, j, r)     acc0 += f(i, 0, r) ... acc8 += ...
                out[3i + j] = acc0                     out[3i + 0] = acc0 ... (a StoreTile)
                ...

        Every inner loop is a short reduction (`short_reduction`: kept as a loop, run on all
        lanes at once with one accumulator register per lane) or short enough to unroll
        (`_lanes_unrolled_size`); the copies' reduction loops are jammed (`jam.regroup`) so
        they share their loads, and a row of accumulators read and written only at constant
        positions after unrolling becomes one accumulator per position (`_scalarize`). Each
        lane sums its own reduction in order: the order of the scalar loop, whatever the
        type. None (nothing changed) if the loop has no such form or `plan` refuses it."""
        n = loop.hi - loop.lo
        v = loop.var
        size = _lanes_unrolled_size(loop.body, width, v)
        if n < width or size is None or not any(
                isinstance(s, ir.Loop) and short_reduction(s, width, v)
                for s in ir.walk(loop.body)):
            return None
        before = len(self.k.locals)
        body = regroup(self.k, self.unroll(loop.body, keep=width, outer=v))
        mine = dict(private) | dict.fromkeys(self.k.locals[before:])
        body = self.scalarize(body, mine)
        mine |= dict.fromkeys(self.k.locals[before:])
        new = ir.Loop(loop.var, loop.lo, loop.hi, body, loop.parallel)
        planned = self.plan(new, self.width(new), mine)
        if planned is None:
            del self.k.locals[before:]
            return None
        return planned

    def scalarize(self, body: list[Stmt], private: dict[Buffer, None]) -> list[Stmt]:
        """Locals of `private` with more than one element that `body` reads and writes only at
        constant positions (a reduction nest's row of accumulators, its loops over the row
        unrolled) -> one single-element local per position."""
        consts: dict[Buffer, set[int]] = {}
        other: set[Buffer] = set()

        def see(buf: Buffer, index: Affine) -> None:
            if buf.size > 1 and buf in private and buf.kind == "local" and not index.terms:
                consts.setdefault(buf, set()).add(index.const)
            else:
                other.add(buf)

        for st in ir.walk(body):
            if isinstance(st, ir.Store):
                see(st.buf, st.index)
            elif isinstance(st, ir.StoreTile):
                other.add(st.buf)
        for x in ir.body_values(body):
            if x.op == "load":
                see(x.buffer, x.index)
            elif x.op in ("tile", "lanes_reduce"):
                other.update(x.buffers)
        parts = {(b, c): self.clone(b, 1) for b in consts if b not in other
                 for c in sorted(consts[b])}
        return _Scalarize(self.g, parts).stmts(body) if parts else body

    def new_buffer(self, name: str, dtype: DType, w: int) -> Buffer:
        buf = Buffer(self.fresh(name), dtype, w, "lanes")
        self.k.locals.append(buf)
        return buf

    def clone(self, buf: Buffer, size: int = 0) -> Buffer:
        new = Buffer(self.fresh(f"{buf.name}_{len(self.k.locals)}"), buf.dtype,
                     size or buf.size, buf.kind)
        self.k.locals.append(new)
        return new

    def fresh(self, base: str) -> str:
        """A buffer name no other buffer of the kernel has (the pieces `split` cut a reduction
        into are vectorized one by one, each with partials named after the same accumulator;
        the C printer makes names unique again, this keeps the IR's dump unambiguous)."""
        if self._names is None:
            self._names = {b.name for b in self.k.inputs + self.k.outputs + self.k.locals}
        return naming.fresh(base, self._names)

    # ----- legality and the plan ------------------------------------------------------------

    def plan(self, loop: ir.Loop, w: int, inside: dict[Buffer, None]) -> list[Stmt] | None:
        v = loop.var
        n = loop.hi - loop.lo
        if n < w or w < 2:
            return None
        body = loop.body
        if any(not isinstance(s, ir.Store | ir.Let | ir.Comment) and not (
                isinstance(s, ir.Loop) and _sequential(s)) for s in body):
            return None
        vals = ir.body_values(body)
        if not self.conds_ok(vals, v):
            return None
        masked = self.mask_guarded(body, v)
        if masked is None:
            return None
        stores = [s for s in ir.walk(body) if isinstance(s, ir.Store)]
        if any(x.dtype.name not in LANE_TYPES for x in vals) or any(
                s.buf.dtype.name not in LANE_TYPES for s in stores):
            return None  # complex, sub-byte and 8-bit float values have no vector lanes
        stored = dict.fromkeys(s.buf for s in stores)  # (in order: the C must not vary by run)
        nested = {s.buf for s in ir.walk([x for x in body if isinstance(x, ir.Loop)])
                  if isinstance(s, ir.Store)}
        private: dict[Buffer, Buffer] = {}
        reductions: dict[Buffer, tuple[Affine, Opcode]] = {}
        for buf in stored:
            mine = [s for s in stores if s.buf is buf]
            loads = [x for x in vals if x.op in ("load", "tile") and x.buffer is buf]
            if buf.kind == "local" and buf in inside and \
                    len({s.index for s in mine} | {x.index for x in loads}) == 1 and \
                    not _depends(mine[0].index, v):
                private[buf] = self.new_buffer(buf.name + "v", buf.dtype, w)
                continue
            if buf in nested:
                return None  # inner (sequential) loops write only registers of their lanes
            if all(s.index.coef(v) and not _varies(s.index, v) for s in mine):
                if all(any(x.index == s.index for s in mine) for x in loads) or \
                        _own_row_reads(body, buf, mine, loads, v, n):
                    continue
                return None
            red = self.reduction(buf, mine, loads, v)
            if red is None:
                return None
            reductions[buf] = red
        vec_hi = loop.lo + (n // w) * w
        vbody = self.vector_body(masked, v, w, private, reductions, (loop.lo, vec_hi - w))
        copies = min(ACCUMULATORS // max(1, len(reductions)), n // w) if reductions else 1
        out: list[Stmt] = []
        partials: dict[Buffer, list[Buffer]] = {}
        for buf, (_at, op) in reductions.items():
            partials[buf] = [self.new_buffer(f"{buf.name}p{j}" if j else buf.name + "p",
                                             buf.dtype, w) for j in range(max(1, copies))]
            for p in partials[buf]:
                out.append(ir.Store(p, ir.ZERO, self.g.const(identity(op, buf.dtype),
                                                             buf.dtype)))
        # the main loop: `copies` copies of the vector body per iteration, copy j on lanes
        # v + j*w accumulating into partial j (independent chains hide the add's latency)
        unroll_hi = loop.lo + (n // (w * copies)) * (w * copies) if copies > 1 else vec_hi
        mvar = Var(v.name, loop.lo, unroll_hi)
        main: list[Stmt] = []
        for j in range(max(1, copies)):
            bufs = {buf: ps[j] for buf, ps in partials.items()}
            main += Rewriter(self.g, {v: ir.affine(mvar) + j * w}, buffers=bufs).stmts(vbody)
        out.append(ir.Loop(mvar, loop.lo, unroll_hi, main, loop.parallel, vector=w,
                           step=w * copies if copies > 1 else 0))
        if unroll_hi < vec_hi:  # whole vectors left over: into the first partial
            rvar = Var(v.name, unroll_hi, vec_hi)
            bufs = {buf: ps[0] for buf, ps in partials.items()}
            rest = Rewriter(self.g, {v: ir.affine(rvar)}, buffers=bufs).stmts(vbody)
            out.append(ir.Loop(rvar, unroll_hi, vec_hi, rest, loop.parallel, vector=w))
        for buf, (at, op) in reductions.items():
            acc = self.g.load(buf, at)
            sop = ir.ScalarOp(op, buf.dtype)
            lanes = self.g.make("lanes_reduce", buf.dtype, (), (sop, *partials[buf]))
            out.append(ir.Store(buf, at, self.g.alu(sop, acc, lanes)))
        if vec_hi < loop.hi:
            tvar = Var(v.name, vec_hi, loop.hi)
            tail = Rewriter(self.g, {v: ir.affine(tvar)}).stmts(body)
            out.append(ir.Loop(tvar, vec_hi, loop.hi, tail))
        return out

    def accessed_only_in(self, body: list[Stmt]) -> dict[Buffer, None]:
        """Local buffers every access of which is inside `body` (an ordered set: the clones
        `unroll` makes of them are numbered in this order)."""
        def accesses(stmts: list[Stmt]) -> dict[Buffer, int]:
            count: dict[Buffer, int] = {}
            for s in ir.walk(stmts):
                if isinstance(s, ir.Store | ir.StoreTile):
                    count[s.buf] = count.get(s.buf, 0) + 1
                elif isinstance(s, ir.Copy):
                    for b in (s.dst, s.src):
                        count[b] = count.get(b, 0) + 1
                elif isinstance(s, ir.LibCall):
                    for b in s.ins + s.outs:
                        count[b] = count.get(b, 0) + 1
            for x in ir.body_values(stmts):
                if x.op in ("load", "tile", "lanes_reduce"):
                    for b in x.buffers:
                        count[b] = count.get(b, 0) + 1
            return count

        if self._all is None:
            self._all = accesses(self.k.body)
        mine = accesses(body)
        return {b: None for b, c in mine.items() if b.kind == "local" and self._all.get(b) == c}

    def reduction(self, buf: Buffer, stores: list[ir.Store], loads: list[Val], v: Var
                  ) -> tuple[Affine, Opcode] | None:
        """`buf[at] = op(buf[at], x)` with `at` independent of the loop and `op` reassociable."""
        if len(stores) != 1 or len(loads) != 1 or buf.kind != "local":
            return None
        (s,) = stores
        at = s.index
        if v in at.vars() or _varies(at, v) or loads[0].index != at or loads[0].op != "load":
            return None
        val = s.value
        if val.op != "alu" or val.arg.opcode not in REASSOCIATIVE_REDUCERS or len(val.args) != 2:
            return None
        if val.arg.dtype != buf.dtype:
            return None
        if val.arg.opcode in IN_ORDER and buf.dtype.is_float and buf.dtype.bits < 32:
            return None  # a narrow float's sum rounds after every add: its order is XLA's
        if val.arg.opcode is Opcode.MULTIPLY and buf.dtype.is_float:
            return None  # XLA multiplies in order: which partial product underflows (flushed
            #  to 0, then 0 x inf = NaN) or overflows depends on it (interpreter/products.py)
        try:
            identity(val.arg.opcode, buf.dtype)
        except KeyError:
            return None  # no identity in the type to start the partials with (max of an fp8
            #  without infinities: -inf is NaN there)
        acc = loads[0]
        x = val.args[1] if val.args[0] is acc else val.args[0] if val.args[1] is acc else None
        if x is None or buf in ir.reads(x):
            return None
        return at, val.arg.opcode

    def vector_body(self, body: list[Stmt], v: Var, w: int, private: dict[Buffer, Buffer],
                    reductions: dict[Buffer, tuple[Affine, Opcode]], starts: tuple[int, int]
                    ) -> list[Stmt]:
        body = Rewriter(self.g, buffers=private).stmts(body) if private else list(body)
        out: list[Stmt] = []
        groups: dict[tuple[int, Affine, int], dict[int, ir.Store]] = {}
        for s in body:
            if isinstance(s, ir.Store) and s.buf not in reductions and \
                    s.buf.kind != "lanes" and s.index.coef(v) > 1:
                stride = s.index.coef(v)
                base, k = _tile_base(s.index, v, stride)
                if base is not None:
                    groups.setdefault((s.buf.uid, base, stride), {})[k] = s
            out.append(s)
        for (_uid, base, stride), members in groups.items():
            if sorted(members) != list(range(stride)):
                continue
            # the tile is stored where its last member was: every member's value must read
            # nothing stored between its own position and there
            pos = {id(s): n for n, s in enumerate(out)}
            last = max(pos[id(s)] for s in members.values())
            gone = {id(s) for s in members.values()}
            if any(ir.reads(s.value) & ir.written(out[pos[id(s)] + 1:last + 1])
                   for s in members.values()):
                # a member's value reads what a later statement stores (an accumulator the
                # next column reuses: MJX's [n, 12] outputs, 84 columns a loop stored lane by
                # lane): each value is kept in a register where it was computed and the tile
                # stored from those, when nothing else touches the tile's buffer between
                buf = members[0].buf
                first = min(pos[id(s)] for s in members.values())
                between = [x for x in out[first:last + 1] if id(x) not in gone]
                if buf in ir.written(between) or any(
                        buf in ir.reads(x) for st in ir.walk(between) for x in ir.stmt_vals(st)):
                    continue
                values = []
                for k in range(stride):
                    held = self.new_buffer(f"{buf.name}c{k}", buf.dtype, w)
                    out[pos[id(members[k])]] = ir.Store(held, ir.ZERO, members[k].value)
                    values.append(self.g.load(held, ir.ZERO))
                out.insert(last + 1, ir.StoreTile(buf, base, stride, values))
                continue
            tile = ir.StoreTile(members[0].buf, base, stride,
                                [members[k].value for k in range(stride)])
            out[last] = tile
            out = [s for s in out if id(s) not in gone]
        return self.tiles(out, v, w, starts)

    def tiles(self, body: list[Stmt], v: Var, w: int, starts: tuple[int, int]) -> list[Stmt]:
        """Strided loads of whole rows -> `tile` values (when the block stays in bounds for
        every vector step; `starts` is the range of the loop variable at a step's lane 0)."""
        Key = tuple[int, Affine, int]  # (buffer, base, stride): one tile

        def row(x: Val) -> tuple[Key, Val | None, list[tuple[int, int]]] | None:
            """The tile the strided load `x` reads from: its key, the loop-invariant term that
            chooses the column (None for a fixed column) and each (term value, column);
            [(0, k)] for a fixed column k."""
            if x.op != "load" or x.buffer.kind == "lanes":
                return None
            stride = x.index.coef(v)
            if stride <= 1 or stride > TILE_STRIDE_MAX or _varies(x.index, v):
                return None
            base, k = _tile_base(x.index, v, stride)
            term: Val | None = None
            picks = [(0, k)]
            if base is None:
                found = _dynamic_column(x.index, v, stride)
                if found is None:
                    return None
                base, term, picks = found
            b = base.without(v).bounds()
            if b is None:
                return None
            lo = b[0] + stride * starts[0]
            hi = b[1] + stride * starts[1]
            if lo < 0 or hi + stride * w > x.buffer.size:
                return None
            return (x.buffer.uid, base, stride), term, picks

        def tile(x: Val, key: Key, term: Val | None, picks: list[tuple[int, int]]) -> Val:
            """The tile's column; a column chosen by a loop-invariant term: a select of the
            term's few possible columns (uniform conditions)."""
            g, (_uid, base, stride) = self.g, key
            out = g.make("tile", x.dtype, (), (x.buffer, base, stride, picks[-1][1]))
            select = ir.ScalarOp(Opcode.SELECT, x.dtype)
            for u, col in reversed(picks[:-1]):
                assert term is not None
                hit = g.alu(_EQ, term, g.const(u, term.dtype))
                out = g.alu(select, hit, g.make("tile", x.dtype, (), (x.buffer, base, stride,
                                                                       col)), out)
            return out

        roots: list[Val] = []
        for s in ir.walk(body):
            roots.extend(ir.stmt_vals(s))
        reads = {x.uid: (x, *found) for x in ir.postorder(roots)
                 if (found := row(x)) is not None}
        cols: dict[Key, set[int]] = {}
        for _x, key, _term, picks in reads.values():
            cols.setdefault(key, set()).update(col for _u, col in picks)
        # a row wider than WIDE_TILE_FROM is a tile only where the loop reads at least half
        # its columns: a tile loads the whole row (Freeway-MinAtar's slices of one or two
        # columns of 32-wide rows ran 3.7 -> 5.2 ms a rollout as tiles)
        mapping = {uid: tile(x, key, term, picks) for uid, (x, key, term, picks) in reads.items()
                   if key[2] <= WIDE_TILE_FROM or 2 * len(cols[key]) >= key[2]}
        if not mapping:
            return body
        r = Rewriter(self.g)
        r.memo.update(mapping)
        return r.stmts(body)

    def conds_ok(self, vals: list[Val], v: Var) -> bool:
        """A `cond` whose condition varies by lane computes both sides on every lane: each load
        under such a side must be contiguous along `v` (a whole vector, masked where it may
        leave its buffer: `_maskable`) or the same on every lane and in bounds wherever it runs
        (`_speculable`: one scalar load). A guarded gather or strided load keeps the loop
        scalar: read on every lane it cost more than the branch saved (GPT-2's train step
        6.5 -> 9.5 ms when in-bounds gathers under a lane-varying select were read on every
        lane)."""
        for x in vals:
            if x.op == "cond" and v in ir.deps(x.args[0]):
                for side in x.args[1:]:
                    for y in ir.postorder([side]):
                        if y.op == "tile" or y.op == "mload" or (
                                y.op == "load" and not _maskable(y, v) and not (
                                    _uniform(y, v) and _speculable(y))):
                            return False
        return True

    def mask_guarded(self, body: list[Stmt], v: Var) -> list[Stmt] | None:
        """Loads the vector loop would read on lanes whose `cond` does not select them -> masked
        loads (`mload`) that read only the lanes that do: under each lane-varying cond, side
        `a` is masked by the condition and `b` by its negation (nested conds: the conjunction).
        A load also read unguarded, or in bounds wherever it runs (`_speculable`), stays; one
        reached under several masks reads under their disjunction."""
        g = self.g
        roots = [x for s in ir.walk(body) for x in ir.stmt_vals(s)]
        conj, neg, disj = (ir.ScalarOp(Opcode.AND, PRED), ir.ScalarOp(Opcode.NOT, PRED),
                           ir.ScalarOp(Opcode.OR, PRED))
        masks: dict[int, Val] = {}  # load uid -> the disjunction of the masks it is read under
        free: set[int] = set()  # loads also read where no lane-varying cond guards them
        loads: dict[int, Val] = {}
        seen: set[tuple[int, int]] = set()
        stack: list[tuple[Val, Val | None]] = [(x, None) for x in roots]
        while stack:
            x, m = stack.pop()
            key = (x.uid, m.uid if m is not None else -1)
            if key in seen:
                continue
            seen.add(key)
            if x.op == "load" and x.buffer.kind != "lanes":
                loads[x.uid] = x
                if m is None:
                    free.add(x.uid)
                else:
                    old = masks.get(x.uid)
                    masks[x.uid] = m if old is None or old is m else g.alu(disj, old, m)
            if x.op == "cond" and v in ir.deps(x.args[0]):
                c, a, b = x.args
                nc = g.alu(neg, c)
                stack.append((c, m))
                stack.append((a, c if m is None else g.alu(conj, m, c)))
                stack.append((b, nc if m is None else g.alu(conj, m, nc)))
                continue
            stack.extend((y, m) for y in x.children())
        r = Rewriter(g)
        for uid, m in masks.items():
            x = loads[uid]
            if uid not in free and not _speculable(x):
                r.memo[uid] = g.mload(x.buffer, x.index, m)
        if any(y.uid in r.memo for m in masks.values() for y in ir.postorder([m])):
            return None  # a mask itself reads guarded memory (a nested cond's condition)
        return r.stmts(body) if r.memo else body


def _own_row_reads(body: list[Stmt], buf: Buffer, stores: list[ir.Store], loads: list[Val],
                   v: Var, span: int) -> bool:
    """Loads of `buf` at other addresses than its lane-distinct stores are safe to vectorize
    when each lane reads only addresses no other lane writes, and every such load comes before
    the first store to `buf` (`Builder.assign` computes a state's new values before it stores
    them): no lane then reads what another lane, or its own later store, writes. A whole
    loop's per-element state is either element n's row `c*n + [0, c)` (read at a position
    chosen per element: a MinAtar grid cell) or, copied element-minor
    (`whole_loop.state_columns`), element n's column `n + k*M` with M >= the loop's `span`."""
    ref = stores[0].index
    c = ref.coef(v)
    exact = {s.index for s in stores}
    others = {x.uid for x in loads if x.index not in exact}
    diffs = [s.index - ref for s in stores] + [x.index - ref for x in loads if x.uid in others]
    if c <= 0 or any(d.coef(v) for d in diffs):
        return False
    if c == 1:  # columns: every other term, and the offset, a multiple of some M >= span
        m = 0
        for d in diffs:
            for _t, k in d.terms:
                m = math.gcd(m, k)
            m = math.gcd(m, d.const)
        if 0 < m < span:
            return False
    else:  # rows: offsets within [0, c) of the lane's row start
        for d in diffs:
            r = (d + ref.const).bounds()
            if r is None or r[0] < 0 or r[1] >= c or any(isinstance(t, Var)
                                                         for t, _ in d.terms):
                return False
    first = next(i for i, st in enumerate(body)
                 if any(isinstance(y, ir.Store) and y.buf is buf for y in ir.walk([st])))
    after = [x for z in ir.walk(body[first:]) for x in ir.stmt_vals(z)]
    return not any(y.uid in others for y in ir.postorder(after))


def _speculable(x: Val) -> bool:
    """A load whose index lies in its buffer over its variables' whole ranges: safe to read
    where no condition selects it."""
    r = x.index.bounds()
    return r is not None and r[0] >= 0 and r[1] < x.buffer.size


def _uniform(x: Val, v: Var) -> bool:
    """A load whose address is the same on every lane of the loop over `v`."""
    return x.buffer.kind != "lanes" and not x.index.coef(v) and not _varies(x.index, v)


def _maskable(x: Val, v: Var) -> bool:
    """A load the vector loop over `v` can read as one masked vector: contiguous along `v`
    (coefficient 1, no term that varies with it), from memory (not a `lanes` register)."""
    return x.buffer.kind != "lanes" and x.index.coef(v) == 1 and not _varies(x.index, v)


def _varies(a: Affine, v: Var) -> bool:
    """Does a value term of `a` depend on `v` (a gather-like index)?"""
    return any(v in ir.deps(t) for t in a.vals())


def _depends(a: Affine, v: Var) -> bool:
    return bool(a.coef(v)) or _varies(a, v)


class _Scalarize(Rewriter):
    """Loads and stores of (buffer, constant position) in `parts` -> that part's element 0."""

    def __init__(self, g: Graph, parts: dict[tuple[Buffer, int], Buffer]) -> None:
        super().__init__(g)
        self.parts = parts

    def _rebuild(self, v: Val) -> Val:
        if v.op == "load" and not v.index.terms and (v.buffer, v.index.const) in self.parts:
            return self.g.load(self.parts[(v.buffer, v.index.const)], ir.ZERO)
        return super()._rebuild(v)

    def stmt(self, s: Stmt) -> list[Stmt]:
        if isinstance(s, ir.Store) and not s.index.terms and (s.buf, s.index.const) in self.parts:
            return [ir.Store(self.parts[(s.buf, s.index.const)], ir.ZERO, self.val(s.value))]
        return super().stmt(s)


# A strided load whose column within its row is a loop-invariant term (MuJoCo MJX's
# `x[i, 4 * j + c]`, j chosen per call) reads the row as a tile when the term takes at most
# this many values, each a column of the row: a select of those columns on the term, not 16
# lane loads per vector step (MJX's humanoid: 530 of the 760 lane-by-lane loads it had left).
DYNAMIC_COLUMNS_MAX = 4
_EQ = ir.ScalarOp(Opcode.COMPARE, PRED, (("direction", "EQ"),))


def _dynamic_column(index: Affine, v: Var, stride: int
                    ) -> tuple[Affine, Val, list[tuple[int, int]]] | None:
    """`index = base + c * t + k0` with `base` a multiple of `stride` in every term, `t` one
    loop-invariant value term (the others multiples of the stride) whose known values (at most
    DYNAMIC_COLUMNS_MAX) all put the column `c * t + k0` inside the row: (base, t, [(value of
    t, its column)]); None otherwise."""
    odd = [(t, c) for t, c in index.terms if t is not v and c % stride]
    if len(odd) != 1 or not isinstance(odd[0][0], Val):
        return None
    t, c = odd[0]
    bounds = ir.value_bounds(t)
    if bounds is None or bounds[1] - bounds[0] + 1 > DYNAMIC_COLUMNS_MAX:
        return None
    k0 = index.const % stride
    picks = [(u, c * u + k0) for u in range(bounds[0], bounds[1] + 1)]
    if any(not 0 <= col < stride for _u, col in picks):
        return None
    base = index - ir.affine(t) * c - k0
    return base, t, picks


def _tile_base(index: Affine, v: Var, stride: int) -> tuple[Affine | None, int]:
    """`index = base + k` with `base` a multiple of `stride` in every term and 0 <= k < stride;
    (None, 0) if the other terms are not multiples of the stride."""
    if any(c % stride for t, c in index.terms if t is not v):
        return None, 0
    k = index.const % stride
    return index - k, k


def _sequential(loop: ir.Loop) -> bool:
    """A loop a vector loop may hold: scalar, sequential, straight-line body."""
    return not loop.vector and not loop.parallel and all(
        isinstance(s, ir.Store | ir.Let | ir.Comment) for s in loop.body)


def short_reduction(loop: ir.Loop, width: int, outer: Var | None = None) -> bool:
    """The outputs-in-lanes rule. A reduction loop (its body stores only to locals at
    positions its variable does not change: accumulators; inner loops short enough to unroll)
    shorter than `SHORT_REDUCTION_VECTORS` vectors of `width` lanes, reading some operand with
    a stride other than 0 or 1 along it. Vectorized along itself it would be a vector step
    or two of lane-by-lane gathers, a horizontal combine and a scalar tail per output; run
    sequentially inside a vector loop over its outputs it is one vector op per element for
    `width` outputs, with no combine and no tail, and the gathers are shared by the
    reductions jammed together. A contiguous row (stride 1) stays vectorized along itself:
    there it loads whole vectors, where the outputs' lanes would gather, unless the loop
    over the outputs (`outer`) reads every operand contiguously or not at all and some
    contiguously (a window along the minor dimension: jnp.cumsum's row scan, a 1-D
    convolution): there the outputs' lanes load whole vectors too, one per tap for `width`
    outputs, where along itself each output would pay a horizontal combine."""
    if loop.vector or loop.parallel or loop.hi - loop.lo >= SHORT_REDUCTION_VECTORS * width:
        return False
    if any(not isinstance(s, ir.Store | ir.Let | ir.Comment) and not (
            isinstance(s, ir.Loop) and _unrollable(s, width)) for s in loop.body):
        return False
    v = loop.var
    stores = [s for s in ir.walk(loop.body) if isinstance(s, ir.Store)]
    if not stores or any(s.buf.kind != "local" or _depends(s.index, v) for s in stores):
        return False
    vals = ir.postorder(x for s in ir.walk(loop.body) for x in ir.stmt_vals(s))
    if any(x.op == "load" and (x.index.coef(v) not in (0, 1) or _varies(x.index, v))
           for x in vals):
        return True
    loads = [x for x in vals if x.op == "load" and x.buffer.kind != "local"]
    return outer is not None and any(x.index.coef(v) for x in loads) and all(
        x.index.coef(outer) in (0, 1) and not _varies(x.index, outer) for x in loads) and any(
        x.index.coef(outer) == 1 for x in loads)


def _lanes_unrolled_size(body: list[Stmt], width: int, outer: Var | None = None
                         ) -> int | None:
    """Statements `body` becomes when its inner loops are unrolled for the outputs-in-lanes
    schedule (short reductions kept as loops, other loops shorter than `width` unrolled); None
    if some inner loop is neither or the total exceeds LANES_UNROLL_MAX."""
    total = 0
    for s in body:
        if isinstance(s, ir.Loop) and short_reduction(s, width, outer):
            inner = _lanes_unrolled_size(s.body, width, outer)
            if inner is None:
                return None
            total += 1 + inner
        elif isinstance(s, ir.Loop):
            n = s.hi - s.lo
            if n >= width or n > UNROLL_MAX or s.vector or s.parallel:
                return None
            inner = _lanes_unrolled_size(s.body, width, outer)
            if inner is None:
                return None
            total += n * inner
        elif isinstance(s, ir.Store | ir.Let | ir.Comment):
            total += 1
        else:
            return None
        if total > LANES_UNROLL_MAX:
            return None
    return total


def _unrollable(loop: ir.Loop, width: int) -> bool:
    n = loop.hi - loop.lo
    if n >= width or n > UNROLL_MAX or loop.vector or loop.parallel:
        return False
    total = n
    for s in ir.walk(loop.body):
        if isinstance(s, ir.Loop):
            total *= s.hi - s.lo
        elif not isinstance(s, ir.Store | ir.Let | ir.Comment):
            return False
    return total <= UNROLL_MAX
