"""The HLO verifier: `verify(module)` checks that a module is well formed, like XLA's HloVerifier.

Raises `HloVerifyError` naming the instruction and computation at fault. Conditions enforced:

Module: an entry computation exists, belongs to the module and is not a fusion computation;
computation names are unique, as are instruction names across the whole module; every
computation's `parent` is the module; the call graph is acyclic (no computation calls itself,
directly or through others) and at most `limits.MAX_CALL_DEPTH` computations deep
(`VerifyLimitError`).

Computation structure: each computation has a root that belongs to it; every instruction's
`parent` is its computation and appears once; operands and control predecessors belong to the
same computation; use-def links agree (each operand lists the instruction among its users, users
lists have no duplicates, and every user reads the instruction or has it as a control
predecessor); parameters are numbered 0..n-1 without repeats; the graph has no cycles,
self-loops included (an instruction that is its own operand or control predecessor; otherwise a
post-order in which some operand comes after its user is reported as a cycle).

Instructions (also available alone as `verify_instruction`): declared shapes pass
`ir.shape.shape_problem` (non-negative dimensions, layouts that are permutations; and XLA's
limits, as a `VerifyLimitError`: dimensions and byte sizes within int64, rank and tuple nesting
within `ir.limits`); the declared shape agrees with
`infer_shape` (ignoring layout; tuples and multi-output fusions compared element by element),
which also checks operand counts, operand types, attributes and called-computation signatures
(see `shape_inference`; with `allow_mixed_precision`, the default as in XLA's test harness,
floating-point element types may differ in precision); called computations exist in this
module, are not the caller's own computation (the call graph has no cycles at all), and a
fused computation is called only by the fusion whose `fusion_instruction` back-link points at
it; constants carry a literal whose numpy shape and dtype match; parameters have a parameter
number.

The checks are linear in the module size: a 5000-instruction module verifies in a few tens of
milliseconds.
"""

from __future__ import annotations

from collections.abc import Set

import numpy as np

from hlofuse.errors import HloVerifyError, VerifyLimitError
from hlofuse.ir import limits
from hlofuse.ir._shape_util import fmt, same_ignoring_fp
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.literal import Literal
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, Shape, TupleShape, shape_problem, tuple_depth
from hlofuse.ir.shape_inference import infer_shape

__all__ = ["verify", "verify_computation", "verify_instruction"]


def verify(module: Module, *, allow_mixed_precision: bool = True) -> None:
    """Check every invariant listed in the module docstring; raise HloVerifyError on the first
    violation. `allow_mixed_precision` (XLA's HloTestBase default) lets a declared floating-point
    element type differ from the inferred one (e.g. `f32[4] copy(f16[4] x)`)."""
    try:
        entry = module.entry
    except ValueError:
        raise HloVerifyError(f"module {module.name} has no entry computation") from None
    comp_ids = {id(c) for c in module.computations}
    if id(entry) not in comp_ids:
        raise HloVerifyError(f"entry computation {entry.name} is not in module {module.name}",
                             computation=entry.name)
    if entry.is_fusion_computation:
        raise HloVerifyError("the entry computation cannot be a fusion computation",
                             computation=entry.name)
    comp_names: set[str] = set()
    instr_names: dict[str, Computation] = {}
    for comp in module.computations:
        if comp.name in comp_names:
            raise HloVerifyError(f"computation name {comp.name} is used twice",
                                 computation=comp.name)
        comp_names.add(comp.name)
        if comp.parent is not module:
            raise HloVerifyError(f"computation {comp.name} does not point back at module "
                                 f"{module.name}", computation=comp.name)
        verify_computation(comp, instr_names=instr_names, comp_ids=comp_ids,
                           allow_mixed_precision=allow_mixed_precision)
    _verify_no_recursion(module)


def _verify_no_recursion(module: Module) -> None:
    """The call graph must be acyclic (HLO has no recursion) and at most
    `limits.MAX_CALL_DEPTH` computations deep. An iterative DFS: a callee still on the stack
    closes a cycle; a finished computation's depth is one more than its deepest callee's."""
    callees: dict[int, list[tuple[Instruction, Computation]]] = {}
    for comp in module.computations:
        edges = callees[id(comp)] = []
        for instr in comp.instructions:
            if instr.attrs:
                edges.extend((instr, c) for c in instr.called_computations())
    state: dict[int, int] = {}  # 1 = on the DFS stack, 2 = done
    depth: dict[int, int] = {}  # of a done computation: 1 + its deepest callee's depth
    for start in module.computations:
        if id(start) in state:
            continue
        state[id(start)] = 1
        stack = [(start, iter(callees[id(start)]))]
        while stack:
            comp, pending = stack[-1]
            for instr, callee in pending:
                s = state.get(id(callee))
                if s == 1:
                    raise _err(f"calls {callee.name}, which (indirectly) calls {comp.name}: "
                               f"recursion is not allowed", instr, comp)
                if s is None:
                    state[id(callee)] = 1
                    stack.append((callee, iter(callees.get(id(callee), ()))))
                    break
            else:
                state[id(comp)] = 2
                deepest = 0
                for instr, callee in callees.get(id(comp), ()):
                    if depth[id(callee)] >= limits.MAX_CALL_DEPTH:
                        raise VerifyLimitError(
                            f"calls {callee.name}, which nests {depth[id(callee)]} "
                            f"computations deep; the limit is {limits.MAX_CALL_DEPTH} "
                            "(hlofuse.ir.limits.MAX_CALL_DEPTH)",
                            instruction=instr.name, computation=comp.name)
                    deepest = max(deepest, depth[id(callee)])
                depth[id(comp)] = deepest + 1
                stack.pop()


