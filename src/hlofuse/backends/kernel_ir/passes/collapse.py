"""Collapse perfectly nested loops into one flat loop where every access allows it.

    for i in [0, 2048): for k in [0, 4): out[4*i + k] = a[4*i + k] * 2
 -> for t in [0, 8192): out[t] = a[t] * 2

Conditions enforced: the outer loop's body is exactly the inner loop; both start at 0 and are
neither vector nor parallel yet; every affine expression in the inner body (load and store
indices, index values, the indices inside gathered or delinearised values) uses the two
variables only as `c * (n_inner * i + k)` for some c (possibly 0). Then `n_inner * i + k` is
replaced by the new variable `t` over [0, n_outer * n_inner) and nothing else changes, so
results are identical. Applied bottom-up, so a rank-3 elementwise nest becomes one loop.
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Affine, Graph, Stmt, Var
from hlofuse.backends.kernel_ir.rewrite import Rewriter


def collapse(kernel: ir.Kernel) -> None:
    kernel.body = _block(kernel.graph, kernel.body)


def _block(g: Graph, body: list[Stmt]) -> list[Stmt]:
    out: list[Stmt] = []
    for s in body:
        if isinstance(s, ir.Loop):
            s.body = _block(g, s.body)
            out.append(_try(g, s))
        elif isinstance(s, ir.If):
            out.append(ir.If(s.cond, _block(g, s.then), _block(g, s.orelse)))
        else:
            out.append(s)
    return out


def _affines(body: list[Stmt]) -> list[Affine]:
    out: list[Affine] = []
    roots = []
    for s in ir.walk(body):
        roots.extend(ir.stmt_vals(s))
        if isinstance(s, ir.Store):
            out.append(s.index)
        elif isinstance(s, ir.StoreTile):
            out.append(s.base)
    for v in ir.postorder(roots):
        if v.op in ir.INDEXED:
            out.append(v.index)
    return out


def _try(g: Graph, outer: ir.Loop) -> ir.Loop:
    if len(outer.body) != 1 or not isinstance(outer.body[0], ir.Loop):
        return outer
    inner = outer.body[0]
    if outer.lo or inner.lo or outer.vector or inner.vector or outer.parallel or inner.parallel:
        return outer
    n = inner.hi
    i, k = outer.var, inner.var
    for a in _affines(inner.body):
        if a.coef(i) != n * a.coef(k):
            return outer
    t = Var(outer.var.name, 0, outer.hi * n)

    def hook(a: Affine) -> Affine:
        c = a.coef(k)
        if not c and not a.coef(i):
            return a
        return a.without(i).without(k) + ir.affine(t) * c

    body = Rewriter(g, affine_hook=hook).stmts(inner.body)
    return ir.Loop(t, 0, t.hi, body)
