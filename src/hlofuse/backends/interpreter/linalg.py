"""Dense linear algebra: cholesky and triangular-solve (batched over leading dimensions), fft and
ragged-dot.

JAX on CPU lowers its linalg routines to LAPACK custom calls (`lapack.py`), so these ops come
from other producers (or XLA's own tests). Semantics, per XLA's operation semantics:

* cholesky(a), lower=true: L with a = L L^H, reading only the lower triangle of a (upper: U with
  a = U^H U, reading the upper triangle; the diagonal's imaginary part is ignored); the other
  triangle of the result is zero here (XLA leaves it implementation-defined). A matrix that is
  not positive definite gives nan.
* triangular-solve(a, b): solves op(a) x = b (left_side=true) or x op(a) = b, reading only the
  `lower` (or upper) triangle of a, with ones on the diagonal when unit_diagonal=true;
  op is the identity, the transpose, or the adjoint (the conjugate transpose), by substitution
  (a zero on the diagonal gives inf/nan, as IEEE division).

* fft over the minor `len(fft_length)` dimensions: FFT / IFFT (complex -> complex, the inverse
  scaled by 1/N), RFFT (real -> complex, the last dimension `n // 2 + 1`) and IRFFT (complex ->
  real, reading the first `n // 2 + 1` elements of the last dimension); numpy's fftn family.
* ragged-dot(lhs, rhs, group_sizes), one group dimension (group_sizes a vector of g sizes):
  - the ragged dimension a free lhs dimension (rhs has group dimension `rhs_group_dims`): row r of
    that dimension, in group i (the groups are consecutive ranges of the given sizes), is
    contracted with rhs[i]; rows past the last group are zero;
  - the ragged dimension contracting: result group i contracts only the range of group i, the
    g groups are a new major result dimension (no batch dimensions);
  - the ragged dimension a batch dimension: the dot itself.

Computed in f64 (c128) and rounded to the result type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hlofuse.backends.interpreter.core import (
    Interpreter,
    array_shape,
    handles,
    out_np,
    unsupported,
)
from hlofuse.backends.interpreter.lapack_algorithms import trsm
from hlofuse.backends.interpreter.reductions import dot_dims, dot_general
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode


def _wide(x: Any) -> np.ndarray:
    """An operand in f64 (c128 for complex types)."""
    a = np.asarray(x)
    return a.astype(np.complex128 if np.iscomplexobj(a) else np.float64)


@handles(Opcode.CHOLESKY)
def _cholesky(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    a = _wide(ops[0])
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise unsupported(instr, "cholesky needs square matrices in the two minor dimensions")
    lower = bool(instr.attrs.get("lower", False))
    n = a.shape[-1]
    t = np.tril(a) if lower else np.triu(a)
    off = np.tril(a, -1) if lower else np.triu(a, 1)
    sym = t + np.conj(np.swapaxes(off, -1, -2))
    idx = np.arange(n)
    sym[..., idx, idx] = np.real(sym[..., idx, idx])
    out = np.full(a.shape, np.nan, a.dtype)
    flat_in = sym.reshape(-1, n, n)
    flat_out = out.reshape(-1, n, n)
    for i, m in enumerate(flat_in):
        try:
            chol = np.linalg.cholesky(m)
        except np.linalg.LinAlgError:
            continue  # not positive definite: nan, like XLA
        flat_out[i] = chol if lower else np.conj(chol.T)
    return out.astype(out_np(instr))


@handles(Opcode.TRIANGULAR_SOLVE)
def _triangular_solve(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    a, b = _wide(ops[0]), _wide(ops[1])
    mode = str(instr.attrs.get("transpose_a", "NO_TRANSPOSE"))
    trans = {"NO_TRANSPOSE": "N", "TRANSPOSE": "T", "ADJOINT": "C"}.get(mode)
    if trans is None:
        raise unsupported(instr, f"unknown transpose_a={mode}")
    if a.ndim < 2 or b.ndim != a.ndim or a.shape[-1] != a.shape[-2]:
        raise unsupported(instr, "triangular-solve needs square matrices and a right-hand side "
                          "of the same rank")
    batch = a.shape[:-2]
    flat_a = a.reshape(-1, *a.shape[-2:])
    flat_b = np.broadcast_to(b, (*batch, *b.shape[-2:])).reshape(-1, *b.shape[-2:])
    x = trsm(flat_a, flat_b.astype(np.result_type(a, b)),
             bool(instr.attrs.get("left_side", False)), bool(instr.attrs.get("lower", False)),
             trans, bool(instr.attrs.get("unit_diagonal", False)))
    return x.reshape(b.shape).astype(out_np(instr))


_FFTS: dict[str, Callable[..., Any]] = {
    "FFT": np.fft.fftn, "IFFT": np.fft.ifftn, "RFFT": np.fft.rfftn, "IRFFT": np.fft.irfftn}


@handles(Opcode.FFT)
def _fft(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    kind = str(instr.attrs.get("fft_type", "FFT"))
    fn = _FFTS.get(kind)
    if fn is None:
        raise unsupported(instr, f"unknown fft_type={kind}")
    lengths = [int(n) for n in instr.attrs.get("fft_length", ())]
    x = np.asarray(ops[0])
    if not lengths or len(lengths) > x.ndim:
        raise unsupported(instr, f"fft_length={lengths} for an operand of rank {x.ndim}")
    x = x.astype(np.float64 if kind == "RFFT" else np.complex128)
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    return np.asarray(fn(x, s=lengths, axes=axes)).astype(out_np(instr))


def _group_bounds(sizes: np.ndarray, extent: int) -> list[tuple[int, int]]:
    ends = np.minimum(np.cumsum(sizes.astype(np.int64)), extent)
    starts = np.concatenate([[0], ends[:-1]])
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]


@handles(Opcode.RAGGED_DOT)
def _ragged_dot(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    lhs, rhs, sizes = (np.asarray(o) for o in ops)
    lb, rb, lc, rc = dims = dot_dims(instr)
    ragged = [int(d) for d in instr.attrs.get("lhs_ragged_dims", ())]
    group = [int(d) for d in instr.attrs.get("rhs_group_dims", ())]
    out, shape = out_np(instr), array_shape(instr)
    if len(ragged) != 1 or sizes.ndim != 1:
        raise unsupported(instr, "only one ragged dimension with a vector of group sizes is "
                          "interpreted")
    r = ragged[0]
    bounds = _group_bounds(sizes, lhs.shape[r])
    if r in lb:
        return dot_general(lhs, rhs, dims, out).reshape(shape.dims)
    if r in lc:
        if lb:
            raise unsupported(instr, "a ragged contracting dimension with batch dimensions")
        parts = []
        for a, b in bounds:
            mask = np.zeros(lhs.shape[r], dtype=bool)
            mask[a:b] = True
            keep = mask.reshape([-1 if i == r else 1 for i in range(lhs.ndim)])
            parts.append(dot_general(np.where(keep, lhs, 0).astype(lhs.dtype), rhs, dims, out))
        return np.stack(parts).reshape(shape.dims)
    if len(group) != 1:
        raise unsupported(instr, "a ragged free dimension needs one rhs_group_dims dimension")
    g = group[0]
    # The position of the ragged dimension in the result: after the batch dimensions, among
    # the free lhs dimensions.
    free = [i for i in range(lhs.ndim) if i not in lb and i not in lc]
    at = len(lb) + free.index(r)
    sub = [d - (d > g) for d in rb], [d - (d > g) for d in rc]
    result = np.zeros(shape.dims, dtype=out)
    for i, (a, b) in enumerate(bounds):
        piece = dot_general(lhs, np.take(rhs, i, axis=g), (lb, sub[0], lc, sub[1]), out)
        index = [slice(None)] * piece.ndim
        index[at] = slice(a, b)
        result[tuple(index)] = piece[tuple(index)]
    return result
