"""Pass options for the fusion passes: every `FusionConfig` setting is a pass option.

`FusionOptions` is a frozen dataclass with one field per FusionConfig setting (same name, same
default), so `instruction-fusion{may_duplicate=false,max_operands_and_outputs=96}` works through
the pass registry. Set-valued settings take text (`gpu_cheap_ops={divide,exponential}`) and
default to None (= the config's default). `config()` builds the FusionConfig;
`run_config(module)` builds it and records it in the module's fusion trace under the pass's
name (`FusionTrace.settings`), so tools read the settings a run used instead of re-deriving
them from pipeline names.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hlofuse.ir.module import Module
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.trace import trace_of


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


def _config(options: Any) -> FusionConfig:
    return FusionConfig.from_options({
        f.name: getattr(options, f.name) for f in dataclasses.fields(FusionConfig)
        if getattr(options, f.name, None) is not None})


def _run_config(options: Any, module: Module) -> FusionConfig:
    config = _config(options)
    trace_of(module).note_settings(options.name, config)
    return config


FusionOptions = dataclasses.make_dataclass(
    "FusionOptions", _option_fields(), frozen=True,
    namespace={"config": _config, "run_config": _run_config})
FusionOptions.__doc__ = "Every FusionConfig setting as a pass option (see module docstring)."
