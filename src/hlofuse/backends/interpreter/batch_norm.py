"""batch-norm-training, batch-norm-inference and batch-norm-grad, per XLA's operation semantics.

With `f = feature_index`, statistics are taken over every dimension but f (N elements per
feature), and the per-feature vectors broadcast along f:

* training(x, scale, offset) -> (y, mean, var): mean = sum(x) / N, var = sum((x - mean)^2) / N
  (biased), y = (x - mean) / sqrt(var + epsilon) * scale + offset;
* inference(x, scale, offset, mean, var) -> y, the same normalisation with the given statistics;
* grad(x, scale, mean, var, dy) -> (dx, dscale, doffset): with c = 1 / sqrt(var + epsilon),
  doffset = sum(dy), dscale = sum(dy * (x - mean) * c),
  dx = scale * c * (dy - doffset / N - (x - mean) * c * dscale / N).

Computed in f64 and rounded to the operand type.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hlofuse.backends.interpreter.core import Interpreter, handles, unsupported
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.literal import Literal
from hlofuse.ir.opcodes import Opcode


def _setup(instr: Instruction, ops: list[Any]) -> tuple[list[np.ndarray], int, float, tuple]:
    try:
        f = int(instr.attrs["feature_index"])
        eps = float(instr.attrs["epsilon"])
    except (KeyError, TypeError, ValueError):
        raise unsupported(instr, "needs feature_index= and epsilon=") from None
    values = [np.asarray(o).astype(np.float64) for o in ops]
    axes = tuple(i for i in range(values[0].ndim) if i != f)
    return values, f, eps, axes


def _along(v: np.ndarray, f: int, rank: int) -> np.ndarray:
    """A per-feature vector shaped to broadcast along dimension f."""
    return v.reshape([-1 if i == f else 1 for i in range(rank)])


@handles(Opcode.BATCH_NORM_TRAINING)
def _training(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    (x, scale, offset), f, eps, axes = _setup(instr, ops)
    mean = x.mean(axis=axes) if x.size else np.zeros(x.shape[f])
    var = ((x - _along(mean, f, x.ndim)) ** 2).mean(axis=axes) if x.size else mean
    y = _normalise(x, scale, offset, mean, var, f, eps)
    dt = ops[0].dtype
    return (y.astype(dt), mean.astype(dt), var.astype(dt))


def _normalise(x: np.ndarray, scale: np.ndarray, offset: np.ndarray, mean: np.ndarray,
               var: np.ndarray, f: int, eps: float) -> np.ndarray:
    r = x.ndim
    return ((x - _along(mean, f, r)) / np.sqrt(_along(var, f, r) + eps) * _along(scale, f, r)
            + _along(offset, f, r))


@handles(Opcode.BATCH_NORM_INFERENCE)
def _inference(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    (x, scale, offset, mean, var), f, eps, _ = _setup(instr, ops)
    return _normalise(x, scale, offset, mean, var, f, eps).astype(ops[0].dtype)


@handles(Opcode.BATCH_NORM_GRAD)
def _grad(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    (x, scale, mean, var, dy), f, eps, axes = _setup(instr, ops)
    r = x.ndim
    n = max(x.size // max(x.shape[f], 1), 1)
    c = 1.0 / np.sqrt(var + eps)
    centred = x - _along(mean, f, r)
    d_offset = dy.sum(axis=axes)
    d_scale = (dy * centred * _along(c, f, r)).sum(axis=axes)
    dx = _along(scale * c, f, r) * (dy - _along(d_offset / n, f, r)
                                    - centred * _along(c * d_scale / n, f, r))
    dt = ops[0].dtype
    return (dx.astype(dt), d_scale.astype(dt), d_offset.astype(dt))
