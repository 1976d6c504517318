"""sort: variadic operands sorted together along one dimension by a comparator computation.

The comparator takes (lhs_0, rhs_0, lhs_1, rhs_1, ...) and says whether lhs sorts before rhs.
The result is always the *stable* order (valid whether or not `is_stable` is set):

* a comparator that is a single `compare(p0, p1)` with LT or GT sorts with numpy's stable
  argsort (on the total-order key for `type=TOTALORDER`);
* any other vectorisable comparator runs a bitonic sorting network over all rows at once,
  with ties broken by original position, which makes the order total and therefore the
  network's result exactly the stable sort;
* a comparator that cannot be vectorised falls back to a per-row merge sort
  (`functools.cmp_to_key`) that evaluates it pair by pair.

topk returns the k largest (largest=true) or smallest elements along the last dimension and
their s32 indices, ordered like XLA's sort in total order (-0 < +0, nan largest), equal values
by increasing index.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from hlofuse.backends.interpreter.core import Interpreter, as_list, handles, unsupported
from hlofuse.backends.interpreter.elementwise import dtype_of, total_order_key
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import TupleShape


def _simple_key(comp: Computation, operands: list[np.ndarray]) -> np.ndarray | None:
    """An ascending sort key when the comparator is `compare(p0, p1), direction=LT/GT`."""
    root = comp.root
    params = comp.parameters
    if root.opcode is not Opcode.COMPARE or len(params) < 2:
        return None
    if root.operand(0) is not params[0] or root.operand(1) is not params[1]:
        return None
    direction = root.attrs.get("direction")
    if direction not in ("LT", "GT"):
        return None
    x = operands[0]
    dt = dtype_of(x)
    kind = root.attrs.get("type")
    if dt.is_float and kind == "TOTALORDER":
        key = total_order_key(x)
    elif dt.is_float:
        if np.isnan(x.astype(np.float32)).any():  # not a strict weak order: use the network
            return None
        key = x.astype(np.float64)
    elif kind in ("SIGNED", "UNSIGNED") and kind != ("SIGNED" if dt.is_signed else "UNSIGNED"):
        return None
    else:
        key = x
    if direction == "GT":
        key = -key if key.dtype.kind == "f" else ~key  # order-reversing without overflow
    return key


def _less(
    interp: Interpreter,
    comp: Computation,
    a: list[np.ndarray],
    b: list[np.ndarray],
    a_pos: np.ndarray,
    b_pos: np.ndarray,
    a_ok: np.ndarray,
    b_ok: np.ndarray,
) -> np.ndarray:
    """Strict total order: comparator, then original position; padding sorts last."""

    def cmp(x: list[np.ndarray], y: list[np.ndarray]) -> np.ndarray:
        args = [v for pair in zip(x, y, strict=True) for v in pair]
        return interp.apply_scalar(comp, args)[0].astype(bool)

    ab = cmp(a, b)
    ba = cmp(b, a)
    strict = ab | (~ba & (a_pos < b_pos))
    return np.where(a_ok & b_ok, strict, a_ok & ~b_ok)


def _bitonic(interp: Interpreter, comp: Computation, rows: list[np.ndarray]) -> list[np.ndarray]:
    r, n = rows[0].shape
    p = 1
    while p < n:
        p *= 2
    pad = p - n
    vals = [np.concatenate([x, np.repeat(x[:, -1:], pad, axis=1)], axis=1) if pad else x.copy()
            for x in rows]
    pos = np.broadcast_to(np.arange(p), (r, p)).copy()
    ok = pos < n
    i = np.arange(p)
    k = 2
    while k <= p:
        j = k // 2
        while j >= 1:
            lo = i[(i & j) == 0]
            hi = lo | j
            asc = (lo & k) == 0
            a = [v[:, lo] for v in vals]
            b = [v[:, hi] for v in vals]
            a_less = _less(interp, comp, a, b, pos[:, lo], pos[:, hi], ok[:, lo], ok[:, hi])
            b_less = _less(interp, comp, b, a, pos[:, hi], pos[:, lo], ok[:, hi], ok[:, lo])
            swap = np.where(asc, b_less, a_less)
            for arr in [*vals, pos, ok]:
                x, y = arr[:, lo], arr[:, hi]
                arr[:, lo] = np.where(swap, y, x)
                arr[:, hi] = np.where(swap, x, y)
            j //= 2
        k *= 2
    return [v[:, :n] for v in vals]


def _per_row(interp: Interpreter, comp: Computation, rows: list[np.ndarray]) -> list[np.ndarray]:
    out = [np.empty_like(x) for x in rows]
    for r in range(rows[0].shape[0]):

        def cmp(i: int, j: int, r: int = r) -> int:
            a = [np.asarray(x[r, i]) for x in rows]
            b = [np.asarray(x[r, j]) for x in rows]
            if bool(as_list(interp.call(comp, [v for p in zip(a, b) for v in p]))[0]):
                return -1
            if bool(as_list(interp.call(comp, [v for p in zip(b, a) for v in p]))[0]):
                return 1
            return 0

        order = sorted(range(rows[0].shape[1]), key=functools.cmp_to_key(cmp))
        for o, x in zip(out, rows, strict=True):
            o[r] = x[r, order]
    return out


@handles(Opcode.SORT)
def _sort(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Any:
    comp = instr.attrs.get("to_apply")
    dims = instr.dimensions
    if comp is None or len(dims) != 1:
        raise unsupported(instr, "sort needs to_apply= and one dimension")
    dim = dims[0]
    arrays = [np.moveaxis(np.asarray(o), dim, -1) for o in ops]
    shape = arrays[0].shape
    n = shape[-1] if shape else 1
    rows = [np.asarray(a, order="C").reshape(-1, n) for a in arrays]
    if n <= 1 or rows[0].shape[0] == 0:
        sorted_rows = rows
    else:
        key = _simple_key(comp, rows)
        if key is not None:
            perm = np.argsort(key, axis=1, kind="stable")
            sorted_rows = [np.take_along_axis(x, perm, axis=1) for x in rows]
        elif interp.is_vectorizable(comp):
            sorted_rows = _bitonic(interp, comp, rows)
        else:
            sorted_rows = _per_row(interp, comp, rows)
    results = [np.moveaxis(x.reshape(shape), -1, dim) for x in sorted_rows]
    results = [np.asarray(x, order="C") for x in results]
    return tuple(results) if isinstance(instr.shape, TupleShape) else results[0]


@handles(Opcode.TOPK)
def _topk(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Any:
    x = np.asarray(ops[0])
    k = instr.attrs.get("k")
    if not isinstance(k, int) or x.ndim == 0:
        raise unsupported(instr, "topk needs an integer k= and an operand of rank >= 1")
    dt = dtype_of(x)
    key = total_order_key(x) if dt.is_float else x
    if instr.attrs.get("largest", True):
        key = ~key  # order-reversing for integers (and the total-order keys)
    order = np.argsort(key, axis=-1, kind="stable")[..., :k]
    values = np.take_along_axis(x, order, axis=-1)
    return values, order.astype(np.int32)
