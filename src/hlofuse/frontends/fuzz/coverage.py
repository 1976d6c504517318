"""(opcode, element type) coverage of a fuzz run against the op table.

The universe is every opcode of `ir/opcodes.py` times every element type of `ir/dtypes.py` that
the opcode's element-type rule (`shape_inference_ext.TYPE_RULES`) admits; nothing here lists
opcodes again except the facts of JAX's lowering the op table cannot know: which opcodes a
single-device `jax.jit` on CPU never emits (`_WHY`) and which element types it never emits an
emitted opcode in (`_NEVER`; measured with jax 0.10.2). `report(pairs)` sorts each pair of the
universe into reached, or unreached with a reason:

    not-emitted    JAX's CPU lowering never produces the opcode (the reason says why)
    jax-never      JAX produces the opcode, never in this type (lax rejects the type, or
                   expands the op in it into other ops, or XLA's CPU cannot run it: no oracle)
    no-jax-type    JAX has no element type for it (s1, u1)
    not-reached    JAX can emit the pair; the run did not (a budget or generator gap)

`pairs_emittable` counts the pairs JAX can emit (reached or not-reached); a reached pair outside
the universe (is-finite's pred result: its rule types the operand) is listed apart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hlofuse.ir.dtypes import DTYPES, DType
from hlofuse.ir.opcodes import ASYNC_OPS, COLLECTIVES, START_DONE, Opcode
from hlofuse.ir.shape_inference_ext import TYPE_RULES

NO_JAX_TYPE = frozenset({"s1", "u1"})

# opcodes no single-device jax.jit lowering emits, with why (by opcode text)
_WHY = {
    "fusion": "made by fusion passes, never by a frontend",
    "batch-norm-training": "JAX lowers batch norm to elementwise ops and reductions",
    "batch-norm-inference": "JAX lowers batch norm to elementwise ops and reductions",
    "batch-norm-grad": "JAX lowers batch norm to elementwise ops and reductions",
    "cholesky": "JAX on CPU calls LAPACK (custom-call lapack_*potrf_ffi)",
    "triangular-solve": "JAX on CPU calls LAPACK (custom-call lapack_*trsm_ffi)",
    "rng": "JAX's PRNG is threefry/rng-bit-generator, never the stateful rng",
    "rng-get-and-update-state": "stateful RNG: XLA-internal",
    "domain": "XLA-internal (sharding domains)",
    "add-dependency": "XLA-internal scheduling edge",
    "get-dimension-size": "dynamic shapes: JAX lowers static shapes",
    "set-dimension-size": "dynamic shapes: JAX lowers static shapes",
    "dynamic-reshape": "dynamic shapes: JAX lowers static shapes",
    "map": "JAX lowers lax.map to a while loop",
    "scan": "JAX lowers lax.scan to a while loop",
    "stochastic-convert": "no lax primitive produces it",
    "shuffle": "no lax primitive produces it",
    "ragged-dot": "lax.ragged_dot lowers to dots on CPU",
    "scaled-dot": "lax.scaled_dot lowers to a composite call of multiplies and a dot",
    "copy": "made by XLA's layout assignment and copy insertion; JAX emits none",
    "bitcast": "made by XLA's layout-aware simplification; JAX emits reshapes",
    "partition-id": "sharded programs only (shard_map / pmap)",
    "replica-id": "sharded programs only (shard_map / pmap)",
    "outfeed": "side effects: not in pure programs", "infeed": "side effects: not in pure programs",
    "send": "host transfer", "send-done": "host transfer", "recv": "host transfer",
    "recv-done": "host transfer", "after-all": "token plumbing of side effects",
    "custom-call": "counted, but its targets are not HLO opcodes of the table",
    "logistic": "JAX lowers lax.logistic to 1 / (1 + exp(-x))",
    **{op: f"JAX expands lax.{op} into other ops (its CHLO decomposition)" for op in (
        "acos", "asin", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")},
}
_COLLECTIVE = "collectives and async pairs: multi-device or scheduled programs only"


def _parts(d: DType) -> bool:
    return d.name not in ("f32", "f64", "c64", "c128")


def _pred(d: DType) -> bool:
    return d.is_pred


def _cplx(d: DType) -> bool:
    return d.is_complex


def _two_bit(d: DType) -> bool:
    return d.is_integral and d.bits == 2


_BOOL_OP = "lax rejects bool (bool add and multiply become or and and)"
_CPLX_EXPANDED = "JAX's lowering expands it on complex numbers into real arithmetic"
_NO_ORACLE = "XLA's CPU refuses it (custom element sizes): no oracle"

# (opcode text) -> [(predicate on the element type, why JAX never emits the pair)]
_NEVER: dict[str, list[tuple[Callable[[DType], bool], str]]] = {
    "complex": [(_parts, "complex numbers are f32/f64 parts of c64/c128")],
    "real": [(_parts, "complex numbers are f32/f64 parts of c64/c128")],
    "imag": [(_parts, "complex numbers are f32/f64 parts of c64/c128")],
    "fft": [(_parts, "lax.fft takes c64/c128 (f32/f64 for real transforms)")],
    "rng-bit-generator": [(lambda d: not (d.kind == "unsigned" and d.bits >= 8),
                           "lax.rng_bit_generator takes u32/u64 keys, makes u8-u64 bits")],
    "iota": [(_pred, "lax.iota rejects bool")],
    "add": [(_pred, _BOOL_OP)], "multiply": [(_pred, _BOOL_OP)],
    "subtract": [(_pred, _BOOL_OP)], "divide": [(_pred, _BOOL_OP)],
    "remainder": [(_pred, _BOOL_OP)],
    "power": [(lambda d: not d.is_inexact,
               "lax.pow takes float or complex bases (an integer exponent is converted)")],
    "abs": [(lambda d: d.is_narrow_int, "lax.abs rejects sub-byte integers")],
    "bitcast-convert": [(_pred, "lax.bitcast_convert_type rejects bool")],
    "maximum": [(_cplx, "JAX lowers complex max to compare and select")],
    "minimum": [(_cplx, "JAX lowers complex min to compare and select")],
    **{op: [(_cplx, _CPLX_EXPANDED)] for op in (
        "cosine", "sine", "exponential", "log", "log-plus-one", "sqrt")},
    "cbrt": [(_cplx, "lax.cbrt rejects complex")],
    "convolution": [(_cplx, "JAX splits a complex convolution into three real ones"),
                    (_two_bit, "XLA's CPU has no 2-bit integer convolution: no oracle")],
    "concatenate": [(_two_bit, "XLA's CPU aborts on a 2-bit concatenate (an ir_array CHECK): "
                               "no oracle")],
    "sort": [(_two_bit, "XLA's CPU sort of a 2-bit integer is wrong and corrupts the heap "
                        "(results neither sorted nor a permutation, then malloc aborts): no "
                        "oracle")],
    "topk": [(_cplx, "lax.top_k rejects complex"),
             (lambda d: d.is_narrow_int or d.name == "f4e2m1fn", _NO_ORACLE)],
    "select-and-scatter": [
        (lambda d: not d.is_float, "JAX emits it for pooling gradients: floating-point only"),
        (lambda d: d.name == "f8e8m0fnu", "JAX cannot linearize f8e8m0fnu")],
}


def universe() -> dict[str, list[str]]:
    """opcode text -> the element types its type rule admits (all, where it has none)."""
    out: dict[str, list[str]] = {}
    for op in Opcode:
        rule = TYPE_RULES.get(op)
        out[op.value] = [n for n, d in DTYPES.items() if rule is None or rule[0](d)]
    return out


def why_not_emitted(op: Opcode) -> str | None:
    """Why a single-device jax.jit on CPU never emits `op`; None when it can."""
    if op.value in _WHY:
        return _WHY[op.value]
    if op in COLLECTIVES or op in ASYNC_OPS or op in START_DONE or op in START_DONE.values():
        return _COLLECTIVE
    return None


def why_never(op: Opcode, dtype: DType) -> str | None:
    """Why JAX never emits `op` in `dtype` (an opcode it emits in other types); None if it can."""
    for rule, why in _NEVER.get(op.value, ()):
        if rule(dtype):
            return why
    return None


def report(pairs: dict[tuple[str, str], int]) -> dict[str, Any]:
    """Reached and unreached pairs, with counts and reasons (JSON-ready)."""
    uni = universe()
    reached: list[str] = []
    not_emitted: dict[str, list[str]] = {}
    never: dict[str, list[str]] = {}
    no_type: list[str] = []
    missed: dict[str, list[str]] = {}
    for op in Opcode:
        why_op = why_not_emitted(op)
        for t in uni[op.value]:
            pair = f"{op.value}:{t}"
            if (op.value, t) in pairs:
                reached.append(pair)
            elif why_op is not None:
                not_emitted.setdefault(why_op, []).append(pair)
            elif t in NO_JAX_TYPE:
                no_type.append(pair)
            elif (why := why_never(op, DTYPES[t])) is not None:
                never.setdefault(why, []).append(pair)
            else:
                missed.setdefault(op.value, []).append(t)
    in_uni = {(op, t) for op, ts in uni.items() for t in ts}
    emittable = len(reached) + sum(len(v) for v in missed.values())
    return {"pairs_total": len(in_uni), "pairs_reached": len(reached),
            "pairs_emittable": emittable,
            "opcodes_reached": sorted({op for op, _ in pairs}), "reached": reached,
            "outside_universe": sorted(f"{op}:{t}" for op, t in pairs if (op, t) not in in_uni),
            "unreached": {"not-emitted": {k: len(v) for k, v in not_emitted.items()},
                          "not-emitted-opcodes": sorted({p.split(":")[0] for v in
                                                         not_emitted.values() for p in v}),
                          "jax-never": never, "no-jax-type": no_type,
                          "not-reached": missed}}
