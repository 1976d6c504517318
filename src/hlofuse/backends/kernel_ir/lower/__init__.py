"""Lowering: one HLO kernel (a fusion, or an unfused op that does work) -> one `ir.Kernel`.

    lower_kernel(instr) -> ir.Kernel      (named by its stem; every other name local to it)
    calling_convention(instr) -> (ins, outs)   the kernel's parameter and result leaf shapes

A single op is lowered exactly like a fusion whose parameters are its operands. The pieces:

    builder.py      the value of an instruction at an index; guarded cases; clamps
    index.py        indices: multi-index and/or row-major linear, as affine expressions
    elementwise.py  elementwise ops, broadcast, reshape, transpose, iota, constants, tuples, map
    maps.py         slice, dynamic-slice, dynamic-update-slice, reverse, pad, concatenate,
                    gather, width-changing bitcast-convert
    reduce.py       reduce (row / column / variadic / multi-output) and reduce-window
    roots.py        the plan of a kernel's outputs; loop nests
    inplace.py      in-place dynamic-update-slice and scatter roots
    scatter.py      scatter (XLA semantics: out-of-bounds updates skipped, in order)
    library.py      dot, sort, ... as library calls into buffers
    scalar.py       reducers/comparators inlined as values, or as functions

Conditions enforced: `instr` is a kernel (`passes.fusion.kernels.is_kernel`); its operands' and
results' leaves are arrays. Inputs are buffers `in0..inN` (operand leaves, depth-first), outputs
`out0..outM` (result leaves); every name in the IR is derived by the lowering, never taken from
the input text. Anything that cannot be lowered raises `LoweringError` (a CompileError) naming
the instruction.
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Buffer
from hlofuse.backends.kernel_ir.lower import elementwise, inplace, roots  # noqa: F401 (handlers)
from hlofuse.backends.kernel_ir.lower.builder import Builder, LoweringError, where
from hlofuse.backends.kernel_ir.naming import kernel_stem
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import FusionKind, Opcode
from hlofuse.ir.shape import ArrayShape, leaves

__all__ = ["LoweringError", "lower_kernel"]

# (keys compare equal to the instruction's kind text: FusionKind is a StrEnum)
KINDS: dict[str, str] = {FusionKind.LOOP: "loop", FusionKind.INPUT: "input",
                         FusionKind.OUTPUT: "output"}


def _root_leaves(root: Instruction) -> list[tuple[Instruction, int]]:
    """(instruction, leaf index) for each array leaf of a computation's root, depth-first;
    tuple instructions are looked through."""
    out: list[tuple[Instruction, int]] = []
    stack = [root]
    while stack:
        r = stack.pop()
        if r.opcode is Opcode.TUPLE:
            stack.extend(reversed(r.operands))
        else:
            out += [(r, k) for k in range(len(leaves(r.shape)))]
    return out


def calling_convention(instr: Instruction
                       ) -> tuple[tuple[ArrayShape, ...], tuple[ArrayShape, ...]]:
    """The shapes of the kernel's inputs (its parameters' leaves, in parameter order) and
    outputs (its root's array leaves, depth-first): every backend's function signature."""
    if instr.opcode is Opcode.FUSION:
        params = sorted(instr.fused_computation.parameters,
                        key=lambda p: p.parameter_number or 0)
        root = instr.fused_computation.root
    else:
        params = list(instr.operands)
        root = instr
    ins = tuple(s for p in params for s in leaves(p.shape))
    outs = tuple(leaves(r.shape)[k] for r, k in _root_leaves(root))
    for s in ins + outs:
        assert isinstance(s, ArrayShape)
    return ins, outs


def kind_of(instr: Instruction) -> str:
    if instr.opcode is Opcode.FUSION:
        return KINDS.get(instr.fusion_kind, "loop")
    return instr.opcode.value


def _label(instr: Instruction) -> tuple[str, str]:
    """(label: the instruction's name, for errors; summary: its structure, for the kernel's
    comment). The instruction's name and source location are printed at its call sites in the
    driver (`schedule.call_note`): a kernel is shared by every instruction it computes, in this
    program and in others, and its C must not depend on which one it was lowered for."""
    if instr.opcode is Opcode.FUSION:
        summary = (f"{instr.fusion_kind} fusion of "
                   f"{len(instr.fused_computation.instructions)} instructions")
    else:
        summary = instr.opcode.value
    return instr.name, summary


def lower_kernel(instr: Instruction, column_blocks: bool = True) -> ir.Kernel:
    """The kernel IR computing `instr` (see the module docstring), named by its stem
    (`naming.kernel_stem`); names in it are local to it. `column_blocks`: large column
    reductions are cut into blocks of rows for the CPU's threads (`reduce.column_blocks`)."""
    for op in instr.operands:
        if not all(isinstance(s, ArrayShape) for s in leaves(op.shape)):
            raise LoweringError(f"{where(instr)}: operand {op.name} is not made of arrays")
    name = kernel_stem(instr)
    g = ir.Graph()
    b = Builder(g)
    b.column_blocks = column_blocks
    fused = instr.opcode is Opcode.FUSION
    if fused:
        params = sorted(instr.fused_computation.parameters, key=lambda p: p.parameter_number or 0)
        root = instr.fused_computation.root
    else:
        params = list(instr.operands)
        root = instr
    inputs: list[Buffer] = []
    for p in params:
        bufs = []
        for s in leaves(p.shape):
            buf = Buffer(f"in{len(inputs)}", s.dtype, s.size, "in", len(inputs))
            bufs.append(buf)
            inputs.append(buf)
        b.params.setdefault(id(p), bufs)
    outputs: list[Buffer] = []
    planned: dict[int, tuple[Instruction, list[tuple[int, Buffer]]]] = {}
    for r, k in _root_leaves(root):
        s = leaves(r.shape)[k]
        buf = Buffer(f"out{len(outputs)}", s.dtype, s.size, "out", len(outputs))
        outputs.append(buf)
        planned.setdefault(id(r), (r, []))[1].append((k, buf))

    from hlofuse.passes.fusion.loop_fusion import is_whole_loop

    if is_whole_loop(instr):
        from hlofuse.backends.kernel_ir.lower.whole_loop import lower_whole_loop

        pairs = lower_whole_loop(b, instr, inputs, outputs)
        label, summary = _label(instr)
        return ir.Kernel(name=name, inputs=inputs, outputs=outputs, body=b.pre + b.body,
                         graph=g, locals=b.locals, consts=b.consts, funcs=b.funcs,
                         inplace=pairs, label=label, summary=summary)
    inplace_of: dict[int, dict[int, Buffer]] = {}
    pairs = {}
    for r, outs in planned.values():
        if r.opcode is Opcode.SCATTER:
            cands = inplace.scatter_candidates(r, b.params, fused)
        else:
            src = inplace.candidate(r, b.params, fused)
            cands = {0: src} if src is not None else {}
        seen: set[int] = set()
        for k, buf in outs:
            src_buf = cands.get(k)
            if src_buf is None or k in seen or src_buf.index in pairs.values():
                continue
            seen.add(k)
            inplace_of.setdefault(id(r), {})[k] = src_buf
            pairs[buf.index] = src_buf.index
    roots.emit_roots(b, list(planned.values()), inplace_of)
    label, summary = _label(instr)
    return ir.Kernel(name=name, inputs=inputs, outputs=outputs, body=b.pre + b.body, graph=g,
                     locals=b.locals, consts=b.consts, funcs=b.funcs, inplace=pairs,
                     label=label, summary=summary)
