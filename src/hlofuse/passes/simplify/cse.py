"""`cse`: common-subexpression elimination within each computation (XLA's HloCSE).

    a = add(x, y)                      a = add(x, y)
    b = add(x, y)        ==>           c = multiply(a, a)
    c = multiply(a, b)

Two instructions are the same expression when they agree on opcode, shape (layout included),
operands (by identity, in order: `add(x, y)` and `add(y, x)` are not merged), attributes
(called computations by identity), and, for constants, the literal's value (bit for bit, so
`-0.0` and `0.0` stay apart and NaNs merge only with the same NaN). Conditions:

* instructions with side effects (transitively), parameters, and instructions with control
  edges are never merged;
* the first instruction in post order is kept; the later one's uses move to it, so the kept
  one always dominates the uses;
* metadata is not part of the key (the kept instruction's metadata wins).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.base import check_kept, checking_kept
from hlofuse.passes.registry import register
from hlofuse.passes.utils import Rewriter, has_side_effect, ordered


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    if hasattr(value, "instructions"):  # a Computation: identity
        return ("computation", id(value))
    return value


def _literal_key(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_literal_key(v) for v in value)
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    return None


def expression_key(instr: Instruction) -> tuple[Any, ...]:
    attrs = tuple(sorted((k, _freeze(v)) for k, v in instr.attrs.items()))
    return (
        instr.opcode,
        instr.shape,
        tuple(id(o) for o in instr.operands),
        attrs,
        _literal_key(instr.literal),
    )


def cse_computation(comp: Computation, cache: dict[int, bool]) -> bool:
    # Two levels: a cheap key (opcode, shape, operands) first; the full key (attributes,
    # literal) is computed only for instructions that share a cheap key with an earlier one.
    first: dict[tuple[Any, ...], Instruction | None] = {}  # None: already fully keyed
    seen: dict[tuple[Any, ...], Instruction] = {}
    edit = Rewriter(comp)
    order = ordered(comp)
    # Control successors are rare: look for them only in a computation that has some. Without
    # them, whether an instruction may take part (no side effect) cannot change during the
    # loop, so it is asked only of instructions that share a cheap key with another (asking a
    # fusion walks its computation): `first` may then hold one not yet asked about.
    has_control_edges = any(i.control_predecessors for i in order)

    def excluded(instr: Instruction) -> bool:
        return has_side_effect(instr, cache) or (has_control_edges and (
            bool(instr.control_predecessors)
            or any(instr in u.control_predecessors for u in instr.users)))

    for instr in order:
        if instr.opcode is Opcode.PARAMETER or (has_control_edges and excluded(instr)):
            continue
        # (the opcode by identity and the operands as instructions: both hash in C, where an
        # Enum member hashes in Python; tuples of instructions compare by identity)
        cheap = (id(instr.opcode), instr.shape, tuple(instr._operands))
        if cheap not in first:
            first[cheap] = instr
            continue
        if not has_control_edges and excluded(instr):
            continue
        earlier = first[cheap]
        if earlier is not None:
            if not has_control_edges and excluded(earlier):
                first[cheap] = instr  # the earlier one never takes part: this one is first
                continue
            seen.setdefault(expression_key(earlier), earlier)
            first[cheap] = None
        key = expression_key(instr)
        keep = seen.get(key)
        if keep is None:
            seen[key] = instr
            continue
        edit.replace(instr, keep)
    return edit.finish()


@register("cse")
@dataclass(frozen=True)
class Cse:
    """Merge identical instructions (constants by value). `only_fusion_computations`: inside
    fusions' computations alone (XLA's `HloCSE(..., only_fusion_computations=true)`, the CSE of
    its fusion and horizontal-fusion fixpoints: the kernels themselves are never merged there)."""

    name: ClassVar[str] = "cse"
    exact_versions: ClassVar[bool] = True  # (passes/base.py)
    only_fusion_computations: bool = False

    def run(self, module: Module) -> bool:
        cache: dict[int, bool] = {}
        # fused computations this pipeline run found nothing to merge in, at that version
        # (the fusion fixpoints run CSE three times or more; most fusions do not change)
        clean: dict[Computation, int] | None = (
            module.caches.setdefault((Cse, "clean"), {}) if module.caches is not None
            else None)
        check = checking_kept()
        changed = False
        for comp in list(module.computations):  # unreachable ones too: DCE drops them
            fused = comp.is_fusion_computation
            if self.only_fusion_computations and not fused:
                continue
            if clean is not None and fused and clean.get(comp) == comp.version:
                if check:  # (HLOFUSE_CHECK_KEPT: a skipped computation has nothing to merge)
                    check_kept(not cse_computation(comp, cache),
                               f"computation {comp.name}, kept as clean for CSE,")
                continue
            if cse_computation(comp, cache):
                changed = True
            elif clean is not None and fused:
                clean[comp] = comp.version
        return changed
