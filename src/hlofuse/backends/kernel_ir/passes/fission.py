"""Split a top-level loop that streams many buffers into loops of independent statements.

    for i in [0, 65536):                          for i in [0, 65536):   (layer 0: 5 streams)
      m0[i] = 0.99*m0'[i] + 0.01*g0[i]              m0[i] = ...; p0[i] = ...
      p0[i] = p0'[i] - lr*sign(...)              for i' in [0, 65536):   (layer 1: 5 streams)
      m1[i] = ...; p1[i] = ...         ->          m1[i'] = ...; p1[i'] = ...
      ... (8 layers: 40 streams)                  ...

A horizontal fusion of an optimizer's update (optax's lion over 8 layers: 24 inputs and 16
outputs of one shape) lowers to one loop that reads and writes 40 arrays per iteration.
Buffers of one size sit at the same offset within their pages, so 40 streams fight for the same
L1 sets and the hardware prefetchers' slots: on this AVX2 host a loop of 40 such streams ran 8x
slower than the same work as 8 loops of 5 (1.3 ms against 0.16 ms; 1.7x when the buffers'
offsets are staggered), 10 streams 2x. The kernel still runs as one call; each new loop is
vectorized and parallelized on its own.

Conditions enforced (a loop that meets them all is split, any other is left as it is):
- the loop is at the top level of the kernel, not yet vector or parallel, and holds no copy or
  library call;
- its statements' buffers (not locals) number more than MAX_STREAMS, and they span at least
  MIN_BYTES together (a loop that small runs from cache and gains nothing);
- statements are grouped so that two statements that share a computed value (a load, an
  arithmetic result: anything but constants, indices and parameters) or where one writes a
  buffer (a local included) the other reads or writes are in one group; groups are independent,
  so running them one after another gives the results of the interleaved loop;
- groups are packed in the order of their first statements into loops of at most MAX_STREAMS
  buffers (a group with more is a loop of its own); statements keep their order in each loop;
  comments travel with the statement after them.
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Buffer, Stmt
from hlofuse.backends.kernel_ir.rewrite import Rewriter

MAX_STREAMS = 8  # buffers a loop may stream before it is split (the measured knee: 5 best)
MIN_BYTES = 256 * 1024  # a loop whose buffers span less than this together is left whole
_FREE = frozenset({"const", "index", "param"})  # values each loop may compute again


def fission(kernel: ir.Kernel) -> None:
    out: list[Stmt] = []
    for s in kernel.body:
        if isinstance(s, ir.Loop) and not s.parallel and not s.vector:
            out.extend(_split(kernel, s))
        else:
            out.append(s)
    kernel.body = out


class _Unit:
    """A statement of the loop's body (with the comments before it): what it touches."""

    def __init__(self, stmts: list[Stmt]) -> None:
        self.stmts = stmts
        roots = [v for s in ir.walk(stmts) for v in ir.stmt_vals(s)]
        self.writes: set[Buffer] = ir.written(stmts)
        self.reads: set[Buffer] = set()
        self.vals = [v for v in ir.postorder(roots) if v.op not in _FREE]
        for v in self.vals:
            if v.op in ("load", "tile", "mload"):
                self.reads.add(v.buffer)
        self.buffers = {b for b in self.reads | self.writes if b.kind not in ("local", "lanes")}


def _split(k: ir.Kernel, loop: ir.Loop) -> list[Stmt]:
    if any(isinstance(s, ir.Copy | ir.LibCall) for s in ir.walk(loop.body)):
        return [loop]
    units: list[_Unit] = []
    pending: list[Stmt] = []
    for s in loop.body:
        pending.append(s)
        if not isinstance(s, ir.Comment):
            units.append(_Unit(pending))
            pending = []
    if pending and units:
        units[-1].stmts.extend(pending)
    buffers = set().union(*(u.buffers for u in units)) if units else set()
    if len(buffers) <= MAX_STREAMS or sum(b.size * b.dtype.itemsize for b in buffers) < MIN_BYTES:
        return [loop]
    groups = _groups(units)
    if len(groups) < 2:
        return [loop]
    bins: list[tuple[list[int], set[Buffer]]] = []
    for g in groups:
        bufs = set().union(*(units[i].buffers for i in g))
        if bins and len(bins[-1][1] | bufs) <= MAX_STREAMS:
            bins[-1][0].extend(g)
            bins[-1][1].update(bufs)
        else:
            bins.append((list(g), set(bufs)))
    if len(bins) < 2:
        return [loop]
    out: list[Stmt] = []
    for n, (members, _) in enumerate(bins):
        body = [s for i in sorted(members) for s in units[i].stmts]
        if n == 0:
            out.append(ir.Loop(loop.var, loop.lo, loop.hi, body))
            continue
        var = ir.Var(f"{loop.var.name}f{n}", loop.var.lo, loop.var.hi)
        body = Rewriter(k.graph, {loop.var: ir.affine(var)}).stmts(body)
        out.append(ir.Loop(var, loop.lo, loop.hi, body))
    return out


def _groups(units: list[_Unit]) -> list[list[int]]:
    """Units joined (union-find) where they share a computed value or a buffer one writes;
    the groups in the order of their first units."""
    parent = list(range(len(units)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i: int, j: int) -> None:
        a, b = find(i), find(j)
        if a != b:
            parent[max(a, b)] = min(a, b)

    owner_val: dict[int, int] = {}
    for i, u in enumerate(units):
        for v in u.vals:
            j = owner_val.setdefault(v.uid, i)
            if j != i:
                union(i, j)
    writers: dict[Buffer, int] = {}
    for i, u in enumerate(units):
        for b in u.writes:
            j = writers.setdefault(b, i)
            if j != i:
                union(i, j)
    for i, u in enumerate(units):
        for b in u.reads | u.writes:
            if b in writers:
                union(i, writers[b])
    groups: dict[int, list[int]] = {}
    for i in range(len(units)):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])
