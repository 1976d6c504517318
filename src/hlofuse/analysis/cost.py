"""Op costs: how many simple scalar ops one element of each opcode costs on a CPU, the one table
the kernel-IR parallelizer (`backends/kernel_ir/passes/parallel.py`) and the auto-unroll cost
model (`passes/fusion/auto_unroll.py`) both read.

    OP_COST[Opcode.SIN] = 20       a polynomial of ~20 ops (mathlib's vectorizable sin)
    op_cost(opcode)                1 for anything not listed (add, select, compare, ...)
    kernel_ops(k)                  ops of one run of kernel `k`: each instruction it computes,
                                   elements times cost (data movement ops cost nothing)
    ops_per_run(comp, cond)        the same over one run of `comp`, loops times trip counts
    dot_ops(k)                     the part of `kernel_ops(k)` that dots compute (2 per
                                   multiply-add)

The figures are relative weights measured once (benchmarks/vectorize.py, mathlib's routines);
they decide between alternatives, they do not predict times.
"""

from __future__ import annotations

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Category, Opcode
from hlofuse.ir.shape import ArrayShape

OP_COST: dict[Opcode, int] = {
    Opcode.SIN: 20, Opcode.COS: 20, Opcode.TAN: 30, Opcode.EXP: 12, Opcode.EXPM1: 12,
    Opcode.LOG: 12, Opcode.LOG1P: 14, Opcode.TANH: 16, Opcode.LOGISTIC: 14, Opcode.POWER: 30,
    Opcode.ATAN2: 30, Opcode.ERF: 24, Opcode.CBRT: 20, Opcode.DIVIDE: 4, Opcode.REMAINDER: 8,
    Opcode.SQRT: 4, Opcode.RSQRT: 4}
_COMPUTES = frozenset({Category.ELEMENTWISE, Category.REDUCTION})


def op_cost(opcode: Opcode) -> int:
    return OP_COST.get(opcode, 1)


def _elements(instr: Instruction) -> int:
    s = instr.shape
    if instr.opcode is Opcode.REDUCE:  # each input element is combined once
        s = instr.operand(0).shape
    return s.size if isinstance(s, ArrayShape) else 0


def _dot_ops(x: Instruction) -> int:
    lhs = x.operand(0).shape
    contracted = 1
    if isinstance(lhs, ArrayShape):
        for d in x.attrs.get("lhs_contracting_dims", ()):
            contracted *= lhs.dims[int(d)]
    return 2 * _elements(x) * contracted


def _ops(k: Instruction, dots_only: bool) -> int:
    stack = [k]
    total = 0
    while stack:
        x = stack.pop()
        if x.opcode is Opcode.FUSION:
            stack.extend(x.fused_computation.instructions)
        elif x.opcode.info.category in _COMPUTES and not dots_only:
            total += _elements(x) * op_cost(x.opcode)
        elif x.opcode is Opcode.DOT:
            total += _dot_ops(x)
    return total


def kernel_ops(k: Instruction) -> int:
    """Scalar ops one run of kernel `k` computes (a fusion: every instruction inside)."""
    return _ops(k, dots_only=False)


def dot_ops(k: Instruction) -> int:
    """The ops of `kernel_ops(k)` that dots compute."""
    return _ops(k, dots_only=True)


def ops_per_run(comp: Computation, cond: Computation | None = None) -> int | None:
    """`kernel_ops` over one run of `comp` (and `cond`); see `analysis.kernels.per_run`."""
    from hlofuse.analysis.kernels import per_run

    return per_run(comp, cond, kernel_ops)
