"""Fusion mechanics on the IR (XLA's HloInstruction::Fuse*, HloFusionInstruction).

A fusion instruction calls a *fused computation*; its operands bind 1:1, in order, to the fused
computation's parameters (numbered 0..n-1, contiguous, no operand listed twice)::

    before                         after fuse_instruction(fusion, p)
    x   y                          x   y
    │   │                          │   │
    p = add(x, y)                  fusion(x, y) ─calls─▶ fused_computation {
    │                                                      param_0, param_1
    c = exp(p)                                            add = add(param_0, param_1)
                                                          ROOT exp = exp(add) }

* `create_fusion(instr, kind)` wraps one instruction into a new fusion that replaces it.
* `fuse_instruction(fusion, producer)` clones `producer` (or, for a fusion producer, its whole
  fused computation) into `fusion`, replacing the parameter bound to it; the producer's operands
  become fusion operands (de-duplicated). A producer with other users stays (duplication); one
  left without users is removed.
* `fuse_into_multi_output(fusion, producer)` moves the producer in and exports its value through
  the root tuple; users outside read it through new get-tuple-element instructions.
* `merge_fusions_multi_output(a, b)` merges sibling `b` into `a` (all outputs of both kept).

Invariants kept: parameter numbering contiguous, fusion operands unique, `fusion_instruction`
back-links set, instruction lists in a defs-before-uses order.
"""

from __future__ import annotations

from collections.abc import Callable

from hlofuse.ir.clone import clone_instruction
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction, _drop_user
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import FUSION_KINDS, FusionKind, Opcode
from hlofuse.ir.shape import Shape, TupleShape

# After a multi-output merge into a fusion: put the caller's instruction list back in post order.
Reorder = Callable[[Computation, Instruction], None]


# ----- small queries -----------------------------------------------------------------------


def is_fusion(instr: Instruction) -> bool:
    return instr.opcode is Opcode.FUSION


def fused_root(fusion: Instruction) -> Instruction:
    return fusion.fused_computation.root


def is_multi_output_fusion(instr: Instruction) -> bool:
    return is_fusion(instr) and fused_root(instr).opcode is Opcode.TUPLE


def fused_parameter_for(fusion: Instruction, operand: Instruction) -> Instruction | None:
    """The fused parameter bound to `operand` (None if `operand` is not a fusion operand)."""
    operands = fusion._operands  # the list itself, not a copy
    if operand not in operands:  # (list search in C; instructions compare by identity)
        return None
    return fusion.fused_computation.parameter(operands.index(operand))


def fused_instructions(fusion: Instruction) -> list[Instruction]:
    """The non-parameter instructions of a fusion, in post order."""
    return [i for i in fusion.fused_computation.post_order() if i.opcode is not Opcode.PARAMETER]


def set_kind(fusion: Instruction, kind: str) -> None:
    if kind not in FUSION_KINDS:
        raise ValueError(f"unknown fusion kind {kind!r}")
    fusion.attrs["kind"] = kind
    fusion.fused_computation.touch()  # (facts kept about the fusion are keyed on its version)


# ----- creating a fusion -------------------------------------------------------------------


def create_fusion(instr: Instruction, kind: str = FusionKind.LOOP,
                  name: str = "fusion") -> Instruction:
    """Wrap `instr` into a new fusion instruction that replaces it in its computation."""
    comp = instr.parent
    assert comp is not None, f"{instr.name} is not in a computation"
    module = comp.parent
    assert module is not None, f"computation {comp.name} is not in a module"
    if kind not in FUSION_KINDS:
        raise ValueError(f"unknown fusion kind {kind!r}")

    fused = Computation("fused_computation")
    operands = list(dict.fromkeys(instr.operands))
    params: dict[int, Instruction] = {}
    for i, op in enumerate(operands):
        p = Instruction.create(Opcode.PARAMETER, op.shape, name=f"param_{i}",
                               parameter_number=i)
        p.parent = fused
        fused.instructions.append(p)
        params[id(op)] = p
    clone = clone_instruction(instr, [params[id(o)] for o in instr.operands])
    clone.parent = fused
    fused.instructions.append(clone)
    fused.root = clone

    fusion = Instruction.create(Opcode.FUSION, instr.shape, operands, name=name,
                                attrs={"kind": kind, "calls": (fused,)}, metadata=instr.metadata)
    fusion.control_predecessors = list(instr.control_predecessors)
    comp.replace_instruction(instr, fusion)  # the fusion takes the instruction's slot
    # The original is gone, so the clone can take its name back.
    module.add_computation(fused)
    fused.fusion_instruction = fusion
    _place_computation(module, fused, comp)
    return fusion


