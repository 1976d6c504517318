"""f8e8m0fnu arithmetic as XLA's CPU computes it: the C expression of an elementwise op whose
result and operands are e8m0, from their f32 compute values (`cexpr` calls it for every such
op that computes; moves, compares and conversions never come here).

    e8m0_op(op, ops, consts, f32_op, f64_op) -> str | None

XLA computes an e8m0 op as the f32 op on the bits of its operands (e8m0's smallest value
2^-127, encoding 0, is an f32 subnormal) and converts the f32 result back by its bits. The
interpreter's `flush.Via` is the same rule; the facts (measured against jax.jit) are in
`subnormals.py`. Conditions enforced, each explicit in the C rather than left to the hardware's
DAZ (which GCC does not model: it folded sqrt(2^-127) at compile time to 2^-64, where jax.jit
gives NaN):
- the operands are read flushed (`hf_ftz_f32`), 2^-127 as 0, whose e8m0 result is NaN; not
  those of power, atan2, cbrt, sin, tan, tanh and expm1, whose f32 helpers read the bits
  themselves, nor remainder's dividend (fmod keeps it);
- ceil, floor, the roundings and sign read 2^-127 unflushed (`subnormals.E8M0_UNFLUSHED`),
  as 2^-126, which gives each of them the same result (ceil and sign: 1);
- a division by a constant is a multiplication by the constant's reciprocal, itself an e8m0
  value (1 / 2^-127 is NaN when flushing);
- an op of `subnormals.E8M0_FOLDED` whose other operands are constants computes exactly in
  double where its one varying operand is 2^-127, the result rounded as f32 keeping subnormals
  and converted by its bits (`hf_round_f8e8m0fnu_exact`).
Under "keep" (`HF_FLUSH_SUBNORMALS` 0) every part is IEEE: the flushes are identities and both
sides of the folded select agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hlofuse.backends.subnormals import E8M0_FOLDED, E8M0_UNFLUSHED, PASSTHROUGH
from hlofuse.ir.opcodes import Opcode

# ops whose f32 helpers take their operands unflushed (daz_math, mathlib, `cexpr._float_op`)
_READ_BITS = frozenset({Opcode.POWER, Opcode.ATAN2, Opcode.CBRT}) | PASSTHROUGH["f32"]
# elementwise ops that move an e8m0 value without computing (interpreter/flush.py `MOVES`)
_MOVES = frozenset({Opcode.ABS, Opcode.NEGATE, Opcode.REDUCE_PRECISION})


def e8m0_op(op: Opcode, ops: list[str], consts: Sequence[object | None],
            f32_op: Callable[[Opcode, list[str]], str],
            f64_op: Callable[[Opcode, list[str]], str]) -> str | None:
    """The e8m0 result of `op` (as its f32 compute value) on `ops` (f32 compute expressions),
    `consts[i]` the value of operand i where it is a constant (None or missing: it varies);
    `f32_op` / `f64_op` give the f32 / f64 expression of an op. None for a move."""
    if op in _MOVES:
        return None
    consts = [consts[i] if i < len(consts) else None for i in range(len(ops))]
    reciprocal = op is Opcode.DIVIDE and consts[1] is not None
    op32 = Opcode.MULTIPLY if reciprocal else op
    args = list(ops)
    if reciprocal:
        args[1] = _reciprocal(consts[1], single=True)
    if op in E8M0_UNFLUSHED:
        args = [f"(hf_f8e8m0fnu_unflush({a}))" for a in args]
    elif op is Opcode.REMAINDER:
        args[1] = f"(hf_ftz_f32({args[1]}))"
    elif op not in _READ_BITS:
        args = [f"(hf_ftz_f32({a}))" for a in args]  # (operands in parentheses, as cexpr's)
    value = f32_op(op32, args)  # (the caller rounds the result to e8m0)
    varying = [i for i, c in enumerate(consts) if c is None]
    if op not in E8M0_FOLDED or len(ops) < 2 or len(varying) != 1:
        return value
    k = varying[0]
    wide = [f"(hf_f8e8m0fnu_f32_to_f64({a}))" if c is None else _double(c)
            for a, c in zip(ops, consts, strict=True)]
    if reciprocal:
        wide[1] = _reciprocal(consts[1], single=False)
    exact = f"hf_round_f8e8m0fnu_exact({f64_op(op32, wide)})"
    return f"(hf_f8e8m0fnu_is_min({ops[k]}) ? {exact} : {value})"


def _double(value: object) -> str:
    x = float(value)  # type: ignore[arg-type]
    if x != x:
        return "((double)NAN)"
    if x in (float("inf"), float("-inf")):
        return "((double)INFINITY)" if x > 0 else "(-(double)INFINITY)"
    return f"({x.hex()})"


def _reciprocal(value: object, *, single: bool) -> str:
    """1 / c for an e8m0 constant c, an e8m0 value (a power of two): 1 / 2^-127 is NaN when
    the file flushes (XLA's simplifier computes it under DAZ), 2^127 otherwise."""
    x = float(value)  # type: ignore[arg-type]
    t, suffix = ("float", "f") if single else ("double", "")
    if x == 2.0 ** -127:
        return f"(HF_FLUSH_SUBNORMALS ? ({t})NAN : 0x1p127{suffix})"
    if x != x or x in (0.0, float("inf")):
        return f"(({t})NAN)"
    return f"({(1.0 / x).hex()}{suffix})"
