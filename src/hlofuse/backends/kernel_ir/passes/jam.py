"""Jam adjacent sibling loops over the same range into one loop, so values they share are
computed once per iteration.

    for i in [0, 2048): out[i]        = f(sin(th[i]), ...)      (row 1 of a stacked [4, N])
    for i in [0, 2048): out[i + 6144] = g(sin(th[i]), ...)      (row 3)
 -> for i in [0, 2048): out[i] = f(...); out[i + 6144] = g(...)  (sin computed once)

The pieces `split` cuts a concatenate on an outer dimension into (a `jnp.stack` of a state's
rows) are such siblings. Conditions enforced: the loops are adjacent (only comments and stores
independent of the later loop between them), have the same bounds, are neither vector nor
parallel yet; no buffer one of them writes
is read by the other; and where both write a buffer, the index ranges they write (over the loop
range) do not overlap. Then running the bodies interleaved, iteration by iteration, gives the
same results as running one loop after the other.

`regroup(kernel, body)` (used by `vectorize` for its outputs-in-lanes schedule) also jams
sibling loops that statements stand between, moving each such statement above the first loop
or below the second, whichever it does not depend on:

    acc0 = 0; for r: acc0 += f(r); out0 = acc0; acc1 = 0; for r: acc1 += g(r); out1 = acc1
 -> acc0 = 0; acc1 = 0; for r: {acc0 += f(r); acc1 += g(r)}; out0 = acc0; out1 = acc1

A statement moves up only if it is independent (`_independent`) of the first loop and of the
statements already moved down past it; down only if independent of the second loop (the
statements moved up after it are checked against it). Only stores, lets and comments move.
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Buffer, Stmt
from hlofuse.backends.kernel_ir.rewrite import Rewriter


def jam(kernel: ir.Kernel) -> None:
    kernel.body = _block(kernel, kernel.body)


def _block(k: ir.Kernel, body: list[Stmt]) -> list[Stmt]:
    out: list[Stmt] = []
    for s in body:
        if isinstance(s, ir.Loop):
            s.body = _block(k, s.body)
            prev = _last_loop(out, s)
            if prev is not None and _can_jam(prev, s):
                extra = Rewriter(k.graph, {s.var: ir.affine(prev.var)}).stmts(s.body)
                prev.body = prev.body + extra
                continue
        elif isinstance(s, ir.If):
            s = ir.If(s.cond, _block(k, s.then), _block(k, s.orelse))
        out.append(s)
    return out


def regroup(k: ir.Kernel, body: list[Stmt]) -> list[Stmt]:
    """`body` with sibling loops jammed across the statements between them (see the module
    docstring); nested blocks are left as they are. New loop objects: `body`'s are not
    changed."""
    out: list[Stmt] = []
    last = -1  # position in `out` of the last loop
    for s in body:
        if isinstance(s, ir.Loop):
            prev = out[last] if last >= 0 else None
            moved = None
            if isinstance(prev, ir.Loop) and _can_jam(prev, s):
                moved = _move_apart(out[last + 1:], prev, s)
            if isinstance(prev, ir.Loop) and moved is not None:
                ups, downs = moved
                extra = Rewriter(k.graph, {s.var: ir.affine(prev.var)}).stmts(s.body)
                merged = ir.Loop(prev.var, prev.lo, prev.hi, prev.body + extra)
                out = out[:last] + ups + [merged] + downs
                last += len(ups)
                continue
            last = len(out)
        out.append(s)
    return out


def _move_apart(between: list[Stmt], first: ir.Loop, second: ir.Loop
                ) -> tuple[list[Stmt], list[Stmt]] | None:
    """The statements between two loops split into those that can move above `first` and
    those that can move below `second` (each keeping its order), or None."""
    ups: list[Stmt] = []
    downs: list[Stmt] = []
    for s in between:
        if not isinstance(s, ir.Store | ir.Let | ir.Comment):
            return None
        if _independent([s], first.body) and _independent([s], downs):
            ups.append(s)
        elif _independent([s], second.body):
            downs.append(s)
        else:
            return None
    return ups, downs


def _last_loop(out: list[Stmt], loop: ir.Loop) -> ir.Loop | None:
    """The previous loop `loop` could move up to: only comments and stores independent of
    `loop` may stand between them."""
    for s in reversed(out):
        if isinstance(s, ir.Comment):
            continue
        if isinstance(s, ir.Loop):
            return s
        if isinstance(s, ir.Store) and _independent([s], loop.body):
            continue
        return None
    return None


def _reads(body: list[Stmt]) -> set[Buffer]:
    out: set[Buffer] = set()
    for s in ir.walk(body):
        for v in ir.stmt_vals(s):
            out |= ir.reads(v)
        if isinstance(s, ir.Copy):
            out.add(s.src)
        elif isinstance(s, ir.LibCall):
            out.update(s.ins)
    return out


def _write_ranges(body: list[Stmt]) -> dict[Buffer, list[tuple[int, int] | None]]:
    out: dict[Buffer, list[tuple[int, int] | None]] = {}
    for s in ir.walk(body):
        if isinstance(s, ir.Store):
            out.setdefault(s.buf, []).append(s.index.bounds())
        elif isinstance(s, ir.StoreTile | ir.Copy | ir.LibCall):
            bufs = [s.buf] if isinstance(s, ir.StoreTile) else \
                [s.dst] if isinstance(s, ir.Copy) else s.outs
            for b in bufs:
                out.setdefault(b, []).append(None)
    return out


def _can_jam(a: ir.Loop, b: ir.Loop) -> bool:
    if (a.lo, a.hi) != (b.lo, b.hi) or a.vector or b.vector or a.parallel or b.parallel:
        return False
    return _independent(a.body, b.body)


def _independent(a_body: list[Stmt], b_body: list[Stmt]) -> bool:
    """May the two statement lists run in either order (or interleaved)?"""
    wa, wb = _write_ranges(a_body), _write_ranges(b_body)
    if set(wa) & _reads(b_body) or set(wb) & _reads(a_body):
        return False
    for buf in set(wa) & set(wb):
        ra, rb = wa[buf], wb[buf]
        if any(r is None for r in ra + rb):
            return False
        lo_a, hi_a = min(r[0] for r in ra), max(r[1] for r in ra)  # type: ignore[index]
        lo_b, hi_b = min(r[0] for r in rb), max(r[1] for r in rb)  # type: ignore[index]
        if not (hi_a < lo_b or hi_b < lo_a):
            return False
    return True
