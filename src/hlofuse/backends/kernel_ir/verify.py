"""A verifier of the kernel IR's stated invariants (`ir.py`'s module docstring), run after every
kernel-IR pass under `HLOFUSE_VERIFY=1` (`passes.optimize`) and by the tests.

    verify(kernel, after="split")      raises KernelIRError naming the kernel, the pass and
                                       the first broken invariant

Conditions checked:
- scoping: every `Var` an index or value uses is bound by an enclosing `Loop`, and no loop
  binds a variable an enclosing loop binds already;
- loops: `lo <= hi`; a vector loop's width is positive and its range a multiple of its step;
- buffers: every buffer a statement or value names is one of the kernel's inputs, outputs,
  locals or constant tables; nothing stores into a constant table, and an input is stored
  into only if `Kernel.inplace` pairs it with an output;
- bounds: a store's or load's index, over its loop variables' ranges (a vector loop's lanes
  included), lies inside its buffer wherever its range is known (`Affine.bounds`); accesses
  under a `cond` side or inside an `If` are not checked (a guarded access may be out of bounds
  where its condition is false: a scatter's, a concatenate piece's), nor masked loads
  (`mload`: it reads only where its mask holds), whose mask must be a pred value and whose
  buffer memory (not a `lanes` register);
- library calls: `op` is a `LibOp` whose functions hold only parameters, constants and alus
  (no value of a scalar function reads memory or a loop variable);
- placement (`passes/place.py`, once run): every `local` and `lanes` buffer a statement or
  value accesses is declared once, in a block enclosing every access; a stack local fits the
  placement's stack limit, a heap one does not, only `local`s are on the heap, and none is
  declared inside a parallel loop (heap scratch is allocated outside parallel regions);
- lazy selects (`passes/lazy.py`): each is a lane-varying select of its vector loop, its lazy
  side reads no buffer the loop writes, the values only that side owns (`lazy.owned`) are
  used by no statement of the loop and by no value outside the side (so computing them in
  the branch loses nothing), and the groups are exactly the lazy selects by (condition, side);
- lane forms (`passes/lanes.py`): each `narrow`, `blend` and `compare32` value is an alu value
  of its loop that qualifies (`lanes.narrow_index`, `lanes.blend_on_compare`,
  `lanes.compare32`), each `index32` one an index value that does (`lanes.index32`); each
  `outline` value (`passes/outline.py`) a lane-varying alu value of its loop;
- vector forms (`ir.py`'s docstring states what they mean): a `tile` value or `StoreTile` lies
  in a vector loop, its `base` advances by `stride` per lane (coefficient `stride` on the
  innermost vector loop's variable, no value term that varies with it), a tile's column `k`
  is in [0, stride) and a `StoreTile` has `stride` values; unguarded, its block `[base,
  base + stride*W)` lies in its buffer over the loop's range; a `lanes_reduce` combines
  `lanes` buffers of one width, a power of two (its halving order needs one), of its type,
  by a `ScalarOp` of that type.
The walk is iterative over statements and values.
"""

from __future__ import annotations

from collections.abc import Callable

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Affine, Buffer, Stmt, Val, Var
from hlofuse.backends.kernel_ir.libop import LibOp
from hlofuse.backends.kernel_ir.passes.lanes import (
    blend_on_compare,
    compare32,
    index32,
    narrow_index,
)
from hlofuse.backends.kernel_ir.passes.lazy import is_select, owned
from hlofuse.backends.kernel_ir.query import varies
from hlofuse.errors import CompileError


class KernelIRError(CompileError):
    """A kernel IR that breaks one of its stated invariants (a bug in a lowering or pass)."""


