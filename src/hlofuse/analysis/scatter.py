"""A scatter as selects: when each position of the result is written by a few known update
points, the scatter is an elementwise chain of selects, computable at any result position.

    out[p] = operand[p]
    for each scatter point k (row-major over the update dims that are neither window dims nor
    batching dims):
        if p lies in point k's window:  out[p] = to_apply(out[p], update[k, window coords of p])

A point's window contains p when the whole window lies inside the operand (else XLA skips the
point) and, along every operand dimension d, start_d <= p_d < start_d + window_d; the update is
read at p_d - start_d along the window dims. A batching dimension (`input_batching_dims`) pairs
p_d with the point's batch coordinate, so it adds no point. Points apply in update order, as
the interpreter applies them.

`select_form(instr)` says whether `instr` has this form, with the number of points, or why
not; `select_ops(kernel)` what computing a kernel's scatters this way costs, in ops (the
operand's elements x points x `SELECT_OPS_PER_POINT`), beside the scatters' own ops. Read by
whole-loop fusion (`passes/fusion/batch_axes.py`: such a scatter keeps the batch elements
apart; `loop_fusion.whole_loop_cost`) and by the kernel IR, which lowers it per element inside
a whole loop (`backends/kernel_ir/lower/scatter.py`); none of them rewrites anything here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hlofuse.ir.instruction import Instruction
from hlofuse.ir.shape import ArrayShape

# a scatter computed per position costs about this many compare-selects per result element at
# most: more points, and the library scatter (one write per update) is the better program
SELECT_MAX_POINTS = 8
# ops per result element and point of a scatter computed as selects (a compare per indexed
# dimension, their conjunction, the select), the figure `select_ops` counts
SELECT_OPS_PER_POINT = 4


def _ints(instr: Instruction, key: str) -> list[int]:
    return [int(v) for v in instr.attrs.get(key, ())]


def _dims(instr: Instruction) -> tuple[int, ...]:
    s = instr.shape
    return tuple(s.dims) if isinstance(s, ArrayShape) else ()


@dataclass(frozen=True)
class ScatterForm:
    """A scatter's dimension numbers, resolved (one place reads the attributes)."""

    operands: int  # how many operands (and updates): a variadic scatter has several
    od: tuple[int, ...]  # operand dims
    idd: tuple[int, ...]  # indices dims
    ud: tuple[int, ...]  # update dims
    ivd: int  # index_vector_dim (== len(idd): an implicit trailing 1)
    uwd: tuple[int, ...]  # update_window_dims
    sdod: tuple[int, ...]  # scatter_dims_to_operand_dims
    ibd: tuple[int, ...]  # input_batching_dims
    sibd: tuple[int, ...]  # scatter_indices_batching_dims
    window_operand_dims: tuple[int, ...]  # operand dims the window dims map to, in order
    scatter_dims: tuple[int, ...]  # update dims that index points
    batch_dims: tuple[int, ...]  # indices dims other than ivd, paired with scatter_dims
    win: tuple[int, ...]  # window size along each operand dim

    def operand_dim_of_update(self, u: int) -> int | None:
        """The operand dim that update dim `u` runs along: a window dim's operand dim, a
        batching scatter dim's input batching dim; None for a dim that indexes points."""
        if u in self.uwd:
            return self.window_operand_dims[self.uwd.index(u)]
        t = self.batch_dims[self.scatter_dims.index(u)]
        return self.ibd[self.sibd.index(t)] if t in self.sibd else None

    def operand_dim_of_index(self, t: int) -> int | None:
        """The input batching dim that indices dim `t` pairs with (None: not a batching dim)."""
        return self.ibd[self.sibd.index(t)] if t in self.sibd else None

    @property
    def point_dims(self) -> tuple[int, ...]:
        """Update dims (scatter dims that are not batching dims) that enumerate points."""
        return tuple(u for u in self.scatter_dims
                     if self.batch_dims[self.scatter_dims.index(u)] not in self.sibd)

    @property
    def points(self) -> int:
        return math.prod(self.ud[u] for u in self.point_dims)


def form(instr: Instruction) -> ScatterForm | str:
    """The resolved dimension numbers of scatter `instr`, or why they cannot be read."""
    n = (instr.operand_count - 1) // 2
    if n < 1 or "index_vector_dim" not in instr.attrs or "to_apply" not in instr.attrs:
        return "has no index_vector_dim= or to_apply="
    od, idd = _dims(instr.operand(0)), _dims(instr.operand(n))
    ud = _dims(instr.operand(n + 1))
    uwd, iwd = _ints(instr, "update_window_dims"), _ints(instr, "inserted_window_dims")
    ibd = _ints(instr, "input_batching_dims")
    ivd = int(instr.attrs["index_vector_dim"])
    window_operand_dims = [d for d in range(len(od)) if d not in iwd and d not in ibd]
    if len(window_operand_dims) != len(uwd):
        return "its update_window_dims do not match the operand"
    win = [1] * len(od)
    for j, d in enumerate(window_operand_dims):
        win[d] = ud[uwd[j]]
    sdod = tuple(_ints(instr, "scatter_dims_to_operand_dims"))
    return ScatterForm(n, od, idd, ud, ivd, tuple(uwd), sdod,
                       tuple(ibd), tuple(_ints(instr, "scatter_indices_batching_dims")),
                       tuple(window_operand_dims),
                       tuple(d for d in range(len(ud)) if d not in uwd),
                       tuple(t for t in range(len(idd)) if t != ivd), tuple(win))


def select_form(instr: Instruction) -> ScatterForm | str:
    """`instr`'s form when it computes as a chain of at most `SELECT_MAX_POINTS` selects per
    result position (module docstring), else why not."""
    f = form(instr)
    if isinstance(f, str):
        return f
    if f.points > SELECT_MAX_POINTS:
        return f"it writes {f.points} points per result position (more than {SELECT_MAX_POINTS})"
    return f


def select_ops(kernel: Instruction) -> int:
    """Ops that computing `kernel`'s scatters (itself, or those inside a fusion) as selects at
    every result position costs (module docstring); 0 without scatters."""
    from hlofuse.ir.opcodes import Opcode

    if kernel.opcode is Opcode.FUSION:
        return sum(select_ops(i) for i in kernel.fused_computation.instructions)
    if kernel.opcode is not Opcode.SCATTER:
        return 0
    f = form(kernel)
    if isinstance(f, str):
        return 0
    return math.prod(f.od) * f.points * f.operands * SELECT_OPS_PER_POINT
