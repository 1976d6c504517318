"""Scalar semantics of the CPU backend: each HLO elementwise op on each element type as one C
expression that gives exactly the interpreter's result (`backends/interpreter/elementwise.py`).

Types: a value has a *storage* type (`ctype`: what arrays hold; pred is uint8_t 0/1, f16/bf16 are
raw uint16_t bits) and a *compute* type (`compute_type`: the same, except f16/bf16 compute in
float). `load`/`store` convert between them; `elementwise` takes operands as compute-type C
expressions and returns a compute-type C expression.

Conditions enforced:
- Each operand expression is used once in the result (helpers take anything used twice), so nested
  expressions never grow exponentially.
- Integer arithmetic never relies on C signed overflow: add/subtract/multiply/negate/abs run in an
  unsigned type at least as wide as int and are cast back (wrap-around, as XLA).
- f16/bf16 results are rounded to their type after every op (`hf_round_f16`/`hf_round_bf16`),
  which equals the interpreter's "compute in f64, round once" for + - * / sqrt (f32 has more than
  2p+2 bits for both) and is within one ulp of it for transcendentals.
- Transcendentals call `mathlib.FUNCTIONS[opcode]` (f32 for f32/f16/bf16, f64 for f64); without
  mathlib they call libm.
- Anything the CPU backend cannot express raises `UnsupportedOpError`, naming the instruction.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from hlofuse.backends.cpu import cexpr_e8m0, cexpr_types, cprelude, daz_math
from hlofuse.backends.kernel_ir.ir import ScalarOp
from hlofuse.backends.subnormals import PASSTHROUGH
from hlofuse.errors import UnsupportedOpError
from hlofuse.ir.dtypes import F64, DType, int_range, int_saturation_bounds
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape

_CTYPES = {
    "pred": "uint8_t",
    "s8": "int8_t",
    "s16": "int16_t",
    "s32": "int32_t",
    "s64": "int64_t",
    "u8": "uint8_t",
    "u16": "uint16_t",
    "u32": "uint32_t",
    "u64": "uint64_t",
    "f16": "uint16_t",
    "bf16": "uint16_t",
    "f32": "float",
    "f64": "double",
}
_NARROW = ("f16", "bf16")


def _name(dtype: DType | str) -> str:
    return dtype if isinstance(dtype, str) else dtype.name


def ctype(dtype: DType) -> str:
    """The C storage type of `dtype` (arrays, kernel arguments)."""
    t = _CTYPES.get(_name(dtype))
    if t is None and not isinstance(dtype, str):
        t = cexpr_types.storage_ctype(dtype)
    if t is None:
        raise UnsupportedOpError(f"element type {dtype} has no C type in the cpu backend")
    return t


def compute_type(dtype: DType) -> str:
    """The C type values of `dtype` are computed in (float for f16/bf16 and the 8- and 4-bit
    floats, the value itself for sub-byte integers)."""
    if _name(dtype) in _NARROW:
        return "float"
    if not isinstance(dtype, str) and _name(dtype) not in _CTYPES:
        t = cexpr_types.compute_ctype(dtype)
        if t is not None:
            return t
    return ctype(dtype)


def _extended(dtype: DType | str) -> bool:
    """A type `cexpr_types` handles (sub-byte integer, complex, 8- or 4-bit float)?"""
    return not isinstance(dtype, str) and dtype.name not in _CTYPES


def load(dtype: DType, expr: str) -> str:
    """Storage value -> compute value."""
    if _extended(dtype):
        return cexpr_types.load(dtype, expr) or expr
    n = _name(dtype)
    if n == "f16":
        return f"hf_f16_to_f32({expr})"
    if n == "bf16":
        return f"hf_bf16_to_f32({expr})"
    return expr


def store(dtype: DType, expr: str) -> str:
    """Compute value -> storage value (round to nearest even for f16/bf16)."""
    if _extended(dtype):
        return cexpr_types.store(dtype, expr) or expr
    n = _name(dtype)
    if n == "f16":
        return f"hf_f32_to_f16({expr})"
    if n == "bf16":
        return f"hf_f32_to_bf16({expr})"
    return expr


def _round(dtype: DType, expr: str) -> str:
    """Round a float expression to `dtype` (identity for f32/f64)."""
    if _extended(dtype) and cexpr_types.is_small_float(dtype):
        return cexpr_types.round_to(dtype, expr)
    n = _name(dtype)
    if n == "f16":
        return f"hf_round_f16({expr})"
    if n == "bf16":
        return f"hf_round_bf16({expr})"
    return expr


def _fsfx(dtype: DType) -> str:
    """The helper suffix of a float type's compute type."""
    return "f64" if _name(dtype) == "f64" else "f32"


