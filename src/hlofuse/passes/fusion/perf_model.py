"""A small GPU cost analysis and XLA's first GpuPerformanceModel (spec 1.11 and 7.1).

    producer P ──▶ consumer C            unfused: launch(P) + launch(C) + exec(P) + read(P out)
    (also read elsewhere)                fused:   launch(C) + exec(P inside C) [+ write P out]

    time_unfused = launch * (n + 1) + exec_unfused(P) + sum_c read_time(P's output, u_c)
    time_fused   = launch * n + sum_c max(compute(F_p * u_c), input_time(u_c))
                   (+ bytes_out / bw for a multi-output fusion, which still writes P)

where `u_c` is how many times consumer c reads each element of P's output (its utilisation),
`read_time(net, total)` runs at DRAM bandwidth, x2.5 when the distinct bytes fit in L2 and x8
more when they fit in L1 (2 KiB per SM, deliberately conservative, as in XLA). The device is
described by `FusionConfig` settings (RTXA6000 by default: 768 GB/s, 6 MiB L2, 84 SMs, 128
FPUs per SM, 1.41 GHz, 1 us launch overhead).

Conditions enforced here:

* `estimate_run_times(P, consumers)`: the two times above; a fusion is profitable iff
  `fused <= unfused` ("will execute slower if fused" otherwise);
* `producer_consumer_merged_too_large(P, C)`: GpuHloCostAnalysis::ProducerConsumerMergedTooLarge:
  basic-block splits (ops that invalidate the emitter's cache, counted per emitted copy) over
  `max_basic_block_splits`, or `(ir_size(P) * replication + ir_size(C)) * 2**splits` over
  `max_ir_size` ("will generate huge IR").

Simplifications (documented deviations): flops are 3 per output element for elementwise ops
with a few expensive exceptions (spec 1.11's table), reductions and windows cost 3 per input
element read; operand utilisation comes from a walk over the fused computation
(`utilizations`), not from XLA's full HloCostAnalysis.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hlofuse.ir.fusion import is_fusion
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import INVALIDATES_CACHE, Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.fusion.analysis import FusionAnalyses
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.indexing import FusionNodeIndexingEvaluation
from hlofuse.passes.fusion.predicates import total_elements

# GpuHloCostAnalysis::HandleElementwiseOp: flops per element that differ from the default 3.
_FLOPS: dict[tuple[Opcode, str], int] = {
    (Opcode.TANH, "f32"): 30, (Opcode.TANH, "f64"): 2000,
    (Opcode.DIVIDE, "s32"): 80, (Opcode.DIVIDE, "f64"): 3200,
    (Opcode.EXP, "f64"): 2200, (Opcode.SQRT, "f64"): 1100, (Opcode.RSQRT, "f64"): 900,
    (Opcode.ADD, "f64"): 120, (Opcode.MULTIPLY, "f64"): 120, (Opcode.POWER, "f64"): 11000,
    (Opcode.LOG, "f32"): 45, (Opcode.LOG, "f64"): 1000,
}
_DEFAULT_FLOPS = 3



# Ops whose operands may be read other than once per element (operand_utilization's cases).
_UTILIZATION_OPS = frozenset({Opcode.BROADCAST, Opcode.SLICE, Opcode.DYNAMIC_SLICE,
                              Opcode.GATHER, Opcode.REDUCE, Opcode.REDUCE_WINDOW, Opcode.PAD,
                              Opcode.DOT})


def operand_utilization(instr: Instruction, i: int) -> float:
    """Elements of operand `i` read (repeats counted) per element of the operand."""
    op = instr.opcode
    if op not in _UTILIZATION_OPS:
        return 1.0
    operand = instr.operand(i)
    n_in = max(total_elements(operand.shape), 1)
    n_out = total_elements(instr.shape)
    if op in (Opcode.BROADCAST, Opcode.SLICE, Opcode.DYNAMIC_SLICE, Opcode.GATHER):
        return n_out / n_in if i == 0 else 1.0
    if op is Opcode.REDUCE:
        return 1.0 if i < instr.operand_count // 2 else float(n_out)
    if op is Opcode.REDUCE_WINDOW:
        window = math.prod(d.size for d in instr.attrs.get("window", ()))
        return n_out * window / n_in if i < instr.operand_count // 2 else float(n_out)
    if op is Opcode.PAD and i == 1:
        return float(max(n_out - total_elements(instr.operand(0).shape), 0))
    if op is Opcode.DOT:
        shape = operand.shape
        dims = instr.attrs.get("lhs_contracting_dims" if i == 0 else "rhs_contracting_dims", ())
        k = math.prod(shape.dims[d] for d in dims) if isinstance(shape, ArrayShape) else 1
        return n_out * k / n_in
    return 1.0


def utilizations(fusion: Instruction) -> dict[int, float]:
    """id(fused instruction) -> reads per element, walking from the root (root = 1)."""
    comp = fusion.fused_computation
    util: dict[int, float] = {id(comp.root): 1.0}
    get = util.get
    for instr in reversed(comp.post_order()):
        u = get(id(instr), 0.0)
        op = instr.opcode
        if op is Opcode.TUPLE or op not in _UTILIZATION_OPS:  # each operand element read once
            for o in instr._operands:
                k = id(o)
                util[k] = get(k, 0.0) + u  # (u * 1.0 is u)
            continue
        for i, o in enumerate(instr._operands):
            k = id(o)
            util[k] = get(k, 0.0) + u * operand_utilization(instr, i)
    return util


def _flops_per_element(instr: Instruction) -> int:
    shape = instr.shape
    dtype = shape.dtype.name if isinstance(shape, ArrayShape) else ""
    return _FLOPS.get((instr.opcode, dtype), _DEFAULT_FLOPS)


def _instr_flops(instr: Instruction) -> float:
    op = instr.opcode
    if op in (Opcode.PARAMETER, Opcode.CONSTANT, Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT,
              Opcode.BITCAST, Opcode.RESHAPE):
        return 0.0
    if op in (Opcode.REDUCE, Opcode.REDUCE_WINDOW, Opcode.DOT):
        n_in = total_elements(instr.operand(0).shape)
        return _DEFAULT_FLOPS * n_in * operand_utilization(instr, 0)
    if instr.is_elementwise:
        return float(_flops_per_element(instr) * total_elements(instr.shape))
    return 0.0


@dataclass(frozen=True)
class Cost:
    """What the model needs to know about one kernel (an instruction or a fusion)."""

    flops: float
    out_elements: int
    out_bytes: int
    operand_bytes: tuple[tuple[float, float], ...]  # (net, accessed) per operand


def cost_of(instr: Instruction, analyses: Analyses | None = None) -> Cost:
    if is_fusion(instr):
        util = utilizations(instr) if analyses is None else analyses.memo(utilizations, instr)
        comp = instr.fused_computation
        flops = sum(_instr_flops(i) * max(util.get(id(i), 0.0), 0.0)
                    for i in comp.instructions if i.opcode is not Opcode.PARAMETER)
        operands = []
        for k, o in enumerate(instr.operands):
            net = float(o.shape.nbytes)
            operands.append((net, net * util.get(id(comp.parameter(k)), 0.0)))
    else:
        flops = _instr_flops(instr)
        operands = []
        for k, o in enumerate(instr.operands):
            net = float(o.shape.nbytes)
            operands.append((net, net * operand_utilization(instr, k)))
    return Cost(flops, total_elements(instr.shape), instr.shape.nbytes, tuple(operands))


def consumer_utilization(producer: Instruction, consumer: Instruction,
                         analyses: Analyses | None = None) -> float:
    """How many times `consumer` reads each element of `producer`'s output."""
    total = 0.0
    if is_fusion(consumer):
        util = (utilizations(consumer) if analyses is None
                else analyses.memo(utilizations, consumer))
        for k, o in enumerate(consumer.operands):
            if o is producer:
                total += util.get(id(consumer.fused_computation.parameter(k)), 0.0)
        return total
    for k, o in enumerate(consumer.operands):
        if o is producer:
            total += operand_utilization(consumer, k)
    return total


