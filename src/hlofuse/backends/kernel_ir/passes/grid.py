"""GPU mapping: how a GPU printer runs a kernel's top-level loops (`ir.GridPlan`, recorded as
`Kernel.grid` with a reason per loop). A GPU-specific decision, made here so that the printer
(`backends/gpu/triton_print.py`) decides nothing.

    grid(kernel, block)      Kernel.grid

Each top-level loop runs one of three ways:

- `grid`: its iterations are spread over `ceil(n / block)` programs of `block` lanes each. Only
  for a kernel whose body is that one loop (besides values computed once and comments): the
  programs run in any order, with nothing between them.
- `lanes`: one program runs it `block` iterations at a time, in order (a barrier after it, so
  later statements see its stores).
- `serial`: one iteration at a time (a program of one lane for that loop).

A loop's iterations may run as lanes when they are independent, as `passes/parallel.py`
states it for threads (`parallel.safe`): each store to a buffer that is not a local writes an
address whose coefficient on the loop variable is nonzero and that no value depending on the
variable enters, the locals it touches are its own, and it holds no copy or library call;
and, for the lanes' registers, each local it touches holds one element (larger locals would be
an array per lane). Anything else is `serial`. Nested loops always run in order inside a lane.
`block` is a power of two (the printer's `tl.arange`).
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.passes.parallel import access_counts, safe

BLOCK = 128  # lanes per program: 4 warps of 32 threads


def grid(kernel: ir.Kernel, block: int = BLOCK) -> ir.Kernel:
    """Set `kernel.grid` (see the module docstring)."""
    if block <= 0 or block & (block - 1):
        raise ValueError(f"block {block} is not a power of two")
    counts = access_counts(kernel.body)
    plan = ir.GridPlan(block=block)
    loops = [s for s in kernel.body if isinstance(s, ir.Loop)]
    others = [s for s in kernel.body if not isinstance(s, ir.Loop | ir.Let | ir.Comment)]
    for loop in loops:
        why = _lane_refusal(loop, counts)
        if why is not None:
            plan.modes[id(loop)] = ("serial", why)
        elif len(loops) == 1 and not others:
            plan.modes[id(loop)] = ("grid", "the kernel is one loop of independent iterations")
            plan.grid_loop = loop
        else:
            plan.modes[id(loop)] = ("lanes", "independent iterations, but the kernel runs "
                                             f"{len(loops)} loops and {len(others)} other "
                                             "statements in order")
    kernel.grid = plan
    return kernel


def _lane_refusal(loop: ir.Loop, counts: dict[ir.Buffer, int]) -> str | None:
    if not safe(loop, counts):
        return "iterations are not independent (parallel.safe)"
    for b in access_counts(loop.body):
        if b.kind in ("local", "lanes") and b.size != 1:
            return f"a local of {b.size} elements (one register per lane holds one)"
    return None