# ----- literals ------------------------------------------------------------------------------


def _float_text(x: np.floating | np.ndarray, single: bool) -> str:
    """Exact C text of an f32 (`single`) or f64 value, NaN sign and payload included."""
    suffix = "f" if single else ""
    v = float(x)
    if math.isnan(v):
        bits = int(np.asarray(x, np.float32 if single else np.float64).view(
            np.uint32 if single else np.uint64))
        man = 23 if single else 52
        quiet = (bits >> (man - 1)) & 1
        payload = bits & ((1 << (man - 1)) - 1)
        body = f'__builtin_nan{"" if quiet else "s"}{suffix}("{payload:#x}")'
        return f"(-{body})" if bits >> (31 if single else 63) else body
    if math.isinf(v):
        return f"(-__builtin_inf{suffix}())" if v < 0 else f"__builtin_inf{suffix}()"
    h = v.hex()  # e.g. -0x1.8000000000000p+1
    mant, exp = h.split("p")
    if "." in mant:
        mant = mant.rstrip("0").rstrip(".")
    text = f"{mant}p{exp}{suffix}"
    return f"({text})" if text.startswith("-") else text


def _int_text(v: int, name: str) -> str:
    bits = int(name[1:])
    signed = name[0] == "s"
    if signed and v == -(1 << (bits - 1)) and bits >= 32:
        suffix = "LL" if bits == 64 else ""
        return f"(-{(1 << (bits - 1)) - 1}{suffix}-1)"
    if bits == 64:
        return f"{v}{'LL' if signed else 'ULL'}"
    if bits == 32 and not signed:
        return f"{v}u"
    return str(v)


def literal(value: object, dtype: DType) -> str:
    """A C constant of `dtype`'s compute type holding `value` exactly."""
    n = _name(dtype)
    if _extended(dtype):
        if dtype.is_complex:
            return cexpr_types.complex_literal(value, dtype, _float_text)
        if cexpr_types.is_small_float(dtype):
            return cexpr_types.small_float_literal(value, dtype)
        if dtype.is_narrow_int:
            return cexpr_types.narrow_literal(value, dtype)
    if n == "pred":
        return "((uint8_t)1)" if bool(value) else "((uint8_t)0)"
    if n in ("f16", "bf16", "f32"):
        x = np.asarray(value).astype(np.dtype(dtype.np)).astype(np.float32)
        return _float_text(x[()], single=True)
    if n == "f64":
        return _float_text(np.asarray(value).astype(np.float64)[()], single=False)
    if n in _CTYPES:
        return f"(({ctype(dtype)}){_int_text(int(value), n)})"  # type: ignore[call-overload]
    raise UnsupportedOpError(f"no C literal for element type {dtype}")


