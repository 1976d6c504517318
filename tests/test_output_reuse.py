"""Outputs handed to the caller are never written again (backends/cpu/executable.py, `_Lease`):
every way of holding an output -- the returned list itself, a tuple, a dict, an object
attribute, a weak reference, a WeakValueDictionary, a numpy view, a memoryview -- keeps its
values while later calls run, from one thread or several at once; on `compile_module`,
`build_runner`, `hlofuse.compile` and `hlofuse.jit` (through XLA's custom call and directly),
for small outputs (fresh arrays) and large ones (recycled memory)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import hlofuse
from hlofuse import api
from hlofuse.backends import cpu
from hlofuse.text import parse

pytestmark = pytest.mark.usefixtures("private_cpu_cache")  # (conftest.py)

SMALL, LARGE = 8, 1 << 15  # f32 elements: below and above the 64 KiB of recycled memory


def _text(n: int) -> str:
    return f"""HloModule two
ENTRY e {{
  x = f32[{n}] parameter(0)
  two = f32[] constant(2)
  b = f32[{n}] broadcast(two), dimensions={{}}
  d = f32[{n}] multiply(x, b)
  one = f32[] constant(1)
  o = f32[{n}] broadcast(one), dimensions={{}}
  p = f32[{n}] add(x, o)
  ROOT t = (f32[{n}], f32[{n}]) tuple(d, p)
}}
"""


def _want(x: np.ndarray) -> list[np.ndarray]:
    return [2 * x, x + 1]


def _two(x: Any) -> Any:
    return x * 2, x + 1


Runner = Callable[[np.ndarray], Any]


def _runner(kind: str, n: int) -> Runner:
    if kind == "compile_module":
        return cpu.compile_module(parse(_text(n)))
    if kind == "build_runner":
        return api.build_runner(parse(_text(n)), backend="cpu", pipeline="hlofuse")[1]
    if kind == "compile":
        return hlofuse.compile(_text(n))
    f = hlofuse.jit(_two)
    if kind == "jit-direct":
        f._xla = False  # the path without XLA: numpy outputs wrapped as jax.Arrays
    return f


KINDS = ["compile_module", "build_runner", "compile", "jit-xla", "jit-direct"]


class _Box:
    pass


def _attribute(outs: Any) -> Any:
    box = _Box()
    box.a, box.b = outs[0], outs[1]
    return box


# Each holder keeps the outputs of a call some way; `read` gives their values back later.
HOLDERS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], list[np.ndarray]]]] = {
    "returned container": (lambda outs: outs, lambda h: [np.asarray(h[0]), np.asarray(h[1])]),
    "tuple": (lambda outs: tuple(outs), lambda h: [np.asarray(v) for v in h]),
    "list copy": (lambda outs: list(outs), lambda h: [np.asarray(v) for v in h]),
    "dict": (lambda outs: {"a": outs[0], "b": outs[1]},
             lambda h: [np.asarray(h["a"]), np.asarray(h["b"])]),
    "attribute": (_attribute, lambda h: [np.asarray(h.a), np.asarray(h.b)]),
    "numpy view": (lambda outs: [np.asarray(outs[0])[1:], np.asarray(outs[1])[::2]],
                   lambda h: [np.concatenate([[np.nan], h[0]]), h[1]]),
    "memoryview": (lambda outs: [memoryview(np.asarray(outs[0])), memoryview(np.asarray(outs[1]))],
                   lambda h: [np.asarray(h[0]), np.asarray(h[1])]),
}


def _expected(holder: str, x: np.ndarray) -> list[np.ndarray]:
    want = _want(x)
    if holder == "numpy view":
        return [np.concatenate([[np.nan], want[0][1:]]), want[1][::2]]
    return want


@pytest.mark.parametrize("n", [SMALL, LARGE])
@pytest.mark.parametrize("kind", KINDS)
def test_every_way_of_holding_an_output_keeps_its_values(kind: str, n: int) -> None:
    run = _runner(kind, n)
    xs = [np.full(n, k, np.float32) + np.arange(n, dtype=np.float32) for k in range(12)]
    held = []
    for k, (name, (hold, _)) in enumerate(HOLDERS.items()):
        held.append((name, k, hold(run(xs[k]))))  # the call's own result: dropped here
        run(xs[-1])  # and calls whose results are dropped at once
        run(xs[-2])
    for _ in range(3):
        run(xs[-3])
    for name, k, h in held:
        got = HOLDERS[name][1](h)
        for g, w in zip(got, _expected(name, xs[k]), strict=True):
            np.testing.assert_array_equal(g, w, err_msg=f"{kind}: held as {name}")


@pytest.mark.parametrize("n", [SMALL, LARGE])
@pytest.mark.parametrize("kind", KINDS)
def test_each_call_returns_new_containers_and_arrays(kind: str, n: int) -> None:
    run = _runner(kind, n)
    x = np.arange(n, dtype=np.float32)
    first, second = run(x), run(x + 1)
    assert first is not second
    for a in first:
        for b in second:
            assert a is not b
            assert not np.shares_memory(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(first[0]), 2 * x)


@pytest.mark.parametrize("n", [SMALL, LARGE])
@pytest.mark.parametrize("kind", KINDS)
def test_weak_references_never_show_a_later_calls_values(kind: str, n: int) -> None:
    run = _runner(kind, n)
    x = np.arange(n, dtype=np.float32)
    outs = run(x)
    ref = weakref.ref(outs[0])
    table: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
    table["p"] = outs[1]
    del outs
    for k in range(4):
        run(x + 10 * (k + 1))
    for got, want in ((ref(), 2 * x), (table.get("p"), x + 1)):
        # dead, or still its own values: never another call's
        assert got is None or np.array_equal(np.asarray(got), want), kind


@pytest.mark.parametrize("n", [SMALL, LARGE])
@pytest.mark.parametrize("kind", KINDS)
def test_threads_calling_one_executable_never_share_outputs(kind: str, n: int) -> None:
    run = _runner(kind, n)
    base = np.arange(n, dtype=np.float32)
    run(base)  # (compiled before the threads start)
    kept: list[list[tuple[float, Any]]] = [[] for _ in range(4)]
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def worker(t: int) -> None:
        try:
            start.wait()
            for i in range(25):
                k = float(100 * t + i)
                outs = run(base + k)
                if i % 3:  # keep two calls in three, drop the rest at once
                    kept[t].append((k, outs))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]
    seen: dict[int, float] = {}
    for rows in kept:
        for k, outs in rows:
            for got, want in zip(outs, _want(base + k), strict=True):
                np.testing.assert_array_equal(np.asarray(got), want, err_msg=kind)
                if not kind.startswith("jit"):
                    address = got.ctypes.data
                    assert address not in seen, (kind, k, seen.get(address))
                    seen[address] = k


def test_large_outputs_are_aligned_and_their_memory_comes_back_only_when_unreachable() -> None:
    exe = cpu.compile_module(parse(_text(LARGE)))
    x = np.arange(LARGE, dtype=np.float32)
    outs = exe(x)
    assert all(o.ctypes.data % 64 == 0 for o in outs)
    view = outs[0][5:]
    seen = {o.ctypes.data for o in outs}
    del outs  # the view still reaches the first output's memory
    again = exe(x + 1)
    assert view.ctypes.data - 20 not in {o.ctypes.data for o in again}
    np.testing.assert_array_equal(view, 2 * x[5:])
    seen |= {o.ctypes.data for o in again}
    del again, view
    later = exe(x + 2)  # every buffer is free now: recycled memory, not fresh pages
    assert {o.ctypes.data for o in later} <= seen
    np.testing.assert_array_equal(later[1], x + 3)


@pytest.mark.parametrize(("ty", "dtype"), [("bf16", "bfloat16"), ("s4", "int4"), ("c64", None)])
def test_large_outputs_of_every_element_type_keep_their_type_and_values(ty: str,
                                                                        dtype: str | None) -> None:
    import ml_dtypes

    dt = np.dtype(getattr(ml_dtypes, dtype) if dtype else np.complex64)
    n = 1 << 16
    text = (f"HloModule t\nENTRY e {{\n  x = {ty}[{n}] parameter(0)\n"
            f"  ROOT y = {ty}[{n}] add(x, x)\n}}\n")
    exe = hlofuse.compile(text)
    x = (np.arange(n) % 3).astype(dt)
    first = exe(x)[0]
    second = exe(np.zeros(n, dt))[0]
    assert first.dtype == dt and first.shape == (n,) and second.dtype == dt
    np.testing.assert_array_equal(first.astype(np.complex128), 2 * x.astype(np.complex128))
    assert not np.shares_memory(first, second)