class _Verifier:
    def __init__(self, k: ir.Kernel, after: str) -> None:
        self.k = k
        self.where = f"kernel {k.name}" + (f" after {after}" if after else "")
        self.known = {id(b) for b in (*k.inputs, *k.outputs, *k.locals, *k.consts)}
        self.writable_inputs = {id(k.inputs[i]) for i in k.inplace.values()
                                if 0 <= i < len(k.inputs)}
        self.seen_vals: set[tuple[int, bool]] = set()
        # id(var) -> (first, last value it takes, lanes per value): a loop stepping by s over
        # [lo, hi) starts its last iteration at hi - s; a vector loop's W lanes run from there
        self.ranges: dict[int, tuple[int, int, int]] = {}
        self.widths: dict[int, int] = {}  # id(var) -> W, for the variables of vector loops

    def fail(self, what: str) -> KernelIRError:
        return KernelIRError(f"{self.where}: {what}")

    def buffer(self, b: Buffer, write: bool) -> None:
        if id(b) not in self.known:
            raise self.fail(f"buffer {b.name} is not the kernel's")
        if write and b.kind == "const":
            raise self.fail(f"store into constant table {b.name}")
        if write and b.kind == "in" and id(b) not in self.writable_inputs:
            raise self.fail(f"store into input {b.name}, which no output shares")

    def libcall(self, s: ir.LibCall) -> None:
        if not isinstance(s.op, LibOp):
            raise self.fail(f"a library call's op is a {type(s.op).__name__}, not a LibOp")
        for role, f in s.op.funcs:
            if any(p.op != "param" for p in f.params):
                raise self.fail(f"{s.op.opcode.value}'s {role} function has a parameter that "
                                "is not a param value")
            for v in ir.postorder(f.results):
                if v.op not in ("param", "const", "alu"):
                    raise self.fail(f"{s.op.opcode.value}'s {role} function holds a {v.op} "
                                    "value (a scalar function reads no memory)")
        for b in s.ins:
            self.buffer(b, write=False)
        for b in s.outs:
            self.buffer(b, write=True)

    def scoped(self, a: Affine, bound: list[Var]) -> None:
        for v in a.vars():
            if not any(v is x for x in bound):
                raise self.fail(f"variable {v.name} used outside the loop that binds it")

    def affine(self, a: Affine, bound: list[Var], guarded: bool) -> None:
        self.scoped(a, bound)
        for v in a.vals():
            self.value(v, bound, guarded)

    def bounds(self, a: Affine) -> tuple[int, int] | None:
        """[min, max] of `a` over the values its loop variables take (lanes included)."""
        lo = hi = a.const
        for t, c in a.terms:
            if isinstance(t, Var):
                first, last, lanes = self.ranges.get(id(t), (t.lo, t.hi - 1, 1))
                if last < first:
                    return None  # an empty loop: nothing is accessed
                r: tuple[int, int] | None = (first, last + lanes - 1)
            else:
                r = ir.value_bounds(t)
            if r is None:
                return None
            lo += min(c * r[0], c * r[1])
            hi += max(c * r[0], c * r[1])
        return lo, hi

    def in_bounds(self, b: Buffer, a: Affine) -> None:
        if b.kind == "lanes":
            return
        r = self.bounds(a)
        if r is not None and (r[0] < 0 or r[1] >= b.size):
            raise self.fail(f"index {a!r} of {b.name}[{b.size}] spans [{r[0]}, {r[1]}]")

    def value(self, root: Val, bound: list[Var], guarded: bool) -> None:
        stack = [(root, guarded)]
        while stack:
            v, g = stack.pop()
            key = (v.uid, g)
            if key in self.seen_vals:
                continue
            self.seen_vals.add(key)
            if v.op in ir.READS:
                for b in v.buffers:
                    self.buffer(b, write=False)
            if v.op in ir.INDEXED:
                self.scoped(v.index, bound)
                if v.op == "load" and not g:
                    self.in_bounds(v.buffer, v.index)
                if v.op == "mload" and (v.buffer.kind == "lanes" or not v.args[0].dtype.is_pred):
                    raise self.fail(f"masked load %{v.uid} of {v.buffer.name}: a pred mask "
                                    "and a memory buffer")
            if v.op == "tile":
                _b, base, stride, k = v.arg
                self.tile(v.buffer, base, stride, bound, g, f"tile %{v.uid}")
                if not 0 <= k < stride:
                    raise self.fail(f"tile %{v.uid} of {v.buffer.name} reads column {k} of "
                                    f"{stride}")
            elif v.op == "lanes_reduce":
                self.lanes_reduce(v)
            if v.op == "cond":
                stack.append((v.args[0], g))
                stack.extend((x, True) for x in v.args[1:])
            else:
                stack.extend((x, g) for x in v.children())

    def tile(self, b: Buffer, base: Affine, stride: int, bound: list[Var], guarded: bool,
             what: str) -> None:
        """A tile's or tile store's block: lane l at `base + stride*l` (`base` at lane 0)."""
        var = next((x for x in reversed(bound) if self.widths.get(id(x))), None)
        if var is None:
            raise self.fail(f"{what} of {b.name} outside a vector loop")
        if stride < 1 or base.coef(var) != stride or \
                any(var in ir.deps(t) for t in base.vals()):
            raise self.fail(f"{what} of {b.name} at {base!r} does not advance by its stride "
                            f"{stride} per lane of {var.name}")
        if not guarded:
            self.in_bounds(b, base)
            self.in_bounds(b, base + (stride - 1))

    def lanes_reduce(self, v: Val) -> None:
        op, bufs, w = v.arg[0], v.buffers, v.buffers[0].size if v.buffers else 0
        if not isinstance(op, ir.ScalarOp) or op.dtype != v.dtype or w < 1 or w & (w - 1) \
                or any(b.kind != "lanes" or b.size != w or b.dtype != v.dtype for b in bufs):
            raise self.fail(f"lanes_reduce %{v.uid} does not combine lanes buffers of one "
                            f"power-of-two width and its type")

    def block(self, body: list[Stmt]) -> None:
        work: list[tuple[list[Stmt], list[Var], bool]] = [(body, [], False)]
        while work:
            stmts, scope, guarded = work.pop()
            for s in stmts:
                if isinstance(s, ir.Loop):
                    if any(s.var is x for x in scope):
                        raise self.fail(f"loop variable {s.var.name} bound twice")
                    if s.lo > s.hi:
                        raise self.fail(f"loop {s.var.name} over [{s.lo}, {s.hi})")
                    if s.vector and (s.vector < 0 or (s.hi - s.lo) % ir.step_of(s)):
                        raise self.fail(f"vector loop {s.var.name} over [{s.lo}, {s.hi}) "
                                        f"does not divide into steps of {ir.step_of(s)}")
                    self.ranges[id(s.var)] = (s.lo, s.hi - ir.step_of(s), s.vector or 1)
                    if s.vector:
                        self.widths[id(s.var)] = s.vector
                    work.append((s.body, [*scope, s.var], guarded))
                    continue
                if isinstance(s, ir.Store):
                    self.buffer(s.buf, write=True)
                    self.affine(s.index, scope, guarded)
                    if not guarded:
                        self.in_bounds(s.buf, s.index)
                    self.value(s.value, scope, guarded)
                elif isinstance(s, ir.StoreTile):
                    self.buffer(s.buf, write=True)
                    self.affine(s.base, scope, guarded)
                    self.tile(s.buf, s.base, s.stride, scope, guarded, "tile store")
                    if len(s.values) != s.stride:
                        raise self.fail(f"tile store of {s.buf.name} has {len(s.values)} "
                                        f"values for stride {s.stride}")
                    for v in s.values:
                        self.value(v, scope, guarded)
                elif isinstance(s, ir.If):
                    self.value(s.cond, scope, guarded)
                    work.append((s.then, scope, True))
                    work.append((s.orelse, scope, True))
                elif isinstance(s, ir.Let):
                    self.value(s.value, scope, guarded)
                elif isinstance(s, ir.Copy):
                    self.buffer(s.dst, write=True)
                    self.buffer(s.src, write=False)
                elif isinstance(s, ir.LibCall):
                    self.libcall(s)


