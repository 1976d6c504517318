"""The CPU performance model of priority fusion (`priority_cost_model=cpu`): the comparison the
E3 model makes (`perf_model_e3.py`: a producer's kernel and its consumers', against the
consumers with the producer fused in), with a CPU's costs, from the `host_*` settings.

    kernel(K)   = host_kernel_overhead_ns + fork(K) + max(compute, memory) / fan(K)
    compute     = weighted ops * host_ns_per_op          (analysis.cost.kernel_ops: OP_COST
                                                          per element, vector throughput)
    memory      = each operand's bytes where it lives: host_bandwidth_gbs from memory, times
                  host_cache_speedup when the operand fits in host_cache_bytes; bytes read
                  again (a broadcast, a producer fused into a consumer that reads it u times)
                  from the cache; the output at the speed its size allows
    fan(K)      = host_threads when the kernel's one-thread time exceeds host_parallel_ns (the
                  cpu backend's parallelizer rule), else 1; fork(K) = host_fork_ns when fan > 1
    fused(P, c) = one kernel: ops(P) * u + ops(c), P's operands read u times, c's other
                  operands as c reads them, c's output written; u = min(1, how many times c
                  reads each element of P): the kernel IR hoists what a broadcast repeats out
                  of the loops it adds, so a repeated read does not recompute (a GPU thread
                  per element does)

    unfused = kernel(P) + sum_c kernel(c)       fused = sum_c fused(P, c)
    priority(P) = unfused - fused                (microseconds, as the E3 model's)

Unlike a GPU, a CPU's re-reads of a small operand cost little and it overlaps compute with
memory only partly, so memory and compute take the larger, not a weighted sum. Defaults are the
figures the cpu backend's parallelizer and the host loop model use (`FusionConfig`); a backend
that knows its machine passes its own (`host_threads`).
"""

from __future__ import annotations

from hlofuse.analysis.cost import kernel_ops
from hlofuse.ir.instruction import Instruction
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.perf_model import Cost, VersionMemo, consumer_utilization, cost_of
from hlofuse.passes.fusion.perf_model_e3 import Estimate, fused_reads


def _bytes_ns(nbytes: float, resident: float, config: FusionConfig) -> float:
    """Nanoseconds to move `nbytes` of a buffer of `resident` bytes (its size: what decides
    the cache level it lives in)."""
    speed = config.host_bandwidth_gbs  # (GB/s = bytes per ns)
    if resident <= config.host_cache_bytes:
        speed *= config.host_cache_speedup
    return nbytes / speed


def _reads_ns(reads: list[tuple[float, float]], config: FusionConfig) -> float:
    """Each operand's (net, accessed) bytes: the net bytes where the buffer lives, the bytes
    accessed again from the cache."""
    cached = config.host_bandwidth_gbs * config.host_cache_speedup
    return sum(_bytes_ns(min(net, total), net, config) + max(total - net, 0.0) / cached
               for net, total in reads)


def kernel_ns(ops: float, reads: list[tuple[float, float]], out_bytes: float,
              config: FusionConfig) -> float:
    """One kernel's modelled run time (module docstring)."""
    memory = _reads_ns(reads, config) + _bytes_ns(out_bytes, out_bytes, config)
    serial = max(ops * config.host_ns_per_op, memory)
    fan = config.host_threads if serial > config.host_parallel_ns else 1
    fork = config.host_fork_ns if fan > 1 else 0.0
    return config.host_kernel_overhead_ns + fork + serial / max(fan, 1)


class Memo(VersionMemo):
    """What the model reads of each kernel (its `Cost`, weighted ops, and how often it reads a
    producer), kept for one run of priority fusion (`VersionMemo`: a fusion known by its
    instruction count, which priority fusion only grows), so an estimate asked again after a
    step that did not touch a kernel walks none of its fused computation again (a run over
    threefry's unrolled rounds asks about the same growing fusions thousands of times)."""

    def __init__(self) -> None:
        super().__init__()
        self._util: dict[tuple[Instruction, Instruction, int], float] = {}

    def cost(self, instr: Instruction) -> Cost:
        cost: Cost = self.memo(cost_of, instr, lambda: cost_of(instr, self))
        return cost

    def ops(self, instr: Instruction) -> int:
        return int(self.memo(kernel_ops, instr))

    def utilization(self, p: Instruction, c: Instruction) -> float:
        """(of a producer and a consumer: keyed by both, the consumer's version)"""
        key = (p, c, self.version(c))
        found = self._util.get(key)
        if found is None:
            found = self._util[key] = consumer_utilization(p, c, self)
        return found


def _alone_ns(instr: Instruction, memo: Memo, config: FusionConfig) -> float:
    cost = memo.cost(instr)
    return kernel_ns(memo.ops(instr), list(cost.operand_bytes), cost.out_bytes, config)


def _fused_ns(p: Instruction, c: Instruction, config: FusionConfig, memo: Memo) -> float:
    # (the kernel IR computes a fused producer's element once per consumer kernel: a value a
    # broadcast repeats is hoisted out of the loops the broadcast adds, so reading an element
    # u > 1 times does not compute it u times, as it does on a GPU's threads)
    u = min(memo.utilization(p, c), 1.0)
    pc, cc = memo.cost(p), memo.cost(c)
    ops = memo.ops(p) * u + memo.ops(c)
    return kernel_ns(ops, fused_reads(p, pc, c, cc, u), cc.out_bytes, config)


def estimate(producer: Instruction, consumers: list[Instruction], config: FusionConfig,
             memo: Memo | None = None) -> Estimate:
    """`perf_model_e3.estimate`'s comparison under the CPU model (microseconds)."""
    memo = memo or Memo()
    unfused = _alone_ns(producer, memo, config) + sum(
        _alone_ns(c, memo, config) for c in consumers)
    fused = sum(_fused_ns(producer, c, config, memo) for c in consumers)
    return Estimate(unfused / 1e3, fused / 1e3)
