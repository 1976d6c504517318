"""The gate every backend passes a module through: no dynamic dimensions.

Dynamic shapes (`f32[<=4]`, `s32[2,?]`) parse, print and verify (`ir.shape.ArrayShape.dynamic`),
as XLA's parser and verifier take them, but no backend runs them yet: `require_static` raises
`UnsupportedOpError` naming the first instruction whose shape (or a leaf of it) has a dynamic
dimension. It runs before any pass or code generation touches the module (`api._build`, the cpu
compile cache's cold path, `cpu.compile_module`, `interpreter.evaluate`).
"""

from __future__ import annotations

from hlofuse.ir.module import Module
from hlofuse.ir.shape import dynamic_leaf, format_shape


def require_static(module: Module) -> None:
    """Raise `UnsupportedOpError` naming the first instruction with a dynamic dimension."""
    for instr in module.all_instructions():
        leaf = dynamic_leaf(instr.shape)
        if leaf is not None:
            from hlofuse.backends.cpu.cexpr import UnsupportedOpError

            text = format_shape(leaf, with_layout=False)
            comp = instr.parent.name if instr.parent is not None else "?"
            raise UnsupportedOpError(
                f"instruction {instr.name} in {comp} ({instr.opcode}) has the dynamic shape "
                f"{text[:200]}: dynamic dimensions ('<=N', '?') parse and verify, but no "
                "backend runs them")
