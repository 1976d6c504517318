"""`tree-reduction-rewriter`: XLA CPU's TreeReductionRewriter, for the reductions whose result
depends on the order: sums and products of floats narrower than f32.

    r = bf16[64] reduce(bf16[64,4096] x, zero), dimensions={1}
 => w = bf16[64,128] reduce-window(x, zero), window={size=1x32 stride=1x32}
    r = bf16[64] reduce(w, zero), dimensions={1}
 => (again, in the simplification fixpoint)  bf16[64,4] reduce-window, then a reduce over 4

Each reduced dimension longer than `WINDOW` is cut into windows of `WINDOW` (padded with the
init value "SAME"-style: the pad split evenly, the extra element on the high side, as XLA's
MakePadding(kSame)); each window is reduced in order, then the partial results are. With one
rounding per reducer application (f16/bf16 accumulate in their own type), this is the order in
which jax.jit on CPU sums: 4096 bf16 ones give 4096, not the 256 a running bf16 sum stalls at.

Conditions enforced (as XLA, narrowed to where the order matters):
- a single-input reduce (XLA skips variadic ones) of an array;
- the element type is a float narrower than 32 bits: f32/f64 sums keep their one kernel (the
  cpu backend's vectorized partial accumulators are as accurate), integers and max/min are exact
  in any order;
- the reducer is not a plain maximum/minimum of its parameters;
- some reduced dimension is longer than `WINDOW`; default layouts only.
XLA runs it inside its simplification fixpoint, and so does `simplify` (pipelines.py): a reduce
left with more than `WINDOW` partials is cut again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.ir.attributes import WindowDim
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.registry import register
from hlofuse.passes.utils import non_fusion_computations

WINDOW = 32  # XLA CPU's reduce_window_size


def default_layout(shape: object) -> bool:
    return isinstance(shape, ArrayShape) and shape.has_default_layout


def same_padding(n: int, window: int) -> tuple[int, int]:
    """XLA's MakePadding(kSame) for stride == window: (low, high)."""
    out = -(-n // window)
    need = max(0, (out - 1) * window + window - n)
    return need // 2, need - need // 2


def order_matters(instr: Instruction) -> bool:
    """A reduce of a float narrower than f32 with a reducer other than a plain max/min."""
    if instr.opcode is not Opcode.REDUCE or instr.operand_count != 2:
        return False
    shape = instr.shape
    if not isinstance(shape, ArrayShape) or not shape.dtype.is_float or shape.dtype.bits >= 32:
        return False
    comp = instr.attrs.get("to_apply")
    root = comp.root if comp is not None else None
    if root is None:
        return False
    plain = root.opcode in (Opcode.MAXIMUM, Opcode.MINIMUM) and all(
        o.opcode is Opcode.PARAMETER for o in root.operands)
    return not plain


def _rewrite(instr: Instruction) -> bool:
    x, init = instr.operands
    if not (default_layout(x.shape) and default_layout(instr.shape)):
        return False
    dims = x.array_shape.dims
    red = set(instr.dimensions)
    if all(dims[d] <= WINDOW for d in red):
        return False
    window, out = [], []
    for d, n in enumerate(dims):
        if d not in red:
            window.append(WindowDim(size=1))
            out.append(n)
            continue
        w = min(n, WINDOW)
        lo, hi = same_padding(n, w)
        window.append(WindowDim(size=w, stride=w, pad_lo=lo, pad_hi=hi))
        out.append(-(-n // w))
    comp = instr.parent
    assert comp is not None
    to_apply = instr.attrs["to_apply"]
    partial = Instruction.create(
        Opcode.REDUCE_WINDOW, ArrayShape(x.array_shape.dtype, tuple(out)), [x, init],
        name="tree_reduce_window", attrs={"window": tuple(window), "to_apply": to_apply},
        metadata=instr.metadata)
    comp.add(partial, before=instr)
    instr.set_operand(0, partial)
    return True


@register("tree-reduction-rewriter")
@dataclass(frozen=True)
class TreeReductionRewriter:
    """Cut order-sensitive reductions into windows of `WINDOW`, as XLA's CPU compiler does."""

    name: ClassVar[str] = "tree-reduction-rewriter"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in non_fusion_computations(module):
            for instr in [i for i in comp.instructions if order_matters(i)]:
                changed |= _rewrite(instr)
        return changed

