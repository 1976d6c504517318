"""The evaluator passes fold constants with, without importing a backend.

`constant-folding` (XLA's HloConstantFolding, which runs the HloEvaluator) needs the value of an
instruction whose operands are constants. The spec of every value is the interpreter
(`backends/interpreter/`), which registers itself here when the backends are imported
(`backends/registry.py`); passes ask `evaluator()` and import nothing from `backends/`.

    evaluator()(instr, operand_values) -> the value (an array, or a tuple of them)

A call raises what the interpreter raises for an instruction it cannot evaluate (an HloError,
an arithmetic or value error, too large to build); None from `evaluator()` means no evaluator
is registered, and nothing is folded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hlofuse.ir.instruction import Instruction

Evaluator = Callable[[Instruction, list[Any]], Any]

_default: list[Evaluator] = []


def register_default(evaluate: Evaluator) -> None:
    """The evaluator passes use (the backends register the interpreter's)."""
    _default[:] = [evaluate]


def evaluator() -> Evaluator | None:
    """The registered evaluator, or None."""
    return _default[0] if _default else None
