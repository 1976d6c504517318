"""The gpu backend's driver: a whole (optimised) module run on one device, kernel by kernel, from
the same driver IR and buffer assignment as the cpu backend.

    schedule (driver_ir/schedule.py) -> buffer assignment (driver_ir/assign.py) -> run (here)

Every kernel is lowered, mapped and printed when the executable is made (`kernels.py`): a
Triton kernel, or a library call (`library.py`); a kernel the scheduler finds equal to an
earlier one launches the earlier one's function. Internal buffers live in one device arena
of the assigned size, allocated once and kept; constants are copied to the device once.
At run time the driver walks the schedule: a `Call` launches its kernel on typed views of
its locations (an in-place pair may be the same memory); a `MemCopy` is a device copy; a
`While` runs its condition, reads the predicate back (one byte, as XLA GPU does for a loop
whose trip count it does not know) and its body, swapping carried leaves' two buffers; a
loop with a known trip count (`While.trips`) runs its body that many times and never reads
its predicate; a `Branch` reads its selector back.

On a GPU, the first call runs as above and decides whether later calls replay a CUDA graph
of the whole call instead (`graphs.py`: one launch of the graph for every kernel of the call,
where the schedule reads nothing back to the host); the reason is kept (`graph_why`).

Inputs: numpy arrays (copied to the device once per call), torch tensors on the device, and
anything with `__dlpack__` (jax and CuPy arrays: no copy); each is checked against the entry
parameter's type and shape (`InputError` naming it). Outputs are new torch tensors on the
device, never an arena buffer (a result is never overwritten by a later call).

Conditions enforced: a module with host callbacks, or an op the gpu backend has no form for,
raises `UnsupportedOpError` naming the instruction when the executable is made, before
anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hlofuse.backends.driver_ir.assign import assign
from hlofuse.backends.driver_ir.kernel import Kernel
from hlofuse.backends.driver_ir.schedule import (
    Arg,
    Branch,
    Buf,
    Call,
    Carried,
    Const,
    HostCall,
    Loc,
    MemCopy,
    Note,
    Result,
    Spare,
    Stmt,
    View,
    While,
    schedule,
)
from hlofuse.backends.gpu import graphs, kernels
from hlofuse.backends.gpu.triton_print import torch_type
from hlofuse.errors import InputError, UnsupportedOpError
from hlofuse.ir.module import Module
from hlofuse.ir.shape import ArrayShape, leaves

Step = Callable[["_State"], None]


class _State:
    """One call's locations: the arguments, the results, and the carried leaves' pointers."""

    __slots__ = ("args", "cur", "results", "spare")

    def __init__(self, args: list[Any], results: list[Any]) -> None:
        self.args = args
        self.results = results
        self.cur: dict[int, Loc] = {}
        self.spare: dict[int, Loc] = {}


class _Recording:
    """A lowered kernel whose printed functions' launchers the driver keeps, by name."""

    def __init__(self, low: kernels.Lowered, launchers: dict[str, kernels.Launcher]) -> None:
        self.low = low
        self.launchers = launchers

    @property
    def stem(self) -> str:
        return self.low.stem

    @property
    def digest(self) -> str:
        return self.low.digest

    def call(self, name: str, source: str = "") -> Kernel:
        return self.low.call(name, source)

    def emit(self, name: str) -> Kernel:
        k = self.low.emit(name)
        self.launchers[name] = self.low.launcher(k.source)
        return k


