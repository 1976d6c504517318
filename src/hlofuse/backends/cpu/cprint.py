"""The C printer: one kernel-IR `Kernel` -> one C function (plus its constant tables), with
explicit SIMD for vector loops (`cvec.py`).

    HF_KERNEL void fused_sin_multiply(const float *restrict in0, float *restrict out0)
    {
        for (int64_t i0 = 0; i0 < 2048; i0 += 8) {
            const hf_v8_f32 v0 = hf_ld_v8_f32(in0 + i0);
            hf_v8_f32 v1;
            for (int hf_l = 0; hf_l < 8; ++hf_l) v1[hf_l] = hf_sin_f32(v0[hf_l]);
            hf_st_v8_f32(out0 + i0, v1 * hf_splat_v8_f32(2.0f));
        }
    }

What it guarantees:
- Values print once per scope, as `const` locals, at their first use; a value is never reused
  across a store to a buffer it reads (the memo drops it), and a loop starts without values that
  read buffers the loop writes (the IR's reuse rule, `kernel_ir/ir.py`). `cond` values
  compute each side only in its branch. In a vector loop, the selects the lazy plan names
  (`Loop.lazy`, `kernel_ir/passes/lazy.py`) compute their side only when some lane takes it
  (`_lazy_cond`), one branch per condition.
  What both sides of a `cond` compute on every path is computed once, before its branch
  (`kernel_ir/conds.py`).
- Inside a vector loop every value that depends on the loop variable (or reads a `lanes`
  buffer) is a vector of W lanes; others stay scalar and are splatted where combined. Loads and
  stores whose index has coefficient 1 on the loop variable are whole vectors; `tile` values and
  `StoreTile` go through in-register transposes; anything else is gathered or scattered lane by
  lane.
- Every name is derived here or by the lowering (`in0`, `acc2`, `v17`, `i0`), and every piece of
  input text (kernel labels, source lines, instruction names in comments) goes through
  `ctext.comment`. Integer constants are checked to fit int64.
- Names are unique by construction: the IR's names are hints. Every local and `lanes` buffer
  gets a C name of its own in the kernel's namespace (`KernelNames`: the parameters `inK` /
  `outK`, then the locals in order; a name taken gets `_2`, ...), and every loop variable a name
  no enclosing loop variable or buffer has (sibling loops may share one). So two buffers that a
  pass named alike (the partial accumulators `acc0p` of the two pieces `split` cut a reduction
  into) are two C variables, never a redeclaration nor one shadowing the other. Values are
  `v<N>` (a counter; the pattern is kept out of the namespace), helpers `hf_*`.
- Locals are declared where the placement says (`Kernel.placement`, `kernel_ir/passes/
  place.py`: the innermost block that contains all their uses), on the stack or, those it
  puts on the heap, from `hf_alloc`, freed at the block's end.

The printer decides nothing the IR records: a kernel that did not go through `optimize` gets
its placement and lazy plan from `kernel_ir.passes.plan` first.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hlofuse.backends.cpu import cexpr, cvec, mathlib
from hlofuse.backends.cpu.ctext import comment
from hlofuse.backends.cpu.cvec import VecLib, compute_short, storage_short
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.conds import Always
from hlofuse.backends.kernel_ir.ir import Affine, Buffer, Stmt, Val, Var
from hlofuse.backends.kernel_ir.naming import KernelNames, Namespace
from hlofuse.backends.kernel_ir.passes import plan as plan_kernel
from hlofuse.backends.kernel_ir.passes.lazy import LAZY_SELECT_MAX_DEPTH, owned
from hlofuse.backends.kernel_ir.passes.lazy import LAZY_SELECT_MIN_OPS as LAZY_SELECT_MIN_OPS
from hlofuse.backends.kernel_ir.passes.place import outer_locals
from hlofuse.backends.kernel_ir.query import guarded_load, varies
from hlofuse.errors import CompileError
from hlofuse.ir.dtypes import S32, DType
from hlofuse.ir.opcodes import Opcode

INT64_MAX = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1


def c_int(n: int) -> str:
    """An integer constant for int64 arithmetic."""
    if not -INT64_MAX - 1 <= n <= INT64_MAX:
        raise CompileError(f"integer constant {n} does not fit int64")
    if n == -INT64_MAX - 1:
        return "(-9223372036854775807LL - 1)"
    text = f"{n}LL" if abs(n) >= 1 << 31 else str(n)
    return f"({text})" if n < 0 else text


class KernelPrinter:
    def __init__(self, kernel: ir.Kernel, lib: VecLib, used_names: set[str] | None = None) -> None:
        self.k = kernel
        self.lib = lib
        # file-scope names (constant tables, library helpers): `NAME_...`, unique per kernel
        self.used = Namespace(kernel.name) if used_names is None else used_names
        self.lines: list[str] = []
        self.depth = 1
        self.scopes: list[dict[Any, tuple[str, frozenset[Buffer]]]] = [{}]
        self.vec: tuple[Var, int] | None = None
        self.plan = ir.LazyPlan()  # in a vector loop: its lazy selects (`passes/lazy.py`)
        self.lazy: dict[int, int] = {}  # in force: select -> its side computed lazily
        self.forms = ir.LaneForms()  # in a vector loop: its cheaper lane forms (`passes/lanes`)
        self.lazy_depth = 0  # lazy sides being printed, one inside another
        self.n = 0
        self.defs: list[str] = []  # file-scope definitions (constant tables, library helpers)
        self.cname: dict[Buffer, str] = {}
        self.names = KernelNames()
        self.bound: list[str] = []  # C names of the enclosing loops' variables
        if kernel.placement is None:  # (not through `optimize`: a test's, a scalar function)
            plan_kernel(kernel)
        assert kernel.placement is not None
        self.placement = kernel.placement
        self.where = kernel.label or kernel.name

    # ----- output -------------------------------------------------------------------------

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def fresh(self) -> str:
        self.n += 1
        return f"v{self.n}"

    @contextmanager
    def scope(self) -> Iterator[None]:
        self.scopes.append({})
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            self.scopes.pop()

    def find(self, key: Any) -> str | None:
        for s in reversed(self.scopes):
            if key in s:
                return s[key][0]
        return None

    def remember(self, key: Any, expr: str, v: Val | None) -> str:
        self.scopes[-1][key] = (expr, ir.reads(v) if v is not None else frozenset())
        return expr

    def invalidate(self, bufs: set[Buffer]) -> None:
        if not bufs:
            return
        for s in self.scopes:
            for key in [k for k, (_e, r) in s.items() if r & bufs]:
                del s[key]

    # ----- the kernel -----------------------------------------------------------------------

    def print(self) -> str:
        k = self.k
        for b in k.inputs + k.outputs:
            self.cname[b] = self.names.param(b)
        for b in k.locals:
            self.buffer_name(b)
        for b in k.consts:
            name = cexpr_name(b.name, self.used)
            self.cname[b] = name
            ct = cexpr.ctype(b.dtype)
            self.defs.append(f"static const {ct} {name}[{max(1, b.size)}] "
                             f"__attribute__((aligned(64))) = "
                             f"{cexpr.array_initializer(b.data, b.dtype)};\n")
        self.args = self.parameters()
        # GCC's loop if-conversion off where the kernel loads under a condition (the kernel
        # IR's `guarded_load`; GCC 12.2 miscompiles such a load: cpu/units.py); asked once
        # per kernel, read by its parallel loops' functions too
        self.attrs = "HF_NO_IFCONV " if guarded_load(k) else ""
        head = [comment(k.summary or k.name)]
        self.block(k.body, id(k.body))
        body = "\n".join(self.lines)
        sig = f"HF_KERNEL {self.attrs}void {k.name}({', '.join(self.args)})"
        return "".join(self.defs) + "\n".join(head) + f"\n{sig}\n{{\n{body}\n}}\n"

    def parameters(self) -> list[str]:
        k = self.k
        aliased_in = set(k.inplace.values())
        args = []
        for b in k.inputs:
            r = "" if b.index in aliased_in else "restrict "
            args.append(f"const {cexpr.ctype(b.dtype)} *{r}{self.cname[b]}")
        for b in k.outputs:
            r = "" if b.index in k.inplace else "restrict "
            args.append(f"{cexpr.ctype(b.dtype)} *{r}{self.cname[b]}")
        return args

    def parallel_loop(self, s: ir.Loop) -> None:
        """A parallel loop runs as `fn(args, lo, hi)` chunks on the runtime's thread pool: it is
        printed as its own function of a range (values it needs are recomputed there; locals it
        uses are declared inside it), then called through `hf_parallel_ptr`."""
        self.n_par = getattr(self, "n_par", 0) + 1
        name = f"{self.k.name}_p{self.n_par}"
        sub = KernelPrinter(self.k, self.lib, self.used)
        sub.cname, sub.names, sub.defs = self.cname, self.names, self.defs
        sub.attrs = self.attrs
        sub.bound = list(self.bound)
        sub.loop(s, bounds=("hf_lo", "hf_hi"))
        body = "\n".join(sub.lines)
        assert self.k.placement is not None
        shared = outer_locals(s, self.k.placement)  # written apart by the iterations
        bufs = self.k.inputs + self.k.outputs + shared
        casts = ", ".join(f"({'const ' if b.kind == 'in' else ''}{cexpr.ctype(b.dtype)} *)a[{i}]"
                          for i, b in enumerate(bufs))
        params = [*self.args, *(f"{cexpr.ctype(b.dtype)} *restrict {self.cname[b]}"
                                for b in shared)]
        self.defs.append(
            f"static {self.attrs}void {name}"
            f"({', '.join([*params, 'int64_t hf_lo', 'int64_t hf_hi'])})\n"
            f"{{\n{body}\n}}\n"
            f"static void {name}_t(void *const *a, int64_t lo, int64_t hi) "
            f"{{ {name}({casts}{', ' if casts else ''}lo, hi); }}\n")
        ptrs = ", ".join(f"(void *){self.cname[b]}" for b in bufs) or "0"
        self.line("{")
        self.line(f"    void *const hf_a[] = {{{ptrs}}};")
        self.line(f"    hf_parallel_ptr({name}_t, hf_a, {c_int(s.lo)}, {c_int(s.hi)}, "
                  f"{ir.step_of(s)}, {self.k.threads});")
        self.line("}")
        self.invalidate(ir.written(s.body))

    def block(self, body: list[Stmt], key: int) -> None:
        frees = self.declare(key)
        for s in body:
            self.stmt(s)
        for name in frees:
            self.line(f"free({name});")

    def declare(self, key: int) -> list[str]:
        frees = []
        for b in self.placement.blocks.get(key, []):
            ct = cexpr.ctype(b.dtype)
            name = self.buffer_name(b)
            if b.kind == "lanes":
                self.line(f"{self.lib.t(compute_short(b.dtype), b.size)} {name};")
                continue
            ct = cexpr.compute_type(b.dtype) if b.size == 1 else ct
            if b not in self.placement.heap:
                self.line(f"{ct} {name}[{b.size}];")
            else:
                nbytes = c_int(b.size * b.dtype.itemsize)
                self.line(f"{ct} *{name} = ({ct} *)hf_alloc(0, {nbytes});")
                frees.append(name)
        return frees

    def buffer_name(self, b: Buffer) -> str:
        """The C name of a local or `lanes` buffer: its own in the kernel's namespace."""
        name = self.cname.get(b)
        if name is None:
            name = self.cname[b] = self.names.local(b.name)
        return name

    def var_name(self, v: Var) -> str:
        """The C name of a loop variable (given when its loop is printed)."""
        name = self.names.vars.get(v)
        if name is None:
            raise CompileError(f"{self.where}: loop variable {v.name} used outside its loop")
        return name

    # ----- statements -----------------------------------------------------------------------

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, ir.Comment):
            self.line(comment(s.text))
        elif isinstance(s, ir.Loop):
            self.loop(s)
        elif isinstance(s, ir.Store):
            self.store(s)
        elif isinstance(s, ir.StoreTile):
            self.store_tile(s)
        elif isinstance(s, ir.If):
            c = self.sx(s.cond)
            self.line(f"if ({c}) {{")
            with self.scope():
                self.block(s.then, id(s.then))
            if s.orelse:
                self.line("} else {")
                with self.scope():
                    self.block(s.orelse, id(s.orelse))
            self.line("}")
            self.invalidate(ir.written(s.then + s.orelse))
        elif isinstance(s, ir.Let):
            self.value(s.value)
        elif isinstance(s, ir.Copy):
            d, src = self.cname[s.dst], self.cname[s.src]
            nbytes = c_int(s.src.size * s.src.dtype.itemsize)
            if s.if_distinct:
                self.line(f"if ((const void *){d} != (const void *){src}) "
                          f"memcpy({d}, {src}, {nbytes});")
            else:
                self.line(f"memcpy({d}, {src}, {nbytes});")
            self.invalidate({s.dst})
        elif isinstance(s, ir.LibCall):
            self.libcall(s)
        else:
            raise CompileError(f"{self.where}: cannot print {type(s).__name__}")

    def loop(self, s: ir.Loop, bounds: tuple[str, str] | None = None) -> None:
        if s.parallel and bounds is None:
            self.parallel_loop(s)
            return
        self.invalidate(ir.written(s.body))
        v = self.names.bind(s.var, self.bound)
        step = f"{v} += {ir.step_of(s)}" if ir.step_of(s) > 1 else f"++{v}"
        lo, hi = bounds or (c_int(s.lo), c_int(s.hi))
        self.line(f"for (int64_t {v} = {lo}; {v} < {hi}; {step}) {{")
        saved = self.vec, self.plan, self.lazy, self.forms
        if s.vector:
            self.vec = (s.var, s.vector)
            self.plan = s.lazy or ir.LazyPlan()
            self.lazy = self.plan.sides
            self.forms = s.forms or ir.LaneForms()
            self.lib.types(s.vector)
        self.bound.append(v)
        with self.scope():
            self.block(s.body, id(s.body))
        self.bound.pop()
        self.vec, self.plan, self.lazy, self.forms = saved
        self.line("}")
        self.invalidate(ir.written(s.body))

    def store(self, s: ir.Store) -> None:
        name = self.cname[s.buf]
        if s.buf.kind == "lanes":
            w = s.buf.size
            short = compute_short(s.buf.dtype)
            val = self.vexpr(s.value) if self.varies(s.value) else \
                f"{self.lib.splat(short, w)}({self.sx(s.value)})"
            self.line(f"{name} = {val};")
        elif self.vec is not None and (self.varies(s.value) or self.depends(s.index)):
            self.vector_store(s)
        else:
            val = cexpr.store(s.buf.dtype, self.sx(s.value)) if s.buf.size != 1 or \
                s.buf.kind != "local" else self.sx(s.value)
            self.line(f"{name}[{self.aff(s.index)}] = {val};")
        self.invalidate({s.buf})

    def vector_store(self, s: ir.Store) -> None:
        assert self.vec is not None
        var, w = self.vec
        name = self.cname[s.buf]
        short = storage_short(s.buf.dtype)
        val = self.to_storage(s.buf.dtype, self.vexpr(s.value))
        if s.index.coef(var) == 1 and not self.varying_terms(s.index):
            self.line(f"{self.lib.store(short, w)}({name} + {self.aff(s.index)}, {val});")
            return
        tmp = self.fresh()
        self.line(f"const {self.lib.t(short, w)} {tmp} = {val};")
        self.line(f"for (int hf_l = 0; hf_l < {w}; ++hf_l) "
                  f"{name}[{self.lane_aff(s.index)}] = {tmp}[hf_l];")

    def store_tile(self, s: ir.StoreTile) -> None:
        assert self.vec is not None
        _var, w = self.vec
        short = storage_short(s.buf.dtype)
        vals = [self.to_storage(s.buf.dtype, self.vexpr(v)) for v in s.values]
        fn = self.lib.shuffle_helper("int", short, w, s.stride)
        self.line(f"{fn}({self.cname[s.buf]} + {self.aff(s.base)}, {', '.join(vals)});")
        self.invalidate({s.buf})

    def libcall(self, s: ir.LibCall) -> None:
        from hlofuse.backends.cpu import library

        ins = [self.cname[b] for b in s.ins]
        outs = [self.cname[b] for b in s.outs]
        defs, stmts = library.emit(s.op, ins, outs, self.used, self.k.threads)
        if defs:
            self.defs.append(defs)
        for text in stmts.splitlines():
            if text.strip():
                self.line(text)
        self.invalidate(set(s.outs))

    # ----- values ---------------------------------------------------------------------------

    def varies(self, v: Val) -> bool:
        """Whether `v` is a vector in the current vector loop (`query.varies`)."""
        return self.vec is not None and varies(v, self.vec[0])

    def depends(self, a: Affine) -> bool:
        assert self.vec is not None
        return bool(a.coef(self.vec[0])) or bool(self.varying_terms(a))

    def varying_terms(self, a: Affine) -> list[tuple[Val, int]]:
        return [(t, c) for t, c in a.terms if isinstance(t, Val) and self.varies(t)]

    def value(self, v: Val) -> str:
        return self.vexpr(v) if self.varies(v) else self.sx(v)

    def aff(self, a: Affine) -> str:
        """An index expression (scalar; the vector loop variable stands for lane 0)."""
        parts = []
        for t, c in a.terms:
            x = self.var_name(t) if isinstance(t, Var) else self.sx(t)
            parts.append(x if c == 1 else f"{x} * {c_int(c)}")
        if a.const or not parts:
            parts.append(c_int(a.const))
        return " + ".join(parts)

    def lane_aff(self, a: Affine, lane: str = "hf_l") -> str:
        """An index expression for lane `lane` (a C expression: `hf_l` in a lane loop, or a
        number) of the current vector loop."""
        assert self.vec is not None
        var = self.vec[0]
        parts = []
        for t, c in a.terms:
            if t is var:
                x = f"({self.var_name(var)} + {lane})" if lane != "0" else self.var_name(var)
            elif isinstance(t, Var):
                x = self.var_name(t)
            elif self.varies(t):
                x = f"{self.vexpr(t)}[{lane}]"
                if t.uid in self.forms.index32:  # (its 32-bit lanes: widen before scaling)
                    x = f"(int64_t){x}"
            else:
                x = self.sx(t)
            parts.append(x if c == 1 else f"{x} * {c_int(c)}")
        if a.const or not parts:
            parts.append(c_int(a.const))
        return " + ".join(parts)

    def sx(self, v: Val) -> str:
        """The scalar C expression of `v` (materialising what it needs first)."""
        found = self.find((v.uid, False))
        if found is not None:
            return found
        for x in _strict_postorder(v):
            if self.find((x.uid, False)) is None:
                self.remember((x.uid, False), self._scalar(x), x)
        result = self.find((v.uid, False))
        assert result is not None
        return result

    def _local(self, ctype: str, expr: str) -> str:
        name = self.fresh()
        self.line(f"const {ctype} {name} = {expr};")
        return name

    def _scalar(self, v: Val) -> str:
        op = v.op
        ct = cexpr.compute_type(v.dtype)
        if op == "const":
            return cexpr.literal(ir.const_value(v), v.dtype)
        if op == "param":
            return f"p{v.arg}"
        if op == "index":
            return f"({self.aff(v.arg)})"
        if op in ("idiv", "imod"):
            sym = "/" if op == "idiv" else "%"
            return f"({self.sx(v.args[0])} {sym} {c_int(v.arg)})"
        if op == "load":
            buf = v.buffer
            if buf.kind == "lanes":
                raise CompileError(f"{self.where}: a vector register read outside its loop")
            raw = f"{self.cname[buf]}[{self.aff(v.index)}]"
            if buf.kind == "local" and buf.size == 1:
                return self._local(ct, raw)
            return self._local(ct, cexpr.load(v.dtype, raw))
        if op == "mload":
            raw = cexpr.load(v.dtype, f"{self.cname[v.buffer]}[{self.aff(v.index)}]")
            return self._local(ct, f"({self.sx(v.args[0])} ? {raw} : ({ct})0)")
        if op == "alu":
            args = [self.sx(a) for a in v.args]
            expr = cexpr.elementwise_op(v.arg, [a.dtype for a in v.args], args, self.where,
                                        _consts(v))
            return self._local(ct, expr)
        if op == "cond":
            return self._cond(v, ct, vector=False)
        if op == "lanes_reduce":
            return self._local(ct, self._hreduce(v))
        raise CompileError(f"{self.where}: cannot print a {op} value in scalar code")

    def _cond(self, v: Val, ctype: str, vector: bool) -> str:
        c, a, b = v.args
        if vector and self.varies(c):
            assert self.vec is not None
            short = compute_short(v.dtype)
            sel = self.lib.select(short, self.vec[1])
            if v.uid in self.lazy_now():
                return self._lazy_cond(v, ctype, sel, self.lazy[v.uid])
            return self._local(ctype, f"{sel}({self.vexpr(c)}, {self.vexpr(a)}, "
                                      f"{self.vexpr(b)})")
        self._before_branch(v, vector)
        cond = self.sx(c)
        name = self.fresh()
        self.line(f"{ctype} {name};")
        self.line(f"if ({cond}) {{")
        with self.scope():
            self.line(f"{name} = {self.vexpr(a) if vector else self.sx(a)};")
        self.line("} else {")
        with self.scope():
            self.line(f"{name} = {self.vexpr(b) if vector else self.sx(b)};")
        self.line("}")
        return name

    def _before_branch(self, v: Val, vector: bool) -> None:
        """Compute what both sides of the cond `v` compute (`conds.Always`) before its branch,
        so the branches do not print it twice."""
        def key(x: Val) -> tuple[int, bool]:
            return x.uid, vector and self.varies(x)

        always = Always(self.lazy_now() if vector else {}, lambda x: self.find(key(x)) is not None)
        for x in always.shared(v):
            if self.find(key(x)) is None:
                if key(x)[1]:
                    self.vexpr(x)
                else:
                    self.sx(x)

    def lazy_now(self) -> dict[int, int]:
        """The lazy selects in force: none past `LAZY_SELECT_MAX_DEPTH` nested lazy sides (each
        is printed by a nested call), and not those whose group's branch is being printed (a
        select inside a side of another on the same condition blends there)."""
        return self.lazy if self.lazy_depth < LAZY_SELECT_MAX_DEPTH else {}

    def _owned(self, v: Val, k: int) -> set[int]:
        """The values only `v`'s lazy side `k` uses that are not printed yet (`lazy.owned`)."""
        assert self.vec is not None
        return owned(self.plan, v, k, self.vec[0],
                     lambda x: self.find((x.uid, True)) is not None)

    def _lazy_cond(self, v: Val, ctype: str, sel: str, side: int) -> str:
        """A select whose side `side` is computed only when some lane of the vector takes it,
        with the other selects of its group (the same condition and side):

            r1, r2, ... = 0
            if (any lane of c) { r1 = a1; r2 = a2; ... }      (side 1; side 2 tests !c)
            v1 = select(c, r1, b1)  ...  each where it is used

        Exact: every lane gets the side it selects; a lazy side's values are pure and read no
        buffer the loop writes, so computing them early, or for fewer vectors, changes nothing.
        What a lazy side shares with the rest of the loop is computed before the branch, so
        nothing is computed twice; one branch per group, so the sides' dependency chains
        still overlap."""
        assert self.vec is not None
        c, other = v.args[0], v.args[3 - side]
        lazy = self.find(("lazy", v.uid))
        if lazy is None:
            self._lazy_group(c, side)
            lazy = self.find(("lazy", v.uid))
            assert lazy is not None
        args = f"{lazy}, {self.vexpr(other)}" if side == 1 else f"{self.vexpr(other)}, {lazy}"
        return self._local(ctype, f"{sel}({self.vexpr(c)}, {args})")

    def _lazy_group(self, c: Val, side: int) -> None:
        """Emit the branch computing the lazy sides of the group (`c`, `side`) that are not
        computed in this scope yet; each result is remembered as ("lazy", select uid)."""
        assert self.vec is not None
        w = self.vec[1]
        members = [m for m in self.plan.groups[(c.uid, side)]
                   if self.find(("lazy", m.uid)) is None]
        for m in members:  # the shared part, before the branch
            own = self._owned(m, side)
            for x in _strict_postorder(m.args[side], self.lazy_now()):
                if x.uid not in own and self.varies(x):
                    self.vexpr(x)
        names = []
        for m in members:
            short = compute_short(m.dtype)
            name = self.fresh()
            self.line(f"{self.lib.t(short, w)} {name} = {self.lib.splat(short, w)}(0);")
            names.append(name)
        cv = self.vexpr(c)
        self.line(f"if ({self.lib.any_pred(w)}({cv if side == 1 else f'({cv}) ^ 1'})) {{")
        self.lazy_depth += 1
        saved = self.lazy
        self.lazy = {k: sd for k, sd in saved.items() if k not in {m.uid for m in members}}
        with self.scope():
            for m, name in zip(members, names, strict=True):
                self.line(f"{name} = {self.vexpr(m.args[side])};")
        self.lazy = saved
        self.lazy_depth -= 1
        self.line("}")
        for m, name in zip(members, names, strict=True):
            self.remember(("lazy", m.uid), name, m.args[side])

    def _hreduce(self, v: Val) -> str:
        """The partial accumulators of a vector reduction combined pairwise (a tree over the
        buffers, then over halves of the lanes: log2(W) vector ops, not W - 1 scalar ones)."""
        op, *bufs = v.arg
        w = bufs[0].size
        dt = bufs[0].dtype
        short = compute_short(dt)
        vt = self.lib.t(short, w)
        name = f"hf_hred_{op.opcode.name.lower()}_{dt.name}_v{w}"
        ct = cexpr.compute_type(dt)

        def vop(a: str, b: str, lanes: int) -> str:
            expr = cvec.vector_op(self.lib, op, [dt, dt], [a, b], lanes)
            if expr is None:
                raise CompileError(f"{self.where}: no vector form of the reducer {op.opcode}")
            return expr

        lines = []
        cur, lanes = "v", w
        while lanes > 1:
            half = lanes // 2
            ht = self.lib.t(short, half)
            lo = f"__builtin_shufflevector({cur}, {cur}, {', '.join(map(str, range(half)))})"
            hi = f"__builtin_shufflevector({cur}, {cur}, " \
                 f"{', '.join(map(str, range(half, lanes)))})"
            lines.append(f"const {ht} h{half} = {vop(lo, hi, half)};")
            cur, lanes = f"h{half}", half
        self.lib._add(name, f"static inline {ct} {name}({vt} v)\n{{\n    "
                            + "\n    ".join(lines) + f"\n    return {cur}[0];\n}}")
        parts = [self.cname[b] for b in bufs]
        while len(parts) > 1:
            parts = [vop(parts[i], parts[i + 1], w) if i + 1 < len(parts) else parts[i]
                     for i in range(0, len(parts), 2)]
        return f"{name}({parts[0]})"

    # ----- vector values --------------------------------------------------------------------

    def vexpr(self, v: Val) -> str:
        """`v` as a vector of the current loop's lanes (splatted if it does not vary)."""
        assert self.vec is not None
        if not self.varies(v):
            w = self.vec[1]
            return f"{self.lib.splat(compute_short(v.dtype), w)}({self.sx(v)})"
        found = self.find((v.uid, True))
        if found is not None:
            return found
        for x in _strict_postorder(v, self.lazy_now()):
            if self.varies(x) and self.find((x.uid, True)) is None:
                self.remember((x.uid, True), self._vector(x), x)
        result = self.find((v.uid, True))
        assert result is not None
        return result

    def to_compute(self, dtype: Any, raw: str) -> str:
        assert self.vec is not None
        if dtype.name in ("f16", "bf16"):
            return f"{self.lib.half(self.vec[1])[dtype.name + '_to_f32']}({raw})"
        return raw

    def to_storage(self, dtype: Any, val: str) -> str:
        assert self.vec is not None
        if dtype.name in ("f16", "bf16"):
            return f"{self.lib.half(self.vec[1])['f32_to_' + dtype.name]}({val})"
        return val

    def _vector(self, v: Val) -> str:
        assert self.vec is not None
        var, w = self.vec
        op = v.op
        short = compute_short(v.dtype)
        vt = self.lib.t(short, w)
        if op == "load":
            buf = v.buffer
            if buf.kind == "lanes":
                return self.cname[buf]
            st = storage_short(buf.dtype)
            if v.index.coef(var) == 1 and not self.varying_terms(v.index):
                raw = f"{self.lib.load(st, w)}({self.cname[buf]} + {self.aff(v.index)})"
                return self._local(vt, self.to_compute(v.dtype, raw))
            if (v.uid in self.forms.gather and st in cvec.GATHER_TYPES
                    and w in cvec.GATHER_WIDTHS and buf.size <= INT32_MAX):
                # one of a loop's many gathers (`passes/lanes.py`): `VecLib.gather`
                raw = f"{self.lib.gather(st, w)}({self.cname[buf]}, {self._offsets(v.index)})"
                return self._local(vt, self.to_compute(v.dtype, raw))
            # a gather: one initializer of the lanes' loads (GCC inserts them into a register;
            # a lane loop it may assemble through memory, a store-forwarding stall per vector)
            lanes = ", ".join(f"{self.cname[buf]}[{self.lane_aff(v.index, str(lane))}]"
                              for lane in range(w))
            name = self._local(self.lib.t(st, w), f"{{{lanes}}}")
            return self._local(vt, self.to_compute(v.dtype, name))
        if op == "mload":
            st = storage_short(v.buffer.dtype)
            mask = v.args[0]
            m = self.vexpr(mask) if self.varies(mask) else \
                f"{self.lib.splat('u8', w)}({self.sx(mask)})"
            raw = (f"{self.lib.masked_load(st, w)}({self.cname[v.buffer]} + "
                   f"{self.aff(v.index)}, {m})")
            return self._local(vt, self.to_compute(v.dtype, raw))
        if op == "tile":
            return self._tile(v, vt)
        if op == "index":
            narrow = v.uid in self.forms.index32
            return self._local(self.lib.t("u32" if narrow else "i64", w),
                               self._offsets(v.arg, narrow))
        if op in ("idiv", "imod"):
            sym = "/" if op == "idiv" else "%"
            # (index32: a non-negative value in [0, 2^31), divided unsigned)
            lt, n = ("u32", f"{c_int(v.arg)}u") if v.uid in self.forms.index32 else \
                ("i64", c_int(v.arg))
            return self._local(self.lib.t(lt, w), f"{self.vexpr(v.args[0])} {sym} "
                                                  f"{self.lib.splat(lt, w)}({n})")
        if op == "alu":
            if v.uid in self.forms.narrow:
                return self._local(vt, self._narrow_index(v, w))
            if v.uid in self.forms.compare32:
                return self._local(vt, self._compare32(v, w))
            if v.uid in self.lazy_now():
                return self._lazy_cond(v, vt, self.lib.select(compute_short(v.dtype), w),
                                       self.lazy[v.uid])
            if v.uid in self.forms.blend:
                blend = self._blend_on_compare(v, w)
                if blend is not None:
                    return self._local(vt, blend)
            args = [self.vexpr(a) for a in v.args]
            expr = cvec.vector_op(self.lib, v.arg, [a.dtype for a in v.args], args, w) or \
                self._by_constant(v, args, w)
            if expr is not None:
                return self._local(vt, expr)
            return self._lane_loop(v, vt, w)
        if op == "cond":
            return self._cond(v, vt, vector=True)
        raise CompileError(f"{self.where}: cannot print a {op} value in a vector loop")

    def _by_constant(self, v: Val, args: list[str], w: int) -> str | None:
        """An integer divide or remainder by a positive constant, on vectors: C's truncating
        `/` and `%` are XLA's there (only a zero or a -1 divisor differs), and GCC turns a
        constant divisor into multiplies (MinAtar's `randint`: `bits % 3`)."""
        op, dt = v.arg.opcode, v.dtype
        if op not in (Opcode.DIVIDE, Opcode.REMAINDER) or dt.kind not in ("signed", "unsigned") \
                or dt.bits not in (32, 64) or v.args[1].op != "const":
            return None
        c = int(ir.const_value(v.args[1]))
        if not 0 < c < 1 << 31:
            return None
        short = compute_short(dt)
        sym = "/" if op is Opcode.DIVIDE else "%"
        return f"({args[0]} {sym} {self.lib.splat(short, w)}({c}))"

    def _offsets(self, a: Affine, narrow: bool = False) -> str:
        """The i64 vector of `a`'s value on each lane of the current vector loop, or with
        `narrow` its unsigned 32-bit lanes (the lane forms' `index32`, `narrow` and `compare32`:
        the value lies in 32 bits, so its sum modulo 2^32 is its value)."""
        assert self.vec is not None
        var, w = self.vec
        short = "u32" if narrow else "i64"

        def num(k: int) -> str:
            return f"{c_int(k % (1 << 32))}u" if narrow else c_int(k)

        c = a.coef(var)
        rest = Affine(tuple((t, k) for t, k in a.terms if not (
            isinstance(t, Val) and self.varies(t))), a.const)  # lane 0's value
        lane0 = f"(uint32_t)({self.aff(rest)})" if narrow else self.aff(rest)
        parts = [f"{self.lib.splat(short, w)}({lane0})"]
        if c:
            parts.append(f"{self.lib.iota(w, short)}() * {num(c)}")
        for t, k in self.varying_terms(a):
            x = self.vexpr(t)
            printed = "u32" if t.uid in self.forms.index32 else compute_short(t.dtype)
            if printed != short:  # (a term of another width)
                x = f"__builtin_convertvector({x}, {self.lib.t(short, w)})"
            parts.append(f"{x} * {num(k)}")
        return " + ".join(parts)

    def _blend_on_compare(self, v: Val, w: int) -> str | None:
        """A select (or a convert to a number) on a comparison the lane forms blend
        (`passes/lanes.py`): a blend on the comparison's mask (between 1 and 0 for a convert),
        not on pred lanes (bytes) widened back to a mask; None where the comparison has no
        mask form after all."""
        p = v.args[0]
        found = cvec.compare_mask(self.lib, p.arg, p.args[0].dtype,
                                  [self.vexpr(x) for x in p.args], w)
        if found is None:
            return None
        short = compute_short(v.dtype)
        if v.arg.opcode is Opcode.SELECT:  # (helpers register in the order they print)
            blend = self.lib.blend(short, w)
            return f"{blend}({found[0]}, {self.vexpr(v.args[1])}, {self.vexpr(v.args[2])})"
        splat = self.lib.splat(short, w)
        return f"{self.lib.blend(short, w)}({found[0]}, {splat}(1), {splat}(0))"

    def _lane_loop(self, v: Val, vt: str, w: int) -> str:
        """An op without a vector form, lane by lane: inline, or a call to an out-of-line
        function where the outline pass says (`forms.outline`, a huge kernel's)."""
        dtypes = [a.dtype for a in v.args]
        if v.uid in self.forms.outline:
            params = [self.lib.t(compute_short(a.dtype), w) if self.varies(a)
                      else cexpr.compute_type(a.dtype) for a in v.args]
            placeholders = [f"a{i}[hf_l]" if self.varies(a) else f"a{i}"
                            for i, a in enumerate(v.args)]
            fn = self.lib.lanes(vt, w, params, cexpr.elementwise_op(v.arg, dtypes, placeholders,
                                                                    self.where, _consts(v)))
            args = [self.vexpr(a) if self.varies(a) else self.sx(a) for a in v.args]
            return self._local(vt, f"{fn}({', '.join(args)})")
        args = [f"{self.vexpr(a)}[hf_l]" if self.varies(a) else self.sx(a) for a in v.args]
        expr = cexpr.elementwise_op(v.arg, dtypes, args, self.where, _consts(v))
        name = self.fresh()
        self.line(f"{vt} {name};")
        self.line(f"for (int hf_l = 0; hf_l < {w}; ++hf_l) {name}[hf_l] = {expr};")
        return name

    def _narrow_index(self, v: Val, w: int) -> str:
        """A 32-bit convert of a 64-bit index the lane forms narrow (`passes/lanes.py`): the
        index computed in 32-bit lanes (unsigned: no overflow), not in 64-bit ones converted."""
        return f"({self.lib.t(compute_short(v.dtype), w)})({self._offsets(v.args[0].arg, True)})"

    def _compare32(self, v: Val, w: int) -> str:
        """A comparison of a 64-bit index with a loop-invariant value, both within 32 bits (the
        lane forms' `compare32`): the index computed in 32-bit lanes (unsigned arithmetic, its
        value fits, so the bits are the signed value's), compared as s32."""
        index, other = v.args
        lhs = f"(({self.lib.t('i32', w)})({self._offsets(index.arg, True)}))"
        rhs = f"{self.lib.splat('i32', w)}((int32_t)({self.sx(other)}))"
        found = cvec.compare_mask(self.lib, v.arg, S32, [lhs, rhs], w)
        assert found is not None
        mask, short = found
        return f"{self.lib.mask_to_pred(short, w)}({mask})"

    def _tile(self, v: Val, vt: str) -> str:
        assert self.vec is not None
        _var, w = self.vec
        buf, base, stride, k = v.arg
        key = ("tile", buf.uid, base, stride)
        found = self.find(key)
        if found is None:
            st = storage_short(buf.dtype)
            names = [self.fresh() for _ in range(stride)]
            self.line(f"{self.lib.t(st, w)} {', '.join(names)};")
            fn = self.lib.shuffle_helper("deint", st, w, stride)
            self.line(f"{fn}({self.cname[buf]} + {self.aff(base)}, "
                      f"{', '.join('&' + n for n in names)});")
            found = self.remember(key, ",".join(names), self.k.graph.load(buf, base))
        raw = found.split(",")[k]
        return self._local(vt, self.to_compute(v.dtype, raw))


