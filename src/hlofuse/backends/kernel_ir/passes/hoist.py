"""Hoist loop invariants: a value a loop computes the same way on every iteration is computed
once, before the loop (a `Let`), and read inside it.

Conditions enforced: a value is hoisted out of a loop only if it depends on no variable bound
by the loop or inside it and reads no buffer written anywhere in the loop, and either it is
reached strictly from the loop's statements or it is safe to compute whatever the conditions:
a value reached only through a side of a `cond` (which may read out of bounds where its
condition is false) is hoisted only if every load it computes unconditionally has an index
whose range lies inside its buffer (`speculable`; elementwise ops are total, as vector selects
already assume). So a gather from small concatenated pieces (MuJoCo MJX's 3-vectors) computes
each piece once per call, not once per element and output. Only the largest such values are
hoisted (their operands come along); constants and plain index expressions stay where they
are (they cost nothing). Applied innermost first, so an invariant climbs as far out as it can.
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
    seen: dict[int, bool] = {}  # uid -> reached only through a side of a cond
    stack = [(v, False) for v in roots]
    while stack:
        v, conditional = stack.pop()
        if v.uid in seen and (seen[v.uid] <= conditional):
            continue
        seen[v.uid] = conditional
        if invariant(v) and (not conditional or speculable(v)):
            if v.op not in _CHEAP:
                out.append(v)
            continue
        if v.op == "cond":
            stack.append((v.args[0], conditional))
            stack.extend((x, True) for x in v.args[1:])
        else:
            stack.extend((x, conditional) for x in v.children())
    found = {v.uid: v for v in out}
    return sorted(found.values(), key=lambda v: v.uid)


def speculable(v: Val) -> bool:
    """Is computing `v` safe whatever the conditions guarding it: every load it computes
    (outside the sides of its own conds, which stay guarded) in bounds of its buffer?"""
    seen: set[int] = set()
    stack = [v]
    while stack:
        x = stack.pop()
        if x.uid in seen:
            continue
        seen.add(x.uid)
        if x.op == "tile" or x.op == "lanes_reduce":
            return False
        if x.op == "load":
            r = x.index.bounds()
            if r is None or r[0] < 0 or r[1] >= x.buffer.size:
                return False
        stack.extend(x.args[:1] if x.op == "cond" else x.children())
    return True
