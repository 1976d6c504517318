"""The kernel IR: one kernel as a loop nest over named index variables, with loads and stores
whose indices are affine expressions kept as structure, scalar ops from the op table, and calls
of library routines. Every native backend lowers fused HLO to this IR, transforms it (split,
jam, collapse, fission, narrow, vectorize, parallelize, hoist: `passes/`), then prints it
(`backends/cpu/cprint.py`; for the gpu backend `passes/grid.py` maps it and
`backends/gpu/triton_print.py` prints it).

    Kernel ─ inputs/outputs/locals: Buffer          (name, element type, size, kind)
           ├ body: [Stmt]
           └ placement: Placement                   (passes/place.py: where locals live)
    Stmt  = Loop(var, lo, hi, body, parallel, vector, step, lazy, forms)
          | Store(buf, index, value)
          | If(cond, then, orelse) | Let(value) | Copy(dst, src) | LibCall(op, ins, outs)
          | Comment(text)                        (LibCall.op: a `libop.LibOp`, plain data)
    Val   = const | load(buf, Affine) | index(Affine) | alu(ScalarOp, args)
          | cond(c, a, b) | idiv/imod(x, n) | param(k) | mload(buf, Affine, mask)
          | tile(buf, base, stride, k) | lanes_reduce(op, lanes buffers...)
    Affine = const + Σ coef·term,   term = Var (a loop index) | Val (an s64 value: a clamped
             dynamic start, a gathered index, a delinearised coordinate)

Design (after tinygrad's UOps, TorchInductor's LoopBody, TVM's TIR BufferLoad/For):

- `Val`s are immutable and interned per kernel by a `Graph` (same op, type, operands and
  argument -> the same object), so a value used twice is one node and identity is equality.
  Nothing hashes a DAG recursively: keys are built from operand ids, so 10,000-deep chains cost
  nothing special, and every traversal here is iterative.
- Loads are pure reads; the order of a read and a write of the same buffer is the statement
  order: a value means what it computes when the statement using it runs (a load sees every
  earlier write). Reuse, the rule every printer follows: a computed value is reused, in the
  block (statement list, or branch of a `cond`) that computed it and the blocks nested there,
  until a statement writes a buffer it reads: a `Store`, `StoreTile`, `Copy` (`dst`),
  `LibCall` (`outs`), or a `Loop` or `If` whose body writes one (a loop also drops them
  before it starts: its later iterations follow its writes). A use after that computes the
  value again, reading the buffer anew. Hoisting only moves a value out of a loop that writes
  none of the buffers it reads, so a hoisted `Let` stays reused throughout the loop.
- A `cond` value reads `a` only where `c` holds (guarded reads: pad, concatenate,
  dynamic-update-slice, windows). `mload(buf, index, mask)` is `buf[index]` where the pred
  `mask` holds and 0 elsewhere, and reads nothing where it does not: the vectorizer's form of
  a contiguous load under a `cond` whose condition varies by lane (a masked vector load).
  Lowering keeps conditions on loop indices affine, so `split` can cut a loop's range where
  they change and fold them.
- Element types are HLO's (`ir.dtypes.DType`); index arithmetic is s64. A `Loop` with
  `vector=W` runs W consecutive values of its variable per step (lanes); values that depend on
  it are vectors of W lanes, everything else stays scalar. Tails run as a second, scalar loop.
  `step` (a multiple of W) is how far the variable advances per iteration when the body holds
  several copies of the vector body (unrolled reductions: one partial accumulator per copy).
  Whether a value is a vector is `query.varies`.
- The vector forms (the vectorizer makes them, in a vector loop of W lanes over `var`):
  `tile(buf, base, stride, k)` is, in lane l, `buf[base + stride*l + k]`, `base` evaluated
  at lane 0 (the loop variable's value for the step; an unrolled copy's offset is in `base`,
  whose coefficient on `var` is `stride`; 0 <= k < stride). The `stride` tiles of one `base`
  read the block `buf[base, base + stride*W)` once; `StoreTile(buf, base, stride, values)`
  writes that block: `buf[base + stride*l + k]` = lane l of `values[k]`.
  `lanes_reduce(op, p0, .., pn-1)` reduces partial accumulators (`lanes` buffers of W lanes,
  W a power of two) to one scalar in this order: first the buffers, lane-wise, as a pairwise
  tree: each round replaces the list by `op(p0, p1), op(p2, p3), ...`, an odd last one kept
  as it is, until one vector v is left (p0, p1, p2 -> op(op(p0, p1), p2)); then the lanes, by
  halves: while v has n > 1 lanes, lane i becomes `op(v[i], v[i + n/2])` for i < n/2; the
  result is lane 0 (W = 4: op(op(v0, v2), op(v1, v3))). Operands keep that order (left: the
  lower buffer or lane), which decides the result of a non-associative float `op`.

The last passes change no statement: they record what printers would otherwise decide
(`Kernel.placement`, a vector loop's `LazyPlan` and `LaneForms`), so every printer reads one
set of decisions; a pass that changes statements after them must run them again.

Conditions every pass keeps: a `Var` is bound by exactly one enclosing `Loop`; a `Store`'s index
stays in its buffer (lowering guarantees it, passes only substitute equal expressions); `In`
buffers are never stored to, except one listed in `Kernel.inplace` (the driver may pass the same
memory as the output it pairs with).
"""

