"""Facts about fusions that a pass run keeps, and updates as it fuses (issue 13).

    pass run ──▶ kept = Kept.resume(module, config)   (what earlier runs left, still valid)
                 FusionAnalyses(config, kept)         (one per computation)
                   indexing(F)  FusionNodeIndexingEvaluation of F (code duplication)
                   facts(F)     FusionFacts: shared memory, unnested reductions, physically
                                transposing / heavy / expensive / possibly reusing ops
                   fuse(F, p)   fuse_instruction(F, p), then both updated for p's clone
                   forget(F)    F changed some other way: recomputed when next asked
                 kept.close()                          (stamps each fusion's entries)

A rule asked about a fusion used to walk the whole fused computation, so growing one fusion by
n producers cost O(n^2). XLA keeps a FusionNodeIndexingEvaluation per fusion for one
InstructionFusion run and updates it after each fusion (GpuInstructionFusion::FuseInstruction);
this does the same for every per-fusion sum the rules read. A fact is a sum over the fused
instructions, so fusing a plain producer adds its clone's share; a fusion producer, or a first
fusion into a fusion this run has not tidied itself, drops the entry instead.

Conditions enforced (what keeps the answers identical to the from-scratch functions in
gpu_fusible.py, predicates.py and indexing.py):

* within a run, an entry is valid only while its fusion is changed through this object
  (`fuse`, `created`) or `forget` is called;
* between runs (of the fusion passes of one top-level pipeline run, `Module.caches`), a
  fusion's entries are kept only if its fused computation is the same object at the same
  `Computation.version` and its operands are the same instructions as when the run that made
  them closed (`Kept`); every other entry, and every answer about a plain instruction, is
  dropped. A pass that changes the module without keeping versions exact clears the caches
  (`passes.base`). HLOFUSE_CHECK_KEPT=1 recomputes every kept entry and fails on a difference
  (the test suite passes with it);
* the incremental path (`assume_tidy` in ir/fusion.py) is taken only for a fusion this run
  created or already fused into, so its fused computation is as `fuse_instruction` left it;
* entries are keyed by the instruction objects (held, so no id is reused while cached);
* `ask` remembers one-instruction predicates (fusibility, kinds, heroes) only for what the run
  does not change: a fusion it grows is forgotten, a plain instruction keeps its opcode,
  shape and operand shapes; rng is never remembered (its fusibility counts its users).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hlofuse.ir.computation import Computation
from hlofuse.ir.fusion import fuse_instruction, fused_parameter_for, is_fusion
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.base import check_kept, checking_kept
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.gpu_fusible import (
    fusion_fits_in_budget,
    is_expensive_to_repeat,
    is_physically_transposing,
    is_reduce_intermediate,
    is_reduction_epilogue,
    num_unnested_reductions,
    shared_memory_usage,
)
from hlofuse.passes.fusion.indexing import FusionNodeIndexingEvaluation
from hlofuse.passes.fusion.predicates import (
    REUSE_CAPABLE_OPS,
    is_expensive,
    reuses_operand_elements,
)

# shared memory: unnested reductions and tiled transposes (copy/transpose); transposing: copy,
# transpose; expensive to repeat: reduce, reduce-window; fusions recurse
_SHAPED_OPS = frozenset({Opcode.REDUCE, Opcode.COPY, Opcode.TRANSPOSE, Opcode.REDUCE_WINDOW,
                         Opcode.FUSION})


_DIVISIONS = frozenset({Opcode.DIVIDE, Opcode.REMAINDER})

_UNKNOWN = object()  # (no predicate answers this: `ask`'s "not remembered yet")


@dataclass(slots=True)
class FusionFacts:
    """Sums over one fusion's fused instructions (parameters contribute nothing)."""

    shared_memory: int = 0       # gpu_fusible.shared_memory_usage
    unnested_reductions: int = 0  # gpu_fusible.num_unnested_reductions
    transposing: int = 0         # ops for which is_physically_transposing holds
    heavy: int = 0               # ops for which is_expensive_to_repeat holds
    expensive: int = 0           # ops for which is_expensive(op, config) holds
    may_reuse: int = 0           # ops whose operand element use may be other than "use"
    not_epilogue: int = 0        # ops that are not reduce intermediates

    def add(self, instr: Instruction, config: FusionConfig) -> None:
        """Count one plain (non-fusion, non-parameter) fused instruction in."""
        op = instr.opcode
        if op in _SHAPED_OPS:  # the only ops with a share in the first four sums
            self.shared_memory += shared_memory_usage(instr, config)
            self.unnested_reductions += num_unnested_reductions(instr, config)
            self.transposing += is_physically_transposing(instr)
            self.heavy += is_expensive_to_repeat(instr, config)
        self.expensive += is_expensive(instr, config)
        self.may_reuse += op in REUSE_CAPABLE_OPS or not instr.is_elementwise
        # (depends on the op's user count: fusing a producer in never adds a user to an op
        # already there, it only replaces a parameter)
        self.not_epilogue += not is_reduce_intermediate(instr)


