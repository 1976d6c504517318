"""Pass options of the fusion passes: each pass declares the `FusionConfig` settings it reads.

A fusion pass (`FusionPass`) holds one `FusionConfig` and declares, in `OPTIONS`, the settings
its rules read (the groups below, named after the module that reads them). Those are the
options it takes, as keywords or in a pass spec:

    InstructionFusion(may_duplicate=False, max_operands_and_outputs=96)
    instruction-fusion{may_duplicate=false,max_operands_and_outputs=96}
    fusion-merger{unroll_small_loops=3}   -> PassError: fusion-merger has no option ...

A pipeline builds one `FusionConfig` from its `{setting=value}` overrides and hands it to each
of its passes whole (`InstructionFusion(config)`), so a setting read by shared predicates
reaches every pass that asks them; `pipelines.py` refuses a setting no pass of the pipeline
reads. Each option's metadata (`option_info`) comes from the setting's type and the rule
registry: a switch (bool), a limit (a number) with the figure its rule compares it with
(`rules.RULES`), a choice (text) or a set.

`run_config(module)` returns the config and records it in the module's fusion trace under the
pass's name (`FusionTrace.settings`), so tools read the settings a run used instead of
re-deriving them from pipeline names.

Conditions enforced: every declared option is a `FusionConfig` field; a keyword or spec option a
pass does not declare raises `PassError` listing the ones it takes; two passes are equal when
their class and config are.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from hlofuse.errors import PassError
from hlofuse.ir.module import Module
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.trace import trace_of

# The settings each rule module reads (a pass declares the groups of the modules it calls).
FUSIBLE = ("variant", "gpu_cheap_dtypes", "gpu_cheap_ops",  # predicates, gpu_fusible
           "max_inputs_per_output", "max_operands_and_outputs", "max_unnested_reductions",
           "min_dimension_to_transpose_tiled", "min_dimension_to_transpose_tiled2",
           "min_total_dimensions_to_transpose_tiled", "row_reduction_divisor_rule",
           "shared_memory_budget", "warp_size")
INDEXING = ("allow_multi_user_concatenate", "max_code_duplication",  # indexing
            "relax_code_duplication", "max_reevaluated_ops")
PERF_MODEL = ("clock_ghz", "dram_bandwidth_gbs", "fpus_per_sm", "kernel_launch_overhead_us",
              "l1_cache_bytes_per_sm", "l1_cache_speedup", "l2_cache_bytes", "l2_cache_speedup",
              "max_basic_block_splits", "max_ir_size", "sm_count")  # perf_model
HORIZONTAL = ("horizontal_all_computations", "horizontal_max_batch",  # horizontal
              "horizontal_max_cuda_param_bytes", "horizontal_max_elements",
              "horizontal_max_instructions", "horizontal_require_row_major")
HOST_MODEL = ("host_bandwidth_gbs", "host_kernel_overhead_ns", "host_ns_per_op",  # loop costs
              "host_cache_bytes", "host_cache_speedup", "host_threads", "host_parallel_ns",
              "host_fork_ns")
ALL_SETTINGS = tuple(f.name for f in dataclasses.fields(FusionConfig))


@dataclass(frozen=True)
class OptionInfo:
    """What an option is: `kind` "switch" | "limit" | "choice" | "set"; for a limit, the
    figures its rule compares it with (from the rule registry; empty for model constants)."""

    name: str
    kind: str
    default: Any
    figures: tuple[str, ...] = ()


def option_info(name: str) -> OptionInfo:
    """The metadata of setting `name` (PassError for a name that is no setting)."""
    from hlofuse.passes.fusion.rules import rule

    if name not in ALL_SETTINGS:
        raise PassError(f"unknown fusion setting {name!r}")
    default = getattr(FusionConfig(), name)
    kind = ("switch" if isinstance(default, bool) else "limit"
            if isinstance(default, int | float) else "choice" if isinstance(default, str)
            else "set")
    r = rule(name)
    return OptionInfo(name, kind, default, r.figures if r is not None else ())


class FusionPass:
    """Base of the fusion passes: a `FusionConfig` and the options the pass declares."""

    name: ClassVar[str]
    OPTIONS: ClassVar[tuple[str, ...]]

    def __init__(self, config: FusionConfig | None = None, **settings: Any) -> None:
        unknown = sorted(set(settings) - set(self.OPTIONS))
        if unknown:
            raise PassError(f"pass {self.name!r} has no option {unknown[0]!r}; its options: "
                            f"{', '.join(self.OPTIONS)}")
        base = config if config is not None else FusionConfig()
        self._config = FusionConfig.from_options(settings, base) if settings else base

    @classmethod
    def option_types(cls) -> dict[str, type]:
        """Option name -> the type its text converts to (sets and choices: str, which
        `FusionConfig.from_options` reads)."""
        defaults = FusionConfig()
        out: dict[str, type] = {}
        for name in cls.OPTIONS:
            default = getattr(defaults, name)
            out[name] = type(default) if isinstance(default, bool | int | float) else str
        return out

    def config(self) -> FusionConfig:
        return self._config

    def run_config(self, module: Module) -> FusionConfig:
        """The config, recorded in `module`'s fusion trace under this pass's name."""
        trace_of(module).note_settings(self.name, self._config)
        return self._config

    def __getattr__(self, name: str) -> Any:
        if name in ALL_SETTINGS:  # pass.may_duplicate reads the setting
            return getattr(self._config, name)
        raise AttributeError(name)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, FusionPass) and type(other) is type(self)
                and other._config == self._config)

    def __hash__(self) -> int:
        return hash((type(self), self._config))

    def __repr__(self) -> str:
        default = FusionConfig()
        changed = [f"{k}={getattr(self._config, k)!r}" for k in self.OPTIONS
                   if getattr(self._config, k) != getattr(default, k)]
        return f"{type(self).__name__}({', '.join(changed)})"
