"""A readable text form of a kernel (for tests, docs and debugging; not C).

    kernel fused_add_sin_multiply(in0: f32[2051], in1: f32[2051]) -> (out0: f32[2051])
      for i0 in [0, 2048) vector 16:
        out0[i0] = add(multiply(sine(in1[i0]), 2), in0[i0])
      for i0 in [2048, 2051):
        out0[i0] = add(multiply(sine(in1[i0]), 2), in0[i0])

Values used more than once in a statement are printed once as `%N = ...` lines before it.
The printers' decisions, once made (`passes/place.py`, `lazy.py`, `lanes.py`), are lines of
their own: `decl t: f32[4096] stack` (or `heap`, `register`) at the top of the block declaring
a local, `lazy %12 side 1` and `forms narrow %7; blend %9` at the top of a vector loop.
Input text (labels) is not printed: the form is made only of names the lowering derived.
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Affine, Stmt, Val, Var


def format_affine(a: Affine, name: dict[int, str] | None = None) -> str:
    parts = []
    for t, c in a.terms:
        x = t.name if isinstance(t, Var) else (name or {}).get(t.uid, f"%{t.uid}")
        parts.append(x if c == 1 else f"{c}*{x}")
    if a.const or not parts:
        parts.append(str(a.const))
    return " + ".join(parts)


class _Fmt:
    def __init__(self, placement: ir.Placement | None = None) -> None:
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.placement = placement

    def val(self, v: Val, shared: set[int]) -> str:
        if v.uid in self.names:
            return self.names[v.uid]
        op = v.op
        if op == "const":
            return str(ir.const_value(v))
        if op == "param":
            return f"p{v.arg}"
        if op == "load":
            return f"{v.buffer.name}[{self.aff(v.index, shared)}]"
        if op == "mload":
            return (f"{v.buffer.name}[{self.aff(v.index, shared)}] where "
                    f"{self.val(v.args[0], shared)}")
        if op == "tile":
            buf, base, stride, k = v.arg
            return f"tile({buf.name}[{self.aff(base, shared)}], stride {stride})[{k}]"
        if op == "index":
            return f"({self.aff(v.arg, shared)})"
        if op in ("idiv", "imod"):
            return f"({self.val(v.args[0], shared)} {'/' if op == 'idiv' else '%'} {v.arg})"
        if op == "alu":
            sop: ir.ScalarOp = v.arg
            attrs = "".join(f", {k}={x}" for k, x in sop.attrs)
            args = ", ".join(self.val(a, shared) for a in v.args)
            return f"{sop.opcode.value}.{sop.dtype}({args}{attrs})"
        if op == "cond":
            c, a, b = (self.val(x, shared) for x in v.args)
            return f"({c} ? {a} : {b})"
        if op == "lanes_reduce":
            sop, *bufs = v.arg
            return f"reduce_lanes.{sop.opcode.value}({', '.join(b.name for b in bufs)})"
        return f"{op}?"

    def aff(self, a: Affine, shared: set[int]) -> str:
        for t in a.vals():
            self.val(t, shared)
        names = {t.uid: self.val(t, shared) for t in a.vals()}
        return format_affine(a, names)

    def shared_of(self, roots: list[Val], depth: int) -> set[int]:
        uses: dict[int, int] = {}
        for v in ir.postorder(roots):
            for c in v.children():
                uses[c.uid] = uses.get(c.uid, 0) + 1
        shared = {u for u, n in uses.items() if n > 1}
        for v in ir.postorder(roots):
            if v.uid in shared and v.op not in ("const", "param", "index") \
                    and v.uid not in self.names:
                text = self.val(v, shared)
                self.names[v.uid] = f"%{v.uid}"
                self.lines.append("  " * depth + f"%{v.uid} = {text}")
        return shared

    def decisions(self, body: list[Stmt], loop: ir.Loop | None, depth: int) -> None:
        pad = "  " * depth
        pl = self.placement
        if pl is not None:
            for b in pl.blocks.get(id(body), []):
                where = "register" if b.kind == "lanes" else "heap" if b in pl.heap else "stack"
                self.lines.append(f"{pad}decl {b.name}: {b.dtype}[{b.size}] {where}")
        if loop is not None and loop.lazy is not None and loop.lazy.sides:
            sides = ", ".join(f"%{u} side {k}" for u, k in loop.lazy.sides.items())
            self.lines.append(f"{pad}lazy {sides}")
        forms = loop.forms if loop is not None else None
        kinds = (("narrow", forms.narrow), ("blend", forms.blend),
                 ("compare32", forms.compare32), ("index32", forms.index32),
                 ("outline", forms.outline)) \
            if forms is not None else ()
        if any(uids for _what, uids in kinds):
            parts = [f"{what} {', '.join(f'%{u}' for u in sorted(uids))}"
                     for what, uids in kinds if uids]
            self.lines.append(f"{pad}forms {'; '.join(parts)}")

    def block(self, body: list[Stmt], depth: int, loop: ir.Loop | None = None) -> None:
        pad = "  " * depth
        self.decisions(body, loop, depth)
        for s in body:
            shared = self.shared_of(ir.stmt_vals(s), depth)
            if isinstance(s, ir.Loop):
                tags = (" parallel" if s.parallel else "") + \
                    (f" vector {s.vector}" if s.vector else "") + \
                    (f" step {s.step}" if s.step else "")
                self.lines.append(f"{pad}for {s.var.name} in [{s.lo}, {s.hi}){tags}:")
                self.block(s.body, depth + 1, s)
            elif isinstance(s, ir.Store):
                self.lines.append(f"{pad}{s.buf.name}[{self.aff(s.index, shared)}] = "
                                  f"{self.val(s.value, shared)}")
            elif isinstance(s, ir.StoreTile):
                vals = ", ".join(self.val(v, shared) for v in s.values)
                self.lines.append(f"{pad}tile({s.buf.name}[{self.aff(s.base, shared)}], "
                                  f"stride {s.stride}) = ({vals})")
            elif isinstance(s, ir.If):
                self.lines.append(f"{pad}if {self.val(s.cond, shared)}:")
                self.block(s.then, depth + 1)
                if s.orelse:
                    self.lines.append(f"{pad}else:")
                    self.block(s.orelse, depth + 1)
            elif isinstance(s, ir.Let):
                self.lines.append(f"{pad}let {self.val(s.value, shared)}")
            elif isinstance(s, ir.Copy):
                cond = " if distinct" if s.if_distinct else ""
                self.lines.append(f"{pad}copy {s.src.name} -> {s.dst.name}{cond}")
            elif isinstance(s, ir.LibCall):
                op = s.op.opcode.value
                self.lines.append(f"{pad}call {op}({', '.join(b.name for b in s.ins)}) -> "
                                  f"({', '.join(b.name for b in s.outs)})")
            elif isinstance(s, ir.Comment):
                continue


def format_kernel(k: ir.Kernel) -> str:
    f = _Fmt(k.placement)
    ins = ", ".join(f"{b.name}: {b.dtype}[{b.size}]" for b in k.inputs)
    outs = ", ".join(f"{b.name}: {b.dtype}[{b.size}]" for b in k.outputs)
    f.lines.append(f"kernel {k.name}({ins}) -> ({outs})")
    f.block(k.body, 1)
    return "\n".join(f.lines)