def array_initializer(array: np.ndarray, dtype: DType) -> str:
    """`{...}` initializer of the storage values of `array` (row-major), compact."""
    n = _name(dtype)
    flat = np.ascontiguousarray(np.asarray(array).astype(dtype.np)).reshape(-1)
    if flat.size == 0:
        return "{0}"
    if _extended(dtype) and dtype.is_complex:
        items = [literal(v, dtype) for v in flat.tolist()]
    elif _extended(dtype):
        items = [str(v) for v in cexpr_types.storage_bits(flat, dtype)]
    elif n in _NARROW:
        items = [str(v) for v in flat.view(np.uint16).tolist()]
    elif n == "pred":
        items = ["1" if v else "0" for v in flat.tolist()]
    elif n in ("f32", "f64"):
        single = n == "f32"
        raw = flat.view(np.uint32 if single else np.uint64)
        uniq, inverse = np.unique(raw, return_inverse=True)
        texts = [_short_float(v, single) for v in uniq.view(flat.dtype)]
        items = [texts[i] for i in inverse.reshape(-1).tolist()]
    else:
        uniq, inverse = np.unique(flat, return_inverse=True)
        texts = [_int_text(int(v), n) for v in uniq.tolist()]
        items = [texts[i] for i in inverse.reshape(-1).tolist()]
    lines = [",".join(items[i : i + 16]) for i in range(0, len(items), 16)]
    return "{" + ",\n".join(lines) + "}"


def _short_float(x: np.floating, single: bool) -> str:
    """The shortest decimal that reads back as `x` (C compilers round decimal literals
    correctly), or the exact builtin form for inf/nan."""
    if not np.isfinite(x):
        return _float_text(x, single)
    text = str(x) if single else repr(float(x))
    if "e" not in text and "." not in text:
        text += ".0"
    return text + ("f" if single else "")


# ----- elementwise ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Op:
    """What the scalar semantics need of an op: opcode, result and operand types, attributes,
    and a name for error messages."""

    opcode: Opcode
    dtype: DType
    arg_dtypes: tuple[DType, ...]
    attrs: dict[str, object]
    name: str
    consts: tuple[object | None, ...] = ()  # operand values where constant (cexpr_e8m0)


def _of_instruction(instr: Instruction) -> _Op:
    shape = instr.shape
    if not isinstance(shape, ArrayShape):
        raise UnsupportedOpError(
            f"instruction {instr.name}: {instr.opcode.value} with result shape {shape} is not an "
            "elementwise array op"
        )
    args = []
    for i, o in enumerate(instr.operands):
        if not isinstance(o.shape, ArrayShape):
            raise UnsupportedOpError(
                f"instruction {instr.name}: operand {i} has shape {o.shape}, expected an array")
        args.append(o.shape.dtype)
    return _Op(instr.opcode, shape.dtype, tuple(args), dict(instr.attrs), instr.name)


def _unsupported(instr: _Op, dt: DType, why: str = "") -> UnsupportedOpError:
    extra = f" ({why})" if why else ""
    return UnsupportedOpError(
        f"instruction {instr.name}: {instr.opcode.value} on {dt} is not supported by the cpu "
        f"backend{extra}; the interpreter backend runs it"
    )


DAZ_SAFE_F32 = frozenset({Opcode.EXP, Opcode.TANH, Opcode.LOGISTIC})

_MATH_OPS = {
    Opcode.CBRT: "cbrt",
    Opcode.COS: "cos",
    Opcode.ERF: "erf",
    Opcode.EXP: "exp",
    Opcode.EXPM1: "expm1",
    Opcode.LOG: "log",
    Opcode.LOG1P: "log1p",
    Opcode.SIN: "sin",
    Opcode.TAN: "tan",
    Opcode.TANH: "tanh",
    Opcode.ATAN2: "atan2",
    Opcode.POWER: "pow",
}

_LIBM_UNARY = {
    Opcode.ACOS: "acos",
    Opcode.ACOSH: "acosh",
    Opcode.ASIN: "asin",
    Opcode.ASINH: "asinh",
    Opcode.ATAN: "atan",
    Opcode.ATANH: "atanh",
    Opcode.COSH: "cosh",
    Opcode.SINH: "sinh",
}

