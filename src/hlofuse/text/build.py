"""Turning a `ParsedModule` into a `Module`: names resolved, shapes inferred, links set.

Steps, after the whole text is parsed (so uses may come before definitions):

0. Text that is a single instruction gets one parameter per operand that names no instruction
   (numbered in order of appearance; such an operand must have its shape written: "operand had
   no shape"); async sugar is rewritten and async chains linked (`async_sugar.py`).
1. Module-unique instruction names, as XLA's NameUniquer does: the first instruction to use a
   name keeps it; a later one in another computation becomes `name.N` (`p0` -> `p0.1`).
   Computation names live in their own namespace (also as in XLA), so an instruction `add`
   inside a computation `add` keeps its name.
2. Operands and control predecessors, by name within their computation; a long-form operand
   shape (`add(f32[4]{0} %a, ...)`) must be compatible with the operand's shape, and equal in
   layout when both give one.
3. Computations named by attributes (`to_apply=`, `calls=`, `branch_computations={...}`, ...);
   `calls=` of a fusion sets the fused computation's `fusion_instruction`.
4. Shapes the short form leaves out (`t = tuple(a, b)`), by `ir.shape_inference.infer_shape`,
   operands and called computations' roots first; an inferred shape must pass
   `ir.shape.shape_problem` like a written one (e.g. a chain of `tuple`s nests deeper than
   `ir.limits.MAX_TUPLE_DEPTH`: a `ParseLimitError`).
5. Roots (the ROOT instruction, else the last one) and the entry (the ENTRY computation, else
   the last one). A module without `HloModule` takes the entry computation's name.
6. A written signature `(p: f32[4]) -> f32[4]` must agree (ignoring layout) with the
   parameters, by number, and with the root: "Shape of computation c, f32[1], is not compatible
   with that of its root instruction r, f32[2]", as XLA says.

Every failure is an `HloParseError` at the line:column of the offending name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hlofuse.errors import HloVerifyError
from hlofuse.ir.attributes import ATTRIBUTES, AttrKind
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, Shape, TupleShape, format_shape, shape_problem
from hlofuse.text.async_sugar import desugar
from hlofuse.text.attrs import CompRef

if TYPE_CHECKING:
    from hlofuse.text.parser import HloParser, ParsedModule, PendingComp, PendingInstr


def build_module(parser: HloParser, parsed: ParsedModule) -> Module:
    for pc in parsed.computations:
        if pc.single_op:
            _add_single_op_parameters(parser, pc)
    desugar(parser, parsed)
    entry = _find_entry(parser, parsed)
    module = Module(parsed.name if parsed.name is not None else entry.name)
    module.header_attrs = parsed.header_attrs
    module.debug_info = parsed.debug_info
    comps: dict[str, Computation] = {}
    for pc in parsed.computations:
        comp = Computation(pc.name)
        comp.parent = module
        module.reserve_name(pc.name)
        module.computations.append(comp)
        comps[pc.name] = comp
    module.entry = comps[entry.name]
    _assign_names(module, parsed)
    for pc in parsed.computations:
        _link(parser, pc, comps[pc.name], comps)
    _infer_missing_shapes(parser, parsed, comps)
    for pc in parsed.computations:
        _check_operand_shapes(parser, pc)
        if pc.signature is not None:
            _check_signature(parser, pc, comps[pc.name])
    for comp in module.computations:
        _definitions_first(comp)
    return module


def _add_single_op_parameters(parser: HloParser, pc: PendingComp) -> None:
    """Single-instruction text: operands that name no instruction become parameters."""
    from hlofuse.text.parser import PendingInstr

    params: dict[str, PendingInstr] = {}
    for p in list(pc.instrs):
        for ref in p.operands:
            if ref.name is not None and ref.name in pc.by_name:
                continue  # an instruction (or a parameter made for an earlier operand)
            if ref.shape is None:
                raise parser.error(f"Operand had no shape in HLO text: '{ref.name}' names no "
                                   "instruction, and text that is a single instruction makes "
                                   "such operands parameters, which need their shape written",
                                   ref.offset)
            name = ref.name
            if name is None:
                name, k = "parameter.anon", 0
                while name in pc.by_name:
                    k += 1
                    name = f"parameter.anon.{k}"
            param = Instruction(Opcode.PARAMETER, ref.shape, name=name,
                                parameter_number=len(params))
            pending = PendingInstr(param, ref.offset, ref.offset, [], [], True)
            params[name] = pending
            pc.by_name[name] = pending
            ref.name = name
    pc.instrs[:0] = params.values()


def _check_signature(parser: HloParser, pc: PendingComp, comp: Computation) -> None:
    assert pc.signature is not None
    written, result, at = pc.signature
    root = comp.root
    if not result.compatible(root.shape):
        raise parser.error(f"Shape of computation {comp.name}, {format_shape(result)}, is not "
                           f"compatible with that of its root instruction {root.name}, "
                           f"{format_shape(root.shape)}", at)
    params = {p.parameter_number: p for p in comp.instructions
              if p.opcode is Opcode.PARAMETER}
    for number, (name, shape, offset) in enumerate(written):
        param = params.get(number)
        if param is None:
            raise parser.error(f"the signature of computation {comp.name} names parameter "
                               f"{name} (number {number}), but the computation has no "
                               f"parameter({number})", offset)
        if not shape.compatible(param.shape):
            raise parser.error(f"the signature of computation {comp.name} gives parameter "
                               f"{number} shape {format_shape(shape)}, but {param.name} has "
                               f"shape {format_shape(param.shape)}", offset)


def _definitions_first(comp: Computation) -> None:
    """Text may name an operand before defining it; every pass and backend reads instruction
    lists in definition order, so such a list is put in that order (a post order). A cycle,
    which no order fixes, is the verifier's to report."""
    seen: set[int] = set()
    for instr in comp.instructions:
        if any(id(o) not in seen for o in (*instr.operands, *instr.control_predecessors)):
            comp.instructions = comp.post_order()
            return
        seen.add(id(instr))


