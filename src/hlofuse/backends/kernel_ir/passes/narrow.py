"""Narrow integer arithmetic: compute what a value's result needs, in as few bits as it needs.

    hi = convert<u32>((u64(i) + off) >> 32)      i in [0, 2048), off in [0, 8192)
    lo = convert<u32>(u64(i) + off)
 -> hi = 0
    lo = convert<u32>(i) + u32(off)              (32-bit lanes: half the vector work)

JAX's counter-based random numbers (threefry, partitionable) split a 64-bit element counter
into two 32-bit words this way, on every element of every draw. Two rewrites, each exact:

* an integer value whose bounds (`ir.value_bounds`: index ranges, constants, sums, products,
  shifts that cannot wrap) are one number is that constant;
* a conversion of a 64-bit integer to a 32-bit (or narrower) one is pushed through additions,
  subtractions, multiplications and bitwise operations down to indices, constants and
  conversions from narrower types: the low bits of a wrapping sum or product depend only on
  the low bits of its operands, so the result is the same value computed in the narrow type
  (the printer's 32-bit index lanes then compute the converted index: `passes/lanes.py`
  decides them, `cprint._narrow_index` spells them).
  Only expressions reached within `DEPTH` operations are rewritten; others stay as they are.
"""

from __future__ import annotations

import numpy as np

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Val
from hlofuse.backends.kernel_ir.rewrite import Rewriter
from hlofuse.ir.dtypes import DType
from hlofuse.ir.opcodes import Opcode

DEPTH = 8  # operations a narrowed conversion is pushed through, at most
_WRAPPING = frozenset({Opcode.ADD, Opcode.SUBTRACT, Opcode.MULTIPLY, Opcode.AND, Opcode.OR,
                       Opcode.XOR})


def narrow(kernel: ir.Kernel) -> None:
    kernel.body = _Narrow(kernel.graph).stmts(kernel.body)


def _int(t: DType) -> bool:
    return t.is_integral and not t.is_narrow_int


class _Narrow(Rewriter):
    def __init__(self, g: ir.Graph) -> None:
        super().__init__(g)
        self.bounds: dict[int, ir.Bounds] = {}  # every value's bounds once (`value_bounds`)

    def _rebuild(self, v: Val) -> Val:
        nv = super()._rebuild(v)
        if nv.op != "alu" or not _int(nv.dtype):
            return nv
        r = ir.value_bounds(nv, memo=self.bounds)
        if r is not None and r[0] == r[1]:
            return self.g.const(r[0], nv.dtype)
        if nv.arg.opcode is Opcode.CONVERT and nv.dtype.bits <= 32:
            (src,) = nv.args
            if _int(src.dtype) and src.dtype.bits == 64:
                low = self._low(src, nv.dtype, DEPTH)
                if low is not None:
                    return low
        return nv

    def _low(self, x: Val, t: DType, depth: int) -> Val | None:
        """`x` modulo 2^bits(t), as a value of type `t` that computes no 64-bit arithmetic,
        or None."""
        g = self.g
        if x.op == "const":
            return g.const(int(np.array(ir.const_value(x)).astype(t.np)), t)
        if x.op == "index":
            return g.alu(ir.ScalarOp(Opcode.CONVERT, t), x)
        if x.op != "alu" or depth == 0:
            return None
        code = x.arg.opcode
        if code is Opcode.CONVERT:
            (src,) = x.args
            if not _int(src.dtype):
                return None
            if src.dtype == t:
                return src
            if src.dtype.bits <= 32 or src.op == "index":
                return g.alu(ir.ScalarOp(Opcode.CONVERT, t), src)
            return self._low(src, t, depth - 1)
        if code in _WRAPPING:
            args = [self._low(a, t, depth - 1) for a in x.args]
            if any(a is None for a in args):
                return None
            return g.alu(ir.ScalarOp(code, t), *args)  # type: ignore[arg-type]
        return None
