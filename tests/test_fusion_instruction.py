"""`instruction-fusion`: fusion groups, kinds, kernel counts, refusals with reasons, and
interpreter equivalence before/after (GPU E2 rules unless a test says `variant=generic`)."""

from __future__ import annotations

import pytest

from fusion_helpers import fused_opcodes, fusions, run_and_check
from hlofuse.analysis.kernels import count_kernels
from hlofuse.passes.base import Pipeline
from hlofuse.passes.fusion.core_passes import InstructionFusion
from hlofuse.passes.fusion.graph import ReachabilityMap
from hlofuse.passes.fusion.trace import FusionTrace, trace_of
from hlofuse.passes.registry import parse_pass_spec
from hlofuse.text import parse

ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def two_passes(**options: object) -> Pipeline:
    """XLA's GPU order: no duplication first, then duplication of cheap producers."""
    return Pipeline("fusion", [InstructionFusion(may_duplicate=False, **options),
                               InstructionFusion(may_duplicate=True, **options)])


def reasons(module: object, producer: str) -> list[str]:
    return [e.reason for e in trace_of(module).refused() if e.producer == producer]  # type: ignore[arg-type]


def test_elementwise_chain_becomes_one_loop_kernel() -> None:
    text = """
HloModule m
ENTRY e {
  p0 = f32[16,8] parameter(0)
  p1 = f32[16,8] parameter(1)
  add = f32[16,8] add(p0, p1)
  mul = f32[16,8] multiply(add, p0)
  c = f32[] constant(2)
  b = f32[16,8] broadcast(c), dimensions={}
  sub = f32[16,8] subtract(mul, b)
  ROOT neg = f32[16,8] negate(sub)
}
"""
    assert count_kernels(parse(text)).entry == 5
    m, changed = run_and_check(text, two_passes())
    assert changed
    (f,) = fusions(m)
    assert f is m.entry.root and f.fusion_kind == "kLoop"
    assert fused_opcodes(f) == ["add", "broadcast", "constant", "multiply", "negate",
                                "subtract"]
    assert count_kernels(m).entry == 1


def test_producers_fuse_into_unnested_reduction_as_input_fusion() -> None:
    text = f"""
HloModule m
{ADD}
ENTRY e {{
  p0 = f32[64,128] parameter(0)
  e = f32[64,128] exponential(p0)
  z = f32[] constant(0)
  ROOT r = f32[64] reduce(e, z), dimensions={{1}}, to_apply=add
}}
"""
    m, _ = run_and_check(text, two_passes())
    root = m.entry.root
    assert root.opcode.value == "fusion" and root.fusion_kind == "kInput"
    assert fused_opcodes(root) == ["constant", "exponential", "reduce"]


def test_expensive_producer_with_several_users_is_not_duplicated() -> None:
    text = """
HloModule m
ENTRY e {
  p0 = f32[32] parameter(0)
  l = f32[32] log(p0)
  a = f32[32] negate(l)
  b = f32[32] abs(l)
  ROOT t = (f32[32], f32[32]) tuple(a, b)
}
"""
    m, _ = run_and_check(text, two_passes())
    assert m.instruction("l").parent is m.entry
    assert sum(1 for i in m.all_instructions() if i.opcode.value == "log") == 1
    assert "expensive producer would be duplicated" in reasons(m, "l") or \
        "operand can not be duplicated" in reasons(m, "l")


def test_cheap_producer_with_several_users_is_duplicated_in_the_second_pass() -> None:
    text = """
HloModule m
ENTRY e {
  p0 = f32[32] parameter(0)
  n = f32[32] negate(p0)
  a = f32[32] exponential(n)
  b = f32[32] sqrt(n)
  ROOT t = (f32[32], f32[32]) tuple(a, b)
}
"""
    m, _ = run_and_check(text, two_passes())
    assert len(fusions(m)) == 2
    assert sum(1 for i in m.all_instructions() if i.opcode.value == "negate") == 2
    assert "fusion pass cannot duplicate" in reasons(m, "n")