def _find_entry(parser: HloParser, parsed: ParsedModule) -> PendingComp:
    entries = [pc for pc in parsed.computations if pc.is_entry]
    if len(entries) > 1:
        raise parser.error(f"a second ENTRY computation ({entries[1].name}; the first is "
                           f"{entries[0].name})", entries[1].offset)
    return entries[0] if entries else parsed.computations[-1]


def _assign_names(module: Module, parsed: ParsedModule) -> None:
    taken: set[str] = set()
    clashes: list[Instruction] = []
    for pc in parsed.computations:
        for p in pc.instrs:
            name = p.instr.name
            if name in taken:
                clashes.append(p.instr)
            else:
                taken.add(name)
                module.reserve_name(name)  # False only if a computation has the name: fine
    for instr in clashes:
        instr.name = module.unique_name(instr.name)


def _link(parser: HloParser, pc: PendingComp, comp: Computation,
          comps: dict[str, Computation]) -> None:
    by_name = pc.by_name
    users: dict[int, set[int]] = {}

    def link(instr: Instruction, refs: list[Any], message: str) -> list[Instruction]:
        """The instructions `refs` name; `instr` becomes a user of each, once."""
        out: list[Instruction] = []
        for ref in refs:
            target = by_name.get(ref.name)
            if target is None:
                raise parser.error(message.format(name=ref.name, comp=pc.name), ref.offset)
            op = target.instr
            out.append(op)
            seen = users.setdefault(id(op), set())
            if id(instr) not in seen:
                seen.add(id(instr))
                op.users.append(instr)
        return out
    for p in pc.instrs:
        instr = p.instr
        instr.parent = comp
        comp.instructions.append(instr)
        if p.operands:
            # the parser builds use-def edges in bulk
            instr._operands.extend(link(instr, p.operands, "use of undefined instruction "
                                        "'{name}' in computation {comp}"))
        if p.control:
            instr.control_predecessors = link(instr, p.control, "control predecessor '{name}' "
                                              "is not an instruction of computation {comp}")
        if instr.attrs:
            _resolve_computations(parser, instr, comps, p)
    root = pc.root if pc.root is not None else pc.instrs[-1]
    comp.root = root.instr