def default_device() -> str:
    """"cuda" where torch sees a GPU, else "cpu" (Triton's interpreter: TRITON_INTERPRET=1)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class GpuExecutable:
    """A module compiled for the gpu backend: `exe(*arrays)` -> [torch tensors]."""

    def __init__(self, module: Module, device: str | None = None) -> None:
        import torch

        from hlofuse.backends.host_callbacks import is_host_callback

        for comp in module.computations:
            for instr in comp.instructions:
                if is_host_callback(instr):
                    raise UnsupportedOpError(f"instruction {instr.name}: the gpu backend runs "
                                             "no host callbacks")
        self.module = module
        self.device = torch.device(device or default_device())
        self.launchers: dict[str, kernels.Launcher] = {}
        self.sched = schedule(module, lambda i: _Recording(kernels.lower(i), self.launchers),
                              set())
        size = assign(self.sched)
        self.arena = torch.empty(max(1, size), dtype=torch.uint8, device=self.device)
        self.consts = [self._const(c.value, c.dtype, c.size) for c in self.sched.consts]
        self.in_specs = [(torch_type(s.dtype), tuple(s.dims)) for s in self.sched.inputs]
        self.out_specs = [(torch_type(s.dtype), tuple(s.dims)) for s in self.sched.outputs]
        self.launches = 0  # kernels launched by the last call (library calls included)
        self.calls = 0
        self._io_bytes = sum(s.nbytes for s in self.sched.inputs + self.sched.outputs)
        self._graph: graphs.Graph | None = None  # the calls' CUDA graph, once captured
        self.graph_why: str | None = "not decided (a first call decides)"  # why none
        self._body = self._block(self.sched.body)

    def _const(self, value: Any, dtype: Any, size: int) -> Any:
        import torch

        a = np.ascontiguousarray(np.broadcast_to(np.asarray(value, dtype.np), (size,)))
        flat = torch.from_numpy(a.view(np.uint8).copy())
        return flat.to(self.device)

    # -- locations --------------------------------------------------------------------------

    def _bytes(self, st: _State, loc: Loc) -> Any:
        """The flat byte tensor at `loc` (from its start to its buffer's end)."""
        if isinstance(loc, Buf):
            return self.arena[loc.offset:loc.offset + loc.nbytes]
        if isinstance(loc, Arg):
            return st.args[loc.index]
        if isinstance(loc, Result):
            return st.results[loc.index]
        if isinstance(loc, Const):
            return self.consts[loc.index]
        if isinstance(loc, Carried):
            return self._bytes(st, st.cur[id(loc)])
        if isinstance(loc, Spare):
            return self._bytes(st, st.spare[id(loc.of)])
        if isinstance(loc, View):
            return self._bytes(st, loc.base)[loc.nbytes:]
        raise TypeError(loc)

    def _typed(self, st: _State, loc: Loc, shape: ArrayShape) -> Any:
        return self._bytes(st, loc)[:shape.nbytes].view(torch_type(shape.dtype))

    # -- statements -------------------------------------------------------------------------

    def _block(self, body: list[Stmt]) -> list[Step]:
        return [step for s in body for step in self._stmt(s)]

    def _stmt(self, s: Stmt) -> list[Step]:
        if isinstance(s, Call):
            return [self._call(self.sched.kernels[s.kernel], s)]
        if isinstance(s, MemCopy):
            return [self._copy(s)]
        if isinstance(s, While):
            return [self._while(s)]
        if isinstance(s, Branch):
            return [self._branch(s)]
        if isinstance(s, Note):
            return []
        assert not isinstance(s, HostCall)  # (refused when the executable is made)
        raise TypeError(s)

    def _fixed(self, loc: Loc, shape: ArrayShape) -> Any:
        """The typed view at `loc` when it is the same every call (an arena buffer, a
        constant, a slice of one), else None."""
        base = loc
        while isinstance(base, View):
            base = base.base
        if isinstance(base, Buf | Const):
            return self._typed(_State([], []), loc, shape)
        return None

    def _call(self, k: Kernel, s: Call) -> Step:
        launcher = self.launchers[k.name]
        ins_at = [(self._fixed(loc, shape), loc, shape)
                  for loc, shape in zip(s.ins, k.inputs, strict=True)]
        outs_at = [(self._fixed(loc, shape), loc, shape)
                   for loc, shape in zip(s.outs, k.outputs, strict=True)]

        def run(st: _State) -> None:
            ins = [self._typed(st, loc, shape) if f is None else f for f, loc, shape in ins_at]
            outs = [self._typed(st, loc, shape) if f is None else f
                    for f, loc, shape in outs_at]
            launcher.launch(ins, outs)
            self.launches += 1

        return run

    def _copy(self, s: MemCopy) -> Step:
        def run(st: _State) -> None:
            dst = self._bytes(st, s.dst)[:s.nbytes]
            src = self._bytes(st, s.src)[:s.nbytes]
            if not (s.if_distinct and dst.data_ptr() == src.data_ptr()):
                dst.copy_(src)

        return run

    def _while(self, s: While) -> Step:
        cond = self._block(s.cond)
        body = self._block(s.body)
        carried = list(s.carried)
        trips = s.trips

        def run(st: _State) -> None:
            for c in carried:
                st.cur[id(c)] = c.first
                st.spare[id(c)] = c.b if c.owned else c.a
            n = 0
            while True:
                if trips is not None:
                    if n == trips:
                        break
                else:
                    for step in cond:
                        step(st)
                    if not bool(self._bytes(st, s.pred)[0].item()):
                        break
                for step in body:
                    step(st)
                for c in carried:
                    new = st.spare[id(c)]
                    st.cur[id(c)] = new
                    st.spare[id(c)] = c.b if new is c.a else c.a
                n += 1

        return run

    def _branch(self, s: Branch) -> Step:
        blocks = [self._block(b) for b in s.branches]
        dt = torch_type(s.selector_dtype)

        def run(st: _State) -> None:
            sel = self._bytes(st, s.selector)[:s.selector_dtype.itemsize].view(dt)
            value = int(sel[0].item())
            if s.count is None:
                chosen = blocks[0] if value else blocks[1]
            else:
                chosen = blocks[value if 0 <= value < s.count else s.count - 1]
            for step in chosen:
                step(st)

        return run

    # -- a call -----------------------------------------------------------------------------

    def _inputs(self, arrays: Sequence[Any]) -> list[Any]:
        import torch

        if len(arrays) != len(self.in_specs):
            from hlofuse.backends.interpreter import check_args

            check_args(self.module, arrays)  # (raises the InputError naming what is wrong)
        out = []
        for i, (a, (dt, dims)) in enumerate(zip(arrays, self.in_specs, strict=True)):
            if not isinstance(a, torch.Tensor):
                if hasattr(a, "__dlpack__") and not isinstance(a, np.ndarray):
                    a = torch.from_dlpack(a)
                else:
                    a = np.asarray(a)  # (np.ascontiguousarray makes a 0-d array 1-d)
                    a = torch.from_numpy(a if a.flags.c_contiguous else a.copy())
            if a.dtype != dt or tuple(a.shape) != dims:
                p = self.module.entry.parameters
                name = p[i].name if len(p) == len(self.in_specs) else f"leaf {i}"
                raise InputError(f"parameter {i} ({name}): expected {self.sched.inputs[i]}, "
                                 f"got {a.dtype} {list(a.shape)}")
            a = a.to(self.device).contiguous().reshape(-1)
            out.append(a.view(torch.uint8) if a.dtype is not torch.uint8 else a)
        return out

    def _run(self, args: list[Any], outs: list[Any]) -> None:
        import torch

        results = [o.reshape(-1).view(torch.uint8) if o.dtype is not torch.uint8
                   else o.reshape(-1) for o in outs]
        self.launches = 0
        st = _State(args, results)
        for step in self._body:
            step(st)

    def _new_outputs(self) -> list[Any]:
        import torch

        return [torch.empty(dims, dtype=dt, device=self.device) for dt, dims in self.out_specs]

    def __call__(self, *arrays: Any) -> list[Any]:
        args = self._inputs(arrays)
        if self._graph is not None:
            return self._graph.replay(args)
        outs = self._new_outputs()
        self._run(args, outs)
        self.calls += 1
        if self.calls == 1 and self.device.type == "cuda":
            self.graph_why = graphs.refusal(self.sched, self.launches, self._io_bytes)
            if self.graph_why is None:
                self._graph, self.graph_why = graphs.capture(self)
        return outs


def compile_module(module: Module, device: str | None = None) -> GpuExecutable:
    """The executable of an optimised module (see the module docstring)."""
    for leaf in leaves(module.entry.root.shape):
        if not isinstance(leaf, ArrayShape):
            raise UnsupportedOpError(f"module {module.name}: a result of {leaf} (the gpu "
                                     "backend returns arrays)")
    return GpuExecutable(module, device)