# ----- the performance model -----------------------------------------------------------------


@dataclass(frozen=True)
class RunTimes:
    unfused_us: float
    fused_us: float


def _read_time_us(net: float, total: float, config: FusionConfig) -> float:
    bw = config.dram_bandwidth_gbs * 1e9
    if net < config.l2_cache_bytes:
        bw *= config.l2_cache_speedup
        if net < config.l1_cache_bytes_per_sm * config.sm_count:
            bw *= config.l1_cache_speedup
    return total / bw * 1e6


def _compute_time_us(flops: float, threads: float, config: FusionConfig) -> float:
    lanes = max(min(threads, config.sm_count * config.fpus_per_sm), 1.0)
    return flops / (2 * config.clock_ghz * 1e9 * lanes) * 1e6


def estimate_run_times(producer: Instruction, consumers: list[Instruction],
                       config: FusionConfig, multi_output: bool = False,
                       analyses: Analyses | None = None) -> RunTimes:
    """GpuPerformanceModel::EstimateRunTimes, first version (spec 7.1). `analyses`: a pass
    run's memo of per-fusion walks (the same figures)."""
    cost = cost_of(producer, analyses)
    bw = config.dram_bandwidth_gbs * 1e9

    def input_time(u: float) -> float:
        return sum(_read_time_us(min(net, acc), acc * u, config)
                   for net, acc in cost.operand_bytes)

    write_us = cost.out_bytes / bw * 1e6
    exec_unfused = max(_compute_time_us(cost.flops, cost.out_elements, config),
                       input_time(1.0) + write_us)
    exec_fused = 0.0
    out_read_unfused = 0.0
    for c in consumers:
        u = consumer_utilization(producer, c, analyses)
        exec_fused += max(_compute_time_us(cost.flops * u, cost.out_elements * u, config),
                          input_time(u))
        out_read_unfused += _read_time_us(min(cost.out_bytes, cost.out_bytes * u),
                                          cost.out_bytes * u, config)
    launch = config.kernel_launch_overhead_us
    n = len(consumers)
    unfused = launch * (n + 1) + exec_unfused + out_read_unfused
    fused = launch * n + exec_fused + (write_us if multi_output else 0.0)
    return RunTimes(unfused, fused)