from __future__ import annotations

import itertools
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from hlofuse.ir.dtypes import S64, DType
from hlofuse.ir.opcodes import Opcode

if TYPE_CHECKING:
    from hlofuse.backends.kernel_ir.libop import LibOp

BufferKind = Literal["in", "out", "local", "const", "lanes"]
STACK_LOCAL_BYTES = 16384  # locals up to this size live on the stack (backends may differ)

_uids = itertools.count()


class Buffer:
    """A flat array of `size` elements of `dtype`. `in`/`out` buffers are the kernel's
    arguments (`index` is their position); `local` is scratch owned by the kernel (stack when
    small, heap otherwise); `const` holds `data` (a numpy array) as a file-scope table; `lanes`
    is one vector register of a vector loop (`size` lanes): every access reads or writes all
    lanes, whatever the index (privatised scalars and partial reduction accumulators)."""

    __slots__ = ("data", "dtype", "index", "kind", "name", "size", "uid")

    def __init__(self, name: str, dtype: DType, size: int, kind: BufferKind, index: int = 0,
                 data: Any = None) -> None:
        self.name = name
        self.dtype = dtype
        self.size = size
        self.kind = kind
        self.index = index
        self.data = data
        self.uid = next(_uids)

    def __repr__(self) -> str:
        return f"{self.name}:{self.dtype}[{self.size}]"


class Var:
    """A loop index. `lo`/`hi` are the range of the loop that binds it (hi exclusive)."""

    __slots__ = ("hi", "lo", "name", "uid")

    def __init__(self, name: str, lo: int, hi: int) -> None:
        self.name = name
        self.lo = lo
        self.hi = hi
        self.uid = next(_uids)

    def __repr__(self) -> str:
        return self.name


Term = "Var | Val"