_Stamp = tuple[Computation, int, list[Instruction]]


class Kept:
    """Per-fusion entries the fusion passes share within a pass run and keep for the next
    runs of one pipeline run, each with the stamp (fused computation, its version, the
    fusion's operands) it was valid at."""

    def __init__(self, config: FusionConfig) -> None:
        self.config = config
        self.indexing: dict[Instruction, FusionNodeIndexingEvaluation] = {}
        self.facts: dict[Instruction, FusionFacts] = {}
        self.reuse: dict[Instruction, dict[int, bool]] = {}  # fusion -> operand -> reuses?
        self.unary: dict[Instruction, dict[Any, Any]] = {}  # instr -> predicate -> answer
        self.memo: dict[Instruction, dict[Any, Any]] = {}  # fusion -> function -> answer
        self._stamps: dict[Instruction, _Stamp] = {}

    @classmethod
    def resume(cls, module: Module, config: FusionConfig) -> Kept:
        """The entries earlier runs in this pipeline run kept, those still valid (a fresh,
        unkept object outside a pipeline run)."""
        caches = module.caches
        if caches is None:
            return cls(config)
        # (what is kept depends on every setting but may_duplicate, which only instruction
        # fusion's own loop reads: its two runs per iteration share their entries)
        config = dataclasses.replace(config, may_duplicate=False)
        kept = caches.get((cls, config))
        if kept is None:
            kept = caches[(cls, config)] = cls(config)
        else:
            kept._validate()
        return kept

    def _tables(self) -> tuple[dict[Instruction, Any], ...]:
        return (self.indexing, self.facts, self.reuse, self.unary, self.memo)

    def drop(self, f: Instruction) -> None:
        """Forget every entry of `f`."""
        for table in self._tables():
            table.pop(f, None)

    def _valid(self, f: Instruction) -> bool:
        """Was `f` stamped by the last run, and is it as it was then?"""
        stamp = self._stamps.get(f)
        if stamp is None or f.parent is None or f.opcode is not Opcode.FUSION:
            return False
        comp, version, operands = stamp
        return f.fused_computation is comp and comp.version == version \
            and f._operands == operands

    def _validate(self) -> None:
        check = checking_kept()
        for f in dict.fromkeys(f for table in self._tables() for f in table):
            if not self._valid(f):
                self.drop(f)
            elif check:
                self._check(f)
        self._stamps.clear()

    def close(self) -> None:
        """The run is over: stamp every fusion with entries (the others' are dropped)."""
        self._stamps = {f: (f.fused_computation, f.fused_computation.version, list(f._operands))
                        for table in self._tables() for f in table
                        if f.parent is not None and f.opcode is Opcode.FUSION}

    def _check(self, f: Instruction) -> None:
        """HLOFUSE_CHECK_KEPT: each kept entry of `f` equals its recomputation."""
        config = self.config
        fresh = FusionAnalyses(config)
        where = f"the kept entry of {f.name}"
        if f in self.facts:
            check_kept(self.facts[f] == fresh.facts(f), f"{where}: facts")
        if f in self.indexing:
            old, new = self.indexing[f], FusionNodeIndexingEvaluation(f)
            check_kept(old.index_usage_count == new.index_usage_count
                       and old.indexing_users == new.indexing_users, f"{where}: indexing")
        for i, answer in self.reuse.get(f, {}).items():
            check_kept(answer == reuses_operand_elements(f, i), f"{where}: reuse of {i}")
        for pred, answer in self.unary.get(f, {}).items():
            check_kept(answer == pred(f, config), f"{where}: {pred.__name__}")
        for fn, answer in self.memo.get(f, {}).items():
            check_kept(answer == fn(f), f"{where}: {fn.__name__}")


