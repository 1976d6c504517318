"""The public entry points that tie the pieces together: compile a module (or HLO text) with a
named pipeline for a backend, and get back something callable on numpy arrays.

    exe = compile(text)                          # pipeline "xla", backend "cpu"
    outs = exe(x, y)                             # tuple of numpy arrays (flattened root leaves)
    print(exe.profile(x, y))                     # cpu only: per-kernel times
    exe.source                                   # cpu only: the generated C

Backends: "cpu" (generated C, needs a C compiler; `CompilerNotFoundError` says to use the
interpreter otherwise) and "interpreter" (the numpy reference, always available).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hlofuse.errors import HloError
from hlofuse.ir.module import Module

if TYPE_CHECKING:
    from hlofuse.backends.cpu.executable import CpuExecutable, Profile

BACKENDS = ("interpreter", "cpu")
DEFAULT_PIPELINE = "xla"
DEFAULT_BACKEND = "cpu"


def _as_module(module_or_text: Module | str) -> Module:
    if isinstance(module_or_text, Module):
        return module_or_text
    from hlofuse.text import parse

    return parse(module_or_text)


def check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise HloError(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")


def require_compiler() -> None:
    """Raise `CompilerNotFoundError` (naming the interpreter fallback) if no C compiler exists."""
    from hlofuse.backends.cpu import build

    try:
        build.find_compiler()
    except build.CompilerNotFoundError as exc:
        if "interpreter" in str(exc):
            raise
        raise build.CompilerNotFoundError(
            f"{exc} (the 'interpreter' backend needs no compiler: pass backend='interpreter', "
            "or --backend interpreter on the command line)"
        ) from None


def build_runner(
    module: Module, *, pipeline: str | None = None, backend: str = "interpreter"
) -> tuple[Module, Callable[..., list[np.ndarray]]]:
    """Run `pipeline` (a name or a pass spec) on `module`, then bind it to `backend`."""
    module, run, _ = _build(module, pipeline, backend)
    return module, run


def _build(
    module: Module, pipeline: str | None, backend: str
) -> tuple[Module, Callable[..., list[np.ndarray]], CpuExecutable | None]:
    check_backend(backend)
    if backend == "cpu":
        require_compiler()
    if pipeline is not None:
        from hlofuse.passes.pipelines import run_pipeline

        run_pipeline(module, pipeline)
    if backend == "cpu":
        from hlofuse.backends import cpu

        exe = cpu.compile_module(module)
        return module, exe.__call__, exe

    from hlofuse.backends import interpreter

    def run(*args: np.ndarray) -> list[np.ndarray]:
        return interpreter.run(module, *args)

    return module, run, None


@dataclass
class Executable:
    """A compiled module. `exe(*arrays)` returns a tuple of numpy arrays (the flattened outputs)."""

    module: Module
    pipeline: str | None
    backend: str
    _run: Callable[..., list[np.ndarray]]
    _native: CpuExecutable | None = field(default=None, repr=False)

    def __call__(self, *arrays: Any) -> tuple[np.ndarray, ...]:
        return tuple(self._run(*arrays))

    @property
    def source(self) -> str:
        """The generated C file (cpu backend only)."""
        return self._cpu("source").source

    def profile(self, *arrays: Any, repeat: int = 1) -> Profile:
        """Per-kernel call counts and times of `repeat` runs (cpu backend only)."""
        return self._cpu("profile").profile(*arrays, repeat=repeat)

    def _cpu(self, what: str) -> CpuExecutable:
        if self._native is None:
            raise HloError(
                f"{what} is only available on the cpu backend (this executable runs on "
                f"{self.backend!r}); compile with backend='cpu'"
            )
        return self._native


def compile(
    module_or_text: Module | str,
    pipeline: str | None = DEFAULT_PIPELINE,
    backend: str = DEFAULT_BACKEND,
) -> Executable:
    """Parse (if needed), optimise with `pipeline` (None: none at all) and bind to `backend`.

    The module is optimised in place; pass `module.clone()` to keep the original.
    """
    check_backend(backend)
    if backend == "cpu" and isinstance(module_or_text, str):
        return _compile_cpu_text(module_or_text, pipeline)
    module = _as_module(module_or_text)
    module, run, native = _build(module, pipeline, backend)
    return Executable(module, pipeline, backend, run, native)


def _compile_cpu_text(text: str, pipeline: str | None) -> Executable:
    """HLO text for the cpu backend goes through the compile cache (`backends.cpu.artifacts`):
    a warm compile skips the pipeline and the C generation."""
    from hlofuse.backends.cpu import artifacts
    from hlofuse.backends.cpu.executable import CpuExecutable

    require_compiler()
    hit = artifacts.lookup(text, pipeline)
    if hit is not None:
        module, program = hit
        exe = CpuExecutable(module, program)
    else:
        module, _, native = _build(_as_module(text), pipeline, "cpu")
        assert native is not None
        exe = native
        artifacts.store(text, pipeline, module, exe.program)
    return Executable(module, pipeline, "cpu", exe.__call__, exe)
