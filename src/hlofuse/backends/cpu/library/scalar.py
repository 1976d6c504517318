"""Scalar computations as C: reducers, scatter combiners, sort comparators, select functions.

`scalar_function(comp, name)` gives the C text of

    static inline void NAME(CT p0, CT p1, ..., CT *r0, CT *r1, ...)

where the parameters are the computation's (scalar) parameters in their compute types
(`cexpr.compute_type`: float for f16/bf16) and the results are the root's leaves (a tuple root
gives several). Every instruction becomes one local; tuple and get-tuple-element are resolved
while generating (they cost nothing at run time); `call` and scalar `fusion` are inlined.

`scalar_expression(comp, args)` gives an inline C expression instead, when the computation is
`ROOT r = op(p0, p1)` for a commutative op in `INLINE_OPCODES` (either operand order), so hot
loops read `acc = acc + v` rather than a function call.

Conditions enforced: every parameter and every result is a rank-0 array; every instruction is
elementwise, a scalar constant, a parameter, a tuple/get-tuple-element, a rank-0 broadcast,
reshape, copy or bitcast (identities), or a call/fusion of such a computation. Anything else
raises `ScalarComputationError` naming the instruction.
"""

from __future__ import annotations

import numpy as np

from hlofuse.backends.cpu import cexpr
from hlofuse.errors import CompileError
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape

# Ops whose `op(p0, p1)` form is inlined by `scalar_expression` (commutative: p1 op p0 is the
# same value, so the operand order in the computation does not matter).
INLINE_OPCODES = frozenset(
    {Opcode.ADD, Opcode.MULTIPLY, Opcode.MAXIMUM, Opcode.MINIMUM, Opcode.AND, Opcode.OR,
     Opcode.XOR}
)

# Rank-0 ops that pass their operand through unchanged.
_IDENTITIES = frozenset({Opcode.BROADCAST, Opcode.RESHAPE, Opcode.COPY, Opcode.BITCAST})


class ScalarComputationError(CompileError):
    """A called computation the CPU backend cannot turn into a scalar C function."""


def _where(comp: Computation, instr: Instruction | None = None) -> str:
    if instr is None:
        return f"computation {comp.name}"
    return f"instruction {instr.name} in computation {comp.name}"


def _scalar_shape(comp: Computation, instr: Instruction, shape: object) -> ArrayShape:
    if not isinstance(shape, ArrayShape) or shape.rank != 0:
        raise ScalarComputationError(
            f"cannot compile {_where(comp, instr)} as a scalar function: expected a rank-0 "
            f"array, got {shape}"
        )
    return shape


def _leaves(value: object) -> list[str]:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    assert isinstance(value, str)
    return [value]


class _Body:
    """Accumulates the C statements of one scalar function."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0

    def local(self, ctype: str, expr: str) -> str:
        name = f"v{self.count}"
        self.count += 1
        self.lines.append(f"    const {ctype} {name} = {expr};")
        return name


def _generate(comp: Computation, args: list[object], body: _Body) -> object:
    """Emit `comp`'s instructions into `body` with `args` bound to its parameters; returns the
    root's value (an expression, or a tuple of them)."""
    env: dict[int, object] = {}
    for instr in comp.post_order():
        op = instr.opcode
        if op is Opcode.PARAMETER:
            number = instr.parameter_number or 0
            if number >= len(args):
                raise ScalarComputationError(
                    f"{_where(comp, instr)}: parameter {number} but only {len(args)} arguments"
                )
            value: object = args[number]
        elif op is Opcode.TUPLE:
            value = tuple(env[id(o)] for o in instr.operands)
        elif op is Opcode.GET_TUPLE_ELEMENT:
            whole = env[id(instr.operand(0))]
            assert isinstance(whole, tuple)
            value = whole[int(instr.attrs["index"])]
        elif op in (Opcode.CALL, Opcode.FUSION):
            callee = instr.called_computations()[0]
            value = _generate(callee, [env[id(o)] for o in instr.operands], body)
        elif op is Opcode.CONSTANT:
            shape = _scalar_shape(comp, instr, instr.shape)
            if instr.literal is None:
                raise ScalarComputationError(f"{_where(comp, instr)}: constant without a value")
            scalar = np.asarray(instr.literal).reshape(())[()]
            value = body.local(cexpr.compute_type(shape.dtype), cexpr.literal(scalar, shape.dtype))
        elif op in _IDENTITIES and _is_rank0_identity(instr):
            value = env[id(instr.operand(0))]
        elif instr.is_elementwise:
            shape = _scalar_shape(comp, instr, instr.shape)
            operands = [env[id(o)] for o in instr.operands]
            if any(not isinstance(o, str) for o in operands):
                raise ScalarComputationError(f"{_where(comp, instr)}: tuple-shaped operand")
            expr = cexpr.elementwise(instr, [str(o) for o in operands])
            value = body.local(cexpr.compute_type(shape.dtype), expr)
        else:
            raise ScalarComputationError(
                f"cannot compile {_where(comp, instr)} ({op.value}) as part of a scalar "
                "function: only elementwise ops, scalar constants, tuples and calls are supported"
            )
        env[id(instr)] = value
    return env[id(comp.root)]