def verify(kernel: ir.Kernel, after: str = "") -> None:
    """Raise `KernelIRError` if `kernel` breaks an invariant (see the module docstring)."""
    v = _Verifier(kernel, after)
    v.block(kernel.body)
    _check_plans(kernel, v.fail)


# ----- the printers' decisions (passes/place.py, lazy.py, lanes.py) -----------------------------


def _check_plans(k: ir.Kernel, fail: Callable[[str], Exception]) -> None:
    if k.placement is not None:
        _placement(k, k.placement, fail)
    for s in ir.walk(k.body):
        if isinstance(s, ir.Loop) and s.vector and (s.lazy is not None or s.forms is not None):
            _vector_loop(s, fail)


def _accessed(s: Stmt) -> list[Buffer]:
    bufs = [b for v in ir.stmt_vals(s) for b in ir.reads(v)]
    if isinstance(s, ir.Store | ir.StoreTile):
        bufs.append(s.buf)
    elif isinstance(s, ir.Copy):
        bufs += [s.dst, s.src]
    elif isinstance(s, ir.LibCall):
        bufs += s.ins + s.outs
    return [b for b in bufs if b.kind in ("local", "lanes")]


def _placement(k: ir.Kernel, pl: ir.Placement, fail: Callable[[str], Exception]) -> None:
    where: dict[Buffer, int] = {}
    for block, bufs in pl.blocks.items():
        for b in bufs:
            if b in where:
                raise fail(f"local {b.name} declared twice")
            where[b] = block
            nbytes = b.size * b.dtype.itemsize
            if b in pl.heap and (b.kind != "local" or nbytes <= pl.stack_bytes):
                raise fail(f"{b.kind} {b.name} ({nbytes} bytes) placed on the heap")
            if b not in pl.heap and b.kind == "local" and nbytes > pl.stack_bytes:
                raise fail(f"local {b.name} ({nbytes} bytes) on the stack, over its limit "
                           f"of {pl.stack_bytes}")
    # (block list, enclosing block ids, inside a parallel loop)
    work: list[tuple[list[Stmt], tuple[int, ...], bool]] = [(k.body, (id(k.body),), False)]
    while work:
        stmts, path, par = work.pop()
        if par and any(b in pl.heap for b in pl.blocks.get(path[-1], [])):
            raise fail("a heap local declared inside a parallel loop")
        for s in stmts:
            for b in _accessed(s):
                if b not in where:
                    raise fail(f"local {b.name} is used but never declared")
                if where[b] not in path:
                    raise fail(f"local {b.name} used outside the block that declares it")
            if isinstance(s, ir.Loop):
                work.append((s.body, (*path, id(s.body)), par or s.parallel))
            elif isinstance(s, ir.If):
                work.append((s.then, (*path, id(s.then)), par))
                work.append((s.orelse, (*path, id(s.orelse)), par))