_EXACT_UNARY = {  # libm functions that are exact (correctly rounded by definition)
    Opcode.CEIL: "ceil",
    Opcode.FLOOR: "floor",
    Opcode.ROUND_EVEN: "rint",
    Opcode.SQRT: "sqrt",
}


def _mathlib_functions() -> dict[str, tuple[str, str]]:
    try:
        from hlofuse.backends.cpu import mathlib
    except ImportError:
        return {}
    return dict(getattr(mathlib, "FUNCTIONS", {}))


def _math_call(op: Opcode, dt: DType, args: list[str]) -> str:
    f64 = _name(dt) == "f64"
    funcs = _mathlib_functions()
    if op.value in funcs:
        fn = funcs[op.value][1 if f64 else 0]
    elif op is Opcode.LOGISTIC:
        return _logistic(dt, args)
    else:
        fn = _MATH_OPS[op] + ("" if f64 else "f")
    return _round(dt, f"{fn}({', '.join(args)})")


def _logistic(dt: DType, args: list[str]) -> str:
    """libm fallback: f32 computed in double (accurate); f64 by the form the interpreter uses."""
    if _name(dt) == "f64":
        return f"hf_logistic_libm_f64({args[0]})"
    return _round(dt, f"((float)(1.0 / (1.0 + exp(-(double){args[0]}))))")


def elementwise(instr: Instruction, operands: list[str]) -> str:
    """A C expression (in `compute_type` of the result) computing `instr` from its operands'
    compute-type expressions."""
    return _elementwise(_of_instruction(instr), operands)


def elementwise_op(op: ScalarOp, arg_dtypes: list[DType], operands: list[str],
                   where: str = "", consts: Sequence[object | None] = ()) -> str:
    """The same for a kernel-IR `ScalarOp` whose operands have `arg_dtypes`; `where` names the
    kernel or instruction in errors; `consts` the operands' values where they are constants
    (None where they vary)."""
    return _elementwise(_Op(op.opcode, op.dtype, tuple(arg_dtypes), dict(op.attrs), where,
                            tuple(consts)), operands)


def _elementwise(instr: _Op, operands: list[str]) -> str:
    op = instr.opcode
    dt = instr.dtype
    ops = [f"({o})" for o in operands]
    if op is Opcode.COPY:
        return ops[0]
    if op is Opcode.SELECT:
        return f"({ops[0]} ? {ops[1]} : {ops[2]})"
    if op is Opcode.CONVERT:
        return _convert(instr, instr.arg_dtypes[0], dt, ops[0])
    if op is Opcode.BITCAST_CONVERT:
        return _bitcast_convert(instr, instr.arg_dtypes[0], dt, ops[0])
    if op is Opcode.STOCHASTIC_CONVERT:  # round in double, then a saturating convert
        src, rnd = instr.arg_dtypes
        if not (src.is_float and rnd.kind == "unsigned" and dt.is_integral):
            raise _unsupported(instr, dt, "stochastic-convert converts floats to integers")
        rounded = f"hf_stochastic_round((double){ops[0]}, (uint64_t){ops[1]}, {rnd.bits})"
        return _convert(instr, F64, dt, rounded)
    if op is Opcode.COMPARE:
        return _compare(instr, ops)
    if op is Opcode.IS_FINITE:
        return f"((uint8_t)(isfinite{ops[0]} != 0))"
    if dt.is_complex or (instr.arg_dtypes and instr.arg_dtypes[0].is_complex):
        expr = cexpr_types.complex_op(op, dt, instr.arg_dtypes, ops)
        if expr is None:
            raise _unsupported(instr, dt)
        return expr
    if op in (Opcode.REAL, Opcode.IMAG):
        return ops[0] if op is Opcode.REAL else literal(0, dt)  # a real number's parts
    if dt.is_narrow_int:
        expr = cexpr_types.narrow_int_op(op, dt, ops)
        if expr is None:
            raise _unsupported(instr, dt)
        return expr
    if cexpr_types.is_small_float(dt):  # computed in float, rounded to the type after every op
        expr = _e8m0(instr, ops) if _name(dt) == "f8e8m0fnu" else None
        return cexpr_types.round_to(dt, expr or _float_op(instr, dt, ops))
    if dt.is_float:
        return _float_op(instr, dt, ops)
    if dt.is_pred:
        return _pred_op(instr, dt, ops)
    return _int_op(instr, dt, ops)


