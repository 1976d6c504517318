"""What a convolution computes, read off its HLO attributes once for the three C routines
(`conv.py`'s direct loop nest, `conv_gemm.py`'s im2col + GEMM, `conv_grouped.py`'s loop over
output features).

Every dimension is named in logical order, as in `backends/interpreter/convolution.py`: the
input (lhs) as (batch, feature, spatial...), the kernel (rhs) as (output feature, input feature,
spatial...), the result as (batch, feature, spatial...); `ls`, `rs`, `os` are the row-major
element strides of those logical dimensions in each operand's physical layout (`dim_labels`).

    out[b, z, s...] = sum over taps t... and kernel input features c
                      lhs[b', c0 + c, x...] * rhs[z, c, t...]
    x_d = (s_d * stride_d + k_d * rhs_dilation_d - pad_lo_d) / lhs_dilation_d   (skipped when
          not an integer or outside the input: padding and base-dilation holes read zero)
    k_d = K_d - 1 - t_d when window dimension d is reversed, else t_d

with groups g = z / og (og = output features per group): c0 = g * ci with feature groups,
b' = g * nb + b with batch groups (nb: the result's batch).

Conditions enforced (`LibraryOpError` naming the instruction otherwise): array operands and
result of one rank, well-formed `dim_labels`, a window of that many spatial dimensions, not both
group counts > 1, group counts that divide the features and batch as XLA requires. Complex,
sub-byte and 8-/4-bit float values raise `UnsupportedOpError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hlofuse.backends.cpu.cexpr import UnsupportedOpError
from hlofuse.backends.cpu.library.errors import LibraryOpError
from hlofuse.backends.interpreter.convolution import parse_dim_labels
from hlofuse.backends.kernel_ir.libop import LibOp
from hlofuse.ir.attributes import WindowDim
from hlofuse.ir.shape import ArrayShape


@dataclass(frozen=True)
class ConvSpec:
    op: LibOp
    lhs: ArrayShape
    rhs: ArrayShape
    out: ArrayShape
    labels: str
    window: tuple[WindowDim, ...]
    ksizes: tuple[int, ...]      # kernel taps per spatial dimension
    in_sizes: tuple[int, ...]    # input extent per spatial dimension
    out_sizes: tuple[int, ...]   # result extent per spatial dimension
    fgc: int                     # feature_group_count
    bgc: int                     # batch_group_count
    n: int                       # input batch
    c: int                       # input features
    o: int                       # output features
    ci: int                      # kernel input features (per group)
    nb: int                      # result batch
    ls: tuple[int, ...]          # input strides: batch, feature, spatial...
    rs: tuple[int, ...]          # kernel strides: output feature, input feature, spatial...
    os: tuple[int, ...]          # result strides: batch, feature, spatial...

    @property
    def nsp(self) -> int:
        return len(self.ksizes)

    @property
    def groups(self) -> int:
        return max(self.fgc, self.bgc)

    @property
    def og(self) -> int:
        """Output features per group."""
        return self.o // self.groups

    @property
    def taps(self) -> int:
        return math.prod(self.ksizes)

    @property
    def empty(self) -> bool:
        """Nothing to read or nothing to write: no input, taps, features or positions."""
        return (self.lhs.size == 0 or self.ci == 0 or self.o == 0 or self.nb == 0
                or 0 in self.ksizes or 0 in self.out_sizes)

    @property
    def work(self) -> int:
        """Multiply-adds of the direct definition (padding and holes included)."""
        return self.out.size * self.ci * self.taps

    def group_offset(self, g: str) -> str:
        """C expression: the input element offset of group `g` (a C expression)."""
        if self.bgc > 1:
            return f"({g}) * {self.nb * self.ls[0]}"
        if self.fgc > 1:
            return f"({g}) * {self.ci * self.ls[1]}"
        return "0"


def _strides(dims: tuple[int, ...], perm: list[int]) -> tuple[int, ...]:
    """Row-major strides of the logical dimensions `perm` (physical axis per logical one)."""
    phys = [math.prod(dims[a + 1 :]) for a in range(len(dims))]
    return tuple(phys[a] for a in perm)


def parse(conv: LibOp) -> ConvSpec:
    """The convolution `conv` as a `ConvSpec` (see the module docstring for what is checked)."""
    lhs, rhs = conv.operands
    out = conv.shape
    if not (isinstance(lhs, ArrayShape) and isinstance(rhs, ArrayShape)
            and isinstance(out, ArrayShape)):
        raise LibraryOpError(conv, "convolution needs array operands and result")
    for s in (lhs, rhs, out):
        dt = s.dtype
        if dt.is_complex or dt.is_narrow_int or dt.is_small_float:
            raise UnsupportedOpError(
                f"{conv.site}: the cpu backend's convolution does not "
                f"support element type {dt} (complex, sub-byte and 8-/4-bit float "
                "convolutions are not implemented); the interpreter backend runs it")
    labels = conv.attr("dim_labels")
    if labels is None:
        raise LibraryOpError(conv, "convolution needs dim_labels=")
    try:
        lp, rp, op = parse_dim_labels(str(labels))
    except ValueError as exc:
        raise LibraryOpError(conv, str(exc)) from None
    if not (len(lp) == lhs.rank == rhs.rank == out.rank):
        raise LibraryOpError(conv, f"dim_labels={labels} do not fit operand ranks "
                             f"{lhs.rank}, {rhs.rank} and result rank {out.rank}")
    nsp = lhs.rank - 2
    ksizes = tuple(rhs.dims[rp[2 + d]] for d in range(nsp))
    window: tuple[WindowDim, ...] = conv.attr("window") or tuple(
        WindowDim(size=s) for s in ksizes)
    if len(window) != nsp:
        raise LibraryOpError(conv, f"window has {len(window)} dims, convolution has {nsp}")
    if any(w.stride < 1 or w.window_dilation < 1 or w.base_dilation < 1 for w in window):
        raise LibraryOpError(conv, "window strides and dilations must be positive")
    fgc = int(conv.attr("feature_group_count", 1))
    bgc = int(conv.attr("batch_group_count", 1))
    if fgc < 1 or bgc < 1:
        raise LibraryOpError(conv, "group counts must be positive")
    if fgc > 1 and bgc > 1:
        raise LibraryOpError(conv, "feature_group_count and batch_group_count both > 1")
    n, c = lhs.dims[lp[0]], lhs.dims[lp[1]]
    o, ci = rhs.dims[rp[0]], rhs.dims[rp[1]]
    nb = out.dims[op[0]]
    groups = max(fgc, bgc)
    if (c % fgc or c // fgc != ci or o % groups or n % bgc or n // bgc != nb
            or out.dims[op[1]] != o):
        raise LibraryOpError(
            conv, f"feature_group_count={fgc}, batch_group_count={bgc} do not fit input "
            f"features {c}, kernel input features {ci}, output features {o}, batch {n}")
    if lhs.dtype.is_float != out.dtype.is_float and not out.dtype.is_float:
        raise LibraryOpError(conv, "float operands with an integer result are not supported")
    return ConvSpec(
        op=conv, lhs=lhs, rhs=rhs, out=out, labels=str(labels), window=window,
        ksizes=ksizes, in_sizes=tuple(lhs.dims[lp[2 + d]] for d in range(nsp)),
        out_sizes=tuple(out.dims[op[2 + d]] for d in range(nsp)), fgc=fgc, bgc=bgc, n=n, c=c,
        o=o, ci=ci, nb=nb, ls=_strides(lhs.dims, lp), rs=_strides(rhs.dims, rp),
        os=_strides(out.dims, op))
