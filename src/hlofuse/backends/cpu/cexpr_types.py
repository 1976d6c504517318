"""Scalar semantics of the element types beyond the byte-sized integers and IEEE floats, for
`cexpr`: sub-byte integers (s1/s2/s4, u1/u2/u4), complex numbers (c64, c128) and the 8- and
4-bit floats (f8*, f4e2m1fn); plus mulhi. The C helpers are in `cprelude_types`.

Types (storage / compute, see `cexpr`):
- sub-byte integers are stored one per byte, the value in the low bits (ml_dtypes' layout; the
  other bits are written as zero and ignored when read) and computed in int8_t / uint8_t holding
  the value itself (sign-extended). Every op computes in 8 bits with the 8-bit helpers, then
  wraps to the width (`wrap`), which gives the interpreter's results: the low bits of sums,
  products and powers do not depend on the wider computation; x / 0 is -1 or all ones (the
  8-bit all ones wraps to the narrow one); shift amounts >= the width give 0 or the sign fill
  (the 8-bit amount is at least as large); a logical right shift first masks to the width;
  clz and popcnt count within the width (s4's popcnt: the sign-extended byte, as XLA).
- complex numbers are C99 `_Complex` values (numpy's layout) in storage and compute; the ops
  follow `cprelude_types` (c64 computes in c128 and rounds once); comparisons are EQ and NE.
- 8- and 4-bit floats are stored as their encodings (uint8_t, f4 in the low 4 bits) and computed
  in float, rounded to the type after every op (like f16 and bf16), through double.

Every function returns None for an op/type it does not define; `cexpr` turns that into
`UnsupportedOpError` naming the instruction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hlofuse.backends.cpu.cprelude_types import COMPLEX_FUNCTIONS, SMALL_FLOATS
from hlofuse.ir.dtypes import DTYPES, DType
from hlofuse.ir.opcodes import Opcode

Op = Opcode


def is_narrow_int(dt: DType) -> bool:
    return dt.is_narrow_int


def is_small_float(dt: DType) -> bool:
    return dt.name in SMALL_FLOATS


def storage_ctype(dt: DType) -> str | None:
    if dt.is_narrow_int or is_small_float(dt):
        return "uint8_t"
    if dt.is_complex:
        return "hf_c64" if dt.name == "c64" else "hf_c128"
    return None


def compute_ctype(dt: DType) -> str | None:
    if dt.is_narrow_int:
        return "int8_t" if dt.is_signed else "uint8_t"
    if is_small_float(dt):
        return "float"
    return storage_ctype(dt)


def wrap(dt: DType, expr: str) -> str:
    """An 8-bit (or wider) integer expression wrapped to the sub-byte type `dt`."""
    mask = (1 << dt.bits) - 1
    if not dt.is_signed:
        return f"((uint8_t)(({expr}) & {mask}))"
    shift = 8 - dt.bits
    return f"((int8_t)((int8_t)(uint8_t)((uint32_t)({expr}) << {shift}) >> {shift}))"


def load(dt: DType, expr: str) -> str | None:
    if dt.is_narrow_int:
        return wrap(dt, expr)
    if dt.name == "f8e8m0fnu":  # by the f32 bits: 2^-127 is an f32 subnormal (cprelude_types)
        return f"hf_f8e8m0fnu_to_f32({expr})"
    if is_small_float(dt):
        return f"((float)hf_{dt.name}_to_f64({expr}))"
    return None


def store(dt: DType, expr: str) -> str | None:
    if dt.is_narrow_int:
        return f"((uint8_t)(({expr}) & {(1 << dt.bits) - 1}))"
    if dt.name == "f8e8m0fnu":
        return f"hf_f32_to_f8e8m0fnu({expr})"
    if is_small_float(dt):
        return f"hf_f64_to_{dt.name}({expr})"
    return None


def round_to(dt: DType, expr: str) -> str:
    """A float (or double) expression rounded to the small float type `dt`, as a float (e8m0:
    a float by its bits, `hf_round_f8e8m0fnu_op`, so 2^-127 survives DAZ)."""
    if dt.name == "f8e8m0fnu":
        return f"hf_round_f8e8m0fnu_op({expr})"
    return f"hf_round_{dt.name}({expr})"


def small_key(dt: DType, encoding: str) -> str:
    """The total-order key (`hf_small_key`) of a small float from its `encoding`."""
    # 0: unsigned (e8m0); 2: an fnuz type, whose NaN (-0's encoding) orders below everything
    has_sign = 0 if dt.name == "f8e8m0fnu" else 2 if dt.name.endswith("fnuz") else 1
    return f"hf_small_key({encoding}, {dt.bits}, {has_sign})"


def total_order_key(dt: DType, expr: str) -> str:
    """The total-order key of a small float compute value, from its encoding."""
    return small_key(dt, f"hf_f64_to_{dt.name}({expr})")


def narrow_literal(value: object, dt: DType) -> str:
    v = int(np.asarray(value).astype(np.int64))
    return f"(({compute_ctype(dt)}){v})"


def small_float_literal(value: object, dt: DType) -> str:
    arr = np.asarray(value).astype(dt.np)
    x = float(arr.astype(np.float64))
    if np.isnan(x):  # tagged with its encoding, as loads are (cprelude_types)
        code = int(arr.reshape(1).view(np.uint8)[0]) & ((1 << dt.bits) - 1)
        return f'((float)__builtin_nan("{(0x100 | code) << 29:#x}"))'
    if np.isinf(x):
        return "(-__builtin_inff())" if x < 0 else "__builtin_inff()"
    return f"({x.hex()}f)" if x < 0 else f"{x.hex()}f"


def storage_bits(value: np.ndarray, dt: DType) -> list[int]:
    """The storage bytes of the values of a sub-byte or small-float array."""
    flat = np.ascontiguousarray(np.asarray(value).astype(dt.np)).reshape(-1)
    raw = flat.view(np.uint8)
    return (raw & ((1 << dt.bits) - 1)).astype(int).tolist()


def complex_literal(value: object, dt: DType, part: Callable[[Any, bool], str]) -> str:
    """`part` formats one component (cexpr's exact float text)."""
    z = complex(np.asarray(value).astype(dt.np))
    single = dt.name == "c64"
    comp = np.float32 if single else np.float64
    re, im = part(comp(z.real), single), part(comp(z.imag), single)
    return f"__builtin_complex({re}, {im})"


# ----- ops ---------------------------------------------------------------------------------


def narrow_int_op(op: Opcode, dt: DType, ops: list[str]) -> str | None:
    """`op` on the sub-byte integer type `dt` (operands in its compute type)."""
    wide = "s8" if dt.is_signed else "u8"
    mask = (1 << dt.bits) - 1
    plain = {Op.ADD: "+", Op.SUBTRACT: "-", Op.MULTIPLY: "*", Op.AND: "&", Op.OR: "|",
             Op.XOR: "^"}
    if op in plain:
        return wrap(dt, f"(int32_t){ops[0]} {plain[op]} (int32_t){ops[1]}")
    if op is Op.NEGATE:
        return wrap(dt, f"-(int32_t){ops[0]}")
    if op is Op.NOT:
        return wrap(dt, f"~(int32_t){ops[0]}")
    if op is Op.SHIFT_RIGHT_LOGICAL:
        return wrap(dt, f"hf_shrl_u8((uint8_t)({ops[0]} & {mask}), (uint8_t){ops[1]})")
    if op is Op.CLZ:
        return wrap(dt, f"hf_clz_u8((uint8_t)({ops[0]} & {mask})) - {8 - dt.bits}")
    if op is Op.POPCNT:  # s4: the sign-extended byte's bits, as XLA (numerics.narrow_unary)
        bits = "0xff" if dt.name == "s4" else mask
        return wrap(dt, f"hf_popcnt_u8((uint8_t)({ops[0]} & {bits}))")
    if op is Op.MULHI:  # s4/u4 shift by a byte, as XLA (numerics.mulhi_shift)
        shift = 8 if dt.name in ("s4", "u4") else dt.bits
        return wrap(dt, f"((int32_t){ops[0]} * (int32_t){ops[1]}) >> {shift}")
    helpers = {Op.DIVIDE: "div", Op.REMAINDER: "rem", Op.POWER: "pow", Op.SHIFT_LEFT: "shl",
               Op.SHIFT_RIGHT_ARITHMETIC: "shra", Op.MAXIMUM: "max", Op.MINIMUM: "min",
               Op.ABS: "abs", Op.SIGN: "sign"}
    if op is Op.SHIFT_RIGHT_ARITHMETIC:  # on the bits read as signed, unsigned types too
        sx = wrap(DTYPES[f"s{dt.bits}"], ops[0])
        return wrap(dt, f"hf_shra_s8({sx}, (int8_t){ops[1]})")
    if op in helpers:
        if op is Op.ABS and not dt.is_signed:
            return ops[0]
        return wrap(dt, f"hf_{helpers[op]}_{wide}({', '.join(ops)})")
    if op is Op.CLAMP:
        return f"hf_min_{wide}(hf_max_{wide}({ops[1]}, {ops[0]}), {ops[2]})"
    return None


def _c64(expr: str, dt: DType) -> str:
    return f"hf_c64_of({expr})" if dt.name == "c64" else expr


def _wide(expr: str, dt: DType) -> str:
    return f"((hf_c128){expr})" if dt.name == "c64" else expr


def complex_op(op: Opcode, dt: DType, arg_dtypes: tuple[DType, ...], ops: list[str]
               ) -> str | None:
    """`op` with a complex result, or `abs` / `real` / `imag` of a complex operand."""
    src = arg_dtypes[0] if arg_dtypes else dt
    if op in (Op.REAL, Op.IMAG, Op.ABS) and src.is_complex:
        if op is Op.ABS:
            re, im = f"__real__ {ops[0]}", f"__imag__ {ops[0]}"
            t = "float" if dt.name == "f32" else "double"
            return f"(({t})hypot((double)({re}), (double)({im})))"
        return f"({'__real__' if op is Op.REAL else '__imag__'} {ops[0]})"
    if not dt.is_complex:
        return None
    if op is Op.COMPLEX:
        t = "float" if dt.name == "c64" else "double"
        return f"__builtin_complex(({t}){ops[0]}, ({t}){ops[1]})"
    if op in (Op.ADD, Op.SUBTRACT):
        return f"({ops[0]} {'+' if op is Op.ADD else '-'} {ops[1]})"
    if op is Op.NEGATE:
        return f"(-{ops[0]})"
    if op is Op.SIGN and dt.name == "c64":  # |z| in f32, as XLA (overflows at 2^128)
        return f"hf_csign_c64({ops[0]})"
    if op is Op.RSQRT and dt.name == "c64":  # XLA's polar form, the argument by atan2f
        return f"hf_crsqrt_c64({ops[0]})"
    if op is Op.MULTIPLY and dt.name == "c64":  # XLA's fused formula in f32
        return f"hf_cmul_c64({ops[0]}, {ops[1]})"
    if op is Op.DIVIDE and dt.name == "c64":  # XLA's fused Smith's method in f32
        return f"hf_cdiv_c64({ops[0]}, {ops[1]})"
    if op is Op.POWER:  # XLA's formula in the component type (daz_math.py)
        return f"hf_cpow_xla_{dt.name}({ops[0]}, {ops[1]})"
    fn = COMPLEX_FUNCTIONS.get(op.value)
    if fn is None:
        return None
    return _c64(f"{fn}({', '.join(_wide(o, dt) for o in ops)})", dt)


def complex_convert(src: DType, dst: DType, x: str) -> str | None:
    """real -> complex (imaginary part 0) and complex -> complex."""
    if not dst.is_complex:
        return None
    t = "float" if dst.name == "c64" else "double"
    if src.is_complex:
        return f"(({storage_ctype(dst)}){x})"
    return f"__builtin_complex(({t}){x}, ({t})0)"
