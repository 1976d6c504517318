"""Fusion predicates and building blocks: FusionDecision, FusionConfig, reuse, duplication,
expensive ops, the unnested-reduction classifier, tiled transposes, budget, code duplication."""

from __future__ import annotations

import pytest

from hlofuse.errors import PassError
from hlofuse.passes.fusion import gpu_fusible as g
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision, all_
from hlofuse.passes.fusion.indexing import FusionNodeIndexingEvaluation
from hlofuse.passes.fusion.predicates import (
    UseKind,
    effectively_at_most_unary,
    is_always_duplicable,
    is_expensive,
    is_fusible,
    operand_element_use,
    reuses_operand_elements,
)
from hlofuse.text import parse

GPU = FusionConfig()
GENERIC = FusionConfig(variant="generic")


def test_decision_combinators() -> None:
    ok, no1, no2 = FusionDecision.ok(), FusionDecision.no("a", "r1"), FusionDecision.no("b")
    assert ok and not no1
    assert ok.and_(no1) is no1 and no1.and_(no2) is no1
    assert not no1.or_(no2) and no1.or_(no2).reason == "a ; b"
    assert no1.or_(no2).rule == "r1"
    assert no1.or_(ok) is ok
    assert all_(lambda: ok, lambda: no2, lambda: no1) is no2
    assert all_(ok, ok)
    d = FusionDecision.check(False, "why", "rule", bytes=3)
    assert not d and d.figures == {"bytes": 3} and str(d) == "why"


def test_refusals_without_figures_are_shared_and_bounded() -> None:
    from hlofuse.passes.fusion import decision

    assert FusionDecision.no("why", "rule") is FusionDecision.no("why", "rule")
    assert FusionDecision.no("why") is not FusionDecision.no("why", "rule")
    with_figures = FusionDecision.no("why", "rule", bytes=3)
    assert with_figures is not FusionDecision.no("why", "rule", bytes=3)
    assert with_figures.figures == {"bytes": 3} and FusionDecision.no("why", "rule").figures == {}
    for k in range(decision._MAX_REFUSALS + 10):
        FusionDecision.no(f"refusal {k}")
    assert len(decision._REFUSALS) <= decision._MAX_REFUSALS


def test_config_options_from_text() -> None:
    cfg = FusionConfig.from_options({"may_duplicate": "false", "merger_bytes_ratio": "1.5",
                                     "gpu_cheap_ops": "{divide}"})
    assert cfg.may_duplicate is False and cfg.merger_bytes_ratio == 1.5
    assert {o.value for o in cfg.gpu_cheap_ops} == {"divide"}
    with pytest.raises(PassError, match="unknown fusion setting"):
        FusionConfig.from_options({"nope": 1})
    with pytest.raises(PassError, match="variant"):
        FusionConfig.from_options({"variant": "tpu"})


MOD = """
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p0 = f32[32,64] parameter(0)
  p1 = f32[32,64] parameter(1)
  v = f32[64] parameter(2)
  d64 = f64[32,64] parameter(3)
  ex = f32[32,64] exponential(p0)
  ex64 = f64[32,64] exponential(d64)
  lg = f32[32,64] log(p0)
  dv = f32[32,64] divide(p0, p1)
  bv = f32[32,64] broadcast(v), dimensions={1}
  ad = f32[32,64] add(p0, bv)
  ad2 = f32[32,64] add(p0, p1)
  cv = f64[32,64] convert(p0)
  sl = f32[16,64] slice(p0), slice={[0:16], [0:64]}
  z = f32[] constant(0)
  rrow = f32[32] reduce(p0, z), dimensions={1}, to_apply=add
  rcol = f32[64] reduce(p0, z), dimensions={0}, to_apply=add
  small = f32[32,3] parameter(4)
  rsmall = f32[32] reduce(small, z), dimensions={1}, to_apply=add
  tr = f32[64,32] transpose(p0), dimensions={1,0}
  cp = f32[32,64]{0,1} copy(p0)
  ROOT t = tuple(ex, ex64, lg, dv, ad, ad2, cv, sl, rrow, rcol, rsmall, tr, cp)
}
"""


@pytest.fixture(scope="module")
def m():  # type: ignore[no-untyped-def]
    return parse(MOD)


def test_expensive_base_and_gpu_override(m) -> None:  # type: ignore[no-untyped-def]
    i = m.instruction
    assert not is_expensive(i("ex"), GPU) and is_expensive(i("ex"), GENERIC)
    assert is_expensive(i("ex64"), GPU)
    assert is_expensive(i("lg"), GPU)
    assert not is_expensive(i("dv"), GPU) and is_expensive(i("dv"), GENERIC)
    assert not is_expensive(i("ad"), GENERIC)
    assert is_expensive(i("rrow"), GPU)


def test_fusible_and_duplicable(m) -> None:  # type: ignore[no-untyped-def]
    i = m.instruction
    assert not is_fusible(i("p0")) and is_fusible(i("ad"))
    assert is_always_duplicable(i("bv")) and is_always_duplicable(i("cv"))
    assert not is_always_duplicable(i("ad"))


def test_operand_element_use(m) -> None:  # type: ignore[no-untyped-def]
    i = m.instruction
    assert operand_element_use(i("ad"), 0) is UseKind.USE
    assert operand_element_use(i("sl"), 0) is UseKind.USE_PERMUTING
    assert reuses_operand_elements(i("bv"), 0)
    assert not reuses_operand_elements(i("rrow"), 0) and reuses_operand_elements(i("rrow"), 1)


