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
computes them in. Operations that only move or reinterpret bits (copies, reshapes, slices,
select, negate, abs, bitcast-convert, f32<->bf16 conversion, reduce-precision, sort's data
movement) never flush: a subnormal parameter returned unchanged stays subnormal. Real `power`
reads its operands' bits as the C library's `pow` under DAZ does (a subnormal exponent is a
nonzero non-integer, a subnormal base weighs 2^-150 or 2^-1075: `interpreter/flush.py`).
"""

from __future__ import annotations

from typing import Final

from hlofuse.errors import HloError

FLUSH: Final = "flush"
KEEP: Final = "keep"
MODES: Final = (FLUSH, KEEP)
DEFAULT: Final = FLUSH

# Element types whose subnormals are flushed (complex types: each part).
FLUSH_TYPES: Final = frozenset({"f32", "f64", "bf16", "c64", "c128"})


def check(value: object) -> str:
    """`value` if it names a mode, else an `HloError` listing the modes."""
    if value not in MODES:
        raise HloError(f"subnormals={value!r}: expected one of {', '.join(map(repr, MODES))} "
                       f"(default {DEFAULT!r}, as XLA's CPU runtime)")
    return str(value)
