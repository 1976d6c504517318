"""The interpreter's evaluation loop: the opcode dispatch table, computations, control flow.

`HANDLERS` maps each supported `Opcode` to one handler `(interp, instr, operand_values) ->
value`. The op-group modules (elementwise, shaping, reductions, ...) register their handlers here
with `@handles(...)`; this module registers the structural and control-flow ops itself
(constant, tuple, get-tuple-element, call, fusion, while, conditional, map, custom-call, ...).
Parameters are bound by the evaluation loop. Each computation is compiled once per
`Interpreter` into a plan (instructions in post order, operands as slot numbers).

Values are literals: numpy arrays of the HLO element type (`DType.np`) and Python tuples for
tuple shapes. A token is the empty tuple `()`.

Bounds (`ir.limits`): computations evaluate nested at most `MAX_CALL_DEPTH` deep (each level is
a few Python frames; `InterpreterLimitError` beyond), and no result larger than
`allocation_limit()` is attempted; a `MemoryError` (or numpy's "array is too big") from any
handler becomes an `AllocationError` naming the instruction and the bytes of its result.

Scalar computations (reducers, comparators, combiners, `map` functions) are evaluated
*vectorised*: when every instruction of the computation is elementwise (or a parameter, a
scalar constant, a tuple or a get-tuple-element), it is run once on whole numpy arrays instead
of once per element. `Interpreter.apply_scalar` picks that path and falls back to a per-element
loop otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from hlofuse.backends.host_callbacks import TARGETS as HOST_CALLBACK_TARGETS
from hlofuse.backends.host_callbacks import (
    HostCallbacks,
    array_results,
    callback_index,
    invoke,
)
from hlofuse.backends.interpreter.flush import rule as flush_rule
from hlofuse.backends.interpreter.flush import run as flush_run
from hlofuse.backends.subnormals import FLUSH, KEEP
from hlofuse.backends.subnormals import check as check_subnormals
from hlofuse.errors import AllocationError, HloError, InterpreterError, InterpreterLimitError
from hlofuse.ir import limits
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.literal import Literal
from hlofuse.ir.opcodes import IDENTITY_CUSTOM_CALLS, Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape

Handler = Callable[["Interpreter", Instruction, list[Any]], Any]

HANDLERS: dict[Opcode, Handler] = {}

TOKEN: tuple[()] = ()

# Why an opcode without a handler is not interpreted (the default reason is generic).
NO_RULE: dict[Opcode, str] = {
    Opcode.RNG: "the stateful rng op has backend-defined values (use rng-bit-generator)",
    Opcode.RNG_GET_AND_UPDATE_STATE: "stateful rng ops have backend-defined values",
    Opcode.INFEED: "infeed/outfeed need a host transfer channel",
    Opcode.OUTFEED: "infeed/outfeed need a host transfer channel",
    Opcode.SEND: "send/recv need a transfer channel to another device or the host",
    Opcode.SEND_DONE: "send/recv need a transfer channel to another device or the host",
    Opcode.RECV: "send/recv need a transfer channel to another device or the host",
    Opcode.RECV_DONE: "send/recv need a transfer channel to another device or the host",
    Opcode.SCAN: "the scan op is not implemented (JAX lowers lax.scan to a while loop)",
    Opcode.COLLECTIVE_REDUCE: "collective-reduce has no documented semantics in XLA",
    Opcode.SCALED_DOT: "block-scaled dot (scales per block of the operands) is not implemented",
    Opcode.SHUFFLE: "shuffle has no documented semantics in XLA",
}


def handles(*opcodes: Opcode) -> Callable[[Handler], Handler]:
    """Register a handler for one or more opcodes (one handler per opcode)."""

    def register(fn: Handler) -> Handler:
        for op in opcodes:
            assert op not in HANDLERS, f"two handlers for {op}"
            HANDLERS[op] = fn
        return fn

    return register


def where(instr: Instruction) -> str:
    comp = instr.parent.name if instr.parent is not None else "?"
    return f"instruction {instr.name} in {comp}"


def unsupported(instr: Instruction, reason: str) -> InterpreterError:
    """The error for an op or attribute the interpreter cannot run; names the instruction."""
    what = instr.opcode.value
    if instr.opcode is Opcode.CUSTOM_CALL:
        what += f" '{instr.attrs.get('custom_call_target', '?')}'"
    return InterpreterError(f"cannot interpret {what} ({where(instr)}): {reason}")


def array_shape(instr: Instruction) -> ArrayShape:
    shape = instr.shape
    if not isinstance(shape, ArrayShape):
        raise unsupported(instr, f"expected an array-shaped result, got {shape}")
    return shape


def out_np(instr: Instruction) -> np.dtype:
    """The numpy dtype of an array-shaped instruction's result."""
    return array_shape(instr).dtype.np


