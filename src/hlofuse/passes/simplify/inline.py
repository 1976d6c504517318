"""`call-inliner`: replace every `call` by the body of the computation it calls (XLA's
CallInliner), then delete computations nothing calls any more.

    caller:  x = call(a, b), to_apply=f          caller:  x' = add(a, b)
    f:       p0, p1 -> ROOT add(p0, p1)    ==>   (f deleted when no other caller remains)

JAX wraps every `jax.jit`-inside-jit, `closed_call`, PRNG helper and `custom_jvp` in a call, so
this pass runs first. Conditions:

* computations are processed callees first, so an inlined body never contains calls;
* the callee's parameters map to the call's operands; its root's clone takes the call's uses;
* instructions of the callee the root does not reach are inlined too (they may have side
  effects; DCE removes them otherwise);
* calls inside fusion computations are left alone;
* a callee is deleted only when no instruction anywhere still names it;
* before inlining anything, the size of every computation once inlined is computed (callees
  first); more than `ir.limits.MAX_INLINED_INSTRUCTIONS` is a `LimitError` naming the call
  (a call graph that is a DAG grows exponentially when inlined).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.errors import LimitError
from hlofuse.ir import limits
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.registry import register
from hlofuse.passes.utils import callers, clone_body_into, sweep


def inline_call(comp: Computation, call: Instruction, *, sort: bool = True) -> Instruction:
    """Inline one `call` instruction of `comp`; returns the clone of the callee's root.

    The clones are appended and the call is left without users; with `sort` the call is
    deleted and definition-before-use order restored at once, otherwise the caller batches that
    (see `CallInliner.run`)."""
    callee: Computation = call.attrs["to_apply"]
    mapping: dict[Instruction, Instruction] = {
        callee.parameter(i): op for i, op in enumerate(call.operands)
    }
    new_root = clone_body_into(comp, callee, mapping, before=None)
    call.replace_all_uses_with(new_root)
    for succ in list(call.users):  # control successors of the call wait for the body now
        if call in succ.control_predecessors:
            succ.control_predecessors = [new_root if p is call else p
                                         for p in succ.control_predecessors]
            if succ not in new_root.users:
                new_root.users.append(succ)
            call.users.remove(succ)
    if sort:
        sweep(comp, [call], force=True)
        comp.instructions = comp.post_order()
    return new_root


def check_inlined_size(post_order: list[Computation]) -> None:
    """Raise `LimitError` if inlining every call would make a computation larger than
    `limits.MAX_INLINED_INSTRUCTIONS` (`post_order`: callees before callers)."""
    size: dict[int, int] = {}
    for comp in post_order:
        n = len(comp.instructions)
        if not comp.is_fusion_computation:
            for instr in comp.instructions:
                if instr.opcode is not Opcode.CALL:
                    continue
                callee = instr.attrs.get("to_apply")
                n += size.get(id(callee), 0)
                if n > limits.MAX_INLINED_INSTRUCTIONS:
                    raise LimitError(
                        f"inlining call {instr.name} in computation {comp.name} would make "
                        f"{comp.name} more than {limits.MAX_INLINED_INSTRUCTIONS} instructions "
                        "(hlofuse.ir.limits.MAX_INLINED_INSTRUCTIONS): its calls form a DAG "
                        "that grows exponentially when inlined")
        size[id(comp)] = n


@register("call-inliner", "inline")
@dataclass(frozen=True)
class CallInliner:
    """Inline every `call`; delete the computations that become uncalled."""

    name: ClassVar[str] = "call-inliner"

    def run(self, module: Module) -> bool:
        order = module.computations_post_order()
        check_inlined_size(order)
        callees: list[Computation] = []
        for comp in order:
            if comp.is_fusion_computation:
                continue
            calls = [i for i in comp.instructions if i.opcode is Opcode.CALL]
            if not calls:
                continue
            base = len(comp.instructions)
            bodies: dict[int, list[Instruction]] = {}
            for call in calls:
                callees.append(call.attrs["to_apply"])
                start = len(comp.instructions)
                inline_call(comp, call, sort=False)
                bodies[id(call)] = comp.instructions[start:]
            # each inlined body goes where its call was (its operands are defined before it)
            placed: list[Instruction] = []
            for instr in comp.instructions[:base]:
                placed.extend(bodies.get(id(instr), ()))
                placed.append(instr)
            comp.instructions = placed
            sweep(comp, calls, force=True)
        if not callees:
            return False
        still_called = callers(module)
        for callee in dict.fromkeys(callees):
            if (id(callee) not in still_called and callee is not module.entry
                    and callee.parent is module):
                module.remove_computation(callee)
        return True
