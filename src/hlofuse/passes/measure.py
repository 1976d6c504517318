"""Measurements a pass may ask for without importing a backend: the timer callback.

A pass that chooses by timing candidates (auto-unroll's `autotune`) asks `timer()` for a
function that compiles modules and times them on this machine:

    timer()(key, {choice: module}) -> ({choice: ns per run}, whether from the cache) or None

None (from `timer()` or from the call) means it cannot be measured here (no backend that times,
a candidate that does not compile, state that is not arrays); the pass then falls back on its
cost model and records why. `key` names the question (the pass's digest of module, loop and
settings) for the timer's cache.

The backends register the default timer when they are imported (`backends/measure.py`: the
default backend, random inputs, interleaved rounds, cached on disk). A caller may put another in
place for a block (`using`): a test that counts or fakes measurements, a tool that must not
compile. Passes import nothing from `backends/`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from hlofuse.ir.module import Module

Timer = Callable[[str, dict[int, Module]], tuple[dict[int, float], bool] | None]

_default: list[Timer] = []  # (the backends' timer, once registered)
_current: ContextVar[Timer | None] = ContextVar("hlofuse_pass_timer", default=None)


def register_default(timer: Timer) -> None:
    """The timer passes use when no caller chose one (the backends call this on import)."""
    _default[:] = [timer]


def timer() -> Timer | None:
    """The timer in effect: the caller's (`using`), else the registered default, else None."""
    chosen = _current.get()
    if chosen is not None:
        return chosen
    return _default[0] if _default else None


@contextmanager
def using(chosen: Timer | None) -> Iterator[None]:
    """`chosen` is the timer for passes run inside the block (None: the default)."""
    token = _current.set(chosen)
    try:
        yield
    finally:
        _current.reset(token)