CONCAT = """
HloModule m
ENTRY e {
  p0 = f32[16] parameter(0)
  p1 = f32[16] parameter(1)
  c = f32[32] concatenate(p0, p1), dimensions={0}
  a = f32[32] exponential(c)
  na = f32[32] negate(a)
  b = f32[32] sqrt(c)
  nb = f32[32] negate(b)
  ROOT t = (f32[32], f32[32]) tuple(na, nb)
}
"""


def test_concatenate_with_several_users_is_not_fused() -> None:
    m, _ = run_and_check(CONCAT, two_passes())
    assert m.instruction("c").parent is m.entry
    events = [e for e in trace_of(m).refused() if e.producer == "c"]
    assert any("overly large code duplication" in e.reason
               and e.rule == "allow_multi_user_concatenate" for e in events)
    assert count_kernels(m).entry == 3


def test_relaxation_allows_multi_user_concatenate() -> None:
    m, _ = run_and_check(CONCAT, two_passes(allow_multi_user_concatenate=True))
    assert sum(1 for i in m.all_instructions() if i.opcode.value == "concatenate") == 2
    assert count_kernels(m).entry == 2


def test_tuple_gte_and_custom_call_are_boundaries() -> None:
    text = """
HloModule m
ENTRY e {
  p = (f32[8], f32[8]) parameter(0)
  g0 = f32[8] get-tuple-element(p), index=0
  g1 = f32[8] get-tuple-element(p), index=1
  cc = f32[8] custom-call(g0), custom_call_target="foo"
  a = f32[8] add(cc, g1)
  ROOT n = f32[8] negate(a)
}
"""
    m = parse(text)
    assert two_passes().run(m)
    root = m.entry.root
    assert fused_opcodes(root) == ["add", "negate"]
    assert {o.opcode.value for o in root.operands} == {"custom-call", "get-tuple-element"}
    assert "the producer is not loop-fusible" in reasons(m, "cc")


def test_operand_budget_is_respected() -> None:
    params = "\n".join(f"  p{i} = f32[4] parameter({i})" for i in range(12))
    adds = ["  a1 = f32[4] add(p0, p1)"] + [
        f"  a{i} = f32[4] add(a{i - 1}, p{i})" for i in range(2, 12)]
    adds[-1] = adds[-1].replace("  a11", "  ROOT a11")
    text = "HloModule m\nENTRY e {\n" + params + "\n" + "\n".join(adds) + "\n}\n"
    m, _ = run_and_check(text, two_passes(max_operands_and_outputs=6))
    assert all(f.operand_count + 1 <= 6 for f in fusions(m))
    assert len(fusions(m)) >= 2
    refused = [e for e in trace_of(m).refused() if e.rule == "max_operands_and_outputs"]
    assert refused and refused[0].figures["limit"] == 6


def test_duplication_keeps_graph_acyclic_through_unfusible_paths() -> None:
    # add reaches the root directly and through a custom-call: fusing it duplicates it, the
    # result must stay a DAG that verifies and computes the same values.
    text = """
HloModule m
ENTRY e {
  p0 = f32[8] parameter(0)
  p1 = f32[8] parameter(1)
  add = f32[8] add(p0, p1)
  cc = f32[8] custom-call(add), custom_call_target="foo"
  ROOT r = f32[8] subtract(cc, add)
}
"""
    m = parse(text)
    InstructionFusion().run(m)
    reach = ReachabilityMap(m.entry)
    root = m.entry.root
    for o in root.operands:
        assert not reach.is_reachable(root, o)


def test_generic_variant_fuses_constants_and_gtes() -> None:
    text = """
HloModule m
ENTRY e {
  p0 = f32[8] parameter(0)
  c = f32[8] constant({1, 2, 3, 4, 5, 6, 7, 8})
  a = f32[8] add(p0, c)
  ROOT n = f32[8] negate(a)
}
"""
    m, _ = run_and_check(text, InstructionFusion(variant="generic"))
    assert fused_opcodes(m.entry.root) == ["add", "constant", "negate"]
    gpu, _ = run_and_check(text, InstructionFusion())
    assert "constant" not in fused_opcodes(gpu.entry.root)  # GPU: only scalar constants


