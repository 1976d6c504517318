"""Lazy selects: in a vector loop, which lane-varying selects (`select` ops and `cond` values)
compute one side only when some lane of the vector takes it (`ir.LazyPlan`, stored as
`Loop.lazy`). Printers read the plan and print one branch per group of selects on the same
condition and side; they decide nothing about it.

    lazy(kernel)                         Loop.lazy of every vector loop
    owned(plan, select, side, var, printed)
                                         the values only that side uses, not printed yet

Conditions enforced:
- a side is lazy only if it has at least `LAZY_SELECT_MIN_OPS` lane-varying values of its own
  (values nothing else in the loop uses) and reads no buffer the loop writes (so computing it
  early, or for fewer vectors, changes nothing); the larger side if both qualify;
- a lazy side's own values are used only under its select (`owned`), so a printer computes
  them inside the branch and everything else before it. The verifier checks it.
A branch costs a few cycles (a mispredicted one ~15), a side this large 16+. CartPole as the
paper wrote it draws four uniforms per environment (a threefry each, ~90 vector ops) for
states it keeps only where an episode ended (~5% of environments per step).
"""

from __future__ import annotations

from collections.abc import Callable

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Val, Var
from hlofuse.backends.kernel_ir.query import varies
from hlofuse.ir.opcodes import Opcode

LAZY_SELECT_MIN_OPS = 32
LAZY_SELECT_MAX_DEPTH = 8  # lazy sides inside lazy sides, at most (deeper ones blend)


def is_select(v: Val) -> bool:
    """A `cond` value or a `select` op (a select printers may compute lazily)."""
    return v.op == "cond" or (v.op == "alu" and v.arg.opcode is Opcode.SELECT)


def lazy(kernel: ir.Kernel) -> ir.Kernel:
    """Set `Loop.lazy` on every vector loop of `kernel`."""
    for s in ir.walk(kernel.body):
        if isinstance(s, ir.Loop) and s.vector:
            s.lazy = plan(s)
    return kernel


def plan(loop: ir.Loop) -> ir.LazyPlan:
    """The lazy selects of the vector loop `loop` (see the module docstring); `users` is empty
    when the loop has no lane-varying select."""
    values = ir.body_values(loop.body)
    var = loop.var
    selects = [v for v in values if is_select(v) and varies(v.args[0], var)]
    if not selects:
        return ir.LazyPlan()
    users: dict[int, set[int]] = {}
    for v in values:
        for c in v.children():
            users.setdefault(c.uid, set()).add(v.uid)
    out = ir.LazyPlan(users=users)
    stored = ir.written(loop.body)
    for v in selects:
        sizes = [(len(owned(out, v, k, var, limit=LAZY_SELECT_MIN_OPS)), k) for k in (1, 2)
                 if not ir.reads(v.args[k]) & stored]
        size, side = max(sizes, default=(0, 0))
        if size >= LAZY_SELECT_MIN_OPS:
            out.sides[v.uid] = side
            out.groups.setdefault((v.args[0].uid, side), []).append(v)
    return out


def owned(plan: ir.LazyPlan, v: Val, k: int, var: Var,
          printed: Callable[[Val], bool] = lambda x: False, limit: int | None = None) -> set[int]:
    """The lane-varying values under `v`'s side `k` that only that side uses (every user is `v`
    or another of them) and are not `printed` yet (a printer's memo: those it computed in an
    enclosing scope), by uid; with `limit`, the search stops once it has found that many."""
    side = v.args[k]
    if side in v.args[:k] + v.args[k + 1:] or not varies(side, var) or \
            plan.users.get(side.uid) != {v.uid} or printed(side):
        return set()
    inside = {side.uid}
    work = [side]
    while work and (limit is None or len(inside) < limit):
        x = work.pop()
        for c in x.children():
            if c.uid in inside or not varies(c, var) or printed(c):
                continue
            if plan.users.get(c.uid, set()) <= inside:
                inside.add(c.uid)
                work.append(c)
    return inside
