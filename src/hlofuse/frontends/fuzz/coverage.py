"""(opcode, element type) coverage of a fuzz run against the op table.

The universe is every opcode of `ir/opcodes.py` times every element type of `ir/dtypes.py` that
the opcode's element-type rule (`shape_inference_ext.TYPE_RULES`) admits; nothing here lists
opcodes again except the reasons why some can never come out of a single-device `jax.jit`
lowering. `report(pairs)` sorts each pair into reached, or unreached with a reason:

    not-emitted    JAX's CPU lowering never produces the opcode (the reason says why)
    no-jax-type    JAX has no element type for it (s1, u1)
    not-reached    the opcode was produced, never with this type (a budget or generator gap,
                   or a type the op rejects in JAX's lowering)
"""

from __future__ import annotations

from typing import Any

from hlofuse.ir.dtypes import DTYPES
from hlofuse.ir.opcodes import COLLECTIVES, OPCODES, START_DONE, Category, Opcode
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
    "stochastic-convert": "no lax primitive produces it",
    "ragged-dot": "lax.ragged_dot lowers to dots on CPU",
    "select-and-scatter": "only from gradients of max pooling (not generated)",
    "topk": "lax.top_k lowers to sort on CPU",
    "outfeed": "side effects: not in pure programs", "infeed": "side effects: not in pure programs",
    "send": "host transfer", "send-done": "host transfer", "recv": "host transfer",
    "recv-done": "host transfer", "after-all": "token plumbing of side effects",
    "custom-call": "counted, but its targets are not HLO opcodes of the table",
}


def universe() -> dict[str, list[str]]:
    """opcode text -> the element types its type rule admits (all, where it has none)."""
    out: dict[str, list[str]] = {}
    for op in Opcode:
        rule = TYPE_RULES.get(op)
        out[op.value] = [n for n, d in DTYPES.items() if rule is None or rule[0](d)]
    return out


def _why_not_emitted(op: Opcode) -> str:
    if op.value in _WHY:
        return _WHY[op.value]
    if op in COLLECTIVES or op in START_DONE or op in START_DONE.values():
        return "collectives and async pairs: multi-device or scheduled programs only"
    if OPCODES[op].category in (Category.OPAQUE, Category.CONTROL):
        return f"{OPCODES[op].category.value} op not produced by single-device jax.jit"
    return "not produced by the generators' JAX programs"


def report(pairs: dict[tuple[str, str], int]) -> dict[str, Any]:
    """Reached and unreached pairs, with counts and reasons (JSON-ready)."""
    uni = universe()
    reached_ops = {op for op, _ in pairs}
    reached, unreached = [], {"not-emitted": {}, "no-jax-type": [], "not-reached": {}}
    for op in Opcode:
        for t in uni[op.value]:
            if (op.value, t) in pairs:
                reached.append(f"{op.value}:{t}")
            elif op.value not in reached_ops:
                unreached["not-emitted"].setdefault(_why_not_emitted(op), []).append(
                    f"{op.value}:{t}")
            elif t in NO_JAX_TYPE:
                unreached["no-jax-type"].append(f"{op.value}:{t}")
            else:
                unreached["not-reached"].setdefault(op.value, []).append(t)
    total = sum(len(v) for v in uni.values())
    emitted = [f"{op.value}:{t}" for op in Opcode if op.value in reached_ops
               for t in uni[op.value] if t not in NO_JAX_TYPE]
    return {"pairs_total": total, "pairs_reached": len(reached),
            "pairs_of_emitted_opcodes": len(emitted),
            "opcodes_reached": sorted(reached_ops), "reached": reached,
            "unreached": {"not-emitted": {k: len(v) for k, v in
                                          unreached["not-emitted"].items()},
                          "not-emitted-opcodes": sorted({p.split(":")[0] for v in
                                                         unreached["not-emitted"].values()
                                                         for p in v}),
                          "no-jax-type": unreached["no-jax-type"],
                          "not-reached": unreached["not-reached"]}}
