"""Ops that are not index maps (dot, convolution, sort, topk, rng-bit-generator,
select-and-scatter, cholesky, triangular-solve, jax's LAPACK custom calls) as library calls:
the op is computed whole into buffers, then read like an input.

    LibCall(op, ins=[operand buffers], outs=[local buffers])   in the kernel's preamble
    ... load(local, i) in the loops ...

Operands that are kernel inputs are passed as they are; any other operand is first materialised
into a local buffer by a loop nest. As a kernel root the op writes the kernel's outputs directly
(`roots.py`). Which ops have a routine, and the routines themselves, belong to the backend
(`backends/cpu/library/` for C); this module only decides where they run.

`op` is plain data (`library_op` -> `libop.LibOp`): the opcode, shapes and the attributes the
routines read, copied here; the facts they need from the module (a convolution's place in it,
a custom call's batch dimensions, whether a sort comparator orders by one key) found here; and
the called computations (sort's comparator and its key expression, select-and-scatter's select
and scatter) lowered to `ir.Func`s here (`scalar.function` / `value_function`), so a
computation the IR cannot express raises `ScalarComputationError` (a `LoweringError` naming
the library instruction and the instruction inside the computation) while the kernel is
lowered. Nothing later reads the HLO.
"""

from __future__ import annotations

from typing import Any

from hlofuse.backends import lapack_targets
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Buffer, Val
from hlofuse.backends.kernel_ir.libop import HLO_ATTRS, KeyOrder, LibOp
from hlofuse.backends.kernel_ir.lower import index as ix
from hlofuse.backends.kernel_ir.lower import scalar
from hlofuse.backends.kernel_ir.lower.builder import Builder, LoweringError, where
from hlofuse.backends.kernel_ir.lower.index import Index
from hlofuse.backends.sort_key import sort_key
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import LIBRARY_OPS, Opcode
from hlofuse.ir.shape import leaves


def supported(instr: Instruction) -> bool:
    """Is `instr` computed by a library routine: one of the op table's `LIBRARY_OPS`, or a
    custom call of jax's LAPACK targets (`backends/lapack_targets.py`)?"""
    if instr.opcode is Opcode.CUSTOM_CALL:
        return lapack_targets.is_target(instr)
    return instr.opcode in LIBRARY_OPS


def buffers(b: Builder, instr: Instruction) -> list[Buffer]:
    """Buffers holding `instr`'s array leaves, materialising them (in the preamble) if needed."""
    if id(instr) in b.params:
        return b.params[id(instr)]
    key = ("buffers", id(instr))
    found = b.scopes[0].get(key)
    if isinstance(found, list):
        return found
    with b.at_preamble():
        shapes = leaves(instr.shape)
        outs = [b.local(s.dtype, s.size, "m") for s in shapes]
        if supported(instr):
            call(b, instr, outs)
        elif instr.opcode is Opcode.SCATTER:
            from hlofuse.backends.kernel_ir.lower import scatter

            scatter.emit(b, instr, outs, None)
        else:
            from hlofuse.backends.kernel_ir.lower.roots import nest

            for k, (s, buf) in enumerate(zip(shapes, outs, strict=True)):
                def body(idx: Index, k: int = k, buf: Buffer = buf) -> None:
                    b.emit(ir.Store(buf, idx.lin(), b.values(instr, idx)[k]))

                nest(b, tuple(s.dims), body)
        b.scopes[0][key] = outs
    return outs


def call(b: Builder, instr: Instruction, outs: list[Buffer]) -> None:
    """The library call computing `instr` into `outs` (operands materialised first)."""
    if not supported(instr):
        raise LoweringError(
            f"{where(instr)}: the backend has no kernel for {instr.opcode.value} "
            "(not an index map and not a library routine)")
    ins: list[Buffer] = []
    for o in instr.operands:
        ins += buffers(b, o)
    b.comment(instr.opcode.value)
    b.emit(ir.LibCall(library_op(instr), ins, outs))


def library_op(instr: Instruction) -> LibOp:
    """`instr` as a `LibOp` (the module docstring says what it holds)."""
    op = instr.opcode
    attrs: list[tuple[str, Any]] = [(name, _plain(instr, name)) for name in HLO_ATTRS.get(op, ())
                                    if name in instr.attrs]
    funcs: list[tuple[str, ir.Func]] = []

    def lowered(role: str, comp: Computation, root: Instruction | None = None) -> None:
        try:
            func = scalar.function(ir.Graph(), comp, role) if root is None else \
                scalar.value_function(ir.Graph(), comp, role, root)
        except scalar.ScalarComputationError as exc:  # (named where it is met: the op)
            raise scalar.ScalarComputationError(f"{where(instr)}: {exc}") from None
        funcs.append((role, func))

    if op is Opcode.SORT:
        comp = instr.attrs.get("to_apply")
        found = None
        if isinstance(comp, Computation):
            lowered("compare", comp)
            found = sort_key(comp)
            if found is not None and not found.is_parameter:
                lowered("key", comp, found.expr)
        attrs.append(("sort_key", None if found is None else
                      KeyOrder(found.operand, found.dtype, found.descending)))
    elif op is Opcode.SELECT_AND_SCATTER:
        for role in ("select", "scatter"):
            comp = instr.attrs.get(role)
            if isinstance(comp, Computation):
                lowered(role, comp)
    elif op is Opcode.CONVOLUTION:
        from hlofuse.backends.conv_plan import in_entry

        attrs.append(("in_entry", in_entry(instr)))
    elif op is Opcode.CUSTOM_CALL:
        text = str(instr.attrs.get("frontend_attributes", ""))
        attrs.append(("num_batch_dims", lapack_targets.num_batch_dims(text)))
    parent = instr.parent
    return LibOp(op, instr.shape, tuple(o.shape for o in instr.operands),
                 tuple(sorted(attrs, key=lambda a: a[0])), tuple(funcs), instr.name,
                 parent.name if parent is not None else "?")


def _plain(instr: Instruction, name: str) -> Any:
    """An attribute's value as plain data (lists as tuples); never a computation."""
    value = instr.attrs[name]
    if isinstance(value, list):
        value = tuple(value)
    if isinstance(value, Computation | Instruction) or (
            isinstance(value, tuple) and any(isinstance(v, Computation | Instruction)
                                             for v in value)):
        raise LoweringError(f"{where(instr)}: attribute {name} of a library op is not data")
    return value


def values(b: Builder, instr: Instruction, idx: Index) -> list[Val]:
    """`instr`'s leaves at `idx`, read from its materialised buffers."""
    if not supported(instr) and instr.opcode is not Opcode.SCATTER:
        raise LoweringError(
            f"{where(instr)}: cannot lower {instr.opcode.value} here (not an index map and not "
            "a library routine)")
    bufs = buffers(b, instr)
    out = []
    for buf, s in zip(bufs, leaves(instr.shape), strict=True):
        at = idx if idx.dims == tuple(s.dims) else ix.of_linear(tuple(s.dims), idx.lin())
        out.append(b.load(buf, at))
    return out
