"""Local placement: where each `local` and `lanes` buffer of a kernel is declared and whether it
lives on the stack or the heap (`ir.Placement`, stored as `Kernel.placement`). Printers read
the placement; they decide nothing about it.

    place(kernel, stack_bytes)      kernel.placement = Placement(blocks, heap)

Conditions enforced:
- a buffer is declared at the top of the innermost block (the kernel's body, a loop's body, a
  side of an `If`) that contains every statement and value accessing it, so a local used
  only inside a parallel loop is private to each of its threads;
- a `local` of more than `stack_bytes` bytes is in `heap` (allocated at its block's top and
  freed at its end: `parallelize` never marks a loop that would hold one parallel); the
  others, and every `lanes` buffer (one vector register), are not.
The order of the declarations in a block is the order of the buffers' first accesses.
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Buffer, Stmt


def place(kernel: ir.Kernel, stack_bytes: int = ir.STACK_LOCAL_BYTES) -> ir.Kernel:
    """Set `kernel.placement` (see the module docstring)."""
    blocks = declarations(kernel.body)
    heap = {b for bufs in blocks.values() for b in bufs
            if b.kind == "local" and b.size * b.dtype.itemsize > stack_bytes}
    kernel.placement = ir.Placement(blocks, heap, stack_bytes)
    return kernel


def declarations(body: list[Stmt]) -> dict[int, list[Buffer]]:
    """Block (by id of its statement list) -> the local buffers to declare at its top: the
    innermost block containing every access of the buffer."""
    paths: dict[Buffer, list[int]] = {}
    order: list[Buffer] = []

    def touch(b: Buffer, path: list[int]) -> None:
        if b.kind not in ("local", "lanes"):
            return
        if b not in paths:
            paths[b] = list(path)
            order.append(b)
            return
        p = paths[b]
        n = 0
        while n < len(p) and n < len(path) and p[n] == path[n]:
            n += 1
        del p[n:]

    def visit(block: list[Stmt], path: list[int]) -> None:
        path = [*path, id(block)]
        for s in block:
            for v in ir.stmt_vals(s):
                for b in ir.reads(v):
                    touch(b, path)
            if isinstance(s, ir.Store | ir.StoreTile):
                touch(s.buf, path)
            elif isinstance(s, ir.Copy):
                touch(s.dst, path)
                touch(s.src, path)
            elif isinstance(s, ir.LibCall):
                for b in s.ins + s.outs:
                    touch(b, path)
            elif isinstance(s, ir.Loop):
                visit(s.body, path)
            elif isinstance(s, ir.If):
                visit(s.then, path)
                visit(s.orelse, path)

    visit(body, [])
    out: dict[int, list[Buffer]] = {}
    for b in order:
        out.setdefault(paths[b][-1], []).append(b)
    return out


def outer_locals(loop: ir.Loop, placement: ir.Placement) -> list[Buffer]:
    """The `local` buffers `loop` accesses that are declared outside it (a parallel loop's
    outlined function receives them with the kernel's parameters: `parallel.written_apart`),
    in the order of their declarations."""
    inside: set[int] = set()
    for s in [loop, *ir.walk(loop.body)]:
        if isinstance(s, ir.Loop):
            inside.add(id(s.body))
        elif isinstance(s, ir.If):
            inside.update((id(s.then), id(s.orelse)))
    used = {b for bufs in declarations(loop.body).values() for b in bufs}
    return [b for key, bufs in placement.blocks.items() if key not in inside for b in bufs
            if b in used and b.kind == "local"]