def _e8m0(instr: _Op, ops: list[str]) -> str | None:
    """An e8m0 op as XLA's CPU computes it (cexpr_e8m0), None for a move."""
    def f32(op: Opcode, args: list[str]) -> str:
        return _float_op(replace(instr, opcode=op), instr.dtype, args)

    def f64(op: Opcode, args: list[str]) -> str:
        return _float_op(replace(instr, opcode=op, dtype=F64, arg_dtypes=(F64,) * len(args)),
                         F64, args)

    return cexpr_e8m0.e8m0_op(instr.opcode, ops, instr.consts, f32, f64)


def _float_op(instr: _Op, dt: DType, ops: list[str]) -> str:
    op = instr.opcode
    sfx = _fsfx(dt)
    f64 = sfx == "f64"
    fs = "" if f64 else "f"
    binary = {Opcode.ADD: "+", Opcode.SUBTRACT: "-", Opcode.MULTIPLY: "*", Opcode.DIVIDE: "/"}
    if op in binary:
        return _round(dt, f"({ops[0]} {binary[op]} {ops[1]})")
    if op is Opcode.NEGATE:
        return f"(-{ops[0]})"
    if op is Opcode.ABS:
        return f"fabs{fs}{ops[0]}"
    if op in _EXACT_UNARY:
        return _round(dt, f"{_EXACT_UNARY[op]}{fs}{ops[0]}")
    if op is Opcode.ROUND_AFZ:
        return f"hf_round_afz_{sfx}{ops[0]}"
    if op is Opcode.SIGN:
        return f"hf_sign_{sfx}{ops[0]}"
    if op is Opcode.MAXIMUM:
        return f"hf_max_{sfx}({ops[0]}, {ops[1]})"
    if op is Opcode.MINIMUM:
        return f"hf_min_{sfx}({ops[0]}, {ops[1]})"
    if op is Opcode.CLAMP:
        return f"hf_min_{sfx}(hf_max_{sfx}({ops[1]}, {ops[0]}), {ops[2]})"
    if op is Opcode.REMAINDER:
        return f"fmod{fs}({ops[0]}, {ops[1]})"
    if op is Opcode.RSQRT:
        if f64:
            return f"(1.0 / sqrt{ops[0]})"
        return _round(dt, f"((float)(1.0 / sqrt((double){ops[0]})))")
    if op is Opcode.REDUCE_PRECISION:
        e, m = instr.attrs.get("exponent_bits"), instr.attrs.get("mantissa_bits")
        if e is None or m is None or int(e) < 1 or int(m) < 0:  # type: ignore[call-overload]
            raise _unsupported(instr, dt, "needs exponent_bits >= 1 and mantissa_bits >= 0")
        e, m = int(e), int(m)  # type: ignore[call-overload]
        if _name(dt) == "bf16" or cexpr_types.is_small_float(dt):  # via f32 (the caller
            # rounds small floats to their type)
            return _round(dt, f"hf_reduce_precision_f32({ops[0]}, {e}, {m})")
        return f"hf_reduce_precision_{_name(dt)}({ops[0]}, {e}, {m})"
    # Math functions read their operands flushed when the file flushes subnormals (fpenv.py):
    # under DAZ, mathlib's and libm's bit tricks would still see a subnormal's exponent. The
    # f32 exp, tanh and logistic (vmath.py) use an operand's bits only for its sign, so DAZ
    # alone gives them the flushed operand's result (`DAZ_SAFE_F32`).
    # Except power: the C library's pow, which XLA calls, tells its operands apart by their
    # bits before it computes (mathlib's hf_pow_xla_*, interpreter/flush.py `daz_power`).
    # So is atan2 (glibc's atan2f / atan2: daz_math's hf_atan2_xla_*, `daz_atan2`), and f32 /
    # bf16 cbrt gives a subnormal a constant (hf_cbrt_xla_f32, `daz_cbrt`); sin, tan, expm1
    # and f32 tanh return a subnormal operand itself (`subnormals.PASSTHROUGH`).
    if op is Opcode.POWER:
        return _round(dt, f"hf_pow_xla_{'f64' if f64 else 'f32'}({ops[0]}, {ops[1]})")
    if op is Opcode.ATAN2:
        return _round(dt, f"hf_atan2_xla_{'f64' if f64 else 'f32'}({ops[0]}, {ops[1]})")
    if op is Opcode.CBRT and _name(dt) in ("f32", "bf16"):  # daz_math, `daz_cbrt`
        return _round(dt, f"hf_cbrt_xla_f32({ops[0]})")
    flushed = [o if op in DAZ_SAFE_F32 and not f64 else f"hf_ftz_{sfx}({o})" for o in ops]
    if op in PASSTHROUGH[sfx]:  # a subnormal operand is the result (daz_math)
        return f"hf_sub_or_{sfx}({ops[0]}, {_math_call(op, dt, flushed)})"
    if op in _MATH_OPS or op is Opcode.LOGISTIC:
        return _math_call(op, dt, flushed)
    if op in _LIBM_UNARY:  # in double, rounded once (f64: the C library's own accuracy)
        fn = _LIBM_UNARY[op]
        x = flushed[0]
        return f"{fn}({x})" if f64 else _round(dt, f"((float){fn}((double){x}))")
    raise _unsupported(instr, dt)


