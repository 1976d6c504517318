"""One HLO kernel (a fusion, or an unfused op that does work) -> one C function, in two steps:

    lower(instr, target, threads) -> Lowered     the optimised kernel IR and its identity
    lowered.emit(name) -> Kernel                  its C (contract.py)
    lower_kernel(instr, target, threads) -> Kernel    both, named from the identity

The kernel is lowered to kernel IR (`backends/kernel_ir/lower`), optimised for the target
(`kernel_ir.passes.optimize`: split, jam, collapse, vectorize, parallelize, hoist; the host's
vector width unless `target` says otherwise), given its identity (`kernel_ir.identity.digest`
of the optimised IR and the target's name: the scheduler prints one function per identity)
and printed (`cprint.KernelPrinter`), the vector helpers it uses (`cvec.VecLib`,
include-guarded) first. Its name is `STEM_DIGEST8` (`naming.kernel_name`), its file-scope
helpers `NAME_...`: the same kernel prints the same C in every program.

Conditions enforced: `instr` is a kernel (`passes.fusion.kernels.is_kernel`); the generated
function has the contract's signature `HF_KERNEL void NAME(const T0 *restrict in0, ...,
U0 *restrict out0, ...)` (no `restrict` on an input/output pair listed in `Kernel.inplace`).
Anything that cannot be lowered raises `LoweringError` (a CompileError) naming the instruction.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlofuse.backends.cpu import host_target, limits
from hlofuse.backends.cpu.contract import Kernel
from hlofuse.backends.cpu.cprint import KernelPrinter, lane_cost
from hlofuse.backends.cpu.cvec import VecLib
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir import lower as kir_lower
from hlofuse.backends.kernel_ir.identity import digest
from hlofuse.backends.kernel_ir.lower.builder import LoweringError
from hlofuse.backends.kernel_ir.naming import kernel_name
from hlofuse.backends.kernel_ir.passes import optimize
from hlofuse.backends.kernel_ir.target import Target
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.shape import ArrayShape

__all__ = ["Lowered", "LoweringError", "lower", "lower_kernel"]


@dataclass(frozen=True)
class Lowered:
    """One kernel lowered and optimised, not yet printed: `digest` is its identity; `inputs`,
    `outputs`, `instruction` and `kind` its calling convention and origin (contract.Kernel)."""

    kernel: ir.Kernel
    stem: str  # the readable part of its name (`naming.kernel_stem`)
    digest: str
    inputs: tuple[ArrayShape, ...]
    outputs: tuple[ArrayShape, ...]
    instruction: str
    kind: str
    depth: int  # its expression depth (`limits.deep_call`)

    def call(self, name: str, source: str = "") -> Kernel:
        """The contract entry calling the function `name` (printed elsewhere when `source` is
        empty)."""
        return Kernel(name=name, source=source, inputs=self.inputs, outputs=self.outputs,
                      instruction=self.instruction, kind=self.kind,
                      inplace=dict(self.kernel.inplace))

    def emit(self, name: str) -> Kernel:
        """The C function `name` computing this kernel (its helpers named `name_...`)."""
        def text() -> str:
            self.kernel.name = name
            lib = VecLib()
            body = KernelPrinter(self.kernel, lib).print()
            return lib.text() + body

        return self.call(name, limits.deep_call(text, self.depth))


def lower(instr: Instruction, target: Target | None = None, threads: int = 1) -> Lowered:
    """`instr` lowered to kernel IR and optimised for `target` (the host by default).
    Lowering recurses through index maps (elementwise chains are walked iteratively), so a
    deep kernel runs on a large stack (`limits.deep_call`); one beyond
    `limits.MAX_EXPRESSION_DEPTH` is refused."""
    depth = limits.expression_depth(instr)
    return limits.deep_call(lambda: _lower(instr, target or host_target.detect(), threads, depth),
                            depth)


def _lower(instr: Instruction, target: Target, threads: int, depth: int) -> Lowered:
    kernel = kir_lower.lower_kernel(instr)
    optimize(kernel, target, threads, lane_cost=lane_cost)
    ins, outs = kir_lower.calling_convention(instr)
    return Lowered(kernel, kernel.name, digest(kernel, (target.name,)), ins, outs, instr.name,
                   kir_lower.kind_of(instr), depth)


def lower_kernel(instr: Instruction, target: Target | None = None, threads: int = 1) -> Kernel:
    """The C function computing the kernel `instr`, on its own (named from its identity)."""
    lowered = lower(instr, target, threads)
    return lowered.emit(kernel_name(lowered.stem, lowered.digest, set()))

