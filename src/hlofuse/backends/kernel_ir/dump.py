"""The kernel IR of every kernel of a module as text: what `hlofuse emit --kernel-ir` prints.

    module_text(module, target, threads) -> str

Kernels are found the way the cpu driver finds them: the entry computation, then the bodies
and conditions of its loops, the branches of its conditionals and the computations it calls,
each instruction that is a kernel (`analysis.kernels.is_kernel`, host callbacks excepted) in
order. Each is lowered (`lower.lower_kernel`), optimised for `target` (`passes.optimize`),
named from its identity as the C backend names it (`naming.kernel_name` of `identity.digest`)
and formatted (`printer.format_kernel`), after a `#` line naming the HLO instruction; a kernel
whose IR an earlier one has says which (the backend prints one function for both). A kernel that
cannot be lowered prints its `LoweringError` in a `#` line instead, and the others still print.
Nothing here compiles or runs code.
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir.target import Target
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import CONTROL_FLOW_OPS


def kernel_instructions(module: Module) -> list[Instruction]:
    """The module's kernels in the order the driver meets them (control flow walked, each
    computation once)."""
    from hlofuse.analysis.kernels import is_kernel
    from hlofuse.backends.host_callbacks import is_host_callback

    out: list[Instruction] = []
    seen: set[int] = set()
    stack: list[Computation] = [module.entry]
    while stack:
        comp = stack.pop()
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        nested: list[Computation] = []
        for instr in comp.instructions:
            if instr.opcode in CONTROL_FLOW_OPS:
                nested.extend(instr.called_computations())
            elif not is_host_callback(instr) and is_kernel(instr):
                out.append(instr)
        stack.extend(reversed(nested))
    return out


def module_text(module: Module, target: Target, threads: int = 1) -> str:
    """Every kernel's optimised kernel IR, formatted (see the module docstring)."""
    from hlofuse.backends.kernel_ir import lower
    from hlofuse.backends.kernel_ir.identity import digest
    from hlofuse.backends.kernel_ir.lower.builder import LoweringError
    from hlofuse.backends.kernel_ir.naming import kernel_name
    from hlofuse.backends.kernel_ir.passes import optimize
    from hlofuse.backends.kernel_ir.printer import format_kernel
    from hlofuse.escape import terminal

    names: dict[str, str] = {}  # identity -> name
    taken: set[str] = set()
    parts = [f"# kernel IR for target {target.name} ({target.vector_bytes} vector bytes), "
             f"{threads} thread(s)"]
    for instr in kernel_instructions(module):
        parts.append(f"# {terminal(instr.name)} ({instr.opcode.value})")
        try:
            kernel = lower.lower_kernel(instr)
            optimize(kernel, target, threads)
        except LoweringError as exc:
            parts.append(f"# cannot lower: {terminal(str(exc))}")
            continue
        key = digest(kernel, (target.name,))
        if key in names:  # the same kernel IR as an earlier one (one function in C)
            parts.append(f"# the same kernel as {names[key]}")
            continue
        kernel.name = names[key] = kernel_name(kernel.name, key, taken)
        parts.append(format_kernel(kernel))
    return "\n".join(parts) + "\n"
