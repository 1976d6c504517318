"""Hoist loop invariants: a value a loop computes the same way on every iteration is computed
once, before the loop (a `Let`), and read inside it.

Conditions enforced: a value is hoisted out of a loop only if it depends on no variable bound
by the loop or inside it, reads no buffer written anywhere in the loop, and is reached strictly
from the loop's statements (not only through a side of a `cond`, which may be out of bounds
where its condition is false). Only the largest such values are hoisted (their operands come
along); constants and plain index expressions stay where they are (they cost nothing).
Applied innermost first, so an invariant climbs as far out as it can.
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Stmt, Val, Var

_CHEAP = frozenset({"const", "param", "index"})


def hoist(kernel: ir.Kernel) -> None:
    kernel.body = _block(kernel.body)


def _block(body: list[Stmt]) -> list[Stmt]:
    out: list[Stmt] = []
    for s in body:
        if isinstance(s, ir.Loop):
            s.body = _block(s.body)
            out.extend(ir.Let(v) for v in _invariants(s))
            out.append(s)
        elif isinstance(s, ir.If):
            out.append(ir.If(s.cond, _block(s.then), _block(s.orelse)))
        else:
            out.append(s)
    return out


def _bound(loop: ir.Loop) -> set[Var]:
    out = {loop.var}
    for s in ir.walk(loop.body):
        if isinstance(s, ir.Loop):
            out.add(s.var)
    return out


def _invariants(loop: ir.Loop) -> list[Val]:
    bound = _bound(loop)
    written = ir.written(loop.body)
    roots: list[Val] = []
    for s in ir.walk(loop.body):
        roots.extend(ir.stmt_vals(s))

    def invariant(v: Val) -> bool:
        return not (ir.deps(v) & bound) and not (ir.reads(v) & written) and \
            not any(b.kind == "lanes" for b in ir.reads(v))

    out: list[Val] = []
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        v = stack.pop()
        if v.uid in seen:
            continue
        seen.add(v.uid)
        if invariant(v):
            if v.op not in _CHEAP:
                out.append(v)
            continue
        kids = v.args[:1] if v.op == "cond" else v.children()
        stack.extend(kids)
    out.sort(key=lambda v: v.uid)
    return out
