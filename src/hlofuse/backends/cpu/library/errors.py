"""The error raised when a library op (dot, convolution, sort, rng-bit-generator, ...) cannot be
compiled to C: the message names the instruction and says what was expected."""

from __future__ import annotations

from hlofuse.errors import CompileError
from hlofuse.ir.instruction import Instruction


class LibraryOpError(CompileError):
    """A library op the CPU backend cannot compile (an unsupported form or attribute)."""

    def __init__(self, instr: Instruction, reason: str) -> None:
        where = instr.parent.name if instr.parent is not None else "?"
        super().__init__(
            f"cannot compile {instr.opcode.value} for the cpu backend "
            f"(instruction {instr.name} in {where}): {reason}"
        )
        self.instruction = instr.name
