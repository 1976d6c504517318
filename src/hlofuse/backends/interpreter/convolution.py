"""convolution with general `dim_labels` (e.g. `b01f_01io->b01f`), window strides, padding,
lhs (base) and rhs (window) dilation, window reversal, feature_group_count and
batch_group_count.

The input is brought to (batch, feature, spatial...) and the kernel to (out, in, spatial...);
the input is padded (zeros, with base dilation as interior padding); then for each kernel
position the strided input window is contracted with that kernel tap (np.einsum) and summed.
Floats are accumulated in f64 and rounded to the result type; integers wrap like dot.

Padding and base-dilation holes, with an inf or NaN in the kernel (`skips_padding`, measured
against jax.jit on CPU): XLA's elemental convolution skips them (a window lying in the padding
is 0), its runtime convolution for f16, bf16, f32 and c64 (Eigen) multiplies their zeros by the
kernel (0 x inf = NaN). Which one runs: the runtime one for those types, except (the elemental
one) with base dilation in 1 or 2 spatial dims at window stride 1, no window dilation and no
feature groups (a transposed convolution), batch groups in other than 2 spatial dims, more
than 3 spatial dims, or an input, kernel (feature groups expanded) or result of at most 8 bytes
at 4 bytes an element (XLA's `PotentiallyImplementedAsEigenConvolution` wants 16-byte aligned
buffers, and smaller ones are allocated less aligned; f16 and bf16 are convolved as f32); the
elemental one for every other type (f64, c128). Measured on random small 1-D and 2-D f16/f32
convolutions: the rule picks XLA's choice in 413 of 448 informative cases (a few small
grouped or one-output ones still skip in XLA). When skipping, each tap's contribution is
masked where the tap reads padding (for one tap, an output position reads one input position).

Groups follow XLA's HloEvaluator: with feature_group_count G, output feature z reads input
features [g*C/G, (g+1)*C/G) for g = z // (O/G); with batch_group_count B, output feature z reads
input batch group z // (O/B), and the output batch is N/B.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

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


def parse_dim_labels(text: str) -> tuple[list[int], list[int], list[int]]:
    """`b01f_01io->b01f` -> (lhs, rhs, out) permutations to (b|o, f|i, spatial...) order."""
    text = text.strip().strip("{}").strip()
    try:
        lhs, rest = text.split("_", 1)
        rhs, out = rest.split("->", 1)
    except ValueError:
        raise ValueError(f"malformed dim_labels {text!r}") from None
    n = len(lhs) - 2
    spatial = [str(i) for i in range(n)]

    def perm(labels: str, first: str, second: str) -> list[int]:
        wanted = [first, second, *spatial]
        if sorted(labels) != sorted(wanted):
            raise ValueError(f"malformed dim_labels {text!r}")
        return [labels.index(c) for c in wanted]

    return perm(lhs, "b", "f"), perm(rhs, "o", "i"), perm(out, "b", "f")


# element types XLA's CPU convolves in its runtime (Eigen) library, which reads padding as zeros
_RUNTIME_TYPES = frozenset({"f16", "bf16", "f32", "c64"})


def skips_padding(element_type: str, window: tuple[WindowDim, ...], bgc: int, fgc: int,
                  sizes: tuple[int, int, int]) -> bool:
    """Whether XLA's CPU skips padding and base-dilation holes of a convolution (rather than
    multiplying their zeros by the kernel): module docstring. `sizes`: the elements of the
    input, kernel and result."""
    nsp = len(window)
    if element_type not in _RUNTIME_TYPES or nsp > 3:
        return True
    unit = 8 if element_type == "c64" else 4
    lhs, rhs, out = sizes
    if min(lhs, rhs * fgc, out) * unit <= 8:
        return True  # under-aligned buffers: the elemental convolution
    if nsp <= 2 and any(w.base_dilation > 1 for w in window) and fgc == 1 and all(
            w.stride == 1 and w.window_dilation == 1 for w in window):
        return True
    return bgc > 1 and nsp != 2


@handles(Opcode.CONVOLUTION)
def _convolution(interp: Interpreter, instr: Instruction, ops: list[Any]) -> np.ndarray:
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
    config = [(0, 0, 0), (0, 0, 0)] + [(w.pad_lo, w.pad_hi, w.base_dilation - 1) for w in window]
    real = None  # where the padded input is the input (not padding, not a hole)
    sizes = (lhs.size, rhs.size, array_shape(instr).size)
    if skips_padding(str(instr.operand(0).shape.dtype.name), tuple(window), bgc, fgc,
                     sizes) and any(
            w.pad_lo > 0 or w.pad_hi > 0 or w.base_dilation > 1 for w in window):
        real = pad_array(np.ones(lhs.shape[2:], bool), np.zeros((), bool), config[2:])
    lhs = pad_array(lhs, np.zeros((), ct), config)
    n, c = lhs.shape[:2]
    o = rhs.shape[0]
    out_sp = []
    for d, w in enumerate(window):
        span = (rhs.shape[2 + d] - 1) * w.window_dilation + 1
        size = lhs.shape[2 + d]
        out_sp.append((size - span) // w.stride + 1 if size >= span else 0)
    groups = max(fgc, bgc)
    if c % fgc or c // fgc != rhs.shape[1] or o % groups or n % bgc:
        raise unsupported(
            instr,
            f"feature_group_count={fgc}, batch_group_count={bgc} do not fit input features "
            f"{c}, kernel input features {rhs.shape[1]}, output features {o}, batch {n}",
        )
    og = o // groups
    cg = c // fgc
    nb = n // bgc
    result = np.zeros((nb, o, *out_sp), dtype=ct)
    if all(out_sp) and result.size:
        for pos in itertools.product(*[range(k) for k in rhs.shape[2:]]):
            taps = [
                slice(p * w.window_dilation, p * w.window_dilation + w.stride * (s - 1) + 1,
                      w.stride)
                for p, w, s in zip(pos, window, out_sp, strict=True)
            ]
            index = (slice(None), slice(None), *taps)
            view = lhs[index]
            tap = rhs[(slice(None), slice(None), *pos)]
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
    final = finish_contraction(result, out)
    inverse = np.argsort(op)
    return np.asarray(np.transpose(final, inverse), order="C").reshape(array_shape(instr).dims)
