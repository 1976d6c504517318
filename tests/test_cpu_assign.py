"""The driver IR (backends/driver_ir/schedule.py) and buffer assignment as its own pass (assign.py):
what runs where before any C is printed, and which buffers may share bytes.

The invariant checked on every module: two buffers whose live intervals overlap never overlap in
the arena, and every offset is 64-byte aligned. The liveness rules themselves are checked on
small modules: values that cross a loop stay live for the whole loop, temporaries of one
iteration reuse each other's bytes, loop-carried leaves get two buffers and swap.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hlofuse.backends.cpu.kernels import lower
from hlofuse.backends.driver_ir.assign import ALIGN, aligned_size, assign, liveness
from hlofuse.backends.driver_ir.schedule import (
    Arg,
    Buf,
    Call,
    Carried,
    Result,
    Schedule,
    Spare,
    While,
    schedule,
)
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse

EXAMPLES = Path(__file__).resolve().parents[1] / "src" / "hlofuse" / "examples"


def sched_of(text: str, pipeline: str = "xla") -> Schedule:
    module = parse(text)
    run_pipeline(module, pipeline)
    return schedule(module, lower, set())


def check_invariant(s: Schedule) -> None:
    size = assign(s)
    live = liveness(s)
    used = [b for b in s.buffers if b.id in live.first]
    for b in used:
        assert b.offset % ALIGN == 0 and b.offset + aligned_size(b) <= size
    for i, a in enumerate(used):
        for b in used[i + 1:]:
            overlap_time = live.first[a.id] <= live.last[b.id] and \
                live.first[b.id] <= live.last[a.id]
            overlap_bytes = a.offset < b.offset + aligned_size(b) and \
                b.offset < a.offset + aligned_size(a)
            assert not (overlap_time and overlap_bytes), (a.label, b.label)


@pytest.mark.parametrize("example", sorted(p.stem for p in EXAMPLES.glob("*.hlo")))
@pytest.mark.parametrize("pipeline", ["none", "xla"])
def test_no_live_buffers_share_bytes(example: str, pipeline: str) -> None:
    check_invariant(sched_of((EXAMPLES / f"{example}.hlo").read_text(), pipeline))


CHAIN = """
HloModule chain
ENTRY e {
  a = f32[1024] parameter(0)
  b = f32[1024] exponential(a)
  c = f32[1024] sine(b)
  d = f32[1024] cosine(c)
  ROOT r = f32[1024] negate(d)
}
"""


def test_straight_line_temporaries_reuse_bytes_and_the_result_is_written_directly() -> None:
    s = sched_of(CHAIN, "none")
    size = assign(s)
    calls = [x for x in s.body if isinstance(x, Call)]
    assert calls[0].ins == [Arg(0)] and calls[-1].outs == [Result(0)]
    # exp -> sin -> cos: three temporaries, at most two live at once
    assert len(s.buffers) == 3 and size == 2 * 4096


COUNTER = """
HloModule counter
cond {
  p = (s32[], f32[256]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[256]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[256] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  s = f32[256] sine(x)
  e = f32[256] exponential(s)
  ROOT t = (s32[], f32[256]) tuple(i1, e)
}
ENTRY e {
  x0 = f32[256] parameter(0)
  y = f32[256] parameter(1)
  pre = f32[256] multiply(x0, y)
  z = s32[] constant(0)
  init = (s32[], f32[256]) tuple(z, pre)
  w = (s32[], f32[256]) while(init), condition=cond, body=body
  out = f32[256] get-tuple-element(w), index=1
  ROOT r = f32[256] add(out, pre)
}
"""


def test_loop_state_swaps_and_values_crossing_the_loop_stay_live() -> None:
    s = sched_of(COUNTER, "none")
    size = assign(s)
    live = liveness(s)
    (loop,) = [x for x in s.body if isinstance(x, While)]
    assert {c.leaf for c in loop.carried} == {0, 1}
    # the body's last kernel writes the spare pointer, not a buffer of its own
    last = [x for x in loop.body if isinstance(x, Call)][-1]
    assert any(isinstance(o, Spare) for o in last.outs)
    # `pre` (computed before the loop, read after it) is live over the whole loop, so no
    # buffer of the loop overlaps it in bytes
    first_call = s.body[0]
    assert isinstance(first_call, Call)
    (pre,) = first_call.outs
    assert isinstance(pre, Buf)
    inside = {b.id for c in loop.carried for b in c.buffers()}
    inside |= {b.id for x in loop.body if isinstance(x, Call) for o in x.outs
               for b in o.buffers()}
    for b in s.buffers:
        if b.id in inside and b is not pre:
            assert live.last[pre.id] >= live.last[b.id]
            assert b.offset >= pre.offset + aligned_size(pre) or \
                pre.offset >= b.offset + aligned_size(b)
    check_invariant(s)
    assert size > 0


SCAN = """
HloModule scan
cond {
  p = (s32[], f32[8,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(8)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[8,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  m = f32[8,4] get-tuple-element(p), index=1
  row = f32[1,4] constant({{1, 2, 3, 4}})
  z = s32[] constant(0)
  m2 = f32[8,4] dynamic-update-slice(m, row, i, z)
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[8,4]) tuple(i1, m2)
}
ENTRY e {
  m0 = f32[8,4] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[8,4]) tuple(z, m0)
  w = (s32[], f32[8,4]) while(init), condition=cond, body=body
  ROOT out = f32[8,4] get-tuple-element(w), index=1
}
"""


def test_a_scan_updates_its_matrix_in_place_in_the_result() -> None:
    s = sched_of(SCAN, "xla")
    assign(s)
    (loop,) = [x for x in s.body if isinstance(x, While)]
    dus = [x for x in loop.body if isinstance(x, Call) and "in place" in x.note]
    assert len(dus) == 1
    (out,) = dus[0].outs
    assert out in dus[0].ins and out == Result(0)  # one buffer: the caller's result
    assert not any(isinstance(c, Carried) and c.leaf == 1 for c in loop.carried)


def test_first_fit_is_the_loop_it_replaced() -> None:
    """`assign._first_fit` (array operations) places a buffer where the plain loop does: the
    placed ranges that overlap in time, by start (then end), the offset so far the largest end
    seen, the buffer before the first range that starts `size` bytes or more beyond it."""
    import random

    import numpy as np

    from hlofuse.backends.driver_ir.assign import _first_fit

    def loop(lo: np.ndarray, hi: np.ndarray, overlap: np.ndarray, size: int) -> int:
        offset = 0
        for b_lo, b_hi in sorted(zip(lo[overlap].tolist(), hi[overlap].tolist(), strict=True)):
            if offset + size <= b_lo:
                break
            offset = max(offset, b_hi)
        return offset

    rng = random.Random(1)
    for _ in range(5000):
        n = rng.randrange(0, 12)
        lo = np.array([rng.randrange(0, 20) * ALIGN for _ in range(n)], np.int64)
        hi = lo + np.array([rng.randrange(1, 8) * ALIGN for _ in range(n)], np.int64)
        overlap = np.array([rng.random() < 0.7 for _ in range(n)], bool)
        size = rng.randrange(1, 6) * ALIGN
        assert _first_fit(lo, hi, overlap, size) == loop(lo, hi, overlap, size)