def test_while_body_is_fused_and_counted_per_iteration() -> None:
    text = """
HloModule m
cond {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x = f32[8] get-tuple-element(s), index=1
  y = f32[8] multiply(x, x)
  z = f32[8] negate(y)
  ROOT t = (s32[], f32[8]) tuple(i1, z)
}
ENTRY e {
  p = f32[8] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[8]) tuple(zero, p)
  w = (s32[], f32[8]) while(init), condition=cond, body=body
  ROOT r = f32[8] get-tuple-element(w), index=1
}
"""
    before = count_kernels(parse(text))
    assert before.loops["w"] == 4  # add, multiply, negate + compare
    m, _ = run_and_check(text, two_passes())
    report = count_kernels(m)
    assert report.entry == 0 and report.loops["w"] == 3
    assert "per iteration" in report.summary()


def test_registered_with_options_and_trace_round_trips(tmp_path: object) -> None:
    (p,) = parse_pass_spec("instruction-fusion{may_duplicate=false,max_code_duplication=3}")
    assert isinstance(p, InstructionFusion)
    assert p.config().may_duplicate is False and p.config().max_code_duplication == 3
    m = parse(CONCAT)
    p.run(m)
    trace = trace_of(m)
    assert trace.fused() and trace.refused()
    path = tmp_path / "trace.jsonl"  # type: ignore[operator]
    trace.write(path)
    assert FusionTrace.read(path).events == trace.events


def test_unknown_option_is_a_clear_error() -> None:
    from hlofuse.errors import PassError

    with pytest.raises(PassError, match="no option"):
        parse_pass_spec("instruction-fusion{bogus=1}")


def _bits_into_cumsum(rounds: int) -> str:
    """`rounds` rounds of u32 mixing (an unrolled threefry's shape: cheap ops, a long chain)
    whose float result a reduce-window with overlapping windows (a cumsum) reads."""
    lines = ["HloModule m", ADD, "ENTRY e {", "  x = u32[64,16] parameter(0)",
             "  k = u32[] constant(2654435761)", "  kb = u32[64,16] broadcast(k), dimensions={}"]
    prev = "x"
    for r in range(rounds):
        lines += [f"  a{r} = u32[64,16] add({prev}, kb)",
                  f"  m{r} = u32[64,16] multiply(a{r}, kb)",
                  f"  x{r} = u32[64,16] xor(m{r}, a{r})"]
        prev = f"x{r}"
    lines += [f"  f = f32[64,16] convert({prev})",
              "  z = f32[] constant(0)",
              "  ROOT cs = f32[64,16] reduce-window(f, z), window={size=1x16 pad=0_0x15_0}, "
              "to_apply=add",
              "}"]
    return "\n".join(lines) + "\n"


def test_repeated_code_under_a_cumsum_is_bounded() -> None:
    """A cumsum's reduce-window evaluates its operand 16 times per result. XLA's per-op rule
    fuses a long chain of cheap ops into it (each op is cheap); `max_reevaluated_ops` (the
    hlofuse pipeline) stops once the repeated code would exceed the limit, and names the rule."""
    text = _bits_into_cumsum(20)  # 61 ops
    xla, _ = run_and_check(text, two_passes())
    (whole,) = fusions(xla)
    assert fused_opcodes(whole).count("xor") == 20  # the whole chain, repeated per window tap
    capped, _ = run_and_check(text, two_passes(max_reevaluated_ops=40))
    window = next(f for f in fusions(capped) if "reduce-window" in fused_opcodes(f))
    repeated = fused_opcodes(window)
    assert repeated.count("xor") < 20 and len(repeated) - 4 <= 40  # (+ window's param etc.)
    assert any("max_reevaluated_ops" in r for e in trace_of(capped).refused()
               for r in [e.rule])