def _place_computation(module: Module, fused: Computation, caller: Computation) -> None:
    """Keep fused computations before their caller in the module's list (printing order).
    `fused` was just appended; the caller (the entry, mostly) is looked for from the end."""
    comps = module.computations
    if comps[-1] is fused:
        comps.pop()
    else:
        comps.remove(fused)
    for at in range(len(comps) - 1, max(len(comps) - 5, -1), -1):
        if comps[at] is caller:
            break
    else:
        at = comps.index(caller)
    comps.insert(at, fused)


# ----- parameters --------------------------------------------------------------------------


def _param_for(fusion: Instruction, operand: Instruction) -> Instruction:
    """The parameter bound to `operand`, adding `operand` as a new fusion operand if needed."""
    existing = fused_parameter_for(fusion, operand)
    if existing is not None:
        return existing
    fused = fusion.fused_computation
    n = fusion.operand_count
    p = Instruction.create(Opcode.PARAMETER, operand.shape, name=f"param_{n}",
                           parameter_number=n)
    fused.add(p)
    fusion.append_operand(operand)
    return p


def fusion_parameters(fusion: Instruction, start: int = 0) -> list[Instruction]:
    """The fused computation's parameters in number order (one per fusion operand), from
    parameter `start` on."""
    return fusion.fused_computation.parameters_numbered(start, fusion.operand_count)


def _remove_parameter(fusion: Instruction, param: Instruction) -> list[Instruction]:
    """Drop an unused parameter and its operand; renumber the later parameters (returned, in
    their new number order)."""
    assert not param.users, f"parameter {param.name} still used"
    fused = fusion.fused_computation
    number = param.parameter_number
    assert number is not None
    later = fusion_parameters(fusion, number + 1)
    _drop_operand(fusion, number)
    fused.remove(param)
    for p in later:
        assert p.parameter_number is not None
        p.parameter_number -= 1
    fused.parameters_renumbered(number)
    return later


def _drop_operand(fusion: Instruction, number: int) -> None:
    """`fusion.set_operands(operands without operand `number`)`: the dropped operand loses
    `fusion` as a user (unless still an operand), and `fusion` ends up last among the users of
    every remaining operand, which it mostly is already (no list is rebuilt then)."""
    operands = fusion._operands
    dropped = operands.pop(number)
    if fusion.parent is not None:
        fusion.parent.touch()
    if dropped not in operands:
        _drop_user(dropped.users, fusion)
    for op in dict.fromkeys(operands):
        users = op.users
        if not users or users[-1] is not fusion:
            _drop_user(users, fusion)
            users.append(fusion)


def _rename_parameters(fusion: Instruction, start: int = 0,
                       params: list[Instruction] | None = None) -> None:
    """Keep parameter names in step with their numbers (`param_2` is parameter(2)), from
    parameter `start` on (the ones before it are known to be in step); `params`: those
    parameters, when the caller has them already."""
    fused = fusion.fused_computation
    module = fused.parent
    if module is None:
        return
    for p in fusion_parameters(fusion, start) if params is None else params:
        base = f"param_{p.parameter_number}"
        if p.name == base or p.name.startswith(base + "."):
            continue
        module.release_name(p.name)
        p.name = module.unique_name(base)


def remove_unused_parameters(fusion: Instruction) -> None:
    for p in list(reversed(fusion_parameters(fusion))):
        if not p.users and p is not fusion.fused_computation.root:
            _remove_parameter(fusion, p)


# ----- cloning bodies into a fusion --------------------------------------------------------


