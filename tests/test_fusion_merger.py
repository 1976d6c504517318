"""`fusion-merger`: a loop fusion merges into all of its users or none, with the bytes figures
in the trace; interpreter equivalence before/after."""

from __future__ import annotations

from fusion_helpers import fusions, run_and_check
from hlofuse.analysis.kernels import count_kernels
from hlofuse.passes.base import Pipeline
from hlofuse.passes.fusion.core_passes import InstructionFusion
from hlofuse.passes.fusion.fusion_merger import FusionMerger, should_merge
from hlofuse.passes.fusion.trace import trace_of
from hlofuse.text import parse

SHARED = """
HloModule m
f_prod {
  a = f32[64] parameter(0)
  b = f32[64] parameter(1)
  ROOT s = f32[64] add(a, b)
}
f_u1 {
  x = f32[64] parameter(0)
  ROOT n = f32[64] negate(x)
}
f_u2 {
  x = f32[64] parameter(0)
  y = f32[64] parameter(1)
  ROOT m = f32[64] multiply(x, y)
}
ENTRY e {
  p0 = f32[64] parameter(0)
  p1 = f32[64] parameter(1)
  f = f32[64] fusion(p0, p1), kind=kLoop, calls=f_prod
  u1 = f32[64] fusion(f), kind=kLoop, calls=f_u1
  u2 = f32[64] fusion(f, p0), kind=kLoop, calls=f_u2
  ROOT t = (f32[64], f32[64]) tuple(u1, u2)
}
"""


def test_shared_fusion_merges_into_all_users() -> None:
    assert count_kernels(parse(SHARED)).entry == 3
    m, changed = run_and_check(SHARED, FusionMerger())
    assert changed
    assert count_kernels(m).entry == 2
    assert all(i.name != "f" for i in m.entry.instructions)
    (event,) = [e for e in trace_of(m).fused() if e.producer == "f"]
    # reads 2*256 B, writes 256 B to 2 users: current 512 + 256*3, merged 512*2
    assert event.figures == {"current_bytes": 1280, "merged_bytes": 1024, "ratio": 0.8}


def test_merge_refused_when_bytes_would_grow() -> None:
    params = "\n".join(f"  a{i} = f32[1000] parameter({i})" for i in range(6))
    sums = "\n".join(f"  s{i} = f32[1000] add(s{i - 1}, a{i})" for i in range(2, 6))
    text = f"""
HloModule m
f_prod {{
{params}
  s1 = f32[1000] add(a0, a1)
{sums}
  ROOT r = f32[1000] negate(s5)
}}
f_u1 {{
  x = f32[1000] parameter(0)
  ROOT n = f32[1000] abs(x)
}}
f_u2 {{
  x = f32[1000] parameter(0)
  ROOT n = f32[1000] negate(x)
}}
ENTRY e {{
{params.replace("  a", "  p")}
  f = f32[1000] fusion(p0, p1, p2, p3, p4, p5), kind=kLoop, calls=f_prod
  u1 = f32[1000] fusion(f), kind=kLoop, calls=f_u1
  u2 = f32[1000] fusion(f), kind=kLoop, calls=f_u2
  ROOT t = (f32[1000], f32[1000]) tuple(u1, u2)
}}
"""
    m, changed = run_and_check(text, FusionMerger())
    assert not changed
    (event,) = [e for e in trace_of(m).refused() if e.producer == "f"]
    assert "merged-to-current-bytes-ratio" in event.reason
    assert event.rule == "merger_bytes_ratio"
    assert event.figures["ratio"] > 1.1
    # the setting relaxes it
    m2, changed2 = run_and_check(text, FusionMerger(merger_bytes_ratio=2.0))
    assert changed2 and len(fusions(m2)) == 2


def test_expensive_fusion_read_repeatedly_is_not_merged() -> None:
    text = """
HloModule m
f_prod {
  a = f32[16] parameter(0)
  ROOT l = f32[16] log(a)
}
f_u {
  x = f32[16] parameter(0)
  b = f32[16,16] broadcast(x), dimensions={0}
  ROOT n = f32[16,16] negate(b)
}
ENTRY e {
  p0 = f32[16] parameter(0)
  f = f32[16] fusion(p0), kind=kLoop, calls=f_prod
  ROOT u = f32[16,16] fusion(f), kind=kLoop, calls=f_u
}
"""
    m, changed = run_and_check(text, FusionMerger())
    assert not changed
    assert any(e.reason == "fusion contains an expensive instruction"
               for e in trace_of(m).refused())


def test_bitcast_user_blocks_merge() -> None:
    text = """
HloModule m
f_prod {
  a = f32[16] parameter(0)
  ROOT n = f32[16] negate(a)
}
ENTRY e {
  p0 = f32[16] parameter(0)
  f = f32[16] fusion(p0), kind=kLoop, calls=f_prod
  b = f32[4,4] bitcast(f)
  ROOT t = (f32[16], f32[4,4]) tuple(f, b)
}
"""
    m = parse(text)
    d = should_merge(m.instruction("f"), FusionMerger().config())
    assert not d and d.reason == "not fusing bitcast ops"


def test_merges_into_unfused_user_by_wrapping_it() -> None:
    text = """
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
f_prod {
  a = f32[32,64] parameter(0)
  ROOT n = f32[32,64] negate(a)
}
ENTRY e {
  p0 = f32[32,64] parameter(0)
  f = f32[32,64] fusion(p0), kind=kLoop, calls=f_prod
  z = f32[] constant(0)
  ROOT r = f32[32] reduce(f, z), dimensions={1}, to_apply=add
}
"""
    m, changed = run_and_check(text, FusionMerger())
    assert changed
    root = m.entry.root
    assert root.opcode.value == "fusion" and root.fusion_kind == "kInput"


def test_pipeline_with_merger_2023_version() -> None:
    text = """
HloModule m
ENTRY e {
  p0 = f32[64] parameter(0)
  a = f32[64] add(p0, p0)
  e1 = f32[64] exponential(a)
  s1 = f32[64] sqrt(a)
  ROOT t = (f32[64], f32[64]) tuple(e1, s1)
}
"""
    pipe = Pipeline("xla", [InstructionFusion(may_duplicate=False),
                            InstructionFusion(may_duplicate=True),
                            FusionMerger(merger_version="2023")])
    m, _ = run_and_check(text, pipe)
    assert count_kernels(m).entry == 2


def test_merger_2023_version_matches_xla_merger_cases() -> None:
    from conformance import check_expect, load_cases, parse_case

    cases = load_cases("fusion_merger")
    if not cases:
        return
    for cid, case in cases.items():
        m = parse_case(case)
        changed = FusionMerger(merger_version="2023", max_operands_and_outputs=96).run(m)
        assert not check_expect(case, m, changed), cid
