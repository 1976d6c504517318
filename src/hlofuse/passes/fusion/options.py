"""Pass options for the fusion passes: every `FusionConfig` setting is a pass option.

`FusionOptions` is a frozen dataclass with one field per FusionConfig setting (same name, same
default), so `instruction-fusion{may_duplicate=false,max_operands_and_outputs=96}` works through
the pass registry. Set-valued settings take text (`gpu_cheap_ops={divide,exponential}`) and
default to None (= the config's default). `config()` builds the FusionConfig.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hlofuse.passes.fusion.config import FusionConfig


def _option_fields() -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = []
    defaults = FusionConfig()
    for f in dataclasses.fields(FusionConfig):
        value = getattr(defaults, f.name)
        if isinstance(value, bool | int | float | str):
            out.append((f.name, type(value), dataclasses.field(default=value)))
        else:
            out.append((f.name, str | None, dataclasses.field(default=None)))
    return out


FusionOptions = dataclasses.make_dataclass(
    "FusionOptions", _option_fields(), frozen=True,
    namespace={
        "config": lambda self: FusionConfig.from_options({
            f.name: getattr(self, f.name) for f in dataclasses.fields(FusionConfig)
            if getattr(self, f.name, None) is not None}),
    })
FusionOptions.__doc__ = "Every FusionConfig setting as a pass option (see module docstring)."