def _resolve_computations(parser: HloParser, instr: Instruction, comps: dict[str, Computation],
                          p: PendingInstr) -> None:
    attrs = instr.attrs
    for key, value in attrs.items():
        if isinstance(value, CompRef):
            attrs[key] = _lookup_comp(parser, value, comps)
        elif ATTRIBUTES.get(key) is AttrKind.COMPUTATIONS:
            attrs[key] = tuple(_lookup_comp(parser, ref, comps) for ref in value)
    if instr.opcode is Opcode.FUSION:
        called = attrs.get("calls")
        if not called:
            raise parser.error(f"fusion '{instr.name}' needs calls=<fused computation>",
                               p.opcode_offset)
        for c in called:
            c.fusion_instruction = instr


def _lookup_comp(parser: HloParser, ref: Any, comps: dict[str, Computation]) -> Computation:
    comp = comps.get(ref.name)
    if comp is None:
        raise parser.error(f"unknown computation '{ref.name}'", ref.offset)
    return comp


# ----- shapes -------------------------------------------------------------------------------


def _infer_missing_shapes(parser: HloParser, parsed: ParsedModule,
                          comps: dict[str, Computation]) -> None:
    missing = {id(p.instr): p for pc in parsed.computations for p in pc.instrs
               if not p.shape_given}
    if not missing:
        return
    # A depth-first walk: operands and called roots first (uses may precede definitions).
    state: dict[int, int] = {}  # 1: in progress, 2: done

    def deps(p: PendingInstr) -> list[PendingInstr]:
        out = [missing[id(op)] for op in p.instr.operands if id(op) in missing]
        out += [missing[id(c.root)] for c in p.instr.called_computations()
                if id(c.root) in missing]
        return out

    for start in missing.values():
        if id(start.instr) in state:
            continue
        state[id(start.instr)] = 1
        stack = [(start, iter(deps(start)))]
        while stack:
            cur, pending = stack[-1]
            for dep in pending:
                s = state.get(id(dep.instr))
                if s is None:
                    state[id(dep.instr)] = 1
                    stack.append((dep, iter(deps(dep))))
                    break
                if s == 1:
                    raise parser.error(f"the shape of '{dep.instr.name}' depends on itself",
                                       dep.offset)
            else:
                cur.instr.shape = _infer(parser, cur)
                state[id(cur.instr)] = 2
                stack.pop()


def _infer(parser: HloParser, p: PendingInstr) -> Shape:
    instr = p.instr
    shapes = [op.shape for op in instr.operands]
    called = instr.called_computations()
    from hlofuse.ir.shape_inference import infer_shape  # lazily: it imports much of ir

    try:
        shape = infer_shape(instr.opcode, shapes, instr.attrs, called)
    except HloVerifyError as exc:
        raise parser.error(f"cannot infer the shape of '{instr.name}' (write it): "
                           f"{exc.message}", p.opcode_offset) from None
    problem = shape_problem(shape)
    if problem is not None:
        raise parser.error(f"the inferred shape of '{instr.name}' is invalid: "
                           f"{problem.message}", p.opcode_offset, limit=problem.limit)
    return shape


def _check_operand_shapes(parser: HloParser, pc: PendingComp) -> None:
    for p in pc.instrs:
        for ref, op in zip(p.operands, p.instr.operands, strict=True):
            given = ref.shape
            if given is None:
                continue
            actual = op.shape
            if not given.compatible(actual) or not _layouts_agree(given, actual):
                raise parser.error(
                    f"operand '{ref.name}' of '{p.instr.name}' is written with shape "
                    f"{format_shape(given)} but '{op.name}' has shape {format_shape(actual)}",
                    ref.shape_offset)


def _layouts_agree(a: Shape, b: Shape) -> bool:
    if isinstance(a, TupleShape) and isinstance(b, TupleShape):
        return all(_layouts_agree(x, y) for x, y in zip(a.elements, b.elements, strict=True))
    if isinstance(a, ArrayShape) and isinstance(b, ArrayShape):
        return a.layout is None or b.layout is None or a.layout == b.layout
    return True