def as_list(value: Literal) -> list[Any]:
    """A computation result as a list: the elements of a tuple, or the single array."""
    return list(value) if isinstance(value, tuple) else [value]


_SCALAR_SAFE = {
    Opcode.PARAMETER,
    Opcode.CONSTANT,
    Opcode.TUPLE,
    Opcode.GET_TUPLE_ELEMENT,
}


class _Step:
    """One instruction of a computation's evaluation plan."""

    __slots__ = ("dims", "dtype", "flush", "fn", "instr", "nbytes", "operands", "slot")

    def __init__(self, instr: Instruction, slot: int, operands: list[int], flush: bool) -> None:
        self.instr = instr
        self.slot = slot
        self.operands = operands
        self.fn = HANDLERS.get(instr.opcode)
        self.flush = flush_rule(instr) if flush else None
        shape = instr.shape
        self.dims = shape.dims if isinstance(shape, ArrayShape) else None
        self.dtype = shape.dtype.np if isinstance(shape, ArrayShape) else None
        self.nbytes = shape.nbytes if isinstance(shape, ArrayShape) else 0


class _Plan:
    """A computation in evaluation order: parameter slots, steps, and the root's slot (each
    step with its subnormal flushing when `flush`)."""

    def __init__(self, comp: Computation, flush: bool) -> None:
        order = comp.post_order()
        slots = {id(instr): i for i, instr in enumerate(order)}
        self.size = len(order)
        self.params: list[tuple[int, int]] = []
        self.steps: list[_Step] = []
        flushed: set[int] = set()  # slots whose value a step already flushed
        for i, instr in enumerate(order):
            if instr.opcode is Opcode.PARAMETER:
                self.params.append((i, instr.parameter_number or 0))
                continue
            step = _Step(instr, i, [slots[id(o)] for o in instr.operands], flush)
            rule = step.flush
            if rule is not None:  # no second look at what the producer flushed
                ops = tuple(k for k in rule.operands if step.operands[k] not in flushed)
                rule = replace(rule, operands=ops)
                step.flush = rule = rule if rule.acts() else None
                if rule is not None and rule.result:
                    flushed.add(i)
            self.steps.append(step)
        self.root = slots[id(comp.root)]
        self.param_count = len(self.params)
        self.max_nbytes = max((step.nbytes for step in self.steps), default=0)


