"""The exceptions hlofuse raises for bad input. The CLI prints their message, never a traceback.

Messages quote the input (names, tokens, the offending line, file paths), so `str()` of every
`HloError` goes through `escape.terminal`: whoever prints one cannot pass a control character
of a hostile file to a terminal. The raw text stays available in the attributes (`message`,
`snippet`, ...).
"""

from __future__ import annotations

from hlofuse.escape import terminal


class HloError(Exception):
    """Base class of every hlofuse error a user can cause."""

    def __str__(self) -> str:
        return terminal(super().__str__())


class HloParseError(HloError):
    """Malformed HLO text. Carries the 1-based line and column, what was expected, and the
    offending snippet."""

    def __init__(self, message: str, line: int, column: int, snippet: str = "",
                 source_name: str = "<text>", *, caret: int | None = None) -> None:
        self.message = message
        self.line = line
        self.column = column
        self.snippet = snippet
        self.source_name = source_name
        text = f"{source_name}:{line}:{column}: {message}"
        if snippet:
            # `caret`: the column within `snippet` when it is a window of a long line. The
            # caret goes under the character as printed (escaped characters are wider).
            at = column if caret is None else caret
            shown = terminal(snippet.replace("\t", " "))
            width = len(terminal(snippet[:max(0, at - 1)].replace("\t", " ")))
            text += f"\n  {shown}\n  {' ' * width}^"
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


class KeptFactError(PassError):
    """HLOFUSE_CHECK_KEPT: a fact a pass kept from an earlier run differs from a fresh one
    (a bug in the caches' invalidation, never in the input)."""


class CompileError(HloError):
    """The native backend could not build or load a module (or no C compiler was found)."""


class UnsupportedOpError(CompileError):
    """An op, element type or form a backend cannot run (names the instruction or kernel)."""


class LimitError(HloError):
    """Input beyond one of the documented limits in `hlofuse.ir.limits` (nesting depth, rank,
    dimension or byte size, call depth). Raised as `ParseLimitError` (with line:column),
    `VerifyLimitError` (naming the instruction), `InterpreterLimitError` or, by the cpu backend,
    `ResourceLimitError`; catch this class to handle all of them."""


class ParseLimitError(HloParseError, LimitError):
    """A limit exceeded while parsing: carries the line and column like every parse error."""


class VerifyLimitError(HloVerifyError, LimitError):
    """A limit exceeded by a module's structure: names the instruction and computation."""


class InterpreterLimitError(InterpreterError, LimitError):
    """A limit exceeded while interpreting (calls nested deeper than the limit)."""


class ResourceLimitError(LimitError):
    """A module beyond one of the cpu backend's documented limits (bytes of one array or of the
    work arena, control-flow nesting, expression depth, integers that fit no C type): names the
    instruction, the value and the limit (docs/security.md)."""


class AllocationError(HloError):
    """Memory for a run could not be allocated, or an array is larger than the allocation limit:
    names what was being allocated (an instruction, a parameter, a buffer) and the bytes."""

    def __init__(self, message: str, nbytes: int = 0, what: str = "") -> None:
        self.message = message
        self.nbytes = nbytes
        self.what = what
        super().__init__(message)


class HostCallbackError(HloError):
    """A host callback (a Python function the module calls: jax.pure_callback, io_callback,
    debug.print) raised, returned the wrong shapes or types, or is not in the callback table;
    names the instruction (`backends/host_callbacks.py`). Raised from the callback's own
    exception when it raised one."""


class ConfigError(HloError):
    """An environment variable hlofuse reads holds a value it cannot use (`hlofuse/env.py`):
    the message names the variable, quotes the value and says what is allowed."""


class CacheDirError(HloError):
    """The compile cache directory is not safe to trust (owned by another user, or group- or
    world-writable): the message names the directory and `HLOFUSE_CACHE_DIR`."""
