"""The public entry points that tie the pieces together, and the one compile route: only this
module parses HLO for a compile, runs the pipeline and binds a backend; the backends' caches,
the JAX frontend and the CLI call it (`docs/layout.md`, "The compile route").

    exe = compile(text)                          # pipeline "hlofuse", backend "cpu"
    outs = exe(x, y)                             # tuple of numpy arrays (flattened root leaves)
    print(exe.profile(x, y))                     # cpu only: per-kernel times
    exe.source                                   # cpu only: the generated C

    optimise(module_or_text, pipeline)           parse, run the pipeline (its pass context
                                                 carries the backends' timer): (module, report)
    bind(module, pipeline, backend)              optimise and bind: (module, runner, backend);
                                                 backend None: the default, with its fallback

Backends come from `backends.registry`: "cpu" (generated C, needs a C compiler;
`CompilerNotFoundError` says to use the interpreter otherwise) and "interpreter" (the numpy
reference, always available). Nothing here dispatches on a backend's name.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hlofuse import gcpause
from hlofuse.backends import measure, registry
from hlofuse.backends import subnormals as subnormal_modes
from hlofuse.backends.host_callbacks import HostCallbacks
from hlofuse.errors import HloError
from hlofuse.ir.module import Module
from hlofuse.passes.defaults import DEFAULT_PIPELINE

if TYPE_CHECKING:
    from pathlib import Path

    from hlofuse.backends.cpu.executable import Profile
    from hlofuse.passes.base import Context, PipelineReport

DEFAULT_BACKEND = "cpu"


def _as_module(module_or_text: Module | str, source_name: str | None = None) -> Module:
    if isinstance(module_or_text, Module):
        return module_or_text
    from hlofuse.text import parse

    if source_name is None:
        return parse(module_or_text)
    return parse(module_or_text, source_name=source_name)


def load(text: str, *, source_name: str | None = None) -> Module:
    """HLO text (long or short form) -> a verified Module (`source_name`: what its errors and
    source locations call the text)."""
    return _as_module(text, source_name)


def check_backend(backend: str) -> None:
    """Raise `HloError` for an unknown backend name (see `backends.registry`)."""
    registry.get(backend)


def with_autotune(pipeline: str | None) -> str:
    """`pipeline` (None: the default) with its measurable decisions timed (`autotune=true`)."""
    from hlofuse.passes.pipelines import with_settings

    return with_settings(pipeline or DEFAULT_PIPELINE, autotune=True)


def pipeline_context(context: Context | None = None) -> Context:
    """The pass context pipelines run under here: `context` (or a new one) with the backends'
    timer for passes that measure (auto-unroll's autotune: `backends/measure.py`) unless it
    carries a timer of its own. Passes never call a backend themselves (`passes/measure.py`)."""
    from hlofuse.passes.base import Context

    ctx = context if context is not None else Context()
    return ctx if ctx.timer is not None else dataclasses.replace(
        ctx, timer=measure.time_candidates)


def optimise(module_or_text: Module | str, pipeline: str | None, *,
             context: Context | None = None, verify: bool = False,
             dump_dir: str | Path | None = None) -> tuple[Module, PipelineReport | None]:
    """Parse (text) and run `pipeline` (a name or a pass spec; None: none) on the module in
    place, under `pipeline_context(context)`; the module and the pipeline's report (None
    without a pipeline). `verify`/`dump_dir` as for `passes.pipelines.run_pipeline`."""
    module = _as_module(module_or_text)
    if pipeline is None:
        return module, None
    from hlofuse.passes.pipelines import run_pipeline  # (the collector: gcpause in the run)

    return module, run_pipeline(module, pipeline, verify=verify, dump_dir=dump_dir,
                                context=pipeline_context(context))


def _prepared(module_or_text: Module | str, pipeline: str | None,
              backend: registry.Backend | None = None) -> Module:
    """Parsed, refused if it has dynamic shapes (they verify but do not run), optimised;
    `backend` warmed (`Backend.warm`) before the pipeline runs."""
    from hlofuse.backends.static_shapes import require_static

    module = _as_module(module_or_text)
    require_static(module)
    if backend is not None and backend.warm is not None:
        backend.warm(module)
    return optimise(module, pipeline)[0]


def _bind(b: registry.Backend, module: Module, threads: int | None, subnormals: str | None,
          host_callbacks: HostCallbacks | None) -> Any:
    return b.compile(module, threads=threads, subnormals=_mode(b, subnormals),
                     host_callbacks=host_callbacks)


def _checked(backend: str, threads: int | None, subnormals: str | None) -> registry.Backend:
    b = registry.get(backend)
    b.require()
    _check_threads(threads)
    if subnormals is not None:
        subnormal_modes.check(subnormals)
    return b


def _mode(b: registry.Backend, subnormals: str | None) -> str:
    """The subnormal mode asked for, or the backend's own (`Backend.default_subnormals`)."""
    return b.default_subnormals if subnormals is None else subnormals


