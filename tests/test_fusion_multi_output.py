"""`multi-output-fusion` (GpuMultiOutputFusion, E2) on crafted HLO: fusion groups, kinds, kernel
counts, the refusals (cycle, loop shapes, DUS, budget, scalar operand) with their reasons in the
trace, and the interpreter's outputs unchanged."""

from __future__ import annotations

from fusion_helpers import fusions, run_and_check
from hlofuse.analysis.kernels import count_kernels
from hlofuse.ir.fusion import is_multi_output_fusion
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.core_passes import MultiOutputFusion
from hlofuse.passes.fusion.graph import ReachabilityMap
from hlofuse.passes.fusion.multi_output import (
    fusion_priority,
    siblings_legal,
)
from hlofuse.passes.fusion.perf_model import (
    estimate_run_times,
    producer_consumer_merged_too_large,
)
from hlofuse.passes.fusion.trace import trace_of
from hlofuse.text import parse

ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
"""

SIBLINGS = """HloModule siblings
f1 {
  p = f32[64,32] parameter(0)
  ROOT m = f32[64,32] multiply(p, p)
}
f2 {
  p = f32[64,32] parameter(0)
  ROOT e = f32[64,32] exponential(p)
}
ENTRY e {
  p0 = f32[64,32] parameter(0)
  a = f32[64,32] fusion(p0), kind=kLoop, calls=f1
  b = f32[64,32] fusion(p0), kind=kLoop, calls=f2
  ROOT t = (f32[64,32], f32[64,32]) tuple(a, b)
}
"""


def _reasons(module: object) -> list[str]:
    return [e.reason for e in trace_of(module) if e.verdict == "refused"]  # type: ignore[arg-type]


def test_sibling_loop_fusions_become_one_kernel() -> None:
    before = count_kernels(parse(SIBLINGS)).entry
    after, changed = run_and_check(SIBLINGS, MultiOutputFusion())
    assert changed and before == 2
    assert count_kernels(after).entry == 1
    (f,) = fusions(after)
    assert is_multi_output_fusion(f) and f.fusion_kind == "kLoop"
    root = f.fused_computation.root
    assert [o.opcode.value for o in root.operands] == ["multiply", "exponential"]
    assert f.operand_count == 1  # p0 is read once
    fused = [e for e in trace_of(after) if e.verdict == "fused"]
    assert fused and fused[0].figures["kind"] == "sibling"


def test_unfused_elementwise_sibling_joins_the_fusion() -> None:
    text = SIBLINGS.replace("b = f32[64,32] fusion(p0), kind=kLoop, calls=f2",
                            "b = f32[64,32] exponential(p0)")
    after, changed = run_and_check(text, MultiOutputFusion())
    assert changed and count_kernels(after).entry == 1


def test_connected_siblings_are_refused() -> None:
    text = """HloModule connected
f1 {
  p = f32[128] parameter(0)
  ROOT m = f32[128] multiply(p, p)
}
f2 {
  p = f32[128] parameter(0)
  q = f32[128] parameter(1)
  ROOT e = f32[128] add(p, q)
}
ENTRY e {
  p0 = f32[128] parameter(0)
  a = f32[128] fusion(p0), kind=kLoop, calls=f1
  b = f32[128] fusion(p0, a), kind=kLoop, calls=f2
  ROOT t = (f32[128], f32[128]) tuple(a, b)
}
"""
    module = parse(text)
    a, b = module.instruction("a"), module.instruction("b")
    d = siblings_legal(a, b, ReachabilityMap(module.entry), FusionConfig())
    assert not d and "are connected" in (d.reason or "")
    # The pass instead makes `a` an extra output of its consumer `b`: one kernel, no cycle.
    after, changed = run_and_check(text, MultiOutputFusion())
    assert changed and count_kernels(after).entry == 1


def test_different_loop_shapes_are_refused() -> None:
    text = SIBLINGS.replace("""f2 {
  p = f32[64,32] parameter(0)
  ROOT e = f32[64,32] exponential(p)
}""", """f2 {
  p = f32[64,32] parameter(0)
  s = f32[16,32] slice(p), slice={[0:16], [0:32]}
  ROOT e = f32[16,32] exponential(s)
}""").replace("b = f32[64,32] fusion(p0)", "b = f32[16,32] fusion(p0)").replace(
        "ROOT t = (f32[64,32], f32[64,32])", "ROOT t = (f32[64,32], f32[16,32])")
    after, changed = run_and_check(text, MultiOutputFusion())
    assert not changed and count_kernels(after).entry == 2
    assert "different loop shapes" in _reasons(after)


def test_two_dus_roots_are_refused() -> None:
    text = """HloModule dus
