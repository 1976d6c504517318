"""One HLO kernel -> one GPU launch, in two steps (the cpu backend's `kernels.py`, for Triton):

    lower(instr) -> Lowered          the kernel IR for the `scalar` target (one thread, no
                                     vector forms), mapped by the grid pass, and its identity
    lowered.emit(name) -> Kernel     its Triton source (`triton_print.py`), or, for a kernel
                                     that is one library call, the call's description
    lowered.launcher() -> Launcher   what the driver runs: a `TritonKernel`, or a
                                     `library.LibraryCall`

Conditions enforced: the kernel is printed before anything runs, so an op without a Triton
form or a GPU library routine raises `UnsupportedOpError` (`GpuPrintError`) naming the kernel
and its instruction at compile time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from hlofuse.backends.driver_ir.kernel import Kernel
from hlofuse.backends.gpu import library
from hlofuse.backends.gpu.triton_print import GpuPrintError, TritonKernel, print_kernel
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir import lower as kir_lower
from hlofuse.backends.kernel_ir.identity import digest
from hlofuse.backends.kernel_ir.passes import optimize
from hlofuse.backends.kernel_ir.passes.grid import grid
from hlofuse.backends.kernel_ir.target import Target
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.shape import ArrayShape

TARGET = "triton"  # the identity's target name: a GPU kernel is never a cpu kernel


class Launcher(Protocol):
    def launch(self, ins: list[Any], outs: list[Any]) -> None: ...


@dataclass(frozen=True)
class Lowered:
    """One kernel lowered, optimised and mapped, not yet printed (`driver_ir.kernel.Lowered`)."""

    kernel: ir.Kernel
    stem: str
    digest: str
    inputs: tuple[ArrayShape, ...]
    outputs: tuple[ArrayShape, ...]
    instruction: str
    kind: str

    def call(self, name: str, source: str = "") -> Kernel:
        return Kernel(name=name, source=source, inputs=self.inputs, outputs=self.outputs,
                      instruction=self.instruction, kind=self.kind,
                      inplace=dict(self.kernel.inplace))

    def emit(self, name: str) -> Kernel:
        if library.is_library_kernel(self.kernel):
            return self.call(name, library.describe(self.kernel))
        self.kernel.name = name
        try:
            return self.call(name, print_kernel(self.kernel))
        except GpuPrintError as exc:
            raise GpuPrintError(f"instruction {self.instruction}: {exc}") from None

    def launcher(self, source: str) -> Launcher:
        """What runs the function `emit` printed as `source`."""
        if library.is_library_kernel(self.kernel):
            return library.LibraryCall(self.kernel, self.instruction)
        return TritonKernel(self.kernel, source)


def lower(instr: Instruction) -> Lowered:
    """`instr` lowered to the target-independent kernel IR and mapped for the GPU."""
    kernel = kir_lower.lower_kernel(instr, column_blocks=False)  # the grid maps the loops
    optimize(kernel, Target.named("scalar"), threads=1)
    grid(kernel)
    ins, outs = kir_lower.calling_convention(instr)
    return Lowered(kernel, kernel.name, digest(kernel, (TARGET,)), ins, outs, instr.name,
                   kir_lower.kind_of(instr))
