"""The exceptions hlofuse raises for bad input. The CLI prints their message, never a traceback."""

from __future__ import annotations


class HloError(Exception):
    """Base class of every hlofuse error a user can cause."""


class HloParseError(HloError):
    """Malformed HLO text. Carries the 1-based line and column, what was expected, and the
    offending snippet."""

    def __init__(self, message: str, line: int, column: int, snippet: str = "",
                 source_name: str = "<text>") -> None:
        self.message = message
        self.line = line
        self.column = column
        self.snippet = snippet
        self.source_name = source_name
        text = f"{source_name}:{line}:{column}: {message}"
        if snippet:
            text += f"\n  {snippet}\n  {' ' * max(0, column - 1)}^"
        super().__init__(text)


class HloVerifyError(HloError):
    """A semantically invalid module: a shape mismatch, an unknown computation, a bad attribute.
    Names the instruction (and computation) at fault."""

    def __init__(self, message: str, instruction: str | None = None,
                 computation: str | None = None) -> None:
        self.message = message
        self.instruction = instruction
        self.computation = computation
        where = ""
        if instruction is not None:
            where = f"instruction {instruction}"
            if computation is not None:
                where += f" in computation {computation}"
            where += ": "
        elif computation is not None:
            where = f"computation {computation}: "
        super().__init__(where + message)


class InterpreterError(HloError):
    """The interpreter cannot run an op (unsupported opcode or attribute); names it."""


class InputError(HloError):
    """Arguments that do not match the entry computation's parameters."""


class PassError(HloError):
    """An unknown pass or pass option, or a pass that failed."""


class CompileError(HloError):
    """The native backend could not build or load a module (or no C compiler was found)."""


class ResourceLimitError(HloError):
    """A module beyond one of hlofuse's documented limits (bytes of one array or of the work
    arena, control-flow nesting, expression depth, integers that fit no C type): names the
    instruction, the value and the limit (docs/security.md)."""


class AllocationError(HloError):
    """Memory for a run could not be allocated: names the instruction (or buffer) and the bytes."""


class CacheDirError(HloError):
    """The compile cache directory is not safe to trust (owned by another user, or group- or
    world-writable): the message names the directory and `HLOFUSE_CACHE_DIR`."""
