"""Data-dependent indexing: gather, scatter, select-and-scatter.

Gather and scatter take XLA's full dimension numbers, including the batching dimensions
(operand_batching_dims / start_indices_batching_dims, input_batching_dims /
scatter_indices_batching_dims). XLA semantics:

* gather clamps each start index so the whole slice lies inside the operand;
* scatter *skips* every update whose window would fall (partly) outside the operand;
* scatter applies `to_apply` once per update element; updates that hit the same operand element
  are combined one after another (in update order). Simple combiners (add, multiply, max, min)
  run as `ufunc.at`; others run vectorised in rounds, one round per repeat of an index. A real
  float combiner rounds to the type after every application, as XLA's CPU backend (a bf16 or
  f16 add computed in f32 and rounded, each time: measured against jax.jit, where combining in
  f64 and rounding once differed in the last bits); a complex add too (each part in the
  component type: c128 then rounding once differed from jax.jit in the last bit of a c64 sum,
  fuzz seed 3501), and a complex multiply applies XLA's fused product once per update.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from hlofuse.backends.interpreter.core import (
    Interpreter,
    handles,
    out_np,
    unsupported,
)
from hlofuse.backends.interpreter.flush import flush, runs_e8m0_ops
from hlofuse.backends.interpreter.reductions import simple_reducer
from hlofuse.backends.interpreter.shaping import pad_array
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import TupleShape


def _ints(instr: Instruction, key: str) -> list[int]:
    return [int(v) for v in instr.attrs.get(key, ())]


def _index_vectors(
    indices: np.ndarray, index_vector_dim: int
) -> tuple[np.ndarray, tuple[int, ...], list[int]]:
    """Split start indices into (B, K) index vectors, the batch shape, and the original
    dimension numbers of the batch dimensions."""
    idx = np.asarray(indices)
    if idx.dtype == np.uint64:  # starts at or above 2^63 stay large (clamped or dropped later)
        idx = np.minimum(idx, np.uint64(np.iinfo(np.int64).max))
    idx = idx.astype(np.int64)
    if index_vector_dim == idx.ndim:
        idx = idx[..., None]
    batch_dims = [d for d in range(idx.ndim) if d != index_vector_dim]
    idx = np.moveaxis(idx, index_vector_dim, -1)
    batch_shape = idx.shape[:-1]
    return idx.reshape(math.prod(batch_shape), idx.shape[-1]), batch_shape, batch_dims


def _full_starts(
    vectors: np.ndarray,
    batch_shape: tuple[int, ...],
    batch_dims: list[int],
    rank: int,
    index_map: list[int],
    operand_batching: list[int],
    indices_batching: list[int],
) -> np.ndarray:
    """(B, rank) operand start positions for each index vector."""
    b = vectors.shape[0]
    starts = np.zeros((b, rank), dtype=np.int64)
    for k, d in enumerate(index_map):
        starts[:, d] = vectors[:, k]
    if operand_batching:
        coords = np.indices(batch_shape).reshape(len(batch_shape), b)
        for od, sd in zip(operand_batching, indices_batching, strict=True):
            starts[:, od] = coords[batch_dims.index(sd)]
    return starts


@handles(Opcode.GATHER)
def _gather(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    operand = np.asarray(ops[0])
    rank = operand.ndim
    offset_dims = _ints(instr, "offset_dims")
    collapsed = _ints(instr, "collapsed_slice_dims")
    index_map = _ints(instr, "start_index_map")
    obd = _ints(instr, "operand_batching_dims")
    sibd = _ints(instr, "start_indices_batching_dims")
    sizes = _ints(instr, "slice_sizes")
    if "index_vector_dim" not in instr.attrs or len(sizes) != rank:
        raise unsupported(instr, "gather needs index_vector_dim and one slice size per dim")
    vectors, batch_shape, batch_dims = _index_vectors(ops[1], int(instr.attrs["index_vector_dim"]))
    starts = _full_starts(vectors, batch_shape, batch_dims, rank, index_map, obd, sibd)
    upper = np.array(operand.shape, dtype=np.int64) - np.array(sizes, dtype=np.int64)
    starts = np.clip(starts, 0, np.maximum(upper, 0))
    b = starts.shape[0]
    index = []
    for d in range(rank):
        offs = np.arange(sizes[d]).reshape([1] * (d + 1) + [sizes[d]] + [1] * (rank - d - 1))
        index.append(starts[:, d].reshape([b] + [1] * rank) + offs)
    win = operand[tuple(index)] if rank else np.broadcast_to(operand, (b,))
    dropped = set(collapsed) | set(obd)
    window_shape = [sizes[d] for d in range(rank) if d not in dropped]
    win = win.reshape(tuple(batch_shape) + tuple(window_shape))
    nb = len(batch_shape)
    perm = []
    next_batch = 0
    for o in range(nb + len(window_shape)):
        if o in offset_dims:
            perm.append(nb + offset_dims.index(o))
        else:
            perm.append(next_batch)
            next_batch += 1
    return np.asarray(np.transpose(win, perm), order="C").astype(out_np(instr), copy=False)


def combine_at(
    interp: Interpreter,
    comp: Computation,
    targets: list[np.ndarray],
    flat_index: np.ndarray,
    values: list[np.ndarray],
) -> None:
    """targets[i].flat[flat_index[j]] = comp(targets..., values...[j]) for each j, in order;
    repeated indices are combined one after another."""
    if len(flat_index) == 0:
        return
    flats = [t.reshape(-1) for t in targets]  # views: targets are contiguous
    # (an e8m0 combiner runs as XLA's f32 op under DAZ: through the reducer, flush.Via)
    e8m0 = runs_e8m0_ops(interp.flush, flats[:1])
    ufunc = simple_reducer(comp) if len(targets) == 1 and not e8m0 else None
    if ufunc is not None and flats[0].dtype.kind == "c" and ufunc is not np.add:
        ufunc = None  # a complex product is XLA's fused multiply: applied in rounds below
    if ufunc is not None:
        work = flats[0]
        if work.dtype.kind not in "iub":  # floats: in the type, rounding every application
            value = values[0]
            if interp.flush:  # the combined elements read and write flushed values
                work[flat_index] = flush(work[flat_index])
                value = flush(value)
            # numpy / ml_dtypes compute each application in f32 or wider, then round (a
            # complex add: each part in the component type, as XLA)
            ufunc.at(work, flat_index, value.astype(work.dtype, copy=False))
            if interp.flush:
                work[flat_index] = flush(work[flat_index])
        else:
            ufunc.at(work, flat_index, values[0].astype(work.dtype, copy=False))
        return
    order = np.argsort(flat_index, kind="stable")
    sorted_idx = flat_index[order]
    first = np.r_[True, sorted_idx[1:] != sorted_idx[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    occurrence = np.empty(len(order), dtype=np.int64)
    occurrence[order] = np.arange(len(order)) - group_start
    for r in range(int(occurrence.max()) + 1):
        sel = occurrence == r
        where = flat_index[sel]
        current = [f[where] for f in flats]
        new = interp.apply_scalar(comp, current + [v[sel] for v in values])
        for f, n in zip(flats, new, strict=True):
            f[where] = n


@handles(Opcode.SCATTER)
def _scatter(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Any:
    n = (len(ops) - 1) // 2
    operands = [np.array(o, copy=True, order="C") for o in ops[:n]]
    updates = [np.asarray(u) for u in ops[n + 1 :]]
    comp = instr.attrs.get("to_apply")
    if comp is None or "index_vector_dim" not in instr.attrs:
        raise unsupported(instr, "scatter needs to_apply= and index_vector_dim=")
    rank = operands[0].ndim
    uwd = _ints(instr, "update_window_dims")
    iwd = _ints(instr, "inserted_window_dims")
    sdod = _ints(instr, "scatter_dims_to_operand_dims")
    ibd = _ints(instr, "input_batching_dims")
    sibd = _ints(instr, "scatter_indices_batching_dims")
    vectors, batch_shape, batch_dims = _index_vectors(ops[n], int(instr.attrs["index_vector_dim"]))
    starts = _full_starts(vectors, batch_shape, batch_dims, rank, sdod, ibd, sibd)
    u0 = updates[0]
    scatter_dims = [d for d in range(u0.ndim) if d not in uwd]
    window_operand_dims = [d for d in range(rank) if d not in iwd and d not in ibd]
    if len(window_operand_dims) != len(uwd):
        raise unsupported(instr, "update_window_dims do not match the operand's window dims")
    win = [1] * rank
    for j, d in enumerate(window_operand_dims):
        win[d] = u0.shape[uwd[j]]
    shape = np.array(operands[0].shape, dtype=np.int64)
    valid = np.all((starts >= 0) & (starts <= shape - np.array(win)), axis=1)  # no overflow
    b = starts.shape[0]
    w = math.prod(u0.shape[d] for d in uwd)
    vals = [np.transpose(u, scatter_dims + uwd).reshape(b, w) for u in updates]
    grid = np.indices([u0.shape[d] for d in uwd]).reshape(len(uwd), w)
    full = np.repeat(starts[:, None, :], w, axis=1)  # (B, W, rank)
    for j, d in enumerate(window_operand_dims):
        full[:, :, d] += grid[j][None, :]
    full = full[valid].reshape(-1, rank)
    flat_index = (
        np.ravel_multi_index(tuple(full.T), operands[0].shape)
        if rank
        else np.zeros(len(full), dtype=np.int64)
    )
    values = [v[valid].reshape(-1) for v in vals]
    combine_at(interp, comp, operands, flat_index, values)
    return tuple(operands) if isinstance(instr.shape, TupleShape) else operands[0]


@handles(Opcode.SELECT_AND_SCATTER)
def _select_and_scatter(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    operand, source, init = np.asarray(ops[0]), np.asarray(ops[1]), np.asarray(ops[2])
    window = instr.attrs.get("window")
    select = instr.attrs.get("select")
    scatter = instr.attrs.get("scatter")
    if window is None and operand.ndim == 0:
        window = ()  # a scalar's window is empty
    if window is None or select is None or scatter is None:
        raise unsupported(instr, "select-and-scatter needs window=, select= and scatter=")
    if any(w.window_dilation != 1 or w.base_dilation != 1 or w.reversal for w in window):
        raise unsupported(instr, "dilated or reversed windows are not defined here")
    rank = operand.ndim
    config = [(w.pad_lo, w.pad_hi, 0) for w in window]
    padded = pad_array(operand, np.zeros((), operand.dtype), config)
    inside = pad_array(np.ones(operand.shape, bool), np.zeros((), bool), config)
    out_dims = source.shape
    best = np.zeros(out_dims, operand.dtype)
    best_pos = np.zeros((rank, *out_dims), dtype=np.int64)
    found = np.zeros(out_dims, dtype=bool)
    for pos in itertools.product(*[range(w.size) for w in window]):
        index = tuple(
            slice(p, p + w.stride * (o - 1) + 1, w.stride) if o > 0 else slice(0, 0)
            for p, w, o in zip(pos, window, out_dims, strict=True)
        )
        cand, ok = padded[index], inside[index]
        keep = interp.apply_scalar(select, [best, cand])[0].astype(bool)
        take = ok & (~found | ~keep)
        best = np.where(take, cand, best)
        for d in range(rank):
            best_pos[d] = np.where(take, pos[d], best_pos[d])
        found |= ok
    result = np.full(operand.shape, init.reshape(()), dtype=operand.dtype)
    coords = []
    for d, w in enumerate(window):
        o = np.arange(out_dims[d]).reshape([1] * d + [out_dims[d]] + [1] * (rank - d - 1))
        coords.append((o * w.stride + best_pos[d] - w.pad_lo)[found])
    flat = np.ravel_multi_index(tuple(coords), operand.shape) if rank else np.zeros(
        int(found.sum()), dtype=np.int64
    )
    combine_at(interp, scatter, [result], flat, [source[found]])
    return result
