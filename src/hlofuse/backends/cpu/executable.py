"""A compiled module on the CPU: the loaded shared library and its calling convention.

    exe = CpuExecutable(module, program)   # compiles (through the build cache) and loads
    outs = exe(x, y)                       # list of numpy arrays: the root's leaves, flattened
    print(exe.profile(x, y))               # per-kernel times from the -DHF_PROFILE build

Conditions enforced on every call, exactly like the interpreter (`interpreter.check_args`):
the arguments match the entry parameters in count, shape and element type (no implicit casts;
numpy scalars are accepted as 0-d arrays; a tuple-shaped parameter is given as a tuple and
flattened depth-first). Inputs are passed C-contiguous (copied if they are not), pred inputs
with bytes other than 0 and 1 as a canonical copy (`_canonical_preds`); outputs are
arrays the caller owns. An unknown non-zero status from `hf_entry` raises
`NativeRuntimeError`.

Every call returns a new list of new output arrays: an array handed to the caller is never
written again. Outputs of 64 KiB or more start on 64-byte boundaries, so `jax.Array`s made from
them share their memory (`hlofuse.jit`'s outputs, no copy), and their memory is recycled, so a
call in a loop touches no fresh pages (a page fault per 4 KiB written was up to 2/3 of a call:
an AdamW update, 0.9 ms -> 0.3 ms): each such array's `base` is a `_Lease` that owns the memory
and gives it back to the output's pool only when CPython deallocates it, that is when no array,
view, memoryview, jax.Array or weak reference can reach the memory any more (a weak reference
to a dropped output is dead, not shown the next call's values). Nothing is decided by counting
references, and two threads never get the same memory. Small outputs are `np.empty` per call.
`hf_entry` keeps its internal work arena for the next call (`hf_release` frees it when the
executable goes away); the caller never sees it.

The per-call path is kept short: the parameters' leaf dtypes and shapes, the ctypes pointer
array types and the output allocation list are computed once here; a call checks each array
with a few attribute compares and falls back on `check_args` only to build the error message.
A caller that owns the buffers (`hlofuse.jit` through XLA, `frontends/jax_ffi.py`) calls
`hf_entry` itself: `native_entry()`, `input_specs`/`output_specs`, `raise_status(status)`.

Failures are hlofuse errors, never a crash or a MemoryError: outputs that cannot be allocated,
the work arena (status 1) and a kernel's scratch (status 3, `hf_failure` names the kernel and
the bytes) raise `AllocationError` naming the instruction and the bytes; a host callback that
raised (status 4, `hostcall.py`) raises `HostCallbackError` from its exception. Ctrl-C stops a run
(status 2, `runtime.py`) and raises KeyboardInterrupt; each call re-arms the SIGINT counter
with one dictionary lookup.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from hlofuse.backends.cpu import runtime
from hlofuse.backends.cpu.contract import Program
from hlofuse.backends.cpu.hostcall import HostBridge
from hlofuse.backends.host_callbacks import HostCallbacks
from hlofuse.errors import AllocationError, CompileError
from hlofuse.escape import terminal
from hlofuse.ir.module import Module
from hlofuse.ir.shape import ArrayShape, Shape, TokenShape, TupleShape, leaves


class NativeRuntimeError(CompileError):
    """The compiled module reported a failure (a non-zero status from `hf_entry`)."""


_c_char_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


def _address(a: np.ndarray) -> int:
    """The data pointer of a C-contiguous array (`from_buffer` is ~4x faster than `.ctypes.data`
    but needs a writable, non-empty buffer)."""
    try:
        return _addressof(_c_char_from_buffer(a))  # type: ignore[arg-type]  # (a buffer)
    except (TypeError, ValueError, BufferError):
        return int(a.ctypes.data)


ALIGN = 64  # what a jax.Array needs to share a numpy array's memory instead of copying it
# Outputs this large or larger are ALIGN-aligned and their memory is recycled (`_Lease`):
# sharing is cheaper than a copy from here (a jax.Array that shares a buffer costs ~10 us more
# to make and free than one that copies 4 bytes; a copy of 64 KiB costs about that), and a
# fresh buffer this large costs page faults on every call.
ALIGN_FROM = 1 << 16
KEEP = 2  # buffers each large output keeps for reuse once every array on them is gone


class _Lease:
    """The `base` of a large output array: it owns the memory (`_entry[0]`, a byte buffer) and,
    when it is deallocated, gives the buffer back to its pool (`_pool`, at most `KEEP`).

    Why this is safe: every array that can read the memory holds the lease (the output holds
    it as its `base`; a view holds the output or the lease; a memoryview, ctypes object or
    jax.Array made from it holds the output), so CPython deallocates the lease only once no
    object can reach the memory any more -- no reference count is guessed, containers, weak
    references (dead with the array) and other threads included. The lease makes exactly one
    array (`__array_interface__` is deleted once used), and holds no user object, so it is in
    no reference cycle (numpy arrays are not tracked by the cyclic collector)."""

    __slots__ = ("__array_interface__", "_entry", "_pool")
    __array_interface__: dict[str, Any]
    _entry: tuple[np.ndarray, dict[str, Any]]
    _pool: list[tuple[np.ndarray, dict[str, Any]]]

    def __del__(self) -> None:
        pool = self._pool
        if len(pool) < KEEP:
            pool.append(self._entry)


class _Pool:
    """Memory for one large output: buffers whose arrays are all gone (`_Lease`)."""

    __slots__ = ("dims", "dtype", "free", "nbytes", "plain")

    def __init__(self, dims: tuple[int, ...], dt: np.dtype) -> None:
        self.dims, self.dtype = dims, dt
        self.nbytes = math.prod(dims) * dt.itemsize
        self.free: list[tuple[np.ndarray, dict[str, Any]]] = []
        # numpy's own types are made directly; others (bfloat16, int4: `str` is '<V2') as
        # bytes viewed as the type
        self.plain = np.dtype(dt.str) == dt

    def take(self) -> np.ndarray:
        """A new array (another call's output never), on recycled memory if there is some.
        (`list.pop` is atomic: two threads never take the same buffer.)"""
        try:
            entry = self.free.pop()
        except IndexError:
            raw = np.empty(self.nbytes + ALIGN, np.uint8)
            address = int(raw.ctypes.data)
            entry = (raw, {"shape": self.dims if self.plain else (self.nbytes,),
                           "typestr": self.dtype.str if self.plain else "|u1", "version": 3,
                           "data": (address + (-address % ALIGN), False)})
        lease = _Lease()
        lease._entry, lease._pool = entry, self.free
        lease.__array_interface__ = entry[1]
        out = np.asarray(lease)
        del lease.__array_interface__  # (one array per lease)
        return out if self.plain else out.view(self.dtype).reshape(self.dims)


def _canonical_preds(ins: list[np.ndarray], preds: list[int]) -> list[np.ndarray]:
    """`ins` with each pred input (at `preds`) whose bytes are not all 0 or 1 (an untrusted
    `.npz`, `np.frombuffer(b"\\x02", bool)`) replaced by a canonical copy, true where the byte
    is not 0, as numpy and the interpreter read it: the kernels assume 0 or 1 (`not` is
    `x ^ 1`, a select indexes by it). The caller's array is never written."""
    for i in preds:
        raw = ins[i].view(np.uint8)
        if raw.size and raw.max() > 1:
            ins[i] = raw != 0
    return ins


# hf_entry's statuses (driver.py).
_NO_ARENA, _INTERRUPTED, _NO_SCRATCH, _HOST_FAILED = 1, 2, 3, 4


def _leaf_specs(shape: object) -> list[tuple[np.dtype, tuple[int, ...]]]:
    return [(s.dtype.np, tuple(s.dims)) for s in leaves(shape)]  # type: ignore[arg-type]


def _flatten_value(value: Any, shape: object, out: list[Any]) -> None:
    """Depth-first array leaves of an argument already checked against `shape`."""
    if isinstance(shape, TupleShape):
        for v, s in zip(value, shape.elements, strict=True):
            _flatten_value(v, s, out)
    elif isinstance(shape, ArrayShape):
        out.append(value)
    # tokens carry no data


@dataclass(frozen=True)
class KernelProfile:
    """One kernel's row of a profile."""

    kernel: str
    instruction: str
    kind: str
    calls: int
    total_ns: int
    bytes_per_call: int

    @property
    def ns_per_call(self) -> float:
        return self.total_ns / self.calls if self.calls else 0.0

    @property
    def gb_per_s(self) -> float:
        """Bytes per call over time per call (a lower bound on the achieved bandwidth)."""
        return self.bytes_per_call / self.ns_per_call if self.calls and self.total_ns else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "instruction": self.instruction,
            "kind": self.kind,
            "calls": self.calls,
            "total_ns": self.total_ns,
            "ns_per_call": self.ns_per_call,
            "bytes_per_call": self.bytes_per_call,
            "gb_per_s": self.gb_per_s,
        }


