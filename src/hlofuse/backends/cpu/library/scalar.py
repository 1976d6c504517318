"""Scalar computations (sort comparators, select-and-scatter's select and scatter) as C functions
for the library routines: the computation lowered to a kernel-IR `Func`
(`kernel_ir.lower.scalar.function`) and printed by `cprint.print_func`:

    static inline void NAME(CT p0, CT p1, ..., CT *r0, CT *r1, ...)

Parameters are in their compute types (float for f16/bf16); a tuple root gives several results.
Conditions (scalar parameters and results, elementwise bodies) are `kernel_ir.lower.scalar`'s;
violations raise `ScalarComputationError` naming the instruction.
"""

from __future__ import annotations

from hlofuse.backends.cpu.cprint import print_func
from hlofuse.backends.cpu.cvec import VecLib
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.lower.scalar import (
    ScalarComputationError,
    function,
    parameter_shapes,
    result_shapes,
    value_function,
)
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction

__all__ = ["ScalarComputationError", "parameter_shapes", "result_shapes", "scalar_function",
           "value_c_function"]


def scalar_function(comp: Computation, name: str) -> str:
    """C text of `static inline void NAME(CT p0, ..., CT *r0, ...)` computing `comp`."""
    func = function(ir.Graph(), comp, name)
    return print_func(func, VecLib(), set())


def value_c_function(comp: Computation, name: str, root: Instruction) -> str:
    """C text of `static inline void NAME(CT p0, ..., CT *r0)` computing `root` of `comp`."""
    func = value_function(ir.Graph(), comp, name, root)
    return print_func(func, VecLib(), set())
