"""Which sort comparators order by one key: the facts a backend needs to sort by key, not by calls.

    sort_key(comp) -> SortKey | None

A comparator `(lhs_0, rhs_0, lhs_1, rhs_1, ...) -> pred` orders by one key when its root is
`compare(f(p_2k), f(p_2k+1))` with direction LT or GT, where `f` is the same elementwise
expression on both sides (`f` may be the parameter itself, or JAX's float canonicalisation
`select(x != x, nan, select(x == 0, 0, x))` that `jnp.sort` emits) and the compare is a strict
weak order whatever the data: an integer compare whose `type=` (if any) matches the key's
signedness, or a float compare with `type=TOTALORDER`. Such a comparator sorts exactly like a
stable sort on the key `f(x)` in total order, ascending for LT and descending for GT, so a
backend may sort the keys by radix instead of calling the comparator. A compare of floats
without TOTALORDER is not a strict weak order once a NaN is present and is never a key here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hlofuse.ir.computation import Computation
from hlofuse.ir.dtypes import DType
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape

KEY_FLOAT_BITS = frozenset({16, 32, 64})  # f16, bf16, f32, f64 keys; fp8 keys are left alone
KEY_INT_BITS = frozenset({8, 16, 32, 64})  # byte-sized integers; s4/u4 keys are left alone


@dataclass(frozen=True)
class SortKey:
    operand: int  # which sort operand the key is computed from
    expr: Instruction  # f(p_2k): the key expression inside the comparator
    dtype: DType  # the key's type (the compare's operand type)
    descending: bool  # GT: the largest key sorts first

    @property
    def is_parameter(self) -> bool:
        """The key is the operand's element itself (no expression to evaluate)."""
        return self.expr.opcode is Opcode.PARAMETER


def _literal_bytes(instr: Instruction) -> bytes | None:
    if instr.literal is None or isinstance(instr.literal, tuple):
        return None
    return np.asarray(instr.literal).tobytes()


def _mirror(a: Instruction, b: Instruction, k: int, memo: dict[tuple[int, int], bool]) -> bool:
    """Is `b` the expression `a` with parameter 2k replaced by 2k+1 (and no other parameter)?"""
    key = (id(a), id(b))
    if key in memo:
        return memo[key]
    memo[key] = False  # a cycle cannot occur; this guards the recursion all the same
    if a.opcode is Opcode.PARAMETER:
        same = b.opcode is Opcode.PARAMETER and a.parameter_number == 2 * k \
            and b.parameter_number == 2 * k + 1
    elif a.opcode is Opcode.CONSTANT:
        same = b.opcode is Opcode.CONSTANT and a.shape == b.shape \
            and _literal_bytes(a) is not None and _literal_bytes(a) == _literal_bytes(b)
    else:
        same = a.opcode is b.opcode and a.shape == b.shape and a.attrs == b.attrs \
            and a.is_elementwise and a.operand_count == b.operand_count \
            and all(_mirror(x, y, k, memo) for x, y in zip(a.operands, b.operands, strict=True))
    memo[key] = same
    return same


def sort_key(comp: Computation) -> SortKey | None:
    """The one key `comp` orders by, or None when it is not such a comparator."""
    root = comp.root
    if root.opcode is not Opcode.COMPARE or root.operand_count != 2:
        return None
    direction = root.attrs.get("direction")
    if direction not in ("LT", "GT"):
        return None
    lhs, rhs = root.operands
    shape = lhs.shape
    if not isinstance(shape, ArrayShape) or shape.rank != 0:
        return None
    dt = shape.dtype
    kind = str(root.attrs.get("type", "")).upper()
    if dt.is_float:
        if kind != "TOTALORDER" or dt.bits not in KEY_FLOAT_BITS:
            return None
    elif dt.is_integral:
        own = "SIGNED" if dt.is_signed else "UNSIGNED"
        if dt.bits not in KEY_INT_BITS or kind not in ("", own):
            return None
    else:
        return None
    params = comp.parameters
    for k in range(len(params) // 2):
        if _mirror(lhs, rhs, k, {}):
            return SortKey(k, lhs, dt, direction == "GT")
        if _mirror(rhs, lhs, k, {}):  # compare(f(rhs), f(lhs)): the other direction
            return SortKey(k, rhs, dt, direction == "LT")
    return None