_PRED_BINARY = {
    Opcode.ADD: "|",
    Opcode.MAXIMUM: "|",
    Opcode.OR: "|",
    Opcode.MULTIPLY: "&",
    Opcode.MINIMUM: "&",
    Opcode.AND: "&",
    Opcode.XOR: "^",
}


def _pred_op(instr: _Op, dt: DType, ops: list[str]) -> str:
    op = instr.opcode
    if op in _PRED_BINARY:
        return f"((uint8_t)({ops[0]} {_PRED_BINARY[op]} {ops[1]}))"
    if op is Opcode.NOT:
        return f"((uint8_t)({ops[0]} ^ 1))"
    if op in (Opcode.ABS, Opcode.SIGN):
        return ops[0]
    if op is Opcode.CLAMP:
        return f"((uint8_t)(({ops[1]} | {ops[0]}) & {ops[2]}))"
    raise _unsupported(instr, dt)


def _int_op(instr: _Op, dt: DType, ops: list[str]) -> str:
    op = instr.opcode
    n = _name(dt)
    t = ctype(dt)
    wu = "uint64_t" if dt.bits == 64 else "uint32_t"
    wrapping = {Opcode.ADD: "+", Opcode.SUBTRACT: "-", Opcode.MULTIPLY: "*"}
    if op in wrapping:
        return f"(({t})(({wu}){ops[0]} {wrapping[op]} ({wu}){ops[1]}))"
    bitwise = {Opcode.AND: "&", Opcode.OR: "|", Opcode.XOR: "^"}
    if op in bitwise:
        return f"(({t})({ops[0]} {bitwise[op]} {ops[1]}))"
    if op is Opcode.NEGATE:
        return f"(({t})(({wu})0 - ({wu}){ops[0]}))"
    if op is Opcode.NOT:
        return f"(({t})~{ops[0]})"
    helpers = {
        Opcode.DIVIDE: "div",
        Opcode.REMAINDER: "rem",
        Opcode.POWER: "pow",
        Opcode.SHIFT_LEFT: "shl",
        Opcode.SHIFT_RIGHT_LOGICAL: "shrl",
        Opcode.SHIFT_RIGHT_ARITHMETIC: "shra",
        Opcode.MAXIMUM: "max",
        Opcode.MINIMUM: "min",
        Opcode.ABS: "abs",
        Opcode.SIGN: "sign",
        Opcode.CLZ: "clz",
        Opcode.POPCNT: "popcnt",
        Opcode.MULHI: "mulhi",
    }
    if op in helpers:
        return f"hf_{helpers[op]}_{n}({', '.join(ops)})"
    if op is Opcode.CLAMP:
        return f"hf_min_{n}(hf_max_{n}({ops[1]}, {ops[0]}), {ops[2]})"
    raise _unsupported(instr, dt)