def verify_computation(comp: Computation, *, instr_names: dict[str, Computation] | None = None,
                       comp_ids: Set[int] | None = None,
                       allow_mixed_precision: bool = True) -> None:
    """Structure of one computation (see the module docstring), then each instruction.

    `instr_names` collects names across computations (for module-wide uniqueness); `comp_ids`
    holds the ids of the module's computations (for "called computation exists" checks).
    """
    _verify_structure(comp, {} if instr_names is None else instr_names)
    if comp_ids is None and comp.parent is not None:
        comp_ids = {id(c) for c in comp.parent.computations}
    for instr in comp.instructions:
        _verify_instruction(instr, comp, comp_ids, allow_mixed_precision)


def verify_instruction(instr: Instruction, *, allow_mixed_precision: bool = True) -> None:
    """Check one instruction: its shape against shape inference, its attributes, its called
    computations, its literal or parameter number. Structure is `verify`'s business."""
    comp = instr.parent
    if comp is None:
        raise HloVerifyError("instruction is not in a computation", instruction=instr.name)
    comp_ids = None if comp.parent is None else {id(c) for c in comp.parent.computations}
    _verify_instruction(instr, comp, comp_ids, allow_mixed_precision)


# ----- structure --------------------------------------------------------------------------


def _err(message: str, instr: Instruction, comp: Computation) -> HloVerifyError:
    return HloVerifyError(message, instruction=instr.name, computation=comp.name)


def _verify_structure(comp: Computation, instr_names: dict[str, Computation]) -> None:
    instrs = comp.instructions
    position = dict(zip(instrs, range(len(instrs))))
    if len(position) != len(instrs):
        raise HloVerifyError("an instruction appears twice in the instruction list",
                             computation=comp.name)
    if not comp.has_root:
        raise HloVerifyError("computation has no root", computation=comp.name)
    root = comp.root
    if root not in position:
        raise _err(f"the root {root.name} does not belong to computation {comp.name}", root, comp)
    # Users not yet accounted for by an operand or control edge; must end up empty.
    # (instructions hash by identity, in C: sets of them cost no Python loop)
    pending: dict[Instruction, set[Instruction]] = {}
    for instr in instrs:
        users = instr.users
        listed = set(users)
        if len(listed) != len(users):
            raise _err("users list has duplicates", instr, comp)
        pending[instr] = listed
    param_numbers: dict[int, Instruction] = {}
    in_order = True  # is the instruction list itself a defs-before-uses order?
    for k, instr in enumerate(instrs):
        name = instr.name
        if instr.parent is not comp:
            where = "no computation" if instr.parent is None else instr.parent.name
            raise _err(f"instruction's parent is {where}, but it is listed in {comp.name}",
                       instr, comp)
        if name in instr_names:
            raise _err(f"instruction name {name} is used twice (also in computation "
                       f"{instr_names[name].name})", instr, comp)
        instr_names[name] = comp
        operands = instr._operands
        for op in operands:
            op_pos = position.get(op)
            if op_pos is None:
                where = "no computation" if op.parent is None else f"computation {op.parent.name}"
                raise _err(f"operand {op.name} is in {where}, not in {comp.name}", instr, comp)
            if op_pos >= k:
                in_order = False
            if instr not in pending[op] and instr not in op.users:
                raise _err(f"operand {op.name} does not list {name} among its users", instr, comp)
        for op in operands:
            pending[op].discard(instr)
        for pred in instr.control_predecessors:
            pred_pos = position.get(pred)
            if pred_pos is None:
                raise _err(f"control predecessor {pred.name} is not in computation {comp.name}",
                           instr, comp)
            if pred_pos >= k:
                in_order = False
            pending[pred].discard(instr)
        if instr.opcode is Opcode.PARAMETER:
            number = instr.parameter_number
            if number is None or number < 0:
                raise _err(f"parameter has no valid parameter number ({number})", instr, comp)
            if number in param_numbers:
                raise _err(f"parameter number {number} is used twice (also by "
                           f"{param_numbers[number].name})", instr, comp)
            param_numbers[number] = instr
    for instr in instrs:
        if pending[instr]:
            stale = pending[instr]
            bogus = next(u for u in instr.users if u in stale)
            if bogus not in position:
                elsewhere = bogus.parent
                if (elsewhere is not None and elsewhere.parent is not None
                        and elsewhere.parent is comp.parent and instr in bogus._operands):
                    continue  # reported from the user's side: "operand ... is in computation"
                raise _err(f"user {bogus.name} is not in computation {comp.name}", instr, comp)
            raise _err(f"{bogus.name} is listed as a user but does not use {instr.name}",
                       instr, comp)
    for number in range(len(param_numbers)):
        if number not in param_numbers:
            raise HloVerifyError(f"parameter numbers must be 0..{len(param_numbers) - 1}, but "
                                 f"{number} is missing", computation=comp.name)
    if not in_order:
        _verify_acyclic(comp)


