"""XLA's HLO text format: `parse` (long dump form and short test form) and `print_module`.

    module = parse(text)                 # HloParseError (line:col) / HloVerifyError
    module = parse_file("model.hlo")
    text = print_module(module)          # short form; long=True for XLA's dump form

`print_module(parse(t))` is stable under re-parsing, and `parse(print_module(m))` is
structurally equal to `m` (`hlofuse.ir.equality.modules_equal`).
"""

from hlofuse.text.parser import parse, parse_file
from hlofuse.text.printer import format_computation, format_instruction, print_module

__all__ = ["format_computation", "format_instruction", "parse", "parse_file", "print_module"]
