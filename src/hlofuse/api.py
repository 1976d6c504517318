"""The public entry points that tie the pieces together: compile a module (or HLO text) with a
named pipeline for a backend, and get back something callable on numpy arrays.

    exe = compile(text)                          # pipeline "hlofuse", backend "cpu"
    outs = exe(x, y)                             # tuple of numpy arrays (flattened root leaves)
    print(exe.profile(x, y))                     # cpu only: per-kernel times
    exe.source                                   # cpu only: the generated C

Backends come from `backends.registry`: "cpu" (generated C, needs a C compiler;
`CompilerNotFoundError` says to use the interpreter otherwise) and "interpreter" (the numpy
reference, always available). Nothing here dispatches on a backend's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hlofuse import gcpause
from hlofuse.backends import registry
from hlofuse.backends import subnormals as subnormal_modes
from hlofuse.backends.host_callbacks import HostCallbacks
from hlofuse.errors import HloError
from hlofuse.ir.module import Module
from hlofuse.passes.defaults import DEFAULT_PIPELINE

if TYPE_CHECKING:
    from hlofuse.backends.cpu.executable import Profile

DEFAULT_BACKEND = "cpu"


def _as_module(module_or_text: Module | str) -> Module:
    if isinstance(module_or_text, Module):
        return module_or_text
    from hlofuse.text import parse

    return parse(module_or_text)


def check_backend(backend: str) -> None:
    """Raise `HloError` for an unknown backend name (see `backends.registry`)."""
    registry.get(backend)


def build_runner(
    module: Module, *, pipeline: str | None = None, backend: str = "interpreter",
    threads: int | None = None, subnormals: str = subnormal_modes.DEFAULT,
    host_callbacks: HostCallbacks | None = None,
) -> tuple[Module, Callable[..., list[np.ndarray]]]:
    """Run `pipeline` (a name or a pass spec) on `module`, then bind it to `backend` (with the
    table its host callbacks index, if it has any)."""
    module, runner = _build(module, pipeline, backend, threads, subnormals, host_callbacks)
    return module, runner


def _build(module: Module, pipeline: str | None, backend: str, threads: int | None = None,
           subnormals: str = subnormal_modes.DEFAULT,
           host_callbacks: HostCallbacks | None = None) -> tuple[Module, Any]:
    b = registry.get(backend)
    b.require()
    _check_threads(threads)
    subnormal_modes.check(subnormals)
    from hlofuse.backends.static_shapes import require_static

    require_static(module)  # (dynamic shapes verify but do not run)
    if pipeline is not None:  # (the pipeline and C generation hold off the collector)
        from hlofuse.passes.pipelines import run_pipeline

        run_pipeline(module, pipeline)
    return module, b.compile(module, threads=threads, subnormals=subnormals,
                             host_callbacks=host_callbacks)


def _check_threads(threads: int | None) -> None:
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise HloError(f"threads={threads!r}: expected a positive integer (or None: "
                       "HLOFUSE_THREADS, else the CPUs this process may run on)")


@dataclass
class Executable:
    """A compiled module. `exe(*arrays)` returns a tuple of numpy arrays (the flattened outputs)."""

    _module: Module | Callable[[], Module] = field(repr=False)  # or made on first use
    pipeline: str | None
    backend: str
    _runner: Any = field(repr=False)

    @property
    def module(self) -> Module:
        """The optimised module (from the compile cache: parsed when first asked for)."""
        if not isinstance(self._module, Module):
            self._module = self._module()
        return self._module

    def __call__(self, *arrays: Any) -> tuple[np.ndarray, ...]:
        return tuple(self._runner(*arrays))

    @property
    def source(self) -> str:
        """The generated source (backends that generate code: cpu)."""
        if registry.get(self.backend).generate is None or not hasattr(self._runner, "source"):
            raise HloError(f"source is not available on the {self.backend!r} backend (it "
                           "generates no code); compile with backend='cpu'")
        return str(self._runner.source)

    def profile(self, *arrays: Any, repeat: int = 1) -> Profile:
        """Per-kernel call counts and times of `repeat` runs (backends that profile: cpu)."""
        if not registry.get(self.backend).profiles:
            raise HloError(f"profile is not available on the {self.backend!r} backend; compile "
                           "with backend='cpu'")
        return self._runner.profile(*arrays, repeat=repeat)  # type: ignore[no-any-return]


def compile(
    module_or_text: Module | str,
    pipeline: str | None = DEFAULT_PIPELINE,
    backend: str = DEFAULT_BACKEND,
    threads: int | None = None,
    autotune: bool = False,
    subnormals: str = subnormal_modes.DEFAULT,
    host_callbacks: HostCallbacks | None = None,
) -> Executable:
    """Parse (if needed), optimise with `pipeline` (None: none at all) and bind to `backend`.
    HLO text goes through the backend's compile cache when it has one. `threads`: how many
    threads the cpu backend's parallel loops may use (default: HLOFUSE_THREADS, else the CPUs
    this process may run on; 1: no threads). `autotune`: decisions the pipeline can measure
    (the `hlofuse` pipeline's unroll factors) are timed on this machine at compile time and
    cached, instead of taken from the cost model (`pipeline{autotune=true}`). `subnormals`:
    "flush" (the default: f32/f64/bf16 subnormals become zeros, as in jax.jit on CPU) or
    "keep" (IEEE 754, as numpy); every backend computes the same values under either
    (`backends/subnormals.py`). `host_callbacks`: the Python functions the module's host
    callbacks call (custom calls `xla_ffi_python_cpu_callback`, `backend_config={index = N}`:
    `table[N](*arrays) -> sequence of arrays`, `backends/host_callbacks.py`); a module with
    host callbacks and no table is refused, naming the instruction.

    The module is optimised in place; pass `module.clone()` to keep the original.
    """
    b = registry.get(backend)
    _check_threads(threads)
    subnormal_modes.check(subnormals)
    with gcpause.paused():  # (the collector would rescan the growing IR: gcpause.py)
        return _compile(module_or_text, pipeline, b, backend, threads, autotune, subnormals,
                        host_callbacks)


def _compile(module_or_text: Module | str, pipeline: str | None, b: registry.Backend,
             backend: str, threads: int | None, autotune: bool, subnormals: str,
             host_callbacks: HostCallbacks | None) -> Executable:
    if autotune:
        from hlofuse.passes.pipelines import with_settings

        pipeline = with_settings(pipeline or DEFAULT_PIPELINE, autotune=True)
    if isinstance(module_or_text, str) and b.compile_text is not None:
        b.require()
        cached = b.compile_text(module_or_text, pipeline, threads, subnormals, host_callbacks)
        if cached is not None:
            module, runner = cached
            return Executable(module, pipeline, backend, runner)
    module, runner = _build(_as_module(module_or_text), pipeline, backend, threads, subnormals,
                            host_callbacks)
    return Executable(module, pipeline, backend, runner)
