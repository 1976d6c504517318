"""Contiguous slices of a kernel's input read in place: a pointer into the operand's buffer.

    view_plan(fusion) -> ViewPlan(kernel, offsets) | None
        kernel:  the fusion with each viewed parameter given its slice's shape and the slice
                 removed (a detached instruction: it is lowered, never scheduled)
        offsets: operand leaf index -> byte offset of the slice in that operand's buffer

An unrolled scan reads step t's input as `slice(xs), slice={[t:t+1], ...}` inside step t's
fusion. Those fusions differ only in `t`, so each one was lowered, printed and compiled as a
function of its own (scan-1024: 3,073 kernels, 20 MB of C). Read through a view, the slice is
the caller's pointer arithmetic (`(char *)xs + t * 16384`) and the fusions are one function
(`kernel_key.structural_key` sees them equal). No value changes: the kernel reads the same
elements from the same buffer, row-major as every buffer is stored.

Conditions for a view, each checked here:
- the kernel is a fusion; the parameter is an array (one buffer, not a tuple);
- every user of the parameter inside the fusion is one slice (after CSE: the same slice
  instruction), which is not the fusion's root nor an operand of a root tuple (a kernel that
  only copies stays a copy);
- the slice is contiguous in the operand's buffer as it is stored: row-major in the logical
  dimensions, whatever layout the HLO declares (the cpu backend keeps no other; a declared
  `{0,1}` would put a view at the wrong offset). Walking dimensions from the last to the
  first, every dimension is whole up to one, which may be a range, and every earlier one has
  extent 1 (strides only on dimensions of extent 1); neither shape has tiling or a memory
  space, and the slice is not empty.

The driver never writes through a view: `schedule.py` drops in-place pairs whose input is
viewed.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, leaves


@dataclass(frozen=True)
class ViewPlan:
    kernel: Instruction
    offsets: dict[int, int]  # operand leaf index -> byte offset into that leaf's buffer


def contiguous_offset(operand: ArrayShape, sliced: ArrayShape,
                      ranges: list[tuple[int, int, int]]) -> int | None:
    """The element offset of the slice `ranges` of `operand` when the elements it selects are
    one contiguous run of the operand's buffer as the cpu backend stores it, else None.

    Every buffer of the cpu backend is row-major in its logical dimensions, whatever layout
    the HLO declares (`{0,1}` is not kept: docs/cpu-backend.md), and a kernel reads its
    parameters row-major; so contiguity and the offset are computed row-major, never from
    `minor_to_major` (a column of `f32[4,3]{0,1}` is contiguous in the declared layout but
    strided in the buffer). Tiled or memory-space layouts are refused outright."""
    if (operand.layout_attrs is not None or sliced.layout_attrs is not None
            or sliced.size == 0 or len(ranges) != operand.rank):
        return None
    offset, stride, partial = 0, 1, False
    for d in reversed(range(operand.rank)):  # minor to major in the stored (row-major) order
        start, _, step = ranges[d]
        extent = sliced.dims[d]
        if partial and extent != 1:
            return None
        if step != 1 and extent != 1:
            return None
        if extent != operand.dims[d]:
            partial = True
        offset += start * stride
        stride *= operand.dims[d]
    return offset


def view_plan(instr: Instruction) -> ViewPlan | None:
    """The kernel to lower in place of the fusion `instr` and its views, or None when no
    input qualifies (see the module docstring)."""
    if instr.opcode is not Opcode.FUSION:
        return None
    comp = instr.fused_computation
    root = comp.root
    in_root = {id(root)} | ({id(o) for o in root.operands}
                            if root.opcode is Opcode.TUPLE else set())
    first_leaf: list[int] = []
    n = 0
    for o in instr.operands:
        first_leaf.append(n)
        n += len(leaves(o.shape))
    chosen: dict[int, Instruction] = {}  # parameter id -> its one slice
    offsets: dict[int, int] = {}
    for p in comp.parameters:
        shape = p.shape
        if not isinstance(shape, ArrayShape) or not p.users:
            continue
        s = p.users[0]
        if (s.opcode is not Opcode.SLICE or id(s) in in_root
                or any(u is not s for u in p.users)):
            continue
        assert isinstance(s.shape, ArrayShape)
        off = contiguous_offset(shape, s.shape, list(s.attrs["slice"]))
        if off is None:
            continue
        chosen[id(p)] = s
        offsets[first_leaf[p.parameter_number or 0]] = off * shape.dtype.itemsize
    if not chosen:
        return None
    return ViewPlan(_rewritten(instr, chosen), offsets)


def _rewritten(instr: Instruction, chosen: dict[int, Instruction]) -> Instruction:
    """A detached copy of the fusion `instr` whose viewed parameters have their slice's shape
    and stand where the slice stood."""
    from hlofuse.ir.clone import clone_instruction

    comp = instr.fused_computation
    new = Computation(comp.name)
    mapping: dict[int, Instruction] = {}
    dropped: set[int] = set()
    for i in comp.post_order():
        if id(i) in chosen:
            s = chosen[id(i)]
            p = Instruction.create(Opcode.PARAMETER, s.shape, name=i.name,
                                   parameter_number=i.parameter_number, metadata=i.metadata)
            mapping[id(i)] = p
            mapping[id(s)] = p
            dropped.add(id(s))
        elif id(i) not in dropped:
            mapping[id(i)] = clone_instruction(i, [mapping[id(o)] for o in i.operands])
    for i in comp.instructions:
        if id(i) in dropped:
            continue
        c = mapping[id(i)]
        c.parent = new
        new.instructions.append(c)
    new.root = mapping[id(comp.root)]
    viewed = {p.parameter_number: chosen[id(p)].shape
              for p in comp.parameters if id(p) in chosen}
    operands = [  # detached stand-ins: the real operands gain no user
        Instruction.create(Opcode.PARAMETER, viewed.get(n, o.shape), name=o.name,
                           parameter_number=n)
        for n, o in enumerate(instr.operands)]
    attrs = dict(instr.attrs)
    attrs["calls"] = type(attrs["calls"])([new])
    return Instruction.create(Opcode.FUSION, instr.shape, operands, name=instr.name,
                              attrs=attrs, metadata=instr.metadata)
