"""Kernel accounting (analysis/kernels.py) and the fusion trace helpers."""

from __future__ import annotations

from hlofuse.analysis.kernels import count_kernels
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.trace import FusionTrace, TraceEvent
from hlofuse.text import parse

TEXT = """
HloModule m
then {
  x = f32[8] parameter(0)
  a = f32[8] exponential(x)
  ROOT n = f32[8] negate(a)
}
else {
  x = f32[8] parameter(0)
  ROOT c = f32[8] copy(x)
}
callee {
  x = f32[8] parameter(0)
  ROOT s = f32[8] sqrt(x)
}
ENTRY e {
  p = f32[8] parameter(0)
  b = pred[] parameter(1)
  k = f32[8] call(p), to_apply=callee
  bc = f32[2,4] bitcast(k)
  r = f32[8] bitcast(bc)
  ROOT out = f32[8] conditional(b, r, p), true_computation=then, false_computation=else
}
"""


def test_calls_inline_conditionals_per_branch_and_free_ops() -> None:
    report = count_kernels(parse(TEXT))
    assert report.entry == 1  # sqrt in the callee; bitcasts, parameters, call: no kernels
    assert report.branches == {"out": [2, 1]}
    assert "conditional out: 2, 1 kernel(s) per branch" in report.summary()
    assert report.total_static == 4


def test_trace_records_and_filters() -> None:
    trace = FusionTrace()
    trace.record("p", "c", "a", FusionDecision.ok(), "e", fused=True)
    trace.record("p", "c", "b", FusionDecision.no("why", "max_code_duplication", emitted=20))
    assert [e.producer for e in trace.fused()] == ["a"]
    (refused,) = trace.refused()
    assert refused.figures == {"emitted": 20}
    assert "[setting: max_code_duplication]" in str(refused)
    assert [e.producer for e in trace.about("c")] == ["a", "b"]
    line = refused.to_json()
    assert TraceEvent.from_json(line) == refused


def test_an_array_updated_in_place_moves_its_update() -> None:
    """A scan's `ys` row written into a [1000, 64] buffer moves the row (read and written), not
    the buffer twice; also as a chain of updates inside a fusion (an unrolled scan), and for a
    scatter. What auto-unroll and whole-loop fusion cost loops by."""
    from hlofuse.analysis.kernels import in_place_updates, kernel_bytes

    module = parse("""
HloModule m
fused {
  buf = f32[1000,64] parameter(0)
  row = f32[1,64] parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  a = f32[1000,64] dynamic-update-slice(buf, row, i, z)
  ROOT b = f32[1000,64] dynamic-update-slice(a, row, j, z)
}
ENTRY e {
  buf = f32[1000,64] parameter(0)
  row = f32[1,64] parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  d = f32[1000,64] dynamic-update-slice(buf, row, i, z)
  ROOT f = f32[1000,64] fusion(d, row, i), kind=kLoop, calls=fused
}
""")
    d = next(i for i in module.entry.instructions if i.name == "d")
    f = module.entry.root
    assert in_place_updates(d) == {0: 256}
    assert kernel_bytes(d) == 256 + 256 + 4 + 4 + 256  # the row (and i, z) read, the row written
    assert in_place_updates(f) == {0: 512}
    assert kernel_bytes(f) == 512 + 256 + 4 + 512
