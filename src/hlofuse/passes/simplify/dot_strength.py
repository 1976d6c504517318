"""`dot-strength-reduction`: a dot one of whose operands has only batch and contracting
dimensions (a vector per batch element) becomes a multiply and a sum, as XLA's
AlgebraicSimplifier does on CPU (`enable_dot_strength_reduction`, `HandleDot`:
"strength reduce dot(a[K], b[K]) = reduce_sum(multiply(a, b))").

    dot(m f32[256,2,2], v f32[256,2]), batch {0}/{0}, contracting {2}/{1}     a batch of 256
 -> reduce(multiply(m, broadcast(v, {0,2})), 0, add), dimensions={2}           2x2 mat-vecs

A batch of tiny matrix-vector products (brax's per-body 3x3 rotations, jumanji's small
matrices) is otherwise a library GEMM call per batch element; as a multiply and a reduce it is
elementwise work that fuses with its neighbours. The same holds for a batch of tiny
matrix-matrix products (brax's 2x2 and 3x3 inertia products: 256 GEMM calls of 8 multiply-adds
each took 24 us per dot), which XLA's CPU backend emits as naive loops for the same reason:
a dot with at most `small_dot_limit` multiply-adds per batch element (M * N * K) becomes

    reduce(multiply(broadcast(lhs [B, M, K] -> [B, M, N, K]), broadcast(rhs [B, N, K] -> ...)))

Conditions (each rewrite keeps the dot's value up to the summation order):

* one operand has only batch and contracting dimensions (any size), or the product per batch
  element has at most `small_dot_limit` multiply-adds; free dimensions keep their order, so
  the result is [batch..., lhs free..., rhs free...] as the dot's;
* real element types (no complex, no pred, no f64 result); operands of another type than the
  result are converted to it first (the dot's preferred element type; an integral operand of a
  float dot is rounded to the result type, as XLA: u16 65535 is f16 inf); float products and
  sums are computed in f64 and rounded once to the result type, as the interpreter computes a
  dot, so the rewrite keeps its values (integers wrap alike either way). XLA sums in f32
  (f16/bf16 promoted to f32); f64 keeps this rewrite exact, and the kernels it becomes are
  tiny or memory-bound (a batch of 2x2 products, a matrix-vector product). An f64 dot stays a
  dot: a sum in another order would change its last bits;
* the dot's result has the default layout (the new ops do too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hlofuse.ir.computation import Computation
from hlofuse.ir.dtypes import DTYPES, DType
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.registry import register
from hlofuse.passes.utils import Rewriter, ordered

PASS = "dot-strength-reduction"


def _dims(instr: Instruction, key: str) -> list[int]:
    return [int(d) for d in instr.attrs.get(key, ())]


def vector_side(dot: Instruction) -> int | None:
    """Which operand (0 or 1) has only batch and contracting dimensions; None if neither."""
    for k, side in ((1, "rhs"), (0, "lhs")):
        shape = dot.operand(k).shape
        if isinstance(shape, ArrayShape) and \
                len(_dims(dot, f"{side}_batch_dims")) + \
                len(_dims(dot, f"{side}_contracting_dims")) == shape.rank:
            return k
    return None


def _per_batch_macs(dot: Instruction) -> int:
    """Multiply-adds per batch element: every free and contracting extent of both operands."""
    lhs, rhs = dot.operand(0).shape, dot.operand(1).shape
    assert isinstance(lhs, ArrayShape) and isinstance(rhs, ArrayShape)
    lb, rb = set(_dims(dot, "lhs_batch_dims")), set(_dims(dot, "rhs_batch_dims"))
    rc = set(_dims(dot, "rhs_contracting_dims"))
    macs = 1
    for d in range(lhs.rank):
        if d not in lb:
            macs *= lhs.dims[d]
    for d in range(rhs.rank):
        if d not in rb and d not in rc:
            macs *= rhs.dims[d]
    return macs


def reducible(dot: Instruction, small_dot_limit: int = 0) -> bool:
    out = dot.shape
    if dot.opcode is not Opcode.DOT or not isinstance(out, ArrayShape):
        return False
    if out.dtype.is_complex or out.dtype.is_pred or not out.has_default_layout or \
            (out.dtype.is_float and out.dtype.bits >= 64):
        return False
    for o in dot.operands:
        s = o.shape
        if not isinstance(s, ArrayShape) or s.dtype.is_complex or s.dtype.is_pred:
            return False
        if s.dtype.is_float and not out.dtype.is_float:
            return False  # float products summed as floats, then converted: left to the dot
    if dot.attrs.get("sparsity") or dot.attrs.get("algorithm"):
        return False
    return vector_side(dot) is not None or _per_batch_macs(dot) <= small_dot_limit


class _Builder:
    """The multiply and reduce standing for one dot, inserted just before it."""

    def __init__(self, module: Module, dot: Instruction, adders: dict[str, Computation]
                 ) -> None:
        self.module, self.dot, self.adders = module, dot, adders
        self.comp = dot.parent

    def add(self, opcode: Opcode, shape: ArrayShape, operands: list[Instruction],
            **attrs: object) -> Instruction:
        instr = Instruction.create(opcode, shape, operands, name=opcode.value, attrs=attrs,
                                   metadata=self.dot.metadata)
        assert self.comp is not None
        self.comp.add(instr, before=self.dot)
        return instr

    def convert(self, x: Instruction, dtype: DType) -> Instruction:
        s = x.shape
        assert isinstance(s, ArrayShape)
        if s.dtype == dtype:
            return x
        return self.add(Opcode.CONVERT, ArrayShape(dtype, s.dims), [x])

    def transpose(self, x: Instruction, perm: list[int]) -> Instruction:
        s = x.shape
        assert isinstance(s, ArrayShape)
        if perm == list(range(len(perm))):
            return x
        return self.add(Opcode.TRANSPOSE, ArrayShape(s.dtype, tuple(s.dims[p] for p in perm)),
                        [x], dimensions=tuple(perm))

    def adder(self, dtype: DType) -> Computation:
        comp = self.adders.get(dtype.name)
        if comp is None:
            comp = Computation(f"dot_strength_add_{dtype.name}")
            scalar = ArrayShape(dtype, ())
            x = comp.add(Instruction.create(Opcode.PARAMETER, scalar, name="x",
                                            parameter_number=0))
            y = comp.add(Instruction.create(Opcode.PARAMETER, scalar, name="y",
                                            parameter_number=1))
            comp.root = comp.add(Instruction.create(Opcode.ADD, scalar, [x, y], name="sum"))
            self.module.add_computation(comp)
            self.adders[dtype.name] = comp
        return comp

    def operand(self, k: int, order: tuple[str, ...], work: DType) -> Instruction:
        """Operand `k` transposed to [batch, free, contracting] (the kinds in `order`) and
        converted to the working type."""
        side = ("lhs", "rhs")[k]
        x = self.dot.operand(k)
        shape = x.shape
        assert isinstance(shape, ArrayShape)
        b = _dims(self.dot, f"{side}_batch_dims")
        c = _dims(self.dot, f"{side}_contracting_dims")
        f = [d for d in range(shape.rank) if d not in b and d not in c]
        perm = {"batch": b, "free": f, "contracting": c}
        x = self.transpose(x, [d for kind in order for d in perm[kind]])
        out = self.dot.shape
        assert isinstance(out, ArrayShape)
        if out.dtype.is_float and not shape.dtype.is_float:
            x = self.convert(x, out.dtype)  # XLA: an integral operand becomes the result type
        return self.convert(x, work)

    def rewrite(self) -> Instruction:
        """[batch, lhs free, rhs free, contracting] products, summed over the contracting
        dimensions: both operands broadcast into that shape (a vector operand has no free
        dimensions, so it is a plain broadcast of it)."""
        dot = self.dot
        out = dot.shape
        assert isinstance(out, ArrayShape)
        work = DTYPES["f64"] if out.dtype.is_float else out.dtype
        lhs = self.operand(0, ("batch", "free", "contracting"), work)
        rhs = self.operand(1, ("batch", "free", "contracting"), work)
        ls, rs = lhs.shape, rhs.shape
        assert isinstance(ls, ArrayShape) and isinstance(rs, ArrayShape)
        nb = len(_dims(dot, "lhs_batch_dims"))
        nc = len(_dims(dot, "lhs_contracting_dims"))
        nlf, nrf = ls.rank - nb - nc, rs.rank - nb - nc
        batch, contract = list(ls.dims[:nb]), list(ls.dims[nb + nlf:])
        full = ArrayShape(work, tuple(batch + list(ls.dims[nb:nb + nlf])
                                      + list(rs.dims[nb:nb + nrf]) + contract))
        free_end = nb + nlf + nrf
        lpos = list(range(nb + nlf)) + list(range(free_end, full.rank))
        rpos = list(range(nb)) + list(range(nb + nlf, full.rank))
        lbig = lhs if ls.dims == full.dims else self.add(
            Opcode.BROADCAST, full, [lhs], dimensions=tuple(lpos))
        rbig = rhs if rs.dims == full.dims else self.add(
            Opcode.BROADCAST, full, [rhs], dimensions=tuple(rpos))
        prod = self.add(Opcode.MULTIPLY, full, [lbig, rbig])
        reduced = self.add(Opcode.REDUCE, ArrayShape(work, tuple(full.dims[:free_end])),
                           [prod, self._zero(work)],
                           dimensions=tuple(range(free_end, full.rank)),
                           to_apply=self.adder(work))
        return self.convert(reduced, out.dtype)

    def _zero(self, dtype: DType) -> Instruction:
        instr = Instruction.create(Opcode.CONSTANT, ArrayShape(dtype, ()), name="zero",
                                   literal=np.asarray(0, dtype=dtype.np),
                                   metadata=self.dot.metadata)
        assert self.comp is not None
        self.comp.add(instr, before=self.dot)
        return instr


@register(PASS)
@dataclass(frozen=True)
class DotStrengthReduction:
    """Rewrite every dot with a vector operand, and every dot of at most `small_dot_limit`
    multiply-adds per batch element, as a multiply and a sum (module docstring)."""

    small_dot_limit: int = 64

    name: ClassVar[str] = PASS

    def run(self, module: Module) -> bool:
        changed = False
        adders: dict[str, Computation] = {}
        for comp in list(module.computations):
            if comp.is_fusion_computation:
                continue
            edit = Rewriter(comp)
            for instr in ordered(comp):
                if reducible(instr, self.small_dot_limit):
                    edit.replace(instr, _Builder(module, instr, adders).rewrite())
            changed |= edit.finish()
        return changed