def _fmt_ns(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


def _fmt_bytes(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


@dataclass(frozen=True)
class Profile:
    """Per-kernel times of one (or `repeat`) run(s) of a module; `str()` is a table sorted by
    total time, `to_dict()` the same data for JSON."""

    module: str
    rows: tuple[KernelProfile, ...]
    wall_ns: int  # the whole call(s), driver and Python overhead included
    repeat: int = 1

    @property
    def kernel_ns(self) -> int:
        return sum(r.total_ns for r in self.rows)

    def sorted_rows(self) -> list[KernelProfile]:
        return sorted(self.rows, key=lambda r: (-r.total_ns, r.kernel))

    def to_dict(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "repeat": self.repeat,
            "wall_ns": self.wall_ns,
            "kernel_ns": self.kernel_ns,
            "kernels": [r.to_dict() for r in self.sorted_rows()],
        }

    def __str__(self) -> str:
        header = ("kernel", "instruction", "kind", "calls", "total", "per call", "bytes/call",
                  "GB/s", "%")
        total = self.kernel_ns or 1
        body = [  # instruction names are input text: escaped for the terminal
            (r.kernel, terminal(r.instruction), r.kind, str(r.calls), _fmt_ns(r.total_ns),
             _fmt_ns(r.ns_per_call), _fmt_bytes(r.bytes_per_call), f"{r.gb_per_s:.2f}",
             f"{100.0 * r.total_ns / total:.1f}")
            for r in self.sorted_rows()
        ]
        widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
        right = {3, 4, 5, 6, 7, 8}

        def line(row: Sequence[str]) -> str:
            return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                             for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()

        lines = [
            f"# profile of {terminal(self.module)}: {len(self.rows)} kernels, "
            f"{self.repeat} run(s), "
            f"wall {_fmt_ns(self.wall_ns)}, in kernels {_fmt_ns(self.kernel_ns)}",
            line(header),
            line(["-" * w for w in widths]),
            *(line(row) for row in body),
        ]
        return "\n".join(lines)


@dataclass(frozen=True)
class Signature:
    """What a call needs of the module: its name, the entry parameters' shapes, the root's
    name (for messages)."""

    name: str
    params: tuple[Shape, ...]
    root: str

    @staticmethod
    def of(module: Module) -> Signature:
        entry = module.entry
        return Signature(module.name, tuple(p.shape for p in entry.parameters), entry.root.name)


class CpuExecutable:
    """A module compiled to native code. Call it with numpy arrays; get a list of arrays."""

    def __init__(self, module: Module | Callable[[], Module], program: Program,
                 signature: Signature | None = None, library: str | None = None,
                 host_callbacks: HostCallbacks | None = None) -> None:
        """`module`: the optimised module, or (with its `signature`) a function that makes it
        when first needed (a warm compile from `artifacts` parses it only then). `library`:
        the cache key of the program's library, when known (`build.load_cached`; else, or if
        it is not cached, the library is found or built from the program's C).
        `host_callbacks`: the table the program's host callbacks index (`hostcall.py`);
        `UnsupportedOpError` naming the instruction if it has some and none is given."""
        self._library_key = library
        if isinstance(module, Module):
            self._module: Module | None = module
            self._make_module: Callable[[], Module] | None = None
            signature = Signature.of(module)
        elif signature is None:
            raise TypeError("a module made on demand needs its signature")
        else:
            self._module, self._make_module = None, module
        self.program = program
        self.name = signature.name
        self._param_shapes = list(signature.params)
        self._simple = all(isinstance(s, ArrayShape) for s in self._param_shapes)
        self._in_specs = [spec for s in self._param_shapes for spec in _leaf_specs(s)]
        self._out_specs = [(s.dtype.np, tuple(s.dims)) for s in program.outputs]
        self._preds = [i for i, (dt, _) in enumerate(self._in_specs) if dt == np.bool_]
        if len(self._in_specs) != len(program.inputs):
            raise CompileError(
                f"{self.name}: the generated program takes {len(program.inputs)} input buffers "
                f"but the entry parameters have {len(self._in_specs)} array leaves"
            )
        self._host: HostBridge | None = None
        self._host_args: list[int] = []  # the callback slot after the inputs (contract.py)
        if program.host_sites:
            self._host = HostBridge(program, host_callbacks, self.name)
            self._host_args = [self._host.address]
        self._in_type = ctypes.c_void_p * max(1, len(self._in_specs) + len(self._host_args))
        self._out_type = ctypes.c_void_p * max(1, len(self._out_specs))
        self._lib = self._load(())
        self._entry = self._bind(self._lib)
        self._out_names = [f"output {j} of {signature.root} ({dt.name}{list(dims)})"
                           for j, (dt, dims) in enumerate(self._out_specs)]
        self._prof_lib: ctypes.CDLL | None = None
        # Per output: a pool of recycled memory (large outputs), or None (np.empty per call).
        self._pools = [_Pool(dims, dt) if math.prod(dims) * dt.itemsize >= ALIGN_FROM else None
                       for dt, dims in self._out_specs]

    def __del__(self, _suppress: Any = contextlib.suppress) -> None:
        # (bound at definition: at interpreter exit the module's globals may be gone)
        for lib in (getattr(self, "_lib", None), getattr(self, "_prof_lib", None)):
            release = getattr(lib, "hf_release", None)
            if release is not None:
                with _suppress(Exception):
                    release()  # the kept arena

    @property
    def module(self) -> Module:
        """The optimised module (parsed on first use when the executable came from the
        compile cache)."""
        if self._module is None:
            assert self._make_module is not None
            self._module = self._make_module()
        return self._module

    def _load(self, extra_flags: tuple[str, ...]) -> ctypes.CDLL:
        """The library: a large program as translation units compiled in parallel, each cached
        on its own (`units.units`, `build.load_units`), a small one as its single file."""
        from hlofuse.backends.cpu import build

        if not extra_flags and self._library_key is not None:
            lib = build.load_cached(self._library_key)
            if lib is not None:
                return lib
        from hlofuse.backends.cpu.units import DRIVER_FLAGS, kernel_flags
        from hlofuse.backends.cpu.units import units as split

        units = split(self.program)
        try:
            if units is None:
                return build.load_library(self.program.source, name=self.name,
                                          extra_flags=(*kernel_flags(), *extra_flags))
            return build.load_units(units, name=self.name, kernel_flags=kernel_flags(),
                                    extra_flags=(*DRIVER_FLAGS, *extra_flags))  # the driver's
        except build.CCompileError as exc:  # name the instructions of the failing kernels
            raise build.with_instructions(
                exc, [(k.name, k.instruction) for k in self.program.kernels]) from exc

    @property
    def source(self) -> str:
        """The generated C file."""
        return self.program.source

    @property
    def library_key(self) -> str | None:
        """The cache key of the loaded library (`build.library_key`)."""
        from hlofuse.backends.cpu import build

        return build.library_key(self._lib)

    def _bind(self, lib: ctypes.CDLL) -> Any:
        try:
            fn = getattr(lib, self.program.entry_symbol)
        except AttributeError:
            raise CompileError(
                f"{self.name}: the compiled library has no symbol {self.program.entry_symbol!r}"
            ) from None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        fn.restype = ctypes.c_int
        counter = runtime.counter_address()
        # (hand-written programs in tests may not have hf_stop_ptr: then not interruptible)
        if counter is not None:
            with contextlib.suppress(ValueError):
                ctypes.c_void_p.in_dll(lib, "hf_stop_ptr").value = counter
        pool = runtime.parallel_address()
        if pool is not None:  # without it parallel loops run serially
            with contextlib.suppress(ValueError):
                ctypes.c_void_p.in_dll(lib, "hf_parallel_ptr").value = pool
        return fn

    def _inputs(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        """The C-contiguous input leaves, after the same checks as the interpreter."""
        specs = self._in_specs
        if self._simple and len(arrays) == len(specs):
            out = []
            for a, (dt, dims) in zip(arrays, specs, strict=True):
                if type(a) is not np.ndarray:
                    if isinstance(a, np.generic):
                        a = np.asarray(a)
                    if type(a) is not np.ndarray:
                        break
                if a.dtype != dt or a.shape != dims:
                    break
                out.append(a if a.flags.c_contiguous else np.ascontiguousarray(a))
            else:
                return _canonical_preds(out, self._preds) if self._preds else out
        # Slow path: tuples/tokens, or a mismatch (check_args raises the precise InputError).
        from hlofuse.backends.interpreter import check_args

        checked = check_args(self.module, arrays)
        flat: list[Any] = []
        for value, shape in zip(checked, self._param_shapes, strict=True):
            if isinstance(shape, TokenShape):
                continue
            _flatten_value(value, shape, flat)
        return _canonical_preds([np.ascontiguousarray(a) for a in flat], self._preds)

    def _outputs(self) -> list[np.ndarray]:
        """New output arrays (a new list): never an array handed out before (`_Lease`)."""
        try:
            return [np.empty(dims, dt) if pool is None else pool.take()
                    for pool, (dt, dims) in zip(self._pools, self._out_specs, strict=True)]
        except (MemoryError, ValueError):
            for (dt, dims), what in zip(self._out_specs, self._out_names, strict=True):
                try:
                    np.empty(dims, dt)
                except (MemoryError, ValueError):
                    nbytes = int(np.prod(dims, dtype=object)) * np.dtype(dt).itemsize
                    raise AllocationError(
                        f"{self.name}: cannot allocate {nbytes} bytes for {what}"
                    ) from None
            raise

    def _run(self, entry: Any, arrays: Sequence[Any], lib: ctypes.CDLL | None = None
             ) -> list[np.ndarray]:
        ins = self._inputs(arrays)
        outs = self._outputs()
        runtime.arm()
        status = entry(self._in_type(*[_address(a) for a in ins], *self._host_args),
                       self._out_type(*[_address(o) for o in outs]))
        if status != 0:
            self._failed(status, lib or self._lib)
        return outs

    def _failed(self, status: int, lib: ctypes.CDLL) -> NoReturn:
        if status == _INTERRUPTED:
            runtime.check_signals()  # raises KeyboardInterrupt
        if status == _HOST_FAILED and self._host is not None:
            self._host.raise_failure()  # what the callback raised
        if status == _NO_ARENA:
            largest = self.program.arena_largest
            raise AllocationError(
                f"{self.name}: cannot allocate the {self.program.arena_bytes} byte work arena "
                "for the module's intermediate buffers (out of memory)"
                + (f"; the largest is {largest}" if largest else "")
            )
        if status == _NO_SCRATCH:
            info = (ctypes.c_int64 * 2)(-1, 0)
            with contextlib.suppress(AttributeError):
                lib.hf_failure(info)
            k = info[0]
            kernels = self.program.kernels
            what = (f"kernel {kernels[k].name} (instruction {kernels[k].instruction})"
                    if 0 <= k < len(kernels) else "a kernel")
            raise AllocationError(
                f"{self.name}: {what} cannot allocate {info[1]} bytes of scratch memory "
                "(out of memory)"
            )
        raise NativeRuntimeError(
            f"{self.name}: the compiled module failed (hf_entry returned status {status})"
        )

    def __call__(self, *arrays: Any) -> list[np.ndarray]:
        return self._run(self._entry, arrays)

    @property
    def input_specs(self) -> list[tuple[np.dtype, tuple[int, ...]]]:
        """(dtype, dims) of each input buffer `hf_entry` takes: the parameters' array leaves."""
        return list(self._in_specs)

    @property
    def output_specs(self) -> list[tuple[np.dtype, tuple[int, ...]]]:
        """(dtype, dims) of each output buffer: the root's array leaves."""
        return list(self._out_specs)

    def native_entry(self) -> tuple[int, int]:
        """(the address of the loaded `hf_entry`, the host-callback slot that follows the
        inputs or 0) for a caller that hands the buffers over itself (`hlofuse.jit` through
        XLA, `frontends/jax_ffi.py`). Such a caller passes C-contiguous inputs of
        `input_specs`, then the slot, and fresh outputs of `output_specs` that overlap no
        input; calls `runtime.arm()` before a call; and gives a non-zero status to
        `raise_status`."""
        address = ctypes.cast(self._entry, ctypes.c_void_p).value
        assert address is not None
        return address, self._host_args[0] if self._host_args else 0

    def raise_status(self, status: int) -> NoReturn:
        """Raise what a non-zero status of `hf_entry` means (as a call of this executable
        would)."""
        self._failed(status, self._lib)

    def _profiling_library(self) -> ctypes.CDLL:
        if self._prof_lib is None:

            self._prof_lib = self._load(("-DHF_PROFILE",))
        return self._prof_lib

    def profile(self, *arrays: Any, repeat: int = 1) -> Profile:
        """Run `repeat` times with the profiling build; per-kernel call counts and times."""
        if repeat < 1:
            raise ValueError("repeat must be at least 1")
        lib = self._profiling_library()
        entry = self._bind(lib)
        kernels = self.program.kernels
        n = len(kernels)
        if n:
            try:
                ns = (ctypes.c_uint64 * n).in_dll(lib, "hf_prof_ns")
                calls = (ctypes.c_uint64 * n).in_dll(lib, "hf_prof_calls")
            except ValueError:
                raise CompileError(
                    f"{self.name}: the -DHF_PROFILE build defines no hf_prof_ns/hf_prof_calls"
                ) from None
            for i in range(n):
                ns[i] = 0
                calls[i] = 0
        t0 = time.perf_counter_ns()
        for _ in range(repeat):
            self._run(entry, arrays, lib)
        wall = time.perf_counter_ns() - t0
        rows = tuple(
            KernelProfile(k.name, k.instruction, k.kind, int(calls[i]), int(ns[i]), k.nbytes)
            for i, k in enumerate(kernels)
        ) if n else ()
        return Profile(self.name, rows, wall, repeat)
