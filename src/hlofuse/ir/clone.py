"""Deep copies of modules and computations that keep every name, attribute and link.

`clone_module(m)` gives an independent module that is structurally equal to `m`: passes can
then be run on the copy and the interpreter compared before/after.
"""

from __future__ import annotations

import copy

from hlofuse.ir.attributes import ATTRIBUTES, AttrKind
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module


def clone_instruction(
    instr: Instruction,
    operands: list[Instruction],
    comp_map: dict[int, Computation] | None = None,
) -> Instruction:
    """A detached copy of `instr` reading `operands`; called computations remapped by id."""
    attrs = dict(instr.attrs)
    if comp_map:
        for key, value in attrs.items():
            kind = ATTRIBUTES.get(key)
            if kind is AttrKind.COMPUTATION:
                attrs[key] = comp_map.get(id(value), value)
            elif kind is AttrKind.COMPUTATIONS:
                attrs[key] = tuple(comp_map.get(id(c), c) for c in value)
    return Instruction.create(
        instr.opcode,
        instr.shape,
        operands,
        name=instr.name,
        attrs=attrs,
        literal=copy.deepcopy(instr.literal) if instr.literal is not None else None,
        parameter_number=instr.parameter_number,
        metadata=instr.metadata,
    )


def clone_computation(
    comp: Computation, comp_map: dict[int, Computation] | None = None, name: str | None = None
) -> Computation:
    """Copy `comp` (not yet added to a module). Names are kept; the caller uniquifies them."""
    new = Computation(name or comp.name)
    mapping: dict[int, Instruction] = {}
    for instr in comp.post_order():
        ops = [mapping[id(o)] for o in instr.operands]
        clone = clone_instruction(instr, ops, comp_map)
        mapping[id(instr)] = clone
    # Keep the original textual order of instructions.
    for instr in comp.instructions:
        c = mapping[id(instr)]
        c.control_predecessors = [mapping[id(p)] for p in instr.control_predecessors]
        c.parent = new
        new.instructions.append(c)
    new.root = mapping[id(comp.root)]
    return new


def clone_module(module: Module) -> Module:
    new = Module(module.name)
    new.header_attrs = dict(module.header_attrs)
    new.debug_info = copy.deepcopy(module.debug_info)
    comp_map: dict[int, Computation] = {}
    clones: dict[int, Computation] = {}
    for comp in module.computations_post_order():
        c = clone_computation(comp, comp_map)
        comp_map[id(comp)] = c
        clones[id(comp)] = c
    for comp in module.computations:  # original order
        c = clones[id(comp)]
        new.add_computation(c, entry=comp is module.entry)
    for comp in module.computations:
        if comp.fusion_instruction is not None:
            fusion_parent = comp.fusion_instruction.parent
            assert fusion_parent is not None
            idx = fusion_parent.instructions.index(comp.fusion_instruction)
            clones[id(comp)].fusion_instruction = clones[id(fusion_parent)].instructions[idx]
    return new
