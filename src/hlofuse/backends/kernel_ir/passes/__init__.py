"""Passes over the kernel IR, in the order `optimize` runs them:

    split       cut loop ranges where pad/concatenate conditions change (branch-free pieces)
    jam         merge adjacent sibling loops over one range (pieces share their values)
    collapse    flatten perfect nests whose accesses are row-major compatible
    fission     split a loop streaming many buffers into loops of independent statements
    narrow      integer index arithmetic in the fewest bits its results need
    vectorize   explicit SIMD for innermost loops (tiles, privatised locals, partial sums)
    parallelize mark big, safe top-level loops parallel
    hoist       compute loop invariants once, before their loop
    place       where locals are declared, stack or heap (`Kernel.placement`)
    lazy        which selects of a vector loop compute a side in a branch (`Loop.lazy`)
    lanes       which values of a vector loop take a cheaper lane form (`Loop.forms`)
    outline     which values without a vector form are called out of line (`forms.outline`;
                only where the backend hands in its lane costs)

Not run by `optimize`: `grid` (grid.py), the GPU printer's mapping of top-level loops to
programs and lanes.

Each is `pass(kernel)` (mutating the kernel's statement lists) and keeps the kernel's results
identical, except that `vectorize` may reassociate reductions whose reducer allows it.
`place`, `lazy`, `lanes` and `outline` change no statement: they record decisions printers
read (`plan`, which a printer runs itself on a kernel that did not go through `optimize`).
Under `HLOFUSE_VERIFY=1` (or `optimize(..., check=True)`) the kernel IR verifier (`verify.py`) runs
after the lowering and after each pass.
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.passes.collapse import collapse
from hlofuse.backends.kernel_ir.passes.fission import fission
from hlofuse.backends.kernel_ir.passes.hoist import hoist
from hlofuse.backends.kernel_ir.passes.jam import jam
from hlofuse.backends.kernel_ir.passes.lanes import lanes
from hlofuse.backends.kernel_ir.passes.lazy import lazy
from hlofuse.backends.kernel_ir.passes.narrow import narrow
from hlofuse.backends.kernel_ir.passes.outline import LaneCost, outline
from hlofuse.backends.kernel_ir.passes.parallel import parallelize
from hlofuse.backends.kernel_ir.passes.place import place
from hlofuse.backends.kernel_ir.passes.split import split
from hlofuse.backends.kernel_ir.passes.vectorize import vectorize
from hlofuse.backends.kernel_ir.target import Target

__all__ = ["collapse", "fission", "hoist", "jam", "lanes", "lazy", "narrow", "optimize",
           "outline", "parallelize", "place", "plan", "split", "vectorize"]


def optimize(kernel: ir.Kernel, target: Target, threads: int = 1,
             check: bool | None = None, lane_cost: LaneCost | None = None) -> ir.Kernel:
    """Run the passes in order; with `check` (default: `HLOFUSE_VERIFY=1`), the kernel IR
    verifier (`verify.py`) after the lowering and after every pass. `lane_cost` is the
    backend's cost of an op it computes lane by lane (`outline.LaneCost`; None: every lane
    loop inline)."""
    from hlofuse import env
    from hlofuse.backends.kernel_ir.verify import verify

    if check is None:
        check = env.flag("HLOFUSE_VERIFY")
    steps = [("split", split), ("jam", jam), ("collapse", collapse), ("fission", fission),
             ("narrow", narrow), ("vectorize", lambda k: vectorize(k, target)),
             ("parallelize", lambda k: parallelize(k, threads)), ("hoist", hoist),
             ("place", lambda k: place(k, target.stack_local_bytes)), ("lazy", lazy),
             ("lanes", lanes)]
    if lane_cost is not None:
        cost = lane_cost
        steps.append(("outline", lambda k: outline(k, cost)))
    if check:
        verify(kernel, "lowering")
    for name, step in steps:
        step(kernel)
        if check:
            verify(kernel, name)
    return kernel


def plan(kernel: ir.Kernel, target: Target | None = None) -> ir.Kernel:
    """The decisions printers read (`place`, `lazy`, `lanes`), for a kernel built or transformed
    without `optimize` (tests, scalar functions); `target` gives the stack limit (default: the
    usual one, `ir.STACK_LOCAL_BYTES`)."""
    place(kernel, target.stack_local_bytes if target else ir.STACK_LOCAL_BYTES)
    lazy(kernel)
    return lanes(kernel)
