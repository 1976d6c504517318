"""Async ops in text: XLA's `X-start` / `X-update` / `X-done` syntax sugar, and the links of
every async chain (async-start -> async-update* -> async-done), checked as XLA's parser does.

    s = ((f32[10]), f32[20], s32[]) custom-call-start(p), custom_call_target="foo"
    d = f32[20] custom-call-done(s)

becomes, before names are resolved (`build.py`), what XLA builds from it:

    wrapped_custom-call {
      param_0 = f32[10] parameter(0)
      ROOT custom-call = f32[20] custom-call(param_0), custom_call_target="foo"
    }
    s = ((f32[10]), f32[20], s32[]) async-start(p), calls=wrapped_custom-call
    d = f32[20] async-done(s), calls=wrapped_custom-call

The wrapped instruction takes the start's attributes and metadata (the start keeps its metadata,
`async_execution_thread` and the annotation attributes: backend_config, frontend_attributes,
statistics, sharding, origin). An async-update or async-done without `calls=` gets its chain's.

Conditions enforced, each an `HloParseError` at the instruction (XLA's messages): a sugared
start's shape is `((operands...), outputs, state...)` with one element per operand; the operand
of an update or done is an async-start or async-update; a sugared update/done wraps the opcode
its start wraps; an update/done that names `calls=` names its start's computation, and one that
names `async_execution_thread` names its start's (default `main`); a computation is called by
one async chain only; an explicit async-start names `calls=`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import TupleShape
from hlofuse.text.attrs import CompRef

if TYPE_CHECKING:
    from hlofuse.text.parser import HloParser, ParsedModule, PendingComp, PendingInstr

_KEEP_ON_START = ("async_execution_thread", "backend_config", "frontend_attributes",
                  "statistics", "sharding", "origin")
_CHAIN = (Opcode.ASYNC_START, Opcode.ASYNC_UPDATE)


def desugar(parser: HloParser, parsed: ParsedModule) -> None:
    """Rewrite the sugar and link every chain, in place (new wrapped computations are added to
    `parsed.computations`)."""
    from hlofuse.text.parser import PendingComp

    callers: dict[str, str] = {}  # wrapped computation -> the async-start calling it
    for pc in list(parsed.computations):
        for p in pc.instrs:
            if p.instr.opcode is not Opcode.ASYNC_START:
                continue
            if p.async_wrapped is not None:
                parsed.computations.append(_wrap(parser, p, PendingComp))
            calls = p.instr.attrs.get("calls")
            if not calls:
                raise parser.error(f"async-start '{p.instr.name}' needs calls=<computation>",
                                   p.opcode_offset)
            target = calls[0].name
            if target in callers:
                raise parser.error(f"Computation {target} is called by more than one async op "
                                   f"({callers[target]} and {p.instr.name})", p.opcode_offset)
            callers[target] = p.instr.name
    for pc in parsed.computations:
        for p in pc.instrs:
            if p.instr.opcode in (Opcode.ASYNC_UPDATE, Opcode.ASYNC_DONE):
                _link(parser, pc, p)


def _wrap(parser: HloParser, p: PendingInstr, comp_cls: type[PendingComp]) -> PendingComp:
    from hlofuse.text.parser import PendingInstr as Pending
    from hlofuse.text.parser import Ref

    instr = p.instr
    shape = instr.shape
    if not (isinstance(shape, TupleShape) and len(shape.elements) >= 2
            and isinstance(shape.elements[0], TupleShape)
            and len(shape.elements[0].elements) == len(p.operands)):
        raise parser.error(
            "AsyncStart expects the op shape to be in the form of ((async-operands), "
            f"async-outputs, state); {instr.name} has {len(p.operands)} operand(s)",
            p.opcode_offset)
    assert p.async_wrapped is not None
    wrapped_op = p.async_wrapped
    comp = comp_cls(parser._fresh_comp_name(f"wrapped_{wrapped_op.value}"), p.offset, False)
    parser._comp_names[comp.name] = comp
    params = []
    for i, s in enumerate(shape.elements[0].elements):
        param = Instruction(Opcode.PARAMETER, s, name=f"param_{i}", parameter_number=i)
        pending = Pending(param, p.offset, p.opcode_offset, [], [], True)
        comp.instrs.append(pending)
        comp.by_name[param.name] = pending
        params.append(Ref(param.name, p.offset))
    attrs = {k: v for k, v in instr.attrs.items() if k != "async_execution_thread"}
    root = Instruction(wrapped_op, shape.elements[1], name=wrapped_op.value, attrs=attrs,
                       metadata=instr.metadata)
    comp.root = Pending(root, p.offset, p.opcode_offset, params, [], True)
    comp.instrs.append(comp.root)
    comp.by_name[root.name] = comp.root
    instr.attrs = {k: v for k, v in instr.attrs.items() if k in _KEEP_ON_START}
    instr.attrs["calls"] = (CompRef(comp.name, p.offset),)
    return comp


def _link(parser: HloParser, pc: PendingComp, p: PendingInstr) -> None:
    """An update/done: check it against its operand and start, fill in `calls=`."""
    what = "AsyncUpdate and AsyncDone"
    operand = pc.by_name.get(p.operands[0].name or "") if len(p.operands) == 1 else None
    if operand is None and len(p.operands) == 1:
        return  # an undefined name: build.py reports it
    if operand is None or operand.instr.opcode not in _CHAIN:
        raise parser.error(f"{what} expect a single async op as their operand "
                           f"({p.instr.name})", p.opcode_offset)
    start, seen = operand, 0
    while start.instr.opcode is Opcode.ASYNC_UPDATE and seen <= len(pc.instrs):
        nxt = pc.by_name.get(start.operands[0].name or "") if start.operands else None
        if nxt is None or nxt.instr.opcode not in _CHAIN:
            raise parser.error(f"{what} expect a single async op as their operand "
                               f"({start.instr.name})", start.opcode_offset)
        start, seen = nxt, seen + 1
    if p.async_wrapped is not None and operand.async_wrapped != p.async_wrapped:
        expected = (operand.async_wrapped or Opcode.ASYNC_START).value
        raise parser.error(f"Expect async wrapped opcode to be {expected}, but got "
                           f"{p.async_wrapped.value}", p.opcode_offset)
    calls = start.instr.attrs.get("calls")
    given = p.instr.attrs.get("calls")
    if given and calls and given[0].name != calls[0].name:
        raise parser.error(f"Expect async_wrapped_computation to be {calls[0].name}, but got "
                           f"{given[0].name}", p.opcode_offset)
    thread = start.instr.attrs.get("async_execution_thread", "main")
    own = p.instr.attrs.get("async_execution_thread")
    if own is not None and own != thread:
        raise parser.error(f"Expect async_execution_thread to be {thread}, but got {own}",
                           p.opcode_offset)
    if p.async_wrapped is not None:  # the sugar's attributes belong to the wrapped op
        p.instr.attrs = {k: v for k, v in p.instr.attrs.items() if k in _KEEP_ON_START}
    if calls and not given:
        p.instr.attrs["calls"] = calls
