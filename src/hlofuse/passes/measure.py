"""Measurements a pass may ask for without importing a backend: the timer in the pass context.

A pass that chooses by timing candidates (auto-unroll's `autotune`) asks `timer()` for a
function that compiles modules and times them on this machine:

    timer()(key, {choice: module}) -> ({choice: ns per run}, whether from the cache) or None

The timer is the `Context.timer` of the pipeline run in progress (`passes/base.py`): whoever
runs the pipeline installs it. `api` (what `hlofuse.compile`, `hlofuse.jit` and the CLI run
pipelines through) installs the backends' one (`backends/measure.py`: the default backend,
random inputs, interleaved rounds, cached on disk); a test that counts or fakes measurements,
or a tool that must not compile, runs the pipeline with a context of its own. None (from
`timer()` or from the call) means it cannot be measured here (no timer in the context, a
candidate that does not compile, state that is not arrays); the pass then falls back on its
cost model and records why. `key` names the question (the pass's digest of module, loop and
settings) for the timer's cache. Passes import nothing from `backends/`, and nothing here is
global.
"""

from __future__ import annotations

from collections.abc import Callable

from hlofuse.ir.module import Module
from hlofuse.passes.base import active_context

Timer = Callable[[str, dict[int, Module]], tuple[dict[int, float], bool] | None]


def timer() -> Timer | None:
    """The timer of the pipeline run in progress (`Context.timer`), None outside a run or
    where its context has none."""
    context = active_context()
    return context.timer if context is not None else None
