"""Data-movement ops: broadcast, reshape, bitcast, transpose, slice, dynamic-slice,
dynamic-update-slice, concatenate, pad, reverse, iota.

XLA semantics worth knowing:

* broadcast's `dimensions` maps operand dimension i to output dimension dimensions[i] (they
  need not be increasing: a broadcast may also transpose);
* dynamic-slice and dynamic-update-slice clamp each start index into [0, dim - size], so the
  slice always fits;
* pad takes (low, high, interior) per dimension; negative low/high crop;
* bitcast is a reshape in row-major order (reinterpreting the bytes when the element type
  changes) when both layouts are the default (descending) ones; physical layouts are not
  modelled, so other layouts are rejected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hlofuse.backends.interpreter.core import (
    Interpreter,
    array_shape,
    handles,
    out_np,
    unsupported,
)
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode


@handles(Opcode.BROADCAST)
def _broadcast(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    shape = array_shape(instr)
    x = np.asarray(ops[0])
    if x.ndim == 0:
        return np.full(shape.dims, x, dtype=shape.dtype.np)
    dims = list(instr.dimensions)
    if len(dims) != x.ndim:
        raise unsupported(
            instr, f"dimensions={{{','.join(map(str, dims))}}} does not match rank {x.ndim}"
        )
    expanded = [1] * shape.rank
    for i, d in enumerate(dims):
        expanded[d] = x.shape[i]
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    x = np.transpose(x, order).reshape(expanded)
    return np.broadcast_to(x, shape.dims).astype(shape.dtype.np, copy=True)


@handles(Opcode.RESHAPE)
def _reshape(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    return np.reshape(ops[0], array_shape(instr).dims).copy()


@handles(Opcode.BITCAST)
def _bitcast(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    out = array_shape(instr)
    src = array_shape(instr.operand(0))
    if not (out.has_default_layout and src.has_default_layout):
        raise unsupported(
            instr,
            f"bitcast from {src} to {out} reinterprets a physical layout; the interpreter "
            "models only logical (row-major) order, so non-default layouts are not supported",
        )
    x = np.asarray(ops[0], order="C")
    if out.size * out.dtype.itemsize != x.size * x.dtype.itemsize or (
        out.dtype.is_pred != src.dtype.is_pred
    ):
        raise unsupported(instr, f"bitcast from {src} to {out} changes the byte size")
    if out.dtype != src.dtype:  # reinterpret the row-major bytes as the new element type
        x = x.reshape(-1).view(np.uint8).view(out.dtype.np)
    return x.reshape(out.dims).copy()


@handles(Opcode.TRANSPOSE)
def _transpose(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    return np.asarray(np.transpose(ops[0], instr.dimensions), order="C")


@handles(Opcode.SLICE)
def _slice(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    ranges = instr.attrs.get("slice")
    if ranges is None:
        raise unsupported(instr, "slice needs a slice={...} attribute")
    index = tuple(slice(int(s), int(e), int(st)) for s, e, st in ranges)
    return np.asarray(np.asarray(ops[0])[index], order="C")


def _start_indices(instr: Instruction, ops: Sequence[Any], rank: int) -> list[int]:
    """Dynamic start indices: one scalar operand per dimension (or one R1 operand, the old
    form)."""
    if len(ops) == 1 and np.asarray(ops[0]).ndim == 1:
        return [int(v) for v in np.asarray(ops[0])]
    if len(ops) != rank:
        raise unsupported(instr, f"expected {rank} start indices, got {len(ops)}")
    return [int(np.asarray(v).reshape(())) for v in ops]


def clamp_starts(starts: Sequence[int], dims: Sequence[int], sizes: Sequence[int]) -> list[int]:
    return [min(max(s, 0), d - z) for s, d, z in zip(starts, dims, sizes, strict=True)]


@handles(Opcode.DYNAMIC_SLICE)
def _dynamic_slice(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    x = np.asarray(ops[0])
    sizes = instr.attrs.get("dynamic_slice_sizes")
    if sizes is None:
        sizes = array_shape(instr).dims
    sizes = [int(s) for s in sizes]
    starts = clamp_starts(_start_indices(instr, ops[1:], x.ndim), x.shape, sizes)
    index = tuple(slice(s, s + z) for s, z in zip(starts, sizes, strict=True))
    return np.asarray(x[index], order="C")


@handles(Opcode.DYNAMIC_UPDATE_SLICE)
def _dynamic_update_slice(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    x = np.array(ops[0], copy=True)
    update = np.asarray(ops[1])
    starts = clamp_starts(_start_indices(instr, ops[2:], x.ndim), x.shape, update.shape)
    index = tuple(slice(s, s + z) for s, z in zip(starts, update.shape, strict=True))
    x[index] = update
    return x


@handles(Opcode.CONCATENATE)
def _concatenate(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    dims = instr.dimensions
    if len(dims) != 1:
        raise unsupported(instr, "concatenate needs exactly one dimension")
    return np.concatenate([np.asarray(o) for o in ops], axis=dims[0]).astype(out_np(instr))


def pad_array(
    x: np.ndarray, value: Any, config: Sequence[tuple[int, int, int]]
) -> np.ndarray:
    """XLA's pad: (low, high, interior) per dimension; negative low/high crop."""
    x = np.asarray(x)
    out_dims = []
    for d, (lo, hi, interior) in zip(x.shape, config, strict=True):
        core = d + max(d - 1, 0) * interior
        out_dims.append(max(lo + core + hi, 0))
    result = np.full(out_dims, value, dtype=x.dtype)
    src_index: list[np.ndarray] = []
    dst_index: list[np.ndarray] = []
    for d, (lo, _hi, interior), n in zip(x.shape, config, out_dims, strict=True):
        pos = lo + np.arange(d) * (interior + 1)
        keep = (pos >= 0) & (pos < n)
        src_index.append(np.nonzero(keep)[0])
        dst_index.append(pos[keep])
    if all(len(i) for i in src_index) and result.size:
        result[np.ix_(*dst_index)] = x[np.ix_(*src_index)]
    elif x.ndim == 0:
        result = x.copy()
    return result


@handles(Opcode.PAD)
def _pad(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    config = instr.attrs.get("padding")
    if config is None:
        raise unsupported(instr, "pad needs a padding= attribute")
    value = np.asarray(ops[1]).reshape(())
    return pad_array(ops[0], value, [(int(lo), int(hi), int(mid)) for lo, hi, mid in config])


@handles(Opcode.REVERSE)
def _reverse(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    return np.flip(ops[0], axis=tuple(instr.dimensions)).copy()


@handles(Opcode.IOTA)
def _iota(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    shape = array_shape(instr)
    dim = int(instr.attrs.get("iota_dimension", 0))
    if not 0 <= dim < max(shape.rank, 1):
        raise unsupported(instr, f"iota_dimension={dim} is out of range for {shape}")
    if shape.rank == 0:
        return np.zeros((), shape.dtype.np)
    line = np.arange(shape.dims[dim], dtype=np.int64)
    if shape.dtype.is_float:
        line = line.astype(np.float64)
    view = [1] * shape.rank
    view[dim] = shape.dims[dim]
    return np.broadcast_to(line.reshape(view), shape.dims).astype(shape.dtype.np)
