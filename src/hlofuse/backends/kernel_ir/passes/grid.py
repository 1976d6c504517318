"""GPU mapping: how a GPU printer runs a kernel (`ir.GridPlan`, recorded as `Kernel.grid` with a
reason per loop). A GPU-specific decision, made here so that the printer
(`backends/gpu/triton_print.py`) and the launcher (`backends/gpu/driver.py`) decide nothing.

    grid(kernel, block)      Kernel.grid

Leading top-level copies (`Copy`, an in-place kernel's "copy the input to the output if they
differ") go to the launcher (`pre`): it runs them before the launch, so every program sees
them. Then one top-level loop may be spread over programs:

- `grid`: its iterations are spread over `ceil(n / block)` programs of `block` lanes each
  (elementwise kernels, one row per lane);
- `programs`: one iteration per program, run by the program as a scalar (a block of a
  whole-loop fusion: `lower/whole_loop.py`'s `for blk`, whose body holds the time loop and,
  inside it, the loop over the block's elements; a row of a 2-D elementwise kernel). Chosen
  over `grid` when the loop's body holds a loop of at least `MIN_INNER_LANES` iterations that
  may run as lanes (neighbouring lanes then read neighbouring elements: coalesced, where
  `grid` lanes would each walk their own row), or when `grid` lanes are refused only for what
  `programs` allows (a multi-element local with constant indices);

for a kernel whose other top-level statements are values computed once (`Let`: reading no
buffer the loop writes), comments, and statements that touch no buffer the loop touches
(`once`: program 0 runs them, in any order with the loop). Anything else keeps every top-level
loop in one program:

- `lanes`: one program runs it as many iterations at a time as the next power of two of its
  trip count, at most `MAX_BLOCK`, in order (a barrier after it, so later statements see its
  stores);
- `serial`: one iteration at a time (a program of one lane for that loop).

A column reduction's row of accumulators (a local of n <= `MAX_BLOCK` elements, every access
at index j of a loop `for j in [0, n)`: `lane_rows`) is one block of registers across those
loops, lane j holding element j (`rows`); such a loop's iterations are independent as far as
the row goes, and the kernel runs in one program.

A serial loop whose body runs one lanes loop in one step keeps in the lanes' registers the
elements each lane alone reads and writes there at one index, the same every iteration
(`carried`: a whole loop's state, loaded before the time loop and stored after it).

A program runs one thread per lane of its widest lanes loop (`warps`: that block / 32, at
least 1, at most 32): a lane's registers (a whole loop's state and temporaries) stay in one
thread instead of several lanes' sharing one thread's registers and spilling.

Inside a program that runs scalar code (`programs`, `serial`, or the kernel's top level), each
nested loop that may run as lanes does (`lanes`, its block the next power of two of its trip
count, at most `MAX_BLOCK`, stepping through longer ones); loops inside lanes run in order in
each lane.

A loop's iterations may run as lanes when they are independent, as `passes/parallel.py` states
it for threads (`parallel.safe`): each store to a buffer that is not a local writes an address
whose coefficient on the loop variable is nonzero and that no value depending on the variable
enters, the locals it touches are its own, and it holds no copy or library call; and, for the
lanes' registers, each local it touches holds one element (larger locals would be an array
per lane). A local of several elements in scalar code is a row of registers when every access
has a constant index; the printer refuses any other. `block` is a power of two (the printer's
`tl.arange`).
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.passes.parallel import access_counts, safe

BLOCK = 128  # lanes per program of a `grid` loop: 4 warps of 32 threads
MAX_BLOCK = 1024  # at most this many lanes in one step of a nested `lanes` loop
WARP = 32  # threads per warp
MAX_WARPS = 32  # 1024 threads: the most a program (a CUDA block) has
MIN_INNER_LANES = 32  # `programs` when the body has a lanes loop at least this long (a warp)


def grid(kernel: ir.Kernel, block: int = BLOCK) -> ir.Kernel:
    """Set `kernel.grid` (see the module docstring)."""
    if block <= 0 or block & (block - 1):
        raise ValueError(f"block {block} is not a power of two")
    counts = access_counts(kernel.body)
    plan = ir.GridPlan(block=block)
    body = kernel.body
    rows = lane_rows(kernel)
    plan.rows = {b.uid: _block_of(b.size) for b in rows}
    lead = 0
    while lead < len(body) and isinstance(body[lead], ir.Copy | ir.Comment):
        if isinstance(body[lead], ir.Copy):
            plan.pre.append(body[lead])  # type: ignore[arg-type]
        lead += 1
    rest = body[lead:]
    loops = [s for s in rest if isinstance(s, ir.Loop)]
    spread = _spread(plan, loops[0], rest, counts, rows) if len(loops) == 1 else None
    for loop in loops:
        if loop is spread:
            continue
        why = _lane_refusal(loop, counts, rows)
        if why is not None:
            plan.modes[id(loop)] = ("serial", why)
            _nested(plan, loop.body, counts, rows)
        else:
            plan.modes[id(loop)] = ("lanes", "independent iterations, but the kernel runs "
                                             f"{len(loops)} loops and "
                                             f"{len(rest) - len(loops)} other statements in "
                                             "one program")
            plan.blocks[id(loop)] = _block_of(loop.hi - loop.lo)
    if spread is None:
        plan.pre = []  # (one program: it runs the copies in order itself)
    _carry(plan, kernel.body, set())
    widest = max([*plan.blocks.values(), *plan.rows.values(),
                  block if plan.grid_loop is not None and plan.mode(plan.grid_loop) == "grid"
                  else 1])
    plan.warps = min(MAX_WARPS, max(1, widest // WARP))
    kernel.grid = plan
    return kernel


def _carry(plan: ir.GridPlan, body: list[ir.Stmt], outer: set[ir.Var]) -> None:
    """Record the state each serial loop's lanes may keep in registers (`carried`): a serial
    loop whose body runs one lanes loop in one step, and, of the buffers that lanes loop
    stores to, each one every access of which within the serial loop is in the lanes loop at
    one index made of the lanes' variable and variables bound outside the serial loop (each
    lane reads and writes its own element, the same one every iteration)."""
    for s in body:
        if isinstance(s, ir.If):
            _carry(plan, s.then, outer)
            _carry(plan, s.orelse, outer)
        if not isinstance(s, ir.Loop):
            continue
        inside = outer | {s.var}
        if plan.mode(s) == "serial":
            found = _carried_state(plan, s, outer)
            if found is not None:
                plan.carried[id(s)] = found
                continue
        if plan.mode(s) in ("serial", "programs"):
            _carry(plan, s.body, inside)


def _carried_state(plan: ir.GridPlan, s: ir.Loop, outer: set[ir.Var]
                   ) -> tuple[ir.Loop, list[tuple[ir.Buffer, ir.Affine]]] | None:
    lanes = [x for x in s.body if isinstance(x, ir.Loop)]
    if (len(lanes) != 1 or plan.mode(lanes[0]) != "lanes"
            or plan.blocks.get(id(lanes[0]), 0) < lanes[0].hi - lanes[0].lo
            or any(isinstance(x, ir.If) for x in s.body)):
        return None
    lane = lanes[0]
    allowed = outer | {lane.var}
    index: dict[ir.Buffer, set[ir.Affine]] = {}
    roots: list[ir.Val] = []
    for x in ir.walk(s.body):
        roots.extend(ir.stmt_vals(x))
        if isinstance(x, ir.Store):
            index.setdefault(x.buf, set()).add(x.index)
        elif isinstance(x, ir.StoreTile | ir.Copy | ir.LibCall):
            return None
    other: set[ir.Buffer] = set()  # read other than by a plain load (masked, tiles)
    for v in ir.postorder(roots):
        if v.op in ir.READS:
            for b in v.buffers:
                if b in index:
                    if v.op == "load":
                        index[b].add(v.index)
                    else:
                        other.add(b)
    in_lanes = ir.written(lane.body)
    out: list[tuple[ir.Buffer, ir.Affine]] = []
    for b, seen in index.items():
        if (b.kind not in ("out", "in") or b not in in_lanes or b in other
                or len(seen) != 1):
            continue
        (at,) = seen
        if at.vals() or not set(at.vars()) <= allowed or not at.coef(lane.var):
            continue
        out.append((b, at))
    return (lane, out) if out else None


def _spread(plan: ir.GridPlan, loop: ir.Loop, rest: list[ir.Stmt],
            counts: dict[ir.Buffer, int], rows: frozenset[ir.Buffer]) -> ir.Loop | None:
    """Spread `loop` over programs if the kernel allows it (returns it), recording its mode."""
    loop_writes = ir.written(loop.body)
    loop_touches = set(access_counts(loop.body))
    once: list[ir.Stmt] = []
    for s in rest:
        if s is loop or isinstance(s, ir.Comment):
            continue
        if isinstance(s, ir.Let):
            if ir.reads(s.value) & loop_writes:
                return None
            continue
        if isinstance(s, ir.Copy) or set(access_counts([s])) & loop_touches:
            return None
        once.append(s)
    if rows or not safe(loop, counts):
        return None  # (lane rows live in one program)
    lanes_why = _lane_refusal(loop, counts, rows)
    inner = [s for s in ir.walk(loop.body) if isinstance(s, ir.Loop)
             and _lane_refusal(s, counts, rows) is None]
    widest = max((s.hi - s.lo for s in inner), default=0)
    if lanes_why is None and widest < MIN_INNER_LANES:
        plan.modes[id(loop)] = ("grid", "the kernel is one loop of independent iterations")
    elif widest >= MIN_INNER_LANES or _constant_locals_only(loop):
        reason = (f"one program per iteration: its body's loop of {widest} independent "
                  "iterations runs as lanes" if widest >= MIN_INNER_LANES else
                  "one program per iteration: its locals are rows of registers")
        plan.modes[id(loop)] = ("programs", reason)
        _nested(plan, loop.body, counts, rows)
    else:
        return None
    plan.grid_loop = loop
    plan.once = {id(s) for s in once}
    return loop


def _nested(plan: ir.GridPlan, body: list[ir.Stmt], counts: dict[ir.Buffer, int],
            rows: frozenset[ir.Buffer]) -> None:
    """Modes of the loops in scalar code `body` (see the module docstring)."""
    for s in body:
        if isinstance(s, ir.If):
            _nested(plan, s.then, counts, rows)
            _nested(plan, s.orelse, counts, rows)
        if not isinstance(s, ir.Loop):
            continue
        why = _lane_refusal(s, counts, rows)
        if why is None:
            n = s.hi - s.lo
            plan.blocks[id(s)] = _block_of(n)
            plan.modes[id(s)] = ("lanes", f"{n} independent iterations in a program")
        else:
            plan.modes[id(s)] = ("serial", why)
            _nested(plan, s.body, counts, rows)


def _constant_locals_only(loop: ir.Loop) -> bool:
    """Whether every multi-element local `loop` touches is accessed at constant indices."""
    return all(b.size == 1 or constant_indices(loop.body, b)
               for b in access_counts(loop.body) if b.kind == "local")


def constant_indices(body: list[ir.Stmt], buf: ir.Buffer) -> bool:
    """Whether every access of `buf` in `body` has a constant index (a row of registers)."""
    roots: list[ir.Val] = []
    for s in ir.walk(body):
        roots.extend(ir.stmt_vals(s))
        if isinstance(s, ir.Store) and s.buf is buf and not s.index.is_const:
            return False
        if isinstance(s, ir.StoreTile | ir.Copy | ir.LibCall) and buf in access_counts([s]):
            return False
    for v in ir.postorder(roots):
        if v.op in ir.READS and buf in v.buffers and (
                v.op not in ("load", "mload") or not v.index.is_const):
            return False
    return True


def _lane_refusal(loop: ir.Loop, counts: dict[ir.Buffer, int],
                  rows: frozenset[ir.Buffer] = frozenset()) -> str | None:
    mine = frozenset(b for b in rows if _indexed_by(loop, b))
    if not safe(loop, counts, mine):
        return "iterations are not independent (parallel.safe)"
    for b in access_counts(loop.body):
        if b.kind in ("local", "lanes") and b.size != 1 and b not in mine:
            return f"a local of {b.size} elements (one register per lane holds one)"
    return None


def _indexed_by(loop: ir.Loop, b: ir.Buffer) -> bool:
    """Whether every access of `b` in `loop` is at index `loop.var`."""
    at = ir.affine(loop.var)
    roots: list[ir.Val] = []
    for s in ir.walk(loop.body):
        roots.extend(ir.stmt_vals(s))
        if isinstance(s, ir.Store) and s.buf is b and s.index != at:
            return False
    return all(v.index == at for v in ir.postorder(roots)
               if v.op in ir.READS and b in v.buffers)


def _block_of(n: int) -> int:
    """Lanes per step of a loop of `n` iterations: the next power of two, at most MAX_BLOCK."""
    return min(MAX_BLOCK, 1 << max(0, (n - 1).bit_length()))


def lane_rows(kernel: ir.Kernel) -> frozenset[ir.Buffer]:
    """Locals of n <= MAX_BLOCK elements every access of which is at index `j` of a loop
    `for j in [0, n)` (a column reduction's row of accumulators): lane j of every such loop
    holds element j, so the local is one block of registers across the loops."""
    bounds: dict[ir.Var, tuple[int, int]] = {}
    stores: list[tuple[ir.Buffer, ir.Affine]] = []
    roots: list[ir.Val] = []
    for s in ir.walk(kernel.body):
        if isinstance(s, ir.Loop):
            bounds[s.var] = (s.lo, s.hi)
        roots.extend(ir.stmt_vals(s))
        if isinstance(s, ir.Store):
            stores.append((s.buf, s.index))
    ok = {b for b in kernel.locals if 1 < b.size <= MAX_BLOCK}
    bad: set[ir.Buffer] = set()

    def check(b: ir.Buffer, index: ir.Affine) -> None:
        vs = index.vars()
        if (index.const or len(index.terms) != 1 or len(vs) != 1 or index.coef(vs[0]) != 1
                or bounds.get(vs[0]) != (0, b.size)):
            bad.add(b)

    for b, index in stores:
        if b in ok:
            check(b, index)
    for v in ir.postorder(roots):
        if v.op in ir.READS:
            for b in v.buffers:
                if b in ok:
                    if v.op == "load":
                        check(b, v.index)
                    else:
                        bad.add(b)
    for s in ir.walk(kernel.body):
        if isinstance(s, ir.StoreTile | ir.Copy | ir.LibCall):
            bad.update(access_counts([s]))
    return frozenset(ok - bad)
