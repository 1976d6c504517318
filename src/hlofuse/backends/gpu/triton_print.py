"""The kernel IR printed as a Triton kernel: a GPU printer of the same IR the C printer reads.

    print_kernel(kernel) -> str         the source of `@triton.jit def kernel(b0, ..., BLOCK)`
    TritonKernel(kernel).run(ins)       built from a file (Triton reads its source) and run on
                                        torch tensors; under TRITON_INTERPRET=1 on the CPU

    @triton.jit
    def kernel(b0, b1, b2, BLOCK: tl.constexpr):    # in0, in1 -> out0 (flat pointers)
        pid = tl.program_id(0)
        x0 = (0 + pid * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)   # a `grid` loop's lanes
        m0 = x0 < 2048
        v3 = tl.load(b0 + x0, mask=m0, other=0)
        tl.store(b2 + x0, v3 * 2.0, mask=m0)

What it reads, and nothing else: the kernel's statements and values; `Kernel.grid` (the grid
pass, `kernel_ir/passes/grid.py`: each top-level loop spread over programs, run by one program
a block of lanes at a time, or one iteration at a time). Nested loops run in order inside a
lane (`for x1 in range(...)`). Every store and every load whose address depends on a lane is
masked by the lanes that exist and by the conditions guarding it (an `If`, the taken side of a
`cond`), so a guarded read never touches memory its guard excludes. One-element locals are
registers (`t0`: a block of lanes, or a scalar in a serial loop), assigned under their guard.
A value is computed once and reused until a statement writes a buffer it reads (the IR's reuse
rule, `ir.py`).

The kernel IR given is the target-independent one (`optimize` for the `scalar` target, one
thread: no vector forms, no parallel marks). Element ops are those with a Triton form in
`_BINARY`/`_UNARY` and the comparisons, selects and converts between floats and from
integers to floats; anything else, a library call, a copy, a local of more than one element
used by lanes, or a type without a Triton form raises `GpuPrintError` (an UnsupportedOpError)
naming the kernel. Generated text holds only names made here (`b0`, `v3`, `x0`) and numbers.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hlofuse.backends.cpu.cexpr import UnsupportedOpError
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Affine, Buffer, Stmt, Val, Var
from hlofuse.backends.kernel_ir.passes.parallel import access_counts
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
        self.locals: dict[Buffer, str] = {}
        self.vars: dict[Var, str] = {}
        self.scopes: list[dict[tuple[int, str], tuple[str, frozenset[Buffer]]]] = [{}]
        self.guard: list[str] = []  # masks in force (lanes that exist, conditions)
        self.lane_var: Var | None = None  # of the loop running lanes: masks are blocks there

    # -- output -----------------------------------------------------------------------------

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def fresh(self, base: str) -> str:
        self.n += 1
        return f"{base}{self.n}"

    def mask(self) -> str | None:
        return " & ".join(self.guard) if self.guard else None

    def find(self, v: Val) -> str | None:
        key = (v.uid, self.mask() or "")
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key][0]
        return None

    def remember(self, v: Val, name: str) -> str:
        self.scopes[-1][(v.uid, self.mask() or "")] = (name, ir.reads(v))
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
        self.lines.append(f"def kernel({', '.join(params)}, BLOCK: tl.constexpr):")
        self.line("pid = tl.program_id(0)")
        used = access_counts(k.body)
        for b in k.locals:
            if b.size == 1:
                self.locals[b] = f"t{len(self.locals)}"
            elif b in used:
                raise GpuPrintError(f"{self.where}: a local of {b.size} elements")
        if k.consts:
            raise GpuPrintError(f"{self.where}: constant tables are not printed yet")
        self.declare(list(self.locals), lanes=False)
        for s in k.body:
            self.top(s)
        return "\n".join(self.lines) + "\n"

    def top(self, s: Stmt) -> None:
        if not isinstance(s, ir.Loop):
            self.stmt(s)
            return
        mode, _why = self.plan.modes[id(s)]
        if mode == "serial":
            self.serial(s)
            return
        self.declare(self.used_locals(s), lanes=True)
        var = self.bind(s.var)
        m = self.fresh("m")
        if mode == "grid":
            self.line(f"{var} = ({s.lo} + pid * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)")
            self.line(f"{m} = {var} < {s.hi}")
            self.lanes_body(s, m)
            return
        base = self.fresh("c")
        self.line(f"for {base} in range({s.lo}, {s.hi}, BLOCK):")
        self.depth += 1
        self.line(f"{var} = ({base} + tl.arange(0, BLOCK)).to(tl.int64)")
        self.line(f"{m} = {var} < {s.hi}")
        self.lanes_body(s, m)
        self.depth -= 1
        self.line("tl.debug_barrier()")

    def lanes_body(self, s: ir.Loop, m: str) -> None:
        self.guard.append(m)
        self.scopes.append({})
        self.lane_var = s.var
        for st in s.body:
            self.stmt(st)
        self.lane_var = None
        self.scopes.pop()
        self.guard.pop()
        self.invalidate(ir.written(s.body))

    def used_locals(self, s: ir.Loop) -> list[Buffer]:
        used = access_counts(s.body)
        return [b for b in self.locals if b in used]

    def declare(self, bufs: Sequence[Buffer], lanes: bool) -> None:
        """One-element locals as registers: a scalar, or a block of lanes in a loop that runs
        lanes (its locals are its own: `passes/grid.py`), zero before they are used."""
        for b in bufs:
            t = _tl_type(b.dtype, self.where)
            shape = "[BLOCK]" if lanes else "[]"
            self.line(f"{self.locals[b]} = tl.full({shape}, 0, {t})")

    def bind(self, v: Var) -> str:
        name = self.vars.get(v)
        if name is None:
            name = self.vars[v] = f"x{len(self.vars)}"
        return name

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
            self.serial(s)
        elif isinstance(s, ir.If):
            self.branch(s)
        else:
            raise GpuPrintError(f"{self.where}: no Triton form for a {type(s).__name__}")

    def serial(self, s: ir.Loop) -> None:
        if s.vector or (s.step and s.step != 1):
            raise GpuPrintError(f"{self.where}: a vector loop (print the scalar target's IR)")
        self.invalidate(ir.written(s.body))  # (later iterations follow its writes)
        self.line(f"for {self.bind(s.var)} in range({s.lo}, {s.hi}):")
        self.depth += 1
        self.block(s.body)
        self.depth -= 1
        self.invalidate(ir.written(s.body))

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

    def store(self, s: ir.Store) -> None:
        val = self.value(s.value)
        t = _tl_type(s.buf.dtype, self.where)
        new = f"({val}).to({t})" if not s.buf.dtype.is_pred else f"(({val}) != 0)"
        mask = self.mask()
        if s.buf in self.locals:
            reg = self.locals[s.buf]
            if mask is None:
                self.line(f"{reg} = (tl.zeros_like({reg}) + {new}).to({t})")
            else:
                self.line(f"{reg} = tl.where({mask}, {new}, {reg})")
        else:
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
            if buf in self.locals:
                return self.locals[buf]
            if buf.kind in ("local", "lanes", "const"):
                raise GpuPrintError(f"{self.where}: a read of a {buf.kind} buffer")
            idx = self.aff(v.index)
            if self.lane_var is not None and self.lane_var not in ir.deps(v):
                idx += " + tl.zeros([BLOCK], tl.int64)"  # (one address for every lane)
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
        raise GpuPrintError(f"{self.where}: no Triton form for {code.value} on {dt}")


def print_kernel(kernel: ir.Kernel) -> str:
    """The Triton source of `kernel` (see the module docstring)."""
    return _Printer(kernel).print()


_HEADER = "import triton\nimport triton.language as tl\n\n\n"


class TritonKernel:
    """A printed kernel, loaded from its file (Triton's JIT reads a function's source) and run
    on torch tensors: `run(ins)` allocates the outputs and launches the grid."""

    def __init__(self, kernel: ir.Kernel) -> None:
        assert kernel.grid is not None
        self.kernel = kernel
        self.source = _HEADER + print_kernel(kernel)
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
        import torch

        k = self.kernel
        outs = [torch.zeros(max(1, b.size), dtype=_torch_type(b.dtype)) for b in k.outputs]
        plan = k.grid
        assert plan is not None
        programs = 1
        if plan.grid_loop is not None:
            loop = plan.grid_loop
            programs = max(1, -(-(loop.hi - loop.lo) // plan.block))
        args = [torch.as_tensor(x).reshape(-1) for x in ins]
        self.fn[(programs,)](*args, *outs, BLOCK=plan.block)
        return outs


def _torch_type(dt: DType) -> Any:
    import torch

    table = {"f32": torch.float32, "f64": torch.float64, "s32": torch.int32,
             "s64": torch.int64, "u8": torch.uint8, "s8": torch.int8, "s16": torch.int16,
             "u16": torch.uint16, "u32": torch.uint32, "u64": torch.uint64,
             "pred": torch.bool}
    if dt.name not in table:
        raise GpuPrintError(f"no torch type for {dt}")
    return table[dt.name]