@functools.lru_cache(maxsize=4096)
def _lane_cost(op: ir.ScalarOp, dtypes: tuple[DType, ...], w: int) -> int:
    args = [f"a{i}" for i in range(len(dtypes))]
    if cvec.vector_op(VecLib(), op, list(dtypes), args, w) is not None:
        return 0
    return mathlib.inline_weight(op.opcode.value, op.dtype.name)


def lane_cost(v: Val, w: int) -> int:
    """What this printer hands the outline pass (`passes/outline.py`): 0 where `v` (an alu
    value) has a vector form of `w` lanes, else its lane loop's weight
    (`mathlib.inline_weight`: erf 16, power 8, 1 for most)."""
    return _lane_cost(v.arg, tuple(a.dtype for a in v.args), w)


def _consts(v: Val) -> tuple[Any, ...]:
    """The values of `v`'s operands that are constants (None for the others)."""
    return tuple(ir.const_value(a) if a.op == "const" else None for a in v.args)


def cexpr_name(base: str, used: set[str]) -> str:
    from hlofuse.backends.kernel_ir.naming import fresh

    return fresh(base, used)


def _strict_postorder(root: Val, lazy: dict[int, int] | None = None) -> list[Val]:
    """Values to materialise for `root`, operands first; the sides of a `cond` and of a select
    in `lazy` are not entered (they are computed inside its branches)."""
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
        kids = v.args[:1] if v.op == "cond" or (lazy and v.uid in lazy) else v.children()
        for c in reversed(kids):
            if c.uid not in seen:
                stack.append((c, False))
    return out


def print_func(func: ir.Func, lib: VecLib, used_names: set[str]) -> str:
    """A scalar function (a sort comparator, a select-and-scatter select or scatter) as C:

        static inline void NAME(CT p0, CT p1, ..., CT *r0, CT *r1, ...)

    parameters in their compute types (float for f16/bf16), results through pointers."""
    printer = KernelPrinter(ir.Kernel(func.name, [], [], [], ir.Graph()), lib, used_names)
    exprs = [printer.sx(v) for v in func.results]
    sig = [f"{cexpr.compute_type(p.dtype)} p{p.arg}" for p in func.params]
    sig += [f"{cexpr.compute_type(v.dtype)} *r{i}" for i, v in enumerate(func.results)]
    lines = [f"static inline void {func.name}({', '.join(sig)})\n{{"]
    lines += printer.lines
    lines += [f"    *r{i} = {e};" for i, e in enumerate(exprs)]
    lines.append("}")
    return "\n".join(lines) + "\n"