d1 {
  p = f32[50,16] parameter(0)
  u = f32[1,16] parameter(1)
  z = s32[] constant(0)
  ROOT d = f32[50,16] dynamic-update-slice(p, u, z, z)
}
d2 {
  p = f32[50,16] parameter(0)
  u = f32[1,16] parameter(1)
  z = s32[] constant(1)
  ROOT d = f32[50,16] dynamic-update-slice(p, u, z, z)
}
ENTRY e {
  a = f32[50,16] parameter(0)
  b = f32[50,16] parameter(1)
  u = f32[1,16] parameter(2)
  f1 = f32[50,16] fusion(a, u), kind=kLoop, calls=d1
  f2 = f32[50,16] fusion(b, u), kind=kLoop, calls=d2
  ROOT t = (f32[50,16], f32[50,16]) tuple(f1, f2)
}
"""
    after, changed = run_and_check(text, MultiOutputFusion())
    assert not changed
    assert "can't fuse multiple DUSs" in _reasons(after)


def test_operand_budget_refuses() -> None:
    params = "\n".join(f"  q{i} = f32[128] parameter({i + 1})" for i in range(6))
    adds = "\n".join(f"  s{i} = f32[128] add(s{i - 1}, q{i})" for i in range(1, 6))
    body = "  s0 = f32[128] add(p, q0)\n" + adds
    text = f"""HloModule budget
f1 {{
  p = f32[128] parameter(0)
{params}
{body}
  ROOT r = f32[128] multiply(s5, s5)
}}
f2 {{
  p = f32[128] parameter(0)
{params}
{body}
  ROOT r = f32[128] subtract(s5, s5)
}}
ENTRY e {{
  x = f32[128] parameter(0)
{chr(10).join(f"  a{i} = f32[128] parameter({i + 1})" for i in range(6))}
{chr(10).join(f"  b{i} = f32[128] parameter({i + 7})" for i in range(6))}
  f1 = f32[128] fusion(x, a0, a1, a2, a3, a4, a5), kind=kLoop, calls=f1
  f2 = f32[128] fusion(x, b0, b1, b2, b3, b4, b5), kind=kLoop, calls=f2
  ROOT t = (f32[128], f32[128]) tuple(f1, f2)
}}
"""
    after, changed = run_and_check(text, MultiOutputFusion(max_operands_and_outputs=12))
    assert not changed
    assert any("budget" in r for r in _reasons(after))
    after, changed = run_and_check(text, MultiOutputFusion())  # 64: fits
    assert changed and count_kernels(after).entry == 1


def test_shared_scalar_operand_is_not_profitable() -> None:
    text = """HloModule scalar
f1 {
  s = f32[] parameter(0)
  x = f32[256] parameter(1)
  b = f32[256] broadcast(s), dimensions={}
  ROOT a = f32[256] add(x, b)
}
f2 {
  s = f32[] parameter(0)
  y = f32[256] parameter(1)
  b = f32[256] broadcast(s), dimensions={}
  ROOT m = f32[256] multiply(y, b)
}
ENTRY e {
  s = f32[] parameter(0)
  x = f32[256] parameter(1)
  y = f32[256] parameter(2)
  a = f32[256] fusion(s, x), kind=kLoop, calls=f1
  b = f32[256] fusion(s, y), kind=kLoop, calls=f2
  ROOT t = (f32[256], f32[256]) tuple(a, b)
}
"""
    _after, changed = run_and_check(text, MultiOutputFusion())
    assert not changed
    # E2's text only skipped scalar constants: then the two fusions share `s` and merge.
    _after, changed = run_and_check(text, MultiOutputFusion(mof_skip_scalar_operands=False))
    assert changed


def test_producer_consumer_elementwise_into_reduce() -> None:
    text = f"""HloModule pc
{ADD}
ENTRY e {{
  p0 = f32[32,32,32] parameter(0)
  c0 = f32[] constant(0)
  x = f32[32,32,32] exponential(p0)
  r = f32[32,32] reduce(x, c0), dimensions={{2}}, to_apply=add
  ROOT t = (f32[32,32], f32[32,32,32]) tuple(r, x)
}}
"""
    after, changed = run_and_check(text, MultiOutputFusion())
    assert changed and count_kernels(after).entry == 1
    (f,) = fusions(after)
    assert f.fusion_kind == "kInput"
    assert [o.opcode.value for o in f.fused_computation.root.operands] == [
        "reduce", "exponential"]
    assert after.entry.root.operand(0).opcode.value == "get-tuple-element"


def test_siblings_then_growth_respects_reduction_cap() -> None:
    outs = "\n".join(
        f"  r{i} = f32[64] reduce(p{i}, z), dimensions={{1}}, to_apply=add" for i in range(10))
    params = "\n".join(f"  p{i} = f32[64,64] parameter({i})" for i in range(10))
    # every reduction also reads the shared x, so all ten are siblings of x
    fused = "\n".join(f"  m{i} = f32[64,64] multiply(p{i}, x)" for i in range(10))
    text = f"""HloModule cap
{ADD}
ENTRY e {{
  x = f32[64,64] parameter(10)
  z = f32[] constant(0)
{params}
{fused}
{outs.replace("reduce(p", "reduce(m")}
  ROOT t = ({", ".join(["f32[64]"] * 10)}) tuple({", ".join(f"r{i}" for i in range(10))})
}}
"""
    from hlofuse.passes.base import Pipeline
    from hlofuse.passes.fusion.core_passes import InstructionFusion

    module = parse(text)
    Pipeline("p", [InstructionFusion(may_duplicate=False)]).run(module)
    MultiOutputFusion().run(module)
    mofs = [f for f in fusions(module) if is_multi_output_fusion(f)]
    assert mofs and all(
        sum(1 for i in f.fused_computation.instructions if i.opcode.value == "reduce") <= 8
        for f in mofs)
    assert any("unnested reductions" in r for r in _reasons(module))


def test_fusion_priority_order() -> None:
    module = parse(SIBLINGS)
    a = module.instruction("a")
    p0 = module.instruction("p0")
    assert fusion_priority(a) == 1 and fusion_priority(p0) == 0
    MultiOutputFusion().run(module)
    (f,) = fusions(module)
    assert fusion_priority(f) == 2


def test_cost_model_prefers_fusing_small_elementwise_producer() -> None:
    module = parse("""HloModule cm
