"""The error raised when a library op (dot, convolution, sort, rng-bit-generator, ...) cannot be
compiled to C: the message names the instruction and its computation (the `LibOp`'s `label` and
`where`, input text kept for messages) and says what was expected."""

from __future__ import annotations

from hlofuse.backends.kernel_ir.libop import LibOp
from hlofuse.errors import CompileError


class LibraryOpError(CompileError):
    """A library op the CPU backend cannot compile (an unsupported form or attribute)."""

    def __init__(self, op: LibOp, reason: str) -> None:
        super().__init__(
            f"cannot compile {op.opcode.value} for the cpu backend "
            f"(instruction {op.label} in {op.where}): {reason}"
        )
        self.instruction = op.label
