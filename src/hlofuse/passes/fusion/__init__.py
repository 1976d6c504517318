"""Fusion passes: XLA's four strategies (instruction fusion, fusion merger, multi-output,
horizontal) and their rules. Importing this package registers every fusion pass that exists
with `hlofuse.passes.registry` (the registry imports it on first lookup).
"""

from __future__ import annotations

import importlib
import importlib.util

_PASS_MODULES = ("instruction_fusion", "fusion_merger", "multi_output", "horizontal",
                 "priority_fusion", "loop_fusion")

for _name in _PASS_MODULES:
    if importlib.util.find_spec(f"{__name__}.{_name}") is not None:
        importlib.import_module(f"{__name__}.{_name}")
