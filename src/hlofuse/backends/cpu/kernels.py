"""One HLO kernel (a fusion, or an unfused op that does work) -> one C function.

    lower_kernel(instr, used_names, target, threads) -> Kernel      (contract.py)

The kernel is lowered to kernel IR (`backends/kernel_ir/lower`), optimised for the target
(`kernel_ir.passes.optimize`: split, jam, collapse, vectorize, parallelize, hoist; the host's
vector width unless `target` says otherwise) and printed (`cprint.KernelPrinter`), the vector
helpers it uses (`cvec.VecLib`, include-guarded) first.

Conditions enforced: `instr` is a kernel (`passes.fusion.kernels.is_kernel`); the generated
function has the contract's signature `HF_KERNEL void NAME(const T0 *restrict in0, ...,
U0 *restrict out0, ...)` (no `restrict` on an input/output pair listed in `Kernel.inplace`).
Anything that cannot be lowered raises `LoweringError` (a CompileError) naming the instruction.
"""

from __future__ import annotations

from hlofuse.backends.cpu import host_target, limits
from hlofuse.backends.cpu.contract import Kernel
from hlofuse.backends.cpu.cprint import KernelPrinter
from hlofuse.backends.cpu.cvec import VecLib
from hlofuse.backends.kernel_ir import lower as kir_lower
from hlofuse.backends.kernel_ir.lower.builder import LoweringError
from hlofuse.backends.kernel_ir.passes import optimize
from hlofuse.backends.kernel_ir.target import Target
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import leaves

__all__ = ["LoweringError", "lower_kernel"]


def lower_kernel(instr: Instruction, used_names: set[str], target: Target | None = None,
                 threads: int = 1) -> Kernel:
    """The C function computing the kernel `instr`: lowered to kernel IR, optimised for
    `target` (the host by default), printed. Lowering recurses through index maps (elementwise
    chains are walked iteratively), so a deep kernel runs on a large stack (`limits.deep_call`);
    one beyond `limits.MAX_EXPRESSION_DEPTH` is refused."""
    depth = limits.expression_depth(instr)
    return limits.deep_call(lambda: _lower_kernel(instr, used_names, target, threads), depth)


def _lower_kernel(instr: Instruction, used_names: set[str], target: Target | None,
                  threads: int) -> Kernel:
    kernel = kir_lower.lower_kernel(instr, used_names)
    optimize(kernel, target or host_target.detect(), threads)
    lib = VecLib()
    text = KernelPrinter(kernel, lib, used_names).print()
    if instr.opcode is Opcode.FUSION:
        params = sorted(instr.fused_computation.parameters,
                        key=lambda p: p.parameter_number or 0)
    else:
        params = list(instr.operands)
    ins = tuple(s for p in params for s in leaves(p.shape))
    outs = tuple(b for b in _out_shapes(instr))
    return Kernel(name=kernel.name, source=lib.text() + text, inputs=ins, outputs=outs,
                  instruction=instr.name, kind=kir_lower.kind_of(instr),
                  inplace=dict(kernel.inplace))


def _out_shapes(instr: Instruction) -> list:
    root = instr.fused_computation.root if instr.opcode is Opcode.FUSION else instr
    return [leaves(r.shape)[k] for r, k in kir_lower._root_leaves(root)]