def _vector_loop(loop: ir.Loop, fail: Callable[[str], Exception]) -> None:
    values = {v.uid: v for v in ir.body_values(loop.body)}
    name = loop.var.name
    forms = loop.forms
    if forms is not None:
        for uid in forms.narrow:
            v = values.get(uid)
            if v is None or v.op != "alu" or not narrow_index(v, loop.var):
                raise fail(f"value %{uid} narrowed in loop {name} does not qualify")
        for uid in forms.blend:
            v = values.get(uid)
            if v is None or v.op != "alu" or not blend_on_compare(v, loop.var):
                raise fail(f"value %{uid} blended in loop {name} does not qualify")
        for uid in forms.compare32:
            v = values.get(uid)
            if v is None or v.op != "alu" or not compare32(v, loop.var):
                raise fail(f"comparison %{uid} in 32 bits in loop {name} does not qualify")
        if forms.index32 - index32(loop):
            raise fail(f"index values {sorted(forms.index32 - index32(loop))} in 32 bits in "
                       f"loop {name} do not qualify")
        for uid in forms.outline:
            v = values.get(uid)
            if v is None or v.op != "alu" or not varies(v, loop.var):
                raise fail(f"value %{uid} outlined in loop {name} is not a lane-varying op")
    plan = loop.lazy
    if plan is None or not plan.sides:
        return
    stored = ir.written(loop.body)
    root_uids = {v.uid for st in ir.walk(loop.body) for v in ir.stmt_vals(st)}
    grouped: dict[tuple[int, int], list[int]] = {}
    for uid, side in plan.sides.items():
        v = values.get(uid)
        if v is None or not is_select(v) or not varies(v.args[0], loop.var) \
                or side not in (1, 2):
            raise fail(f"lazy select %{uid} of loop {name} is not a lane-varying select "
                       f"of it")
        if ir.reads(v.args[side]) & stored:
            raise fail(f"lazy side of %{uid} reads a buffer loop {name} writes")
        own = owned(plan, v, side, loop.var)
        for x in own:
            if x in root_uids:
                raise fail(f"value %{x} of the lazy side of %{uid} is used by a statement "
                           f"of loop {name}")
            outside = plan.users.get(x, set()) - own - {uid}
            if outside:
                raise fail(f"value %{x} of the lazy side of %{uid} is used outside its "
                           f"branch (by %{min(outside)})")
        grouped.setdefault((v.args[0].uid, side), []).append(uid)
    if grouped != {key: [m.uid for m in ms] for key, ms in plan.groups.items()}:
        raise fail(f"the lazy groups of loop {name} are not its lazy selects by condition "
                   f"and side")
