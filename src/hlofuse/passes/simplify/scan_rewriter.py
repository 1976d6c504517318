"""`reduce-window-rewriter`: XLA's ReduceWindowRewriter (base length 16, as XLA's CPU compiler
uses it): a cumulative reduction (a reduce-window whose one non-trivial window spans the whole
dimension: jnp.cumsum, lax.cumlogsumexp, lax.cummax, ...) becomes a two-level scan.

    s = f32[1000] reduce-window(x, zero), window={size=1000 pad=999_0}
 => p = f32[1008] pad(x, zero), padding=0_8             the length rounded up to BASE
    t = f32[63,16] reshape(p)
    o = f32[63,16] reduce-window(t, zero), window={size=1x16 pad=0_0x15_0}   each row's scan
    c = f32[63] reshape(slice(o) [:, 15:16])              each row's total
    e = f32[64] reduce-window(c, zero), window={size=63 pad=63_0}            exclusive scan of
    b = f32[63,16] broadcast(slice(e) [0:63]), dimensions={0}                the totals (cut
    m = f32[63,16] map(o, b), to_apply=reducer                                again: C > 16)
    s = f32[1000] slice(reshape(m)) [0:1000]

For 1000 elements: 16 reducer applications per element instead of up to 1000, and, what
matters for bf16/f16, XLA's association: each element combines its row's running value with
the total of the rows before it (`map(local, carry)`), so a bf16 running sum does not stall
where a sequential one does. A scan along another dimension is transposed to the last one and
back; a reverse scan (padding high) scans each row backwards and carries from the rows after
it; an exclusive scan (padding of the full length) pads the result with the init value.

Conditions enforced (XLA's TryOptimizeCumSumOrProd): one input; exactly one window dimension
that is not trivial (size 1, stride 1, no padding or dilation); there, size == the dimension's
length N > BASE, stride 1, no dilation or reversal, padding (N-1 or N, 0) or (0, N-1 or N);
default layouts. Any element type: XLA rewrites f32 scans too, and the two levels are faster
than one window of N per element. Like XLA, it assumes the reducer is associative and the init
value its identity (jax's scans). Runs in the simplification fixpoint, which cuts the inner
scan of more than BASE totals again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from hlofuse.ir.attributes import WindowDim
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.registry import register
from hlofuse.passes.simplify.tree_reduction import default_layout
from hlofuse.passes.utils import non_fusion_computations

BASE = 16  # XLA CPU's base_length


def _trivial(w: WindowDim) -> bool:
    return (w.size == 1 and w.stride == 1 and w.pad_lo == 0 and w.pad_hi == 0
            and w.window_dilation == 1 and w.base_dilation == 1 and not w.reversal)


@dataclass(frozen=True)
class Scan:
    """A reduce-window that is a cumulative reduction along `dim` of length `n`."""

    dim: int
    n: int
    forward: bool
    exclusive: bool


def as_scan(instr: Instruction) -> Scan | None:
    if instr.opcode is not Opcode.REDUCE_WINDOW or instr.operand_count != 2:
        return None
    x = instr.operand(0)
    if not (default_layout(x.shape) and default_layout(instr.shape)):
        return None
    window = instr.attrs.get("window") or ()
    dims = x.array_shape.dims
    busy = [d for d, w in enumerate(window) if not _trivial(w)]
    if len(window) != len(dims) or len(busy) != 1:
        return None
    d = busy[0]
    w, n = window[d], dims[d]
    if n <= BASE or w.size != n or w.stride != 1 or w.window_dilation != 1 \
            or w.base_dilation != 1 or w.reversal:
        return None
    if w.pad_hi == 0 and w.pad_lo in (n - 1, n):
        return Scan(d, n, True, w.pad_lo == n)
    if w.pad_lo == 0 and w.pad_hi in (n - 1, n):
        return Scan(d, n, False, w.pad_hi == n)
    return None


class _Builder:
    """Adds instructions before `anchor`, each with the anchor's metadata."""

    def __init__(self, anchor: Instruction) -> None:
        assert anchor.parent is not None
        self.comp: Computation = anchor.parent
        self.anchor = anchor
        self.dtype = anchor.array_shape.dtype

    def add(self, op: Opcode, dims: tuple[int, ...], operands: list[Instruction],
            name: str, **attrs: Any) -> Instruction:
        instr = Instruction.create(op, ArrayShape(self.dtype, dims), operands, name=name,
                                   attrs=attrs, metadata=self.anchor.metadata)
        return self.comp.add(instr, before=self.anchor)