def _compare(instr: _Op, ops: list[str]) -> str:
    direction = str(instr.attrs.get("direction", ""))
    sym = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}.get(direction)
    src = instr.arg_dtypes[0]
    if sym is None:
        raise _unsupported(instr, src, f"unknown comparison direction {direction!r}")
    kind = instr.attrs.get("type")
    kind = None if kind is None else str(kind)
    a, b = ops
    if src.is_complex and sym not in ("==", "!="):
        raise _unsupported(instr, src, "complex numbers compare only EQ and NE")
    if src.is_narrow_int and kind in ("SIGNED", "UNSIGNED"):
        if kind == "SIGNED" and not src.is_signed:  # read the bits as the signed type
            from hlofuse.ir.dtypes import DTYPES

            signed = DTYPES[f"s{src.bits}"]
            a, b = cexpr_types.wrap(signed, a), cexpr_types.wrap(signed, b)
        elif kind == "UNSIGNED" and src.is_signed:  # the order of the unsigned bits
            a, b = f"((uint8_t){a})", f"((uint8_t){b})"
    elif src.is_small_float and kind == "TOTALORDER":
        a, b = cexpr_types.total_order_key(src, a), cexpr_types.total_order_key(src, b)
    elif src.is_float and kind == "TOTALORDER":
        sfx = _fsfx(src)
        a, b = f"hf_tokey_{sfx}({a})", f"hf_tokey_{sfx}({b})"
    elif src.is_integral and kind == "UNSIGNED" and src.is_signed:
        u = f"uint{src.bits}_t"
        a, b = f"(({u}){a})", f"(({u}){b})"
    elif src.is_integral and kind == "SIGNED" and not src.is_signed:
        s = f"int{src.bits}_t"
        a, b = f"(({s}){a})", f"(({s}){b})"
    return f"((uint8_t)({a} {sym} {b}))"


