"""A gpu executable's calls as one CUDA graph: what XLA GPU's command buffers do, so a call of
many small kernels costs one graph launch instead of one Python launch per kernel.

    refusal(schedule, launches, io_bytes) -> str | None    why a module is not captured
    capture(executable) -> (Graph | None, why)              the call captured (after a first,
                                                            eager call compiled its kernels)
    Graph.replay(args) -> outputs

A captured call runs on static input and output buffers: `replay` copies the arguments in,
replays the graph and returns copies of the outputs (new tensors every call: a result is never
overwritten by a later call). Those copies cost a read and a write of the module's inputs and
outputs, so a module whose inputs and outputs exceed `MAX_IO_BYTES` runs eagerly (its
kernels outlast their launches anyway), as does one that reads a value back to the host
(a while loop whose trip count is unknown, a conditional: a graph cannot branch on it), one
of a single launch (nothing to save), and one of more than `MAX_LAUNCHES` launches (a long
time loop unrolled into the graph: capture time and graph memory grow with it). A capture
that fails leaves the executable eager, with the error as its reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hlofuse.backends.driver_ir.schedule import Branch, Schedule, Stmt, While

if TYPE_CHECKING:
    from hlofuse.backends.gpu.driver import GpuExecutable

MAX_IO_BYTES = 64 << 20  # inputs and outputs together, copied in and out per call
MAX_LAUNCHES = 20_000  # kernels per call captured into one graph


def _reads_back(body: list[Stmt]) -> str | None:
    for s in body:
        if isinstance(s, Branch):
            return f"conditional {s.note}: its selector is read back"
        if isinstance(s, While):
            if s.trips is None:
                return f"while {s.name}: its trip count is unknown (its predicate is read back)"
            why = _reads_back(s.body)
            if why is not None:
                return why
    return None


def refusal(schedule: Schedule, launches: int, io_bytes: int) -> str | None:
    """Why calls of `schedule` (which launched `launches` kernels on its first call) do not
    replay a graph, or None when they do (see the module docstring)."""
    why = _reads_back(schedule.body)
    if why is not None:
        return why
    if launches <= 1:
        return f"{launches} launch per call: nothing to save"
    if launches > MAX_LAUNCHES:
        return f"{launches} launches per call (more than {MAX_LAUNCHES})"
    if io_bytes > MAX_IO_BYTES:
        return f"{io_bytes} bytes of inputs and outputs per call (more than {MAX_IO_BYTES})"
    return None


class Graph:
    """A captured call: static buffers and the CUDA graph writing them."""

    def __init__(self, graph: Any, ins: list[Any], outs: list[Any]) -> None:
        self.graph = graph
        self.ins = ins
        self.outs = outs

    def replay(self, args: list[Any]) -> list[Any]:
        for dst, src in zip(self.ins, args, strict=True):
            dst.copy_(src)
        self.graph.replay()
        return [o.clone() for o in self.outs]


def capture(exe: GpuExecutable) -> tuple[Graph | None, str | None]:
    """The executable's call captured on static buffers (its kernels already compiled by a
    first call); (None, the error) where the capture fails."""
    import torch

    try:
        ins = [torch.empty(max(1, s.nbytes), dtype=torch.uint8, device=exe.device)[:s.nbytes]
               for s in exe.sched.inputs]
        outs = exe._new_outputs()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            exe._run(ins, outs)  # (a warm-up on the capture's stream, as torch asks)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            exe._run(ins, outs)
        return Graph(graph, ins, outs), None
    except Exception as exc:  # (any failure leaves the calls eager)
        return None, f"capture failed: {type(exc).__name__}: {exc}"
