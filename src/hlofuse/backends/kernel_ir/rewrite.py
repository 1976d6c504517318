"""Substitution over kernel IR, with the folding it enables.

    r = Rewriter(graph, {var: affine}, buffers={old: new})
    r.val(v) / r.affine(a) / r.stmts(body)

Replaces loop variables by affine expressions (split: `i -> i'`, unroll: `k -> 2`, collapse:
`n*i + j -> t` through `affine_hook`) and buffers by buffers (privatised locals), rebuilding
every value that changes through the kernel's `Graph` (so results stay interned). While
rebuilding it folds what the new ranges decide: comparisons of index expressions, `and`/`or`
of constants, `select(p, true, false)` (p), `cond` with a constant condition, `idiv`/`imod` of
ranges that no longer need them. Traversals are iterative (values) or bounded by the loop
depth (statements).
"""

from __future__ import annotations

from collections.abc import Callable

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Affine, Buffer, Graph, Stmt, Val, Var
from hlofuse.ir.dtypes import PRED
from hlofuse.ir.opcodes import Opcode

_COMPARE = {
    "LT": lambda lo, hi: (True if hi < 0 else False if lo >= 0 else None),
    "LE": lambda lo, hi: (True if hi <= 0 else False if lo > 0 else None),
    "GT": lambda lo, hi: (True if lo > 0 else False if hi <= 0 else None),
    "GE": lambda lo, hi: (True if lo >= 0 else False if hi < 0 else None),
    "EQ": lambda lo, hi: (True if lo == hi == 0 else False if lo > 0 or hi < 0 else None),
    "NE": lambda lo, hi: (False if lo == hi == 0 else True if lo > 0 or hi < 0 else None),
}


def as_affine(v: Val) -> Affine | None:
    """An s64 value as an affine expression, if it is one (an index or a constant)."""
    if v.op == "index":
        return v.arg
    if v.op == "const" and v.dtype.name == "s64":
        return ir.affine(int(ir.const_value(v)))
    return None


def fold_compare(g: Graph, op: ir.ScalarOp, a: Val, b: Val) -> Val | None:
    """A comparison of two index expressions that their ranges decide, as a constant."""
    if op.opcode is not Opcode.COMPARE or a.dtype.name != "s64":
        return None
    x, y = as_affine(a), as_affine(b)
    if x is None or y is None:
        return None
    bounds = (x - y).bounds()
    if bounds is None:
        return None
    decide = _COMPARE.get(str(op.attr("direction")))
    result = decide(*bounds) if decide else None
    return None if result is None else g.const(result, PRED)


class Rewriter:
    def __init__(self, g: Graph, mapping: dict[Var, Affine] | None = None,
                 buffers: dict[Buffer, Buffer] | None = None,
                 affine_hook: Callable[[Affine], Affine] | None = None) -> None:
        self.g = g
        self.mapping = mapping or {}
        self.buffers = buffers or {}
        self.hook = affine_hook
        self.memo: dict[int, Val] = {}

    def buffer(self, b: Buffer) -> Buffer:
        return self.buffers.get(b, b)

    def affine(self, a: Affine) -> Affine:
        out = ir.affine(a.const)
        for t, c in a.terms:
            if isinstance(t, Var):
                out = out + (self.mapping[t] * c if t in self.mapping else ir.affine(t) * c)
                continue
            nv = self.val(t)
            sub = as_affine(nv)
            out = out + (sub * c if sub is not None else ir.affine(nv) * c)
        if self.hook is not None:
            out = self.hook(out)
        return out

    def val(self, root: Val) -> Val:
        """`root` rebuilt; the walk stops at values already rebuilt (a body's roots share
        most of their operands: walking each root's whole graph made rewriting a body
        quadratic, a third of brax's ant's kernel lowering)."""
        if root.uid not in self.memo:
            for v in ir.postorder([root], known=self.memo):
                if v.uid not in self.memo:  # (an index's values, rebuilt through `affine`)
                    self.memo[v.uid] = self._rebuild(v)
        return self.memo[root.uid]

    def _rebuild(self, v: Val) -> Val:
        g = self.g
        args = tuple(self.memo[a.uid] for a in v.args)
        op = v.op
        if op in ("const", "param"):
            return v
        if op == "load":
            return g.load(self.buffer(v.buffer), self.affine(v.index))
        if op == "mload":
            return g.mload(self.buffer(v.buffer), self.affine(v.index), args[0])
        if op == "tile":
            buf, base, stride, k = v.arg
            return g.make("tile", v.dtype, (), (self.buffer(buf), self.affine(base), stride, k))
        if op == "index":
            return g.index(self.affine(v.arg))
        if op in ("idiv", "imod"):
            x = as_affine(args[0])
            if x is not None:
                return g.index(g.idiv(x, v.arg) if op == "idiv" else g.imod(x, v.arg))
            return g.make(op, v.dtype, args, v.arg)
        if op == "cond":
            return g.cond(*args)
        if op == "alu":
            sop: ir.ScalarOp = v.arg
            folded = fold_compare(g, sop, *args) if len(args) == 2 else None
            if folded is not None:
                return folded
            if sop.opcode is Opcode.SELECT and sop.dtype.is_pred and \
                    args[1].op == "const" and args[2].op == "const" and \
                    bool(ir.const_value(args[1])) and not bool(ir.const_value(args[2])):
                return args[0]  # select(p, true, false) is p
            if sop.opcode in (Opcode.AND, Opcode.OR) and sop.dtype.is_pred:
                consts = [a for a in args if a.op == "const"]
                if consts:
                    val = bool(ir.const_value(consts[0]))
                    other = args[1] if args[0] is consts[0] else args[0]
                    if sop.opcode is Opcode.AND:
                        return other if val else g.const(False, PRED)
                    return g.const(True, PRED) if val else other
            return g.alu(sop, *args)
        if op == "lanes_reduce":
            sop, *bufs = v.arg
            return g.make(op, v.dtype, args, (sop, *(self.buffer(b) for b in bufs)))
        return g.make(op, v.dtype, args, v.arg)

    def stmts(self, body: list[Stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for s in body:
            out.extend(self.stmt(s))
        return out

    def stmt(self, s: Stmt) -> list[Stmt]:
        if isinstance(s, ir.Loop):
            return [ir.Loop(s.var, s.lo, s.hi, self.stmts(s.body), s.parallel, s.vector,
                            s.step)]
        if isinstance(s, ir.Store):
            return [ir.Store(self.buffer(s.buf), self.affine(s.index), self.val(s.value))]
        if isinstance(s, ir.StoreTile):
            return [ir.StoreTile(self.buffer(s.buf), self.affine(s.base), s.stride,
                                 [self.val(v) for v in s.values])]
        if isinstance(s, ir.If):
            c = self.val(s.cond)
            if c.op == "const":
                return self.stmts(s.then if ir.const_value(c) else s.orelse)
            return [ir.If(c, self.stmts(s.then), self.stmts(s.orelse))]
        if isinstance(s, ir.Let):
            return [ir.Let(self.val(s.value))]
        if isinstance(s, ir.Copy):
            return [ir.Copy(self.buffer(s.dst), self.buffer(s.src), s.if_distinct)]
        if isinstance(s, ir.LibCall):
            return [ir.LibCall(s.op, [self.buffer(b) for b in s.ins],
                               [self.buffer(b) for b in s.outs])]
        return [s]