def _clone_body(fusion: Instruction, producer: Instruction,
                bound: dict[int, Instruction] | None = None) -> Instruction:
    """Clone `producer` (or its fused computation) into `fusion`. Returns the in-fusion value
    that stands for the producer's result. `bound` maps ids of external instructions to
    in-fusion values that should be used instead of a parameter."""
    fused = fusion.fused_computation
    bound = bound or {}

    def value_of(external: Instruction) -> Instruction:
        if id(external) in bound:
            return bound[id(external)]
        return _param_for(fusion, external)

    if not is_fusion(producer):
        ops = [value_of(o) for o in producer.operands]
        clone = clone_instruction(producer, ops)
        fused.add(clone)
        return clone

    mapping: dict[int, Instruction] = {}
    src = producer.fused_computation
    for instr in src.post_order():
        if instr.opcode is Opcode.PARAMETER:
            assert instr.parameter_number is not None
            mapping[id(instr)] = value_of(producer.operand(instr.parameter_number))
            continue
        clone = clone_instruction(instr, [mapping[id(o)] for o in instr.operands])
        fused.add(clone)
        mapping[id(instr)] = clone
    return mapping[id(src.root)]


def _fold_tuple_gtes(comp: Computation) -> None:
    """Replace get-tuple-element(tuple(...), i) by the tuple's operand i (inside fusions)."""
    changed = True
    while changed:
        changed = False
        for instr in list(comp.instructions):
            if instr.parent is not comp or instr.opcode is not Opcode.GET_TUPLE_ELEMENT:
                continue
            src = instr.operand(0)
            if src.opcode is Opcode.TUPLE:
                instr.replace_all_uses_with(src.operand(int(instr.attrs["index"])))
                if not instr.users and instr is not comp.root:
                    comp.remove_dead(instr)
                changed = True


def _tidy(fusion: Instruction) -> None:
    fused = fusion.fused_computation
    _fold_tuple_gtes(fused)
    for instr in list(fused.instructions):
        if (instr.parent is fused and not instr.users and instr is not fused.root
                and instr.opcode is not Opcode.PARAMETER):
            fused.remove_dead(instr)
    remove_unused_parameters(fusion)
    _rename_parameters(fusion)
    fused.instructions = fused.post_order()


def _remove_if_dead(producer: Instruction) -> None:
    comp = producer.parent
    if comp is None or producer.users or producer is comp.root:
        return
    callee = producer.fused_computation if is_fusion(producer) else None
    comp.remove(producer)
    if callee is not None and comp.parent is not None and callee in comp.parent.computations:
        comp.parent.remove_computation(callee)


# ----- producer -> consumer fusion ---------------------------------------------------------


def fuse_instruction(fusion: Instruction, producer: Instruction, *,
                     assume_tidy: bool = False) -> Instruction:
    """Clone `producer` into `fusion`, replacing the parameter bound to it. Returns the clone
    (the in-fusion value of the producer). The producer is removed if nothing else uses it.

    `assume_tidy`: the caller knows the fused computation is as `fuse_instruction` leaves it
    (tidied by an earlier call in the same pass run: no dead code, parameter names in step,
    instructions in post order). Then fusing a plain producer only tidies what it touched
    (`_tidy_after_clone`), in time independent of the fusion's size, with the same result."""
    assert is_fusion(fusion)
    param = fused_parameter_for(fusion, producer)
    assert param is not None, f"{producer.name} is not an operand of {fusion.name}"
    fused = fusion.fused_computation
    incremental = (assume_tidy and not is_fusion(producer) and producer.opcode is not Opcode.TUPLE
                   and bool(param.users) and fused.root is not param)
    users = list(param.users)
    start = len(fused.instructions)
    number = param.parameter_number
    value = _clone_body(fusion, producer)
    added = fused.instructions[start:]
    param.replace_all_uses_with(value)
    later = _remove_parameter(fusion, param)
    if incremental:
        assert number is not None
        _tidy_after_clone(fusion, number, added, users, later)
    else:
        _tidy(fusion)
    _remove_if_dead(producer)
    return value


def _tidy_after_clone(fusion: Instruction, number: int, added: list[Instruction],
                      users: list[Instruction], later: list[Instruction]) -> None:
    """`_tidy` for a tidy fusion into which one plain producer was just cloned in place of
    parameter `number`: `added` are the new parameters and the clone (appended, in that order),
    `users` the replaced parameter's users.

    Nothing becomes dead and no get-tuple-element of a tuple appears, so only the parameters
    from `number` on need renaming, and the post order of the new list is the old one with the
    clone, preceded by those of its operands not yet listed before its first user, moved in
    front of that first user (a DFS reaches them there first; everything else is already in
    defs-before-uses order). `later`: the parameters from `number` on (renumbered)."""
    _rename_parameters(fusion, number, later)
    fused = fusion.fused_computation
    instrs = fused.instructions
    value = added[-1]
    at = min(fused.position(u) for u in users)
    block: list[Instruction] = []
    behind: list[Instruction] = []  # operands listed after the first user
    seen: set[int] = set()
    new = {id(a) for a in added}
    for o in value.operands:
        if id(o) in seen:
            continue
        seen.add(id(o))
        if id(o) in new:
            block.append(o)
        elif fused.position(o) > at:
            block.append(o)
            behind.append(o)
    block.append(value)
    assert len(block) == len(added) + len(behind), "every new instruction is an operand"
    del instrs[len(instrs) - len(added):]
    for o in behind:  # all after `at`: deleting them does not move it
        del instrs[fused.position(o)]
        fused.moved(1)
    instrs[at:at] = block
    fused.moved(len(block), at, block)


