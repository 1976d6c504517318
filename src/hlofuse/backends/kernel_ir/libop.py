"""What a library call computes (`ir.LibCall.op`), as plain data: no HLO instruction or
computation is reachable from it, so any printer (the C backend's routines, `pyprint.py`, a GPU
printer) runs it from this alone.

    LibOp ─ opcode                    dot, convolution, sort, topk, rng-bit-generator,
          │                           select-and-scatter, cholesky, triangular-solve, custom-call
          ├ shape, operands           the result's shape and the operands' shapes (hlofuse.ir.shape)
          ├ attrs: (name, value)...   the attributes the routines read (`ATTRS`): HLO's, by
          │                           their HLO names, and a few facts derived from the module
          │                           at lowering time (`DERIVED`); never a computation
          ├ funcs: (role, ir.Func)... the called computations lowered to scalar functions
          │                           (`lower/scalar.py`): "compare" (sort's to_apply),
          │                           "key" (the key expression of a comparator that orders by
          │                           one key), "select" and "scatter" (select-and-scatter's)
          └ label, where              the instruction's and its computation's names: input
                                      text, for error messages only (`site`)

Made by `lower/library.py` (`library_op`). `key()` is the op's structural identity: opcode,
shapes, attributes and each function's structure (its values, operands first, by position),
with no name in it: two sorts with equal comparators have equal keys whatever their
instructions and computations are called. It is built of strings, integers, booleans, None
and tuples only (shapes as their HLO text, types by name, opcodes by their text), so its
`repr` is the same in every process and may be digested. A `LibOp` compares by identity, like
the IR's other nodes; compare `key()`s for structure.

Conditions enforced: `attr` refuses a name `ATTRS` does not carry for the opcode (a routine
that reads an attribute the lowering did not copy fails loudly instead of seeing its default);
`key` refuses a function holding a value other than a parameter, constant or alu (a function
never reads memory).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from hlofuse.backends.kernel_ir import ir
from hlofuse.ir.dtypes import DType
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, Shape, TokenShape, TupleShape

# The HLO attributes each library op's routines read (the C backend's `cpu/library/`, the
# interpreter's handlers); computation-valued ones are carried as `funcs` instead.
HLO_ATTRS: dict[Opcode, tuple[str, ...]] = {
    Opcode.DOT: ("lhs_batch_dims", "rhs_batch_dims", "lhs_contracting_dims",
                 "rhs_contracting_dims"),
    Opcode.CONVOLUTION: ("dim_labels", "window", "feature_group_count", "batch_group_count"),
    Opcode.SORT: ("dimensions",),
    Opcode.TOPK: ("k", "largest"),
    Opcode.RNG_BIT_GENERATOR: ("algorithm",),
    Opcode.SELECT_AND_SCATTER: ("window",),
    Opcode.CHOLESKY: ("lower",),
    Opcode.TRIANGULAR_SOLVE: ("left_side", "lower", "unit_diagonal", "transpose_a"),
    Opcode.CUSTOM_CALL: ("custom_call_target", "backend_config"),
}
# Facts about the instruction in its module, found at lowering time:
#   in_entry        convolution: whether XLA would see it in the entry computation
#                   (`conv_plan.py`, `in_entry`)
#   num_batch_dims  custom-call: the `num_batch_dims` frontend attribute, or None
#                   (`lapack_targets.num_batch_dims`)
#   sort_key        sort: the `KeyOrder` its comparator sorts by, or None (`sort_key.py`)
DERIVED: dict[Opcode, tuple[str, ...]] = {
    Opcode.CONVOLUTION: ("in_entry",),
    Opcode.CUSTOM_CALL: ("num_batch_dims",),
    Opcode.SORT: ("sort_key",),
}
ATTRS: dict[Opcode, frozenset[str]] = {
    op: frozenset(HLO_ATTRS.get(op, ()) + DERIVED.get(op, ()))
    for op in set(HLO_ATTRS) | set(DERIVED)
}
ROLES = ("compare", "key", "select", "scatter")


@dataclass(frozen=True)
class KeyOrder:
    """A sort comparator that orders by one key (`backends/sort_key.py`): the key is computed
    from sort operand `operand`, of type `dtype`, largest first when `descending`. The key's
    expression is the op's "key" function, absent when the key is the element itself."""

    operand: int
    dtype: DType
    descending: bool


@dataclass(frozen=True, eq=False)
class LibOp:
    """One library op (see the module docstring)."""

    opcode: Opcode
    shape: Shape
    operands: tuple[Shape, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    funcs: tuple[tuple[str, ir.Func], ...] = ()
    label: str = ""  # the instruction's name: input text, for error messages only
    where: str = "?"  # its computation's name: input text, for error messages only

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute `name` (`default` when the instruction did not set it)."""
        if name not in ATTRS.get(self.opcode, frozenset()):
            raise KeyError(f"library op {self.opcode.value} does not carry attribute {name}")
        for k, v in self.attrs:
            if k == name:
                return v
        return default

    def func(self, role: str) -> ir.Func | None:
        """The scalar function of `role` ("compare", "key", "select", "scatter"), or None."""
        for k, f in self.funcs:
            if k == role:
                return f
        return None

    @property
    def site(self) -> str:
        """`instruction NAME in COMPUTATION`, for error messages (input text: never code)."""
        return f"instruction {self.label} in {self.where}"

    def key(self) -> Hashable:
        """The op's structure, hashable, with no name in it (see the module docstring)."""
        return (self.opcode.value, str(self.shape), tuple(str(s) for s in self.operands),
                _data(self.attrs), tuple((role, func_key(f)) for role, f in self.funcs))


def func_key(func: ir.Func) -> Hashable:
    """A scalar function's structure, hashable and free of names and uids: its values in
    post-order (parameters first), each as (op, type, operand positions, argument)."""
    index: dict[int, int] = {}
    nodes: list[tuple[Any, ...]] = []
    for v in ir.postorder([*func.params, *func.results]):
        if v.op == "param":
            arg: Any = v.arg
        elif v.op == "const":  # a float by its bits (NaN is not equal to itself)
            tag, value = v.arg
            arg = tag if v.dtype.is_float or v.dtype.is_complex else (tag, value)
        elif v.op == "alu":
            arg = _data(v.arg)  # a ScalarOp: opcode, type and attributes
        else:
            raise ValueError(f"function {func.name}: a {v.op} value in a scalar function")
        index[v.uid] = len(nodes)
        nodes.append((v.op, v.dtype.name, tuple(index[a.uid] for a in v.args), arg))
    return (tuple(nodes), tuple(index[p.uid] for p in func.params),
            tuple(index[r.uid] for r in func.results))


def _data(x: Any) -> Hashable:
    """`x` (an attribute value, a ScalarOp) as strings, numbers, None and tuples."""
    if x is None or isinstance(x, bool | int | float | str):
        return x
    if isinstance(x, Enum):
        return x.value
    if isinstance(x, DType):
        return x.name
    if isinstance(x, ArrayShape | TupleShape | TokenShape):
        return str(x)
    if isinstance(x, tuple | list):
        return tuple(_data(v) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):  # WindowDim, KeyOrder, ScalarOp
        return (type(x).__name__, *(_data(getattr(x, f.name)) for f in dataclasses.fields(x)))
    raise TypeError(f"a {type(x).__name__} in a library op's key")
