"""XLA's HLO text format: `parse` (long dump form and short test form) and `print_module`.

    module = parse(text)                 # HloParseError (line:col) / HloVerifyError
    module = parse_file("model.hlo")
    text = print_module(module)          # short form; long=True for XLA's dump form

`print_module(parse(t))` is stable under re-parsing, and `parse(print_module(m))` is
structurally equal to `m` (`hlofuse.ir.equality.modules_equal`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hlofuse.text.parser import parse, parse_file
    from hlofuse.text.printer import format_computation, format_instruction, print_module

__all__ = ["format_computation", "format_instruction", "parse", "parse_file", "print_module"]

# name -> module: imported on first use, so a submodule (`attrs`, which reads the shapes of a
# cached program's signature) does not load the parser and the printer with it
_LAZY = {"parse": "parser", "parse_file": "parser", "format_computation": "printer",
         "format_instruction": "printer", "print_module": "printer"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
