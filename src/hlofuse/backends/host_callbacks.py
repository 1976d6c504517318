"""Host callbacks: custom calls that run a Python function of the caller, for every backend.

jax lowers `jax.pure_callback`, `jax.experimental.io_callback`, `jax.debug.print` and
`jax.debug.callback` on CPU to

    custom-call(operands...), custom_call_target="xla_ffi_python_cpu_callback",
        api_version=API_VERSION_TYPED_FFI, backend_config={index = 3 : ui64}

(`xla_ffi_partitioned_python_cpu_callback` inside shard_map; an ordered effect takes a token
operand and returns (token, results...); io_callback and debug callbacks carry
`custom_call_has_side_effect=true`). The module names a callback by its index into a table the
caller supplies when the executable is built: a sequence of Python callables

    f(*arrays: np.ndarray) -> Sequence[np.ndarray]

(`HostCallbacks`): the instruction's array operands in, its array results out (tokens are
neither passed nor returned; `frontends/jax.py` adapts jax's own callables, which take and
return the token). The core knows nothing of JAX: `hlofuse.compile(..., host_callbacks=)`,
`build_runner` and the backends take a table; the CLI has none.

    is_host_callback(instr)          a custom call of one of `TARGETS`
    callback_index(instr)            its table index (backend_config), checked
    sites(module)                    every host callback the module can run
    check_table(module, table, err)  every site's index has a callable (raises `err` otherwise)
    invoke(table, index, instr, args, results)  call one, check what it returned

Conditions enforced (`HostCallbackError`, naming the instruction, unless said otherwise):
backend_config is exactly `{index = N : ui64}` (or `{index = N}`) with N a table index; a
module with a host callback and no table is refused when it is built (the error class the
backend uses for ops it cannot run: `UnsupportedOpError` on cpu, `InterpreterError` on the
interpreter); what a callback returns must be as many arrays as the instruction has array
results, each of exactly the result's shape and element type (numpy scalars and 0-d values are
arrays; a Python scalar is converted to the result's dtype only if that loses nothing). A
callback's arguments are fresh copies the callback may keep or write. An exception it raises
stops the run and reaches the caller as `HostCallbackError` naming the instruction, raised
from the callback's own exception (`__cause__`); KeyboardInterrupt and SystemExit propagate
as they are.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hlofuse.errors import HloError, HostCallbackError
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, leaves

HostCallback = Callable[..., Sequence[Any]]
HostCallbacks = Sequence[HostCallback]

TARGETS = frozenset({"xla_ffi_python_cpu_callback", "xla_ffi_partitioned_python_cpu_callback"})

_INDEX = re.compile(r"\{\s*index\s*=\s*(\d{1,19})\s*(?::\s*ui64\s*)?\}")


def is_host_callback(instr: Instruction) -> bool:
    return (instr.opcode is Opcode.CUSTOM_CALL
            and instr.attrs.get("custom_call_target") in TARGETS)


def where(instr: Instruction) -> str:
    comp = instr.parent.name if instr.parent is not None else "?"
    return f"instruction {instr.name} in {comp}"


def callback_index(instr: Instruction) -> int:
    """The table index in `instr`'s backend_config (`{index = 3 : ui64}`)."""
    config = instr.attrs.get("backend_config")
    m = _INDEX.fullmatch(config.strip()) if isinstance(config, str) else None
    if m is None:
        raise HostCallbackError(f"{where(instr)}: a host callback needs backend_config="
                                "{index = N : ui64}")
    return int(m.group(1))


def array_results(instr: Instruction) -> list[ArrayShape]:
    """The results the callback returns: the result's array leaves (tokens left out)."""
    return leaves(instr.shape)


def sites(module: Module) -> list[Instruction]:
    """Every host callback of every computation of `module`."""
    return [i for comp in module.computations for i in comp.instructions
            if is_host_callback(i)]


def check_table(module: Module, table: HostCallbacks | None,
                error: type[HloError] = HostCallbackError) -> None:
    """Raise `error` naming the first host callback `table` cannot run (none given, or its
    index beyond the table)."""
    for instr in sites(module):
        index = callback_index(instr)
        if table is None:
            raise error(f"{where(instr)}: the custom call runs host callback {index} (a Python "
                        "function: jax.pure_callback, io_callback, debug.print), but no "
                        "callback table was given (hlofuse.jit passes jax's; "
                        "hlofuse.compile(..., host_callbacks=[...]))")
        if index >= len(table):
            raise error(f"{where(instr)}: host callback {index} is not in the table of "
                        f"{len(table)}")
        if not callable(table[index]):
            raise error(f"{where(instr)}: host callback {index} is not callable")


def invoke(table: HostCallbacks, index: int, instr: Instruction | str,
           args: Sequence[np.ndarray], results: Sequence[ArrayShape]) -> list[np.ndarray]:
    """Call `table[index]` with copies of `args`; its results, checked against `results`.
    `instr`: the instruction (or its description) for messages."""
    what = instr if isinstance(instr, str) else where(instr)
    if index >= len(table):
        raise HostCallbackError(f"{what}: host callback {index} is not in the table of "
                                f"{len(table)}")
    try:
        out = table[index](*[np.array(a, copy=True) for a in args])
    except Exception as exc:  # (KeyboardInterrupt, SystemExit: as they are)
        raise HostCallbackError(f"{what}: host callback {index} raised "
                                f"{type(exc).__name__}: {exc}") from exc
    return check_results(what, index, out, results)


def check_results(what: str, index: int, out: Any,
                  results: Sequence[ArrayShape]) -> list[np.ndarray]:
    """`out` as arrays of exactly `results`' shapes and element types."""
    if isinstance(out, np.ndarray) or not isinstance(out, (tuple, list)):
        raise HostCallbackError(f"{what}: host callback {index} returned a "
                                f"{type(out).__name__}, expected a sequence of "
                                f"{len(results)} array(s)")
    if len(out) != len(results):
        raise HostCallbackError(f"{what}: host callback {index} returned {len(out)} value(s), "
                                f"expected {len(results)}")
    arrays = []
    for j, (value, shape) in enumerate(zip(out, results, strict=True)):
        want = shape.dtype.np
        try:
            a = np.asarray(value)
        except Exception as exc:
            raise HostCallbackError(f"{what}: result {j} of host callback {index} is not an "
                                    f"array ({type(exc).__name__}: {exc})") from None
        if a.dtype != want and a.ndim == 0 and not isinstance(value, (np.ndarray, np.generic)):
            cast = a.astype(want)  # a Python scalar: as the result's type if nothing is lost
            if cast == a:
                a = cast
        if a.dtype != want or a.shape != tuple(shape.dims):
            raise HostCallbackError(
                f"{what}: result {j} of host callback {index} is {a.dtype}{list(a.shape)}, "
                f"expected {want}{list(shape.dims)}")
        arrays.append(a)
    return arrays
