"""Scalar computations (reducers, scatter combiners, map functions, sort comparators, select
functions) as kernel-IR values.

    inline(g, comp, args) -> [Val]   the root's leaves with `args` bound to the parameters
    function(g, comp, name) -> Func  the same over `param` values, for library routines
    simple_reducer(comp), identity(op, dtype)   a reassociable reducer's opcode, its identity
                                     (`ir.reducers`, the one place they are defined)
    value_function(g, comp, name, root) -> Func   one inner instruction's value, the same way

Kernels inline reducers (so a vector loop combines vectors); library routines (sort,
select-and-scatter) call a `Func`, which the printer emits as a static inline function.

Conditions enforced: every parameter and every result is a rank-0 array; every instruction is
elementwise, a scalar constant, a parameter, a tuple/get-tuple-element, a rank-0 broadcast,
reshape, copy or same-type bitcast (identities), or a call/fusion of such a computation (inlined).
Anything else raises `ScalarComputationError` (a `LoweringError`) naming the instruction. The
traversal is iterative over instructions, with called computations inlined through an explicit
stack.
"""

from __future__ import annotations

import numpy as np

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Graph, Val
from hlofuse.backends.kernel_ir.lower.builder import LoweringError
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.reducers import identity, simple_reducer  # noqa: F401 (re-exported)
from hlofuse.ir.shape import ArrayShape, TupleShape

_IDENTITIES = frozenset({Opcode.BROADCAST, Opcode.RESHAPE, Opcode.COPY, Opcode.BITCAST})
MAX_CALL_DEPTH = 64


class ScalarComputationError(LoweringError):
    """A called computation the backend cannot turn into scalar code (a `LoweringError`: it is
    raised while a kernel is lowered, a library op's comparator included)."""


def _where(comp: Computation, instr: Instruction | None = None) -> str:
    if instr is None:
        return f"computation {comp.name}"
    return f"instruction {instr.name} in computation {comp.name}"


def _scalar_shape(comp: Computation, instr: Instruction, shape: object) -> ArrayShape:
    if not isinstance(shape, ArrayShape) or shape.rank != 0:
        raise ScalarComputationError(
            f"cannot compile {_where(comp, instr)} as scalar code: expected a rank-0 array, "
            f"got {shape}")
    return shape


def _is_rank0_identity(instr: Instruction) -> bool:
    shape, src = instr.shape, instr.operand(0).shape
    if not (isinstance(shape, ArrayShape) and isinstance(src, ArrayShape)):
        return False
    if shape.rank or src.rank:
        return False
    return instr.opcode is not Opcode.BITCAST or shape.dtype == src.dtype


Value = Val | tuple  # a tuple-shaped value is a (nested) tuple of Vals


def _flat(value: Value) -> list[Val]:
    out: list[Val] = []
    stack: list[Value] = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, tuple):
            stack.extend(reversed(v))
        else:
            out.append(v)
    return out


def _evaluate(g: Graph, comp: Computation, args: list[Value], depth: int = 0,
              root: Instruction | None = None) -> Value:
    from hlofuse.backends.kernel_ir.lower.elementwise import alu_of

    if depth > MAX_CALL_DEPTH:
        raise ScalarComputationError(
            f"{_where(comp)}: calls nest deeper than {MAX_CALL_DEPTH} levels")
    env: dict[int, Value] = {}
    for instr in comp.post_order():
        op = instr.opcode
        value: Value
        if op is Opcode.PARAMETER:
            number = instr.parameter_number or 0
            if number >= len(args):
                raise ScalarComputationError(
                    f"{_where(comp, instr)}: parameter {number} but only {len(args)} arguments")
            value = args[number]
        elif op is Opcode.TUPLE:
            value = tuple(env[id(o)] for o in instr.operands)
        elif op is Opcode.GET_TUPLE_ELEMENT:
            whole = env[id(instr.operand(0))]
            assert isinstance(whole, tuple)
            value = whole[int(instr.attrs["index"])]
        elif op in (Opcode.CALL, Opcode.FUSION):
            callee = instr.called_computations()[0]
            value = _evaluate(g, callee, [env[id(o)] for o in instr.operands], depth + 1)
        elif op is Opcode.CONSTANT:
            shape = _scalar_shape(comp, instr, instr.shape)
            if instr.literal is None:
                raise ScalarComputationError(f"{_where(comp, instr)}: constant without a value")
            value = g.const(np.asarray(instr.literal).reshape(())[()], shape.dtype)
        elif op in _IDENTITIES and _is_rank0_identity(instr):
            value = env[id(instr.operand(0))]
        elif instr.is_elementwise:
            _scalar_shape(comp, instr, instr.shape)
            operands = [env[id(o)] for o in instr.operands]
            if any(isinstance(o, tuple) for o in operands):
                raise ScalarComputationError(f"{_where(comp, instr)}: tuple-shaped operand")
            value = operands[0] if op is Opcode.COPY else \
                alu_of(g, instr, operands)  # type: ignore[arg-type]
        else:
            raise ScalarComputationError(
                f"cannot compile {_where(comp, instr)} ({op.value}) as scalar code: only "
                "elementwise ops, scalar constants, tuples and calls are supported")
        env[id(instr)] = value
    return env[id(root if root is not None else comp.root)]


def parameter_shapes(comp: Computation) -> list[ArrayShape]:
    params = sorted(comp.parameters, key=lambda p: p.parameter_number or 0)
    return [_scalar_shape(comp, p, p.shape) for p in params]


def result_shapes(comp: Computation) -> list[ArrayShape]:
    shape = comp.root.shape
    leaves = list(shape.elements) if isinstance(shape, TupleShape) else [shape]
    return [_scalar_shape(comp, comp.root, s) for s in leaves]


def inline(g: Graph, comp: Computation, args: list[Val]) -> list[Val]:
    """The root's leaves of `comp` with `args` bound to its (scalar) parameters."""
    parameter_shapes(comp)
    result_shapes(comp)
    return _flat(_evaluate(g, comp, list(args)))


def function(g: Graph, comp: Computation, name: str) -> ir.Func:
    """`comp` as a scalar function over `param` values."""
    params = [g.param(k, s.dtype) for k, s in enumerate(parameter_shapes(comp))]
    results = inline(g, comp, params)
    return ir.Func(name, params, results)


def value_function(g: Graph, comp: Computation, name: str, root: Instruction) -> ir.Func:
    """The value of `root`, an instruction of `comp` with a rank-0 shape, as a scalar function
    over all of `comp`'s parameters (a sort comparator's key expression, for example)."""
    params = [g.param(k, s.dtype) for k, s in enumerate(parameter_shapes(comp))]
    _scalar_shape(comp, root, root.shape)
    value = _evaluate(g, comp, list(params), root=root)
    if isinstance(value, tuple):
        raise ScalarComputationError(f"{_where(comp, root)}: tuple-shaped value")
    return ir.Func(name, params, [value])


