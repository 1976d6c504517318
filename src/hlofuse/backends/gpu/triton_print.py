"""The kernel IR printed as a Triton kernel: a GPU printer of the same IR the C printer reads.

    print_kernel(kernel) -> str         the source of `@triton.jit def kernel(b0, ...)`
    TritonKernel(kernel).run(ins)       built from a file (Triton reads its source) and run on
                                        torch tensors (on the GPU, or under TRITON_INTERPRET=1
                                        on the CPU); .launch(ins, outs): the driver's call
    signature(kernel)                   its parameters' Triton types (ahead-of-time compiles)

    @triton.jit
    def kernel(b0, b1, b2):                           # in0, in1 -> out0 (flat pointers)
        pid = tl.program_id(0)
        x0 = (0 + pid * 128 + tl.arange(0, 128)).to(tl.int64)    # a `grid` loop's lanes
        m1 = x0 < 2048
        v3 = tl.load(b0 + x0, mask=m1, other=0)
        tl.store(b2 + x0, (v3 * 2.0).to(tl.float32), mask=m1)

What it reads, and nothing else: the kernel's statements and values, and `Kernel.grid` (the
grid pass, `kernel_ir/passes/grid.py`): which top-level loop is spread over programs (`grid`:
lanes across programs; `programs`: one iteration per program, as scalar code), which loops run
as lanes inside a program (block by block when longer than their block) or one iteration at a
time, the leading copies the launcher runs (skipped here), the statements program 0 alone
runs (guarded by `pid == 0`), and the locals held as rows of lane registers. Loops inside
lanes run in order in each lane. Every store and every load whose address depends on a lane
is masked by the lanes that exist and by the conditions guarding it (an `If`, the taken side
of a `cond`), so a guarded read never touches memory its guard excludes. One-element locals
are registers (a block of lanes inside a lanes loop, else a scalar), a multi-element local
read and written only at constant indices is a row of scalar registers, a column reduction's
accumulators one block register; each is assigned under its guard. A value is computed once
and reused, under the guards it was computed under or more of them, until a statement
writes a buffer it reads (the IR's reuse rule, `ir.py`).

The kernel IR given is the target-independent one (`optimize` for the `scalar` target, one
thread: no vector forms, no parallel marks). Element ops are those with a Triton form in
`_BINARY`/`_UNARY`, the comparisons, selects, shifts, converts (float -> integer as XLA:
truncating, saturating, NaN -> 0), bitcast-converts between types of one width, and f32
power (in f64, `power`); anything else, a library call (the driver runs those:
`library.py`), a copy inside lanes, a local it cannot keep in registers, or a type without a
Triton form raises `GpuPrintError` (an UnsupportedOpError) naming the kernel. Generated text
holds only names made here (`b0`, `v3`, `x0`) and numbers.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import math
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Affine, Buffer, Stmt, Val, Var
from hlofuse.backends.kernel_ir.passes.grid import constant_indices
from hlofuse.backends.kernel_ir.passes.parallel import access_counts
from hlofuse.errors import UnsupportedOpError
from hlofuse.ir.dtypes import DType
from hlofuse.ir.opcodes import Opcode


class GpuPrintError(UnsupportedOpError):
    """Something in a kernel the Triton printer has no form for (names the kernel)."""


_TL = {"f32": "tl.float32", "f64": "tl.float64", "s32": "tl.int32", "s64": "tl.int64",
       "u32": "tl.uint32", "u64": "tl.uint64", "s8": "tl.int8", "u8": "tl.uint8",
       "s16": "tl.int16", "u16": "tl.uint16", "pred": "tl.int1"}
_BINARY = {Opcode.ADD: "({0} + {1})", Opcode.SUBTRACT: "({0} - {1})",
           Opcode.MULTIPLY: "({0} * {1})",
           Opcode.MAXIMUM: "tl.maximum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
           Opcode.MINIMUM: "tl.minimum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
           Opcode.AND: "({0} & {1})", Opcode.OR: "({0} | {1})", Opcode.XOR: "({0} ^ {1})"}
_FLOAT_BINARY = {Opcode.DIVIDE: "({0} / {1})"}
_UNARY = {Opcode.NEGATE: "(-{0})", Opcode.ABS: "tl.abs({0})", Opcode.EXP: "tl.exp({0})",
          Opcode.LOG: "tl.log({0})", Opcode.SQRT: "tl.sqrt({0})", Opcode.RSQRT: "tl.rsqrt({0})",
          Opcode.SIN: "tl.sin({0})", Opcode.COS: "tl.cos({0})",
          Opcode.LOGISTIC: "tl.sigmoid({0})", Opcode.FLOOR: "tl.floor({0})",
          Opcode.CEIL: "tl.ceil({0})", Opcode.COPY: "{0}"}
MAX_COPY_BLOCK = 1024  # elements a program copies per step

_COMPARE = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def _tl_type(dt: DType, where: str) -> str:
    t = _TL.get(dt.name)
    if t is None:
        raise GpuPrintError(f"{where}: no Triton form for element type {dt}")
    return t


class _Printer:
    def __init__(self, kernel: ir.Kernel) -> None:
        if kernel.grid is None:
            raise GpuPrintError(f"kernel {kernel.name}: not mapped (passes/grid.py)")
        self.k = kernel
        self.plan = kernel.grid
        self.where = f"kernel {kernel.name}"
        self.lines: list[str] = []
        self.depth = 1
        self.n = 0
        self.names: dict[Buffer, str] = {}
        self.locals: dict[Buffer, str] = {}  # one-element locals: registers
        self.rows: dict[Buffer, list[str]] = {}  # constant-indexed locals: rows of registers
        self.state: dict[tuple[Buffer, Affine], str] = {}  # carried state in lane registers
        self.vars: dict[Var, str] = {}
        self.scopes: list[dict[tuple[int, tuple[str, ...]], tuple[str, frozenset[Buffer]]]] = [{}]
        self.guard: list[str] = []  # masks in force (lanes that exist, conditions)
        self.lane_var: Var | None = None  # of the loop running lanes: masks are blocks there
        self.lane_block = 0  # its lanes per step

    # -- output -----------------------------------------------------------------------------

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def fresh(self, base: str) -> str:
        self.n += 1
        return f"{base}{self.n}"

    def mask(self) -> str | None:
        return " & ".join(self.guard) if self.guard else None

    def find(self, v: Val) -> str | None:
        """A name holding `v`, computed under the guards in force or fewer of them."""
        for k in range(len(self.guard), -1, -1):
            key = (v.uid, tuple(self.guard[:k]))
            for scope in reversed(self.scopes):
                if key in scope:
                    return scope[key][0]
        return None

    def remember(self, v: Val, name: str) -> str:
        self.scopes[-1][(v.uid, tuple(self.guard))] = (name, ir.reads(v))
        return name

    def invalidate(self, written: set[Buffer]) -> None:
        for scope in self.scopes:
            for key in [k for k, (_, r) in scope.items() if r & written]:
                del scope[key]

    # -- the kernel -------------------------------------------------------------------------

    def print(self) -> str:
        k = self.k
        params: list[str] = []
        for b in k.inputs + k.outputs:
            self.names[b] = f"b{len(params)}"
            params.append(self.names[b])
        self.lines.append("@triton.jit")
        self.lines.append(f"def kernel({', '.join(params)}):")
        self.line("pid = tl.program_id(0)")
        if k.consts:
            raise GpuPrintError(f"{self.where}: constant tables are not printed yet")
        used = access_counts(k.body)
        lane_locals = self.lane_locals()
        for b in k.locals:
            if b.size == 1 or b.uid in self.plan.rows:
                self.locals[b] = f"t{len(self.locals) + len(self.rows)}"
            elif b in used:
                if b in lane_locals or not constant_indices(k.body, b):
                    raise GpuPrintError(f"{self.where}: a local of {b.size} elements")
                n = len(self.locals) + len(self.rows)
                self.rows[b] = [f"t{n}_{i}" for i in range(b.size)]
        for b in k.locals:
            if b.uid in self.plan.rows:
                self.declare(b, self.plan.rows[b.uid])
            elif b not in lane_locals:
                self.declare(b, 0)
        pre = {id(s) for s in self.plan.pre}
        for s in k.body:
            if id(s) in pre:
                continue  # (the launcher runs it before the launch)
            if id(s) in self.plan.once:
                self.guard.append("(pid == 0)")
                self.stmt(s)
                self.guard.pop()
            else:
                self.stmt(s)
        return "\n".join(self.lines) + "\n"

    def lane_locals(self) -> set[Buffer]:
        """Locals touched inside a loop that runs lanes (`parallel.safe`: only there)."""
        out: set[Buffer] = set()
        for s in ir.walk(self.k.body):
            if isinstance(s, ir.Loop) and self.plan.mode(s) in ("grid", "lanes"):
                out.update(b for b in access_counts(s.body) if b in self.k.locals)
        return out

    def declare(self, b: Buffer, block: int) -> None:
        """A local's registers: a scalar, or a block of lanes in a loop that runs lanes (its
        locals are its own: `passes/grid.py`), zero before they are used."""
        t = _tl_type(b.dtype, self.where)
        shape = f"[{block}]" if block else "[]"
        for name in self.rows.get(b, [self.locals.get(b, "")]):
            if name:
                self.line(f"{name} = tl.full({shape}, 0, {t})")

    def bind(self, v: Var) -> str:
        name = self.vars.get(v)
        if name is None:
            name = self.vars[v] = f"x{len(self.vars)}"
        return name

    # -- loops ------------------------------------------------------------------------------

    def loop(self, s: ir.Loop) -> None:
        if s.vector or (s.step and s.step != 1):
            raise GpuPrintError(f"{self.where}: a vector loop (print the scalar target's IR)")
        mode = self.plan.mode(s)
        if mode == "grid":
            self.lanes(s, self.plan.block, spread=True)
        elif mode == "lanes":
            if self.lane_var is not None:
                raise GpuPrintError(f"{self.where}: lanes inside lanes")
            self.lanes(s, self.plan.blocks.get(id(s), self.plan.block), spread=False)
        elif mode == "programs":
            self.line(f"{self.bind(s.var)} = (pid + {s.lo}).to(tl.int64)")
            self.block(s.body)
            self.invalidate(ir.written(s.body))
        else:
            self.serial(s)

    def lanes(self, s: ir.Loop, block: int, spread: bool) -> None:
        """`block` iterations of `s` at a time, one per lane: over programs (`spread`), in one
        step when `block` covers the loop, else stepping through it."""
        var = self.bind(s.var)
        m = self.fresh("m")
        stepped = not spread and s.hi - s.lo > block
        self.invalidate(ir.written(s.body))
        if spread:
            base = f"{s.lo} + pid * {block}"
        elif stepped:
            base = self.fresh("c")
            self.line(f"for {base} in range({s.lo}, {s.hi}, {block}):")
            self.depth += 1
        else:
            base = str(s.lo)
        self.line(f"{var} = ({base} + tl.arange(0, {block})).to(tl.int64)")
        self.line(f"{m} = {var} < {s.hi}")
        self.lane_body(s, m, block)
        if stepped:
            self.depth -= 1
        if not spread:
            self.line("tl.debug_barrier()")

    def lane_body(self, s: ir.Loop, m: str, block: int) -> None:
        """The body of lanes loop `s` (its lanes bound, `m` the lanes that exist): its locals
        declared as blocks of `block` lanes, its statements under `m`."""
        used = access_counts(s.body)
        for b in self.k.locals:
            if b in used and b.uid not in self.plan.rows:
                self.declare(b, block)
        self.guard.append(m)
        self.scopes.append({})
        self.lane_var, self.lane_block = s.var, block
        for st in s.body:
            self.stmt(st)
        self.lane_var, self.lane_block = None, 0
        self.scopes.pop()
        self.guard.pop()
        self.invalidate(ir.written(s.body))

    def serial(self, s: ir.Loop) -> None:
        carried = self.plan.carried.get(id(s))
        if carried is not None:
            self.carrying(s, *carried)
            return
        self.invalidate(ir.written(s.body))  # (later iterations follow its writes)
        self.line(f"for {self.bind(s.var)} in range({s.lo}, {s.hi}):")
        self.depth += 1
        self.block(s.body)
        self.depth -= 1
        self.invalidate(ir.written(s.body))

    def carrying(self, s: ir.Loop, lane: ir.Loop, state: list[tuple[Buffer, Affine]]) -> None:
        """A serial loop whose one lanes loop keeps `state` in registers (`GridPlan.carried`):
        the lanes are bound once, before it; each state element is loaded into a block
        register there, read and written in the register by every iteration, and stored
        after the loop."""
        block = self.plan.blocks[id(lane)]
        var = self.bind(lane.var)
        m = self.fresh("m")
        self.invalidate(ir.written(s.body))
        self.line(f"{var} = ({lane.lo} + tl.arange(0, {block})).to(tl.int64)")
        self.line(f"{m} = {var} < {lane.hi}")
        mask = " & ".join([*self.guard, m])  # (`at` holds variables only: no values)
        for b, at in state:
            reg = self.state[(b, at)] = self.fresh("s")
            self.line(f"{reg} = tl.load({self.names[b]} + {self.aff(at)}, mask={mask}, other=0)")
        self.line(f"for {self.bind(s.var)} in range({s.lo}, {s.hi}):")
        self.depth += 1
        self.scopes.append({})
        for st in s.body:
            if st is not lane:
                self.stmt(st)
                continue
            self.lane_body(lane, m, block)
        self.scopes.pop()
        self.depth -= 1
        for b, at in state:
            reg = self.state.pop((b, at))
            self.line(f"tl.store({self.names[b]} + {self.aff(at)}, {reg}, mask={mask})")
        self.invalidate(ir.written(s.body))

    # -- statements -------------------------------------------------------------------------

    def block(self, body: list[Stmt]) -> None:
        self.scopes.append({})
        for s in body:
            self.stmt(s)
        self.scopes.pop()

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, ir.Comment):
            return
        if isinstance(s, ir.Let):
            self.value(s.value)
        elif isinstance(s, ir.Store):
            self.store(s)
        elif isinstance(s, ir.Loop):
            self.loop(s)
        elif isinstance(s, ir.If):
            self.branch(s)
        elif isinstance(s, ir.Copy) and self.lane_var is None:
            self.copy(s)
        else:
            raise GpuPrintError(f"{self.where}: no Triton form for a {type(s).__name__}")

    def branch(self, s: ir.If) -> None:
        c = self.value(s.cond)
        self.guard.append(f"({c} != 0)")
        self.block(s.then)
        self.guard.pop()
        self.invalidate(ir.written(s.then))
        if s.orelse:
            self.guard.append(f"({c} == 0)")
            self.block(s.orelse)
            self.guard.pop()
            self.invalidate(ir.written(s.orelse))

    def copy(self, s: ir.Copy) -> None:
        """`dst = src` by this program, `MAX_COPY_BLOCK` elements a step (the same memory
        copied onto itself is left as it was: `if_distinct` needs no test)."""
        if s.dst in self.locals or s.dst in self.rows or s.src in self.locals or s.src in self.rows:
            raise GpuPrintError(f"{self.where}: a copy of registers")
        n = s.src.size
        block = min(MAX_COPY_BLOCK, 1 << max(0, (n - 1).bit_length()))
        c, x, m = self.fresh("c"), self.fresh("x"), self.fresh("m")
        mask = " & ".join([*self.guard, m])
        self.line(f"for {c} in range(0, {n}, {block}):")
        self.depth += 1
        self.line(f"{x} = {c} + tl.arange(0, {block})")
        self.line(f"{m} = {x} < {n}")
        self.line(f"tl.store({self.names[s.dst]} + {x}, "
                  f"tl.load({self.names[s.src]} + {x}, mask={mask}), mask={mask})")
        self.depth -= 1
        self.line("tl.debug_barrier()")
        self.invalidate({s.dst})

    def register(self, buf: Buffer, index: Affine) -> str | None:
        """The register holding `buf[index]`: a local kept in registers, or a lane's carried
        state element."""
        if (buf, index) in self.state:
            return self.state[(buf, index)]
        if buf.uid in self.plan.rows:  # lane j holds element j (`grid.lane_rows`)
            v = self.lane_var
            if v is None or index != ir.affine(v) or self.lane_block != self.plan.rows[buf.uid]:
                raise GpuPrintError(f"{self.where}: a row of accumulators read outside the "
                                    "lanes of its elements")
            return self.locals[buf]
        if buf in self.locals:
            return self.locals[buf]
        if buf in self.rows:
            return self.rows[buf][index.const]
        return None

    def store(self, s: ir.Store) -> None:
        val = self.value(s.value)
        t = _tl_type(s.buf.dtype, self.where)
        new = f"({val}).to({t})" if not s.buf.dtype.is_pred else f"(({val}) != 0)"
        mask = self.mask()
        reg = self.register(s.buf, s.index)
        if reg is not None:
            if mask is None:
                self.line(f"{reg} = (tl.zeros_like({reg}) + {new}).to({t})")
            else:
                self.line(f"{reg} = tl.where({mask}, {new}, {reg})")
        else:
            if s.buf.kind in ("local", "lanes", "const"):
                raise GpuPrintError(f"{self.where}: a store to a {s.buf.kind} buffer")
            if s.buf.kind == "in" and s.buf.index not in self.k.inplace.values():
                raise GpuPrintError(f"{self.where}: a store into an input")
            if s.buf.size == 0:
                return
            idx = self.aff(s.index)
            mask_arg = f", mask={mask}" if mask else ""
            self.line(f"tl.store({self.names[s.buf]} + {idx}, {new}{mask_arg})")
        self.invalidate({s.buf})

    # -- values -----------------------------------------------------------------------------

    def aff(self, a: Affine) -> str:
        parts = []
        for t, c in a.terms:
            x = self.bind(t) if isinstance(t, Var) else f"({self.value(t)}).to(tl.int64)"
            parts.append(x if c == 1 else f"{x} * {c}")
        if a.const or not parts:
            parts.append(str(a.const))
        return " + ".join(parts)

    def value(self, v: Val) -> str:
        found = self.find(v)
        if found is not None:
            return found
        if v.op == "const":
            return self.const(v)
        expr = self.expr(v)
        name = self.fresh("v")
        self.line(f"{name} = {expr}")
        return self.remember(v, name)

    def const(self, v: Val) -> str:
        x = ir.const_value(v)
        t = _tl_type(v.dtype, self.where)
        if v.dtype.is_pred:
            return f"tl.full([], {int(bool(x))}, tl.int1)"
        if v.dtype.is_float:
            f = float(x)
            if math.isnan(f):
                text = "float('nan')"
            elif math.isinf(f):
                text = "float('inf')" if f > 0 else "float('-inf')"
            else:
                text = repr(f)  # (repr round-trips a double exactly)
            return f"tl.full([], {text}, {t})"
        return f"tl.full([], {int(x)}, {t})"

    def expr(self, v: Val) -> str:
        op = v.op
        if op in ("load", "mload"):
            buf = v.buffer
            reg = self.register(buf, v.index)
            if reg is not None:
                if op == "mload":
                    return f"tl.where({self.value(v.args[0])} != 0, {reg}, 0)"
                return reg
            if buf.kind in ("local", "lanes", "const"):
                raise GpuPrintError(f"{self.where}: a read of a {buf.kind} buffer")
            idx = self.aff(v.index)
            if self.lane_var is not None and self.lane_var not in ir.deps(v):
                idx += f" + tl.zeros([{self.lane_block}], tl.int64)"  # (one address, every lane)
            guards = list(self.guard)
            if op == "mload":
                guards.append(f"({self.value(v.args[0])} != 0)")
            mask = " & ".join(guards)
            if not mask:
                return f"tl.load({self.names[buf]} + {idx})"
            return f"tl.load({self.names[buf]} + {idx}, mask={mask}, other=0)"
        if op == "index":
            return f"({self.aff(v.arg)})"
        if op in ("idiv", "imod"):
            return f"({self.value(v.args[0])} {'//' if op == 'idiv' else '%'} {v.arg})"
        if op == "cond":
            c = self.value(v.args[0])
            self.guard.append(f"({c} != 0)")
            a = self.value(v.args[1])
            self.guard.pop()
            self.guard.append(f"({c} == 0)")
            b = self.value(v.args[2])
            self.guard.pop()
            return f"tl.where({c} != 0, {a}, {b})"
        if op == "alu":
            return self.alu(v)
        raise GpuPrintError(f"{self.where}: no Triton form for a {op} value")

    def alu(self, v: Val) -> str:
        sop: ir.ScalarOp = v.arg
        code = sop.opcode
        args = [self.value(a) for a in v.args]
        dt = v.dtype
        t = _tl_type(dt, self.where)
        if code in _BINARY and (dt.is_float or dt.is_integral or dt.is_pred):
            if code in (Opcode.AND, Opcode.OR, Opcode.XOR) and dt.is_float:
                raise GpuPrintError(f"{self.where}: {code.value} on {dt}")
            return _BINARY[code].format(*args)
        if code in _FLOAT_BINARY and dt.is_float:
            return _FLOAT_BINARY[code].format(*args)
        if code in _UNARY and (dt.is_float or code in (Opcode.NEGATE, Opcode.ABS, Opcode.COPY)):
            return _UNARY[code].format(*args)
        if code in (Opcode.SHIFT_LEFT, Opcode.SHIFT_RIGHT_LOGICAL) and dt.is_integral and (
                code is Opcode.SHIFT_LEFT or not dt.is_signed):
            # XLA: a shift by the type's width or more (or a negative one) gives 0
            sym = "<<" if code is Opcode.SHIFT_LEFT else ">>"
            return (f"tl.where(({args[1]} >= 0) & ({args[1]} < {dt.bits}), "
                    f"{args[0]} {sym} {args[1]}, 0).to({t})")
        if code is Opcode.NOT and dt.is_pred:
            return f"({args[0]} == 0)"
        if code is Opcode.TANH and dt.is_float:
            return f"(2.0 * tl.sigmoid(2.0 * {args[0]}) - 1.0).to({t})"
        if code is Opcode.SELECT:
            return f"tl.where({args[0]} != 0, {args[1]}, {args[2]})"
        if code is Opcode.COMPARE:
            direction = sop.attr("direction")
            if direction not in _COMPARE or sop.attr("type") in ("TOTALORDER",):
                raise GpuPrintError(f"{self.where}: compare {direction} {sop.attr('type')}")
            return f"({args[0]} {_COMPARE[direction]} {args[1]})"
        if code is Opcode.CONVERT:
            src = v.args[0].dtype
            if dt.is_float and (src.is_float or src.is_integral or src.is_pred):
                return f"({args[0]}).to({t})"
            if dt.is_pred:
                return f"({args[0]} != 0)"
            if dt.is_integral and (src.is_integral or src.is_pred):
                return f"({args[0]}).to({t})"  # (a narrower type keeps the low bits, as XLA)
            if dt.is_integral and src.is_float:
                return self.float_to_int(args[0], dt, t)
        if code is Opcode.BITCAST_CONVERT:
            src = v.args[0].dtype
            if src.bits == dt.bits and not src.is_pred and not dt.is_pred:
                return f"({args[0]}).to({t}, bitcast=True)"
        if code is Opcode.POWER and dt.name == "f32":
            return self.power(args[0], args[1])
        raise GpuPrintError(f"{self.where}: no Triton form for {code.value} on {dt}")


    def float_to_int(self, x: str, dt: DType, t: str) -> str:
        """XLA's float -> integer convert: truncates, saturates, nan -> 0 (compared in f64,
        where every bound is exact)."""
        lowest, highest = (-(1 << (dt.bits - 1)), (1 << (dt.bits - 1)) - 1) if dt.is_signed \
            else (0, (1 << dt.bits) - 1)
        xd, out = self.fresh("v"), self.fresh("v")
        self.line(f"{xd} = ({x}).to(tl.float64)")
        big, small = f"({xd} >= {float(highest + 1)!r})", f"({xd} <= {float(lowest - 1)!r})"
        self.line(f"{out} = tl.where(({xd} != {xd}) | {big} | {small}, 0.0, {xd}).to({t})")
        return (f"tl.where({big}, tl.full([], {highest}, {t}), "
                f"tl.where({small}, tl.full([], {lowest}, {t}), {out}))")

    def power(self, x: str, y: str) -> str:
        """f32 `pow` as C's: |x|^y as exp2(y * log2|x|) in f64 (then rounded to f32), the sign
        of an odd integer power of a negative x, nan for a negative x to a non-integer power,
        and x^0 = 1^y = 1 (nan included)."""
        xd, yd, mag, odd = (self.fresh("v") for _ in range(4))
        self.line(f"{xd} = ({x}).to(tl.float64)")
        self.line(f"{yd} = ({y}).to(tl.float64)")
        self.line(f"{mag} = tl.exp2({yd} * tl.log2(tl.abs({xd})))")
        self.line(f"{odd} = (tl.floor({yd}) == {yd}) & (tl.floor({yd} * 0.5) != {yd} * 0.5) "
                  f"& (tl.abs({yd}) < 9007199254740992.0)")
        neg = f"({xd} < 0) | (({xd} == 0) & (1.0 / {xd} < 0))"
        signed = (f"tl.where({neg}, tl.where({odd}, -{mag}, "
                  f"tl.where(tl.floor({yd}) == {yd}, {mag}, float('nan'))), {mag})")
        return (f"tl.where(({yd} == 0) | ({xd} == 1.0), 1.0, "
                f"tl.where(tl.abs({xd}) == float('inf'), {mag} * tl.where({neg} & {odd}, "
                f"-1.0, 1.0), {signed})).to(tl.float32)")


def print_kernel(kernel: ir.Kernel) -> str:
    """The Triton source of `kernel` (see the module docstring)."""
    return _Printer(kernel).print()


_HEADER = "import triton\nimport triton.language as tl\n\n\n"
_POINTEE = {"f32": "fp32", "f64": "fp64", "s8": "i8", "s16": "i16", "s32": "i32", "s64": "i64",
            "u8": "u8", "u16": "u16", "u32": "u32", "u64": "u64", "pred": "i1"}


def signature(kernel: ir.Kernel) -> dict[str, str]:
    """The printed function's parameter types as Triton names them (`b0: *fp32`, ...): what
    `triton.compile` needs to build the kernel ahead of time, without a launch."""
    out = {}
    for i, b in enumerate(kernel.inputs + kernel.outputs):
        if b.dtype.name not in _POINTEE:
            raise GpuPrintError(f"kernel {kernel.name}: no Triton pointer type for {b.dtype}")
        out[f"b{i}"] = "*" + _POINTEE[b.dtype.name]
    return out


class TritonKernel:
    """A printed kernel, loaded from its file (Triton's JIT reads a function's source) and run
    on torch tensors: `run(ins)` allocates the outputs and launches the grid."""

    def __init__(self, kernel: ir.Kernel, source: str | None = None) -> None:
        assert kernel.grid is not None
        self.kernel = kernel
        self.source = _HEADER + (print_kernel(kernel) if source is None else source)
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:16]
        path = Path(tempfile.gettempdir()) / f"hlofuse_triton_{digest}.py"
        if not path.exists():
            path.write_text(self.source)
        name = f"hlofuse_triton_{digest}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        self.fn = module.kernel

    def run(self, ins: Sequence[Any]) -> list[Any]:
        """Run on fresh outputs (the launcher's copies first: `GridPlan.pre`)."""
        import torch

        k = self.kernel
        device = "cuda" if torch.cuda.is_available() else "cpu"
        outs = [torch.zeros(max(1, b.size), dtype=torch_type(b.dtype), device=device)
                for b in k.outputs]
        args = [torch.as_tensor(x).reshape(-1).to(device) for x in ins]
        self.launch(args, outs)
        return outs

    def launch(self, ins: Sequence[Any], outs: Sequence[Any]) -> None:
        """The launcher's copies (`GridPlan.pre`), then the kernel over its programs, on flat
        tensors (outputs may be the inputs they are paired with in place)."""
        plan = self.kernel.grid
        assert plan is not None
        for c in plan.pre:
            dst = outs[c.dst.index] if c.dst.kind == "out" else ins[c.dst.index]
            src = outs[c.src.index] if c.src.kind == "out" else ins[c.src.index]
            if not c.if_distinct or dst.data_ptr() != src.data_ptr():
                dst.copy_(src)
        self.fn[(plan.programs,)](*ins, *outs, num_warps=plan.warps)


@functools.cache
def torch_type(dt: DType) -> Any:
    """The torch element type of `dt` (the driver's typed views; made once per type)."""
    import torch

    table = {"f32": torch.float32, "f64": torch.float64, "s32": torch.int32,
             "s64": torch.int64, "u8": torch.uint8, "s8": torch.int8, "s16": torch.int16,
             "u16": torch.uint16, "u32": torch.uint32, "u64": torch.uint64,
             "pred": torch.bool}
    if dt.name not in table:
        raise GpuPrintError(f"no torch type for {dt}")
    return table[dt.name]
