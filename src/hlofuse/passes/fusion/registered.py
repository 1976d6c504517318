"""Import every fusion pass module that exists, so each registers its pass name."""

from __future__ import annotations

import importlib
import importlib.util

PASS_MODULES = ("core_passes", "fusion_merger", "horizontal",
                "priority_fusion", "loop_fusion", "loop_reductions", "small_loops", "unstack",
                "auto_unroll", "small_dots")
_PACKAGE = "hlofuse.passes.fusion"

for _name in PASS_MODULES:
    if importlib.util.find_spec(f"{_PACKAGE}.{_name}") is not None:
        importlib.import_module(f"{_PACKAGE}.{_name}")
