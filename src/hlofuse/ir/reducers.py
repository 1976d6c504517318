"""Reducer facts: which reduce computations may be reassociated, and their identities.

    simple_reducer(comp)    the opcode of `ROOT r = op(p0, p1)` for a commutative op of
                            `REASSOCIATIVE_REDUCERS` on scalars of one type, else None
    identity(op, dtype)     that op's identity element in `dtype` (exact: -0.0 for float sums);
                            KeyError where the type holds none

One place for them: the kernel IR (partial accumulators, a window's padding), and whole-loop
fusion's per-block partial sums (`passes/fusion/loop_fusion.py`) read them; nothing here
rewrites anything.
"""

from __future__ import annotations

import math

import numpy as np

from hlofuse.ir.computation import Computation
from hlofuse.ir.dtypes import DType
from hlofuse.ir.opcodes import REASSOCIATIVE_REDUCERS, Opcode
from hlofuse.ir.shape import ArrayShape


def simple_reducer(comp: Computation) -> Opcode | None:
    """The opcode of `ROOT r = op(p0, p1)` for a commutative op (either operand order) on
    scalars of one type, else None: such reducers may be reassociated freely."""
    root = comp.root
    params = comp.parameters
    if len(params) != 2 or root.opcode not in REASSOCIATIVE_REDUCERS or root.operand_count != 2:
        return None
    if {id(o) for o in root.operands} != {id(p) for p in params}:
        return None
    shape = root.shape
    if not isinstance(shape, ArrayShape) or shape.rank != 0:
        return None
    if any(p.shape != shape for p in params):
        return None
    return root.opcode


def identity(op: Opcode, dtype: DType) -> object:
    """The reducer's identity element (exact: -0.0 for float sums, so -0 sums stay -0)."""
    if dtype.is_pred:
        return op in (Opcode.AND, Opcode.MINIMUM, Opcode.MULTIPLY)
    if dtype.is_float:
        value = {Opcode.ADD: -0.0, Opcode.MULTIPLY: 1.0, Opcode.MAXIMUM: -math.inf,
                 Opcode.MINIMUM: math.inf}[op]
        held = float(np.asarray(value).astype(dtype.np))
        if held != value:  # not in the type (+-inf in the fp8s without infinities, 0 in e8m0):
            raise KeyError(op)  # no identity; a -inf there would be NaN, not a neutral value
        return value
    if dtype.is_complex and op is Opcode.MULTIPLY:  # XLA's fused complex multiply makes
        raise KeyError(op)  # (inf-infj) * (1+0j) NaN: 1 is no identity
    lo, hi = (-(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1) if dtype.is_signed else \
        (0, (1 << dtype.bits) - 1)
    return {Opcode.ADD: 0, Opcode.MULTIPLY: 1, Opcode.MAXIMUM: lo, Opcode.MINIMUM: hi,
            Opcode.AND: -1 if dtype.is_signed else hi, Opcode.OR: 0, Opcode.XOR: 0}[op]