class FusionAnalyses:
    """Per-fusion evaluations and facts for one pass run (see the module docstring)."""

    def __init__(self, config: FusionConfig, kept: Kept | None = None) -> None:
        self.config = config
        kept = kept if kept is not None else Kept(config)
        self._kept = kept
        self._indexing = kept.indexing
        self._facts = kept.facts
        self._reuse = kept.reuse
        self._unary = kept.unary  # instr -> predicate -> answer
        self._memo = kept.memo
        self._tidy: set[Instruction] = set()  # fused computations this run left tidy

    # ----- queries ---------------------------------------------------------------------------

    def ask(self, pred: Callable[[Instruction, FusionConfig], Any], instr: Instruction) -> Any:
        """`pred(instr, config)` for a one-instruction predicate, remembered until `instr`
        changes. Not remembered for rng, whose fusibility depends on its user count."""
        known = self._unary.get(instr)
        if known is not None:
            answer = known.get(pred, _UNKNOWN)
            if answer is not _UNKNOWN:
                return answer
        if instr.opcode is Opcode.RNG:
            return pred(instr, self.config)
        if pred is is_reduction_epilogue and is_fusion(instr):
            return self.facts(instr).not_epilogue == 0  # kept up to date as the fusion grows
        if known is None:
            known = self._unary[instr] = {}
        answer = known[pred] = pred(instr, self.config)
        return answer

    def memo(self, fn: Callable[[Instruction], Any], instr: Instruction,
             compute: Callable[[], Any] | None = None) -> Any:
        """`fn(instr)` (or `compute()`, which must give the same) for a function of one fusion
        (utilization, IR size), remembered until the fusion changes. Not for plain
        instructions whose answer depends on their users."""
        known = self._memo.get(instr)
        if known is None:
            known = self._memo[instr] = {}
        try:
            return known[fn]
        except KeyError:
            answer = known[fn] = fn(instr) if compute is None else compute()
            return answer

    def indexing(self, fusion: Instruction) -> FusionNodeIndexingEvaluation:
        evaluation = self._indexing.get(fusion)
        if evaluation is None:
            evaluation = self._indexing[fusion] = FusionNodeIndexingEvaluation(fusion)
        return evaluation

    def facts(self, fusion: Instruction) -> FusionFacts:
        facts = self._facts.get(fusion)
        if facts is None:
            facts = self._facts[fusion] = FusionFacts()
            for instr in fusion.fused_computation.instructions:
                if instr.opcode is not Opcode.PARAMETER:
                    facts.add(instr, self.config)
        return facts

    def usage(self, instr: Instruction) -> tuple[int, int]:
        """(shared memory bytes, unnested reductions) of a fusion or a plain instruction."""
        if is_fusion(instr):
            facts = self.facts(instr)
            return facts.shared_memory, facts.unnested_reductions
        return (shared_memory_usage(instr, self.config),
                num_unnested_reductions(instr, self.config))

    def fits_in_budget(self, instr1: Instruction, instr2: Instruction,
                       is_consumer_producer_fusion: bool = False) -> FusionDecision:
        """gpu_fusible.fusion_fits_in_budget with the per-fusion sums from here."""
        return fusion_fits_in_budget(instr1, instr2, self.config, is_consumer_producer_fusion,
                                     usage=self.usage)

    def is_physically_transposing(self, instr: Instruction) -> bool:
        if is_fusion(instr):
            return self.facts(instr).transposing > 0
        return is_physically_transposing(instr)

    def is_heavy(self, instr: Instruction) -> bool:
        """Does `instr` (or an op fused in it) read many inputs per output element?"""
        if is_fusion(instr):
            return self.facts(instr).heavy > 0
        return is_expensive_to_repeat(instr, self.config)

    def contains_expensive(self, fusion: Instruction) -> bool:
        return self.facts(fusion).expensive > 0

    def reuses_operand_elements(self, consumer: Instruction, i: int) -> bool:
        """predicates.reuses_operand_elements, remembered per fusion operand until the fusion
        changes; a fusion of ops that only "use" their operands element for element cannot
        reuse any operand, whatever its size."""
        if not is_fusion(consumer):
            return reuses_operand_elements(consumer, i)
        if self.facts(consumer).may_reuse == 0:
            return False
        known = self._reuse.setdefault(consumer, {})
        answer = known.get(i)
        if answer is None:
            answer = known[i] = reuses_operand_elements(consumer, i)
        return answer

    # ----- changes -----------------------------------------------------------------------------

    def created(self, fusion: Instruction) -> None:
        """`fusion` was just made by create_fusion: its fused computation is tidy, and its
        users read it in place of the instruction it wraps (what is remembered about them
        may name that one)."""
        self.forget(fusion)
        for user in fusion.users:
            self.forget(user)
        self._tidy.add(fusion)

    def forget(self, instr: Instruction) -> None:
        self._kept.drop(instr)
        self._tidy.discard(instr)

    def fuse(self, fusion: Instruction, producer: Instruction) -> Instruction:
        """fuse_instruction(fusion, producer), keeping this run's entries for `fusion` exact."""
        tidy = fusion in self._tidy
        plain = tidy and not is_fusion(producer) and producer.opcode is not Opcode.TUPLE
        evaluation = self._indexing.get(fusion) if plain else None
        users = evaluation.remove_fusion_operand(producer) if evaluation is not None else set()
        facts = self._facts.get(fusion) if plain else None
        # a divide or remainder is cheap when its divisor is a constant or a broadcast of one
        # (is_expensive_base): one reading the producer's parameter, directly or through a
        # broadcast, may become cheap once the producer is in
        divisions: list[Instruction] = []
        if facts is not None:
            param = fused_parameter_for(fusion, producer)
            for u in param.users if param is not None else ():
                if u.opcode in _DIVISIONS:
                    divisions.append(u)
                elif u.opcode is Opcode.BROADCAST:
                    divisions.extend(v for v in u.users if v.opcode in _DIVISIONS)
        divisions = list(dict.fromkeys(divisions)) if divisions else divisions
        expensive_before = sum(is_expensive(u, self.config) for u in divisions)
        value = fuse_instruction(fusion, producer, assume_tidy=tidy)
        self._reuse.pop(fusion, None)
        self._unary.pop(fusion, None)
        self._memo.pop(fusion, None)
        if plain and value.parent is fusion.fused_computation:
            if evaluation is not None:
                evaluation.update_evaluation_cache(value, users)
            if facts is not None:
                facts.add(value, self.config)
                facts.expensive += sum(is_expensive(u, self.config)
                                       for u in divisions) - expensive_before
        else:
            self.forget(fusion)
        self._tidy.add(fusion)
        if producer.parent is None:
            self.forget(producer)
        return value