ENTRY e {
  p = f32[1024] parameter(0)
  x = f32[1024] exponential(p)
  y = f32[1024] negate(x)
  ROOT t = (f32[1024], f32[1024]) tuple(x, y)
}
""")
    x = module.instruction("x")
    y = module.instruction("y")
    config = FusionConfig()
    times = estimate_run_times(x, [y], config, multi_output=True)
    assert times.fused_us < times.unfused_us
    # one launch saved dominates for small tensors
    assert times.unfused_us - times.fused_us > 0.5 * config.kernel_launch_overhead_us
    # A consumer that reads every element 64 times recomputes exp 64 times when fused: on a
    # device where compute dominates and launches are free, that is slower.
    module = parse("""HloModule cm2
ENTRY e {
  p = f32[1024] parameter(0)
  x = f32[1024] exponential(p)
  y = f32[1024,64] broadcast(x), dimensions={0}
  ROOT t = (f32[1024], f32[1024,64]) tuple(x, y)
}
""")
    slow = config.replace(kernel_launch_overhead_us=0.0, clock_ghz=1e-6)
    t2 = estimate_run_times(module.instruction("x"), [module.instruction("y")], slow,
                            multi_output=True)
    assert t2.fused_us > t2.unfused_us


def test_ir_size_guard_refuses_reduce_window_chains() -> None:
    windows = []
    prev = "p"
    for i in range(12):
        windows.append(f"  w{i} = f32[64,64] reduce-window({prev}, z), "
                       f"window={{size=3x3 pad=1_1x1_1}}, to_apply=add")
        prev = f"w{i}"
    text = f"""HloModule ir
{ADD}
chain {{
  p = f32[64,64] parameter(0)
  z = f32[] constant(0)
{chr(10).join(windows)}
  ROOT r = f32[64,64] negate({prev})
}}
ENTRY e {{
  x = f32[64,64] parameter(0)
  f = f32[64,64] fusion(x), kind=kLoop, calls=chain
  n = f32[64,64] negate(f)
  ROOT t = (f32[64,64], f32[64,64]) tuple(f, n)
}}
"""
    module = parse(text)
    d = producer_consumer_merged_too_large(module.instruction("f"), module.instruction("n"),
                                           FusionConfig())
    assert not d and "huge IR" in (d.reason or "")
    MultiOutputFusion().run(module)
    assert any("huge IR" in r for r in _reasons(module))


def test_consumer_read_as_a_whole_tuple_is_not_grown() -> None:
    text = f"""HloModule whole
{ADD}
fused_reduce {{
  p = f32[32,32,32] parameter(0)
  c = f32[] constant(0)
  r1 = f32[32,32] reduce(p, c), dimensions={{2}}, to_apply=add
  m = f32[32,32,32] multiply(p, p)
  r2 = f32[32,32] reduce(m, c), dimensions={{2}}, to_apply=add
  ROOT t = (f32[32,32], f32[32,32]) tuple(r1, r2)
}}
ENTRY e {{
  p0 = f32[32,32,32] parameter(0)
  x = f32[32,32,32] exponential(p0)
  f = (f32[32,32], f32[32,32]) fusion(x), kind=kInput, calls=fused_reduce
  ROOT root = ((f32[32,32], f32[32,32]), f32[32,32,32]) tuple(f, x)
}}
"""
    after, changed = run_and_check(text, MultiOutputFusion())
    assert not changed
    assert any("read whole" in r for r in _reasons(after))
