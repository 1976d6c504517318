"""Collectives, async wrappers and the other ops that only move or relabel data, on one device.

hlofuse runs a module on one device (replica and partition count 1, replica and partition id
0), where XLA's collectives reduce to data movement within that device:

* all-reduce(-start), collective-broadcast, all-to-all: the identity (a tuple of the operands
  when there are several); all-reduce-done: its operand;
* all-gather(-start), reduce-scatter: a copy when the written result has the operand's shape
  (a group of one device); otherwise the module is for a larger group and is refused;
* collective-permute(-start): device 0 receives from the pair whose target is 0: a copy when
  `{0,0}` is among `source_target_pairs`, zeros otherwise (no device sends to it); the in-place
  form (input, output, offsets) is refused;
* ragged-all-to-all: the one peer's slice `input[input_offsets[0]:][:send_sizes[0]]` written
  into `output` at `output_offsets[0]` (offset and size vectors of length 1);
* *-start ops produce their declared tuple (operands, result, zero contexts); *-done ops read the
  result element (copy-done element 0, the destination);
* async-start calls its wrapped computation: `((operands...), result, zero state...)`;
  async-update passes its operand on; async-done reads element 1;
* copy-start: `(copy, operand, u32 context 0)`; domain: the identity;
* get-dimension-size: the static size; set-dimension-size and dynamic-reshape only where the
  sizes given are the static ones (dynamic dimensions are not modelled).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from hlofuse.backends.interpreter.core import (
    Interpreter,
    array_shape,
    handles,
    out_np,
    unsupported,
)
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.literal import Literal
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, Shape, TupleShape

Op = Opcode


def zeros_of(shape: Shape) -> Literal:
    """A value of `shape` with every element zero (tokens are `()`)."""
    if isinstance(shape, TupleShape):
        return tuple(zeros_of(s) for s in shape.elements)
    if isinstance(shape, ArrayShape):
        return np.zeros(shape.dims, dtype=shape.dtype.np)
    return ()


def _packed(ops: list[Any]) -> Literal:
    return ops[0] if len(ops) == 1 else tuple(ops)


def _copy(value: Literal) -> Literal:
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    return np.array(value, copy=True)


@handles(Op.ALL_REDUCE, Op.ALL_REDUCE_START, Op.COLLECTIVE_BROADCAST)
def _all_reduce(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    return _copy(_packed(ops))


@handles(Op.ALL_TO_ALL)
def _all_to_all(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    copied = [_copy(o) for o in ops]
    return copied[0] if isinstance(instr.shape, ArrayShape) else tuple(copied)


def _results(instr: Instruction) -> tuple[Shape, ...]:
    shape = instr.shape
    if instr.opcode is Op.ALL_GATHER_START and isinstance(shape, TupleShape) \
            and len(shape.elements) == 2:
        shape = shape.elements[1]
    return shape.elements if isinstance(shape, TupleShape) else (shape,)


def _same_size(instr: Instruction, ops: list[Any]) -> list[np.ndarray]:
    """all-gather / reduce-scatter on a group of one: each result is its operand."""
    results = _results(instr)
    for o, r in zip(ops, results, strict=True):
        if not isinstance(r, ArrayShape) or tuple(np.shape(o)) != r.dims:
            raise unsupported(
                instr, f"its result {r} is not its operand's shape {np.shape(o)}: the module is "
                "for a group of several devices, and hlofuse runs one")
    return [np.array(o, copy=True) for o in ops]


@handles(Op.ALL_GATHER, Op.REDUCE_SCATTER)
def _all_gather(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    out = _same_size(instr, ops)
    return tuple(out) if isinstance(instr.shape, TupleShape) else out[0]


@handles(Op.ALL_GATHER_START)
def _all_gather_start(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    out = _same_size(instr, ops)
    shape = instr.shape
    if isinstance(shape, TupleShape) and len(shape.elements) == 2 and \
            isinstance(shape.elements[1], TupleShape):
        return (tuple(ops), tuple(out))
    if isinstance(shape, TupleShape) and len(shape.elements) == 2 and len(ops) == 1:
        return (ops[0], out[0])
    return tuple(out) if isinstance(shape, TupleShape) else out[0]


_PAIR = re.compile(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}")


def _permute(instr: Instruction, ops: list[Any]) -> Literal:
    if "slice_sizes" in instr.attrs or len(ops) == 4:
        raise unsupported(instr, "the in-place form of collective-permute is not interpreted")
    pairs = _PAIR.findall(str(instr.attrs.get("source_target_pairs", "")))
    receives = any(int(s) == 0 and int(t) == 0 for s, t in pairs)
    values = [np.array(o, copy=True) if receives else np.zeros_like(o) for o in ops]
    return _packed(values)


@handles(Op.COLLECTIVE_PERMUTE)
def _collective_permute(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    return _permute(instr, ops)


@handles(Op.COLLECTIVE_PERMUTE_START)
def _collective_permute_start(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    shape = instr.shape
    if not isinstance(shape, TupleShape) or len(shape.elements) < 2:
        raise unsupported(instr, f"expected an (operand, result, contexts...) tuple, got {shape}")
    rest = tuple(zeros_of(s) for s in shape.elements[2:])
    return (_packed(ops), _permute(instr, ops), *rest)


@handles(Op.ALL_REDUCE_DONE)
def _all_reduce_done(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    return ops[0]


@handles(Op.COLLECTIVE_PERMUTE_DONE, Op.ALL_GATHER_DONE, Op.ASYNC_DONE)
def _done(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    start = ops[0]
    return start[1] if isinstance(start, tuple) else start


@handles(Op.COPY_DONE)
def _copy_done(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    return ops[0][0]


@handles(Op.COPY_START)
def _copy_start(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    shape = instr.shape
    assert isinstance(shape, TupleShape)
    rest = tuple(zeros_of(s) for s in shape.elements[2:])
    return (_copy(ops[0]), ops[0], *rest)


@handles(Op.RAGGED_ALL_TO_ALL)
def _ragged_all_to_all(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    data, output = np.asarray(ops[0]), np.array(ops[1], copy=True)
    vectors = [np.asarray(v).astype(np.int64) for v in ops[2:6]]
    if any(v.shape != (1,) for v in vectors):
        raise unsupported(instr, "its offsets and sizes name several peers; hlofuse runs one "
                          "device")
    in_off, size, out_off, _ = (int(v[0]) for v in vectors)
    if min(in_off, size, out_off) < 0 or in_off + size > data.shape[0] or \
            out_off + size > output.shape[0]:
        raise unsupported(instr, f"the slice [{in_off}, {in_off + size}) to offset {out_off} "
                          "is out of bounds")
    output[out_off:out_off + size] = data[in_off:in_off + size]
    return output


@handles(Op.ASYNC_START)
def _async_start(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    comp = instr.attrs.get("calls")
    if isinstance(comp, tuple):
        comp = comp[0] if comp else None
    if comp is None:
        raise unsupported(instr, "missing calls= computation")
    shape = instr.shape
    assert isinstance(shape, TupleShape)
    state = tuple(zeros_of(s) for s in shape.elements[2:])
    return (tuple(ops), interp.call(comp, ops), *state)


@handles(Op.ASYNC_UPDATE, Op.DOMAIN)
def _pass_on(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    return ops[0]


@handles(Op.GET_DIMENSION_SIZE)
def _get_dimension_size(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    d = int(instr.attrs["dimensions"][0])
    return np.asarray(np.shape(ops[0])[d], dtype=out_np(instr))


@handles(Op.SET_DIMENSION_SIZE)
def _set_dimension_size(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    d = int(instr.attrs["dimensions"][0])
    size, static = int(np.asarray(ops[1])), np.shape(ops[0])[d]
    if size != static:
        raise unsupported(instr, f"dimension {d} set to {size} of {static}: dynamic dimension "
                          "sizes are not modelled")
    return ops[0]


@handles(Op.DYNAMIC_RESHAPE)
def _dynamic_reshape(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    dims = array_shape(instr).dims
    sizes = tuple(int(np.asarray(s)) for s in ops[1:])
    if sizes != dims:
        raise unsupported(instr, f"sizes {list(sizes)} are not the static result dimensions "
                          f"{list(dims)}: dynamic dimension sizes are not modelled")
    return np.asarray(ops[0]).reshape(dims)
