"""Host callbacks on the cpu backend: the Python function the native driver calls back into.

    bridge = HostBridge(program, table, name)   # checks the table against the program's sites
    args.append(bridge.address)                 # the slot after the parameters (contract.py)
    ... status 4 from hf_entry -> bridge.raise_failure()

The driver (driver.py) calls `int host(int64_t site, void *const *ins, void *const *outs)` at
every host-callback site, inside while loops and conditionals too, in program order. The
address is a `ctypes.CFUNCTYPE` trampoline made per executable and passed with every call, so
the compiled library holds no pointer and stays cacheable and shareable between executables
(two modules with the same C but different callbacks share one library).

Per call, the trampoline wraps the operand pointers as numpy arrays of the site's shapes,
calls the table entry through `host_callbacks.invoke` (which hands the callback copies and
checks what it returns against the site's result shapes and types), and copies the results
into the result buffers: a pred result as 0 or 1, true where its byte is not 0 (a callback can
return `np.frombuffer(b"\\x02", bool)`; the kernels assume 0 or 1: `not` is `x ^ 1`), as
numpy and the interpreter read it. The GIL: ctypes releases it around `hf_entry` and the
trampoline takes it back while Python runs, so a callback may use threads, jax, or another
hlofuse executable (even this one: each call has its own arena); it runs on the thread that
called `hf_entry`, in that thread's floating-point mode (the driver restores the caller's control
register around it).

Failures: anything the callback raises (or a result of the wrong shape or type) is kept for
the calling thread and the trampoline returns 1; the driver stops the run there (status 4,
with its arena and floating-point mode restored like every other way out) and
`raise_failure` raises it: `HostCallbackError` naming the instruction, from the callback's own
exception; a KeyboardInterrupt or SystemExit as itself.
"""

from __future__ import annotations

import ctypes
import math
import threading
from typing import Any, NoReturn

import numpy as np

from hlofuse.backends.cpu.cexpr import UnsupportedOpError
from hlofuse.backends.cpu.contract import Program
from hlofuse.backends.host_callbacks import HostCallbacks, invoke
from hlofuse.errors import CompileError, HostCallbackError
from hlofuse.ir.shape import ArrayShape

HOST_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p),
                           ctypes.POINTER(ctypes.c_void_p))

_Spec = tuple[np.dtype, tuple[int, ...], int]  # dtype, dims, bytes


def _spec(shape: ArrayShape) -> _Spec:
    dims = tuple(shape.dims)
    return shape.dtype.np, dims, math.prod(dims) * shape.dtype.np.itemsize


def _view(address: int | None, spec: _Spec) -> np.ndarray:
    """The array of `spec` at `address` (no copy)."""
    dt, dims, nbytes = spec
    if nbytes == 0 or not address:
        return np.empty(dims, dt)
    raw = (ctypes.c_char * nbytes).from_address(address)
    return np.frombuffer(raw, dt).reshape(dims)  # type: ignore[call-overload]  # (a buffer)


class HostBridge:
    """The trampoline of one executable's host-callback sites."""

    def __init__(self, program: Program, table: HostCallbacks | None, name: str) -> None:
        sites = program.host_sites
        for s in sites:
            if table is None:
                raise UnsupportedOpError(
                    f"instruction {s.instruction} of {name}: the cpu backend cannot run "
                    f"custom-call host callback {s.index} (a Python function: "
                    "jax.pure_callback, io_callback, debug.print) without a callback table "
                    "(hlofuse.jit passes jax's; hlofuse.compile(..., host_callbacks=[...]))")
            if s.index >= len(table) or not callable(table[s.index]):
                raise UnsupportedOpError(
                    f"instruction {s.instruction} of {name}: host callback {s.index} is not a "
                    f"callable of the table of {len(table)}")
        self._table: HostCallbacks = table or ()
        self._sites = [
            (s.index, f"instruction {s.instruction} of {name}",
             [_spec(x) for x in s.inputs], [_spec(x) for x in s.outputs], s.outputs)
            for s in sites]
        self._failure = threading.local()
        self._fn = HOST_FN(self._call)  # (kept alive with the executable)
        self.address: int = ctypes.cast(self._fn, ctypes.c_void_p).value or 0

    def _call(self, site: int, ins: Any, outs: Any) -> int:
        try:
            index, what, in_specs, out_specs, out_shapes = self._sites[site]
            args = [_view(ins[i], spec) for i, spec in enumerate(in_specs)]
            results = invoke(self._table, index, what, args, out_shapes)
            for j, (value, spec) in enumerate(zip(results, out_specs, strict=True)):
                if spec[2]:
                    if spec[0] == np.bool_:  # canonical bytes (see the module docstring)
                        value = np.asarray(value).view(np.uint8) != 0
                    np.copyto(_view(outs[j], spec), value)
            return 0
        except BaseException as exc:  # (stops the run; raised by raise_failure)
            self._failure.exc = exc
            return 1

    def raise_failure(self) -> NoReturn:
        """Raise what made the last run on this thread fail in a host callback."""
        exc = getattr(self._failure, "exc", None)
        self._failure.exc = None
        if exc is None:
            raise CompileError("a host callback failed (hf_entry returned status 4) and "
                               "left no error")
        if isinstance(exc, Exception) and not isinstance(exc, HostCallbackError):
            # (invoke wraps the callback's own; this is the trampoline's)
            raise HostCallbackError(f"a host callback failed: {type(exc).__name__}: "
                                    f"{exc}") from exc
        raise exc
