"""XLA's GpuPerformanceModel of the priority-fusion era (spec 7.2): run times of kernels and of
a producer fused into its consumers.

    exec(K)       = compute + memory - p * min(compute, memory)          p = 0.95
    compute       = flops / (2 * clock * min(threads, SMs * FPUs per SM))
    memory        = sum over operands of read(net, total) + out_bytes / DRAM bw
    read(net, t)  = net bytes at DRAM speed, the t - net re-read bytes at DRAM x 2.5 when net fits
                    in L2 (x 8 more when it fits in L1)
    fused(P, c)   = exec of one kernel: flops F_p * u + F_c, P's operands read u times, c's
                    other operands as c reads them, c's output written

    unfused = launch * (n + 1) + exec(P) + sum_c exec(c)
    fused   = launch * n + sum_c fused(P, c)            priority(P) = unfused - fused

where `u` is how many times consumer c reads each element of P's output. The device comes from
the `FusionConfig` settings shared with the first model (RTXA6000 by default, as XLA's
priority-fusion tests use), plus `memory_compute_parallelism`.

Simplifications (documented deviations): no coalescing analysis or occupancy cap (every read is
coalesced); launch dimensions are one thread per output element, or one per 8 inputs of a
reduce (`threads`), not the emitters' own; a shared operand's reads are
added, not merged ("common" elementwise utilisation); flops and operand utilisation come from
`perf_model.cost_of` (spec 1.11's flop table, a walk over the fused computation).
"""

from __future__ import annotations

from dataclasses import dataclass

from hlofuse.ir.fusion import is_fusion
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.perf_model import Analyses, Cost, consumer_utilization, cost_of


@dataclass(frozen=True)
class Estimate:
    """A priority-fusion estimate: both sides of the comparison, in microseconds."""

    unfused_us: float
    fused_us: float

    @property
    def saving_us(self) -> float:
        return self.unfused_us - self.fused_us


def _read_us(net: float, total: float, config: FusionConfig) -> float:
    """ReadTimeWithDRAMHeuristic, coalesced reads: the first `net` bytes from DRAM, the rest
    from the cache the operand fits in."""
    dram = config.dram_bandwidth_gbs * 1e9
    net = min(net, total)
    again = dram
    if net < config.l2_cache_bytes:
        again *= config.l2_cache_speedup
        if net < config.l1_cache_bytes_per_sm * config.sm_count:
            again *= config.l1_cache_speedup
    return (net / dram + (total - net) / again) * 1e6


def _compute_us(flops: float, threads: float, config: FusionConfig) -> float:
    lanes = max(min(threads, config.sm_count * config.fpus_per_sm), 1.0)
    return flops / (2 * config.clock_ghz * 1e9 * lanes) * 1e6


def _combine(compute: float, memory: float, config: FusionConfig) -> float:
    return compute + memory - config.memory_compute_parallelism * min(compute, memory)


REDUCE_ELEMENTS_PER_THREAD = 8  # a reduction emitter's thread reads about this many inputs


def threads(instr: Instruction) -> int:
    """Launch threads: one per output element, or for a kernel with a reduce, one per
    `REDUCE_ELEMENTS_PER_THREAD` of the reduce's input (a reduction emitter's rows run on
    warps, not on one thread per output)."""
    inner = instr.fused_computation.instructions if is_fusion(instr) else [instr]
    out = max((s.size for s in [instr.shape] if isinstance(s, ArrayShape)), default=1)
    for i in inner:
        src = i.operand(0).shape if i.opcode is Opcode.REDUCE and i.operands else None
        if isinstance(src, ArrayShape):
            out = max(out, src.size // REDUCE_ELEMENTS_PER_THREAD)
    return max(out, 1)


def exec_us(cost: Cost, config: FusionConfig, operands: list[tuple[float, float]] | None = None,
            lanes: int | None = None) -> float:
    """The run time of one kernel of `cost` (its operands' (net, total) bytes unless given, on
    `lanes` threads, else one per output element)."""
    reads = sum(_read_us(net, total, config)
                for net, total in (cost.operand_bytes if operands is None else operands))
    write = cost.out_bytes / (config.dram_bandwidth_gbs * 1e9) * 1e6
    compute = _compute_us(cost.flops, cost.out_elements if lanes is None else lanes, config)
    return _combine(compute, reads + write, config)


@dataclass(frozen=True)
class _Kernel:
    """What the model reads of one kernel, computed once per estimate."""

    instr: Instruction
    cost: Cost
    threads: int

    def exec_us(self, config: FusionConfig) -> float:
        return exec_us(self.cost, config, lanes=self.threads)


def _kernel(instr: Instruction, analyses: Analyses | None) -> _Kernel:
    return _Kernel(instr, cost_of(instr, analyses), threads(instr))


def _fused_us(p: _Kernel, c: _Kernel, config: FusionConfig,
              analyses: Analyses | None) -> float:
    """EstimateRunTimeForFusion: producer `p` fused into consumer `c`, as one kernel."""
    u = consumer_utilization(p.instr, c.instr, analyses)
    fused = Cost(p.cost.flops * u + c.cost.flops, c.cost.out_elements, c.cost.out_bytes, ())
    return exec_us(fused, config, fused_reads(p.instr, p.cost, c.instr, c.cost, u),
                   lanes=max(p.threads, c.threads))


def fused_reads(p: Instruction, pc: Cost, c: Instruction, cc: Cost, u: float
                ) -> list[tuple[float, float]]:
    """The (net, accessed) bytes of each distinct operand of `p` fused into `c`: `p`'s
    operands read `u` times as often as `p` reads them, `c`'s others as `c` does."""
    reads: dict[int, list[float]] = {}
    for k, o in enumerate(p.operands):
        net, total = pc.operand_bytes[k]
        reads.setdefault(id(o), [net, 0.0])[1] += total * u
    for k, o in enumerate(c.operands):
        if o is not p:
            net, total = cc.operand_bytes[k]
            reads.setdefault(id(o), [net, 0.0])[1] += total
    return [(net, total) for net, total in reads.values()]


def estimate(producer: Instruction, consumers: list[Instruction], config: FusionConfig,
             analyses: Analyses | None = None) -> Estimate:
    """EstimateRunTimesForPriorityFusion(P, consumers)."""
    launch = config.kernel_launch_overhead_us
    p = _kernel(producer, analyses)
    cs = [_kernel(c, analyses) for c in consumers]
    unfused = launch * (len(cs) + 1) + p.exec_us(config) + sum(c.exec_us(config) for c in cs)
    fused = launch * len(cs) + sum(_fused_us(p, c, config, analyses) for c in cs)
    return Estimate(unfused, fused)