# ----- multi-output fusion -----------------------------------------------------------------


def _output_count(fusion: Instruction) -> int:
    shape = fusion.shape
    return len(shape.elements) if isinstance(shape, TupleShape) else 1


def make_multi_output(fusion: Instruction) -> None:
    """Make the fused root a `tuple` (XLA's multi-output form). A non-tuple root r becomes
    tuple(r) and outside users read get-tuple-element(fusion, 0); a tuple-shaped non-tuple root
    (variadic reduce) becomes tuple(gte(r, 0), ...) with the fusion's shape unchanged."""
    fused = fusion.fused_computation
    root = fused.root
    if root.opcode is Opcode.TUPLE:
        return
    if isinstance(root.shape, TupleShape):
        gtes = []
        for i, s in enumerate(root.shape.elements):
            g = Instruction.create(Opcode.GET_TUPLE_ELEMENT, s, [root], name="get-tuple-element",
                                   attrs={"index": i})
            fused.add(g)
            gtes.append(g)
        tup = Instruction.create(Opcode.TUPLE, root.shape, gtes, name="tuple")
        fused.add(tup)
        fused.root = tup
        return
    tup = Instruction.create(Opcode.TUPLE, TupleShape((root.shape,)), [root], name="tuple")
    fused.add(tup)
    fused.root = tup
    old_users = list(fusion.users)
    was_root = fusion.is_root
    fusion.shape = tup.shape
    if fusion.parent is not None:
        fusion.parent.touch()
    comp = fusion.parent
    assert comp is not None
    gte = _new_gte(fusion, 0, root.shape)
    for u in old_users:
        u.replace_operand(fusion, gte)
    if was_root:
        comp.root = gte


def _new_gte(fusion: Instruction, index: int, shape: Shape) -> Instruction:
    comp = fusion.parent
    assert comp is not None
    gte = Instruction.create(Opcode.GET_TUPLE_ELEMENT, shape, [fusion], name="get-tuple-element",
                             attrs={"index": index})
    comp.add(gte, after=fusion)
    return gte


def _add_output(fusion: Instruction, value: Instruction) -> int:
    """Append `value` to the root tuple; returns its output index."""
    fused = fusion.fused_computation
    root = fused.root
    assert root.opcode is Opcode.TUPLE
    root.append_operand(value)
    assert isinstance(root.shape, TupleShape)
    root.shape = TupleShape((*root.shape.elements, value.shape))
    fusion.shape = root.shape
    if fusion.parent is not None:
        fusion.parent.touch()
    return root.operand_count - 1


def _export(fusion: Instruction, producer: Instruction, value: Instruction) -> None:
    """Route every outside use of `producer` to new outputs of `fusion` carrying `value`."""
    outside = [u for u in producer.users if u is not fusion]
    was_root = producer.is_root
    if not outside and not was_root:
        return
    if isinstance(producer.shape, TupleShape):
        # A (multi-output) tuple-shaped producer: export each element; GTE users are redirected.
        fused = fusion.fused_computation
        indices: list[int] = []
        for i, s in enumerate(producer.shape.elements):
            if value.opcode is Opcode.TUPLE:
                elem = value.operand(i)
            else:
                elem = Instruction.create(Opcode.GET_TUPLE_ELEMENT, s, [value],
                                          name="get-tuple-element", attrs={"index": i})
                fused.add(elem)
            indices.append(_add_output(fusion, elem))
        gtes = [_new_gte(fusion, k, s) for k, s in zip(indices, producer.shape.elements)]
        comp = fusion.parent
        assert comp is not None
        for u in outside:
            if u.opcode is Opcode.GET_TUPLE_ELEMENT:
                u.replace_all_uses_with(gtes[int(u.attrs["index"])])
                comp.remove(u)
            else:
                tup = Instruction.create(Opcode.TUPLE, producer.shape, gtes, name="tuple")
                comp.add(tup)  # callers restore a defs-before-uses order
                u.replace_operand(producer, tup)
        if was_root:
            tup = Instruction.create(Opcode.TUPLE, producer.shape, gtes, name="tuple")
            comp.add(tup)
            comp.root = tup
        return
    k = _add_output(fusion, value)
    gte = _new_gte(fusion, k, value.shape)
    for u in outside:
        u.replace_operand(producer, gte)
    if was_root:
        comp = producer.parent
        assert comp is not None
        comp.root = gte


