"""The incremental analyses of the fusion passes (issue 13) give the answers of the
from-scratch ones, checked at every step of real pipeline runs:

* FusionAnalyses: after every fusion, the indexing evaluation and facts it kept for the fusion
  equal a fresh FusionNodeIndexingEvaluation / fresh facts;
* ReachabilityMap (lazy, stale rows recomputed on demand): every query equals a fresh map's;
* PostOrderKeeper: after every merge, the list equals what `post_order()` makes of the edited
  list;
* fuse_instruction(assume_tidy=True): the same module text as the full tidy;
* what the fusion passes keep between their runs in one pipeline run (`module.caches`:
  `analysis.Kept`, CSE's clean computations) equals a fresh computation wherever it is reused
  (HLOFUSE_CHECK_KEPT), is valid by `Computation.version`, which every edit changes, and lives
  for one pipeline run, emptied by a change from a pass that does not keep versions exact.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from hlofuse import examples
from hlofuse.errors import KeptFactError
from hlofuse.ir import fusion as F
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.base import CHECK_KEPT_ENV, Pipeline
from hlofuse.passes.fusion import analysis, graph, order
from hlofuse.passes.fusion.core_passes import InstructionFusion
from hlofuse.passes.fusion.indexing import FusionNodeIndexingEvaluation
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse, print_module
from test_compile_scaling import chain_hlo, wide_hlo
from test_fusion_random import random_module

MODULES: dict[str, Callable[[], str]] = {
    **{f"random-{s}": (lambda s=s: random_module(s, 40)) for s in range(6)},
    "cartpole_unrolled": lambda: examples.text("cartpole_unrolled"),
    "cartpole_baseline": lambda: examples.text("cartpole_baseline"),
    "mlp_train_step": lambda: examples.text("mlp_train_step"),
    "attention": lambda: examples.text("attention"),
    "chain": lambda: chain_hlo(300),
    "wide": lambda: wide_hlo(80),
    "divisor": lambda: DIVISOR,
}

# A remainder by a broadcast constant is cheap (is_expensive_base); it is fused before its
# divisor, so it counts as expensive until the broadcast and then the constant follow it in.
DIVISOR = """
HloModule divisor
ENTRY e {
  x = s32[8] parameter(0)
  y = s32[8] parameter(1)
  c = s32[] constant(7)
  b = s32[8] broadcast(c), dimensions={}
  r = s32[8] remainder(x, b)
  q = s32[8] divide(y, b)
  a = s32[8] add(r, q)
  ROOT n = s32[8] negate(a)
}
"""


def _fresh_facts(a: analysis.FusionAnalyses, fusion: Instruction) -> analysis.FusionFacts:
    facts = analysis.FusionFacts()
    for instr in fusion.fused_computation.instructions:
        if instr.opcode is not Opcode.PARAMETER:
            facts.add(instr, a.config)
    return facts


@pytest.mark.pure_core
@pytest.mark.parametrize("name", sorted(MODULES))
def test_kept_indexing_and_facts_equal_fresh_ones(name: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    checked = [0]
    fuse = analysis.FusionAnalyses.fuse

    def checking_fuse(self: analysis.FusionAnalyses, fusion: Instruction,
                      producer: Instruction) -> Instruction:
        self.indexing(fusion)  # make sure there is an entry to keep up to date
        self.facts(fusion)
        value = fuse(self, fusion, producer)
        kept = self._indexing.get(fusion)
        if kept is not None:
            fresh = FusionNodeIndexingEvaluation(fusion)
            assert kept.index_usage_count == fresh.index_usage_count
            assert kept.indexing_users == fresh.indexing_users
            checked[0] += 1
        facts = self._facts.get(fusion)
        if facts is not None:
            assert facts == _fresh_facts(self, fusion)
        return value

    monkeypatch.setattr(analysis.FusionAnalyses, "fuse", checking_fuse)
    run_pipeline(parse(MODULES[name]()), "xla")
    assert checked[0] > 0, "no fusion kept its evaluation incrementally"


@pytest.mark.pure_core
@pytest.mark.parametrize("name", sorted(MODULES))
def test_lazy_reachability_answers_like_a_fresh_map(name: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Every query during the pipeline (is_reachable, and reached_operands of
    ComputeGloballyUnfusible), against a map built fresh after the last change."""
    fresh: dict[graph.ReachabilityMap, graph.ReachabilityMap] = {}  # (keys held: no id reuse)
    asked = [0]
    lazy, update = graph.ReachabilityMap.is_reachable, graph.ReachabilityMap.update_fusion

    def checking(self: graph.ReachabilityMap, a: Instruction, b: Instruction) -> bool:
        got = lazy(self, a, b)
        if self not in fresh:
            fresh[self] = graph.ReachabilityMap(self.comp)
        assert got == lazy(fresh[self], a, b), (a.name, b.name)
        asked[0] += 1
        return got

    def updating(self: graph.ReachabilityMap, instr: Instruction) -> None:
        update(self, instr)
        fresh.pop(self, None)

    def checking_operands(self: graph.ReachabilityMap, a: Instruction, consumer: Instruction,
                          positions: dict[Instruction, list[int]]) -> list[int]:
        got = reached(self, a, consumer, positions)
        if self not in fresh:
            fresh[self] = graph.ReachabilityMap(self.comp)
        want = [i for i, o in enumerate(consumer.operands) if lazy(fresh[self], a, o)]
        assert got == want, (a.name, consumer.name)
        asked[0] += 1
        return got

    reached = graph.ReachabilityMap.reached_operands
    monkeypatch.setattr(graph.ReachabilityMap, "is_reachable", checking)
    monkeypatch.setattr(graph.ReachabilityMap, "update_fusion", updating)
    monkeypatch.setattr(graph.ReachabilityMap, "reached_operands", checking_operands)
    run_pipeline(parse(MODULES[name]()), "xla")
    if name.startswith("cartpole") or name == "mlp_train_step":
        assert asked[0] > 0


