"""Python's cyclic garbage collector held off while hlofuse compiles.

A compile allocates hundreds of thousands of small objects (instructions, attribute dicts,
kernel IR nodes) and keeps most of them, so the collector's automatic runs keep scanning a
growing heap (and, in a JAX process, JAX's own) to find little. The parser (`text.parse`), a
top-level pass pipeline (`passes.base`), the cpu backend's C generation (`cpu.generate`) and
`hlofuse.compile` as a whole each hold it off. The parser alone doubled its time on a
5,000-instruction module with it on; the pipelines' full collections took 0.3 s each in a JAX
process. Holding it off through C generation and between the steps too saves a further 4-8%
of a cold compile's CPU (mean of 4 interleaved runs with JAX imported: gpt-16 3.82 -> 3.55 s,
chain-10000 1.45 -> 1.34 s, gpt-8 1.73 -> 1.67 s), for a peak memory a few MB higher (gpt-16
97 -> 99 MB, scan-1024 133 -> 150 MB). The garbage a compile leaves is collected by the first
automatic run after it, or earlier, by `collect_young`, where a thread would wait anyway
(beside the C compiler, `backends.cpu.compile_module`).

Conditions enforced: `paused()` nests and may be entered from several threads at once; the
collector is enabled again when the last one leaves, and only if it was enabled when the first
one entered (a caller that disabled it keeps it disabled); `collect_young` collects only under
the same condition (outside a pause: only if the collector is on).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_LOCK = threading.Lock()
_state = {"holders": 0, "was_enabled": False}


@contextmanager
def paused() -> Iterator[None]:
    """Hold off automatic garbage collection for the duration (see the module docstring)."""
    with _LOCK:
        if _state["holders"] == 0:
            _state["was_enabled"] = gc.isenabled()
            gc.disable()
        _state["holders"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _state["holders"] -= 1
            if _state["holders"] == 0 and _state["was_enabled"]:
                gc.enable()


def collect_young() -> None:
    """Collect the youngest generation now, unless the collector was off when the outermost
    `paused()` began (or is off now, outside one): the first automatic run after a compile
    walks every object the compile allocated (gpt-8: 0.06 s, gpt-16: 0.16 s), and its caller
    would wait for it; run beside the C compiler it overlaps the build instead."""
    with _LOCK:
        enabled = _state["was_enabled"] if _state["holders"] else gc.isenabled()
    if enabled:
        gc.collect(0)
