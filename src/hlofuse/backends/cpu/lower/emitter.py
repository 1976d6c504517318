"""The expression emitter: the value of an HLO instruction at an index, as C statements.

    em.value(mul_56, Index((2048,), linear="i"))  ->  "mul_56"   after emitting
        const float sin_5 = hf_sin_f32(in3[i]); ... const float mul_56 = sin_5 * 9.8f;

Values are memoised per (instruction, index) within the current block, so a subexpression used
twice is computed once; a value computed inside an `if` branch or an inner loop is not visible
after it. Values of size-1 arrays (scalars, broadcast sources, dynamic-slice starts) do not
depend on the loop variables: they are hoisted to the kernel's preamble and computed once per call.

Index maps (each operand's index from the result's; the data-movement ones in `maps.py`) follow
the interpreter's semantics
(`backends/interpreter/shaping.py`, `indexing.py`): dynamic-slice / dynamic-update-slice / gather
start indices are clamped so the slice fits; reads guarded by pad, concatenate and
dynamic-update-slice happen only inside the branch where they are in bounds. Reductions live in
`reduce.py`; ops that are not index maps (dot, sort, ...) are materialised into scratch buffers
by `lower.library` (see `materialize`). An op no rule covers raises `LoweringError` naming it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from hlofuse.backends.cpu import cexpr
from hlofuse.backends.cpu.lower import index as ix
from hlofuse.backends.cpu.lower.index import Index
from hlofuse.backends.cpu.lower.naming import fresh, word
from hlofuse.errors import CompileError
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape, leaves


class LoweringError(CompileError):
    """An instruction the CPU kernel emitter cannot lower (names the instruction)."""


def where(instr: Instruction) -> str:
    comp = instr.parent.name if instr.parent is not None else "?"
    return f"{instr.opcode.value} {instr.name} (in {comp})"


def dims_of(instr: Instruction) -> tuple[int, ...]:
    shape = instr.shape
    if not isinstance(shape, ArrayShape):
        raise LoweringError(f"{where(instr)}: expected an array shape, got {shape}")
    return tuple(shape.dims)


def shape_leaves(instr: Instruction) -> list[ArrayShape]:
    return leaves(instr.shape)


class Emitter:
    """Emits one kernel's body. `params` binds instructions (fusion parameters, or a single op's
    operands) to their input pointers, one per array leaf."""

    def __init__(self, kernel: str, params: dict[int, list[str]], used_globals: set[str],
                 flat_loops: bool = True) -> None:
        self.kernel = kernel
        self.params = params
        self.used_globals = used_globals
        self.names: set[str] = set()
        self.helpers: list[str] = []  # file-scope definitions (constants, scalar functions)
        self.helper_keys: dict[object, str] = {}
        self.pre: list[str] = []  # hoisted statements (before every loop)
        self.post: list[str] = []  # statements after every loop (free scratch)
        self.body: list[str] = []
        self.out = self.body
        self.depth = 1
        self.scopes: list[dict[object, object]] = [{}]
        self.flat_loops = flat_loops
        self.loop_vars: set[str] = set()  # flat-loop variables
        self.needs_nest = False  # a flat loop variable had to be delinearised
        self.uses_omp = False
        # loop variables' ranges [lo, hi) and (loop nest shape, dimension), so conditions such as
        # a concatenate's `i0 < 2` fold; a condition a split of the loop range would decide is
        # recorded in `split_requests`, and the kernel is emitted again with `splits`
        self.ranges: dict[str, tuple[int, int]] = {}
        self.var_dim: dict[str, tuple[tuple[int, ...], int]] = {}
        self.split_requests: dict[tuple[tuple[int, ...], int], set[int]] = {}
        self.splits: dict[tuple[tuple[int, ...], int], set[int]] = {}

    # ----- output ---------------------------------------------------------------------------

    def line(self, text: str) -> None:
        self.out.append("    " * self.depth + text)

    def open(self, header: str) -> None:
        self.line(f"{header} {{" if header else "{")
        self.depth += 1
        self.scopes.append({})

    def close(self, trailer: str = "") -> None:
        self.scopes.pop()
        self.depth -= 1
        self.line("}" + trailer)

    def fresh(self, base: str) -> str:
        return fresh(base, self.names)

    def global_name(self, base: str) -> str:
        return fresh(f"{self.kernel}_{base}", self.used_globals)

    def local(self, base: str, ctype: str, expr: str, const: bool = True) -> str:
        name = self.fresh(base)
        self.line(f"{'const ' if const else ''}{ctype} {name} = {expr};")
        return name

    def lookup(self, key: object) -> object | None:
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def remember(self, key: object, value: object) -> None:
        self.scopes[-1][key] = value

    @contextmanager
    def at_preamble(self) -> Iterator[None]:
        """Emit into the preamble (hoisted code, visible everywhere)."""
        saved = (self.out, self.depth, self.scopes)
        self.out, self.depth, self.scopes = self.pre, 1, self.scopes[:1]
        try:
            yield
        finally:
            self.out, self.depth, self.scopes = saved

    def in_preamble(self) -> bool:
        return self.out is self.pre

    def helper(self, key: object, make: Callable[[str], str], base: str) -> str:
        """A file-scope helper (made once per kernel): `make(name)` gives its C text."""
        name = self.helper_keys.get(key)
        if name is None:
            name = self.global_name(base)
            self.helpers.append(make(name))
            self.helper_keys[key] = name
        return name

    # ----- indices -----------------------------------------------------------------------

    def multi(self, idx: Index) -> tuple[str, ...]:
        """The multi-index of `idx`, delinearising its linear form if needed."""
        if idx.multi is not None:
            return idx.multi
        assert idx.linear is not None
        key = ("delin", idx.linear, idx.dims)
        found = self.lookup(key)
        if found is not None:
            return found  # type: ignore[return-value]
        if idx.linear in self.loop_vars:
            self.needs_nest = True
        st = ix.strides(idx.dims)
        out = []
        for d, n in enumerate(idx.dims):
            if n == 1:
                out.append("0")
                continue
            e = ix.div(idx.linear, st[d])
            if d > 0:  # the first dimension needs no modulo: linear < size
                e = ix.mod(e, n)
            out.append(self.local(f"i{d}", "int64_t", e))
        multi = tuple(out)
        self.remember(key, multi)
        return multi

    # ----- values ------------------------------------------------------------------------

    def value(self, instr: Instruction, idx: Index) -> str:
        """C expression (usually a local's name) of `instr`'s element at `idx`, in the compute
        type of its element type."""
        if isinstance(instr.shape, TupleShape):
            raise LoweringError(f"{where(instr)}: a tuple-shaped value used as an array")
        return self.values(instr, idx)[0]

    def values(self, instr: Instruction, idx: Index) -> list[str]:
        """One expression per array leaf of `instr` at `idx` (tuple-shaped producers such as a
        variadic reduce give several)."""
        hoist = math.prod(idx.dims) == 1
        if hoist:
            idx = ix.zero(idx.dims)
        key = (id(instr), idx.key())
        found = self.lookup(key)
        if found is not None:
            return found  # type: ignore[return-value]
        if hoist and not self.in_preamble():
            with self.at_preamble():
                result = self._compute(instr, idx)
                self.remember(key, result)
            return result
        result = self._compute(instr, idx)
        self.remember(key, result)
        return result

    def ctype(self, instr: Instruction) -> str:
        return cexpr.compute_type(instr.array_shape.dtype)

    def _compute(self, instr: Instruction, idx: Index) -> list[str]:
        if id(instr) in self.params:
            return [self.load_param(instr, idx)]
        op = instr.opcode
        handler = _HANDLERS.get(op)
        if handler is not None:
            return handler(self, instr, idx)
        if instr.is_elementwise:
            return [self.elementwise(instr, idx)]
        from hlofuse.backends.cpu.lower import materialize

        return materialize.values(self, instr, idx)

    def load(self, ptr: str, shape: ArrayShape, idx: Index, base: str) -> str:
        expr = cexpr.load(shape.dtype, f"{ptr}[{idx.lin()}]")
        return self.local(base, cexpr.compute_type(shape.dtype), expr)

    def load_param(self, instr: Instruction, idx: Index) -> str:
        ptrs = self.params[id(instr)]
        if len(ptrs) != 1:
            raise LoweringError(f"{where(instr)}: a tuple-shaped input used as an array")
        return self.load(ptrs[0], instr.array_shape, idx, word(instr))

    def elementwise(self, instr: Instruction, idx: Index) -> str:
        args = []
        for o in instr.operands:
            od = dims_of(o)
            args.append(self.value(o, idx if od == idx.dims else ix.zero(od)))
        if instr.opcode is Opcode.COPY:
            return args[0]
        return self.local(word(instr), self.ctype(instr), cexpr.elementwise(instr, args))

    def cases(self, base: str, ctype: str, cases: list[tuple[str | None, Callable[[], str]]]
              ) -> str:
        """`if (c0) v = f0(); else if (c1) ...; else v = fn();` — each value computed only in
        its branch (so reads guarded by the condition stay in bounds)."""
        live = []
        for cond, fn in cases:
            if cond == "0":
                continue
            live.append((cond, fn))
            if cond is None or cond == "1":
                break
        if len(live) == 1:
            return live[0][1]()
        var = self.fresh(base)
        self.line(f"{ctype} {var};")
        for j, (cond, fn) in enumerate(live):
            last = j == len(live) - 1
            if j == 0:
                header = f"if ({cond})"
            elif last and cond in (None, "1"):
                header = "else"
            else:
                header = f"else if ({cond})"
            self.open(header)
            self.line(f"{var} = {fn()};")
            self.close()
        return var

    def lt(self, expr: str, bound: int) -> str:
        """C condition `expr < bound`, folded to "1"/"0" when the range of `expr` decides it."""
        if ix.is_const(expr):
            return "1" if int(expr) < bound else "0"
        r = self.ranges.get(expr)
        if r is not None:
            lo, hi = r
            if hi <= bound:
                return "1"
            if lo >= bound:
                return "0"
            if expr in self.var_dim:
                self.split_requests.setdefault(self.var_dim[expr], set()).add(bound)
        return f"{expr} < {bound}"

    def ge(self, expr: str, bound: int) -> str:
        c = self.lt(expr, bound)
        return {"1": "0", "0": "1"}.get(c, f"{expr} >= {bound}")

    def clamp_start(self, base: str, value: str, hi: int) -> str:
        """`value` (an integer compute-type expression) as int64_t clamped into [0, hi]."""
        hi = max(hi, 0)
        if hi == 0:
            return "0"
        if ix.is_const(value):
            return str(min(max(int(value), 0), hi))
        key = ("clamp", value, hi)
        found = self.lookup(key)
        if isinstance(found, str):
            return found
        v = self.local(base, "int64_t", f"(int64_t)({value})", const=False)
        self.line(f"{v} = {v} < 0 ? 0 : ({v} > {hi} ? {hi} : {v});")
        self.remember(key, v)
        return v

    def start_indices(self, instr: Instruction, first: int, rank: int) -> list[str]:
        """Start index operands (one scalar per dimension, or one rank-1 operand)."""
        ops = instr.operands[first:]
        if len(ops) == 1 and isinstance(ops[0].shape, ArrayShape) and ops[0].shape.rank == 1:
            vec = ops[0]
            return [self.value(vec, Index((rank,), (str(d),), str(d))) for d in range(rank)]
        if len(ops) != rank:
            raise LoweringError(f"{where(instr)}: expected {rank} start indices, got {len(ops)}")
        return [_constant_int(o) or self.value(o, ix.zero(dims_of(o))) for o in ops]


def _constant_int(instr: Instruction) -> str | None:
    """The integer value of a scalar integer constant, as C text (None otherwise)."""
    if instr.opcode is not Opcode.CONSTANT or instr.literal is None:
        return None
    shape = instr.array_shape
    if shape.size != 1 or not shape.dtype.is_integral:
        return None
    return str(int(np.asarray(instr.literal).reshape(-1)[0]))


# ----- index-map handlers --------------------------------------------------------------------

Handler = Callable[[Emitter, Instruction, Index], list[str]]
_HANDLERS: dict[Opcode, Handler] = {}


def handles(*ops: Opcode) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for op in ops:
            _HANDLERS[op] = fn
        return fn

    return register


@handles(Opcode.PARAMETER)
def _parameter(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    raise LoweringError(f"{where(instr)}: parameter is not bound to a kernel input")


@handles(Opcode.CONSTANT)
def _constant(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    shape = instr.array_shape
    if instr.literal is None:
        raise LoweringError(f"{where(instr)}: constant without a value")
    arr = np.asarray(instr.literal, dtype=shape.dtype.np).reshape(shape.dims)
    if arr.size == 1:
        return [cexpr.literal(arr.reshape(())[()], shape.dtype)]
    storage = cexpr.ctype(shape.dtype)

    def make(name: str) -> str:
        init = cexpr.array_initializer(arr, shape.dtype)
        return f"static const {storage} {name}[{arr.size}] = {init};\n"

    name = em.helper(("const", id(instr)), make, word(instr))
    return [em.load(name, shape, idx, word(instr))]


@handles(Opcode.IOTA)
def _iota(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    shape = instr.array_shape
    if shape.rank == 0:
        return [f"({em.ctype(instr)})0"]
    d = int(instr.attrs.get("iota_dimension", 0))
    m = em.multi(idx)[d]
    if shape.dtype.is_pred:
        return [f"({em.ctype(instr)})({m} != 0)"]
    return [em.local(word(instr), em.ctype(instr), f"({em.ctype(instr)})({m})")]


@handles(Opcode.BROADCAST)
def _broadcast(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    src = instr.operand(0)
    sd = dims_of(src)
    if math.prod(sd) == 1:
        return [em.value(src, ix.zero(sd))]
    dims = instr.dimensions
    out = idx.dims
    # broadcast of the trailing (or leading) dimensions in order: one division, not a full
    # delinearisation, when only the linear index is known
    if idx.multi is None and list(dims) == list(range(dims[0], dims[-1] + 1)):
        if idx.linear in em.loop_vars:
            em.needs_nest = True  # a loop nest avoids the division
        inner = math.prod(out[dims[-1] + 1:])
        lin = ix.div(idx.lin(), inner)
        if dims[0] > 0:
            lin = ix.mod(lin, math.prod(out[dims[0]:dims[-1] + 1]))
        return [em.value(src, ix.of_linear(sd, lin))]
    m = em.multi(idx)
    return [em.value(src, ix.of_multi(sd, [m[d] for d in dims]))]


@handles(Opcode.RESHAPE, Opcode.BITCAST)
def _reshape(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    src = instr.operand(0)
    if instr.opcode is Opcode.BITCAST and src.array_shape.dtype != instr.array_shape.dtype:
        raise LoweringError(f"{where(instr)}: a bitcast that changes the element type")
    sd = dims_of(src)
    if sd == idx.dims:
        return [em.value(src, idx)]
    return [em.value(src, ix.of_linear(sd, idx.lin()))]


@handles(Opcode.TRANSPOSE)
def _transpose(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    src = instr.operand(0)
    perm = instr.dimensions
    m = em.multi(idx)
    multi = [""] * len(perm)
    for k, p in enumerate(perm):
        multi[p] = m[k]
    return [em.value(src, ix.of_multi(dims_of(src), multi))]


@handles(Opcode.TUPLE)
def _tuple(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    out: list[str] = []
    for o in instr.operands:
        out += em.values(o, idx)
    return out


@handles(Opcode.GET_TUPLE_ELEMENT)
def _gte(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    src = instr.operand(0)
    k = int(instr.attrs["index"])
    shape = src.shape
    assert isinstance(shape, TupleShape)
    first = sum(len(leaves(s)) for s in shape.elements[:k])
    count = len(leaves(shape.elements[k]))
    if id(src) in em.params:
        ptrs = em.params[id(src)][first:first + count]
        if count != 1:
            raise LoweringError(f"{where(instr)}: nested tuple inputs are not supported")
        return [em.load(ptrs[0], instr.array_shape, idx, word(instr))]
    return em.values(src, idx)[first:first + count]


@handles(Opcode.MAP)
def _map(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    from hlofuse.backends.cpu.lower import scalar

    comp = instr.attrs["to_apply"]
    fn = em.helper(("scalar", id(comp)), lambda n: scalar.scalar_function(comp, n), "apply")
    args = [em.value(o, idx) for o in instr.operands]
    r = em.fresh(word(instr))
    em.line(f"{em.ctype(instr)} {r};")
    em.line(f"{fn}({', '.join([*args, '&' + r])});")
    return [r]


def _reduce(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    from hlofuse.backends.cpu.lower import reduce

    return reduce.reduce_value(em, instr, idx)


def _reduce_window(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    from hlofuse.backends.cpu.lower import reduce

    return reduce.reduce_window_value(em, instr, idx)


_HANDLERS[Opcode.REDUCE] = _reduce
_HANDLERS[Opcode.REDUCE_WINDOW] = _reduce_window


# the data-movement index maps register themselves in _HANDLERS
from hlofuse.backends.cpu.lower import maps  # noqa: E402, F401