def fusion_is_faster(producer: Instruction, consumers: list[Instruction],
                     config: FusionConfig, multi_output: bool = False,
                     analyses: Analyses | None = None) -> FusionDecision:
    times = estimate_run_times(producer, consumers, config, multi_output, analyses)
    figures = {"time_unfused_us": round(times.unfused_us, 4),
               "time_fused_us": round(times.fused_us, 4)}
    if times.fused_us > times.unfused_us:
        return FusionDecision.no("will execute slower if fused", "mof_use_cost_model", **figures)
    return FusionDecision.ok(**figures)


class VersionMemo:
    """`FusionAnalyses`' `memo` and `indexing` for a pass that only grows fusions (priority
    fusion: a fusion gains the producers fused into it, never loses one) and keeps no
    `FusionAnalyses` of its own: a fusion is known by its instruction count, so an answer
    asked again after steps that did not touch the fusion walks none of it again, and one
    asked after it grew is computed afresh. Held for one run of the pass."""

    def __init__(self) -> None:
        self._memo: dict[tuple[Instruction, int, object], Any] = {}
        self._indexing: dict[tuple[Instruction, int], FusionNodeIndexingEvaluation] = {}

    @staticmethod
    def version(instr: Instruction) -> int:
        return len(instr.fused_computation.instructions) if is_fusion(instr) else -1

    def memo(self, fn: Callable[[Instruction], Any], instr: Instruction,
             compute: Callable[[], Any] | None = None) -> Any:
        key = (instr, self.version(instr), fn)
        if key not in self._memo:
            self._memo[key] = fn(instr) if compute is None else compute()
        return self._memo[key]

    def usage(self, instr: Instruction, config: FusionConfig) -> tuple[int, int]:
        """(shared memory bytes, unnested reductions): `fusion_fits_in_budget`'s sums."""
        from hlofuse.passes.fusion.gpu_fusible import (
            num_unnested_reductions,
            shared_memory_usage,
        )

        return self.memo(shared_memory_usage, instr, lambda: (  # (keyed by the first)
            shared_memory_usage(instr, config), num_unnested_reductions(instr, config)))

    def indexing(self, fusion: Instruction) -> FusionNodeIndexingEvaluation:
        key = (fusion, self.version(fusion))
        found = self._indexing.get(key)
        if found is None:
            found = self._indexing[key] = FusionNodeIndexingEvaluation(fusion)
        return found


Analyses = FusionAnalyses | VersionMemo


# ----- IR size guard -------------------------------------------------------------------------


def _ir_size_and_splits(instr: Instruction, analyses: Analyses | None = None
                        ) -> tuple[int, int]:
    if not is_fusion(instr):
        return 1, int(instr.opcode in INVALIDATES_CACHE)
    if analyses is not None:  # the run's evaluation of this fusion, and the answer, kept
        return analyses.memo(
            _ir_size_and_splits, instr, lambda: _ir_size_and_splits_of(
                instr, analyses.indexing(instr)))
    return _ir_size_and_splits_of(instr, FusionNodeIndexingEvaluation(instr))


def _ir_size_and_splits_of(instr: Instruction, evaluation: FusionNodeIndexingEvaluation
                           ) -> tuple[int, int]:
    size = splits = 0
    for i in instr.fused_computation.instructions:
        if i.opcode is Opcode.PARAMETER:
            continue
        times = max(evaluation.index_usage_count.get(i, 1), 1)
        size += times
        splits += times * int(i.opcode in INVALIDATES_CACHE)
    return size, splits


def producer_consumer_merged_too_large(producer: Instruction, consumer: Instruction,
                                       config: FusionConfig,
                                       analyses: Analyses | None = None,
                                       count_splits: bool = True) -> FusionDecision:
    """GpuHloCostAnalysis::ProducerConsumerMergedTooLarge. `count_splits=False`: the MLIR
    emitters' version (priority-fusion era), which has no cache-invalidating basic blocks, so
    only the merged IR size counts."""
    p_size, p_splits = _ir_size_and_splits(producer, analyses)
    c_size, c_splits = _ir_size_and_splits(consumer, analyses)
    replication = 1
    if is_fusion(consumer):
        evaluation = (FusionNodeIndexingEvaluation(consumer) if analyses is None
                      else analyses.indexing(consumer))
        replication = max(evaluation.emitted_instructions(producer), 1)
    splits = replication * p_splits + c_splits if count_splits else 0
    reason = f"if merged with {consumer.name} will generate huge IR"
    if splits > config.max_basic_block_splits:
        return FusionDecision.no(reason, "max_basic_block_splits", splits=splits)
    size = (p_size * replication + c_size) * 2 ** splits
    if size > config.max_ir_size:
        return FusionDecision.no(reason, "max_ir_size", ir_size=size, splits=splits)
    return FusionDecision.ok(ir_size=size, splits=splits)
