"""The garbage collector is held off while hlofuse compiles (gcpause.py), and given back."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import hlofuse
from hlofuse import gcpause
from hlofuse.backends import cpu
from hlofuse.errors import HloError
from hlofuse.text import parse


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def _chain(name: str, n: int) -> str:
    lines = [f"HloModule {name}", "", "ENTRY main {", "  x0 = f32[64] parameter(0)"]
    for i in range(1, n + 1):
        op = ("add", "multiply", "subtract")[i % 3]
        lines.append(f"  x{i} = f32[64] {op}(x{i - 1}, x0)")
    lines[-1] = "  ROOT" + lines[-1][1:]
    return "\n".join(lines) + "\n}\n"


def test_paused_nests_and_gives_the_collector_back(collector_on: None) -> None:
    with gcpause.paused():
        assert not gc.isenabled()
        with gcpause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled(collector_on: None) -> None:
    gc.disable()
    with gcpause.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()
    gc.enable()


def test_overlapping_threads_give_it_back_when_the_last_leaves(collector_on: None) -> None:
    entered, leave_first = threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with gcpause.paused():
            entered.set()
            leave_first.wait(10)

    t = threading.Thread(target=first)
    t.start()
    assert entered.wait(10)
    with gcpause.paused():
        leave_first.set()
        t.join(10)
        seen.append(gc.isenabled())  # the first thread left; this one still holds it
    assert seen == [False]
    assert gc.isenabled()


def _collections_during(fn: Callable[[], object]) -> list[tuple[int, str]]:
    """The collections that start while `fn` runs: (generation, the thread's name)."""
    events: list[tuple[int, str]] = []

    def spy(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            events.append((info["generation"], threading.current_thread().name))

    gc.callbacks.append(spy)
    try:
        fn()
    finally:
        gc.callbacks.remove(spy)
    return events


def test_compile_runs_no_automatic_collection(collector_on: None) -> None:
    made: list[Any] = []
    events = _collections_during(lambda: made.append(
        hlofuse.compile(_chain("gc_paused_chain", 300), backend="interpreter")))
    (exe,) = made
    # at most the one the first allocation after the pause runs (it finds the compile's garbage)
    assert len(events) <= 1
    assert gc.isenabled()
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    (got,) = exe(x)
    want = x.copy()
    for i in range(1, 301):
        op = i % 3  # (the chain's ops: add, multiply, subtract by i % 3)
        want = want + x if op == 0 else want * x if op == 1 else want - x
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_failing_compile_gives_the_collector_back(collector_on: None) -> None:
    with pytest.raises(HloError):
        hlofuse.compile("HloModule broken\n\nENTRY main {\n  ROOT x = f32[2] nope()\n}\n",
                        backend="interpreter")
    assert gc.isenabled()


def test_collect_young_collects_only_for_a_collector_that_was_on(collector_on: None) -> None:
    def young_inside_pause() -> None:
        with gcpause.paused():
            garbage = [[] for _ in range(2000)]
            del garbage
            gcpause.collect_young()

    assert [g for g, _ in _collections_during(young_inside_pause)] == [0]
    gc.disable()
    try:  # the caller's choice: no collection, inside a pause or outside one
        assert _collections_during(young_inside_pause) == []
        assert _collections_during(gcpause.collect_young) == []
    finally:
        gc.enable()


@pytest.mark.skipif(not cpu.available(), reason="needs a C compiler")
def test_the_cpu_build_collects_the_compiles_garbage_beside_the_compiler(
        collector_on: None) -> None:
    module = parse(_chain("gc_beside_chain", 200))
    made: list[Any] = []

    def compile_paused() -> None:
        with gcpause.paused():
            made.append(cpu.compile_module(module))

    threads = [name for g, name in _collections_during(compile_paused) if g == 0]
    (exe,) = made
    assert threads and threads[0].startswith("hlofuse-alongside")
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    assert exe(x)[0].shape == (64,)
