"""The pass classes of instruction fusion and multi-output fusion, registered by name.

Their algorithms (`instruction_fusion.run_instruction_fusion`,
`multi_output.run_multi_output_fusion`) belong to the compiled pass core (`hlofuse/native.py`).
A pass class is a dataclass of the `FusionOptions` settings, a class made at run time
(`options.py`), and such a class cannot be compiled to a native one; so the two classes live
here, in plain Python, and call in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.ir.module import Module
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.instruction_fusion import run_instruction_fusion
from hlofuse.passes.fusion.multi_output import PASS_NAME, run_multi_output_fusion
from hlofuse.passes.fusion.options import FusionOptions
from hlofuse.passes.registry import register


@register("instruction-fusion")
@dataclass(frozen=True)
class InstructionFusion(FusionOptions):  # type: ignore[misc]
    """XLA's (Gpu)InstructionFusion; options are the FusionConfig settings."""

    name: ClassVar[str] = "instruction-fusion"
    exact_versions: ClassVar[bool] = True  # (passes/base.py)

    def run(self, module: Module) -> bool:
        config: FusionConfig = self.run_config(module)
        return run_instruction_fusion(module, self.name, config)


@register(PASS_NAME)
@dataclass(frozen=True)
class MultiOutputFusion(FusionOptions):  # type: ignore[misc,valid-type]
    """GpuMultiOutputFusion: sibling then producer-consumer multi-output fusion."""

    name: ClassVar[str] = PASS_NAME
    exact_versions: ClassVar[bool] = True  # (passes/base.py)

    def run(self, module: Module) -> bool:
        config: FusionConfig = self.run_config(module)
        return run_multi_output_fusion(module, config)
