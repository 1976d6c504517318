"""The reference interpreter: hlofuse's executable specification of HLO, in numpy.

    from hlofuse.backends import interpreter
    out = interpreter.evaluate(module, [x, y])     # value of the entry root (arrays / tuples)
    leaves = interpreter.run(module, x, y)         # list of output arrays, tuples flattened

Arguments must match the entry parameters exactly (shape and element type; no implicit
casts): `check_args` raises `InputError` naming the parameter otherwise. An op or attribute
the interpreter cannot run raises `InterpreterError` naming the opcode and the instruction.
`SUPPORTED` is the set of opcodes it interprets (custom-call only for the identity targets
in `IDENTITY_CUSTOM_CALLS`, jax's LAPACK calls, `lapack.py`, and host callbacks: the caller's
Python functions, `backends/host_callbacks.py`, given as `host_callbacks=`).

Dispatch is one handler per opcode (`core.HANDLERS`, each `(Interpreter, instr, operand
values) -> value`); op groups live in elementwise (with numerics), conversions, shaping,
reductions, convolution, indexing, sorting, rng, linalg, lapack (jax's LAPACK custom calls),
batch_norm and collectives (one-device semantics of collectives, async wrappers and copies).
Parameters are bound by the evaluation loop itself.

Numerics: every float op is computed in f64 and rounded once to its result type, so + - * /
sqrt are correctly rounded and transcendentals are (nearly always) correctly rounded too;
XLA's CPU backend uses polynomial approximations (a few ulp away). f32/f64 sums and dots
accumulate in f64 and round once; f16/bf16 reductions accumulate in their own type, one
rounding per reducer application, in order (`reductions.py`), as XLA's CPU backend does.

Subnormals (`subnormals=`, `backends/subnormals.py`): "flush" (the default of `run`,
`evaluate` and `evaluate_computation`) emulates XLA's CPU runtime, which runs with FTZ and DAZ
set: f32/f64/bf16 arithmetic reads subnormal operands and writes subnormal results as zeros of
their sign, ops that only move bits keep them (`flush.py`); "keep" is IEEE 754. The
`Interpreter` class itself keeps them unless told otherwise: constant folding, like XLA's,
computes in IEEE arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hlofuse.backends.host_callbacks import HostCallbacks
from hlofuse.backends.interpreter import (  # noqa: F401  (register the handlers)
    batch_norm,
    collectives,
    conversions,
    convolution,
    elementwise,
    indexing,
    lapack,
    linalg,
    reductions,
    rng,
    shaping,
    sorting,
)
from hlofuse.backends.interpreter.core import HANDLERS, IDENTITY_CUSTOM_CALLS, Interpreter
from hlofuse.backends.subnormals import DEFAULT as DEFAULT_SUBNORMALS
from hlofuse.errors import InputError
from hlofuse.ir.computation import Computation
from hlofuse.ir.dtypes import from_numpy
from hlofuse.ir.literal import Literal, flatten
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, Shape, TokenShape, TupleShape, format_shape

SUPPORTED: frozenset[Opcode] = (frozenset(HANDLERS) | {Opcode.PARAMETER}) - {Opcode.CUSTOM_CALL}

__all__ = [
    "IDENTITY_CUSTOM_CALLS",
    "SUPPORTED",
    "check_args",
    "evaluate",
    "evaluate_computation",
    "run",
]


def _describe(value: object, depth: int = 0) -> str:
    """A value's type and shape for a message (nested tuples cut off: the value is the
    caller's, and may be arbitrarily deep)."""
    if isinstance(value, np.ndarray):
        try:
            dt = from_numpy(value.dtype).name
        except ValueError:
            dt = f"numpy {value.dtype}"
        return f"{dt}[{','.join(str(d) for d in value.shape)}]"
    if isinstance(value, tuple):
        if depth >= 4:
            return "(...)"
        inner = [_describe(v, depth + 1) for v in value[:8]]
        return "(" + ", ".join(inner) + (", ..." if len(value) > 8 else "") + ")"
    return f"a Python {type(value).__name__}"


def _check_value(value: object, shape: Shape) -> bool:
    """Does `value` match `shape`? Recursion follows the shape (bounded by the verifier's
    tuple nesting limit), never the value."""
    if isinstance(shape, TokenShape):
        return True
    if isinstance(shape, TupleShape):
        return (
            isinstance(value, tuple)
            and len(value) == len(shape.elements)
            and all(_check_value(v, s) for v, s in zip(value, shape.elements, strict=True))
        )
    assert isinstance(shape, ArrayShape)
    return (
        isinstance(value, np.ndarray)
        and value.dtype == shape.dtype.np
        and tuple(value.shape) == shape.dims
    )


def _normalise(value: object, shape: Shape) -> object:
    """numpy scalars become 0-d arrays (nothing else is converted); follows `shape`."""
    if isinstance(value, np.generic):
        return np.asarray(value)
    if (isinstance(value, tuple) and isinstance(shape, TupleShape)
            and len(value) == len(shape.elements)):
        return tuple(_normalise(v, s) for v, s in zip(value, shape.elements, strict=True))
    return value


def check_args(module: Module, args: Sequence[Literal]) -> list[Literal]:
    """Check `args` against the entry computation's parameters; returns them (numpy scalars
    become 0-d arrays). Raises InputError naming the first mismatching parameter."""
    params = module.entry.parameters
    if len(args) != len(params):
        listing = ", ".join(f"{p.name}: {format_shape(p.shape, False)}" for p in params)
        raise InputError(
            f"{module.name} takes {len(params)} argument(s) ({listing}), got {len(args)}"
        )
    out: list[Literal] = []
    for i, (p, given) in enumerate(zip(params, args, strict=True)):
        a = _normalise(given, p.shape)
        if not _check_value(a, p.shape):
            raise InputError(
                f"parameter {i} ({p.name}): expected {format_shape(p.shape, False)}, "
                f"got {_describe(a)}"
            )
        out.append(a)  # type: ignore[arg-type]
    return out


def _writable(value: Literal) -> Literal:
    """Copy read-only leaves (views of constants in the module) so callers own the result."""
    if isinstance(value, tuple):
        return tuple(_writable(v) for v in value)
    return value if value.flags.writeable else value.copy()


def evaluate_computation(comp: Computation, args: Sequence[Literal], *,
                         subnormals: str = DEFAULT_SUBNORMALS,
                         host_callbacks: HostCallbacks | None = None) -> Literal:
    """The value of `comp`'s root with `args` bound to its parameters (not checked).
    `host_callbacks`: the table the module's host callbacks index (`backends/host_callbacks.py`)."""
    interp = Interpreter(subnormals, host_callbacks)
    with np.errstate(all="ignore"):
        return _writable(interp.call(comp, list(args)))


def evaluate(module: Module, args: Sequence[Literal], *,
             subnormals: str = DEFAULT_SUBNORMALS,
             host_callbacks: HostCallbacks | None = None) -> Literal:
    """The value of the entry computation's root: an array, or a tuple of values."""
    from hlofuse.backends.static_shapes import require_static

    require_static(module)
    checked = check_args(module, args)
    return evaluate_computation(module.entry, checked, subnormals=subnormals,
                                host_callbacks=host_callbacks)


def run(module: Module, *args: Literal, subnormals: str = DEFAULT_SUBNORMALS,
        host_callbacks: HostCallbacks | None = None) -> list[np.ndarray]:
    """Evaluate and flatten the result: the leaves of nested tuples, depth-first."""
    return flatten(evaluate(module, args, subnormals=subnormals,
                            host_callbacks=host_callbacks))
