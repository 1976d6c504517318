"""Reductions and contractions: reduce, reduce-window, dot.

reduce and reduce-window apply their `to_apply` computation. The common scalar reducers (one
add/multiply/maximum/minimum/and/or/xor of the two parameters) run as a numpy `ufunc.reduce`;
any other reducer that is elementwise (argmax-style variadic reducers, for example) is applied
vectorised in a pairwise tree over the reduced elements (XLA leaves the order unspecified, and
requires an associative reducer). f32/f64 sums accumulate in f64 and round once at the end, so
they may differ from XLA's (which accumulates in the type) in the last bits. Complex sums are
XLA's exactly: in the type, in order (init first), as its CPU backend's scalar loop. Products
of floats and complex numbers are XLA's exactly: in the type, in order, each partial product
flushed under `subnormals="flush"` (products.py). A reduce of one element per output (every
reduced dimension of size 1) is that element, neither the init nor the reducer applied, as
XLA's algebraic simplifier makes it a reshape (sum([-0.0]) is -0.0, a subnormal stays: it is
not flushed).

Floats narrower than f32 (f16, bf16, the 8-bit floats) accumulate in their own type, one
rounding per reducer application, in order: the init value first, then the reduced elements in
row-major order (a reduce-window: its window positions in XLA's loop order, `window_order`).
That is what XLA's CPU backend computes (it rounds every HLO op of a bf16/f16 computation to
the type), and the order is its order once `simplify` has cut long sums into windows of 32 and
scans into two levels (passes/simplify/tree_reduction.py, scan_rewriter.py): a bf16 sum of 4096
ones is 4096 after the pipeline, 256 (where a running bf16 sum stalls) without it.

reduce-window reads its padding without building it (a window over f32[4] padded by 2^28 needs
no more memory than its output); its work, window positions read times output elements, is at
most `MAX_WINDOW_WORK` element steps (an `InterpreterLimitError` naming the instruction beyond).

dot follows dot_general: result dimensions are batch, lhs free, rhs free. Floats are
contracted in f64 and rounded to the result type; integers in 64 bits, then wrapped to the
result type (exactly what a wrapping accumulator of the result type gives). A dot with a complex
operand or result is computed in XLA's complex type for it and converted (complex_dot.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from hlofuse.backends.interpreter.complex_dot import complex_dot
from hlofuse.backends.interpreter.core import (
    Interpreter,
    array_shape,
    as_list,
    handles,
    out_np,
    unsupported,
    where,
)
from hlofuse.backends.interpreter.flush import runs_e8m0_ops
from hlofuse.backends.interpreter.numerics import wrap
from hlofuse.backends.interpreter.products import multiply_step, product
from hlofuse.backends.interpreter.shaping import pad_array
from hlofuse.backends.subnormals import e8m0_init_last
from hlofuse.backends.window_order import window_order
from hlofuse.backends.xla_facts import dot_rounds_through_f16
from hlofuse.errors import InterpreterLimitError
from hlofuse.ir.computation import Computation
from hlofuse.ir.dtypes import from_numpy
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape

_FLOAT_UFUNCS = {
    Opcode.ADD: np.add,
    Opcode.MULTIPLY: np.multiply,
    Opcode.MAXIMUM: np.maximum,
    Opcode.MINIMUM: np.minimum,
}
_INT_UFUNCS = {
    **_FLOAT_UFUNCS,
    Opcode.AND: np.bitwise_and,
    Opcode.OR: np.bitwise_or,
    Opcode.XOR: np.bitwise_xor,
}
_COMPLEX_UFUNCS = {Opcode.ADD: np.add, Opcode.MULTIPLY: np.multiply}
_PRED_UFUNCS = {
    Opcode.ADD: np.logical_or,
    Opcode.OR: np.logical_or,
    Opcode.MAXIMUM: np.logical_or,
    Opcode.MULTIPLY: np.logical_and,
    Opcode.AND: np.logical_and,
    Opcode.MINIMUM: np.logical_and,
    Opcode.XOR: np.logical_xor,
}


def simple_reducer(comp: Computation) -> np.ufunc | None:
    """The numpy ufunc for a reducer `ROOT r = op(p0, p1)` (either operand order)."""
    params = comp.parameters
    if len(params) != 2:
        return None
    return _ufunc_of(comp.root, params[0], params[1])


def parallel_reducers(comp: Computation) -> list[np.ufunc] | None:
    """The ufuncs of a variadic reducer whose every output k is `op_k(p_k, p_{n+k})`: n
    independent reductions (XLA computes each in order, as a single-output reduce)."""
    params = comp.parameters
    root = comp.root
    n = len(params) // 2
    if root.opcode is not Opcode.TUPLE or root.operand_count != n or len(params) != 2 * n:
        return None
    ufuncs = [_ufunc_of(root.operands[k], params[k], params[n + k]) for k in range(n)]
    return None if any(u is None for u in ufuncs) else ufuncs  # type: ignore[return-value]


def _ufunc_of(root: Instruction, p: Instruction, q: Instruction) -> np.ufunc | None:
    if root.operand_count != 2 or {id(o) for o in root.operands} != {id(p), id(q)}:
        return None
    shape = root.shape
    if not isinstance(shape, ArrayShape) or shape.rank != 0:
        return None
    if any(x.shape != shape and not x.shape.compatible(shape) for x in (p, q)):
        return None
    dt = shape.dtype
    if dt.is_narrow_int:  # sub-byte integers wrap at their width: the elementwise ops do that
        return None
    if dt.is_complex:
        return _COMPLEX_UFUNCS.get(root.opcode)
    table = _PRED_UFUNCS if dt.is_pred else _FLOAT_UFUNCS if dt.is_float else _INT_UFUNCS
    return table.get(root.opcode)


def in_order(dtype: np.dtype) -> bool:
    """A float narrower than f32, or a complex type: accumulated in its own type, in order
    (XLA's CPU reduces complex numbers in a scalar loop, init first: with +-max in the parts,
    any other order cancels differently, fuzz seed 3501)."""
    dt = from_numpy(dtype)
    return (dt.is_float and dt.bits < 32) or dt.is_complex


def _accumulator(dtype: np.dtype) -> np.dtype:
    """Accumulate f32/f64 in f64 (rounded once at the end); integers, complex numbers and
    floats narrower than f32 in their own type. (Products of floats and complex numbers are
    computed in their type too: products.py.)"""
    dt = from_numpy(dtype)
    return np.dtype(np.float64) if dt.is_float and not in_order(dtype) else dtype


def _inexact(dtype: np.dtype) -> bool:
    dt = from_numpy(dtype)
    return dt.is_float or dt.is_complex


def _ufunc_reduce(ufunc: np.ufunc, x: np.ndarray, init: np.ndarray, axes: tuple[int, ...],
                  flush: bool) -> np.ndarray:
    r = _ufunc_reduce_raw(ufunc, x, init, axes, flush)
    if ufunc not in (np.maximum, np.minimum) or not from_numpy(x.dtype).is_float:
        return r
    # -0 < +0 (as the elementwise max/min and jax.jit): a zero maximum is +0 when any +0 is
    # reduced, a zero minimum -0 when any -0 is
    want_neg = ufunc is np.minimum
    xf, i = x.astype(np.float64), np.asarray(init).astype(np.float64)
    hit = np.any((xf == 0) & (np.signbit(xf) == want_neg), axis=axes)
    hit = hit | ((i == 0) & (np.signbit(i) == want_neg))
    rf = np.asarray(r).astype(np.float64)
    zero = np.where(hit == want_neg, -0.0, 0.0)
    return np.where(rf == 0, zero, rf).astype(x.dtype)


def _ufunc_reduce_raw(ufunc: np.ufunc, x: np.ndarray, init: np.ndarray,
                      axes: tuple[int, ...], flush: bool) -> np.ndarray:
    acc = _accumulator(x.dtype)
    if any(x.shape[a] == 0 for a in axes):
        shape = [n for i, n in enumerate(x.shape) if i not in axes]
        return np.broadcast_to(init, shape).astype(x.dtype)
    keep = [d for d in range(x.ndim) if d not in axes]
    out_dims = [x.shape[d] for d in keep]
    if ufunc is np.multiply and _inexact(x.dtype):  # in the type, in order (products.py)
        rows = np.transpose(x, keep + list(axes)).reshape(math.prod(out_dims), -1)
        return product(rows, init, flush).reshape(out_dims)
    if in_order(x.dtype):  # init, then the elements one by one, rounding each time
        rows = np.transpose(x, keep + list(axes)).reshape(math.prod(out_dims), -1)
        first = np.broadcast_to(init.astype(x.dtype), (rows.shape[0], 1))
        total = ufunc.accumulate(np.concatenate([first, rows], axis=1), axis=1)[:, -1]
        return total.reshape(out_dims)
    r = ufunc.reduce(x.astype(acc, copy=False), axis=axes, dtype=acc)
    return np.asarray(ufunc(r, init.astype(acc))).astype(x.dtype)


def tree_reduce(
    interp: Interpreter,
    comp: Computation,
    columns: list[np.ndarray],
    inits: list[np.ndarray],
) -> list[np.ndarray]:
    """Reduce (M, K) arrays along axis 1 with a vectorisable reducer, pairwise, then combine
    with the init values: returns (M,) arrays."""
    m = columns[0].shape[0]
    acc = [np.broadcast_to(i, (m,)).copy() for i in inits]
    k = columns[0].shape[1]
    if k == 0:
        return acc
    cur = columns
    while k > 1:
        h = k // 2
        left = [c[:, 0 : 2 * h : 2] for c in cur]
        right = [c[:, 1 : 2 * h : 2] for c in cur]
        comb = interp.apply_scalar(comp, left + right)
        if k % 2:
            comb = [np.concatenate([c, r[:, 2 * h :]], axis=1) for c, r in zip(comb, cur)]
        cur = comb
        k = h + k % 2
    return interp.apply_scalar(comp, acc + [c[:, 0] for c in cur])


def ordered_reduce(
    interp: Interpreter, comp: Computation, columns: list[np.ndarray], inits: list[np.ndarray]
) -> list[np.ndarray]:
    """Reduce (M, K) arrays along axis 1 with a vectorisable reducer, in order: the init values,
    then column after column (floats narrower than f32)."""
    m = columns[0].shape[0]
    acc = [np.broadcast_to(i, (m,)).copy() for i in inits]
    for j in range(columns[0].shape[1]):
        acc = interp.apply_scalar(comp, acc + [c[:, j] for c in columns])
    return acc


def init_last_reduce(
    interp: Interpreter, comp: Computation, columns: list[np.ndarray], inits: list[np.ndarray],
    last: tuple[bool, ...],
) -> list[np.ndarray]:
    """Reduce (M, K>0) arrays along axis 1 in order, output k's init folded last where
    `last[k]` (else first), as XLA's CPU reduces f8e8m0fnu from the constant 2^-127
    (`subnormals.e8m0_init_last`: mixed flags only for independent outputs, so one tuple of
    steps serves them all); each step is the reducer's e8m0 op (on f32 values under DAZ/FTZ,
    rounded back: flush.py)."""
    m = columns[0].shape[0]
    full = [np.broadcast_to(i, (m,)) for i in inits]
    seqs = [[c[:, j] for j in range(c.shape[1])] + [i] if lst else [i] +
            [c[:, j] for j in range(c.shape[1])]
            for c, i, lst in zip(columns, full, last, strict=True)]
    acc = [seq[0] for seq in seqs]
    for j in range(1, len(seqs[0])):
        acc = interp.apply_scalar(comp, acc + [seq[j] for seq in seqs])
    return acc


def _sequential_reduce(
    interp: Interpreter, comp: Computation, columns: list[np.ndarray], inits: list[np.ndarray]
) -> list[np.ndarray]:
    m, k = columns[0].shape
    outs = [np.empty((m,), dtype=c.dtype) for c in columns]
    for row in range(m):
        acc = [np.asarray(i) for i in inits]
        for j in range(k):
            acc = as_list(interp.call(comp, acc + [np.asarray(c[row, j]) for c in columns]))
        for o, a in zip(outs, acc, strict=True):
            o[row] = a
    return outs


def _reducer(instr: Instruction) -> Computation:
    comp = instr.attrs.get("to_apply")
    if comp is None:
        raise unsupported(instr, "missing to_apply= reducer")
    return comp


@handles(Opcode.REDUCE)
def _reduce(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Any:
    n = len(ops) // 2
    inputs = [np.asarray(o) for o in ops[:n]]
    inits = [np.asarray(o).reshape(()) for o in ops[n:]]
    axes = tuple(sorted(int(d) for d in instr.dimensions))
    comp = _reducer(instr)
    if all(inputs[0].shape[d] == 1 for d in axes):
        # one element per output: XLA's algebraic simplifier makes the reduce a reshape (the
        # init and the reducer are not applied: sum([-0.0]) is -0.0, prod([0.5+infj]) keeps it)
        out = [x.reshape([x.shape[d] for d in range(x.ndim) if d not in axes]) for x in inputs]
        return tuple(out) if isinstance(instr.shape, TupleShape) else out[0]
    e8m0 = runs_e8m0_ops(interp.flush, inputs)
    if n == 1:
        simple = simple_reducer(comp)
        ufuncs = None if simple is None else [simple]
    else:
        ufuncs = parallel_reducers(comp)
    if ufuncs is not None and not e8m0:
        outs = [_ufunc_reduce(u, x, i, axes, interp.flush)
                for u, x, i in zip(ufuncs, inputs, inits, strict=True)]
        return tuple(outs) if isinstance(instr.shape, TupleShape) else outs[0]
    x0 = inputs[0]
    keep = [d for d in range(x0.ndim) if d not in axes]
    out_dims = [x0.shape[d] for d in keep]
    m = math.prod(out_dims)
    k = math.prod(x0.shape[d] for d in axes)
    columns = [np.transpose(x, keep + list(axes)).reshape(m, k) for x in inputs]
    last = e8m0_init_last(instr) if e8m0 else ()
    if k > 0 and any(last) and interp.is_vectorizable(comp):
        outs = init_last_reduce(interp, comp, columns, inits, last)
    elif interp.is_vectorizable(comp) and (e8m0 or any(in_order(x.dtype) for x in inputs)):
        outs = ordered_reduce(interp, comp, columns, inits)
    elif interp.is_vectorizable(comp):
        outs = tree_reduce(interp, comp, columns, inits)
    else:
        outs = _sequential_reduce(interp, comp, columns, inits)
    results = [o.reshape(out_dims).astype(x.dtype, copy=False) for o, x in zip(outs, inputs)]
    return tuple(results) if isinstance(instr.shape, TupleShape) else results[0]


# ----- reduce-window ----------------------------------------------------------------------

# The most element steps one reduce-window may take: window positions read times output
# elements, each position counted as at least _POSITION_STEPS (its Python and numpy overhead).
# Past it the run stops with an InterpreterLimitError naming the instruction.
MAX_WINDOW_WORK = 1 << 36
_POSITION_STEPS = 1 << 10
_PAIR_SCAN = 1 << 16  # at most this many (output, element) pairs are scanned for live offsets


def _identity(ufunc: np.ufunc, dtype: np.dtype) -> Any:
    """The value `v` with ufunc(acc, v) == acc for every accumulator value, or None."""
    dt = from_numpy(dtype)
    if ufunc is np.multiply and dt.is_complex:
        return None  # XLA's fused multiply: (inf-infj) * (1+0j) is NaN, so padding must not fold
    if ufunc in (np.add, np.logical_or, np.logical_xor, np.bitwise_or, np.bitwise_xor):
        return 0
    if ufunc in (np.multiply, np.logical_and):
        return 1
    if ufunc is np.bitwise_and:
        return ~np.zeros((), dtype)
    if ufunc in (np.maximum, np.minimum):
        sign = -1 if ufunc is np.maximum else 1
        if dt.is_float:
            return sign * np.inf
        info = np.iinfo(dtype)
        return info.min if sign < 0 else info.max
    return None


class _Axis:
    """One window dimension over the operand padded without building the padding: the operand
    index each output position reads at window offset k (`n`, one past the end, where it reads
    padding or a base-dilation hole)."""

    def __init__(self, n: int, w: Any) -> None:
        self.n, self.size, self.stride, self.dilation = n, w.size, w.stride, w.window_dilation
        self.lo, self.base = w.pad_lo, w.base_dilation
        padded = max(w.pad_lo + ((n - 1) * w.base_dilation + 1 if n else 0) + w.pad_hi, 0)
        span = (w.size - 1) * w.window_dilation + 1
        self.out = (padded - span) // w.stride + 1 if padded >= span else 0

    def index(self, k: int) -> np.ndarray:
        start = k * self.dilation - self.lo
        last = start + (self.out - 1) * self.stride
        if max(abs(start), abs(last)) >= 1 << 62:  # beyond int64 arithmetic: Python ints
            ps = (start + o * self.stride for o in range(self.out))
            return np.array([p // self.base if p >= 0 and p % self.base == 0
                             and p // self.base < self.n else self.n for p in ps], np.int64)
        p = np.arange(self.out, dtype=np.int64) * self.stride + start
        hit = (p >= 0) & (p % self.base == 0) & (p // self.base < self.n)
        return np.where(hit, p // self.base, self.n)

    def live(self) -> Sequence[int]:
        """The window offsets at which some output position reads an operand element, in
        order (every offset where finding them would cost more than reading them)."""
        if self.out * self.n > min(self.size, _PAIR_SCAN):
            return range(self.size)
        found = set()
        for o in range(self.out):
            for i in range(self.n):
                k, r = divmod(i * self.base + self.lo - o * self.stride, self.dilation)
                if r == 0 and 0 <= k < self.size:
                    found.add(k)
        return sorted(found)


def _window_reads(exts: list[np.ndarray], axes: list[_Axis],
                  positions: Iterable[tuple[int, ...]]) -> Any:
    """Yield, for each window position (in the order of `positions`), the output-shaped values
    each extended operand (the operand with one trailing init slice per dimension) gives, and
    the output-shaped mask of the outputs that read an operand element there."""
    index: list[dict[int, np.ndarray]] = [{} for _ in axes]
    for pos in positions:
        for d, k in enumerate(pos):
            if k not in index[d]:
                index[d][k] = axes[d].index(k)
        grid = np.ix_(*(index[d][k] for d, k in enumerate(pos)))
        hit = np.ones((), bool)
        for a, g in zip(axes, grid, strict=True):
            hit = hit & (g != a.n)
        yield [e[grid] for e in exts], hit


@handles(Opcode.REDUCE_WINDOW)
def _reduce_window(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Any:
    """Each output folds the operand elements of its window into the init value, in the order
    XLA's CPU loop nest visits them (`window_order`: row-major, or with one window dimension's
    last offset peeled off to the end); a position in the padding or in a base-dilation hole
    contributes nothing (XLA's CPU and its evaluator skip them:
    `reduce_window(ones(4), 1.0, add, (3,), (1,), [(1, 1)])` is [3, 4, 4, 3], not 4s). The
    padded operand is never built: memory is the operand plus a few output-sized arrays, and
    window offsets that read only padding are skipped."""
    n = len(ops) // 2
    inputs = [np.asarray(o) for o in ops[:n]]
    inits = [np.asarray(o).reshape(()) for o in ops[n:]]
    window = instr.attrs.get("window")
    rank = inputs[0].ndim
    if window is None and rank == 0:
        window = ()  # a scalar's window is empty: one position, reducer(init, x)
    if window is None:
        raise unsupported(instr, "reduce-window needs a window= attribute")
    if len(window) != rank:
        raise unsupported(instr, f"window has {len(window)} dimensions, operand rank {rank}")
    if any(w.reversal for w in window):
        raise unsupported(instr, "window reversal is not defined for reduce-window")
    axes = [_Axis(d, w) for d, w in zip(inputs[0].shape, window, strict=True)]
    out_dims = [a.out for a in axes]
    comp = _reducer(instr)
    e8m0 = runs_e8m0_ops(interp.flush, inputs)
    ufunc = simple_reducer(comp) if n == 1 and not e8m0 else None
    # the init is the reducer's identity: folding it where a position reads padding changes
    # nothing, so no mask is needed
    identity = ufunc is not None and \
        _is(inits[0], _identity(ufunc, _accumulator(inputs[0].dtype)))
    offsets = [a.live() for a in axes]
    if math.prod(out_dims):
        positions = math.prod(len(o) for o in offsets)
        work = positions * max(math.prod(out_dims), _POSITION_STEPS)
        if work > MAX_WINDOW_WORK:
            raise InterpreterLimitError(
                f"reduce-window ({where(instr)}) reads {positions} window positions for "
                f"{math.prod(out_dims)} outputs: {work} element steps, more than the "
                f"interpreter's limit of {MAX_WINDOW_WORK} "
                "(hlofuse.backends.interpreter.reductions.MAX_WINDOW_WORK)")
    else:
        offsets = [()] * rank
    exts = [pad_array(x, i, [(0, 1, 0)] * rank) for x, i in zip(inputs, inits, strict=True)]
    order = window_order(inputs[0].shape, window, out_dims, offsets)
    reads = _window_reads(exts, axes, order)
    if ufunc is not None:
        multiplies = ufunc is np.multiply and _inexact(inputs[0].dtype)
        acc_t = inputs[0].dtype if multiplies else _accumulator(inputs[0].dtype)
        acc = np.broadcast_to(inits[0].astype(acc_t), out_dims).copy()
        for (view,), hit in reads:
            new = multiply_step(acc, view, interp.flush) if multiplies else \
                ufunc(acc, view.astype(acc_t, copy=False))
            acc = new if identity else np.where(hit, new, acc)
        return acc.astype(inputs[0].dtype)
    accs = [np.broadcast_to(i, out_dims).copy() for i in inits]
    for views, hit in reads:
        new = interp.apply_scalar(comp, accs + views)
        accs = [np.where(hit, x, a) for x, a in zip(new, accs, strict=True)]
    results = [a.reshape(out_dims).astype(x.dtype) for a, x in zip(accs, inputs, strict=True)]
    return tuple(results) if isinstance(instr.shape, TupleShape) else results[0]


def _is(value: np.ndarray, identity: Any) -> bool:
    """`value` equals `identity` (NaN never does)."""
    return identity is not None and bool(value == np.asarray(identity).astype(value.dtype))


# ----- dot --------------------------------------------------------------------------------


def contract_dtype(out: np.dtype) -> np.dtype:
    """The dtype products are computed in for a result of type `out`."""
    dt = from_numpy(out)
    if dt.is_complex:
        return np.dtype(np.complex128)
    if dt.is_float:
        return np.dtype(np.float64)
    if dt.is_pred:
        return np.dtype(np.int64)
    return np.dtype(np.uint64) if dt.kind == "unsigned" else np.dtype(np.int64)


def finish_contraction(value: np.ndarray, out: np.dtype) -> np.ndarray:
    dt = from_numpy(out)
    if dt.is_pred:
        return np.asarray(value != 0)
    if dt.is_narrow_int:
        return wrap(np.asarray(value).astype(np.int64), dt)
    return np.asarray(value).astype(out)


def dot_general(lhs: np.ndarray, rhs: np.ndarray, dims: Sequence[Sequence[int]],
                out: np.dtype) -> np.ndarray:
    """dot_general of `lhs` and `rhs` with `dims` = (lhs batch, rhs batch, lhs contracting,
    rhs contracting): result dimensions batch, lhs free, rhs free; in the contraction type of
    `out`, rounded (or wrapped) to `out`."""
    lb, rb, lc, rc = ([int(d) for d in ds] for ds in dims)
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    lhs_sub = [""] * lhs.ndim
    rhs_sub = [""] * rhs.ndim
    out_sub = []
    for l_, r_ in zip(lb, rb, strict=True):
        c = next(letters)
        lhs_sub[l_] = rhs_sub[r_] = c
        out_sub.append(c)
    for l_, r_ in zip(lc, rc, strict=True):
        c = next(letters)
        lhs_sub[l_] = rhs_sub[r_] = c
    for i in range(lhs.ndim):
        if not lhs_sub[i]:
            lhs_sub[i] = next(letters)
            out_sub.append(lhs_sub[i])
    for i in range(rhs.ndim):
        if not rhs_sub[i]:
            rhs_sub[i] = next(letters)
            out_sub.append(rhs_sub[i])
    ct = contract_dtype(out)
    spec = f"{''.join(lhs_sub)},{''.join(rhs_sub)}->{''.join(out_sub)}"
    if any(from_numpy(d).is_complex for d in (lhs.dtype, rhs.dtype, out)):
        return complex_dot(spec, lhs, rhs, from_numpy(out))
    dt = from_numpy(out)
    if dt.is_float:  # XLA converts integral operands to a float result's type first
        from hlofuse.backends.interpreter.conversions import convert as to_type

        lhs, rhs = (to_type(x, dt) if not from_numpy(x.dtype).is_float else x
                    for x in (lhs, rhs))
    floats = [from_numpy(x.dtype) for x in (lhs, rhs) if from_numpy(x.dtype).is_float]
    if floats and not (dt.is_float or dt.is_complex):
        # XLA multiplies and sums float operands as floats (in the widest operand type) and
        # converts the sum to an integral result (truncating, saturating, NaN -> 0)
        from hlofuse.backends.interpreter.conversions import convert

        value = np.einsum(spec, lhs.astype(np.float64), rhs.astype(np.float64), optimize=True)
        wide = np.float64 if any(f.bits == 64 for f in floats) else np.float32
        value = np.asarray(value).astype(wide)
        if len(floats) == 2 and len({f.name for f in floats}) == 1 and floats[0].bits < 32:
            # an f16/bf16/fp8 sum is rounded to the operand type before the conversion
            # (jax.jit, measured on f16/bf16/f8e5m2/f8e4m3fn to s8..u64); fp8 through f16
            if dot_rounds_through_f16(floats[0]):
                value = value.astype(np.float16)
            value = value.astype(lhs.dtype)
        return convert(value, dt)
    value = np.einsum(spec, lhs.astype(ct), rhs.astype(ct), optimize=True)
    return finish_contraction(value, out)


def dot_dims(instr: Instruction) -> list[list[int]]:
    """(lhs batch, rhs batch, lhs contracting, rhs contracting) of a dot-like instruction."""
    a = instr.attrs
    dims = [[int(d) for d in a.get(k, ())] for k in (
        "lhs_batch_dims", "rhs_batch_dims", "lhs_contracting_dims", "rhs_contracting_dims")]
    if len(dims[0]) != len(dims[1]) or len(dims[2]) != len(dims[3]):
        raise unsupported(instr, "batch/contracting dimension lists differ in length")
    return dims


@handles(Opcode.DOT)
def _dot(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    lhs, rhs = np.asarray(ops[0]), np.asarray(ops[1])
    result = dot_general(lhs, rhs, dot_dims(instr), out_np(instr))
    return result.reshape(array_shape(instr).dims)
