"""Where a C compile error is: the functions of the generated file it is in, and the HLO
instructions their kernels compute (for `build.CCompileError`'s message).

    failing_functions(stderr, c_path) -> ("fused_reduce_add_1f0c9a2e", ...)
    instructions_of(functions, [(kernel function, instruction), ...]) -> ("fusion.12", ...)

A C compile error is an hlofuse bug, never the user's: the message must say which kernel to
look at. Conditions enforced: errors are located by the `file:line:` the compiler prints
(GCC, clang and others, any locale), not by its prose; a function is found by its definition
line as the C printer writes it (`HF_KERNEL void NAME(`, `static ... NAME(`, `int hf_entry(`:
at column 0); an outlined parallel loop (`NAME_p1`, its task `NAME_p1_t`) belongs to kernel
NAME. Instruction names are input text: they reach only the exception's message, whose `str()`
escapes them (`errors.HloError`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from pathlib import Path

# `file:line:col: error:` (GCC, clang; `fatal error` too); the line is the C file's.
_ERROR_AT = re.compile(r"^(?P<file>[^\n]*?):(?P<line>\d+):(?:\d+:)? (?:fatal )?error\b",
                       re.MULTILINE)
# A function definition's first line in generated C: at column 0, `HF_KERNEL void NAME(`,
# `static [inline] TYPE NAME(`, `int hf_entry(`; never a prototype's (those end in `;`).
_DEFINITION = re.compile(r"^(?:HF_KERNEL |static |int |void )[^;=()]*?\b([A-Za-z_]\w*)\(")
_OUTLINED = re.compile(r"(?P<kernel>\w+?)_p\d+(?:_t)?")
SHOWN = 8  # instructions named in a message (then "and N more")


def failing_functions(stderr: str, c_path: Path) -> tuple[str, ...]:
    """The functions of the compiled C file `c_path` that the compiler's errors are in: for
    each error's line, the nearest function definition at or above it, in the order the
    compiler reported them. Empty when the errors are not in that file (a link) or it cannot
    be read."""
    lines = [int(m.group("line")) for m in _ERROR_AT.finditer(stderr)
             if m.group("file").endswith(c_path.name)]
    if not lines:
        return ()
    try:
        text = c_path.read_text(errors="replace").splitlines()
    except OSError:
        return ()
    starts: list[tuple[int, str]] = []  # (line, function), in order
    for n, line in enumerate(text, 1):
        m = _DEFINITION.match(line)
        if m is not None:
            starts.append((n, m.group(1)))
    found: dict[str, None] = {}
    for at in lines:
        k = bisect.bisect_right(starts, (at, "\uffff")) - 1
        if k >= 0:
            found[starts[k][1]] = None
    return tuple(found)


def instructions_of(functions: Iterable[str], kernels: Iterable[tuple[str, str]]
                    ) -> tuple[str, ...]:
    """The instructions (`kernels`: (C function, instruction) pairs of a program) computed by
    the kernels among `functions`, their outlined loops included."""
    by_kernel: dict[str, list[str]] = {}
    for kernel, instruction in kernels:
        by_kernel.setdefault(kernel, []).append(instruction)
    names: dict[str, None] = {}
    for fn in functions:
        own = by_kernel.get(fn)
        if own is None:
            m = _OUTLINED.fullmatch(fn)
            own = by_kernel.get(m.group("kernel"), []) if m else []
        names.update(dict.fromkeys(own))
    return tuple(names)


def with_instructions_text(message: str, instructions: tuple[str, ...]) -> str:
    """`message` (`... failed on X in F (exit N); ...`) naming `instructions` after F."""
    shown = list(instructions[:SHOWN])
    more = f" and {len(instructions) - SHOWN} more" if len(instructions) > SHOWN else ""
    head, sep, rest = message.partition(" (exit ")
    return f"{head}, computing instruction {', '.join(shown)}{more}{sep}{rest}"


def errors_first(lines: list[str]) -> list[str]:
    """The compiler's message with its first error (and the `In function` line naming it)
    first: warnings before it (a prelude helper's ABI note) would fill the lines kept."""
    first = next((i for i, line in enumerate(lines) if _ERROR_AT.match(line)), 0)
    head = lines[first - 1:first] if first and "In function" in lines[first - 1] else []
    return head + lines[first:] + lines[:max(0, first - len(head))]