class Interpreter:
    """Evaluates computations. One instance caches per-computation facts (evaluation plans,
    vectorisability); it holds no values between calls. `subnormals`: "keep" (IEEE 754, the
    default here: constant folding, like XLA's) or "flush" (XLA's CPU runtime, `flush.py`).
    `host_callbacks`: the table host-callback custom calls index (`backends/host_callbacks.py`;
    None: they cannot run)."""

    def __init__(self, subnormals: str = KEEP,
                 host_callbacks: HostCallbacks | None = None) -> None:
        self.flush = check_subnormals(subnormals) == FLUSH
        self.host_callbacks = host_callbacks  # what host-callback custom calls call
        self._plans: dict[int, _Plan] = {}
        self._vectorizable: dict[int, bool] = {}
        self._vectorised_depth = 0  # > 0 while a scalar computation runs on whole arrays
        self._depth = 0  # computations being evaluated, one inside the other
        self._allocation_limit = limits.allocation_limit()

    # ----- computations -------------------------------------------------------------------

    def plan(self, comp: Computation) -> _Plan:
        plan = self._plans.get(id(comp))
        if plan is None:
            plan = self._plans[id(comp)] = _Plan(comp, self.flush)
        return plan

    def call(self, comp: Computation, args: Sequence[Literal], *, check: bool = True) -> Literal:
        """Evaluate `comp` with `args` bound to its parameters; the value of its root.

        With `check`, every array result is checked against its instruction's shape (always
        off while a scalar computation runs vectorised on whole arrays)."""
        if self._depth >= limits.MAX_CALL_DEPTH:
            raise InterpreterLimitError(
                f"computations nest deeper than {limits.MAX_CALL_DEPTH} (calling {comp.name}); "
                "the limit is hlofuse.ir.limits.MAX_CALL_DEPTH")
        self._depth += 1
        try:
            return self._run(comp, args, check)
        finally:
            self._depth -= 1

    def _run(self, comp: Computation, args: Sequence[Literal], check: bool) -> Literal:
        plan = self.plan(comp)
        check = check and not self._vectorised_depth
        if plan.param_count != len(args):
            raise InterpreterError(
                f"computation {comp.name} takes {plan.param_count} parameters, "
                f"called with {len(args)}"
            )
        big = plan.max_nbytes > self._allocation_limit
        env: list[Any] = [None] * plan.size
        for slot, number in plan.params:
            env[slot] = args[number]
        for step in plan.steps:
            fn = step.fn
            instr = step.instr
            if fn is None:
                reason = NO_RULE.get(instr.opcode, "the interpreter has no rule for this opcode")
                raise unsupported(instr, reason)
            if big and step.nbytes > self._allocation_limit:
                limits.check_allocation(step.nbytes, f"the result of {where(instr)}")
            try:
                args = [env[i] for i in step.operands]
                rule = step.flush
                value = fn(self, instr, args) if rule is None \
                    else flush_run(rule, fn, self, instr, args)
            except HloError:
                raise
            except Exception as exc:  # a bug or an unexpected input: name the instruction
                if limits.is_allocation_failure(exc):
                    raise AllocationError(
                        f"interpreting {instr.opcode.value} ({where(instr)}) ran out of memory "
                        f"({type(exc).__name__}: {exc}; the result itself is "
                        f"{limits.format_bytes(step.nbytes)})", step.nbytes,
                        where(instr)) from None
                raise InterpreterError(
                    f"interpreting {instr.opcode.value} ({where(instr)}) failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if isinstance(value, np.generic):  # numpy ops on 0-d arrays return scalars
                value = np.asarray(value)
            if check and step.dims is not None and (
                not isinstance(value, np.ndarray)
                or value.shape != step.dims
                or value.dtype != step.dtype
            ):
                _check_result(instr, value)
            env[step.slot] = value
        return env[plan.root]

    # ----- scalar computations applied to arrays ------------------------------------------

    def is_vectorizable(self, comp: Computation) -> bool:
        """Can `comp` (a scalar computation) run on whole arrays, elementwise?"""
        key = id(comp)
        ok = self._vectorizable.get(key)
        if ok is None:
            ok = all(self._instr_vectorizable(i) for i in comp.instructions)
            self._vectorizable[key] = ok
        return ok

    def _instr_vectorizable(self, instr: Instruction) -> bool:
        if instr.opcode is Opcode.CONSTANT:
            return isinstance(instr.shape, ArrayShape) and instr.shape.rank == 0
        if instr.opcode in _SCALAR_SAFE:
            return True
        if instr.opcode in (Opcode.CALL, Opcode.FUSION):
            return all(self.is_vectorizable(c) for c in instr.called_computations())
        if instr.opcode is Opcode.BROADCAST:  # scalar -> scalar broadcast is an identity
            shape = instr.shape
            return isinstance(shape, ArrayShape) and shape.rank == 0
        if instr.opcode is Opcode.RESHAPE:
            shape = instr.shape
            return isinstance(shape, ArrayShape) and shape.rank == 0
        return instr.is_elementwise

    def apply_scalar(self, comp: Computation, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Apply the scalar computation `comp` elementwise over same-shaped (or broadcastable)
        arrays; returns its outputs (one array per tuple element of its result)."""
        arrays = np.broadcast_arrays(*[np.asarray(a) for a in args])
        shape = arrays[0].shape if arrays else ()
        if self.is_vectorizable(comp):
            self._vectorised_depth += 1
            try:
                outs = as_list(self.call(comp, [np.asarray(a, order="C") for a in arrays]))
            finally:
                self._vectorised_depth -= 1
            return [np.broadcast_to(np.asarray(o), shape).copy() for o in outs]
        # Per-element fallback.
        root_shape = comp.root.shape
        leaves = root_shape.elements if isinstance(root_shape, TupleShape) else (root_shape,)
        results = [np.empty(shape, dtype=s.dtype.np) for s in leaves]  # type: ignore[union-attr]
        for idx in np.ndindex(*shape):
            vals = as_list(self.call(comp, [np.asarray(a[idx]) for a in arrays]))
            for r, v in zip(results, vals, strict=True):
                r[idx] = v
        return results


def _check_result(instr: Instruction, value: Any) -> None:
    shape = instr.shape
    if not isinstance(shape, ArrayShape):
        return
    if not isinstance(value, np.ndarray):
        raise InterpreterError(
            f"interpreting {instr.opcode.value} ({where(instr)}) produced a "
            f"{type(value).__name__}, expected an array {shape}"
        )
    if value.shape != shape.dims or value.dtype != shape.dtype.np:
        got = f"{value.dtype}{list(value.shape)}"
        raise InterpreterError(
            f"interpreting {instr.opcode.value} ({where(instr)}) produced {got}, "
            f"expected {shape}: the module's shapes are inconsistent, or this is an "
            "interpreter bug"
        )


# ----- structural ops ---------------------------------------------------------------------


@handles(Opcode.CONSTANT)
def _constant(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    value = instr.literal
    if value is None:
        raise unsupported(instr, "constant has no literal value")
    if isinstance(instr.shape, ArrayShape):
        arr = np.asarray(value, dtype=instr.shape.dtype.np).reshape(instr.shape.dims).view()
        arr.flags.writeable = False  # a view of the module's literal: never written
        return arr
    return value


@handles(Opcode.TUPLE)
def _tuple(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    return tuple(ops)


@handles(Opcode.GET_TUPLE_ELEMENT)
def _gte(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    value = ops[0]
    if not isinstance(value, tuple):
        raise unsupported(instr, "operand is not a tuple")
    return value[int(instr.attrs["index"])]


@handles(Opcode.COPY)
def _copy(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    value = ops[0]
    if isinstance(value, tuple):
        return value
    return np.array(value, copy=True)


@handles(Opcode.OPTIMIZATION_BARRIER)
def _identity(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    return ops[0]


@handles(Opcode.AFTER_ALL)
def _after_all(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    return TOKEN


@handles(Opcode.ADD_DEPENDENCY)
def _add_dependency(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    return ops[0]


@handles(Opcode.PARTITION_ID, Opcode.REPLICA_ID)
def _device_id(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    return np.zeros(array_shape(instr).dims, dtype=out_np(instr))


# ----- control flow -----------------------------------------------------------------------


def _callee(instr: Instruction, key: str) -> Computation:
    comp = instr.attrs.get(key)
    if isinstance(comp, tuple):
        comp = comp[0] if comp else None
    if comp is None:
        raise unsupported(instr, f"missing {key}= computation")
    return comp


@handles(Opcode.CALL)
def _call(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    return interp.call(_callee(instr, "to_apply"), ops)


@handles(Opcode.FUSION)
def _fusion(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    return interp.call(_callee(instr, "calls"), ops)


@handles(Opcode.WHILE)
def _while(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    cond = _callee(instr, "condition")
    body = _callee(instr, "body")
    state = ops[0]
    while bool(np.asarray(interp.call(cond, [state]))):
        state = interp.call(body, [state])
    return state


@handles(Opcode.CONDITIONAL)
def _conditional(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    selector = np.asarray(ops[0])
    branches = instr.attrs.get("branch_computations")
    if branches:
        index = int(selector)
        if not 0 <= index < len(branches):
            index = len(branches) - 1  # XLA: an out-of-range index runs the last branch
        return interp.call(branches[index], [ops[1 + index]])
    if selector.dtype != np.bool_:
        raise unsupported(instr, "a non-pred selector needs branch_computations")
    if bool(selector):
        return interp.call(_callee(instr, "true_computation"), [ops[1]])
    return interp.call(_callee(instr, "false_computation"), [ops[2]])


@handles(Opcode.MAP)
def _map(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    outs = interp.apply_scalar(_callee(instr, "to_apply"), ops)
    return outs[0].astype(out_np(instr), copy=False).reshape(array_shape(instr).dims)


def _host_callback(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    """The caller's Python function (`backends/host_callbacks.py`): array operands in (tokens
    left out), the results checked against the instruction's array leaves, tokens put back."""
    table = interp.host_callbacks
    if table is None:
        raise unsupported(instr, "a host callback (a Python function: jax.pure_callback, "
                                 "io_callback, debug.print) needs a callback table (hlofuse.jit "
                                 "passes jax's; hlofuse.compile(..., host_callbacks=[...]))")
    args = [v for o, v in zip(instr.operands, ops, strict=True)
            if isinstance(o.shape, ArrayShape)]
    results = iter(invoke(table, callback_index(instr), instr, args, array_results(instr)))

    def value(shape: Any) -> Literal:
        if isinstance(shape, ArrayShape):
            return next(results)
        if isinstance(shape, TupleShape):
            return tuple(value(e) for e in shape.elements)
        return TOKEN

    return value(instr.shape)




# Custom-call targets other modules run: (does it take this target name?, handler); lapack.py
# registers jax's LAPACK calls.
TARGET_HANDLERS: list[tuple[Callable[[str], bool], Handler]] = []


def register_custom_call(accepts: Callable[[str], bool], handler: Handler) -> None:
    """Run the custom calls whose target `accepts` with `handler`."""
    TARGET_HANDLERS.append((accepts, handler))


@handles(Opcode.CUSTOM_CALL)
def _custom_call(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Literal:
    target = str(instr.attrs.get("custom_call_target", ""))
    if target in IDENTITY_CUSTOM_CALLS and len(ops) == 1:
        return ops[0]
    if target in HOST_CALLBACK_TARGETS:
        return _host_callback(interp, instr, ops)
    for accepts, handler in TARGET_HANDLERS:
        if accepts(target):
            return handler(interp, instr, ops)
    raise unsupported(instr, "custom calls are opaque")

