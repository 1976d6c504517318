"""Kernel lowering: one HLO kernel (a fusion, or an unfused op that does work) -> one C function.

    lower_kernel(instr, used_names) -> Kernel      (backends/cpu/contract.py)

A single op is lowered exactly like a fusion whose parameters are its operands. The pieces:

    naming.py       readable unique names (fused_multiply_add_select, reduce_add, dot_2)
    index.py        indices as C expressions (multi-index and/or row-major linear)
    emitter.py      the value of an instruction at an index; elementwise ops, broadcast,
                    reshape, transpose, iota, constants, tuples, map
    maps.py         slice, dynamic-slice, dynamic-update-slice, reverse, pad, concatenate,
                    gather, width-changing bitcast-convert
    loops.py        loop nests over output shapes; the plan of a kernel's outputs
    reduce.py       reduce (row / column / variadic / multi-output) and reduce-window
    inplace.py      dynamic-update-slice roots done in place (O(update))
    scatter.py      scatter (XLA semantics: out-of-bounds updates skipped, in order)
    materialize.py  dot, sort, ... (lower.library) inside a kernel, via scratch buffers

Conditions enforced: `instr` is a kernel (`passes.fusion.kernels.is_kernel`); its operands'
and results' leaves are arrays; the generated function has the contract's signature
`static void NAME(const T0 *restrict in0, ..., U0 *restrict out0, ...)` (no `restrict` on an
input/output pair listed in `Kernel.inplace`). Anything that cannot be lowered raises
`LoweringError` (a CompileError) naming the instruction.
"""

from __future__ import annotations

from hlofuse.backends.cpu import cexpr, limits
from hlofuse.backends.cpu.contract import Kernel
from hlofuse.backends.cpu.ctext import comment
from hlofuse.backends.cpu.lower import inplace, loops, scatter
from hlofuse.backends.cpu.lower.emitter import Emitter, LoweringError, where
from hlofuse.backends.cpu.lower.naming import kernel_name
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, leaves

__all__ = ["LoweringError", "lower_kernel"]

_KINDS = {"kLoop": "loop", "kInput": "input", "kOutput": "output"}


def _root_leaves(root: Instruction) -> list[tuple[Instruction, int]]:
    """(instruction, leaf index) for each array leaf of a computation's root, depth-first;
    tuple instructions are looked through."""
    if root.opcode is Opcode.TUPLE:
        out: list[tuple[Instruction, int]] = []
        for o in root.operands:
            out += _root_leaves(o)
        return out
    return [(root, k) for k in range(len(leaves(root.shape)))]


def _header(instr: Instruction) -> str:
    """The kernel's opening comment: its instruction and source op (input text: escaped)."""
    what = (f"{instr.fusion_kind} fusion of {len(instr.fused_computation.instructions)} "
            "instructions" if instr.opcode is Opcode.FUSION else instr.opcode.value)
    lines = [comment(instr.name, ": ", what)]
    md = instr.metadata
    if md:
        where_ = ""
        if md.source_file:
            where_ = f" at {md.source_file}:{md.source_line}" if md.source_line else \
                f" at {md.source_file}"
        if md.op_name or where_:
            lines.append(comment(md.op_name or "", where_))
    return "\n".join(lines) + "\n"


def _emit(instr: Instruction, name: str, used: set[str], flat: bool,
          splits: dict[tuple[tuple[int, ...], int], set[int]]
          ) -> tuple[Emitter, str, tuple[ArrayShape, ...], tuple[ArrayShape, ...], dict[int, int]]:
    if instr.opcode is Opcode.FUSION:
        comp = instr.fused_computation
        params = sorted(comp.parameters, key=lambda p: p.parameter_number or 0)
        root = comp.root
        fused = True
    else:
        params = list(instr.operands)
        root = instr
        fused = False
    em = Emitter(name, {}, used, flat_loops=flat)
    em.splits = splits
    in_shapes: list[ArrayShape] = []
    for p in params:
        ptrs = []
        for s in leaves(p.shape):
            ptrs.append(f"in{len(in_shapes)}")
            in_shapes.append(s)
        em.params.setdefault(id(p), ptrs)
    em.names.update(f"in{i}" for i in range(len(in_shapes)))

    out_shapes: list[ArrayShape] = []
    roots: dict[int, tuple[Instruction, list[tuple[int, str]]]] = {}
    for r, k in _root_leaves(root):
        ptr = f"out{len(out_shapes)}"
        out_shapes.append(leaves(r.shape)[k])
        roots.setdefault(id(r), (r, []))[1].append((k, ptr))
    em.names.update(f"out{i}" for i in range(len(out_shapes)))

    inplace_of: dict[int, dict[int, str]] = {}
    pairs: dict[int, int] = {}
    for r, outs in roots.values():
        if r.opcode is Opcode.SCATTER:
            cands = scatter.candidates(r, em.params, fused)
        else:
            src = inplace.candidate(r, em.params, fused)
            cands = {0: src} if src is not None else {}
        seen: set[int] = set()
        for k, ptr in outs:
            src = cands.get(k)
            if src is None or k in seen or int(src[2:]) in pairs.values():
                continue
            seen.add(k)
            inplace_of.setdefault(id(r), {})[k] = src
            pairs[int(ptr[3:])] = int(src[2:])
    loops.emit_roots(em, list(roots.values()), inplace_of)

    aliased_in = set(pairs.values())
    args = []
    for i, s in enumerate(in_shapes):
        restrict = "" if i in aliased_in else "restrict "
        args.append(f"const {cexpr.ctype(s.dtype)} *{restrict}in{i}")
    for i, s in enumerate(out_shapes):
        restrict = "" if i in pairs else "restrict "
        args.append(f"{cexpr.ctype(s.dtype)} *{restrict}out{i}")
    sig = f"static void {name}({', '.join(args)})"
    body = [sig + " {", *em.pre, *em.body, *em.post, "}"]
    source = _header(instr) + "".join(em.helpers) + "\n".join(body) + "\n"
    return em, source, tuple(in_shapes), tuple(out_shapes), pairs


def lower_kernel(instr: Instruction, used_names: set[str]) -> Kernel:
    """The C function computing the kernel `instr` (see the module docstring). The emitter
    recurses once per level of the kernel's expression: a deep one runs on a large stack
    (`limits.deep_call`); one beyond `limits.MAX_EXPRESSION_DEPTH` is refused."""
    depth = limits.expression_depth(instr)
    return limits.deep_call(lambda: _lower_kernel(instr, used_names), depth)


def _lower_kernel(instr: Instruction, used_names: set[str]) -> Kernel:
    for op in instr.operands:
        if not all(isinstance(s, ArrayShape) for s in leaves(op.shape)):
            raise LoweringError(f"{where(instr)}: operand {op.name} is not made of arrays")
    name = kernel_name(instr, used_names)
    # first a flat loop; a nest if an index map needed the multi-index of the flat variable;
    # then loop ranges split where concatenate/pad conditions on a loop index would decide
    flat = True
    splits: dict[tuple[tuple[int, ...], int], set[int]] = {}
    while True:
        trial = set(used_names)
        em, source, ins, outs, pairs = _emit(instr, name, trial, flat, splits)
        if em.needs_nest and flat:
            flat = False
        elif em.split_requests and not splits:
            splits = em.split_requests
        else:
            break
    used_names |= trial
    fused = instr.opcode is Opcode.FUSION
    kind = _KINDS.get(instr.fusion_kind, "loop") if fused else instr.opcode.value
    return Kernel(name=name, source=source, inputs=ins, outputs=outs, instruction=instr.name,
                  kind=kind, inplace=pairs)
