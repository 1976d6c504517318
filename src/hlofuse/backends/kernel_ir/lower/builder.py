"""The lowering builder: the value of an HLO instruction at an index, as kernel-IR values, and
the statements some values need (reduction loops, library calls) at the right place.

    b.value(mul_56, index)   ->  alu(multiply, f32)(alu(sine)(load(in3, i)), const 9.8)

Values are interned by the kernel's `Graph`, so lowering the same instruction at the same index
twice gives the same node. `values()` memoises per (instruction, index) within the current block
so statement-emitting values (a reduce inside a loop fusion) emit their statements once per
block; a value whose array has one element does not depend on any loop, so it is lowered once,
in the kernel's preamble (`pre`). Index maps live in `maps.py` and `elementwise.py`, reductions in
`reduce.py`; ops that are not index maps (dot, sort, ...) are computed whole into local buffers
by `library.py` and read like inputs. An op no rule covers raises `LoweringError` naming it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Affine, Buffer, Graph, Stmt, Val, Var
from hlofuse.backends.kernel_ir.lower.index import Index, zero
from hlofuse.errors import CompileError
from hlofuse.ir.dtypes import PRED, S64, U64, DType
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape


class LoweringError(CompileError):
    """An instruction the kernel lowering cannot handle (names the instruction)."""


def where(instr: Instruction) -> str:
    comp = instr.parent.name if instr.parent is not None else "?"
    return f"{instr.opcode.value} {instr.name} (in {comp})"


def dims_of(instr: Instruction) -> tuple[int, ...]:
    shape = instr.shape
    if not isinstance(shape, ArrayShape):
        raise LoweringError(f"{where(instr)}: expected an array shape, got {shape}")
    return tuple(shape.dims)


def array_shape(instr: Instruction) -> ArrayShape:
    shape = instr.shape
    if not isinstance(shape, ArrayShape):
        raise LoweringError(f"{where(instr)}: expected an array shape, got {shape}")
    return shape


LT = ir.ScalarOp(Opcode.COMPARE, PRED, (("direction", "LT"),))
GE = ir.ScalarOp(Opcode.COMPARE, PRED, (("direction", "GE"),))
EQ = ir.ScalarOp(Opcode.COMPARE, PRED, (("direction", "EQ"),))
AND = ir.ScalarOp(Opcode.AND, PRED)
MAX64 = ir.ScalarOp(Opcode.MAXIMUM, S64)
MIN64 = ir.ScalarOp(Opcode.MINIMUM, S64)
CVT64 = ir.ScalarOp(Opcode.CONVERT, S64)
UMIN64 = ir.ScalarOp(Opcode.MINIMUM, U64)


class Builder:
    """Builds one kernel's body. `params` binds instructions (fusion parameters, or a single
    op's operands) to their input buffers, one per array leaf."""

    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.params: dict[int, list[Buffer]] = {}
        self.pre: list[Stmt] = []  # the preamble: lowered once, before every loop
        self._open_pre: list[ir.Loop] = []  # preamble loops being built (outermost first)
        self.body: list[Stmt] = []
        self.block = self.body
        self.scopes: list[dict[object, object]] = [{}]
        self.locals: list[Buffer] = []
        self.consts: list[Buffer] = []
        self.funcs: list[ir.Func] = []
        self._n: dict[str, int] = {}
        # instructions whose values a caller supplies (a whole loop's counter)
        self.fixed: dict[int, Callable[[Index], list[Val]]] = {}
        # fused-computation parameters standing for the fusion's operands (a fusion lowered
        # inside another computation: a whole loop's body)
        self.alias: dict[int, Instruction] = {}
        # size-1 values do not depend on the loops in a plain kernel: lower them once, in the
        # preamble (a whole loop's scalars may depend on the iteration: off there)
        self.hoist_scalars = True
        # large column reductions cut into blocks of rows for threads (`reduce.column_blocks`):
        # a CPU decision, whatever the thread count (the GPU printer maps loops itself)
        self.column_blocks = True

    # ----- names, buffers, statements ---------------------------------------------------------

    def fresh(self, base: str) -> str:
        n = self._n.get(base, 0)
        self._n[base] = n + 1
        return f"{base}{n}"

    def local(self, dtype: DType, size: int, base: str = "t") -> Buffer:
        buf = Buffer(self.fresh(base), dtype, max(1, size), "local")
        self.locals.append(buf)
        return buf

    def emit(self, stmt: Stmt) -> None:
        self.block.append(stmt)

    def assign(self, stores: list[tuple[Buffer, Affine, Val]]) -> None:
        """Store several values "at once": when a value reads a buffer an earlier store of the
        group writes (a variadic reducer's results), the values are first copied into
        temporaries, since a value is evaluated where it is used."""
        targets = {buf for buf, _, _ in stores}
        if len(stores) > 1 and any(ir.reads(v) & targets for _, _, v in stores):
            snap = []
            for buf, at, v in stores:
                tmp = self.local(v.dtype, 1, "t")
                self.emit(ir.Store(tmp, ir.ZERO, v))
                snap.append((buf, at, self.g.load(tmp, ir.ZERO)))
            stores = snap
        for buf, at, v in stores:
            self.emit(ir.Store(buf, at, v))

    def comment(self, text: str) -> None:
        self.emit(ir.Comment(text))

    @contextmanager
    def loop(self, hi: int, base: str = "i", lo: int = 0) -> Iterator[Var]:
        var = Var(self.fresh(base), lo, hi)
        loop = ir.Loop(var, lo, hi, [])
        top = self.block is self.pre
        self.emit(loop)
        if top:
            self._open_pre.append(loop)
        try:
            with self.into(loop.body):
                yield var
        finally:
            if top:
                self._open_pre.pop()

    @contextmanager
    def into(self, block: list[Stmt]) -> Iterator[None]:
        """Emit into `block` (a new scope for memoised values)."""
        saved = self.block
        self.block = block
        self.scopes.append({})
        try:
            yield
        finally:
            self.scopes.pop()
            self.block = saved

    @contextmanager
    def at_preamble(self) -> Iterator[None]:
        """Emit into the preamble. Asked for while a preamble loop is being built (a value
        computed whole, say a column reduce, read by another one being materialised there),
        the statements go before that loop, which reads what they compute."""
        saved = (self.block, self.scopes)
        if not self._open_pre or self.block is self.pre:
            self.block, self.scopes = self.pre, self.scopes[:1]
            try:
                yield
            finally:
                self.block, self.scopes = saved
            return
        ahead: list[Stmt] = []
        self.block, self.scopes = ahead, self.scopes[:1]
        try:
            yield
        finally:
            self.block, self.scopes = saved
            at = next(k for k, s in enumerate(self.pre) if s is self._open_pre[0])
            self.pre[at:at] = ahead

    def in_preamble(self) -> bool:
        return self.block is self.pre

    def lookup(self, key: object) -> object | None:
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def remember(self, key: object, value: object) -> None:
        self.scopes[-1][key] = value

    # ----- values -------------------------------------------------------------------------------

    def value(self, instr: Instruction, idx: Index) -> Val:
        if isinstance(instr.shape, TupleShape):
            raise LoweringError(f"{where(instr)}: a tuple-shaped value used as an array")
        return self.values(instr, idx)[0]

    def values(self, instr: Instruction, idx: Index) -> list[Val]:
        """One value per array leaf of `instr` at `idx`."""
        if math.prod(idx.dims) == 1:
            idx = zero(idx.dims)
        hoist = self.hoist_scalars and math.prod(idx.dims) == 1
        key = (id(instr), idx.key())
        found = self.lookup(key)
        if found is not None:
            return found  # type: ignore[return-value]
        if instr.is_elementwise and not hoist and id(instr) not in self.params \
                and id(instr) not in self.alias and id(instr) not in self.fixed:
            self._prefetch(instr, idx)
        if hoist and not self.in_preamble():
            with self.at_preamble():
                result = self._compute(instr, idx)
                self.remember(key, result)
            return result
        result = self._compute(instr, idx)
        self.remember(key, result)
        return result

    def _prefetch(self, instr: Instruction, idx: Index) -> None:
        """Lower the chain of elementwise operands at the same index bottom-up, iteratively, so
        a fusion thousands of ops deep does not recurse thousands of levels."""
        order: list[Instruction] = []
        seen: set[int] = set()
        stack: list[tuple[Instruction, bool]] = [(instr, False)]
        while stack:
            x, done = stack.pop()
            if done:
                order.append(x)
                continue
            if id(x) in seen:
                continue
            seen.add(id(x))
            stack.append((x, True))
            for o in x.operands:
                if (o.is_elementwise and id(o) not in self.params
                        and o.opcode not in HANDLERS and isinstance(o.shape, ArrayShape)
                        and tuple(o.shape.dims) == idx.dims
                        and self.lookup((id(o), idx.key())) is None):
                    stack.append((o, False))
        for x in order[:-1]:
            self.values(x, idx)

    def _compute(self, instr: Instruction, idx: Index) -> list[Val]:
        if id(instr) in self.fixed:
            return self.fixed[id(instr)](idx)
        if id(instr) in self.alias:
            return self.values(self.alias[id(instr)], idx)
        if id(instr) in self.params:
            return [self.load_param(instr, idx)]
        if instr.opcode is Opcode.DOT:
            from hlofuse.backends.kernel_ir.lower.reduce import dot_value
            from hlofuse.passes.fusion.small_dots import per_element_dot

            if not self.hoist_scalars or per_element_dot(instr):
                return dot_value(self, instr, idx)  # inside a whole loop, or a small dot
        handler = HANDLERS.get(instr.opcode)
        if handler is not None:
            return handler(self, instr, idx)
        if instr.is_elementwise:
            from hlofuse.backends.kernel_ir.lower.elementwise import elementwise

            return [elementwise(self, instr, idx)]
        from hlofuse.backends.kernel_ir.lower import library

        if not self.hoist_scalars:
            raise LoweringError(f"{where(instr)}: a library routine inside a whole loop")
        return library.values(self, instr, idx)

    def load(self, buf: Buffer, idx: Index) -> Val:
        return self.g.load(buf, idx.lin())

    def load_param(self, instr: Instruction, idx: Index) -> Val:
        bufs = self.params[id(instr)]
        if len(bufs) != 1:
            raise LoweringError(f"{where(instr)}: a tuple-shaped input used as an array")
        return self.load(bufs[0], idx)

    # ----- conditions and guarded values --------------------------------------------------------

    def index_val(self, a: Affine) -> Val:
        return self.g.index(a)

    def lt(self, a: Affine, bound: int) -> Val:
        """`a < bound` as a pred value (folded when the range of `a` decides it)."""
        b = a.bounds()
        if b is not None:
            if b[1] < bound:
                return self.g.const(True, PRED)
            if b[0] >= bound:
                return self.g.const(False, PRED)
        return self.g.alu(LT, self.index_val(a), self.g.const(bound, S64))

    def ge(self, a: Affine, bound: int) -> Val:
        b = a.bounds()
        if b is not None:
            if b[0] >= bound:
                return self.g.const(True, PRED)
            if b[1] < bound:
                return self.g.const(False, PRED)
        return self.g.alu(GE, self.index_val(a), self.g.const(bound, S64))

    def all_of(self, conds: list[Val]) -> Val:
        out: Val | None = None
        for c in conds:
            if c.op == "const":
                if not ir.const_value(c):
                    return c
                continue
            out = c if out is None else self.g.alu(AND, out, c)
        return out if out is not None else self.g.const(True, PRED)

    def cases(self, dtype: DType, cases: list[tuple[Val | None, Callable[[], Val]]]) -> Val:
        """The value of the first case whose condition holds (None: always); each case's value is
        computed only where its condition holds (guarded reads stay in bounds)."""
        live: list[tuple[Val | None, Callable[[], Val]]] = []
        for c, fn in cases:
            if c is not None and c.op == "const":
                if not ir.const_value(c):
                    continue
                c = None
            live.append((c, fn))
            if c is None:
                break
        if len(live) == 1:
            return live[0][1]()
        return self._cases(dtype, live)

    def _cases(self, dtype: DType, live: list[tuple[Val | None, Callable[[], Val]]]) -> Val:
        c, fn = live[0]
        assert c is not None
        then_block: list[Stmt] = []
        with self.into(then_block):
            a = fn()
        else_block: list[Stmt] = []
        with self.into(else_block):
            b = live[1][1]() if len(live) == 2 and live[1][0] is None else \
                self._cases(dtype, live[1:])
        if not then_block and not else_block:
            return self.g.cond(c, a, b)
        # a branch needs statements (a loop): compute into a local inside an if/else
        tmp = self.local(dtype, 1, "sel")
        then_block.append(ir.Store(tmp, ir.ZERO, a))
        else_block.append(ir.Store(tmp, ir.ZERO, b))
        self.emit(ir.If(c, then_block, else_block))
        return self.g.load(tmp, ir.ZERO)

    def clamp(self, v: Val, hi: int) -> Affine:
        """An integer value converted to s64 and clamped into [0, hi], as an affine term."""
        hi = max(hi, 0)
        if hi == 0:
            return ir.ZERO
        if v.op == "const":
            return ir.affine(min(max(int(ir.const_value(v)), 0), hi))
        if v.dtype == U64:  # clamp as unsigned first: starts >= 2^63 would wrap negative in s64
            v = self.g.alu(UMIN64, v, self.g.const(hi, U64))
        x = v if v.dtype == S64 else self.g.alu(CVT64, v)
        x = self.g.alu(MAX64, x, self.g.const(0, S64))
        x = self.g.alu(MIN64, x, self.g.const(hi, S64))
        return ir.affine(x)


Handler = Callable[[Builder, Instruction, Index], list[Val]]
HANDLERS: dict[Opcode, Handler] = {}


def handles(*ops: Opcode) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for op in ops:
            HANDLERS[op] = fn
        return fn

    return register
