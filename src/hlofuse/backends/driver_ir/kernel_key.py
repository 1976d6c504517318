"""Kernels known equal before they are lowered: a structural key of an HLO kernel instruction.

    structural_key(fusion_a) == structural_key(fusion_b)
        => lowering either gives the same C function up to its own names

Transformer steps repeat one layer's kernels per layer (the 8-layer GPT step: 636 kernels, 86
distinct functions), so the scheduler looks the key up first and lowers, optimises and prints
each distinct kernel once; the rest are compared by their kernel IR's identity
(`kernel_ir.identity.digest`) after lowering. The key holds everything lowering reads: the
instruction's opcode, shape (layout included), attributes, operand shapes and which operands
are the same instruction (`add(x, x)` reads one buffer twice), and for a fusion (or any called
computation: reducers, comparators, a whole loop's body) every instruction of the computation
with its opcode, shape, attributes, parameter number, operand positions, a digest of its
literal, and the keys of the computations it calls. Names and metadata are left out: they only
reach comments, which the first kernel's function keeps. Attribute values without a hash (none
today) make the key None: such a kernel is lowered as before.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from hlofuse.ir.attributes import COMPUTATION_ATTRS
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction


def structural_key(instr: Instruction) -> tuple[Any, ...] | None:
    memo: dict[int, tuple[Any, ...]] = {}
    try:
        head = _row(instr, None, memo)
        # an operand given twice is one buffer to the lowering: keep the pattern
        first: dict[int, int] = {}
        alias = tuple(first.setdefault(id(o), n) for n, o in enumerate(instr.operands))
        key = (head, tuple(o.shape for o in instr.operands), alias)
        hash(key)
    except TypeError:  # an attribute value that cannot be compared by value
        return None
    return key


def _computation(comp: Computation, memo: dict[int, tuple[Any, ...]]) -> tuple[Any, ...]:
    if id(comp) not in memo:
        pos = {id(i): n for n, i in enumerate(comp.instructions)}
        rows = tuple(_row(i, pos, memo) for i in comp.instructions)
        memo[id(comp)] = (rows, pos[id(comp.root)])
    return memo[id(comp)]


def _row(instr: Instruction, pos: dict[int, int] | None,
         memo: dict[int, tuple[Any, ...]]) -> tuple[Any, ...]:
    attrs = []
    for k in sorted(instr.attrs):
        v = instr.attrs[k]
        if k in COMPUTATION_ATTRS:
            comps = v if isinstance(v, list | tuple) else [v]
            v = tuple(_computation(c, memo) for c in comps)
        attrs.append((k, v))
    operands = tuple(pos[id(o)] for o in instr.operands) if pos is not None else ()
    return (instr.opcode, instr.shape, instr.parameter_number, operands, tuple(attrs),
            _literal(instr.literal))


def _literal(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(_literal(v) for v in value)
    arr = np.ascontiguousarray(value)
    return (str(arr.dtype), arr.shape, hashlib.sha256(arr.tobytes()).hexdigest())