def _post_order(comp: Computation, fusion: Instruction) -> None:
    comp.instructions = comp.post_order()


def fuse_into_multi_output(fusion: Instruction, producer: Instruction, *,
                           reorder: Reorder = _post_order) -> Instruction:
    """Move `producer` into `fusion` and export its value as extra output(s): no duplication.
    Outside users of the producer read it through get-tuple-element instructions of `fusion`.
    `producer` need not be an operand of `fusion`. `reorder(comp, fusion)` puts the caller's
    instruction list back in post order afterwards (a pass may keep it incrementally)."""
    assert is_fusion(fusion)
    comp = fusion.parent
    assert comp is not None
    make_multi_output(fusion)
    value = _clone_body(fusion, producer)
    param = fused_parameter_for(fusion, producer)
    if param is not None:
        param.replace_all_uses_with(value)
        _remove_parameter(fusion, param)
    # A tuple-shaped producer may be read through get-tuple-elements: bind those reads too.
    for gte in [o for o in fusion.operands if o.opcode is Opcode.GET_TUPLE_ELEMENT
                and o.operand(0) is producer]:
        p = fused_parameter_for(fusion, gte)
        assert p is not None
        k = int(gte.attrs["index"])
        if value.opcode is Opcode.TUPLE:
            elem = value.operand(k)
        else:
            elem = Instruction.create(Opcode.GET_TUPLE_ELEMENT, gte.shape, [value],
                                      name="get-tuple-element", attrs={"index": k})
            fusion.fused_computation.add(elem)
        p.replace_all_uses_with(elem)
        _remove_parameter(fusion, p)
    _export(fusion, producer, value)
    _tidy(fusion)
    if producer.users:
        raise AssertionError(f"{producer.name} still has users after multi-output fusion")
    _remove_if_dead(producer)
    reorder(comp, fusion)
    return value


def merge_fusions_multi_output(fusion_a: Instruction, fusion_b: Instruction, *,
                               reorder: Reorder = _post_order) -> Instruction:
    """Merge fusion (or plain instruction) `fusion_b` into `fusion_a`, keeping all outputs of
    both (sibling multi-output fusion). If `b` reads `a`, `b`'s reads are wired to `a`'s values
    inside the fusion; if `a` reads `b`, this is a producer-consumer multi-output fusion."""
    assert is_fusion(fusion_a)
    if any(o is fusion_b for o in fusion_a.operands) or not any(
            o is fusion_a for o in fusion_b.operands):
        return fuse_into_multi_output(fusion_a, fusion_b, reorder=reorder)
    # b consumes a: bind b's reads of a to a's in-fusion outputs.
    comp = fusion_a.parent
    assert comp is not None
    make_multi_output(fusion_a)
    root = fusion_a.fused_computation.root
    # After make_multi_output, b reads a through get-tuple-elements, which map to the root
    # tuple's operands; a read of the whole tuple maps to the root tuple itself.
    bound: dict[int, Instruction] = {}
    for o in fusion_b.operands:
        if o is fusion_a:
            bound[id(o)] = root
        elif o.opcode is Opcode.GET_TUPLE_ELEMENT and o.operand(0) is fusion_a:
            bound[id(o)] = root.operand(int(o.attrs["index"]))
    read_gtes = [o for o in fusion_b.operands if o.opcode is Opcode.GET_TUPLE_ELEMENT
                 and o.operand(0) is fusion_a]
    value = _clone_body(fusion_a, fusion_b, bound)
    _export(fusion_a, fusion_b, value)
    _tidy(fusion_a)
    _remove_if_dead(fusion_b)
    for g in read_gtes:
        _remove_if_dead(g)
    reorder(comp, fusion_a)
    return value
