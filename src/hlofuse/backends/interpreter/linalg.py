"""Dense linear algebra: cholesky and triangular-solve (batched over leading dimensions).

JAX on CPU lowers its linalg routines to LAPACK custom calls, so these ops come from other
producers (or XLA's own tests). Semantics, per XLA's operation semantics:

* cholesky(a), lower=true: L with a = L L^T, reading only the lower triangle of a (upper: U with
  a = U^T U, reading the upper triangle); the other triangle of the result is zero here (XLA
  leaves it implementation-defined). A matrix that is not positive definite gives nan.
* triangular-solve(a, b): solves op(a) x = b (left_side=true) or x op(a) = b, reading only the
  `lower` (or upper) triangle of a, with ones on the diagonal when unit_diagonal=true;
  op is the identity, the transpose, or the adjoint (= transpose for real types).

Computed in f64 and rounded to the result type.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hlofuse.backends.interpreter.core import Interpreter, handles, out_np, unsupported
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode


def _triangle(a: np.ndarray, lower: bool) -> np.ndarray:
    return np.tril(a) if lower else np.triu(a)


@handles(Opcode.CHOLESKY)
def _cholesky(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    a = np.asarray(ops[0]).astype(np.float64)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise unsupported(instr, "cholesky needs square matrices in the two minor dimensions")
    lower = bool(instr.attrs.get("lower", False))
    t = _triangle(a, lower)
    sym = t + np.swapaxes(t, -1, -2) - np.eye(a.shape[-1]) * np.diagonal(a, 0, -2, -1)[..., None]
    out = np.full(a.shape, np.nan)
    flat_in = sym.reshape(-1, *a.shape[-2:])
    flat_out = out.reshape(-1, *a.shape[-2:])
    for i, m in enumerate(flat_in):
        try:
            chol = np.linalg.cholesky(m)
        except np.linalg.LinAlgError:
            continue  # not positive definite: nan, like XLA
        flat_out[i] = chol if lower else chol.T
    return out.astype(out_np(instr))


@handles(Opcode.TRIANGULAR_SOLVE)
def _triangular_solve(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    a = np.asarray(ops[0]).astype(np.float64)
    b = np.asarray(ops[1]).astype(np.float64)
    lower = bool(instr.attrs.get("lower", False))
    t = _triangle(a, lower)
    if instr.attrs.get("unit_diagonal", False):
        n = a.shape[-1]
        t = t * (1 - np.eye(n)) + np.eye(n)
    mode = str(instr.attrs.get("transpose_a", "NO_TRANSPOSE"))
    if mode not in ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"):
        raise unsupported(instr, f"unknown transpose_a={mode}")
    if mode != "NO_TRANSPOSE":
        t = np.swapaxes(t, -1, -2)
    if instr.attrs.get("left_side", False):
        x = np.linalg.solve(t, b)
    else:  # x t = b  <=>  t^T x^T = b^T
        x = np.swapaxes(np.linalg.solve(np.swapaxes(t, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)
    return x.astype(out_np(instr))