@pytest.mark.parametrize("name", sorted(MODULES))
def test_kept_post_order_equals_post_order(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    counts = {"incremental": 0}
    restore = order.PostOrderKeeper.restore

    def checking(self: order.PostOrderKeeper, comp: Any, fusion: Instruction) -> None:
        want = comp.post_order()
        counts["incremental"] += self.label is not None
        restore(self, comp, fusion)
        assert comp.instructions == want

    monkeypatch.setattr(order.PostOrderKeeper, "restore", checking)
    run_pipeline(parse(MODULES[name]()), "xla")
    if name in ("cartpole_unrolled", "cartpole_baseline", "wide"):
        assert counts["incremental"] > 0, "no merge took the incremental path"


def test_random_merges_keep_reachability_and_post_order() -> None:
    """Random multi-output merges (as test_fusion_random does), with one lazy map and one
    keeper across all of them: every pair's reachability and the list order stay exact."""
    for seed in range(4):
        m = parse(random_module(seed, size=16))
        comp = m.entry
        for instr in list(comp.instructions):
            if instr.opcode not in (Opcode.PARAMETER, Opcode.TUPLE, Opcode.CONSTANT):
                F.create_fusion(instr)
        reach = graph.ReachabilityMap(comp)
        keeper = order.PostOrderKeeper(comp)
        rng = random.Random(seed)
        for _ in range(12):
            fusions = [i for i in comp.instructions if i.opcode is Opcode.FUSION]
            if len(fusions) < 2:
                break
            a, b = rng.sample(fusions, 2)
            if any(o is a for o in b.operands):
                a, b = b, a
            if any(o is b for o in a.operands):
                if any(o is not b and reach.is_reachable(b, o) for o in a.operands):
                    continue
            elif reach.is_connected(a, b):
                continue
            want = None

            def reorder(c: Any, f: Instruction,
                        keeper: order.PostOrderKeeper = keeper) -> None:
                nonlocal want
                want = c.post_order()
                keeper.restore(c, f)

            F.merge_fusions_multi_output(a, b, reorder=reorder)
            reach.update_fusion(a)
            assert comp.instructions == want
            # a few questions now (most rows stay stale into the next merge), all at the end
            fresh = graph.ReachabilityMap(comp)
            for x, y in zip(rng.sample(comp.instructions, 3), rng.sample(comp.instructions, 3),
                            strict=True):
                assert reach.is_reachable(x, y) == fresh.is_reachable(x, y)
        fresh = graph.ReachabilityMap(comp)
        for x in comp.instructions:
            for y in comp.instructions:
                assert reach.is_reachable(x, y) == fresh.is_reachable(x, y)


@pytest.mark.parametrize("seed", range(6))
def test_tidy_after_clone_equals_full_tidy(seed: int) -> None:
    """Fusing a random module's instructions one by one into growing fusions, with and
    without assume_tidy, gives the same text (names, order, parameters)."""
    texts = []
    for assume in (False, True):
        m = parse(random_module(seed, 30))
        comp = m.entry
        rng = random.Random(seed)
        tidy: set[Instruction] = set()
        for instr in reversed(comp.post_order()):
            if instr.parent is not comp or instr.opcode in (Opcode.PARAMETER, Opcode.TUPLE):
                continue
            fusion = instr if instr.opcode is Opcode.FUSION else F.create_fusion(instr)
            tidy.add(fusion)
            for _ in range(rng.randint(1, 6)):
                producers = [o for o in fusion.operands
                             if o.opcode not in (Opcode.PARAMETER, Opcode.FUSION)]
                if not producers:
                    break
                F.fuse_instruction(fusion, rng.choice(producers),
                                   assume_tidy=assume and fusion in tidy)
        texts.append(print_module(m))
    assert texts[0] == texts[1]


@pytest.mark.pure_core
@pytest.mark.parametrize("name", sorted(MODULES))
def test_entries_kept_between_pass_runs_equal_fresh_ones(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """HLOFUSE_CHECK_KEPT recomputes every entry a pass run reuses from an earlier one (and
    runs CSE on every computation it would skip as clean); the pipeline must get through."""
    monkeypatch.setenv(CHECK_KEPT_ENV, "1")
    checked = [0]
    check = analysis.Kept._check

    def counting_check(self: analysis.Kept, f: Instruction) -> None:
        checked[0] += 1
        check(self, f)

    monkeypatch.setattr(analysis.Kept, "_check", counting_check)
    module = parse(MODULES[name]())
    run_pipeline(module, "xla")
    if any(i.opcode is Opcode.FUSION for i in module.entry.instructions):
        assert checked[0] > 0, "no entry was kept from one pass run to the next"


@pytest.mark.pure_core
def test_a_kept_fact_that_is_stale_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHECK_KEPT_ENV, "1")
    close = analysis.Kept.close

    def spoiling_close(self: analysis.Kept) -> None:
        for facts in self.facts.values():
            facts.expensive += 1
        close(self)

    monkeypatch.setattr(analysis.Kept, "close", spoiling_close)
    with pytest.raises(KeptFactError, match="facts"):
        run_pipeline(parse(examples.text("mlp_train_step")), "xla")


def test_every_edit_changes_the_computation_version() -> None:
    m = parse(DIVISOR)
    comp = m.entry
    x, y, _c, _b, r, q, a, n = comp.instructions
    seen = [comp.version]

    def changed() -> None:
        assert comp.version != seen[-1]
        seen.append(comp.version)

    q.set_operand(0, x)
    changed()
    a.replace_operand(q, r)
    changed()
    a.append_operand(y)
    changed()
    a.set_operands([r, r])
    changed()
    extra = Instruction.create(Opcode.NEGATE, x.shape, [x], name="extra")
    comp.add(extra)
    changed()
    comp.remove(extra)
    changed()
    r.replace_all_uses_with(y)  # (a reads r twice)
    changed()
    comp.root = a
    changed()
    comp.instructions = list(comp.instructions)
    changed()
    comp.touch()
    changed()
    fusion = F.create_fusion(n)
    changed()
    inner = fusion.fused_computation
    before = inner.version
    F.set_kind(fusion, "kInput")
    assert inner.version != before  # the kind is part of what is kept about a fusion


def test_caches_live_for_one_pipeline_run_and_non_exact_changes_empty_them() -> None:
    m = parse(DIVISOR)
    seen: list[dict[Any, Any] | None] = []

    class Look:
        name = "look"

        def run(self, module: Any) -> bool:
            seen.append(None if module.caches is None else dict(module.caches))
            return False

    class Edit:
        name = "edit"

        def run(self, module: Any) -> bool:
            return True  # (says it changed the module, not how)

    p = Pipeline("p", [InstructionFusion(), Look(), Edit(), Look()])
    assert m.caches is None
    p.execute(m)
    assert m.caches is None
    assert seen[0] and not seen[1]  # instruction fusion kept entries; the edit dropped them