@dataclass(frozen=True)
class Affine:
    """`const + Σ coef * term` over loop variables and s64 values, terms ordered by uid (so
    equal expressions are equal tuples). Build with `affine()` / the arithmetic methods."""

    terms: tuple[tuple[Any, int], ...] = ()
    const: int = 0

    @property
    def is_const(self) -> bool:
        return not self.terms

    def coef(self, term: Any) -> int:
        for t, c in self.terms:
            if t is term:
                return c
        return 0

    def __add__(self, other: Affine | int) -> Affine:
        if isinstance(other, int):
            return Affine(self.terms, self.const + other) if other else self
        return _combine(self, other, 1)

    def __sub__(self, other: Affine | int) -> Affine:
        if isinstance(other, int):
            return Affine(self.terms, self.const - other) if other else self
        return _combine(self, other, -1)

    def __mul__(self, k: int) -> Affine:
        if k == 0:
            return ZERO
        if k == 1:
            return self
        return Affine(tuple((t, c * k) for t, c in self.terms), self.const * k)

    def without(self, term: Any) -> Affine:
        return Affine(tuple((t, c) for t, c in self.terms if t is not term), self.const)

    def vars(self) -> list[Var]:
        return [t for t, _ in self.terms if isinstance(t, Var)]

    def vals(self) -> list[Val]:
        return [t for t, _ in self.terms if isinstance(t, Val)]

    def bounds(self, depth: int = 0) -> tuple[int, int] | None:
        """Inclusive [min, max] over the variables' ranges and the value terms' ranges
        (`value_bounds`); None if a value's range is unknown."""
        lo = hi = self.const
        for t, c in self.terms:
            if isinstance(t, Var):
                r: tuple[int, int] | None = (t.lo, t.hi - 1)
            else:
                r = value_bounds(t, depth + 1)
            if r is None:
                return None
            a, b = c * r[0], c * r[1]
            lo += min(a, b)
            hi += max(a, b)
        return lo, hi

    def __repr__(self) -> str:
        parts = [f"{c}*{t!r}" if c != 1 else repr(t) for t, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


ZERO = Affine()


def _combine(a: Affine, b: Affine, sign: int) -> Affine:
    coefs: dict[int, list[Any]] = {}
    for t, c in a.terms:
        coefs[t.uid] = [t, c]
    for t, c in b.terms:
        if t.uid in coefs:
            coefs[t.uid][1] += sign * c
        else:
            coefs[t.uid] = [t, sign * c]
    terms = tuple((t, c) for _, (t, c) in sorted(coefs.items()) if c)
    return Affine(terms, a.const + sign * b.const)


def affine(x: Var | Val | int) -> Affine:
    if isinstance(x, int):
        return Affine((), x)
    return Affine(((x, 1),), 0)


@dataclass(frozen=True)
class ScalarOp:
    """An elementwise HLO op on one element type: the opcode (from the op table), the result
    type, and the few attributes that change its meaning (comparison direction and type,
    reduce-precision bit counts)."""

    opcode: Opcode
    dtype: DType
    attrs: tuple[tuple[str, Any], ...] = ()

    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default


ValOp = Literal["const", "load", "index", "alu", "cond", "idiv", "imod", "param", "tile",
                "lanes_reduce", "mload"]
READS = ("load", "tile", "lanes_reduce", "mload")  # values that read buffers (`Val.buffers`)
INDEXED = ("load", "index", "tile", "mload")  # values with an index expression (`Val.index`)


class Val:
    """One value (see the module docstring). Create through `Graph`, never directly."""

    __slots__ = ("_deps", "_reads", "arg", "args", "dtype", "op", "uid")

    def __init__(self, op: ValOp, dtype: DType, args: tuple[Val, ...], arg: Any) -> None:
        self.op = op
        self.dtype = dtype
        self.args = args
        self.arg = arg
        self.uid = next(_uids)
        self._deps: frozenset[Var] | None = None
        self._reads: frozenset[Buffer] | None = None

    @property
    def buffer(self) -> Buffer:
        assert self.op in READS
        return self.arg[1] if self.op == "lanes_reduce" else self.arg[0]

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        """Every buffer the value reads itself: a lanes_reduce combines several partial
        accumulators (one per unrolled copy), lane by lane, before reducing across lanes."""
        assert self.op in READS
        return tuple(self.arg[1:]) if self.op == "lanes_reduce" else (self.arg[0],)

    @property
    def index(self) -> Affine:
        assert self.op in INDEXED
        return self.arg if self.op == "index" else self.arg[1]

    def children(self) -> list[Val]:
        """Operands, including the values inside an index expression."""
        out = list(self.args)
        if self.op in INDEXED:
            out.extend(self.index.vals())
        return out

    def __repr__(self) -> str:
        return f"%{self.uid}:{self.op}"


Bounds = tuple[int, int] | None


class IntRange(NamedTuple):
    """An integer type's range (numpy's iinfo does not take sub-byte types such as s4)."""

    min: int
    max: int


def int_range(dtype: DType) -> IntRange:
    if dtype.is_pred:
        return IntRange(0, 1)
    if dtype.is_signed:
        return IntRange(-(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1)
    return IntRange(0, (1 << dtype.bits) - 1)


def value_bounds(v: Val, depth: int = 0, memo: dict[int, Bounds] | None = None) -> Bounds:
    """Inclusive bounds of an integer value, where they are known: constants, index
    expressions, integer divisions and remainders of non-negative ones, clamps (maximum/minimum:
    a dynamic slice's start), integer conversions, loads (the type's range), and sums,
    differences, products and right shifts by a constant whose exact result stays in the
    type's range (no wrap-around). None for anything else, or past a small depth. `memo` (value
    uid -> bounds) keeps a pass that asks for many values linear."""
    if memo is not None:
        if v.uid not in memo:
            memo[v.uid] = _value_bounds(v, depth, memo)
        return memo[v.uid]
    return _value_bounds(v, depth, memo)


def _value_bounds(v: Val, depth: int, memo: dict[int, Bounds] | None) -> Bounds:

    if depth > 16 or not v.dtype.is_integral:
        return None
    if v.op == "alu" and v.arg.opcode in _ARITH_BOUNDS:
        return _arith_bounds(v, depth, memo)
    if v.op == "const":
        return int(const_value(v)), int(const_value(v))
    if v.op == "index":
        return v.arg.bounds(depth + 1)
    if v.op in ("idiv", "imod"):  # of a value >= 0 by n > 0
        r = value_bounds(v.args[0], depth + 1, memo)
        if r is None or r[0] < 0:
            return None
        n = v.arg
        if v.op == "idiv":
            return r[0] // n, r[1] // n
        return r if r[1] < n else (0, n - 1)
    if v.op in ("load", "mload"):
        info = int_range(v.dtype)
        return int(info.min), int(info.max)
    if v.op == "alu" and v.arg.opcode is Opcode.CONVERT:
        r = value_bounds(v.args[0], depth + 1, memo)
        if r is None:
            return None
        info = int_range(v.dtype)
        return r if info.min <= r[0] and r[1] <= info.max else (int(info.min), int(info.max))
    if v.op == "alu" and v.arg.opcode in (Opcode.MAXIMUM, Opcode.MINIMUM):
        lo, hi = _clamp_bounds(v, depth, memo)
        return (lo, hi) if lo is not None and hi is not None else None
    return None


def _clamp_bounds(v: Val, depth: int, memo: dict[int, Bounds] | None
                  ) -> tuple[int | None, int | None]:
    """Bounds of a maximum/minimum, each end known or not: a clamp `min(max(x, 0), 26)` lies in
    [0, 26] whatever x is (a gathered position, jnp.take's wrapped index)."""
    ends: list[tuple[int | None, int | None]] = []
    for a in v.args:
        if a.op == "alu" and a.arg.opcode in (Opcode.MAXIMUM, Opcode.MINIMUM) and depth < 16:
            ends.append(_clamp_bounds(a, depth + 1, memo))
        else:
            r = value_bounds(a, depth + 1, memo)
            ends.append((None, None) if r is None else r)
    lows, highs = [e[0] for e in ends], [e[1] for e in ends]
    known_lo = [x for x in lows if x is not None]
    known_hi = [x for x in highs if x is not None]
    if v.arg.opcode is Opcode.MAXIMUM:  # at least every operand's low; at most the top high
        return (max(known_lo) if known_lo else None,
                max(known_hi) if len(known_hi) == len(highs) else None)
    return (min(known_lo) if len(known_lo) == len(lows) else None,
            min(known_hi) if known_hi else None)


_ARITH_BOUNDS = frozenset({Opcode.ADD, Opcode.SUBTRACT, Opcode.MULTIPLY,
                           Opcode.SHIFT_RIGHT_LOGICAL})


def _arith_bounds(v: Val, depth: int, memo: dict[int, Bounds] | None) -> Bounds:

    if v.dtype.is_narrow_int:
        return None
    a, b = (value_bounds(x, depth + 1, memo) for x in v.args)
    if a is None or b is None:
        return None
    code = v.arg.opcode
    if code is Opcode.ADD:
        lo, hi = a[0] + b[0], a[1] + b[1]
    elif code is Opcode.SUBTRACT:
        lo, hi = a[0] - b[1], a[1] - b[0]
    elif code is Opcode.MULTIPLY:
        ends = [x * y for x in a for y in b]
        lo, hi = min(ends), max(ends)
    else:  # a non-negative value shifted right by a constant within the type's width
        if a[0] < 0 or b[0] != b[1] or not 0 <= b[0] < v.dtype.bits:
            return None
        lo, hi = a[0] >> b[0], a[1] >> b[0]
    info = int_range(v.dtype)
    return (lo, hi) if info.min <= lo and hi <= info.max else None


def postorder(roots: Iterable[Val], known: Container[int] = frozenset()) -> list[Val]:
    """Every value reachable from `roots` but not through a value whose uid is `known` (those
    left out too), operands before users (iterative)."""
    out: list[Val] = []
    seen: set[int] = set()
    stack: list[tuple[Val, bool]] = [(r, False) for r in reversed(list(roots))]
    while stack:
        v, done = stack.pop()
        if done:
            out.append(v)
            continue
        if v.uid in seen or v.uid in known:
            continue
        seen.add(v.uid)
        stack.append((v, True))
        for c in reversed(v.children()):
            if c.uid not in seen and c.uid not in known:
                stack.append((c, False))
    return out


def deps(v: Val) -> frozenset[Var]:
    """The loop variables `v` depends on (through indices and operands)."""
    if v._deps is None:
        for x in postorder([v]):
            if x._deps is not None:
                continue
            acc: set[Var] = set()
            if x.op in INDEXED:
                acc.update(x.index.vars())
            for c in x.children():
                assert c._deps is not None
                acc |= c._deps
            x._deps = frozenset(acc)
    assert v._deps is not None
    return v._deps


def reads(v: Val) -> frozenset[Buffer]:
    """The buffers `v` reads."""
    if v._reads is None:
        for x in postorder([v]):
            if x._reads is not None:
                continue
            acc: set[Buffer] = set(x.buffers) if x.op in READS else set()
            for c in x.children():
                assert c._reads is not None
                acc |= c._reads
            x._reads = frozenset(acc)
    assert v._reads is not None
    return v._reads


class Graph:
    """Interns the values of one kernel."""

    def __init__(self) -> None:
        self._table: dict[tuple[Any, ...], Val] = {}

    def make(self, op: ValOp, dtype: DType, args: tuple[Val, ...] = (), arg: Any = None) -> Val:
        key = (op, dtype.name, tuple(a.uid for a in args), _key(arg))
        v = self._table.get(key)
        if v is None:
            v = Val(op, dtype, args, arg)
            self._table[key] = v
        return v

    # -- constructors --------------------------------------------------------------------------

    def const(self, value: Any, dtype: DType) -> Val:
        return self.make("const", dtype, (), _const_key(value, dtype))

    def load(self, buf: Buffer, index: Affine) -> Val:
        return self.make("load", buf.dtype, (), (buf, index))

    def mload(self, buf: Buffer, index: Affine, mask: Val) -> Val:
        """`buf[index]` where the pred `mask` holds, 0 elsewhere (reading nothing there)."""
        if mask.op == "const":
            return self.load(buf, index) if mask.arg[1] else self.const(0, buf.dtype)
        return self.make("mload", buf.dtype, (mask,), (buf, index))

    def index(self, index: Affine) -> Val:
        if index.is_const:
            return self.const(index.const, S64)
        if index.terms == ((index.terms[0][0], 1),) and not index.const \
                and isinstance(index.terms[0][0], Val):
            return index.terms[0][0]
        return self.make("index", S64, (), index)

    def alu(self, op: ScalarOp, *args: Val) -> Val:
        return self.make("alu", op.dtype, tuple(args), op)

    def cond(self, c: Val, a: Val, b: Val) -> Val:
        if c.op == "const":
            return a if c.arg[1] else b
        if a is b:
            return a
        return self.make("cond", a.dtype, (c, a, b))

    def idiv(self, x: Affine, n: int) -> Affine:
        """`x // n` for x >= 0, n > 0, as an affine term (folded when it can be)."""
        if n == 1:
            return x
        if x.is_const:
            return affine(x.const // n)
        high, low, bounds = _split_multiple(x, n)
        if bounds is not None and bounds[0] >= 0:
            # x = n*y + r with r >= 0  ->  x // n = y + r // n, and r // n = 0 when r < n
            y = Affine(tuple((t, c // n) for t, c in high.terms), high.const // n)
            if bounds[1] < n:
                return y
            if high != ZERO:
                return y + self.idiv(low, n)
        return affine(self.make("idiv", S64, (self.index(x),), n))

    def imod(self, x: Affine, n: int) -> Affine:
        """`x % n` for x >= 0, n > 0 (folded when it can be)."""
        if n == 1:
            return ZERO
        if x.is_const:
            return affine(x.const % n)
        high, low, bounds = _split_multiple(x, n)
        if bounds is not None and bounds[0] >= 0:
            # x = n*y + r with r >= 0  ->  x % n = r % n, which is r when r < n
            if bounds[1] < n:
                return low
            if high != ZERO:
                return self.imod(low, n)
        return affine(self.make("imod", S64, (self.index(x),), n))

    def param(self, k: int, dtype: DType) -> Val:
        return self.make("param", dtype, (), k)


def _split_multiple(x: Affine, n: int) -> tuple[Affine, Affine, tuple[int, int] | None]:
    """`x = high + low` with every coefficient of `high` (and its constant) a multiple of `n`,
    and the inclusive range of `low` (None if unknown)."""
    high = Affine(tuple((t, c) for t, c in x.terms if c % n == 0), x.const - x.const % n)
    low = Affine(tuple((t, c) for t, c in x.terms if c % n), x.const % n)
    return high, low, low.bounds()


def _key(arg: Any) -> Any:
    if isinstance(arg, float) and arg != arg:
        return ("nan",)  # NaN != NaN: constants are told apart by their bits (the hex part)
    if isinstance(arg, tuple):
        return tuple(_key(a) for a in arg)
    if isinstance(arg, Buffer | Var | Val):
        return ("#", arg.uid)
    if isinstance(arg, Affine):
        return ("A", tuple((t.uid, c) for t, c in arg.terms), arg.const)
    return arg


def _const_key(value: Any, dtype: DType) -> tuple[str, Any]:
    """Constants keep their exact bit pattern (so -0.0, NaN payloads and 1 vs 1.0 differ)."""
    import numpy as np

    arr = np.asarray(value).astype(dtype.np)
    if dtype.is_float or dtype.is_complex:
        return (arr.tobytes().hex(), arr.item())
    if dtype.is_pred:
        return ("b", bool(arr))
    return ("i", int(arr))


def const_value(v: Val) -> Any:
    """The Python value of a `const` Val (float, int or bool)."""
    assert v.op == "const"
    return v.arg[1]


# ----- statements -----------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class Loop:
    """`for var in [lo, hi)`; `parallel`: iterations may run on different threads (they write
    disjoint elements); `vector`: W lanes per step (0 = scalar); `step`: how far the variable
    advances per iteration (0: `vector`, or 1 for a scalar loop; see `step_of`)."""

    var: Var
    lo: int
    hi: int
    body: list[Stmt]
    parallel: bool = False
    vector: int = 0
    step: int = 0
    lazy: LazyPlan | None = None  # a vector loop's lazy selects (`passes/lazy.py`)
    forms: LaneForms | None = None  # a vector loop's cheaper lane forms (`passes/lanes.py`)


@dataclass(eq=False, slots=True)
class LazyPlan:
    """Which lane-varying selects of a vector loop compute one side only when some lane of the
    vector takes it (`passes/lazy.py`): `sides` maps a select's uid (a `select` alu or a `cond`
    value) to that side (1: taken where the condition holds, 2: the other), in the order the
    loop's values are computed; `groups` holds those selects by (condition uid, side), one
    branch per group; `users` maps each value of the loop to the values using it."""

    sides: dict[int, int] = field(default_factory=dict)
    groups: dict[tuple[int, int], list[Val]] = field(default_factory=dict)
    users: dict[int, set[int]] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class LaneForms:
    """The values of a vector loop printed in a cheaper form than their op's generic vector
    form (`passes/lanes.py`), by uid: `narrow`, 32-bit converts of 64-bit indices computed in
    32-bit lanes; `blend`, selects (and converts to numbers) of a lane-varying comparison
    computed as a blend on the comparison's mask; `gather`, gathers (loads at addresses
    computed from lane-varying values) of a loop holding more than `lanes.GATHERS_AS_LANES`,
    printed as the target's gather instruction where it has one; `compare32`, comparisons of a
    64-bit index with a loop-invariant value, both within 32 bits, computed in 32-bit lanes;
    `index32`, lane-varying index values (`index`, `idiv`, `imod`) in [0, 2^31) used only as
    indices, computed in unsigned 32-bit lanes; `outline`, values without a vector form
    computed through a call to an out-of-line lane function, not an inline lane loop
    (`passes/outline.py`)."""

    narrow: set[int] = field(default_factory=set)
    blend: set[int] = field(default_factory=set)
    gather: set[int] = field(default_factory=set)
    compare32: set[int] = field(default_factory=set)
    index32: set[int] = field(default_factory=set)
    outline: set[int] = field(default_factory=set)


@dataclass(eq=False, slots=True)
class Placement:
    """Where a kernel's `local` and `lanes` buffers live (`passes/place.py`): `blocks` maps a
    block (the id of its statement list: the kernel's body, a loop's, an `If` side) to the
    buffers declared at its top, the innermost block containing every access; `heap` holds
    the locals too large for the stack (`Target.stack_local_bytes`), allocated there and freed
    at the block's end. The others are stack arrays (`lanes`: one vector register)."""

    blocks: dict[int, list[Buffer]] = field(default_factory=dict)
    heap: set[Buffer] = field(default_factory=set)
    stack_bytes: int = STACK_LOCAL_BYTES  # the limit it placed by


@dataclass(eq=False, slots=True)
class GridPlan:
    """How a GPU printer runs a kernel (`passes/grid.py`): `modes` maps each loop it maps (by
    id) to (`grid` | `programs` | `lanes` | `serial`, the reason) and `blocks` a lanes loop
    to its lanes per step; `grid_loop` is the top-level loop spread over programs, if any;
    `pre` the leading copies the driver runs before the launch; `once` the top-level
    statements program 0 alone runs; `rows` the locals held as one block of registers across
    the lanes loops over their elements (a column reduction's accumulators); `carried` the
    elements a serial loop's lanes keep in registers across its iterations (a whole loop's
    state); `block` the lanes per program of a `grid` loop."""

    block: int
    modes: dict[int, tuple[str, str]] = field(default_factory=dict)
    blocks: dict[int, int] = field(default_factory=dict)
    grid_loop: Loop | None = None
    pre: list[Copy] = field(default_factory=list)
    once: set[int] = field(default_factory=set)
    rows: dict[int, int] = field(default_factory=dict)  # lane rows (by uid) -> their block
    # a serial loop (by id) -> (its lanes loop, [(buffer, index)]): state kept in the lanes'
    # registers across the serial loop's iterations, loaded before it and stored after it
    carried: dict[int, tuple[Loop, list[tuple[Buffer, Affine]]]] = field(default_factory=dict)
    warps: int = 4  # warps per program: one lane per thread in its widest lanes loop

    def mode(self, loop: Loop) -> str:
        return self.modes.get(id(loop), ("serial", ""))[0]

    @property
    def programs(self) -> int:
        """How many programs the launch runs."""
        loop = self.grid_loop
        if loop is None:
            return 1
        n = loop.hi - loop.lo
        if self.mode(loop) == "programs":
            return max(1, n)
        return max(1, -(-n // self.block))


def step_of(loop: Loop) -> int:
    """How far `loop`'s variable advances per iteration."""
    return loop.step or loop.vector or 1


@dataclass(eq=False, slots=True)
class Store:
    buf: Buffer
    index: Affine
    value: Val


@dataclass(eq=False, slots=True)
class If:
    cond: Val
    then: list[Stmt]
    orelse: list[Stmt] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class Let:
    """Compute `value` here (a hoisted invariant); later uses in this block and inside it read
    the result until a statement writes a buffer `value` reads (then a use computes it again:
    the reuse rule of the module docstring)."""

    value: Val


@dataclass(eq=False, slots=True)
class Copy:
    """`memcpy(dst, src)` of the whole of `src` (both the same size); with `if_distinct`, only
    when they are different memory (in-place kernels)."""

    dst: Buffer
    src: Buffer
    if_distinct: bool = False


@dataclass(eq=False, slots=True)
class StoreTile:
    """A vectorized group store: `buf[base + stride*l + k]` = lane l of `values[k]` for every
    k in [0, stride) and every lane l of the enclosing vector loop, `base` evaluated at lane 0
    (an interleaving store of the block `buf[base, base + stride*W)`; see the module
    docstring)."""

    buf: Buffer
    base: Affine
    stride: int
    values: list[Val]


@dataclass(eq=False, slots=True)
class LibCall:
    """A library routine (GEMM, convolution, sort, top-k, RNG, select-and-scatter, LAPACK):
    `op` says what to compute as plain data (`libop.LibOp`: opcode, shapes, attributes, and
    the called computations lowered to `Func`s; no HLO instruction), `ins` and `outs` are whole
    buffers, row-major: the operands' leaves and the result's leaves, in order."""

    op: LibOp
    ins: list[Buffer]
    outs: list[Buffer]


@dataclass(eq=False, slots=True)
class Comment:
    text: str


Stmt = Loop | Store | If | Let | Copy | StoreTile | LibCall | Comment


@dataclass(eq=False, slots=True)
class Func:
    """A scalar function (a sort comparator or key, select-and-scatter's select or scatter):
    `params` are `param` Vals, `results` Vals over them (params, constants and alus only).
    Library calls carry theirs in `LibOp.funcs`; the C backend prints each as a static inline
    function its routine calls. Kernels inline reducers instead."""

    name: str
    params: list[Val]
    results: list[Val]


@dataclass(eq=False, slots=True)
class Kernel:
    """One kernel. `inplace` maps an output position to the input position it may share
    memory with. `label` is input text (the instruction's name) for error messages, never
    printed into the kernel; `summary` is what the kernel's head comment says, made by the code
    from the kernel's structure alone, so the same kernel prints the same C in any program."""

    name: str
    inputs: list[Buffer]
    outputs: list[Buffer]
    body: list[Stmt]
    graph: Graph
    locals: list[Buffer] = field(default_factory=list)
    consts: list[Buffer] = field(default_factory=list)
    funcs: list[Func] = field(default_factory=list)
    inplace: dict[int, int] = field(default_factory=dict)
    label: str = ""
    summary: str = ""
    threads: int = 1  # threads a `parallel` loop may use (set by the parallelize pass)
    placement: Placement | None = None  # where locals live (set by the place pass)
    grid: GridPlan | None = None  # how a GPU printer runs its loops (set by the grid pass)


def walk(body: list[Stmt]) -> Iterator[Stmt]:
    """Every statement in `body`, nested ones included, in order (iterative)."""
    stack: list[Iterator[Stmt]] = [iter(body)]
    while stack:
        try:
            s = next(stack[-1])
        except StopIteration:
            stack.pop()
            continue
        yield s
        if isinstance(s, Loop):
            stack.append(iter(s.body))
        elif isinstance(s, If):
            stack.append(iter(s.then + s.orelse))


def stmt_vals(s: Stmt) -> list[Val]:
    """The values a statement uses directly (not those of nested statements)."""
    if isinstance(s, Store):
        return [s.value, *s.index.vals()]
    if isinstance(s, StoreTile):
        return [*s.values, *s.base.vals()]
    if isinstance(s, If):
        return [s.cond]
    if isinstance(s, Let):
        return [s.value]
    return []


def body_values(body: list[Stmt]) -> list[Val]:
    """Every value the statements of `body` (nested ones included) use, operands first."""
    roots: list[Val] = []
    for s in walk(body):
        roots.extend(stmt_vals(s))
    return postorder(roots)


def written(body: list[Stmt]) -> set[Buffer]:
    """Buffers stored to anywhere in `body`."""
    out: set[Buffer] = set()
    for s in walk(body):
        if isinstance(s, Store | StoreTile):
            out.add(s.buf)
        elif isinstance(s, Copy):
            out.add(s.dst)
        elif isinstance(s, LibCall):
            out.update(s.outs)
    return out