def _convert(instr: _Op, src: DType, dst: DType, x: str) -> str:
    s, d = _name(src), _name(dst)
    if s == d:
        return x
    if s == "f8e8m0fnu" and d == "c128":  # 2^-127 kept, as to f64
        return f"__builtin_complex(hf_f8e8m0fnu_f32_to_f64({x}), 0.0)"
    if dst.is_complex or src.is_complex:
        expr = cexpr_types.complex_convert(src, dst, x)
        if expr is None:
            raise _unsupported(instr, dst, f"convert from {src}")
        return expr
    if dst.is_pred:
        return f"((uint8_t)({x} != 0))"
    if src.is_float and dst.is_integral:
        x = _saturation_edge(src, dst, x)
    if dst.is_narrow_int:
        if src.is_float:  # saturate in 32 bits, then to the narrow range
            lo, hi = (-(1 << (dst.bits - 1)), (1 << (dst.bits - 1)) - 1) if dst.is_signed \
                else (0, (1 << dst.bits) - 1)
            wide = "s32" if dst.is_signed else "u32"
            v = f"hf_cvt_{_fsfx(src)}_{wide}({x})"
            clamped = f"hf_min_s64(hf_max_s64((int64_t){v}, {lo}), {hi})"
            return f"(({compute_type(dst)}){clamped})"
        return cexpr_types.wrap(dst, f"(int64_t){x}")
    if d == "f8e8m0fnu" and src.is_float and s != "f64":  # 2^-127 is an f32 subnormal
        return f"hf_round_f8e8m0fnu_f32({x})"
    if s == "f8e8m0fnu" and d == "f64":
        return f"hf_f8e8m0fnu_f32_to_f64({x})"
    if s == "f64" and d == "f8e8m0fnu":  # below 2^-126 by XLA's rule (cprelude_types)
        return f"hf_round_f8e8m0fnu_f64({x})"
    if cexpr_types.is_small_float(dst):
        return cexpr_types.round_to(dst, x)
    if src.is_pred or (src.is_integral and dst.is_integral):
        if d in _NARROW:
            return x if src.is_pred else _round(dst, f"((float){x})")
        return f"(({compute_type(dst)}){x})"
    if src.is_float and dst.is_integral:
        return f"hf_cvt_{_fsfx(src)}_{d}({x})"
    if src.is_integral:  # -> float
        if d in _NARROW:
            return _round(dst, f"((float){x})")
        return f"(({compute_type(dst)}){x})"
    # float -> float
    if d == "f64":
        return f"((double){x})"
    if d == "f32":
        return f"((float){x})" if s == "f64" else x
    if d == "f16" and s == "f64":
        return f"hf_round_f16_f64({x})"
    if s == "f64":
        return _round(dst, f"((float){x})")
    return _round(dst, x)


def _saturation_edge(src: DType, dst: DType, x: str) -> str:
    """`x` sent to +-inf where XLA's float -> integer convert saturates before the integer
    range's end: at the range's ends rounded into the source type (f4e2m1fn's +-6,
    `dtypes.int_saturation_bounds`), so the saturating convert gives the integer's max / min."""
    lowest, highest = int_range(dst)
    lo, hi = int_saturation_bounds(src, dst)
    if not (hi <= highest or lo > lowest):
        return x
    lo_t = _float_text(np.float64(lo if lo > lowest else -np.inf), _fsfx(src) == "f32")
    hi_t = _float_text(np.float64(hi if hi <= highest else np.inf), _fsfx(src) == "f32")
    return f"hf_sat_edge_{_fsfx(src)}({x}, {lo_t}, {hi_t})"


def _bitcast_convert(instr: _Op, src: DType, dst: DType, x: str) -> str:
    if src.bits != dst.bits or src.is_pred or dst.is_pred:
        raise _unsupported(
            instr, dst, f"bitcast-convert from {src} is supported only between types of one width"
        )
    s, d = _name(src), _name(dst)
    if s == d:
        return x
    bits = f"uint{max(src.bits, 8)}_t"
    # source value -> raw bits
    if s in _NARROW or _extended(src):
        raw = store(src, x)
    elif s == "f32":
        raw = f"hf_f32_bits({x})"
    elif s == "f64":
        raw = f"hf_f64_bits({x})"
    else:
        raw = f"(({bits}){x})"
    # raw bits -> destination value
    if d in _NARROW or _extended(dst):
        return load(dst, raw)
    if d == "f32":
        return f"hf_f32_from_bits({raw})"
    if d == "f64":
        return f"hf_f64_from_bits({raw})"
    return f"(({ctype(dst)}){raw})"


@functools.cache
def prelude() -> str:
    """Includes, the hf_* helpers and mathlib's functions: emitted once at the top of a file
    (and cut down to what a file uses before it is compiled: `shake.py`)."""
    parts = [cprelude.includes(), cprelude.helpers()]
    try:
        from hlofuse.backends.cpu import mathlib
    except ImportError:
        parts.append("/* mathlib not available: transcendentals use libm */\n")
    else:
        parts.append(mathlib.source())
        parts.append(daz_math.source())  # after mathlib, whose functions it calls
    return "".join(parts)
