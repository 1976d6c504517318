"""Kernel lowering: one HLO kernel (a fusion, or an unfused op that does work) -> one C function.

    lower_kernel(instr, used_names) -> Kernel      (backends/cpu/contract.py)

A single op is lowered exactly like a fusion whose parameters are its operands. The pieces:

    naming.py       readable unique names (fused_multiply_add_select, reduce_add, dot_2)
    index.py        indices as C expressions (multi-index and/or row-major linear)
    emitter.py      the value of an instruction at an index; elementwise ops, broadcast,
                    reshape, transpose, iota, constants, tuples, map
    maps.py         slice, dynamic-slice, dynamic-update-slice, reverse, pad, concatenate,
                    gather, width-changing bitcast-convert
    loops.py        loop nests over output shapes; the plan of a kernel's outputs
    reduce.py       reduce (row / column / variadic / multi-output) and reduce-window
    inplace.py      dynamic-update-slice roots done in place (O(update))
    scatter.py      scatter (XLA semantics: out-of-bounds updates skipped, in order)
    materialize.py  dot, sort, ... (lower.library) inside a kernel, via scratch buffers

Conditions enforced: `instr` is a kernel (`passes.fusion.kernels.is_kernel`); its operands'
and results' leaves are arrays; the generated function has the contract's signature
`static void NAME(const T0 *restrict in0, ..., U0 *restrict out0, ...)` (no `restrict` on an
input/output pair listed in `Kernel.inplace`). Anything that cannot be lowered raises
`LoweringError` (a CompileError) naming the instruction.
"""

from __future__ import annotations

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


def lower_kernel(instr: Instruction, used_names: set[str], target: Target | None = None
                 ) -> Kernel:
    """The C function computing the kernel `instr`: lowered to kernel IR, optimised for
    `target` (the host by default), printed."""
    kernel = kir_lower.lower_kernel(instr, used_names)
    optimize(kernel, target or Target.detect())
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
