"""The `subnormals` setting: whether f32/f64/bf16 subnormal numbers are flushed to zero, as XLA's
CPU runtime does, or kept as IEEE 754 says.

    subnormals="flush"  (DEFAULT) what jax.jit on CPU computes: XLA sets FTZ and DAZ in the
                        x86 MXCSR (FZ in the aarch64 FPCR) while a compiled function runs, so a
                        float operation reads a subnormal operand as a zero of its sign and
                        writes a subnormal result as a zero of its sign
    subnormals="keep"   IEEE 754 gradual underflow (numpy's behaviour)

Taken by `hlofuse.compile`, `hlofuse.jit`, `hlofuse run`/`emit --subnormals`, and every backend
(`registry.Backend.compile`): the interpreter emulates it op by op (`interpreter/flush.py`), the
cpu backend sets the hardware mode for the duration of a call in the calling thread and in
every pool worker that runs part of it, and restores the caller's own mode afterwards
(`cpu/fpenv.py`). Both backends compute the same values under either setting.

Why "flush" is the default: hlofuse's users compare against jax.jit, which flushes; flushing is
also what keeps arithmetic on tiny values at full speed on x86 (a subnormal operand or result
costs a microcode assist of about 100 cycles otherwise). "keep" is for programs whose tiny
values matter and for comparing against numpy.

Which values flush (XLA's CPU behaviour, measured against jax.jit, docs/cpu-backend.md):
f32, f64 and bf16 (XLA computes bf16 in f32, whose subnormals are bf16's) and the parts of c64
and c128; not f16 or the 8-bit floats, whose subnormals are normal f32 values, the type XLA
computes them in (but f8e8m0fnu's smallest value 2^-127 is an f32 subnormal: its ops follow
the f32 rules, with the exceptions below). Operations that only move or reinterpret bits
(copies, reshapes, slices, select, negate, abs, bitcast-convert, f32<->bf16 conversion,
reduce-precision, sort's data movement) never flush: a subnormal parameter returned unchanged
stays subnormal. Real `power` reads its operands' bits as the C library's `pow` under DAZ does
(a subnormal exponent is a nonzero non-integer, a subnormal base weighs 2^-150 or 2^-1075:
`interpreter/flush.py`); sin, tan, tanh and expm1 return a subnormal operand (`PASSTHROUGH`).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from hlofuse.errors import HloError
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode

FLUSH: Final = "flush"
KEEP: Final = "keep"
MODES: Final = (FLUSH, KEEP)
DEFAULT: Final = FLUSH

# Element types whose subnormals are flushed (complex types: each part).
FLUSH_TYPES: Final = frozenset({"f32", "f64", "bf16", "c64", "c128"})

# Facts of XLA's CPU that both backends emulate when flushing (measured against jax.jit on every
# array size tried; `interpreter/flush.py` applies them, the cpu backend's `cexpr` and
# `cexpr_e8m0` emit them):
# - real functions that return a subnormal operand unflushed, by the operand's type (f64 tanh
#   flushes it; f32 atan is atan2f(x, 1), which returns x too);
_UNCHANGED = frozenset({Opcode.SIN, Opcode.TAN, Opcode.TANH, Opcode.EXPM1})
PASSTHROUGH: Final = {"f32": _UNCHANGED, "bf16": _UNCHANGED,
                      "f64": _UNCHANGED - {Opcode.TANH}}
# - f8e8m0fnu ops (computed as f32 ops, on the bits of e8m0's smallest value 2^-127, an f32
#   subnormal) that read 2^-127 unflushed: ceil(2^-127) and sign(2^-127) are 1 (f32 ceil and
#   sign of a subnormal flush it); floor and the roundings give NaN either way;
E8M0_UNFLUSHED: Final = frozenset({Opcode.CEIL, Opcode.FLOOR, Opcode.ROUND_AFZ,
                                   Opcode.ROUND_EVEN, Opcode.SIGN})
# - f8e8m0fnu ops that, with every operand but one a scalar constant, compute exactly (IEEE, no
#   flushing) where that operand is 2^-127: XLA's e8m0 -> f32 conversion selects the constant
#   2^-127 for encoding 0 and LLVM folds the op into that arm at compile time (2^-127 * 2 is
#   2^-126 and 2^-127 + 1 is 1, where 2^-127 * y is NaN for a y not a constant). A division by
#   a constant c is a multiplication by 1 / c (XLA's simplifier; 1 / 2^-127 is NaN). Not
#   atan2, nor remainder (fmod(2^-127, c) is NaN in jax.jit for c >= 1: not emulated).
E8M0_FOLDED: Final = frozenset({Opcode.ADD, Opcode.SUBTRACT, Opcode.MULTIPLY, Opcode.DIVIDE,
                                Opcode.MAXIMUM, Opcode.MINIMUM, Opcode.CLAMP, Opcode.POWER})


def e8m0_init_last(instr: Instruction) -> tuple[bool, ...]:
    """Which of this reduce's outputs XLA's CPU folds the init value into last (all False:
    none). A reduce (not a reduce-window) with an f8e8m0fnu input whose e8m0 init value is the
    constant 2^-127 (what jax's sums and maxima of e8m0 start from): XLA computes it in f32,
    where the constant is a subnormal that LLVM folds away (init + x is x), so the elements
    come first and the init last, each step rounded to e8m0 (2^-127 + 2 is 2, where init +
    2^-127 first would make it NaN). Any other init is folded first. Measured against jax.jit
    on add, multiply, maximum and minimum of 2-16 elements, rows and columns; reduce-window
    folds its init first (300 random windows).

    A variadic reducer whose outputs are independent (output k reads only parameters k and
    n + k: max, add and multiply side by side) is one reduce per output, each deciding for
    itself (fuzz seed 3501: the sum from 2^-127 beside a product from 1); one whose outputs
    are coupled (argmax) folds every init last when every e8m0 init is 2^-127."""
    n = instr.operand_count // 2
    if instr.opcode is not Opcode.REDUCE or n == 0:
        return ()
    e8 = [getattr(instr.operands[k].shape, "dtype", None) is not None
          and instr.operands[k].shape.dtype.name == "f8e8m0fnu"  # type: ignore[union-attr]
          for k in range(n)]
    if not any(e8):
        return (False,) * n
    last = [e8[k] and _is_e8m0_min(instr.operands[n + k]) for k in range(n)]
    if n > 1 and not _independent(instr.attrs.get("to_apply"), n):
        every = all(last[k] for k in range(n) if e8[k])
        return (every,) * n
    return tuple(last)


def _independent(comp: object, n: int) -> bool:
    """Does each output k of the variadic reducer `comp` read only parameters k and n + k?"""
    root = getattr(comp, "root", None)
    if root is None or root.opcode is not Opcode.TUPLE or root.operand_count != n:
        return False
    for k, out in enumerate(root.operands):
        stack, seen = [out], set()
        while stack:
            x = stack.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            if x.opcode is Opcode.PARAMETER and x.parameter_number not in (k, n + k):
                return False
            stack.extend(x.operands)
    return True


def _is_e8m0_min(init: Instruction) -> bool:
    if init.opcode is not Opcode.CONSTANT or init.literal is None:
        return False
    value = np.asarray(init.literal, dtype=np.float64).reshape(-1)
    return value.size == 1 and value[0] == 2.0 ** -127


def check(value: object) -> str:
    """`value` if it names a mode, else an `HloError` listing the modes."""
    if value not in MODES:
        raise HloError(f"subnormals={value!r}: expected one of {', '.join(map(repr, MODES))} "
                       f"(default {DEFAULT!r}, as XLA's CPU runtime)")
    return str(value)