def _is_rank0_identity(instr: Instruction) -> bool:
    shape = instr.shape
    src = instr.operand(0).shape
    if not (isinstance(shape, ArrayShape) and isinstance(src, ArrayShape)):
        return False
    if shape.rank or src.rank:
        return False
    # bitcast of a scalar of the same type (a dtype-changing bitcast is bitcast-convert)
    return instr.opcode is not Opcode.BITCAST or shape.dtype == src.dtype


def parameter_shapes(comp: Computation) -> list[ArrayShape]:
    """The computation's parameters, in parameter-number order, checked to be scalars."""
    params = sorted(comp.parameters, key=lambda p: p.parameter_number or 0)
    return [_scalar_shape(comp, p, p.shape) for p in params]


def result_shapes(comp: Computation) -> list[ArrayShape]:
    """The root's leaves, checked to be scalars."""
    shape = comp.root.shape
    leaves = list(shape.elements) if isinstance(shape, TupleShape) else [shape]
    return [_scalar_shape(comp, comp.root, s) for s in leaves]


def scalar_function(comp: Computation, name: str) -> str:
    """C text of `static inline void NAME(CT p0, ..., CT *r0, ...)` computing `comp`."""
    params = parameter_shapes(comp)
    results = result_shapes(comp)
    signature = [f"{cexpr.compute_type(s.dtype)} p{i}" for i, s in enumerate(params)]
    signature += [f"{cexpr.compute_type(s.dtype)} *r{i}" for i, s in enumerate(results)]
    body = _Body()
    root = _generate(comp, [f"p{i}" for i in range(len(params))], body)
    leaves = _leaves(root)
    assert len(leaves) == len(results)
    lines = [f"/* {comp.name} */", f"static inline void {name}({', '.join(signature)}) {{"]
    lines += body.lines
    lines += [f"    *r{i} = {leaf};" for i, leaf in enumerate(leaves)]
    lines.append("}")
    return "\n".join(lines) + "\n"


def scalar_expression(comp: Computation, args: list[str]) -> str | None:
    """An inline C expression for `ROOT r = op(p0, p1)` (op in INLINE_OPCODES, two scalar
    parameters of the root's type), with `args` (compute-type expressions) for p0, p1;
    None for any other computation."""
    root = comp.root
    params = comp.parameters
    if len(params) != 2 or len(args) != 2 or root.opcode not in INLINE_OPCODES:
        return None
    if root.operand_count != 2 or {id(o) for o in root.operands} != {id(p) for p in params}:
        return None
    shape = root.shape
    if not isinstance(shape, ArrayShape) or shape.rank != 0:
        return None
    if any(p.shape != shape for p in params):
        return None
    by_number = {id(p): args[p.parameter_number or 0] for p in params}
    return cexpr.elementwise(root, [f"({by_number[id(o)]})" for o in root.operands])
