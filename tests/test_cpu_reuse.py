"""Memory the cpu executable reuses across calls (executable.py, driver.py's hf_entry): the
memory of a large output nothing can reach any more becomes the next call's (never the array
itself), an output anyone still references never does, and the
kept work arena gives the same values call after call, from several threads at once."""

from __future__ import annotations

import threading
import weakref

import numpy as np
import pytest

import hlofuse
from hlofuse.backends import interpreter
from hlofuse.text import parse

pytestmark = pytest.mark.usefixtures("private_cpu_cache")  # (conftest.py)


_DOUBLE = """HloModule double
ENTRY e {
  x = f32[64] parameter(0)
  ROOT y = f32[64] add(x, x)
}
"""

# Internal buffers in the arena: the row sums and maxima live between kernels.
_ARENA = """HloModule arena
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
ENTRY e {
  x = f32[32,48] parameter(0)
  w = f32[48,48] parameter(1)
  d = f32[32,48] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ninf = f32[] constant(-inf)
  m = f32[32] reduce(d, ninf), dimensions={1}, to_apply=max
  mb = f32[32,48] broadcast(m), dimensions={0}
  s = f32[32,48] subtract(d, mb)
  e = f32[32,48] exponential(s)
  zero = f32[] constant(0)
  z = f32[32] reduce(e, zero), dimensions={1}, to_apply=add
  zb = f32[32,48] broadcast(z), dimensions={0}
  ROOT p = f32[32,48] divide(e, zb)
}
"""


def test_a_dropped_outputs_memory_is_the_next_calls_and_the_dropped_array_is_dead() -> None:
    exe = hlofuse.compile(_DOUBLE.replace("f32[64]", f"f32[{_LARGE}]"))
    x = np.arange(_LARGE, dtype=np.float32)
    first = exe(x)[0]
    address = first.ctypes.data
    gone = weakref.ref(first)
    del first  # nothing holds it: its memory goes back to the executable
    assert gone() is None
    again = exe(x + 1)[0]
    assert again.ctypes.data == address  # the same memory, a new array
    assert again.ctypes.data % 64 == 0
    np.testing.assert_array_equal(again, 2 * (x + 1))


_LARGE = 1 << 14  # f32: 64 KiB, the size from which output memory is recycled


def test_outputs_still_referenced_are_never_written() -> None:
    exe = hlofuse.compile(_DOUBLE)
    x = np.arange(64, dtype=np.float32)
    held = exe(x)[0]
    view = exe(x + 1)[0][8:16]  # the array itself dropped, a view of it kept
    fed = exe(x + 2)[0]
    back = exe(fed)[0]  # an output passed back in as the input
    for _ in range(3):
        exe(x + 100)
    np.testing.assert_array_equal(held, 2 * x)
    np.testing.assert_array_equal(view, 2 * (x + 1)[8:16])
    np.testing.assert_array_equal(fed, 2 * (x + 2))
    np.testing.assert_array_equal(back, 4 * (x + 2))
    assert back is not fed


def test_the_kept_arena_gives_the_same_values_every_call_and_in_threads() -> None:
    exe = hlofuse.compile(_ARENA)
    assert exe._runner.program.arena_bytes > 0
    rng = np.random.default_rng(4)
    cases = [(rng.standard_normal((32, 48)).astype(np.float32),
              (rng.standard_normal((48, 48)) / 7).astype(np.float32)) for _ in range(4)]
    want = [interpreter.run(parse(_ARENA), x, w)[0] for x, w in cases]
    for _ in range(3):
        for (x, w), ref in zip(cases, want, strict=True):
            np.testing.assert_allclose(exe(x, w)[0], ref, rtol=1e-5, atol=1e-6)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for i in range(40):
                x, w = cases[(i + k) % 4]
                np.testing.assert_allclose(exe(x, w)[0], want[(i + k) % 4], rtol=1e-5,
                                           atol=1e-6)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