def _dims(instr: Instruction) -> tuple[int, ...]:
    return instr.array_shape.dims


def _rewrite(instr: Instruction, scan: Scan) -> Instruction:
    x, init = instr.operands
    to_apply = instr.attrs["to_apply"]
    b = _Builder(instr)
    rank = len(_dims(x))
    last = rank - 1
    perm = list(range(rank))
    perm[scan.dim], perm[last] = last, scan.dim
    src = x
    if scan.dim != last:
        src = b.add(Opcode.TRANSPOSE, tuple(_dims(x)[p] for p in perm), [x], "scan_transpose",
                    dimensions=tuple(perm))
    lead = _dims(src)[:-1]
    k = -(-scan.n // BASE) * BASE
    cols = k // BASE
    if k != scan.n:
        pad = (*((0, 0, 0) for _ in lead), (0, k - scan.n, 0))
        src = b.add(Opcode.PAD, (*lead, k), [src, init], "scan_pad", padding=pad)
    tiled = b.add(Opcode.RESHAPE, (*lead, cols, BASE), [src], "scan_tiles")
    ones = tuple(WindowDim(size=1) for _ in range(rank))
    row = WindowDim(size=BASE, pad_lo=BASE - 1) if scan.forward else \
        WindowDim(size=BASE, pad_hi=BASE - 1)
    outer = b.add(Opcode.REDUCE_WINDOW, (*lead, cols, BASE), [tiled, init], "scan_rows",
                  window=(*ones, row), to_apply=to_apply)
    at = BASE - 1 if scan.forward else 0
    col = b.add(Opcode.SLICE, (*lead, cols, 1), [outer], "scan_row_totals",
                slice=(*((0, n, 1) for n in (*lead, cols)), (at, at + 1, 1)))
    col = b.add(Opcode.RESHAPE, (*lead, cols), [col], "scan_row_totals")
    carry = WindowDim(size=cols, pad_lo=cols) if scan.forward else \
        WindowDim(size=cols, pad_hi=cols)
    inner = b.add(Opcode.REDUCE_WINDOW, (*lead, cols + 1), [col, init], "scan_carries",
                  window=(*(WindowDim(size=1) for _ in lead), carry), to_apply=to_apply)
    lo = 0 if scan.forward else 1
    inner = b.add(Opcode.SLICE, (*lead, cols), [inner], "scan_carries",
                  slice=(*((0, n, 1) for n in lead), (lo, lo + cols, 1)))
    spread = b.add(Opcode.BROADCAST, (*lead, cols, BASE), [inner], "scan_carries",
                   dimensions=tuple(range(rank)))
    out = b.add(Opcode.MAP, (*lead, cols, BASE), [outer, spread], "scan",
                dimensions=tuple(range(rank + 1)), to_apply=to_apply)
    out = b.add(Opcode.RESHAPE, (*lead, k), [out], "scan")
    if scan.dim != last:
        out = b.add(Opcode.TRANSPOSE, tuple(_dims(out)[p] for p in perm), [out], "scan",
                    dimensions=tuple(perm))
    if k != scan.n:
        full = _dims(out)
        out = b.add(Opcode.SLICE, tuple(scan.n if d == scan.dim else n
                                        for d, n in enumerate(full)), [out], "scan",
                    slice=tuple((0, scan.n if d == scan.dim else n, 1)
                                for d, n in enumerate(full)))
    if scan.exclusive:
        pad = tuple(((1, 0, 0) if scan.forward else (0, 1, 0)) if d == scan.dim else (0, 0, 0)
                    for d in range(rank))
        out = b.add(Opcode.PAD, _dims(instr), [out, init], "scan", padding=pad)
    return out


@register("reduce-window-rewriter")
@dataclass(frozen=True)
class ReduceWindowRewriter:
    """Rewrite cumulative reductions longer than `BASE` as two-level scans (XLA CPU's)."""

    name: ClassVar[str] = "reduce-window-rewriter"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in non_fusion_computations(module):
            for instr in list(comp.instructions):
                scan = as_scan(instr)
                if scan is None or instr.parent is not comp:
                    continue
                comp.replace_instruction(instr, _rewrite(instr, scan))
                changed = True
        return changed