def _verify_acyclic(comp: Computation) -> None:
    """Cycle check for computations whose instruction list is not already a topological order:
    in a DFS post-order, an operand placed after its user closes a cycle."""
    order = comp.post_order()
    position = {id(instr): i for i, instr in enumerate(order)}
    for i, instr in enumerate(order):
        for op in instr._operands:
            if op is instr:
                raise _err("instruction is its own operand", instr, comp)
            if position[id(op)] > i:
                raise _err(f"instruction is part of a cycle through operand {op.name}", instr,
                           comp)
        for pred in instr.control_predecessors:
            if pred is instr:
                raise _err("instruction is its own control predecessor", instr, comp)
            if position[id(pred)] > i:
                raise _err(f"instruction is part of a cycle through control predecessor "
                           f"{pred.name}", instr, comp)


# ----- instructions -----------------------------------------------------------------------


def _verify_instruction(instr: Instruction, comp: Computation, comp_ids: Set[int] | None,
                        allow_mixed_precision: bool) -> None:
    opcode = instr.opcode
    declared = instr.shape
    problem = shape_problem(declared)
    if problem is not None:
        what = "invalid" if problem.limit else "malformed"
        cls = VerifyLimitError if problem.limit else HloVerifyError
        raise cls(f"{what} shape {_short(declared)}: {problem.message}",
                  instruction=instr.name, computation=comp.name)
    called = instr.called_computations() if instr.attrs else []
    for callee in called:
        if not isinstance(callee, Computation):
            raise _err(f"calls unknown computation {callee!r}", instr, comp)
        if comp_ids is not None and id(callee) not in comp_ids:
            raise _err(f"calls computation {callee.name}, which is not in the module", instr,
                       comp)
        if callee is comp:
            raise _err(f"calls its own computation {comp.name}", instr, comp)
        owner = callee.fusion_instruction
        if owner is not None and owner is not instr:
            raise _err(f"calls fused computation {callee.name}, which belongs to fusion "
                       f"{owner.name}", instr, comp)
    if opcode is Opcode.FUSION:
        calls = instr.attrs.get("calls")
        if not calls or len(calls) != 1:
            raise _err("fusion must call exactly one fused computation", instr, comp)
        if calls[0].fusion_instruction is not instr:
            raise _err(f"fused computation {calls[0].name} does not point back at this fusion "
                       f"(fusion_instruction is not set)", instr, comp)
    elif opcode is Opcode.CONSTANT:
        if instr.literal is None:
            raise _err("constant has no literal", instr, comp)
        mismatch = _literal_problem(instr.literal, declared)
        if mismatch:
            raise _err(f"constant literal does not match its shape {fmt(declared)}: {mismatch}",
                       instr, comp)
    elif opcode is Opcode.PARAMETER and instr.parameter_number is None:
        raise _err("parameter has no parameter number", instr, comp)
    try:
        inferred = infer_shape(opcode, [o.shape for o in instr._operands], instr.attrs, called,
                               declared)
    except HloVerifyError as e:
        raise _err(e.message, instr, comp) from None
    if not inferred.compatible(declared) and not (
            allow_mixed_precision and same_ignoring_fp(inferred, declared)):
        raise _err(f"declared shape {fmt(declared)} does not match the inferred shape "
                   f"{fmt(inferred)} of {opcode}", instr, comp)


def _short(shape: Shape) -> str:
    """A shape's text for a message, cut short (a hostile shape can be huge)."""
    text = fmt(shape) if tuple_depth(shape) < 8 else "(...)"
    return text if len(text) <= 80 else text[:80] + "..."


def _literal_problem(value: Literal, shape: Shape) -> str:
    if isinstance(shape, TupleShape):
        if not isinstance(value, tuple) or len(value) != len(shape.elements):
            return f"expected a tuple of {len(shape.elements)} literals"
        for v, s in zip(value, shape.elements, strict=True):
            problem = _literal_problem(v, s)
            if problem:
                return problem
        return ""
    if not isinstance(shape, ArrayShape):
        return "constants must be arrays or tuples"
    if not isinstance(value, np.ndarray):
        return f"expected a numpy array, found {type(value).__name__}"
    if value.shape != shape.dims:
        return f"literal has numpy shape {value.shape}"
    if value.dtype != shape.dtype.np:
        return f"literal has numpy dtype {value.dtype}"
    return ""
