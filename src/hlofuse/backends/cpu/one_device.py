"""The cpu backend's first step: a module's collectives, async wrappers, copy-start/done,
domain, get-dimension-size and batch norm become plain HLO with their one-device values
(`passes/single_device.py`, on a copy; the caller's module is not changed), and what the backend
cannot run at all is refused before any C is written.

Conditions enforced: every instruction the rewrite leaves that has a reason in
`single_device.leftover_reason` (a collective over several devices, dynamic sizes, fft,
ragged-dot, ...) raises `UnsupportedOpError` naming the instruction, its computation and why.
"""

from __future__ import annotations

from hlofuse.backends.cpu.cexpr import UnsupportedOpError
from hlofuse.ir.module import Module
from hlofuse.passes import single_device


def prepare(module: Module) -> Module:
    """`module`, or a rewritten copy of it, ready for the driver."""
    if single_device.needs_rewrite(module):
        module = module.clone()
        single_device.SingleDevice().run(module)
    for instr in module.all_instructions():
        why = single_device.leftover_reason(instr)
        if why is not None:
            comp = instr.parent.name if instr.parent is not None else "?"
            raise UnsupportedOpError(
                f"instruction {instr.name} in computation {comp}: the cpu backend cannot run "
                f"{instr.opcode.value}: {why}")
    return module
