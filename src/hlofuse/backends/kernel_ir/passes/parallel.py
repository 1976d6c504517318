"""Mark loops whose iterations may run on different threads.

A top-level loop (not inside another loop) becomes `parallel` when its work (iterations of its
innermost statements) is at least `PARALLEL_MIN` elements and it is safe: every store to a
buffer that is not a local writes an address with a nonzero coefficient on the loop variable and
no value term that depends on it (iterations write disjoint elements), every local it stores to
is accessed only inside it (so each thread declares its own copy) and fits on the stack
(`ir.STACK_LOCAL_BYTES`: heap scratch is allocated outside parallel regions only), and it
contains no copy or library call. Smaller loops stay serial: a fork/join costs microseconds.
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Buffer, Stmt

PARALLEL_MIN = 1 << 16


def parallelize(kernel: ir.Kernel, threshold: int = PARALLEL_MIN) -> None:
    counts = access_counts(kernel.body)
    for s in kernel.body:
        if isinstance(s, ir.Loop) and work(s) >= threshold and _safe(s, counts):
            s.parallel = True


def work(loop: ir.Loop) -> int:
    inner = 0
    for s in loop.body:
        inner += work(s) if isinstance(s, ir.Loop) else 1
    n = loop.hi - loop.lo
    return n * max(inner, 1)


def access_counts(body: list[Stmt]) -> dict[Buffer, int]:
    """How many statements or values access each buffer in `body` (nested included)."""
    count: dict[Buffer, int] = {}

    def add(b: Buffer) -> None:
        count[b] = count.get(b, 0) + 1

    roots = []
    for s in ir.walk(body):
        roots.extend(ir.stmt_vals(s))
        if isinstance(s, ir.Store | ir.StoreTile):
            add(s.buf)
        elif isinstance(s, ir.Copy):
            add(s.dst)
            add(s.src)
        elif isinstance(s, ir.LibCall):
            for b in s.ins + s.outs:
                add(b)
    for v in ir.postorder(roots):
        if v.op in ("load", "tile", "lanes_reduce"):
            add(v.buffer)
    return count


def _safe(loop: ir.Loop, counts: dict[Buffer, int]) -> bool:
    v = loop.var
    mine = access_counts(loop.body)
    for s in ir.walk(loop.body):
        if isinstance(s, ir.Copy | ir.LibCall):
            return False
        if isinstance(s, ir.Store | ir.StoreTile):
            idx = s.index if isinstance(s, ir.Store) else s.base
            if s.buf.kind in ("local", "lanes"):
                if mine.get(s.buf) != counts.get(s.buf):
                    return False
                if s.buf.size * s.buf.dtype.itemsize > ir.STACK_LOCAL_BYTES:
                    return False  # heap scratch is never allocated inside a parallel loop
            elif not idx.coef(v) or any(v in ir.deps(t) for t in idx.vals()):
                return False
    return True
