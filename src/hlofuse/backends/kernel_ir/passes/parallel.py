"""Mark loops whose iterations may run on different threads.

A top-level loop (not inside another loop) becomes `parallel` when `threads` > 1, its estimated
single-thread time (`estimate_ns`: iterations times loads, stores and ops, transcendentals
weighted, divided by the vector width; a byte costs `NS_PER_BYTE` streaming from memory, or
`NS_PER_CACHED_BYTE` when every buffer the loop touches fits in `CACHED_BYTES` together: the
producer just wrote them, they are in its core's cache) is at least `PARALLEL_NS`, and it is
safe: every store to
a buffer that is not a local writes an address with a nonzero coefficient on the loop variable
and no value term that depends on it (iterations write disjoint elements), every local it
reads or stores to is accessed only inside it (each thread declares its own copy) and fits on
the stack, or is a local the loop only writes, at such addresses (`written_apart`: declared
outside, passed to the outlined range function with the kernel's parameters)
(`ir.STACK_LOCAL_BYTES`: heap scratch is allocated outside parallel regions only), and it
contains no copy or library call. Smaller loops stay serial: waking the pool costs microseconds
(benchmarks/threads.py measured the threshold).
"""

from __future__ import annotations

from hlofuse.analysis.cost import op_cost
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Buffer, Stmt

PARALLEL_NS = 20_000.0  # below this estimated time a loop is not worth waking the pool for
NS_PER_OP = 0.25  # one scalar op (a lane: vector loops divide by their width)
NS_PER_BYTE = 0.08  # memory traffic of one thread, streaming
NS_PER_CACHED_BYTE = 0.02  # ... from the core's own cache
CACHED_BYTES = 512 * 1024  # a loop whose buffers fit in this together reads them from cache


def parallelize(kernel: ir.Kernel, threads: int = 1, threshold: float = PARALLEL_NS) -> None:
    kernel.threads = threads
    if threads <= 1:
        return
    counts = access_counts(kernel.body)
    for s in kernel.body:
        if not isinstance(s, ir.Loop):
            continue
        footprint = sum(b.size * b.dtype.itemsize for b in access_counts([s])
                        if b.kind not in ("local", "lanes"))
        per_byte = NS_PER_CACHED_BYTE if footprint <= CACHED_BYTES else NS_PER_BYTE
        if estimate_ns(s, per_byte) >= threshold and safe(s, counts):
            s.parallel = True


def estimate_ns(loop: ir.Loop, per_byte: float = NS_PER_BYTE, lanes: int = 1) -> float:
    """A rough single-thread time of `loop`: per value of its variable, the bytes its
    statements load and store (`per_byte` each) and their ops (a vector loop's ops shared by
    its lanes, also those of the sequential loops inside it: `lanes`), plus its inner
    loops."""
    lanes = max(lanes, loop.vector)
    own = 0.0
    nested = 0.0
    roots = []
    for s in loop.body:
        if isinstance(s, ir.Loop):
            nested += estimate_ns(s, per_byte, lanes)
        elif isinstance(s, ir.Store | ir.StoreTile):
            count = len(s.values) if isinstance(s, ir.StoreTile) else 1
            own += per_byte * s.buf.dtype.itemsize * count
            roots.extend(ir.stmt_vals(s))
    ops = 0.0
    for v in ir.postorder(roots):
        if v.op == "alu":
            ops += op_cost(v.arg.opcode)
        elif v.op in ("load", "tile", "mload"):
            own += per_byte * v.buffer.dtype.itemsize
    own += NS_PER_OP * ops / max(1, lanes)
    # an unrolled vector loop's body holds step / vector copies, each covering `vector` values
    own /= max(1, ir.step_of(loop) // max(1, loop.vector))
    return (loop.hi - loop.lo) * (own + nested)


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
        if v.op in ir.READS:
            for b in v.buffers:
                add(b)
    return count


def safe(loop: ir.Loop, counts: dict[Buffer, int],
         per_iteration: frozenset[Buffer] = frozenset()) -> bool:
    """Whether `loop`'s iterations may run at once (the module docstring's conditions, apart
    from the stack limit); `counts`: `access_counts` of the kernel's body. Locals in
    `per_iteration` are accessed only at the loop variable's own element (the caller checked):
    iterations never share one, wherever else it is accessed."""
    v = loop.var
    mine = access_counts(loop.body)
    # shared with the rest of the kernel (a local only the loop touches is its threads' own)
    apart = {b for b in written_apart(loop) if mine.get(b) != counts.get(b)}
    for b, n in mine.items():
        if b in per_iteration or b in apart:
            continue
        if b.kind in ("local", "lanes") and n != counts.get(b):
            return False  # a local the loop shares with the rest of the kernel (read or written)
    for s in ir.walk(loop.body):
        if isinstance(s, ir.Copy | ir.LibCall):
            return False
        if isinstance(s, ir.Store | ir.StoreTile):
            idx = s.index if isinstance(s, ir.Store) else s.base
            if s.buf in per_iteration:
                continue
            if s.buf.kind in ("local", "lanes") and s.buf not in apart:
                if mine.get(s.buf) != counts.get(s.buf):
                    return False
                if s.buf.size * s.buf.dtype.itemsize > ir.STACK_LOCAL_BYTES:
                    return False  # heap scratch is never allocated inside a parallel loop
            elif not _apart(idx, v):
                return False
    return True


def _apart(index: ir.Affine, v: ir.Var) -> bool:
    """Do the iterations of `v`'s loop store at disjoint addresses: a nonzero coefficient on
    `v` and no value term that depends on it?"""
    return bool(index.coef(v)) and not any(v in ir.deps(t) for t in index.vals())


def written_apart(loop: ir.Loop) -> set[Buffer]:
    """Locals `loop` only stores to, each store at an address with a nonzero coefficient on
    the loop variable and no value term that depends on it, and never reads: iterations write
    disjoint elements, as they do an output (a blocked column reduction's partial rows, read
    after the loop). Such a local is declared outside the loop and passed to its threads."""
    v = loop.var
    stored: set[Buffer] = set()
    bad: set[Buffer] = set()
    roots = []
    for s in ir.walk(loop.body):
        roots.extend(ir.stmt_vals(s))
        if isinstance(s, ir.Store) and s.buf.kind == "local":
            if _apart(s.index, v):
                stored.add(s.buf)
            else:
                bad.add(s.buf)
        elif isinstance(s, ir.StoreTile):
            bad.add(s.buf)
        elif isinstance(s, ir.Copy):
            bad.update((s.dst, s.src))
        elif isinstance(s, ir.LibCall):
            bad.update(s.ins + s.outs)
    for val in ir.postorder(roots):
        if val.op in ir.READS:
            bad.update(val.buffers)
    return stored - bad
