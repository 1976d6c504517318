"""`single-device`: rewrite collectives, async wrappers, copy-start/done, domain, the dynamic-size
ops and batch norm into plain HLO with the same value on one device (replica and partition
count 1: what every hlofuse run is). The cpu backend runs this before generating C; the
interpreter runs the ops themselves, with the same semantics (backends/interpreter/
collectives.py, batch_norm.py).

    a = f32[8] all-reduce(x), to_apply=add              ==>  uses of a read x
    s = (f32[8], f32[8], u32[], u32[]) collective-permute-start(x), source_target_pairs={{0,0}}
    d = f32[8] collective-permute-done(s)               ==>  s = tuple(x, x, 0, 0); d = s[1]

Rewrites (each only in the form stated; anything else is left for the backend to refuse):

* all-reduce(-start), collective-broadcast, all-to-all, and all-gather(-start) / reduce-scatter
  whose results have their operands' shapes (a group of one): the operand (a tuple of them when
  there are several); all-reduce-done, async-update, domain: the operand;
* collective-permute(-start) without the in-place operands: the operand when `{0,0}` is among
  the pairs, else zeros (device 0 receives nothing); the -start form builds its
  (operand, result, contexts...) tuple with zero contexts;
* *-done of a start with a tuple result: element 1 (copy-done: element 0); copy-start:
  `(operand, operand, 0)`; async-start: `((operands), call(operands, the wrapped computation),
  zero state)`;
* get-dimension-size: an s32 constant; set-dimension-size by a constant equal to the static size:
  the operand;
* batch-norm-training / -inference / -grad: XLA's BatchNormExpander formulas in the operand's
  type (reductions over every dimension but `feature_index`; see batch_norm.py for the
  definitions), with an added scalar `add` computation.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hlofuse.ir.computation import Computation
from hlofuse.ir.dtypes import S32, DType
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.literal import Literal
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, Shape, TupleShape
from hlofuse.passes.registry import register

Op = Opcode
_PAIR = re.compile(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}")
_IDENTITY = frozenset({Op.ALL_REDUCE, Op.ALL_REDUCE_START, Op.COLLECTIVE_BROADCAST})
_PASS_ON = frozenset({Op.ALL_REDUCE_DONE, Op.ASYNC_UPDATE, Op.DOMAIN})
_ELEMENT_1 = frozenset({Op.ALL_GATHER_DONE, Op.COLLECTIVE_PERMUTE_DONE, Op.ASYNC_DONE})
HANDLED = _IDENTITY | _PASS_ON | _ELEMENT_1 | {
    Op.ALL_TO_ALL, Op.ALL_GATHER, Op.ALL_GATHER_START, Op.REDUCE_SCATTER, Op.COPY_DONE,
    Op.COPY_START, Op.COLLECTIVE_PERMUTE, Op.COLLECTIVE_PERMUTE_START, Op.ASYNC_START,
    Op.GET_DIMENSION_SIZE, Op.SET_DIMENSION_SIZE, Op.BATCH_NORM_TRAINING,
    Op.BATCH_NORM_INFERENCE, Op.BATCH_NORM_GRAD}


class _Builder:
    """Adds instructions to `comp` before `anchor`."""

    def __init__(self, module: Module, comp: Computation, anchor: Instruction) -> None:
        self.module, self.comp, self.anchor = module, comp, anchor

    def add(self, op: Opcode, shape: Shape, operands: list[Instruction] = [],  # noqa: B006
            literal: Literal | None = None, **attrs: object) -> Instruction:
        instr = Instruction.create(op, shape, operands, attrs=dict(attrs), literal=literal,
                                   metadata=self.anchor.metadata)
        return self.comp.add(instr, before=self.anchor)

    def tuple(self, items: list[Instruction]) -> Instruction:
        return self.add(Op.TUPLE, TupleShape(tuple(i.shape for i in items)), items)

    def packed(self, items: list[Instruction]) -> Instruction:
        return items[0] if len(items) == 1 else self.tuple(items)

    def gte(self, value: Instruction, index: int) -> Instruction:
        shape = value.shape
        assert isinstance(shape, TupleShape)
        return self.add(Op.GET_TUPLE_ELEMENT, shape.elements[index], [value], index=index)

    def constant(self, value: object, dtype: DType) -> Instruction:
        return self.add(Op.CONSTANT, ArrayShape(dtype, ()),
                        literal=np.asarray(value, dtype=dtype.np))

    def splat(self, value: object, shape: ArrayShape) -> Instruction:
        c = self.constant(value, shape.dtype)
        return c if shape.rank == 0 else self.add(Op.BROADCAST, shape, [c], dimensions=())

    def zeros(self, shape: Shape) -> Instruction:
        if isinstance(shape, TupleShape):
            return self.tuple([self.zeros(s) for s in shape.elements])
        assert isinstance(shape, ArrayShape)
        return self.splat(0, ArrayShape(shape.dtype, shape.dims))

    def binary(self, op: Opcode, a: Instruction, b: Instruction) -> Instruction:
        return self.add(op, a.shape, [a, b])

    def along(self, v: Instruction, shape: ArrayShape, f: int) -> Instruction:
        """A per-feature vector broadcast along dimension f of `shape`."""
        return self.add(Op.BROADCAST, ArrayShape(shape.dtype, shape.dims), [v], dimensions=(f,))

    def reduce_to_features(self, x: Instruction, f: int, adder: Computation) -> Instruction:
        shape = x.shape
        assert isinstance(shape, ArrayShape)
        axes = tuple(i for i in range(shape.rank) if i != f)
        init = self.constant(0, shape.dtype)
        return self.add(Op.REDUCE, ArrayShape(shape.dtype, (shape.dims[f],)), [x, init],
                        dimensions=axes, to_apply=adder)


def _adder(module: Module, dtype: DType, cache: dict[str, Computation]) -> Computation:
    comp = cache.get(dtype.name)
    if comp is None:
        comp = Computation(f"single_device_add_{dtype.name}")
        scalar = ArrayShape(dtype, ())
        x = comp.add(Instruction.create(Op.PARAMETER, scalar, name="x", parameter_number=0))
        y = comp.add(Instruction.create(Op.PARAMETER, scalar, name="y", parameter_number=1))
        comp.root = comp.add(Instruction.create(Op.ADD, scalar, [x, y], name="sum"))
        module.add_computation(comp)
        cache[dtype.name] = comp
    return comp


def _same_shapes(instr: Instruction, results: tuple[Shape, ...]) -> bool:
    return len(results) == instr.operand_count and all(
        isinstance(r, ArrayShape) and r.dims == o.shape.dims  # type: ignore[union-attr]
        for r, o in zip(results, instr.operands, strict=True))


def _leaves_of(shape: Shape) -> tuple[Shape, ...]:
    return shape.elements if isinstance(shape, TupleShape) else (shape,)


def _permuted(b: _Builder, instr: Instruction) -> Instruction:
    pairs = _PAIR.findall(str(instr.attrs.get("source_target_pairs", "")))
    ops = list(instr.operands)
    if any(int(s) == 0 and int(t) == 0 for s, t in pairs):
        return b.packed(ops)
    return b.packed([b.zeros(o.shape) for o in ops])


def _batch_norm(b: _Builder, instr: Instruction, adder: Computation) -> Instruction:
    x = instr.operand(0)
    shape = x.shape
    assert isinstance(shape, ArrayShape)
    f = int(instr.attrs["feature_index"])
    dt = shape.dtype
    count = math.prod(d for i, d in enumerate(shape.dims) if i != f)
    vec = ArrayShape(dt, (shape.dims[f],))
    eps = b.splat(float(instr.attrs["epsilon"]), vec)
    n = b.splat(max(count, 1), vec)
    mul, sub, add, div = Op.MULTIPLY, Op.SUBTRACT, Op.ADD, Op.DIVIDE
    if instr.opcode is Op.BATCH_NORM_INFERENCE:
        _, scale, offset, mean, var = instr.operands
        inv = b.add(Op.RSQRT, vec, [b.binary(add, var, eps)])
        centred = b.binary(sub, x, b.along(mean, shape, f))
        scaled = b.binary(mul, centred, b.along(b.binary(mul, inv, scale), shape, f))
        return b.binary(add, scaled, b.along(offset, shape, f))
    if instr.opcode is Op.BATCH_NORM_TRAINING:
        _, scale, offset = instr.operands
        mean = b.binary(div, b.reduce_to_features(x, f, adder), n)
        centred = b.binary(sub, x, b.along(mean, shape, f))
        var = b.binary(div, b.reduce_to_features(b.binary(mul, centred, centred), f, adder), n)
        inv = b.add(Op.RSQRT, vec, [b.binary(add, var, eps)])
        scaled = b.binary(mul, centred, b.along(b.binary(mul, inv, scale), shape, f))
        return b.tuple([b.binary(add, scaled, b.along(offset, shape, f)), mean, var])
    _, scale, mean, var, dy = instr.operands  # batch-norm-grad
    inv = b.add(Op.RSQRT, vec, [b.binary(add, var, eps)])
    centred = b.binary(sub, x, b.along(mean, shape, f))
    d_offset = b.reduce_to_features(dy, f, adder)
    d_scale = b.binary(mul, b.reduce_to_features(b.binary(mul, dy, centred), f, adder), inv)
    mean_dy = b.along(b.binary(div, d_offset, n), shape, f)
    slope = b.along(b.binary(div, b.binary(mul, inv, d_scale), n), shape, f)
    inner = b.binary(sub, b.binary(sub, dy, mean_dy), b.binary(mul, centred, slope))
    dx = b.binary(mul, b.along(b.binary(mul, scale, inv), shape, f), inner)
    return b.tuple([dx, d_scale, d_offset])


def _rewrite(b: _Builder, instr: Instruction, adders: dict[str, Computation]) -> Instruction | None:
    op = instr.opcode
    ops = list(instr.operands)
    if op in _IDENTITY:
        return b.packed(ops)
    if op in _PASS_ON:
        return ops[0]
    if op in _ELEMENT_1:
        return b.gte(ops[0], 1) if isinstance(ops[0].shape, TupleShape) else ops[0]
    if op is Op.COPY_DONE:
        return b.gte(ops[0], 0)
    if op is Op.ALL_TO_ALL:
        return ops[0] if isinstance(instr.shape, ArrayShape) else b.tuple(ops)
    if op in (Op.ALL_GATHER, Op.REDUCE_SCATTER):
        return b.packed(ops) if _same_shapes(instr, _leaves_of(instr.shape)) else None
    if op is Op.ALL_GATHER_START:
        shape = instr.shape
        if not (isinstance(shape, TupleShape) and len(shape.elements) == 2):
            return b.packed(ops) if _same_shapes(instr, _leaves_of(shape)) else None
        if not _same_shapes(instr, _leaves_of(shape.elements[1])):
            return None
        return b.tuple([b.packed(ops), b.packed(ops)])
    if op is Op.COLLECTIVE_PERMUTE:
        if "slice_sizes" in instr.attrs or len(ops) == 4:
            return None
        return _permuted(b, instr)
    if op is Op.COLLECTIVE_PERMUTE_START:
        shape = instr.shape
        if "slice_sizes" in instr.attrs or not isinstance(shape, TupleShape) or len(ops) == 4:
            return None
        rest = [b.zeros(s) for s in shape.elements[2:]]
        return b.tuple([b.packed(ops), _permuted(b, instr), *rest])
    if op is Op.COPY_START:
        shape = instr.shape
        assert isinstance(shape, TupleShape)
        return b.tuple([ops[0], ops[0], *[b.zeros(s) for s in shape.elements[2:]]])
    if op is Op.ASYNC_START:
        shape = instr.shape
        comp = instr.attrs.get("calls")
        if isinstance(comp, tuple):
            comp = comp[0] if comp else None
        if comp is None or not isinstance(shape, TupleShape):
            return None
        call = b.add(Op.CALL, shape.elements[1], ops, to_apply=comp)
        return b.tuple([b.tuple(ops), call, *[b.zeros(s) for s in shape.elements[2:]]])
    if op is Op.GET_DIMENSION_SIZE:
        return b.constant(ops[0].shape.dims[int(instr.attrs["dimensions"][0])],  # type: ignore
                          S32)
    if op is Op.SET_DIMENSION_SIZE:
        size = ops[1]
        d = int(instr.attrs["dimensions"][0])
        static = ops[0].shape.dims[d]  # type: ignore[union-attr]
        if size.opcode is Op.CONSTANT and int(np.asarray(size.literal)) == static:
            return ops[0]
        return None
    if op in (Op.BATCH_NORM_TRAINING, Op.BATCH_NORM_INFERENCE, Op.BATCH_NORM_GRAD):
        dt = ops[0].shape.dtype  # type: ignore[union-attr]
        return _batch_norm(b, instr, _adder(b.module, dt, adders))
    return None


def needs_rewrite(module: Module) -> bool:
    return any(i.opcode in HANDLED for i in module.all_instructions())


@register("single-device")
@dataclass(frozen=True)
class SingleDevice:
    """Lower collectives, async wrappers and batch norm to plain HLO for one device."""

    name: ClassVar[str] = "single-device"

    def run(self, module: Module) -> bool:
        changed = False
        adders: dict[str, Computation] = {}
        for comp in list(module.computations):
            for instr in list(comp.instructions):
                if instr.opcode not in HANDLED or instr.parent is not comp:
                    continue
                new = _rewrite(_Builder(module, comp, instr), instr, adders)
                if new is None:
                    continue
                instr.replace_all_uses_with(new)
                if not instr.users and comp.root is not instr:
                    comp.remove(instr)
                changed = True
        return changed


_WHY_LEFT = {
    Op.ALL_GATHER: "its result is not its operand's shape: the module is for a group of several "
                   "devices",
    Op.ALL_GATHER_START: "its result is not its operand's shape: the module is for a group of "
                         "several devices",
    Op.REDUCE_SCATTER: "its result is not its operand's shape: the module is for a group of "
                       "several devices",
    Op.COLLECTIVE_PERMUTE: "the in-place form (input, output, offsets) is not lowered",
    Op.COLLECTIVE_PERMUTE_START: "the in-place form (input, output, offsets) is not lowered",
    Op.SET_DIMENSION_SIZE: "a size that is not the static one needs dynamic shapes",
    Op.DYNAMIC_RESHAPE: "its sizes are run-time values: dynamic shapes are not supported",
    Op.RAGGED_ALL_TO_ALL: "its slice sizes are run-time values (the interpreter runs it)",
    Op.RAGGED_DOT: "ragged-dot is not lowered to C (the interpreter runs it)",
    Op.SCALED_DOT: "block-scaled dot is not implemented",
    Op.SHUFFLE: "shuffle has no documented semantics",
    Op.COLLECTIVE_REDUCE: "collective-reduce has no documented semantics",
    Op.FFT: "fft is not lowered to C (the interpreter runs it)",
}


def leftover_reason(instr: Instruction) -> str | None:
    """Why an op this pass handles or the cpu backend lacks was left as it is (None: it was
    not, or it is not such an op)."""
    return _WHY_LEFT.get(instr.opcode)