def build_runner(
    module: Module, *, pipeline: str | None = None, backend: str = "interpreter",
    threads: int | None = None, subnormals: str | None = None,
    host_callbacks: HostCallbacks | None = None,
) -> tuple[Module, Callable[..., list[np.ndarray]]]:
    """Run `pipeline` (a name or a pass spec) on `module`, then bind it to `backend` (with the
    table its host callbacks index, if it has any)."""
    b = _checked(backend, threads, subnormals)
    module = _prepared(module, pipeline, b)
    return module, _bind(b, module, threads, subnormals, host_callbacks)


def bind(
    module: Module, pipeline: str | None, backend: str | None, *,
    threads: int | None = None, subnormals: str | None = None,
    host_callbacks: HostCallbacks | None = None,
    refused: Callable[[str, str, HloError], None] | None = None,
) -> tuple[Module, Callable[..., list[np.ndarray]], str]:
    """Optimise `module` with `pipeline` and bind it: (the module, the runner, the backend's
    name). `backend` None: the default backend (`registry.default`); where it refuses an op
    of the module (`Backend.refuses`), the optimised module is bound to its `fallback`
    instead, after `refused(backend, fallback, error)` (`hlofuse.jit` warns there). A named
    backend never falls back: its error is raised."""
    if backend is not None:
        check_backend(backend)
        module, run = build_runner(module, pipeline=pipeline, backend=backend, threads=threads,
                                   subnormals=subnormals, host_callbacks=host_callbacks)
        return module, run, backend
    backend = registry.default()
    b = _checked(backend, threads, subnormals)
    module = _prepared(module, pipeline, b)  # (once: a fallback binds the same module)
    if b.fallback is None:
        return module, _bind(b, module, threads, subnormals, host_callbacks), backend
    try:
        return module, _bind(b, module, threads, subnormals, host_callbacks), backend
    except HloError as exc:
        if not b.refuses(exc):
            raise
        if refused is not None:
            refused(backend, b.fallback, exc)
    b = _checked(b.fallback, threads, subnormals)
    return module, _bind(b, module, threads, subnormals, host_callbacks), b.name


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
        return self._runner.profile(*arrays, repeat=repeat)


def compile(
    module_or_text: Module | str,
    pipeline: str | None = DEFAULT_PIPELINE,
    backend: str = DEFAULT_BACKEND,
    threads: int | None = None,
    autotune: bool = False,
    subnormals: str | None = None,
    host_callbacks: HostCallbacks | None = None,
) -> Executable:
    """Parse (if needed), optimise with `pipeline` (None: none at all) and bind to `backend`.
    HLO text goes through the backend's compile cache when it has one. `threads`: how many
    threads the cpu backend's parallel loops may use (default: HLOFUSE_THREADS, else the CPUs
    this process may run on; 1: no threads). `autotune`: decisions the pipeline can measure
    (the `hlofuse` pipeline's unroll factors) are timed on this machine at compile time and
    cached, instead of taken from the cost model (`pipeline{autotune=true}`). `subnormals`:
    "flush" (f32/f64/bf16 subnormals become zeros, as in jax.jit on CPU), "keep" (IEEE 754, as
    numpy and XLA GPU), or None: the backend's own (`Backend.default_subnormals`: cpu and the
    interpreter flush, gpu keeps); a backend computes the same values as the interpreter under
    every mode it accepts (`backends/subnormals.py`). `host_callbacks`: the Python functions
    the module's host callbacks call (custom calls `xla_ffi_python_cpu_callback`,
    `backend_config={index = N}`: `table[N](*arrays) -> sequence of arrays`,
    `backends/host_callbacks.py`); a module with host callbacks and no table is refused,
    naming the instruction.

    The module is optimised in place; pass `module.clone()` to keep the original.
    """
    b = registry.get(backend)
    _check_threads(threads)
    if subnormals is not None:
        subnormal_modes.check(subnormals)
    with gcpause.paused():  # (the collector would rescan the growing IR: gcpause.py)
        return _compile(module_or_text, pipeline, b, backend, threads, autotune, subnormals,
                        host_callbacks)


def _compile(module_or_text: Module | str, pipeline: str | None, b: registry.Backend,
             backend: str, threads: int | None, autotune: bool, subnormals: str | None,
             host_callbacks: HostCallbacks | None) -> Executable:
    if autotune:
        pipeline = with_autotune(pipeline)
    if isinstance(module_or_text, str) and b.compile_text is not None:
        b.require()
        module, runner = b.compile_text(module_or_text, pipeline, threads, _mode(b, subnormals),
                                        host_callbacks,
                                        functools.partial(_prepared, module_or_text, pipeline,
                                                          b))
        return Executable(module, pipeline, backend, runner)
    module, runner = build_runner(_as_module(module_or_text), pipeline=pipeline,
                                  backend=backend, threads=threads, subnormals=subnormals,
                                  host_callbacks=host_callbacks)
    return Executable(module, pipeline, backend, runner)
