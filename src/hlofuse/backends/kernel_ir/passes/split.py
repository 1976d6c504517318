"""Split loop ranges where conditions on the loop index change, so each piece is branch-free.

    for i in [0, 6): out[i] = i < 2 ? a[i] : b[i - 2]      (a concatenate)
 -> for i in [0, 2): out[i] = a[i]
    for i in [2, 6): out[i] = b[i - 2]

Conditions enforced: a loop is split only at points where some comparison of an affine
expression of its variable alone changes truth value inside its range (pad edges, concatenate
boundaries, dynamic-update-slice windows with constant starts); each piece gets a fresh variable
over its sub-range and the body is rewritten with it (`rewrite.Rewriter`, which folds the
comparisons, `cond`s and `If`s the sub-range decides). A nest is split into at most
`MAX_COPIES` copies of its innermost body; beyond that it is left whole (correct, with branches).
The condition of an `If` directly in a loop's body whose branch holds a loop is not a split
point (a branch per iteration costs less than a copy of the body's other loops).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Graph, Stmt, Var
from hlofuse.backends.kernel_ir.rewrite import _COMPARE, Rewriter, as_affine
from hlofuse.ir.opcodes import Opcode

MAX_COPIES = 16


def split(kernel: ir.Kernel) -> None:
    kernel.body = _block(kernel.graph, kernel.body, MAX_COPIES)


def _block(g: Graph, body: list[Stmt], budget: int) -> list[Stmt]:
    out: list[Stmt] = []
    for s in body:
        if isinstance(s, ir.Loop):
            out.extend(_loop(g, s, budget))
        elif isinstance(s, ir.If):
            out.append(ir.If(s.cond, _block(g, s.then, budget), _block(g, s.orelse, budget)))
        else:
            out.append(s)
    return out


def _loop(g: Graph, loop: ir.Loop, budget: int) -> list[Stmt]:
    points = sorted(p for p in _points(loop) if loop.lo < p < loop.hi)
    if not points or len(points) + 1 > budget:
        loop.body = _block(g, loop.body, budget)
        return [loop]
    bounds = [loop.lo, *points, loop.hi]
    pieces: list[Stmt] = []
    inner_budget = max(1, budget // (len(bounds) - 1))
    for a, b in itertools.pairwise(bounds):
        if b - a == 1:  # one iteration: no loop at all
            body = Rewriter(g, {loop.var: ir.affine(a)}).stmts(loop.body)
            pieces.extend(_block(g, body, inner_budget))
            continue
        var = Var(loop.var.name, a, b)
        body = Rewriter(g, {loop.var: ir.affine(var)}).stmts(loop.body)
        pieces.extend(_loop(g, ir.Loop(var, a, b, body, loop.parallel, loop.vector, loop.step),
                            inner_budget))
    return pieces


def _points(loop: ir.Loop) -> set[int]:
    """Points p where a comparison involving only `loop.var` may differ between p-1 and p."""
    out: set[int] = set()
    v = loop.var
    # an If of the body whose branch runs a loop nest stays a branch: splitting would copy the
    # body's other nests for a branch taken on a few iterations (a whole loop's last one)
    branches = {s.cond.uid for s in loop.body if isinstance(s, ir.If)
                and any(isinstance(y, ir.Loop) for y in ir.walk(s.then + s.orelse))}
    for x in ir.body_values(loop.body):
        if x.op != "alu" or x.arg.opcode is not Opcode.COMPARE or len(x.args) != 2 or \
                x.uid in branches:
            continue
        a, b = (as_affine(y) for y in x.args)
        if a is None or b is None:
            continue
        d = a - b
        if d.terms != ((v, d.coef(v)),) or not d.coef(v):
            continue
        c, k = d.coef(v), d.const
        decide = _COMPARE.get(str(x.arg.attr("direction")))
        if decide is None:
            continue
        q = Fraction(-k, c)
        for p in {math.floor(q), math.floor(q) + 1, math.ceil(q), math.ceil(q) + 1}:
            before, after = c * (p - 1) + k, c * p + k
            if decide(before, before) != decide(after, after):
                out.add(p)
    return out
