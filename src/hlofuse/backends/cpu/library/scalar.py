"""Scalar functions (sort comparators and keys, select-and-scatter's select and scatter) as C
functions for the library routines: the `ir.Func` the lowering made of the computation
(`LibOp.funcs`, `kernel_ir.lower.scalar`), printed by `cprint.print_func` under a name the
routine chose:

    static inline void NAME(CT p0, CT p1, ..., CT *r0, CT *r1, ...)

Parameters are in their compute types (float for f16/bf16); a tuple root gives several results.
"""

from __future__ import annotations

from hlofuse.backends.cpu.cprint import print_func
from hlofuse.backends.cpu.cvec import VecLib
from hlofuse.backends.kernel_ir import ir

__all__ = ["c_function"]


def c_function(func: ir.Func, name: str) -> str:
    """C text of `static inline void NAME(CT p0, ..., CT *r0, ...)` computing `func`."""
    return print_func(ir.Func(name, func.params, func.results), VecLib(), set())
