"""Library ops on the GPU, the way XLA GPU runs them: a kernel that is one library call
(`ir.LibCall`, its op a plain-data `libop.LibOp`) runs through torch's routines on the
device's tensors: a dot as `torch.einsum` of its operands (cuBLAS on a GPU; batch, free and
contracting dimensions as HLO's `dot_general` names them), in the result's element type.

    is_library_kernel(kernel)        whether the kernel is a library call (and comments)
    LibraryCall(kernel, instr)       .launch(ins, outs) on flat tensors

Conditions enforced: only float dots (f16, bf16, f32, f64) run; any other library op, or a
dot of another type (cuBLAS multiplies no integers), raises `UnsupportedOpError` naming the
instruction, at compile time.
"""

from __future__ import annotations

from typing import Any

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.libop import LibOp
from hlofuse.errors import UnsupportedOpError
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape

FLOATS = ("f16", "bf16", "f32", "f64")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def is_library_kernel(kernel: ir.Kernel) -> bool:
    body = [s for s in kernel.body if not isinstance(s, ir.Comment)]
    return len(body) == 1 and isinstance(body[0], ir.LibCall)


def describe(kernel: ir.Kernel) -> str:
    (call,) = [s for s in kernel.body if isinstance(s, ir.LibCall)]
    return f"# library call: {call.op.opcode.value} {call.op.shape} (torch)\n"


def dot_subscripts(op: LibOp) -> str:
    """The einsum subscripts of a dot_general: batch dimensions first in the result, then the
    lhs's free dimensions, then the rhs's (HLO's result order)."""
    lhs, rhs = op.operands
    assert isinstance(lhs, ArrayShape) and isinstance(rhs, ArrayShape)
    lb, rb = list(op.attr("lhs_batch_dims", ())), list(op.attr("rhs_batch_dims", ()))
    lc, rc = list(op.attr("lhs_contracting_dims", ())), list(op.attr("rhs_contracting_dims", ()))
    names = iter(_LETTERS)
    ls = [""] * len(lhs.dims)
    rs = [""] * len(rhs.dims)
    for a, b in zip(lb, rb, strict=True):
        ls[a] = rs[b] = next(names)
    for a, b in zip(lc, rc, strict=True):
        ls[a] = rs[b] = next(names)
    for i in range(len(ls)):
        ls[i] = ls[i] or next(names)
    for i in range(len(rs)):
        rs[i] = rs[i] or next(names)
    out = [ls[a] for a in lb]
    out += [ls[i] for i in range(len(ls)) if i not in lb and i not in lc]
    out += [rs[i] for i in range(len(rs)) if i not in rb and i not in rc]
    return f"{''.join(ls)},{''.join(rs)}->{''.join(out)}"


class LibraryCall:
    """One library-call kernel, run on flat device tensors."""

    def __init__(self, kernel: ir.Kernel, instruction: str) -> None:
        (call,) = [s for s in kernel.body if isinstance(s, ir.LibCall)]
        op = call.op
        where = f"instruction {instruction}"
        if not isinstance(op, LibOp) or op.opcode is not Opcode.DOT:
            name = op.opcode.value if isinstance(op, LibOp) else "?"
            raise UnsupportedOpError(f"{where}: the gpu backend has no library routine for "
                                     f"{name}")
        shape = op.shape
        if not isinstance(shape, ArrayShape) or shape.dtype.name not in FLOATS or any(
                not isinstance(s, ArrayShape) or s.dtype.name not in FLOATS
                for s in op.operands):
            raise UnsupportedOpError(f"{where}: the gpu backend runs dots of floats only "
                                     f"({', '.join(FLOATS)}), not {shape}")
        self.call = call
        self.shapes = [s.dims for s in op.operands]  # type: ignore[union-attr]
        self.out_dims = shape.dims
        self.subscripts = dot_subscripts(op)
        import torch

        from hlofuse.backends.gpu.triton_print import torch_type

        self.torch_dtype = torch_type(shape.dtype)
        self.einsum = torch.einsum
        self.in_pos = [b.index for b in call.ins]
        self.out_pos = call.outs[0].index
        if any(b.kind != "in" for b in call.ins) or call.outs[0].kind != "out":
            raise UnsupportedOpError(f"{where}: a library call on the kernel's locals")

    def launch(self, ins: list[Any], outs: list[Any]) -> None:
        out = outs[self.out_pos]
        if out.numel() == 0:
            return
        t = self.torch_dtype
        a, b = (ins[p].reshape(dims).to(t) for p, dims in zip(self.in_pos, self.shapes,
                                                              strict=True))
        out.reshape(self.out_dims).copy_(self.einsum(self.subscripts, a, b))