def test_effectively_at_most_unary(m) -> None:  # type: ignore[no-untyped-def]
    i = m.instruction
    assert effectively_at_most_unary(i("ad"))  # the broadcast operand does not count
    assert not effectively_at_most_unary(i("ad2"))


def test_unnested_reduction_classifier(m) -> None:  # type: ignore[no-untyped-def]
    i = m.instruction
    assert g.reduction_kind_and_components(i("rrow")) == (True, (1, 32, 64))
    assert g.reduction_kind_and_components(i("rcol")) == (False, (1, 32, 64))
    assert g.is_reduction_from_or_to_contiguous_dims(i("rrow"))
    assert g.is_reduction_from_or_to_contiguous_dims(i("rcol"))  # H=32, W=64: tiled
    assert not g.is_reduction_from_or_to_contiguous_dims(i("rsmall"))  # W=3 < warp
    assert g.is_input_fusible(i("rrow")) and not g.is_input_fusible(i("rsmall"))
    assert g.is_loop_fusible_as_consumer(i("rsmall"))
    assert g.choose_fusion_kind(i("p0"), i("rrow")) == "kInput"
    assert g.choose_fusion_kind(i("p0"), i("ad")) == "kLoop"


def test_transposes(m) -> None:  # type: ignore[no-untyped-def]
    i = m.instruction
    assert g.is_physically_transposing(i("tr")) and g.is_physically_transposing(i("cp"))
    assert g.tiled_transpose_dims(i("tr")) == ((0, 2, 1), (1, 64, 32))
    assert g.transposes_minor_dimension(i("cp"))
    assert not g.is_physically_transposing(i("ad"))


def test_producer_consumer_fusible_reasons(m) -> None:  # type: ignore[no-untyped-def]
    i = m.instruction
    assert g.is_producer_consumer_fusible(i("ad"), i("rrow"))
    d = g.is_producer_consumer_fusible(i("z"), i("rrow"))
    assert not d and d.reason == "not fusing constant"
    d = g.is_producer_consumer_fusible(i("rrow"), i("t"))
    assert not d and "epilogue" in d.reason


def test_budget() -> None:
    params = ", ".join(f"p{k}" for k in range(40))
    decl = "\n".join(f"  p{k} = f32[4] parameter({k})" for k in range(40))
    text = f"""
HloModule m
ENTRY e {{
{decl}
  a = f32[4] add(p0, p1)
  ROOT c = f32[160] concatenate({params}), dimensions={{0}}
}}
"""
    mod = parse(text)
    c, a = mod.entry.root, mod.instruction("a")
    assert g.fusion_fits_in_budget(c, a, FusionConfig(max_operands_and_outputs=64), True)
    d = g.fusion_fits_in_budget(c, a, FusionConfig(max_operands_and_outputs=30), False)
    assert not d and d.rule == "max_operands_and_outputs"


def test_code_duplication_of_slice_tree() -> None:
    text = """
HloModule m
f {
  x = f32[64] parameter(0)
  s1 = f32[32] slice(x), slice={[0:64:2]}
  s2 = f32[32] slice(x), slice={[1:64:2]}
  a = f32[32] add(s1, s2)
  t1 = f32[16] slice(a), slice={[0:32:2]}
  t2 = f32[16] slice(a), slice={[1:32:2]}
  b = f32[16] add(t1, t2)
  u1 = f32[8] slice(b), slice={[0:16:2]}
  u2 = f32[8] slice(b), slice={[1:16:2]}
  ROOT r = f32[8] add(u1, u2)
}
ENTRY e {
  p = f32[64] parameter(0)
  n = f32[64] negate(p)
  ROOT fu = f32[8] fusion(n), kind=kLoop, calls=f
}
"""
    mod = parse(text)
    ev = FusionNodeIndexingEvaluation(mod.entry.root)
    assert ev.emitted_instructions(mod.instruction("n")) == 8  # 2**3 copies
    assert ev.check_code_duplication(mod.instruction("n"))  # 8 <= 15: fine
    d = ev.check_code_duplication(mod.instruction("n"), FusionConfig(max_code_duplication=7))
    assert not d and d.rule == "max_code_duplication" and d.figures["emitted"] == 8


def test_reachability_map_and_update_after_fusion() -> None:
    from hlofuse.ir.fusion import create_fusion, fuse_instruction
    from hlofuse.passes.fusion.graph import ReachabilityMap

    mod = parse("""
HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  a = f32[4] negate(p)
  b = f32[4] exponential(a)
  c = f32[4] abs(p)
  ROOT d = f32[4] add(b, c)
}
""")
    i = mod.instruction
    reach = ReachabilityMap(mod.entry)
    assert reach.is_reachable(i("a"), i("d")) and not reach.is_reachable(i("c"), i("b"))
    assert reach.is_connected(i("d"), i("p")) and not reach.is_connected(i("a"), i("c"))
    fusion = create_fusion(i("b"))
    fuse_instruction(fusion, i("a"))
    reach.update_fusion(fusion)
    assert reach.is_reachable(i("p"), fusion) and reach.is_reachable(fusion, i("d"))
    assert not reach.is_reachable(i("c"), fusion)
