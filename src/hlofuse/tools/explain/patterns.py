"""Structural recognisers shared by `explain` and `lint`.

* `is_rng_loop(w)` (from `passes.fusion.small_loops`): a while whose body is threefry2x32
  rounds (u32 rotations, looked up through fusions): JAX's CPU lowering of `jax.random`.
* `RNG_OPCODES`: the HLO random-number ops (`rng`, `rng-bit-generator`, ...).
* `all_ops(instr)`: an instruction and, for a fusion, everything fused inside it.
* `value_location(module, instr)`: the source line of `instr`, else of the nearest operand
  (inside a fused computation) that has one.
"""

from __future__ import annotations

from collections.abc import Iterator

from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import CONTROL_FLOW_OPS, Opcode
from hlofuse.passes.fusion.small_loops import is_rng_loop

RNG_OPCODES = frozenset(op for op in Opcode if op.value in (
    "rng", "rng-bit-generator", "rng-get-and-update-state"))
CONTROL = CONTROL_FLOW_OPS


def all_ops(instr: Instruction) -> Iterator[Instruction]:
    yield instr
    for comp in instr.called_computations() if instr.opcode is Opcode.FUSION else ():
        for inner in comp.instructions:
            yield from all_ops(inner)


def is_rng(instr: Instruction) -> bool:
    """An RNG op, a threefry custom call, or a threefry-shaped while loop."""
    if instr.opcode in RNG_OPCODES:
        return True
    if instr.opcode is Opcode.CUSTOM_CALL:
        return "threefry" in str(instr.attrs.get("custom_call_target", ""))
    return is_rng_loop(instr)


def location_text(module: Module, instr: Instruction) -> str:
    loc = module.source_location(instr)
    return f"{loc.file}:{loc.line}" if loc is not None else ""


def value_location(module: Module, instr: Instruction) -> str:
    """`instr`'s file:line, else the first one found walking its operands breadth-first."""
    seen: set[int] = set()
    queue = [instr]
    while queue:
        cur = queue.pop(0)
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        if cur.opcode is Opcode.FUSION:
            queue.insert(0, cur.fused_computation.root)
            continue
        text = location_text(module, cur)
        if text:
            return text
        queue.extend(cur.operands)
    return ""


def inherit_call_site_locations(module: Module) -> int:
    """Give instructions of called computations that have no source location the location of
    their call site, so ops inlined later keep a line ("from the `jax.random.uniform` call at
    cartpole.py:116"). JAX puts the location on the call (`jit(_uniform)`), not on the ops in
    the called function. Follows call, while, conditional and fusion computations; a
    computation called from sites with different locations is left alone. Returns how many
    instructions got a location."""
    sites: dict[str, set[tuple[tuple[str, str | int], ...]]] = {}
    changed = 0
    for comp in reversed(module.computations_post_order()):  # callers before callees
        fields = sites.get(comp.name)
        if fields and len(fields) == 1:
            (site,) = tuple(fields)
            for instr in comp.instructions:
                if module.source_location(instr) is None:
                    instr.metadata = type(instr.metadata)((*instr.metadata.fields, *site))
                    changed += 1
        for instr in comp.instructions:
            loc = _location_fields(module, instr)
            if loc is None:
                continue
            for callee in instr.called_computations():
                sites.setdefault(callee.name, set()).add(loc)
    return changed


def _location_fields(module: Module, instr: Instruction
                     ) -> tuple[tuple[str, str | int], ...] | None:
    md = instr.metadata
    if md.stack_frame_id is not None and module.source_location(instr) is not None:
        return (("stack_frame_id", md.stack_frame_id),)
    if md.source_file is not None and md.source_line is not None:
        return (("source_file", md.source_file), ("source_line", md.source_line))
    return None


def reader_location(module: Module, instr: Instruction) -> str:
    """The first file:line found walking forward from `instr` through its users (inside a
    fused computation: from a parameter to the op that consumes it)."""
    seen: set[int] = set()
    queue = list(instr.users)
    while queue:
        cur = queue.pop(0)
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        text = location_text(module, cur)
        if text:
            return text
        queue.extend(cur.users)
    return ""
