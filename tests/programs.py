"""Registry of real JAX programs for the differential suite (interpreter / compiled vs jax.jit).

Every :class:`Program` is a pure JAX function of positional array arguments plus a deterministic
``make_args``.  Lower one with::

    jax.jit(p.fn, keep_unused=True).lower(*p.make_args()).as_text(dialect="hlo", debug_info=True)

Jointly the programs cover every HLO opcode that JAX 0.10.2 can emit for the operations hlofuse
supports (see ``REQUIRED_OPCODES`` / ``IMPOSSIBLE_OPCODES`` and tests/test_programs_jax.py).

Tolerances: ``rtol``/``atol`` are the float tolerances against ``jax.jit``.  The defaults (1e-6)
hold for exactly rounded ops; programs using transcendental functions loosen ``rtol`` to 2e-6..5e-6
(XLA's CPU exp/log/tanh/sin/... are polynomial approximations a few ulp from numpy's), and
programs whose result depends on the order of a floating point reduction or matmul loosen it to
1e-5 (atol 1e-5 where results cross zero).  Every loosened tolerance has its reason in a comment.

Inputs avoid float denormals on purpose: XLA:CPU flushes them to zero (e.g. ``1e-40 != 0`` is
false under jax.jit), which is a platform detail rather than HLO semantics.

Only jax (CPU) with the default 32-bit mode is used: no x64, so 64-bit types never appear.
This module imports jax at import time; import it only where jax is available.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

if importlib.util.find_spec("hlofuse") is None:  # not installed: use the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

Array = Any  # a jax array (tracer while tracing)


@dataclass(frozen=True)
class Program:
    name: str  # snake_case, unique
    fn: Callable[..., Any]  # pure jax function of positional array args
    make_args: Callable[[], tuple]  # deterministic example inputs
    rtol: float = 1e-6
    atol: float = 1e-6
    tags: frozenset[str] = frozenset()


PROGRAMS: list[Program] = []


def _register(
    name: str,
    make_args: Callable[[], tuple],
    *,
    rtol: float = 1e-6,
    atol: float = 1e-6,
    tags: tuple[str, ...] = (),
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        if any(p.name == name for p in PROGRAMS):
            raise ValueError(f"duplicate program name {name!r}")
        PROGRAMS.append(Program(name, fn, make_args, rtol, atol, frozenset(tags)))
        return fn

    return deco


def by_name(name: str) -> Program:
    for p in PROGRAMS:
        if p.name == name:
            return p
    raise KeyError(f"unknown program {name!r}; known: {', '.join(p.name for p in PROGRAMS)}")


# ---------------------------------------------------------------------------------------------
# HLO text helpers (shared with tests/test_programs_jax.py)
# ---------------------------------------------------------------------------------------------


@functools.cache
def lower_to_hlo(p: Program, *, debug_info: bool = True) -> str:
    """The program's HLO text, exactly as the frontend is expected to receive it (cached: several
    test files lower the same programs)."""
    return (
        jax.jit(p.fn, keep_unused=True)
        .lower(*p.make_args())
        .as_text(dialect="hlo", debug_info=debug_info)
    )


_INSTR_START = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*", re.M)
_OPCODE = re.compile(r"([a-z][a-z0-9\-]*)\(")


def hlo_opcodes(text: str) -> set[str]:
    """Opcodes of all instructions in an HLO module's text.

    Equivalent to the regex ``= [^ ]+ ([a-z\\-]+)\\(`` for array-shaped instructions, but also
    handles tuple shapes (``(f32[2]{0}, s32[] /*index=5*/ ...)``, which contain spaces) and opcodes
    with digits (``atan2``).
    """
    ops: set[str] = set()
    for m in _INSTR_START.finditer(text):
        i = m.end()
        if i < len(text) and text[i] == "(":  # tuple shape: skip balanced parentheses
            depth = 0
            while i < len(text):
                if text[i] == "(":
                    depth += 1
                elif text[i] == ")":
                    depth -= 1
                    if depth == 0:
                        i += 1
                        break
                i += 1
        else:
            while i < len(text) and not text[i].isspace():
                i += 1
        om = _OPCODE.match(text, i + 1) if i < len(text) and text[i] == " " else None
        if om:
            ops.add(om.group(1))
    return ops


# Opcodes the programs jointly must produce (HLO text spelling).  ``opt-barrier`` is how XLA
# prints optimization-barrier.
REQUIRED_OPCODES: frozenset[str] = frozenset(
    [
        "add",
        "subtract",
        "multiply",
        "divide",
        "remainder",
        "power",
        "maximum",
        "minimum",
        "abs",
        "negate",
        "sign",
        "floor",
        "ceil",
        "round-nearest-even",
        "round-nearest-afz",
        "sqrt",
        "rsqrt",
        "cbrt",
        "exponential",
        "exponential-minus-one",
        "log",
        "log-plus-one",
        "tanh",
        "sine",
        "cosine",
        "tan",
        "atan2",
        "erf",
        "is-finite",
        "and",
        "or",
        "xor",
        "not",
        "shift-left",
        "shift-right-arithmetic",
        "shift-right-logical",
        "popcnt",
        "count-leading-zeros",
        "compare",
        "select",
        "clamp",
        "convert",
        "bitcast-convert",
        "broadcast",
        "reshape",
        "transpose",
        "slice",
        "dynamic-slice",
        "dynamic-update-slice",
        "concatenate",
        "pad",
        "reverse",
        "iota",
        "reduce",
        "reduce-window",
        "dot",
        "gather",
        "scatter",
        "sort",
        "while",
        "conditional",
        "call",
        "tuple",
        "get-tuple-element",
        "constant",
        "parameter",
        "rng-bit-generator",
        "opt-barrier",
    ]
)

# Opcodes from the wish list that JAX 0.10.2 cannot put into *lowered* HLO text:
IMPOSSIBLE_OPCODES: dict[str, str] = {
    # jax/_src/lax/lax.py: "There is no HLO logistic/sigmoid primitive, so this lowers to a
    # sequence of other ops" -- logistic_p lowers to 1 / (1 + exp(-x)) (its hlo.logistic lowering
    # is commented out).  jax.nn.sigmoid / lax.logistic are still covered, as divide/exponential.
    "logistic": "lax.logistic lowers to divide(1, add(1, exponential(negate(x))))",
    # copy_p lowers to its operand (no stablehlo copy op); XLA inserts `copy` only in its own
    # compile-time passes (copy insertion, layout assignment), never in the lowered module.
    "copy": "jnp.copy / lax copy_p lower to the operand itself; copies appear only after compile",
}

COMPARE_DIRECTIONS: frozenset[str] = frozenset({"EQ", "NE", "LT", "LE", "GT", "GE"})


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _normal(seed: int, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _uniform(seed: int, lo: float, hi: float, *shape: int) -> np.ndarray:
    return _rng(seed).uniform(lo, hi, shape).astype(np.float32)


def _key(seed: int) -> np.ndarray:
    """Raw threefry key data (uint32[2]), as jax.random.key_data(jax.random.PRNGKey(seed))."""
    return np.array([0, seed], dtype=np.uint32)


F32_SPECIALS = np.array(
    [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.7, -3.7, 1e30, -1e-30, np.inf, -np.inf, np.nan],
    dtype=np.float32,
)

INT32_MIN = np.iinfo(np.int32).min
INT32_MAX = np.iinfo(np.int32).max


# =============================================================================================
# Elementwise float math
# =============================================================================================


def _binary_f32_args() -> tuple:
    a = np.concatenate([_normal(1, 20, scale=3.0), F32_SPECIALS[:8]])
    b = np.concatenate([_normal(2, 20, scale=2.0), np.array([0, 0, -0.0, 2, -2, 0.5, 3, -1.5])])
    return a.astype(np.float32), b.astype(np.float32)


# power is a transcendental in XLA (exp(b*log(a))): 2e-6.
@_register("elementwise_binary_f32", _binary_f32_args, rtol=2e-6)
def elementwise_binary_f32(a: Array, b: Array) -> tuple:
    return (
        a + b,
        a - b,
        a * b,
        a / b,  # includes x/0 -> +-inf and 0/0 -> nan
        lax.rem(a, b),  # C fmod semantics; rem(x, 0) = nan
        jnp.power(jnp.abs(a) + 0.5, b),
        jnp.maximum(a, b),
        jnp.minimum(a, b),
    )


@_register("elementwise_unary_rounding", lambda: (np.concatenate([F32_SPECIALS, _normal(3, 17)]),))
def elementwise_unary_rounding(a: Array) -> tuple:
    return (
        jnp.abs(a),
        -a,
        jnp.sign(a),
        jnp.floor(a),
        jnp.ceil(a),
        jnp.round(a),  # round-nearest-even: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2
        lax.round(a, lax.RoundingMethod.AWAY_FROM_ZERO),  # round-nearest-afz: 2.5 -> 3
        jnp.trunc(a),
    )


# XLA's CPU transcendental approximations are within a few ulp of numpy's (measured <= 4e-7
# relative on these ranges): 2e-6.
@_register(
    "transcendental_f32",
    lambda: (_uniform(4, 0.01, 4.0, 64), _uniform(5, -1.2, 1.2, 64)),
    rtol=2e-6,
)
def transcendental_f32(pos: Array, x: Array) -> tuple:
    return (
        jnp.sqrt(pos),
        lax.rsqrt(pos),
        jnp.cbrt(x),
        jnp.exp(x),
        jnp.expm1(x),
        jnp.log(pos),
        jnp.log1p(pos),
        jnp.tanh(x),
        jnp.sin(x * 3.0),
        jnp.cos(x * 3.0),
        jnp.tan(x),
        lax.erf(x),
        jax.nn.sigmoid(x),  # no logistic opcode from jax: exp + divide
    )


def _atan2_args() -> tuple:
    y = np.array([0.0, -0.0, 1.0, -1.0, 1.0, -1.0, 0.0, -0.0, np.inf, 2.0, 3.5, -0.25], np.float32)
    x = np.array([1.0, 1.0, 0.0, 0.0, -1.0, -1.0, -1.0, -1.0, 1.0, np.inf, -2.0, 0.5], np.float32)
    return np.concatenate([y, _normal(6, 20)]), np.concatenate([x, _normal(7, 20)])


# atan2 is transcendental: 2e-6.
@_register("atan2_quadrants", _atan2_args, rtol=2e-6)
def atan2_quadrants(y: Array, x: Array) -> Array:
    return jnp.arctan2(y, x)


@_register("special_values_nan_inf", lambda: (np.concatenate([F32_SPECIALS, _normal(8, 9)]),))
def special_values_nan_inf(a: Array) -> tuple:
    finite = jnp.isfinite(a)
    return (
        finite,
        jnp.isnan(a),
        jnp.isinf(a),
        jnp.where(finite, a, jnp.nan),  # nan constant
        jnp.nan_to_num(a, nan=0.0, posinf=1e4, neginf=-1e4),
        jnp.maximum(a, -jnp.inf),  # -inf constant; max propagates nan
        jnp.minimum(a, jnp.inf),
        jnp.where(a > 0, jnp.inf, -jnp.inf),
    )


def _gelu_args() -> tuple:
    return (np.concatenate([_normal(9, 60, scale=3.0), np.array([-30, 30, 0], np.float32)]),)


# erf/tanh/exp/log1p approximations: 5e-6.
@_register("activations_gelu_softplus", _gelu_args, rtol=5e-6, atol=2e-6)
def activations_gelu_softplus(x: Array) -> tuple:
    return (
        jax.nn.relu(x),
        jax.nn.gelu(x, approximate=False),
        jax.nn.gelu(x, approximate=True),
        jax.nn.softplus(x),
        jax.nn.silu(x),
        jax.nn.elu(x),
        jax.nn.leaky_relu(x, 0.1),
    )


def _clamp_args() -> tuple:
    x = np.concatenate(
        [_normal(10, 30, scale=2.0), np.array([np.nan, np.inf, -np.inf], np.float32)]
    )
    lo = _uniform(11, -1.5, -0.5, 33)
    hi = _uniform(12, 0.5, 1.5, 33)
    return x, lo, hi, _rng(13).integers(-50, 50, 33).astype(np.int32)


@_register("clamp_select_where", _clamp_args)
def clamp_select_where(x: Array, lo: Array, hi: Array, i: Array) -> tuple:
    return (
        lax.clamp(lo, x, hi),  # array bounds
        lax.clamp(-1.0, x, 1.0),  # scalar bounds
        jnp.clip(x, -0.5, 0.75),
        lax.clamp(np.int32(-10), i, np.int32(20)),
        lax.select(x > 0, x, lo),
        jnp.where(i % 3 == 0, x, hi),
    )


@_register(
    "integer_and_float_power",
    lambda: (_uniform(14, 0.1, 2.0, 16), _rng(15).integers(-6, 7, 16).astype(np.int32)),
    rtol=2e-6,  # power/pow with float exponents is transcendental
)
def integer_and_float_power(x: Array, n: Array) -> tuple:
    return (
        x**3,  # integer_pow -> multiplies
        lax.integer_pow(x, -2),
        jnp.power(x, 2.5),
        jnp.power(n, 3),  # int ** static int
        jnp.power(jnp.abs(n), jnp.abs(n) % 5),  # int ** int array (while-free square-and-multiply)
        jnp.power(-x, 3.0),  # negative base with integral float exponent
        jnp.square(n),
    )


# =============================================================================================
# Compare, select, bool logic
# =============================================================================================


def _compare_args() -> tuple:
    a = np.concatenate([_normal(16, 12), np.array([1.0, np.nan, -0.0, 0.0], np.float32)])
    b = np.concatenate([_normal(17, 12), np.array([1.0, 1.0, 0.0, np.nan], np.float32)])
    i = _rng(18).integers(-3, 3, 16).astype(np.int32)
    j = _rng(19).integers(-3, 3, 16).astype(np.int32)
    u = np.array([0, 1, 2, 3, 0xFFFFFFFF, 0x80000000, 7, 8] * 2, np.uint32)
    v = np.array([1, 1, 0xFFFFFFFF, 2, 3, 0x7FFFFFFF, 7, 9] * 2, np.uint32)
    return a, b, i, j, u, v


@_register("compare_all_directions", _compare_args)
def compare_all_directions(a: Array, b: Array, i: Array, j: Array, u: Array, v: Array) -> tuple:
    def all_dirs(x: Array, y: Array) -> Array:
        return jnp.stack([x == y, x != y, x < y, x <= y, x > y, x >= y])

    return all_dirs(a, b), all_dirs(i, j), all_dirs(u, v)


def _bool_args() -> tuple:
    r = _rng(20)
    return r.integers(0, 2, (4, 8)).astype(bool), r.integers(0, 2, (4, 8)).astype(bool)


@_register("bool_logic_any_all", _bool_args, tags=("reduce",))
def bool_logic_any_all(p: Array, q: Array) -> tuple:
    return (
        p & q,
        p | q,
        p ^ q,
        ~p,
        jnp.any(p, axis=1),
        jnp.all(q, axis=0),
        jnp.logical_xor(p, q).sum(axis=1),
        p.astype(jnp.float32) * 2.0 - q.astype(jnp.int32).astype(jnp.float32),
    )


# =============================================================================================
# Integer arithmetic and bit manipulation
# =============================================================================================


def _div_rem_args() -> tuple:
    a = np.array(
        [7, -7, 7, -7, 0, 5, INT32_MIN, INT32_MIN, INT32_MAX, -1, 13, INT32_MIN, 100, -100, 3, 1],
        np.int32,
    )
    b = np.array([2, 2, -2, -2, 3, 0, -1, 1, -1, 0, 0, 2, 7, 7, -4, INT32_MIN], np.int32)
    return a, b


@_register("int32_div_rem_edge_cases", _div_rem_args)
def int32_div_rem_edge_cases(a: Array, b: Array) -> tuple:
    # XLA semantics: x / 0 = -1, x % 0 = x, INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0.
    return (
        lax.div(a, b),  # truncating division
        lax.rem(a, b),
        jnp.floor_divide(a, b),  # floor division built from div/rem/select
        jnp.remainder(a, b),
        jnp.abs(a),  # abs(INT_MIN) = INT_MIN
        -a,
        jnp.sign(a),
        a * b,  # wrapping multiply
        a + b,  # wrapping add
        jnp.maximum(a, b),
        jnp.minimum(a, b),
    )


def _bitwise_args() -> tuple:
    r = _rng(21)
    a = r.integers(INT32_MIN, INT32_MAX, 24, dtype=np.int64)
    a[:4] = [0, -1, INT32_MIN, INT32_MAX]
    b = r.integers(INT32_MIN, INT32_MAX, 24, dtype=np.int64)
    return a.astype(np.int32), b.astype(np.int32)


@_register("int32_bitwise_popcnt_clz", _bitwise_args)
def int32_bitwise_popcnt_clz(a: Array, b: Array) -> tuple:
    return (
        a & b,
        a | b,
        a ^ b,
        ~a,
        lax.population_count(a),
        lax.clz(a),
        lax.clz(b.astype(jnp.uint32)),
        lax.population_count(b.astype(jnp.uint32)),
    )


def _shift_args() -> tuple:
    r = _rng(22)
    a = r.integers(INT32_MIN, INT32_MAX, 48, dtype=np.int64).astype(np.int32)
    a[:3] = [-1, INT32_MIN, 1]
    s = np.concatenate([np.arange(-2, 40), r.integers(0, 32, 6)]).astype(np.int32)
    return a, s


@_register("int32_shifts_out_of_range", _shift_args)
def int32_shifts_out_of_range(a: Array, s: Array) -> tuple:
    # Shift amounts >= 32 (and negative ones, which are huge as unsigned): shift-left and
    # shift-right-logical give 0, shift-right-arithmetic gives 0 or -1 (sign fill).
    u = a.astype(jnp.uint32)
    return (
        lax.shift_left(a, s),
        lax.shift_right_arithmetic(a, s),
        lax.shift_right_logical(a, s),
        a << 3,
        a >> 5,  # arithmetic for signed
        u >> 5,  # logical for unsigned
        lax.shift_left(u, s.astype(jnp.uint32)),
        lax.shift_right_logical(u, s.astype(jnp.uint32)),
    )


def _u8_args() -> tuple:
    r = _rng(23)
    return (
        r.integers(0, 256, 32).astype(np.uint8),
        r.integers(0, 256, 32).astype(np.uint8),
        r.integers(0, 10, 32).astype(np.uint8),
    )


@_register("uint8_wraparound", _u8_args)
def uint8_wraparound(a: Array, b: Array, s: Array) -> tuple:
    nz = jnp.maximum(b, jnp.uint8(1))
    return (
        a + b,
        a - b,
        a * b,
        a // nz,
        a % nz,
        lax.div(a, b),  # unsigned x / 0 = all ones
        lax.rem(a, b),
        a & b,
        a | b,
        a ^ b,
        ~a,
        lax.shift_left(a, s),
        lax.shift_right_logical(a, s),  # s >= 8 gives 0
        jnp.maximum(a, b),
        a > b,
        lax.population_count(a),
        lax.clz(a),
        jnp.sum(a.astype(jnp.int32)),
    )


def _small_int_args() -> tuple:
    r = _rng(24)
    i8 = r.integers(-128, 128, 32).astype(np.int8)
    i8[:3] = [-128, 127, -1]
    j8 = r.integers(-128, 128, 32).astype(np.int8)
    j8[:3] = [-1, 1, 0]
    i16 = r.integers(-32768, 32768, 32).astype(np.int16)
    u16 = r.integers(0, 65536, 32).astype(np.uint16)
    return i8, j8, i16, u16


@_register("int8_int16_uint16_arith", _small_int_args)
def int8_int16_uint16_arith(i8: Array, j8: Array, i16: Array, u16: Array) -> tuple:
    return (
        i8 + j8,  # wraps
        i8 * j8,
        lax.div(i8, j8),  # -128 / -1 = -128, x / 0 = -1
        lax.rem(i8, j8),
        jnp.abs(i8),
        lax.shift_right_arithmetic(i8, jnp.int8(3)),
        i16 * i16,
        i16 - jnp.int16(30000),
        lax.shift_right_logical(i16, jnp.int16(4)),
        u16 * u16,
        u16 + jnp.uint16(40000),
        lax.div(u16, jnp.uint16(7)),
        jnp.maximum(i16, i8.astype(jnp.int16)),
        (u16 > 30000) & (i16 < 0),
    )


def _u32_args() -> tuple:
    r = _rng(25)
    a = r.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
    b = r.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
    a[:2] = [0xFFFFFFFF, 0x80000000]
    b[:2] = [0, 3]
    return a, b


@_register("uint32_arith_convert", _u32_args)
def uint32_arith_convert(a: Array, b: Array) -> tuple:
    return (
        a + b,
        a * b,
        a - b,
        lax.div(a, b),
        lax.rem(a, b),
        a >> jnp.uint32(7),
        a < b,
        jnp.minimum(a, b),
        a.astype(jnp.float32),  # large uint32 -> f32 rounding
        a.astype(jnp.int32),  # reinterpretation by wrap
        (a >> jnp.uint32(24)).astype(jnp.uint8),
    )


# =============================================================================================
# Conversions
# =============================================================================================


def _f2i_args() -> tuple:
    a = np.array(
        [
            np.nan, np.inf, -np.inf, 3e9, -3e9, 2147483520.0, -2147483648.0, 255.7, 256.0,
            -1.5, -0.5, 0.5, 1.9, -129.0, 127.9, 300.0, 65535.5, 70000.0, -70000.0, 1e-30,
        ],
        np.float32,
    )  # fmt: skip
    return (np.concatenate([a, _normal(26, 12, scale=100.0)]),)


@_register("convert_float_to_int_saturating", _f2i_args)
def convert_float_to_int_saturating(a: Array) -> tuple:
    # XLA clamps out-of-range values to the target range and maps nan to 0.
    return (
        a.astype(jnp.int32),
        a.astype(jnp.uint32),
        a.astype(jnp.int8),
        a.astype(jnp.uint8),
        a.astype(jnp.int16),
        a.astype(jnp.uint16),
        a.astype(jnp.bool_),  # x != 0 (nan -> True)
        a.astype(jnp.float16).astype(jnp.int32),
        a.astype(jnp.bfloat16),
    )


def _convert_args() -> tuple:
    r = _rng(27)
    i = r.integers(INT32_MIN, INT32_MAX, 16, dtype=np.int64).astype(np.int32)
    i[:4] = [16777217, -16777217, INT32_MAX, INT32_MIN]  # not exactly representable in f32
    p = r.integers(0, 2, 16).astype(bool)
    f = np.concatenate([_normal(28, 12, scale=1000.0), np.array([1e-8, 70000, -1e5, 0.1])])
    u8 = r.integers(0, 256, 16).astype(np.uint8)
    return i, p, f.astype(np.float32), u8


@_register("convert_int_float_bool_halfs", _convert_args)
def convert_int_float_bool_halfs(i: Array, p: Array, f: Array, u8: Array) -> tuple:
    return (
        i.astype(jnp.float32),
        i.astype(jnp.int8),  # truncating wrap
        i.astype(jnp.uint16),
        i.astype(jnp.bool_),
        p.astype(jnp.float32),
        p.astype(jnp.int32),
        u8.astype(jnp.int32),
        u8.astype(jnp.int8),
        u8.astype(jnp.float32),
        f.astype(jnp.float16),  # overflow -> inf, underflow -> 0
        f.astype(jnp.bfloat16),
        f.astype(jnp.bfloat16).astype(jnp.float32),
        f.astype(jnp.float16).astype(jnp.float32),
        i.astype(jnp.bfloat16),
    )


def _bitcast_args() -> tuple:
    i = np.array([0, 1, 0x3F800000, 0x7F800000, 0x7FC00000, -8388608, 0x00000001, -1], np.int32)
    return np.concatenate([F32_SPECIALS[:13], _normal(29, 3)]), i


@_register("bitcast_convert_types", _bitcast_args)
def bitcast_convert_types(a: Array, i: Array) -> tuple:
    bits = lax.bitcast_convert_type(a, jnp.int32)
    return (
        bits,
        lax.bitcast_convert_type(a, jnp.uint32) >> jnp.uint32(23),  # exponent field
        lax.bitcast_convert_type(i, jnp.float32),  # includes inf, nan, denormal
        lax.bitcast_convert_type(a, jnp.uint8),  # f32[16] -> u8[16, 4]
        lax.bitcast_convert_type(a.reshape(8, 2).astype(jnp.float16), jnp.int16),
        lax.bitcast_convert_type(
            lax.bitcast_convert_type(a, jnp.uint16), jnp.float32
        ),  # u16[16, 2] -> f32[16]
    )


# bf16 has an 8-bit mantissa: one rounding is 2^-8 relative, and the sum and matmul may round
# per op or once (XLA keeps f32 between fused ops): 2e-2.
@_register(
    "bf16_elementwise_and_sum",
    lambda: (
        _normal(30, 8, 16).astype(jnp.bfloat16),
        _normal(31, 8, 16).astype(jnp.bfloat16),
    ),
    rtol=2e-2,
    atol=2e-2,
)
def bf16_elementwise_and_sum(a: Array, b: Array) -> tuple:
    c = a * b + a
    return (
        c,
        jnp.exp(a * 0.5),
        jnp.tanh(b),
        jnp.maximum(a, b),
        jnp.sum(c, axis=1),
        (a @ b.T),
        jnp.dot(a, b.T, preferred_element_type=jnp.float32),
        c.astype(jnp.float32),
    )


# f16 has an 11-bit mantissa: 2e-3.
@_register(
    "f16_elementwise_and_reduce",
    lambda: (_normal(32, 64).astype(np.float16), _uniform(33, 0.1, 3.0, 64).astype(np.float16)),
    rtol=2e-3,
    atol=2e-3,
)
def f16_elementwise_and_reduce(a: Array, b: Array) -> tuple:
    return (
        a + b,
        a / b,
        jnp.sqrt(b),
        jnp.log(b),
        jnp.sin(a),
        jnp.max(a),
        jnp.mean(b),
        a * 40000.0,  # |a| > 1.64 overflows to inf in f16
        jnp.floor(a * 4.0),
    )


@_register(
    "mixed_dtype_promotion",
    lambda: (
        _rng(34).integers(-100, 100, 8).astype(np.int8),
        _normal(35, 8).astype(np.float16),
        _normal(36, 8),
        _rng(37).integers(0, 1000, 8).astype(np.uint16),
    ),
    rtol=1e-3,  # f16 intermediates
    atol=1e-3,
)
def mixed_dtype_promotion(i8: Array, h: Array, f: Array, u16: Array) -> tuple:
    return (i8 * h, h + f, i8 + u16, u16 * f, i8.astype(jnp.float32) / 7.0 + h)


# =============================================================================================
# Shape manipulation
# =============================================================================================


@_register(
    "broadcast_reshape_transpose", lambda: (_normal(40, 3, 4), _normal(41, 4), _normal(42, 2, 3, 4))
)
def broadcast_reshape_transpose(a: Array, b: Array, c: Array) -> tuple:
    return (
        a + b,  # broadcast along rows
        a + a[:, :1],
        jnp.broadcast_to(b, (2, 3, 4)) * c,
        a.reshape(2, 6),
        a.reshape(12),
        c.reshape(6, 4).T,
        jnp.transpose(c, (2, 0, 1)),
        jnp.swapaxes(c, 0, 2).reshape(4, 6),
        jnp.expand_dims(b, 0) * jnp.expand_dims(b, 1),
        c[:, None, :, :].reshape(2, 1, 12),
    )


@_register("slice_stride_reverse", lambda: (np.arange(5 * 8, dtype=np.float32).reshape(5, 8),))
def slice_stride_reverse(a: Array) -> tuple:
    return (
        a[1:4, 2:7],
        a[::2, 1::3],
        a[::-1],
        a[:, ::-2],
        jnp.flip(a),
        jnp.flip(a, axis=1)[1:3],
        a[-1],
        jnp.roll(a, 3, axis=1),
        jnp.rot90(a),
    )


def _dyn_args() -> tuple:
    return (
        np.arange(6 * 8, dtype=np.float32).reshape(6, 8),
        np.array([2, 3], np.int32),
        np.array([5, 7], np.int32),
        np.array([-3, 1], np.int32),
        _normal(43, 3, 4),
    )


@_register("dynamic_slice_update_clamped", _dyn_args)
def dynamic_slice_update_clamped(a: Array, i: Array, oob: Array, neg: Array, u: Array) -> tuple:
    # Start indices are clamped so that the slice stays in bounds (oob and negative starts).
    return (
        lax.dynamic_slice(a, (i[0], i[1]), (3, 4)),
        lax.dynamic_slice(a, (oob[0], oob[1]), (3, 4)),
        lax.dynamic_slice(a, (neg[0], neg[1]), (2, 2)),
        lax.dynamic_update_slice(a, u, (i[0], i[1])),
        lax.dynamic_update_slice(a, u, (oob[0], oob[1])),
        lax.dynamic_update_slice(a, u, (neg[0], neg[1])),
        a[i[0]],  # dynamic index -> dynamic-slice
        lax.dynamic_index_in_dim(a, oob[1], axis=1, keepdims=False),
    )


@_register("concatenate_stack", lambda: (_normal(44, 2, 3), _normal(45, 2, 5), _normal(46, 2, 3)))
def concatenate_stack(a: Array, b: Array, c: Array) -> tuple:
    return (
        jnp.concatenate([a, b, c], axis=1),
        jnp.concatenate([a, c], axis=0),
        jnp.stack([a, c]),
        jnp.stack([a, c], axis=-1),
        jnp.hstack([a[0], b[1], c[:, 0]]),
    )


@_register("pad_negative_interior", lambda: (np.arange(1, 13, dtype=np.float32).reshape(3, 4),))
def pad_negative_interior(a: Array) -> tuple:
    return (
        lax.pad(a, 0.0, [(1, 2, 0), (0, 0, 0)]),
        lax.pad(a, -1.0, [(0, 0, 1), (2, 1, 2)]),  # interior padding
        lax.pad(a, 9.0, [(-1, 1, 0), (1, -2, 1)]),  # negative padding trims
        lax.pad(a, 0.0, [(-2, -1, 1), (-3, 0, 2)]),  # negative with interior
        jnp.pad(a, ((1, 1), (2, 0)), mode="edge"),
        jnp.pad(a, 1, mode="reflect"),
        jnp.pad(a, ((0, 2), (1, 1)), constant_values=7.0),
    )


@_register("iota_arange_eye", lambda: (_normal(47, 5, 5), np.int32(2)))
def iota_arange_eye(a: Array, k: Array) -> tuple:
    return (
        jnp.arange(10, dtype=jnp.int32),
        jnp.arange(0.5, 5.0, 0.5, dtype=jnp.float32),
        lax.broadcasted_iota(jnp.int32, (3, 4), 1),
        lax.broadcasted_iota(jnp.uint8, (3, 4), 0),
        jnp.eye(5, dtype=jnp.float32) * a,
        jnp.tril(a),
        jnp.triu(a, 1),
        jnp.where(jnp.arange(5) < k, 1.0, 0.0),
    )


# =============================================================================================
# Reductions
# =============================================================================================


# Reduction order may differ between XLA and the interpreter: 1e-5.
@_register(
    "reductions_sum_max_min_prod",
    lambda: (_normal(50, 6, 7, 5),),
    rtol=1e-5,
    atol=1e-5,
    tags=("reduce",),
)
def reductions_sum_max_min_prod(a: Array) -> tuple:
    return (
        jnp.sum(a),
        jnp.sum(a, axis=0),
        jnp.sum(a, axis=(0, 2)),
        jnp.max(a, axis=1),
        jnp.min(a, axis=-1),
        jnp.prod(a * 0.5 + 1.0, axis=2),
        jnp.mean(a, axis=1),
        jnp.var(a, axis=0),
        jnp.linalg.norm(a, axis=-1),
        jnp.sum(a.astype(jnp.int32), axis=1),
        jnp.max(jnp.abs(a).astype(jnp.uint8), axis=(1, 2)),
    )


def _argmax_args() -> tuple:
    a = _normal(51, 5, 8)
    a[1, 2] = a[1, 6] = 10.0  # ties: first index wins
    a[2, 3] = np.nan  # nan wins argmax/argmin
    a[3, :] = 1.0
    return a, _rng(52).integers(-5, 5, (5, 8)).astype(np.int32)


@_register("argmax_argmin_variadic_reduce", _argmax_args, tags=("reduce",))
def argmax_argmin_variadic_reduce(a: Array, i: Array) -> tuple:
    return (
        jnp.argmax(a, axis=1),
        jnp.argmin(a, axis=1),
        jnp.argmax(a, axis=0),
        jnp.argmax(a),
        jnp.argmin(i, axis=1),
        jnp.argmax(i, axis=0),
        jnp.nanargmax(jnp.where(jnp.isnan(a), 0.0, a), axis=1),
    )


@_register(
    "reduce_window_pooling", lambda: (_normal(53, 2, 9, 9),), rtol=1e-5, atol=1e-5, tags=("reduce",)
)
def reduce_window_pooling(img: Array) -> tuple:
    # rtol 1e-5: window sums may be accumulated in a different order.
    maxpool = lax.reduce_window(img, -jnp.inf, lax.max, (1, 2, 2), (1, 2, 2), "VALID")
    maxpool_pad = lax.reduce_window(img, -jnp.inf, lax.max, (1, 3, 3), (1, 2, 2), "SAME")
    avgpool = lax.reduce_window(img, 0.0, lax.add, (1, 3, 3), (1, 1, 1), "SAME") / 9.0
    minpool = lax.reduce_window(
        img, jnp.inf, lax.min, (1, 2, 3), (1, 1, 2), [(0, 0), (1, 0), (0, 2)]
    )
    dilated = lax.reduce_window(
        img, 0.0, lax.add, (1, 2, 2), (1, 1, 1), "VALID", window_dilation=(1, 2, 2)
    )
    return maxpool, maxpool_pad, avgpool, minpool, dilated


@_register("cumulative_ops", lambda: (_uniform(54, 0.5, 1.5, 4, 12),), rtol=1e-5, tags=("reduce",))
def cumulative_ops(a: Array) -> tuple:
    # rtol 1e-5: prefix sums/products accumulate in an implementation-defined order.
    return (
        jnp.cumsum(a, axis=1),
        lax.cumsum(a, axis=0, reverse=True),
        jnp.cumprod(a, axis=1),
        lax.cummax(a, axis=1),
        lax.cummin(a, axis=0),
        jnp.cumsum(a.astype(jnp.int32) + 1, axis=1),
    )


# =============================================================================================
# Dot / matmul
# =============================================================================================


# Matmul accumulation order: 1e-5.
@_register(
    "batched_matmul_einsum",
    lambda: (_normal(60, 3, 4, 5), _normal(61, 3, 5, 6)),
    rtol=1e-5,
    atol=1e-5,
    tags=("dot",),
)
def batched_matmul_einsum(a: Array, b: Array) -> tuple:
    return (
        jnp.einsum("bij,bjk->bik", a, b),
        jnp.matmul(a, b),
        jnp.einsum("bij,bkj->bik", a, b.transpose(0, 2, 1)),  # contract on last dims
        jnp.einsum("bij,cjk->bcik", a, b),  # no batch dims, broadcast
    )


@_register(
    "matvec_dot_general",
    lambda: (
        _normal(62, 6, 5),
        _normal(63, 5),
        _normal(64, 5, 4),
        _rng(65).integers(-9, 9, (3, 4)).astype(np.int32),
        _rng(66).integers(-9, 9, (4, 2)).astype(np.int32),
    ),
    rtol=1e-5,  # accumulation order
    atol=1e-5,
    tags=("dot",),
)
def matvec_dot_general(m: Array, v: Array, w: Array, i: Array, j: Array) -> tuple:
    return (
        m @ v,  # matvec
        v @ m.T,  # vecmat
        jnp.dot(v, v),  # scalar
        jnp.outer(v, v),
        lax.dot_general(m, w, (((1,), (0,)), ((), ()))),
        lax.dot_general(m, m, (((0,), (0,)), ((), ()))),  # contract dim 0 of both
        jnp.einsum("ij,ik->jk", w, w),
        i @ j,  # int32 matmul
        jnp.tensordot(w, m, axes=([0], [1])),
    )


# Softmax/exp and two matmuls: 1e-5.
@_register(
    "attention_softmax",
    lambda: (_normal(67, 2, 4, 8), _normal(68, 2, 6, 8), _normal(69, 2, 6, 8)),
    rtol=1e-5,
    atol=1e-5,
    tags=("dot", "reduce"),
)
def attention_softmax(q: Array, k: Array, v: Array) -> Array:
    scores = jnp.einsum("bqd,bkd->bqk", q, k) / jnp.sqrt(8.0)
    mask = jnp.arange(6)[None, None, :] <= jnp.arange(4)[None, :, None] + 2
    scores = jnp.where(mask, scores, -1e9)
    return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(scores, axis=-1), v)


# =============================================================================================
# Gather / scatter
# =============================================================================================


def _gather_args() -> tuple:
    x = np.arange(6 * 5, dtype=np.float32).reshape(6, 5) * 0.5
    idx = np.array([0, 5, 2, 2, -1], np.int32)  # -1: numpy-style negative index
    oob = np.array([1, 9, -9, 3], np.int32)  # out of bounds
    cols = np.array([[0, 4], [1, 1], [3, 2], [4, 0], [2, 2], [0, 1]], np.int32)
    return x, idx, oob, cols


@_register("gather_fancy_indexing", _gather_args, tags=("gather",))
def gather_fancy_indexing(x: Array, idx: Array, oob: Array, cols: Array) -> tuple:
    return (
        x[idx],  # row gather, negative index wraps
        x[:, idx[:3]],
        x[idx[:4], oob[:4] % 5],  # pointwise gather
        jnp.take_along_axis(x, cols, axis=1),
        x[oob],  # out of bounds: clamped for x[...] gathers
        jnp.take(x, oob, axis=0, mode="clip"),
        jnp.take(x, oob, axis=0, mode="fill", fill_value=-1.0),  # oob -> fill value
        x[jnp.array([1, 3])][:, jnp.array([0, 4])],
        x.reshape(-1)[idx * 5 + 1],
    )


def _scatter_args() -> tuple:
    x = np.arange(8, dtype=np.float32)
    uniq = np.array([6, 1, 3], np.int32)  # distinct: .set is order independent
    dup = np.array([2, 2, 5, 0, 2], np.int32)  # duplicates combine
    oob = np.array([1, 8, -20, 3, 100], np.int32)  # out of bounds updates are dropped
    vals = np.array([2.0, 0.5, 4.0, -1.0, 8.0], np.float32)  # powers of two: exact products
    return x, uniq, dup, oob, vals


@_register("scatter_at_set_add_mul_min_max", _scatter_args, tags=("scatter",))
def scatter_at_set_add_mul_min_max(
    x: Array, uniq: Array, dup: Array, oob: Array, vals: Array
) -> tuple:
    return (
        x.at[uniq].set(vals[:3]),
        x.at[dup].add(vals),
        x.at[dup].mul(vals),
        x.at[dup].min(vals),
        x.at[dup].max(vals),
        x.at[oob].add(vals),  # oob dropped (negative -20 too; -1 style wrap only in range)
        x.at[oob].set(vals, mode="drop"),
        x.at[2].set(-7.0),
        x.at[1:4].add(1.0),
    )


def _scatter2d_args() -> tuple:
    x = np.zeros((5, 4), np.float32)
    rows = np.array([0, 4, 2, 0], np.int32)
    cols = np.array([1, 3, 3, 1], np.int32)
    vals = _normal(70, 4)
    row_vals = _normal(71, 2, 4)
    return x, rows, cols, vals, row_vals


@_register("scatter_2d_rows_points", _scatter2d_args, tags=("scatter",))
def scatter_2d_rows_points(
    x: Array, rows: Array, cols: Array, vals: Array, row_vals: Array
) -> tuple:
    return (
        x.at[rows, cols].add(vals),  # (0, 1) twice
        x.at[rows[1:3]].set(row_vals),  # whole rows
        x.at[:, cols[:2]].add(1.0),
        x.at[rows[:2], :].max(row_vals),
        jnp.zeros(6, jnp.int32).at[rows].add(1),  # histogram
    )


@_register(
    "one_hot_cross_entropy",
    lambda: (_normal(72, 8, 5), _rng(73).integers(0, 5, 8).astype(np.int32)),
    rtol=5e-6,
    atol=2e-6,
    tags=("gather", "reduce"),
)
def one_hot_cross_entropy(logits: Array, labels: Array) -> tuple:
    # rtol 5e-6: log/exp approximations.
    onehot = jax.nn.one_hot(labels, 5)
    logp = jax.nn.log_softmax(logits, axis=-1)
    loss_onehot = -jnp.sum(onehot * logp, axis=-1)
    loss_gather = -jnp.take_along_axis(logp, labels[:, None], axis=1)[:, 0]
    acc = jnp.mean(jnp.argmax(logits, axis=-1) == labels)
    return onehot, loss_onehot, loss_gather, acc


# =============================================================================================
# Sort
# =============================================================================================


def _sort_args() -> tuple:
    a = np.array(
        [3.0, -1.0, np.nan, 0.0, -0.0, 2.0, 3.0, -np.inf, np.inf, -1.0, 0.5, 3.0], np.float32
    )
    return a, _normal(80, 4, 6), _rng(81).integers(0, 4, 12).astype(np.int32)


@_register("sort_argsort_stable_total_order", _sort_args, tags=("sort",))
def sort_argsort_stable_total_order(a: Array, m: Array, i: Array) -> tuple:
    # Float sort uses a TOTALORDER compare: -inf < ... < -0.0 == 0.0 < ... < inf < nan (jax
    # canonicalises -0.0 to 0.0 and nan to a single nan before comparing).
    return (
        jnp.sort(a),
        jnp.argsort(a),  # stable: ties keep their original order
        jnp.sort(m, axis=0),
        jnp.sort(m, axis=1),
        jnp.argsort(i),  # many ties
        jnp.argsort(-i, stable=True),
        jnp.sort(i)[::-1],
        jnp.argsort(a, descending=True),
    )


@_register("top_k_via_sort", lambda: (_normal(82, 5, 10),), tags=("sort",))
def top_k_via_sort(x: Array) -> tuple:
    order = jnp.argsort(-x, axis=1)[:, :3]
    values = jnp.take_along_axis(x, order, axis=1)
    sorted_desc = -jnp.sort(-x, axis=1)[:, :3]
    return values, order, sorted_desc, jnp.median(x, axis=1)


def _multi_sort_args() -> tuple:
    r = _rng(83)
    keys = r.integers(0, 3, 16).astype(np.int32)
    keys2 = _normal(84, 16)
    vals = np.arange(16, dtype=np.float32)
    return keys, keys2, vals


@_register("multi_operand_sort", _multi_sort_args, tags=("sort",))
def multi_operand_sort(keys: Array, keys2: Array, vals: Array) -> tuple:
    a = lax.sort((keys, keys2, vals), num_keys=1, is_stable=True)
    b = lax.sort((keys, keys2, vals), num_keys=2)  # lexicographic
    c = lax.sort_key_val(keys2, keys)
    return (*a, *b, *c)


# =============================================================================================
# Control flow
# =============================================================================================


@_register(
    "while_loop_newton_sqrt",
    lambda: (_uniform(90, 0.5, 50.0, 16),),
    rtol=2e-6,
    tags=("while", "loop"),
)
def while_loop_newton_sqrt(a: Array) -> tuple:
    # rtol 2e-6: convergence stops within an ulp or two of sqrt.
    def cond(c: tuple) -> Array:
        x, i = c
        return (i < 20) & jnp.any(jnp.abs(x * x - a) > 1e-4 * a)

    def body(c: tuple) -> tuple:
        x, i = c
        return 0.5 * (x + a / x), i + 1

    x, n = lax.while_loop(cond, body, (a, jnp.int32(0)))
    return x, n


@_register(
    "while_loop_collatz_int",
    lambda: (np.arange(1, 17, dtype=np.int32) * 3,),
    tags=("while", "loop"),
)
def while_loop_collatz_int(n: Array) -> tuple:
    def cond(c: tuple) -> Array:
        n, _, it = c
        return jnp.any(n != 1) & (it < 20)

    def body(c: tuple) -> tuple:
        n, steps, it = c
        nxt = jnp.where(n % 2 == 0, n // 2, 3 * n + 1)
        active = n != 1
        return jnp.where(active, nxt, n), steps + active.astype(jnp.int32), it + 1

    return lax.while_loop(cond, body, (n, jnp.zeros_like(n), jnp.int32(0)))


@_register(
    "fori_loop_recurrence",
    lambda: (_normal(91, 8), _normal(92, 8, 8, scale=0.3)),
    rtol=1e-5,
    atol=1e-5,
    tags=("loop", "while", "dot"),
)
def fori_loop_recurrence(h: Array, w: Array) -> tuple:
    # rtol 1e-5: 12 matvecs + tanh.
    def body(i: Array, c: tuple) -> tuple:
        h, acc = c
        h = jnp.tanh(w @ h + 0.1 * lax.convert_element_type(i, jnp.float32))
        return h, acc + jnp.sum(h)

    h, acc = lax.fori_loop(0, 12, body, (h, jnp.float32(0.0)))
    # fori_loop with a trip count that is a traced value -> while with dynamic bound.
    g = lax.fori_loop(0, jnp.int32(5) + jnp.argmax(h) % 3, lambda i, x: x * 1.5 - 0.25, h)
    return h, acc, g


@_register(
    "cond_two_branches",
    lambda: (np.int32(1), np.int32(-2), _normal(93, 6), _normal(94, 6)),
    rtol=2e-6,
    tags=("cond",),
)
def cond_two_branches(p: Array, q: Array, x: Array, y: Array) -> tuple:
    # rtol 2e-6: sin/exp in the branches.
    a = lax.cond(p > 0, lambda u, v: jnp.sin(u) * v, lambda u, v: u - v, x, y)
    b = lax.cond(q > 0, lambda u: jnp.exp(u), lambda u: -u, x)
    c = lax.cond(jnp.sum(x) > jnp.sum(y), lambda: x.max(), lambda: y.min())
    return a, b, c


@_register("switch_three_branches", lambda: (np.int32(1), _normal(95, 5)), tags=("cond",))
def switch_three_branches(i: Array, x: Array) -> tuple:
    branches = [lambda v: v + 1.0, lambda v: v * v, lambda v: jnp.abs(v) - 2.0]
    return (
        lax.switch(i, branches, x),
        lax.switch(i + 5, branches, x),  # index clamped to the last branch
        lax.switch(i - 7, branches, x),  # clamped to the first branch
        lax.switch(jnp.argmax(x) % 3, branches, x),
    )


@functools.partial(jax.jit, inline=False)
def _inner_affine(x: Array, w: Array) -> Array:
    return x * w + 1.0


@jax.jit
def _outer(x: Array, w: Array) -> Array:
    return _inner_affine(_inner_affine(x, w), w) - x


@_register("nested_jit_call", lambda: (_normal(96, 4, 4), _normal(97, 4)), tags=("call",))
def nested_jit_call(x: Array, w: Array) -> tuple:
    # Nested jax.jit functions stay `call` instructions in lowered HLO.
    return _outer(x, w), _inner_affine(w, w)


@_register("optimization_barrier", lambda: (_normal(98, 8), _normal(99, 8)))
def optimization_barrier(x: Array, y: Array) -> tuple:
    a, b = lax.optimization_barrier((x * 2.0, y + 1.0))
    c = lax.optimization_barrier(a * b)
    return c, a - b


# =============================================================================================
# Random numbers
# =============================================================================================


def _rbg_state() -> np.ndarray:
    return np.array([0x12345678, 0x9ABCDEF0, 42, 7], np.uint32)


@_register("rng_bit_generator_raw", lambda: (_rbg_state(),), tags=("rng",))
def rng_bit_generator_raw(state: Array) -> tuple:
    # lax.rng_bit_generator: XLA's RNG_DEFAULT (philox on CPU) and explicit philox.
    s1, bits32 = lax.rng_bit_generator(state, (4, 8), dtype=jnp.uint32)
    s2, bits8 = lax.rng_bit_generator(
        s1, (16,), dtype=jnp.uint8, algorithm=lax.RandomAlgorithm.RNG_PHILOX
    )
    return s1, bits32, s2, bits8


@_register("rbg_key_uniform", lambda: (_rbg_state(),), tags=("rng",))
def rbg_key_uniform(key_data: Array) -> tuple:
    # jax.random with the 'rbg' implementation: bits come from rng-bit-generator.
    key = jax.random.wrap_key_data(key_data, impl="rbg")
    k1, k2 = jax.random.split(key)
    return (
        jax.random.uniform(k1, (3, 5)),
        jax.random.bits(k2, (7,)),
        jax.random.key_data(k2),
    )


@_register("threefry_split_uniform_normal_bernoulli", lambda: (_key(0),), rtol=2e-6, tags=("rng",))
def threefry_split_uniform_normal_bernoulli(key_data: Array) -> tuple:
    # rtol 2e-6: normal uses log1p/sqrt.
    key = jax.random.wrap_key_data(key_data)  # default impl: threefry2x32
    k1, k2, k3, k4 = jax.random.split(key, 4)
    return (
        jax.random.key_data(k1),
        jax.random.uniform(k1, (4, 5)),
        jax.random.uniform(k1, (7,), minval=-2.0, maxval=3.0),
        jax.random.normal(k2, (16,)),
        jax.random.bernoulli(k3, 0.3, (20,)),
        jax.random.randint(k4, (10,), 0, 7),
        jax.random.bits(k4, (5,)),
    )


@_register(
    "threefry_fold_in_permutation",
    lambda: (_key(7), np.arange(10, dtype=np.float32)),
    tags=("rng", "sort"),
)
def threefry_fold_in_permutation(key_data: Array, x: Array) -> tuple:
    key = jax.random.wrap_key_data(key_data)
    k = jax.random.fold_in(key, 3)
    return (
        jax.random.permutation(k, x),  # sort by random keys
        jax.random.choice(k, 10, (4,), replace=False),
        jax.random.categorical(k, jnp.log(x + 1.0), shape=(6,)),
    )


# =============================================================================================
# Typical ML building blocks
# =============================================================================================


# exp + reduction: 1e-5.
@_register(
    "softmax", lambda: (_normal(100, 4, 10, scale=3.0),), rtol=1e-5, atol=1e-6, tags=("reduce",)
)
def softmax(x: Array) -> tuple:
    return jax.nn.softmax(x, axis=-1), jax.nn.softmax(x, axis=0), jax.nn.log_softmax(x)


@_register(
    "layernorm",
    lambda: (_normal(101, 6, 16, scale=2.0), _normal(102, 16), _normal(103, 16)),
    rtol=1e-5,
    atol=1e-5,
    tags=("reduce",),
)
def layernorm(x: Array, gamma: Array, beta: Array) -> Array:
    # rtol 1e-5: mean/variance reductions + rsqrt.
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + 1e-5) * gamma + beta


def _lse_args() -> tuple:
    x = _normal(104, 5, 8, scale=4.0)
    x[1, :] = -np.inf  # all -inf row -> -inf
    x[2, 3] = -np.inf
    return (x,)


@_register("logsumexp", _lse_args, rtol=1e-5, atol=1e-6, tags=("reduce",))
def logsumexp(x: Array) -> tuple:
    # rtol 1e-5: exp/log + reduction.
    return jax.nn.logsumexp(x, axis=1), jax.nn.logsumexp(x[3:]), jax.nn.logsumexp(x, axis=0)


_ADAM_SHAPES: dict[str, tuple[int, ...]] = {"w1": (8, 16), "b1": (16,), "w2": (16, 4), "b2": (4,)}
_ADAM_KEYS = tuple(sorted(_ADAM_SHAPES))


def _adam_args() -> tuple:
    params = [_normal(110 + i, *_ADAM_SHAPES[k]) for i, k in enumerate(_ADAM_KEYS)]
    grads = [_normal(120 + i, *_ADAM_SHAPES[k], scale=0.1) for i, k in enumerate(_ADAM_KEYS)]
    m = [_normal(130 + i, *_ADAM_SHAPES[k], scale=0.01) for i, k in enumerate(_ADAM_KEYS)]
    v = [np.abs(_normal(140 + i, *_ADAM_SHAPES[k], scale=0.001)) for i, k in enumerate(_ADAM_KEYS)]
    return (*params, *grads, *m, *v, np.int32(3))


# rtol 5e-6: sqrt and pow(beta, t).
@_register("adam_update_pytree", _adam_args, rtol=5e-6, atol=1e-6, tags=("optimizer",))
def adam_update_pytree(*flat: Array) -> tuple:
    """Adam on a dict of params; args: params, grads, m, v (each 4 leaves in sorted key order),
    then the int32 step count."""
    n = len(_ADAM_KEYS)
    leaves = [dict(zip(_ADAM_KEYS, flat[i * n : (i + 1) * n], strict=True)) for i in range(4)]
    params, grads, m, v = leaves
    step = flat[4 * n] + 1
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
    m = jax.tree.map(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
    v = jax.tree.map(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v, grads)
    t = step.astype(jnp.float32)
    mhat_scale = 1.0 / (1.0 - b1**t)
    vhat_scale = 1.0 / (1.0 - b2**t)
    params = jax.tree.map(
        lambda p, m_, v_: p - lr * (m_ * mhat_scale) / (jnp.sqrt(v_ * vhat_scale) + eps),
        params,
        m,
        v,
    )
    out = [params, m, v]
    return (*(tree[k] for tree in out for k in _ADAM_KEYS), step)


def _mlp_args() -> tuple:
    return (
        _normal(150, 6, 12, scale=0.5),
        np.zeros(12, np.float32),
        _normal(151, 12, 3, scale=0.5),
        np.zeros(3, np.float32),
        _normal(152, 10, 6),
        _normal(153, 10, 3),
    )


def _mlp_loss(w1: Array, b1: Array, w2: Array, b2: Array, x: Array, y: Array) -> Array:
    h = jnp.tanh(x @ w1 + b1)
    out = jax.nn.relu(h) @ w2 + b2
    return jnp.mean((out - y) ** 2)


# rtol 1e-5: matmuls and reductions in forward and backward.
@_register("mlp_train_step_grad", _mlp_args, rtol=1e-5, atol=1e-5, tags=("dot", "grad"))
def mlp_train_step_grad(w1: Array, b1: Array, w2: Array, b2: Array, x: Array, y: Array) -> tuple:
    loss, grads = jax.value_and_grad(_mlp_loss, argnums=(0, 1, 2, 3))(w1, b1, w2, b2, x, y)
    lr = 0.05
    new = tuple(p - lr * g for p, g in zip((w1, b1, w2, b2), grads, strict=True))
    return (loss, *new)


@_register(
    "vmap_per_example_grad",
    lambda: (_normal(154, 5), _normal(155, 8, 5), _normal(156, 8)),
    rtol=1e-5,
    atol=1e-5,
    tags=("dot", "grad"),
)
def vmap_per_example_grad(w: Array, xs: Array, ys: Array) -> Array:
    # rtol 1e-5: dot products.
    def loss(w: Array, x: Array, y: Array) -> Array:
        return (jnp.tanh(x @ w) - y) ** 2

    return jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(w, xs, ys)


@_register(
    "rollout_scan_linear_policy",
    lambda: (_normal(160, 4, 8), _normal(161, 8, 8, scale=0.3), _normal(162, 16, 4, 8, scale=0.1)),
    rtol=1e-5,
    atol=1e-5,
    tags=("scan", "loop", "while", "dot"),
)
def rollout_scan_linear_policy(state: Array, w: Array, noise: Array) -> tuple:
    # rtol 1e-5: matmuls inside the loop, errors compound over 16 steps.
    def step(s: Array, eps: Array) -> tuple[Array, tuple[Array, Array]]:
        action = jnp.tanh(s @ w)
        s = 0.9 * s + 0.1 * action + eps
        reward = -jnp.sum(s * s, axis=1)
        return s, (reward, action[:, 0])

    final, (rewards, actions) = lax.scan(step, state, noise)
    return final, rewards, actions, jnp.sum(rewards, axis=0)


@_register(
    "scan_cumulative_reverse",
    lambda: (_normal(163, 10, 3),),
    rtol=1e-5,
    atol=1e-5,
    tags=("scan", "loop", "while"),
)
def scan_cumulative_reverse(x: Array) -> tuple:
    # rtol 1e-5: running sums.
    def f(c: Array, xi: Array) -> tuple[Array, Array]:
        c = c * 0.5 + xi
        return c, c * 2.0

    c1, ys1 = lax.scan(f, jnp.zeros(3, jnp.float32), x)
    c2, ys2 = lax.scan(f, jnp.ones(3, jnp.float32), x, reverse=True)
    c3, ys3 = lax.scan(f, jnp.zeros(3, jnp.float32), x, unroll=3)
    return c1, ys1, c2, ys2, c3, ys3


@_register(
    "nested_scan_fori",
    lambda: (_normal(164, 4), np.int32(3)),
    rtol=1e-5,
    atol=1e-5,
    tags=("scan", "loop", "while"),
)
def nested_scan_fori(x: Array, k: Array) -> tuple:
    # rtol 1e-5: repeated sin/mul over nested loops.
    def outer(c: Array, i: Array) -> tuple[Array, Array]:
        inner = lax.fori_loop(
            0, 3, lambda j, v: jnp.sin(v) + lax.convert_element_type(i * j, jnp.float32) * 0.1, c
        )
        return inner, jnp.max(inner) + k.astype(jnp.float32)

    return lax.scan(outer, x, jnp.arange(5))


# =============================================================================================
# CartPole (the paper's case study), small enough for the interpreter
# =============================================================================================


def _cartpole(
    variant: str, randoms: str = "args"
) -> tuple[Callable[..., Any], Callable[[], tuple]]:
    from hlofuse.examples import cartpole

    def make_args() -> tuple:
        return cartpole.make(variant, 16, 10, randoms=randoms)[1]

    return cartpole.make(variant, 16, 10, randoms=randoms)[0], make_args


def _register_cartpole() -> None:
    # atol/rtol 1e-5: sin/cos over 10 chained Euler steps.
    for variant, randoms, tags in (
        ("baseline", "args", ("rng", "scan", "loop", "while", "cartpole")),
        ("precomputed", "args", ("scan", "loop", "while", "cartpole")),
        ("precomputed", "key", ("rng", "scan", "loop", "while", "cartpole")),
        ("separate", "args", ("scan", "loop", "while", "cartpole")),
        ("unrolled", "args", ("scan", "loop", "while", "cartpole")),
    ):
        fn, make_args = _cartpole(variant, randoms)
        name = f"cartpole_{variant}" + ("_rng_before_scan" if randoms == "key" else "")
        _register(name, make_args, rtol=1e-5, atol=1e-5, tags=tags)(fn)


_register_cartpole()
