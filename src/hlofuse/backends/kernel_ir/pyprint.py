"""A second printer of the kernel IR: one optimized `Kernel` -> Python source (a function of
flat numpy arrays, inputs then outputs), compiled and run. Used by tests as a third oracle
beside the C backend and the interpreter (`tests/test_kernel_ir_pyprint.py`), and as the test
of the IR's design: a printer reads the decisions the lowering and the passes recorded and
makes none of its own.

    def kernel(b0, b1, b2):                       # in0, in1 -> out0 (flat arrays)
        b3 = np.zeros(8, _D[0])                   # locals and lanes buffers
        for x0 in range(0, 2048, 8):              # a vector loop: statement by statement,
            X0 = x0 + _LW8                        #   all lanes of a value as one array
            v17 = _A[0](b0[_ix(X0)])              # an alu: the interpreter's definition
            b2[_ix(X0)] = _A[1](v17, _K[0])
        for x1 in range(2048, 2051, 1):           # the scalar tail
            ...

What it relies on, and nothing else:
- Element ops (`alu`) run the interpreter's handler of their opcode (`interpreter/core.py`
  HANDLERS) on a scalar instruction made from the `ScalarOp` (opcode, result type, attrs), so
  op semantics are written once. Values are numpy scalars/arrays of their element type.
- A vector loop (`Loop.vector` = W) runs its body once per step on arrays of W lanes (the
  vectorizer's legality is the IR's promise that this is exact); `step` is read, not derived.
  Whether a value is a vector is `query.varies` (the IR's definition, also cprint's).
  A `cond` with a lane-varying condition is a `where` of both sides (the vectorizer allows such
  a cond only on values that read no memory, or read it through masked loads, `mload`, which
  read only the lanes their mask selects); any other `cond` computes one side in a branch.
- `lanes` buffers are W-element arrays every access reads or writes whole; `tile`/`StoreTile`
  address lane l at base(lane 0) + stride*l + k; `lanes_reduce` combines the partial buffers
  pairwise, then halves of the lanes (both as `ir.py` states them, like the C printer).
- A value computed once is reused until a statement writes a buffer it reads (the IR's reuse
  rule, `ir.py`: reads and writes of a buffer happen in statement order), as in `cprint`.
- `Kernel.placement`, `Loop.lazy`, `Loop.forms` and `parallel` are ignored: they choose where
  and how, never what (locals are allocated once, at the top, zeroed).
- A library call (`LibCall`) runs on the whole buffers from its `op` alone (`libop.LibOp`,
  plain data: no HLO instruction or computation): sort and select-and-scatter here, by their
  `Func`s (the comparator; the select and scatter functions), each value of a `Func` an
  interpreter alu as above (`_func_fn`): a stable sort of each row (the later of two elements
  goes first only when the comparator says it is less, the C routine's rule), and windows
  visited and hits scattered in source order (`windows.py`'s definition); the other ops by the
  interpreter's handler, run on an instruction made from the op's opcode, shapes and HLO
  attributes (a dot, convolution, top-k, rng-bit-generator, cholesky or triangular-solve calls
  no computation; a convolution also gets the `in_entry` the lowering recorded, and a LAPACK
  custom call is validated from the op's data, `lapack_targets.parse_call`, and run by the
  interpreter's routine). The C backend's own choices (a radix sort by the "key" function)
  are not followed: they compute the same values.

Generated text is made only of numbers and names derived here (`b3`, `x0`, `v17`, `_A[0]`);
no IR string (buffer or kernel names, labels, comments) is printed, so nothing from the input
reaches `compile()`. Every array index is checked (`_ix`): a negative one raises instead of
wrapping around as numpy would. Anything the printer cannot run raises `PyPrintError`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Affine, Buffer, Stmt, Val, Var
from hlofuse.backends.kernel_ir.libop import HLO_ATTRS, LibOp
from hlofuse.backends.kernel_ir.query import varies
from hlofuse.errors import CompileError
from hlofuse.ir.dtypes import DType
from hlofuse.ir.opcodes import Opcode

MAX_NESTING = 80  # Python's parser refuses about 100 nested blocks


class PyPrintError(CompileError):
    """A kernel the Python printer cannot print or run (names the kernel's label)."""


def _ix(i: Any) -> Any:
    """An index, checked non-negative (numpy would wrap a negative one around)."""
    if (i < 0).any() if isinstance(i, np.ndarray) else i < 0:
        raise IndexError(f"negative index {i}")
    return i


def _mload(b: np.ndarray, i: Any, m: Any) -> Any:
    """`b[i]` where `m` holds, 0 elsewhere (`ir.py`'s mload): masked-off lanes read nothing, so
    their index is never checked or used."""
    shape = np.broadcast_shapes(np.shape(i), np.shape(m))
    if not shape:
        return b[_ix(i)] if m else b.dtype.type(0)
    i, on = np.broadcast_to(i, shape), np.broadcast_to(np.asarray(m, bool), shape)
    out = np.zeros(shape, b.dtype)
    out[on] = b[_ix(i[on])]
    return out


def _int(x: Any, where: str) -> str:
    """An integer of the IR (a bound, coefficient, stride, divisor) as text: nothing else is
    printed into the source."""
    if type(x) is not int:
        raise PyPrintError(f"{where}: expected an integer in the IR, got {type(x).__name__}")
    return str(x)


def _lane0(x: Any) -> Any:
    return x.flat[0] if isinstance(x, np.ndarray) else x


def _alu_fn(op: ir.ScalarOp, where: str) -> Callable[..., Any]:
    """The interpreter's definition of `op` as a function of numpy values."""
    from hlofuse.backends.interpreter.core import HANDLERS, Interpreter
    from hlofuse.ir.instruction import Instruction
    from hlofuse.ir.shape import ArrayShape

    handler = HANDLERS.get(op.opcode)
    if handler is None:
        raise PyPrintError(f"{where}: the interpreter has no rule for {op.opcode.value}")
    instr = Instruction.create(op.opcode, ArrayShape(op.dtype, ()), name="alu",
                               attrs=dict(op.attrs))
    interp = Interpreter()
    out = op.dtype.np

    def run(*xs: Any) -> Any:
        with np.errstate(all="ignore"):
            r = handler(interp, instr, [np.asarray(x) for x in xs])
        r = np.asarray(r)
        return r if r.dtype == out else r.astype(out)

    return run


def _hreduce(fn: Callable[..., Any], bufs: Sequence[np.ndarray]) -> Any:
    """A vector reduction's partial accumulators combined as the vectorizer recorded: the
    buffers pairwise (a tree), then halves of the lanes, down to lane 0."""
    parts = [b.copy() for b in bufs]
    while len(parts) > 1:
        parts = [fn(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    cur = parts[0]
    while cur.shape[0] > 1:
        half = cur.shape[0] // 2
        cur = fn(cur[:half], cur[half:])
    return cur[0]


def _const(v: Val) -> Any:
    """A `const` value as a numpy scalar of its type (a float by its exact bits)."""
    tag, value = v.arg
    if v.dtype.is_float or v.dtype.is_complex:
        return np.frombuffer(bytes.fromhex(tag), dtype=v.dtype.np)[0]
    return np.asarray(value).astype(v.dtype.np)[()]


def _func_fn(func: ir.Func, where: str) -> Callable[..., list[Any]]:
    """A scalar function (`ir.Func`: parameters, constants, alus) as a function of numpy values
    (scalars, or arrays computed lane-wise), each alu the interpreter's (`_alu_fn`)."""
    order = ir.postorder([*func.params, *func.results])
    steps: list[tuple[Val, Any]] = []
    for v in order:
        if v.op == "param":
            steps.append((v, None))
        elif v.op == "const":
            steps.append((v, _const(v)))
        elif v.op == "alu":
            steps.append((v, _alu_fn(v.arg, where)))
        else:
            raise PyPrintError(f"{where}: a {v.op} value in a library call's scalar function")
    count = len(func.params)

    def run(*args: Any) -> list[Any]:
        if len(args) != count:
            raise PyPrintError(f"{where}: a scalar function of {count} parameters called with "
                               f"{len(args)}")
        env: dict[int, Any] = {}
        for v, x in steps:
            if v.op == "param":
                env[v.uid] = np.asarray(args[v.arg]).astype(v.dtype.np)
            elif v.op == "const":
                env[v.uid] = x
            else:
                env[v.uid] = x(*(env[a.uid] for a in v.args))
        return [env[r.uid] for r in func.results]

    return run


def _sort_fn(op: LibOp, where: str) -> Callable[[list[Any]], Any]:
    """sort: each row along the dimension sorted stably by the comparator (the later of two
    elements first only when it is less), every operand moved alike."""
    from hlofuse.ir.shape import TupleShape

    compare, dims = op.func("compare"), tuple(op.attr("dimensions", ()))
    if compare is None or len(dims) != 1:
        raise PyPrintError(f"{where}: a sort needs a comparator and one dimension")
    less = _func_fn(compare, where)
    dim = dims[0]
    tupled = isinstance(op.shape, TupleShape)

    def run(args: list[Any]) -> Any:
        arrays = [np.moveaxis(np.asarray(a), dim, -1) for a in args]
        shape = arrays[0].shape
        results = [np.array(a) for a in args]
        if shape[-1] > 1 and arrays[0].size:
            n = shape[-1]
            rows = [np.ascontiguousarray(a).reshape(-1, n) for a in arrays]
            out = [np.empty_like(x) for x in rows]
            for r in range(rows[0].shape[0]):
                row = [x[r] for x in rows]

                def first(i: int, j: int, row: list[Any] = row) -> int:
                    """-1 when element i is less than j (sorted asks `<` only: stable)."""
                    return -1 if bool(less(*(v for x in row for v in (x[i], x[j])))[0]) else 0

                order = sorted(range(n), key=functools.cmp_to_key(first))
                for o, x in zip(out, row, strict=True):
                    o[r] = x[order]
            results = [np.ascontiguousarray(np.moveaxis(o.reshape(shape), -1, dim))
                       for o in out]
        return tuple(results) if tupled else results[0]

    return run


def _select_and_scatter_fn(op: LibOp, where: str) -> Callable[[list[Any]], Any]:
    """select-and-scatter: for each source position in row-major order, the first in-bounds
    window element not beaten (a later one replaces it unless select(best, it) holds), then
    out[best] = scatter(out[best], source) (`cpu/library/windows.py`'s definition)."""
    window, select, scatter = op.attr("window"), op.func("select"), op.func("scatter")
    if select is None or scatter is None:
        raise PyPrintError(f"{where}: select-and-scatter needs select= and scatter=")
    win: tuple[Any, ...] = tuple(window or ())  # (a scalar's window is empty)
    if any(w.window_dilation != 1 or w.base_dilation != 1 or w.reversal for w in win):
        raise PyPrintError(f"{where}: dilated or reversed windows are not defined")
    sel, sca = _func_fn(select, where), _func_fn(scatter, where)

    def run(args: list[Any]) -> Any:
        operand, source, init = (np.asarray(a) for a in args)
        if len(win) != operand.ndim or source.ndim != operand.ndim:
            raise PyPrintError(f"{where}: window, operand and source ranks differ")
        out = np.full(operand.shape, init.reshape(()), operand.dtype)
        for s in np.ndindex(*source.shape):
            best: Any = None
            at: tuple[int, ...] | None = None
            for k in np.ndindex(*(w.size for w in win)):
                p = tuple(s[d] * w.stride + k[d] - w.pad_lo for d, w in enumerate(win))
                if any(not 0 <= x < n for x, n in zip(p, operand.shape, strict=True)):
                    continue  # padding is never selected
                cand = operand[p]
                if at is None or not bool(sel(best, cand)[0]):
                    best, at = cand, p
            if at is not None:
                out[at] = sca(out[at], source[s])[0]
        return out

    return run


def _handler_fn(op: LibOp, where: str) -> Callable[[list[Any]], Any]:
    """The interpreter's handler of `op`'s opcode, on an instruction made from the op's
    opcode, shapes and HLO attributes (the ops it serves call no computation)."""
    from hlofuse.backends.interpreter.core import HANDLERS, Interpreter
    from hlofuse.ir.instruction import Instruction

    if op.opcode is Opcode.CUSTOM_CALL:
        return _lapack_fn(op, where)
    handler = HANDLERS.get(op.opcode)
    if handler is None:
        raise PyPrintError(f"{where}: the interpreter has no rule for {op.opcode.value}")
    params = [Instruction.create(Opcode.PARAMETER, s, name=f"p{k}", parameter_number=k)
              for k, s in enumerate(op.operands)]
    hlo = set(HLO_ATTRS.get(op.opcode, ()))
    instr = Instruction.create(op.opcode, op.shape, params, name="libcall",
                               attrs={k: v for k, v in op.attrs if k in hlo})
    interp = Interpreter()
    if op.opcode is Opcode.CONVOLUTION:
        from hlofuse.backends.interpreter.convolution import convolve

        entry = bool(op.attr("in_entry", True))
        return lambda args: convolve(instr, args, entry)
    return lambda args: handler(interp, instr, args)


def _lapack_fn(op: LibOp, where: str) -> Callable[[list[Any]], Any]:
    """A LAPACK custom call: validated from the op's data, run by the interpreter's routine."""
    from hlofuse.backends import lapack_targets
    from hlofuse.backends.interpreter.lapack import run_call

    try:
        call = lapack_targets.parse_call(
            str(op.attr("custom_call_target", "")), list(op.operands), op.shape,
            str(op.attr("backend_config", "{}")), op.attr("num_batch_dims"))
    except lapack_targets.TargetError as exc:
        raise PyPrintError(f"{where}: {exc}") from None
    if call is None:
        raise PyPrintError(f"{where}: a custom call that is not a LAPACK routine")
    return lambda args: run_call(call, args, op.shape)


def _libcall_fn(op: LibOp, where: str) -> Callable[..., None]:
    """A library call on the whole buffers (operand leaves in order, reshaped), its result
    leaves written into the output buffers (see the module docstring for how each op runs)."""
    from hlofuse.ir.literal import flatten
    from hlofuse.ir.shape import ArrayShape, leaves

    if not isinstance(op, LibOp):
        raise PyPrintError(f"{where}: a library call whose op is not a LibOp")
    if op.opcode is Opcode.SORT:
        compute = _sort_fn(op, where)
    elif op.opcode is Opcode.SELECT_AND_SCATTER:
        compute = _select_and_scatter_fn(op, where)
    else:
        compute = _handler_fn(op, where)
    shapes = [leaves(s) for s in op.operands]
    tupled = [not isinstance(s, ArrayShape) for s in op.operands]
    outs = leaves(op.shape)

    def run(*bufs: np.ndarray) -> None:
        it = iter(bufs)
        args: list[Any] = []
        for ls, tup in zip(shapes, tupled, strict=True):
            arrs = [next(it).reshape(tuple(s.dims)) for s in ls]
            args.append(tuple(arrs) if tup else arrs[0])
        targets = list(it)
        with np.errstate(all="ignore"):
            value = compute(args)
        for dst, v, s in zip(targets, flatten(value), outs, strict=True):
            dst[:] = np.asarray(v, dtype=s.dtype.np).reshape(-1)

    return run


class _Printer:
    def __init__(self, kernel: ir.Kernel) -> None:
        self.k = kernel
        self.where = f"kernel {kernel.label or kernel.name}"
        self.lines: list[str] = []
        self.depth = 1
        self.bufs: dict[int, str] = {}  # buffer uid -> Python name
        self.allocs: list[Buffer] = []
        self.vars: dict[int, tuple[str, str | None]] = {}  # var uid -> (scalar, lanes) names
        self.vec: tuple[Var, int] | None = None
        self.scopes: list[dict[int, str]] = [{}]  # value uid -> name, per block
        self.vals: dict[int, Val] = {}
        self.alu: list[Callable[..., Any]] = []
        self.alu_index: dict[ir.ScalarOp, int] = {}
        self.consts: list[Any] = []
        self.const_index: dict[int, int] = {}
        self.dtypes: list[Any] = []
        self.libs: list[Callable[..., None]] = []
        self.lane_widths: set[int] = set()
        self.nvar = 0

    # ----- names ---------------------------------------------------------------------------

    def line(self, text: str) -> None:
        if self.depth > MAX_NESTING:
            raise PyPrintError(f"{self.where}: nests deeper than {MAX_NESTING} blocks")
        self.lines.append("    " * self.depth + text)

    def buf(self, b: Buffer) -> str:
        name = self.bufs.get(b.uid)
        if name is None:
            if b.kind in ("in", "out"):
                raise PyPrintError(f"{self.where}: a {b.kind} buffer that is not a parameter")
            name = self.bufs[b.uid] = f"b{len(self.bufs)}"
            self.allocs.append(b)
        return name

    def dtype(self, dt: DType) -> str:
        self.dtypes.append(dt.np)
        return f"_D[{len(self.dtypes) - 1}]"

    def alu_ref(self, op: ir.ScalarOp) -> str:
        n = self.alu_index.get(op)
        if n is None:
            n = self.alu_index[op] = len(self.alu)
            self.alu.append(_alu_fn(op, self.where))
        return f"_A[{n}]"

    def const_ref(self, v: Val) -> str:
        n = self.const_index.get(v.uid)
        if n is None:
            n = self.const_index[v.uid] = len(self.consts)
            self.consts.append(_const(v))
        return f"_K[{n}]"

    # ----- memo ----------------------------------------------------------------------------

    def find(self, v: Val) -> str | None:
        for s in reversed(self.scopes):
            if v.uid in s:
                return s[v.uid]
        return None

    def invalidate(self, bufs: set[Buffer]) -> None:
        if not bufs:
            return
        for s in self.scopes:
            for uid in [u for u in s if ir.reads(self.vals[u]) & bufs]:
                del s[uid]

    def remember(self, v: Val, name: str) -> str:
        self.vals[v.uid] = v
        self.scopes[-1][v.uid] = name
        return name

    # ----- the kernel ----------------------------------------------------------------------

    def print(self) -> str:
        k = self.k
        params = []
        for b in k.inputs + k.outputs:
            params.append(self.bufs.setdefault(b.uid, f"b{len(self.bufs)}"))
        for b in k.consts:
            self.bufs[b.uid] = f"b{len(self.bufs)}"
        self.block(k.body)
        pre = []
        for b in k.consts:
            self.consts.append(np.asarray(b.data).astype(b.dtype.np).reshape(-1))
            pre.append(f"    {self.bufs[b.uid]} = _K[{len(self.consts) - 1}]")
        for b in self.allocs:
            pre.append(f"    {self.bufs[b.uid]} = np.zeros({_int(max(1, b.size), self.where)}, "
                       f"{self.dtype(b.dtype)})")
        for w in sorted(self.lane_widths):
            pre.append(f"    _LW{w} = np.arange({w}, dtype=np.int64)")
        self.lines[:0] = pre
        body = "\n".join(self.lines) if self.lines else "    pass"
        return f"def kernel({', '.join(params)}):\n{body}\n    return None\n"

    def block(self, body: list[Stmt]) -> None:
        for s in body:
            self.stmt(s)

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, ir.Comment):
            return
        if isinstance(s, ir.Loop):
            self.loop(s)
        elif isinstance(s, ir.Store):
            self.store(s)
        elif isinstance(s, ir.StoreTile):
            self.store_tile(s)
        elif isinstance(s, ir.If):
            self.line(f"if {self.value(s.cond)}:")
            self.nested(s.then)
            if s.orelse:
                self.line("else:")
                self.nested(s.orelse)
            self.invalidate(ir.written(s.then + s.orelse))
        elif isinstance(s, ir.Let):
            self.value(s.value)
        elif isinstance(s, ir.Copy):
            d, src = self.buf(s.dst), self.buf(s.src)
            guard = f"if {d} is not {src}: " if s.if_distinct else ""
            self.line(f"{guard}{d}[:] = {src}")
            self.invalidate({s.dst})
        elif isinstance(s, ir.LibCall):
            self.libs.append(_libcall_fn(s.op, self.where))
            args = ", ".join(self.buf(b) for b in s.ins + s.outs)
            self.line(f"_L[{len(self.libs) - 1}]({args})")
            self.invalidate(set(s.outs))
        else:
            raise PyPrintError(f"{self.where}: cannot print {type(s).__name__}")

    def nested(self, body: list[Stmt]) -> None:
        self.scopes.append({})
        self.depth += 1
        n = len(self.lines)
        self.block(body)
        if len(self.lines) == n:
            self.line("pass")
        self.depth -= 1
        self.scopes.pop()

    def loop(self, s: ir.Loop) -> None:
        self.invalidate(ir.written(s.body))
        step = ir.step_of(s)
        lo, hi, w = (_int(x, self.where) for x in (s.lo, s.hi, s.vector))
        if s.vector and (s.hi - s.lo) % step:
            raise PyPrintError(f"{self.where}: vector loop [{s.lo}, {s.hi}) is not a whole "
                               f"number of steps of {step}")
        name = f"x{self.nvar}"
        self.nvar += 1
        self.line(f"for {name} in range({lo}, {hi}, {_int(step, self.where)}):")
        saved = self.vec
        lanes = None
        if s.vector:
            if self.vec is not None:
                raise PyPrintError(f"{self.where}: a vector loop inside a vector loop")
            lanes = "X" + name[1:]
            self.lane_widths.add(s.vector)
            self.depth += 1
            self.line(f"{lanes} = {name} + _LW{w}")
            self.depth -= 1
            self.vec = (s.var, s.vector)
        self.vars[s.var.uid] = (name, lanes)
        self.nested(s.body)
        del self.vars[s.var.uid]
        self.vec = saved
        self.invalidate(ir.written(s.body))

    def store(self, s: ir.Store) -> None:
        val = self.value(s.value)
        name = self.buf(s.buf)
        if s.buf.kind == "lanes":
            self.line(f"{name}[:] = {val}")
        else:
            self.line(f"{name}[_ix({self.aff(s.index)})] = {val}")
        self.invalidate({s.buf})

    def store_tile(self, s: ir.StoreTile) -> None:
        if self.vec is None:
            raise PyPrintError(f"{self.where}: a tile store outside a vector loop")
        w = self.vec[1]
        vals = [self.value(v) for v in s.values]
        base = self.aff(s.base)
        name = self.buf(s.buf)
        stride = _int(s.stride, self.where)
        for k, v in enumerate(vals):
            self.line(f"{name}[_ix(_lane0({base}) + {stride} * _LW{w} + {k})] = {v}")
        self.invalidate({s.buf})

    # ----- values --------------------------------------------------------------------------

    def aff(self, a: Affine) -> str:
        parts = []
        for t, c in a.terms:
            if isinstance(t, Var):
                names = self.vars.get(t.uid)
                if names is None:
                    raise PyPrintError(f"{self.where}: loop variable {t.uid} used outside "
                                       "its loop")
                x = names[1] or names[0]
            else:
                x = self.value(t)
            parts.append(x if c == 1 else f"{x} * {_int(c, self.where)}")
        if a.const or not parts:
            parts.append(_int(a.const, self.where))
        return "(" + " + ".join(parts) + ")"

    def varies(self, v: Val) -> bool:
        return self.vec is not None and varies(v, self.vec[0])

    def value(self, v: Val) -> str:
        """The name of `v`, computing what is not computed yet (operands first; a `cond`'s
        sides inside its branches)."""
        found = self.find(v)
        if found is not None:
            return found
        for x in _strict_postorder(v):
            if self.find(x) is None:
                self.compute(x)
        found = self.find(v)
        assert found is not None
        return found

    def compute(self, v: Val) -> None:
        op = v.op
        if op == "const":
            self.remember(v, self.const_ref(v))
            return
        name = f"v{v.uid}"
        if op == "cond":
            self.cond(v, name)
        elif op == "load":
            b = v.buffer
            if b.kind == "lanes":
                if self.vec is None:
                    raise PyPrintError(f"{self.where}: a vector register read outside its "
                                       "loop")
                self.line(f"{name} = {self.buf(b)}.copy()")
            else:
                self.line(f"{name} = {self.buf(b)}[_ix({self.aff(v.index)})]")
        elif op == "mload":
            self.line(f"{name} = _mload({self.buf(v.buffer)}, {self.aff(v.index)}, "
                      f"{self.value(v.args[0])})")
        elif op == "index":
            self.line(f"{name} = np.int64(0) + {self.aff(v.arg)}")
        elif op in ("idiv", "imod"):
            sym = "//" if op == "idiv" else "%"
            self.line(f"{name} = {self.value(v.args[0])} {sym} {_int(v.arg, self.where)}")
        elif op == "alu":
            args = ", ".join(self.value(a) for a in v.args)
            self.line(f"{name} = {self.alu_ref(v.arg)}({args})")
        elif op == "tile":
            if self.vec is None:
                raise PyPrintError(f"{self.where}: a tile read outside a vector loop")
            b, base, stride, k = v.arg
            self.line(f"{name} = {self.buf(b)}[_ix(_lane0({self.aff(base)}) + "
                      f"{_int(stride, self.where)} * _LW{self.vec[1]} + {_int(k, self.where)})]")
        elif op == "lanes_reduce":
            sop, *bufs = v.arg
            names = ", ".join(self.buf(b) for b in bufs)
            self.line(f"{name} = _hreduce({self.alu_ref(sop)}, [{names}])")
        else:
            raise PyPrintError(f"{self.where}: cannot print a {op} value")
        self.remember(v, name)

    def cond(self, v: Val, name: str) -> None:
        c, a, b = v.args
        cv = self.value(c)
        if self.varies(c):  # lane by lane: both sides read no memory (the vectorizer's rule)
            av, bv = self.value(a), self.value(b)
            self.line(f"{name} = np.where({cv}, {av}, {bv}).astype({self.dtype(v.dtype)})")
            return
        self.line(f"if {cv}:")
        for side, keyword in ((a, None), (b, "else:")):
            if keyword:
                self.line(keyword)
            self.scopes.append({})
            self.depth += 1
            self.line(f"{name} = {self.value(side)}")
            self.depth -= 1
            self.scopes.pop()


def _strict_postorder(root: Val) -> list[Val]:
    """Values to compute for `root`, operands first; a `cond`'s sides are not entered (they
    are computed in its branches)."""
    out: list[Val] = []
    seen: set[int] = set()
    stack: list[tuple[Val, bool]] = [(root, False)]
    while stack:
        v, done = stack.pop()
        if done:
            out.append(v)
            continue
        if v.uid in seen:
            continue
        seen.add(v.uid)
        stack.append((v, True))
        kids = v.args[:1] if v.op == "cond" else v.children()
        for c in reversed(kids):
            if c.uid not in seen:
                stack.append((c, False))
    return out


class PyKernel:
    """A kernel printed as Python and compiled: `source` is the text, `run(ins)` the outputs
    (fresh arrays, flat), `run(ins, alias=True)` passes each input the kernel may update in
    place (`Kernel.inplace`) as the output it pairs with."""

    def __init__(self, kernel: ir.Kernel) -> None:
        p = _Printer(kernel)
        self.kernel = kernel
        self.source = p.print()
        scope: dict[str, Any] = {
            "np": np, "_ix": _ix, "_lane0": _lane0, "_hreduce": _hreduce, "_mload": _mload,
            "_A": p.alu, "_K": p.consts, "_D": p.dtypes, "_L": p.libs,
        }
        try:
            code = compile(self.source, "<kernel_ir.pyprint>", "exec")
        except (SyntaxError, RecursionError, MemoryError) as exc:  # nests too deep for Python
            raise PyPrintError(f"kernel {kernel.label or kernel.name}: Python cannot compile "
                               f"its text ({type(exc).__name__}: {exc})") from None
        exec(code, scope)
        self.fn: Callable[..., None] = scope["kernel"]

    def run(self, ins: Sequence[np.ndarray], alias: bool = False) -> list[np.ndarray]:
        k = self.kernel
        if len(ins) != len(k.inputs):
            raise PyPrintError(f"kernel {k.name} takes {len(k.inputs)} inputs, got {len(ins)}")
        flat = []
        for b, x in zip(k.inputs, ins, strict=True):
            a = np.ascontiguousarray(x, dtype=b.dtype.np).reshape(-1)
            if a.size != b.size:
                raise PyPrintError(f"kernel {k.name}: input {b.index} has {a.size} elements, "
                                   f"not {b.size}")
            flat.append(a.copy())
        outs = [np.zeros(max(1, b.size), b.dtype.np) for b in k.outputs]
        if alias:
            for o, i in k.inplace.items():
                outs[o] = flat[i]
        self.fn(*flat, *outs)
        return [o[:b.size] for o, b in zip(outs, k.outputs, strict=True)]


def print_kernel(kernel: ir.Kernel) -> str:
    """The Python source of `kernel` (a function `kernel(in0, ..., out0, ...)`)."""
    return _Printer(kernel).print()

