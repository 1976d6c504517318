"""The public entry points that tie the pieces together: compile a module (or HLO text) with a
named pipeline for a backend, and get back something callable on numpy arrays."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hlofuse.errors import HloError
from hlofuse.ir.module import Module

BACKENDS = ("interpreter",)


def _as_module(module_or_text: Module | str) -> Module:
    if isinstance(module_or_text, Module):
        return module_or_text
    from hlofuse.text import parse

    return parse(module_or_text)


def build_runner(
    module: Module, *, pipeline: str | None = None, backend: str = "interpreter"
) -> tuple[Module, Callable[..., list[np.ndarray]]]:
    """Run `pipeline` (a name or a pass spec) on `module`, then bind it to `backend`."""
    if backend not in BACKENDS:
        raise HloError(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")
    if pipeline is not None:
        from hlofuse.passes.pipelines import run_pipeline

        run_pipeline(module, pipeline)
    from hlofuse.backends import interpreter

    def run(*args: np.ndarray) -> list[np.ndarray]:
        return interpreter.run(module, *args)

    return module, run


@dataclass
class Executable:
    """A compiled module. `exe(*arrays)` returns a tuple of numpy arrays (the flattened outputs)."""

    module: Module
    pipeline: str | None
    backend: str
    _run: Callable[..., list[np.ndarray]]

    def __call__(self, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        return tuple(self._run(*arrays))


def compile(
    module_or_text: Module | str, pipeline: str | None = None, backend: str = "interpreter"
) -> Executable:
    """Parse (if needed), optimise with `pipeline` and bind to `backend`."""
    module = _as_module(module_or_text)
    module, run = build_runner(module, pipeline=pipeline, backend=backend)
    return Executable(module, pipeline, backend, run)
