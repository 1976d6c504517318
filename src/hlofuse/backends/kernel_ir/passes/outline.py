"""Outlining: which values of a kernel's vector loops a printer computes through a call to an
out-of-line function instead of an inline lane loop (`LaneForms.outline`).

    outline(kernel, lane_cost)      LaneForms.outline of every vector loop

An op without a vector form on the target (expm1, erf, power: `lane_cost(v, width)` > 0, what
the backend hands in) is computed lane by lane. Inline, each such lane loop is an
always-inline polynomial in the kernel's function; past INLINE_LANE_LOOPS of them (each
weighted by its cost: erf 16, power 8), the rest are calls to one out-of-line function per
(op, types). GCC's time grows about quadratically with the size of a function: a chain of
1,000 elementwise ops (333 inlined exp/tanh) took 4 s of -O3, 2,000 ops 17 s, 5,000 ops 139 s;
with the calls 0.2 s for 1,000. A call costs about 1.4x per such op (vectors pass through
memory), paid only by kernels this large (MJX had a kernel of 22 inlined power loops that took
4.8 s, 0.5 s with them called).

Conditions: the budget is the kernel's (one C function and its parallel-loop functions), spent
in statement order, each loop's values operands first (`ir.body_values`), each value once per
loop; a value the budget cannot take is outlined, a later lighter one may still be inlined.
Only lane-varying `alu` values count (the others are scalar). Changes no statement.
"""

from __future__ import annotations

from collections.abc import Callable

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.query import varies

INLINE_LANE_LOOPS = 64  # lane loops (by weight) a kernel inlines (module docstring)

# the backend's cost of printing value `v` lane by lane in a vector loop of `width` lanes: 0
# where it has a vector form, else the lane loop's weight against INLINE_LANE_LOOPS
LaneCost = Callable[[ir.Val, int], int]


def outline(kernel: ir.Kernel, lane_cost: LaneCost) -> ir.Kernel:
    """Set `LaneForms.outline` on every vector loop of `kernel` (run after `lanes`)."""
    spent = 0
    for s in ir.walk(kernel.body):
        if not (isinstance(s, ir.Loop) and s.vector and s.forms is not None):
            continue
        out = s.forms.outline
        out.clear()
        for v in ir.body_values(s.body):
            if v.op != "alu" or not varies(v, s.var):
                continue
            weight = lane_cost(v, s.vector)
            if not weight:
                continue
            if spent + weight > INLINE_LANE_LOOPS:
                out.add(v.uid)
            else:
                spent += weight
    return kernel
