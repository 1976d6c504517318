"""convolution with general `dim_labels` (e.g. `b01f_01io->b01f`), window strides, padding,
lhs (base) and rhs (window) dilation, window reversal, feature_group_count and
batch_group_count.

The input is brought to (batch, feature, spatial...) and the kernel to (out, in, spatial...);
the input is padded (zeros, with base dilation as interior padding); then for each kernel
position the strided input window is contracted with that kernel tap (np.einsum) and summed.
Floats are accumulated in f64 and rounded to the result type; integers wrap like dot.

Padding, base-dilation holes and XLA's group expansions, with an inf or NaN in the input or the
kernel (`conv_plan.plan`, read from XLA's CPU pipeline and measured against jax.jit): where XLA
skips padding and holes, each tap's contribution is masked where the tap reads padding (for
one tap, an output position reads one input position); where it multiplies them, their zeros
meet the kernel (0 x inf = NaN); `_cross_groups` adds the NaN its batch-group and depthwise
feature-group expansions make across groups.

Groups follow XLA's HloEvaluator: with feature_group_count G, output feature z reads input
features [g*C/G, (g+1)*C/G) for g = z // (O/G); with batch_group_count B, output feature z reads
input batch group z // (O/B), and the output batch is N/B.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from hlofuse.backends.conv_plan import ConvPlan, parse_dim_labels, plan_for
from hlofuse.backends.interpreter.core import (
    Interpreter,
    array_shape,
    handles,
    out_np,
    unsupported,
)
from hlofuse.backends.interpreter.reductions import contract_dtype, finish_contraction
from hlofuse.backends.interpreter.shaping import pad_array
from hlofuse.ir.attributes import WindowDim
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode


@handles(Opcode.CONVOLUTION)
def _convolution(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
    return convolve(instr, ops)


def convolve(instr: Instruction, ops: list[Any], entry: bool | None = None) -> np.ndarray:
    """The convolution `instr` of `ops`; `entry` says whether XLA would see it in the entry
    computation (`conv_plan.in_entry`, found from `instr.parent` when None): a caller holding
    no module (`kernel_ir/pyprint.py`) passes what the lowering recorded."""
    labels = instr.attrs.get("dim_labels")
    if labels is None:
        raise unsupported(instr, "convolution needs dim_labels=")
    try:
        lp, rp, op = parse_dim_labels(str(labels))
    except ValueError as exc:
        raise unsupported(instr, str(exc)) from None
    out = out_np(instr)
    ct = contract_dtype(out)
    lhs = np.transpose(np.asarray(ops[0]), lp).astype(ct)
    rhs = np.transpose(np.asarray(ops[1]), rp).astype(ct)
    nsp = lhs.ndim - 2
    window = instr.attrs.get("window") or tuple(WindowDim(size=s) for s in rhs.shape[2:])
    if len(window) != nsp:
        raise unsupported(instr, f"window has {len(window)} dims, convolution has {nsp}")
    fgc = int(instr.attrs.get("feature_group_count", 1))
    bgc = int(instr.attrs.get("batch_group_count", 1))
    if fgc > 1 and bgc > 1:
        raise unsupported(instr, "feature_group_count and batch_group_count both > 1")
    for d, w in enumerate(window):
        if w.reversal:
            rhs = np.flip(rhs, axis=2 + d)
    n, c = lhs.shape[:2]
    o = rhs.shape[0]
    groups = max(fgc, bgc)
    if c % fgc or c // fgc != rhs.shape[1] or o % groups or n % bgc:
        raise unsupported(
            instr,
            f"feature_group_count={fgc}, batch_group_count={bgc} do not fit input features "
            f"{c}, kernel input features {rhs.shape[1]}, output features {o}, batch {n}",
        )
    plan = plan_for(instr, entry)
    config = [(0, 0, 0), (0, 0, 0)] + [(w.pad_lo, w.pad_hi, w.base_dilation - 1) for w in window]
    real = None  # where the padded input is the input (not padding, not a hole)
    if plan.skips and any(w.pad_lo > 0 or w.pad_hi > 0 or w.base_dilation > 1 for w in window):
        real = pad_array(np.ones(lhs.shape[2:], bool), np.zeros((), bool), config[2:])
    bad = None  # non-finite input elements, where other groups' zeros multiply them
    if plan.input_cross and not np.isfinite(lhs).all():
        bad = pad_array(~np.isfinite(lhs), np.zeros((), bool), config)
    lhs = pad_array(lhs, np.zeros((), ct), config)
    out_sp = []
    for d, w in enumerate(window):
        span = (rhs.shape[2 + d] - 1) * w.window_dilation + 1
        size = lhs.shape[2 + d]
        out_sp.append((size - span) // w.stride + 1 if size >= span else 0)
    og = o // groups
    cg = c // fgc
    nb = n // bgc
    result = np.zeros((nb, o, *out_sp), dtype=ct)
    hits = np.zeros((n, c, *out_sp), bool) if bad is not None else None
    if all(out_sp) and result.size:
        for pos in itertools.product(*[range(k) for k in rhs.shape[2:]]):
            taps = [
                slice(p * w.window_dilation, p * w.window_dilation + w.stride * (s - 1) + 1,
                      w.stride)
                for p, w, s in zip(pos, window, out_sp, strict=True)
            ]
            index = (slice(None), slice(None), *taps)
            view = lhs[index]
            at: tuple[slice | int, ...] = (slice(None), slice(None), *pos)
            tap = rhs[at]
            if hits is not None and bad is not None:
                hits |= bad[index]
            for g in range(groups):
                zs = slice(g * og, (g + 1) * og)
                if bgc > 1:
                    part = view[g * nb : (g + 1) * nb]
                else:
                    part = view[:, g * cg : (g + 1) * cg]
                term = np.einsum("nc...,oc->no...", part, tap[zs], optimize=True)
                if real is not None:
                    term = np.where(real[tuple(taps)], term, 0)
                result[:, zs] += term
    _cross_groups(plan, result, rhs, hits, groups)
    final = finish_contraction(result, out)
    inverse = np.argsort(op)
    return np.asarray(np.transpose(final, inverse), order="C").reshape(array_shape(instr).dims)


def _cross_groups(plan: ConvPlan, result: np.ndarray, rhs: np.ndarray,
                  hits: np.ndarray | None, groups: int) -> None:
    """The NaN XLA's group expansions add (conv_plan.py): with `input_cross` (one input
    feature per group) an output feature is NaN where the window reads a non-finite input of
    another feature (`hits`: per input feature); with `kernel_cross` output feature f of group
    p is NaN where feature f of another group has a non-finite kernel value."""
    if hits is None and not plan.kernel_cross:
        return
    og = result.shape[1] // groups
    nan = np.array(complex(np.nan, np.nan) if result.dtype.kind == "c" else np.nan,
                   result.dtype)
    if hits is not None:
        total = hits.sum(axis=1)
        for z in range(result.shape[1]):
            g = z // og
            result[:, z][total - hits[:, g] > 0] = nan
    if plan.kernel_cross:
        finite = np.isfinite(rhs.reshape(groups, og, -1)).all(axis=2)  # (group, feature)
        for p in range(groups):
            others = np.delete(finite, p, axis=0).all(axis=0)
            for f in np.flatnonzero(~others):
                result[:, p * og + f] = nan
