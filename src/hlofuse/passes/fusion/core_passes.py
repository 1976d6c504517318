"""The pass classes of instruction fusion and multi-output fusion, registered by name.

Their algorithms (`instruction_fusion.run_instruction_fusion`,
`multi_output.run_multi_output_fusion`) belong to the compiled pass core (`hlofuse/native.py`).
A pass class is a `FusionPass` (`options.py`: the options it declares, a `FusionConfig`), which
stays a Python class; so the two classes live here, in plain Python, and call in.
"""

from __future__ import annotations

from typing import ClassVar

from hlofuse.ir.module import Module
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.instruction_fusion import run_instruction_fusion
from hlofuse.passes.fusion.multi_output import PASS_NAME, run_multi_output_fusion
from hlofuse.passes.fusion.options import FUSIBLE, INDEXING, PERF_MODEL, FusionPass
from hlofuse.passes.registry import register


@register("instruction-fusion")
class InstructionFusion(FusionPass):
    """XLA's (Gpu)InstructionFusion; its options are the settings in OPTIONS."""

    OPTIONS: ClassVar[tuple[str, ...]] = ("may_duplicate", *FUSIBLE, *INDEXING)
    name: ClassVar[str] = "instruction-fusion"
    exact_versions: ClassVar[bool] = True  # (passes/base.py)

    def run(self, module: Module) -> bool:
        config: FusionConfig = self.run_config(module)
        return run_instruction_fusion(module, self.name, config)


@register(PASS_NAME)
class MultiOutputFusion(FusionPass):
    """GpuMultiOutputFusion: sibling then producer-consumer multi-output fusion."""

    OPTIONS: ClassVar[tuple[str, ...]] = ("mof_skip_scalar_operands", "mof_use_cost_model",
                                          *FUSIBLE, *PERF_MODEL)
    name: ClassVar[str] = PASS_NAME
    exact_versions: ClassVar[bool] = True  # (passes/base.py)

    def run(self, module: Module) -> bool:
        config: FusionConfig = self.run_config(module)
        return run_multi_output_fusion(module, config)
