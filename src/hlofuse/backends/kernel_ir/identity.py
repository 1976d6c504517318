"""A kernel's identity: a digest of its optimised kernel IR.

    digest(kernel, context) -> str      64 hex digits (SHA-256)

Two kernels with equal digests are the same function: a printer given either prints the same
text apart from the kernel's own name, so a backend prints and compiles one of them and calls
it for both, and names it from the digest (`naming.kernel_name`), the same in every program.

What the digest covers is everything a printer reads from the IR, written out in a canonical
order: the kernel's summary, its buffers (kind, element type, size, argument position, local
name, a constant's bytes), `inplace`, `threads`, the statements in order with their loops'
ranges and tags (parallel, vector, step), every value once (op, type, operands, argument:
scalar op with attributes, affine index, constant bits, buffer), the decisions the last passes
recorded (placement, lazy selects, lane forms), library calls (`LibCall.op`'s own `key()`) and
the code-made comments. Values, variables and buffers are numbered by first use, so the
kernel-wide `uid`s the Graph hands out do not enter it; where a printer orders values by uid
(a loop's lazy selects and lane forms) their relative order does. `context` holds what the
backend adds (the target's name).

Conditions enforced: no input text enters (a kernel's `label`, the HLO instruction name, is
left out; comments are made by the code); an argument of a kind the walk does not know raises
`TypeError`, so a new IR field is added here before a kernel carrying it is deduplicated.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Affine, Buffer, ScalarOp, Val, Var
from hlofuse.ir.dtypes import DType
from hlofuse.ir.opcodes import Opcode


class _Walk:
    def __init__(self) -> None:
        self.out: list[str] = []
        self.vals: dict[int, int] = {}
        self.vars: dict[int, int] = {}
        self.bufs: dict[int, int] = {}

    def emit(self, *parts: Any) -> None:
        self.out.append(repr(parts))

    # -- names by first use ----------------------------------------------------------------

    def buf(self, b: Buffer) -> int:
        n = self.bufs.get(b.uid)
        if n is None:
            n = self.bufs[b.uid] = len(self.bufs)
            data = None
            if b.data is not None:
                import numpy as np

                arr = np.ascontiguousarray(b.data)
                data = (str(arr.dtype), arr.shape, hashlib.sha256(arr.tobytes()).hexdigest())
            self.emit("buf", n, b.kind, b.dtype.name, b.size, b.index, b.name, data)
        return n

    def var(self, v: Var) -> int:
        n = self.vars.get(v.uid)
        if n is None:
            n = self.vars[v.uid] = len(self.vars)
            self.emit("var", n, v.name, v.lo, v.hi)
        return n

    def val(self, root: Val) -> int:
        """The number of `root`, writing the rows of every value it needs first (iterative)."""
        found = self.vals.get(root.uid)
        if found is not None:
            return found
        for v in ir.postorder([root]):
            if v.uid in self.vals:
                continue
            arg = self.arg(v.arg)
            kids = tuple(self.vals[a.uid] for a in v.args)
            self.vals[v.uid] = len(self.vals)
            self.emit("val", v.op, v.dtype.name, kids, arg)
        return self.vals[root.uid]

    # -- plain data ------------------------------------------------------------------------

    def arg(self, x: Any) -> Any:
        if x is None or isinstance(x, bool | int | str):
            return x
        if isinstance(x, float):
            return ("f", struct.pack("<d", x).hex())
        if isinstance(x, complex):
            return ("c", struct.pack("<dd", x.real, x.imag).hex())
        if isinstance(x, Val):
            return ("v", self.val(x))
        if isinstance(x, Var):
            return ("x", self.var(x))
        if isinstance(x, Buffer):
            return ("b", self.buf(x))
        if isinstance(x, Affine):
            return ("a", tuple((self.arg(t), c) for t, c in x.terms), x.const)
        if isinstance(x, ScalarOp):
            return ("op", x.opcode.value, x.dtype.name, self.arg(x.attrs))
        if isinstance(x, DType):
            return ("t", x.name)
        if isinstance(x, Opcode):
            return ("o", x.value)
        if isinstance(x, tuple | list):
            return tuple(self.arg(y) for y in x)
        if hasattr(x, "item") and hasattr(x, "dtype"):  # a numpy scalar
            return ("np", str(x.dtype), x.tobytes().hex())
        raise TypeError(f"kernel identity: no canonical form for {type(x).__name__}")

    def uids(self, uids: set[int] | dict[int, Any], values: dict[int, Val]) -> tuple[Any, ...]:
        """Values named by uid, in uid order (the order printers meet them)."""
        return tuple(self.val(values[u]) for u in sorted(uids))

    # -- statements ------------------------------------------------------------------------

    def block(self, body: list[ir.Stmt], placement: ir.Placement | None) -> None:
        self.emit("{", len(body))
        if placement is not None:
            for b in placement.blocks.get(id(body), []):
                self.emit("decl", self.buf(b), b in placement.heap)
        for s in body:
            self.stmt(s, placement)
        self.emit("}")

    def stmt(self, s: ir.Stmt, placement: ir.Placement | None) -> None:
        if isinstance(s, ir.Loop):
            self.emit("loop", self.var(s.var), s.lo, s.hi, s.parallel, s.vector, s.step)
            self.block(s.body, placement)
            self.decisions(s)
        elif isinstance(s, ir.Store):
            self.emit("store", self.buf(s.buf), self.arg(s.index), self.val(s.value))
        elif isinstance(s, ir.StoreTile):
            self.emit("tile", self.buf(s.buf), self.arg(s.base), s.stride,
                      tuple(self.val(v) for v in s.values))
        elif isinstance(s, ir.If):
            self.emit("if", self.val(s.cond))
            self.block(s.then, placement)
            self.block(s.orelse, placement)
        elif isinstance(s, ir.Let):
            self.emit("let", self.val(s.value))
        elif isinstance(s, ir.Copy):
            self.emit("copy", self.buf(s.dst), self.buf(s.src), s.if_distinct)
        elif isinstance(s, ir.LibCall):
            key = getattr(s.op, "key", None)
            if key is None:
                raise TypeError("kernel identity: a library call without a key()")
            self.emit("call", self.arg(key()), tuple(self.buf(b) for b in s.ins),
                      tuple(self.buf(b) for b in s.outs))
        elif isinstance(s, ir.Comment):
            self.emit("#", s.text)
        else:
            raise TypeError(f"kernel identity: unknown statement {type(s).__name__}")

    def decisions(self, loop: ir.Loop) -> None:
        if loop.lazy is None and loop.forms is None:
            return
        values = {v.uid: v for v in ir.body_values(loop.body)}
        if loop.lazy is not None:
            lazy = loop.lazy
            self.emit("lazy", tuple((self.val(values[u]), k) for u, k in lazy.sides.items()),
                      tuple((self.val(values[c]) if c in values else None, side,
                             tuple(self.val(v) for v in vs))
                            for (c, side), vs in lazy.groups.items()))
        if loop.forms is not None:
            f = loop.forms
            self.emit("forms", *(self.uids(getattr(f, name), values)
                                 for name in ("narrow", "blend", "gather", "compare32",
                                              "index32", "outline")))


def digest(kernel: ir.Kernel, context: tuple[Any, ...] = ()) -> str:
    """The SHA-256 of `kernel`'s canonical form (see the module docstring) and `context`."""
    w = _Walk()
    w.emit("kernel", kernel.summary, kernel.threads, tuple(sorted(kernel.inplace.items())),
           context)
    for b in kernel.inputs + kernel.outputs:
        w.buf(b)
    w.block(kernel.body, kernel.placement)
    for b in kernel.locals + kernel.consts:
        w.emit("owned", w.buf(b))
    h = hashlib.sha256()
    for row in w.out:
        h.update(row.encode())
        h.update(b"\n")
    return h.hexdigest()
