"""`FusionConfig`: every fusion rule's constant and switch, as one named setting each.

Defaults are XLA's GPU values of era E2 ("paper era", 2022 - mid 2023; see
`xla-fusion-spec.md`). A rule that a setting decides refuses with the setting's name as its rule
code (`rules.py`), so `explain` can say which setting relaxes it. The study's relaxations are one
switch each (`allow_multi_user_concatenate`, `relax_code_duplication`).

    variant="gpu"       GpuInstructionFusion rules (spec section 3)
    variant="generic"   XLA's base InstructionFusion (spec section 2; instruction_fusion_test.cc)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from hlofuse.errors import PassError
from hlofuse.ir.opcodes import Opcode

Variant = Literal["gpu", "generic"]


@dataclass(frozen=True)
class FusionConfig:
    # --- which rule set -------------------------------------------------------------------
    variant: str = "gpu"
    # InstructionFusion: may a producer with several users be duplicated into each of them?
    may_duplicate: bool = True

    # --- budgets (gpu_fusible.cc FusionFitsInBudget) ----------------------------------------
    # E1/E2: 64 (kMaxOperandsAndOutputsPerFusion); E3 and the conformance cases' source: 96.
    max_operands_and_outputs: int = 64
    # device_info.shared_memory_per_block; 48 KiB on the RTXA6000 the XLA tests use.
    # (E1 used the constant kSharedMemoryBudgetInBytes = 40000.)
    shared_memory_budget: int = 48 * 1024
    max_unnested_reductions: int = 8  # kMaxUnnestedReductionOutputsPerFusion

    # --- code duplication (fusion_node_indexing_evaluation.cc) ------------------------------
    max_code_duplication: int = 15  # kAllowedCodeDuplication
    # The study's relaxation: ignore the OpInvalidatesCache rule of CodeDuplicationTooHigh.
    relax_code_duplication: bool = False
    # The study's relaxation: let a concatenate with several users be duplicated into a fusion.
    allow_multi_user_concatenate: bool = False

    # --- expensive ops (IsExpensive) ---------------------------------------------------------
    # GPU override: these are cheap when the element type is in `gpu_cheap_dtypes`.
    gpu_cheap_ops: frozenset[Opcode] = field(default_factory=lambda: frozenset(
        {Opcode.DIVIDE, Opcode.SQRT, Opcode.RSQRT, Opcode.EXP}))
    gpu_cheap_dtypes: frozenset[str] = frozenset({"f32", "f16"})

    # --- reductions (reduction_utils.cc IsUnnestedReductionFasterThanElemental) ---------------
    warp_size: int = 32
    # Row reduction: tiled emitter iff minor size >= warp_size, or (newer) warp_size % minor == 0.
    row_reduction_divisor_rule: bool = True
    # IsExpensiveToRepeat: kMaxInputsPerOutput.
    max_inputs_per_output: int = 10
    # Tiled transpose (Transpose021): both tiled dims >= 16, or both >= 8 with enough elements.
    min_dimension_to_transpose_tiled: int = 16
    min_dimension_to_transpose_tiled2: int = 8
    min_total_dimensions_to_transpose_tiled: int = 64 * 128

    # --- fusion merger (fusion_merger.cc) ------------------------------------------------------
    merger_version: str = "2022"  # "2022": bytes-ratio rules; "2023": IR-size guard instead
    merger_bytes_ratio: float = 1.10
    merger_expensive_escape_ratio: float = 0.3
    merger_expensive_escape_bytes: int = 1024
    transposes_most_data: float = 0.5
    # GpuHloCostAnalysis::ProducerConsumerMergedTooLarge (merger_version="2023").
    max_basic_block_splits: int = 10
    max_ir_size: int = 10000

    # --- horizontal fusion (horizontal_loop_fusion.cc) ----------------------------------------
    horizontal_max_elements: int = 128 * 2048
    horizontal_max_instructions: int = 30
    horizontal_max_batch: int = 32
    horizontal_max_cuda_param_bytes: int = 4000
    # E2 ran horizontal loop fusion on the entry computation only; True = every non-fusion
    # computation (E3), e.g. while bodies.
    horizontal_all_computations: bool = False
    # E2 HasOnlyRowMajorLayout: refuse candidates with a non-row-major array (E3 dropped it).
    horizontal_require_row_major: bool = True

    # --- multi-output fusion (multi_output_fusion.cc) ------------------------------------------
    # IsProfitableOperand: True = every effective-scalar shared operand is unprofitable (what
    # XLA's tests pin down); False = only effective-scalar constants (the E2 text).
    mof_skip_scalar_operands: bool = True
    # Producer-consumer MOF asks the GpuPerformanceModel (spec 7.1); False = always profitable.
    mof_use_cost_model: bool = True

    # --- GpuPerformanceModel, first version (spec 7.1): the device, RTXA6000 by default -------
    kernel_launch_overhead_us: float = 1.0
    dram_bandwidth_gbs: float = 768.0
    l2_cache_bytes: int = 6 * 1024 * 1024
    l1_cache_bytes_per_sm: int = 2 * 1024
    l2_cache_speedup: float = 2.5
    l1_cache_speedup: float = 8.0
    sm_count: int = 84
    fpus_per_sm: int = 128
    clock_ghz: float = 1.41
    # E3 model (priority fusion, spec 7.2): how far memory and compute overlap in a kernel
    # (exec = compute + memory - p * min(compute, memory); XLA's value for priority fusion).
    memory_compute_parallelism: float = 0.95
    # Which vertical fusion the fusion fixpoint runs: "instruction" (instruction fusion twice,
    # the fusion merger: XLA's ladder) or "priority" (priority fusion: XLA GPU since 2024), and
    # the cost model priority fusion asks: "gpu" (the E3 model, perf_model_e3.py) or "cpu"
    # (perf_model_cpu.py, the host_* settings).
    fusion_algorithm: str = "instruction"
    priority_cost_model: str = "gpu"

    # --- beyond XLA: the hlofuse pipeline's transformations (docs/beyond-xla.md) -------------
    # Off here, as XLA has none of them; the `hlofuse` pipeline switches them on
    # (`pipelines.BEYOND_XLA`), and `hlofuse{whole_loop_fusion=false}` switches one off again.
    # Loops of at most this many iterations are unrolled completely, so JAX's threefry2x32
    # (on CPU a loop of 5 iterations of 4 rounds) becomes elementwise code; 0 = off.
    unroll_small_loops: int = 0
    # ... other than random-number loops, only when the unrolled code stays at most this many
    # instructions and the body has no library op or loop (a dot, a sort, an inner while):
    # unrolling pays when the copies fuse into fewer kernels, and those ops never fuse. 0 (the
    # default): random-number loops only. Measured on the third-party suite, unrolling the
    # other small loops (binary searches of jax.random.choice, jnp.searchsorted) changed
    # nothing on Snake, Acrobot, Breakout or Sudoku (within 2%) and made Game2048 1.4x slower
    # (the unrolled search let its inputs' threefry fuse into a cumsum kernel that evaluates
    # them once per window tap), at up to 2x the compile time.
    small_loop_max_instructions: int = 0
    # A dot that contracts at most this many elements (a policy's layer over a 4-number
    # observation, a value head's input gradient) is computed per element inside every loop or
    # input fusion that reads it (small_dots.py) instead of a GEMM kernel writing its result
    # out; 0 = off.
    small_dot_k: int = 0
    # Loop state stacked from rows (a [K, N] carried array rebuilt by a concatenate each
    # iteration and read back row by row) is carried as K arrays instead (the paper's step 3).
    unstack_loop_state: bool = False
    unstack_max_rows: int = 16
    # ... where each row is at most this rank (profitability): rows of rank 1 are per-element
    # scalars (gymnax's [N, k] state: 2-20x with whole-loop fusion); rows of rank 2 (brax ant's
    # f32[64,9,3] as nine f32[64,3]) gain nothing and cost 5% (measured on AVX-512: ant
    # positional 150 -> 158 ms per run, inverted pendulum unchanged).
    unstack_max_row_rank: int = 1
    # A scan output computed per step from reductions over the batch (a reward sum, an episode
    # count) is computed after the loop from per-element rows written by the loop, when that
    # makes the loop one that whole-loop fusion takes (loop_reductions.py) ...
    hoist_loop_reductions: bool = False
    # ... and the rows take at most this many bytes (CartPole's per-step reward sum, 2048 x
    # 10,000 steps: 82 MB).
    hoist_max_bytes: int = 256 * 1024 * 1024
    # Loops that stay on the host (not whole-loop fused) are unrolled by the factor the cost
    # model picks, at most `max_unroll` (the paper's step 4, chosen instead of fixed).
    auto_unroll: bool = False
    max_unroll: int = 8
    # ... costing a run as kernels * overhead + bytes / bandwidth + ops * time per op (the
    # host's; from benchmarks/loop_overhead.py and benchmarks/vectorize.py), and unrolling only
    # for a gain of at least this factor over no unroll.
    host_kernel_overhead_ns: float = 20.0
    host_bandwidth_gbs: float = 20.0
    host_ns_per_op: float = 0.03
    # ... and, for priority fusion's CPU model (perf_model_cpu.py), the cache a buffer of at
    # most this many bytes lives in and how much faster it reads from there (the cpu backend's
    # parallelizer: 512 KiB, 0.08 against 0.02 ns a byte), the threads a kernel longer than
    # host_parallel_ns runs on, and what waking them costs.
    host_cache_bytes: int = 512 * 1024
    host_cache_speedup: float = 4.0
    host_threads: int = 1
    host_parallel_ns: float = 20_000.0
    host_fork_ns: float = 2_000.0
    min_unroll_gain: float = 1.2
    # ... and never beyond this many instructions in the unrolled body (compile time).
    max_unroll_instructions: int = 4000
    # Every unroll of a module together (unroll-small-loops, auto-unroll, nested loops included:
    # each level multiplies the copies) creates at most this many instructions, or this many per
    # instruction of the module before unrolling if that is more; an unroll past it is refused
    # and the loop stays a loop (`passes/simplify/unroll.py`).
    unroll_budget: int = 8192
    unroll_budget_per_instruction: int = 32
    # With auto_unroll: compile and time the candidate factors, and cache the fastest.
    autotune: bool = False
    # Instruction fusion refuses a producer that the consumer would evaluate more than once per
    # result (below a reduce-window with overlapping windows, a dot, a convolution) once the
    # code it repeats exceeds this many weighted ops (`analysis.cost`); 0 = no limit, as XLA:
    # its per-op rule never sees the long cheap chains an unrolled threefry loop makes (jumanji
    # Game2048: its random bits fused into a cumsum's windows, 376 us a call against 93 us).
    max_reevaluated_ops: int = 0
    # A loop whose body keeps batch elements apart becomes one kernel, time loop inside.
    whole_loop_fusion: bool = False
    whole_loop_min_trips: int = 2
    # ... and recomputes per block the state that does not depend on the batch (a random key):
    # at most this many elements of it, and fewer than the batch.
    whole_loop_max_uniform_elements: int = 64
    # ... and only when the cost model (the `host_*` figures above) says one kernel beats the
    # body's kernels: inside the kernel a dot runs per element as matrix-vector products, this
    # many times slower per op than the batched GEMM of the body's dot kernel (the dense
    # layers of a policy network in an environment loop: measured 14x on a 2-layer MLP).
    whole_loop_dot_slowdown: float = 16.0
    # ... and a body that loops per element (a reduce or a dot over the element's own
    # coordinates: brax's 3x3 products) runs its element loop as scalar code, this many times
    # slower per op than the body's vectorized kernels (brax inverted_pendulum's constraint
    # loop: modelled 2.7 us per iteration at vector speed, measured 23 us).
    whole_loop_scalar_slowdown: float = 8.0

    # -------------------------------------------------------------------------------------------
    @property
    def is_gpu(self) -> bool:
        return self.variant == "gpu"

    def replace(self, **changes: Any) -> FusionConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_options(cls, options: dict[str, Any], base: FusionConfig | None = None
                     ) -> FusionConfig:
        """Build a config from `{setting: value}` (values may be strings, as parsed from a
        `name{key=value}` pass spec). Unknown settings raise PassError."""
        base = base or cls()
        types = {f.name: f for f in dataclasses.fields(cls)}
        changes: dict[str, Any] = {}
        for key, raw in options.items():
            key = key.replace("-", "_")
            if key not in types:
                known = ", ".join(sorted(types))
                raise PassError(f"unknown fusion setting {key!r}; known settings: {known}")
            changes[key] = _coerce(key, raw, getattr(base, key))
        cfg = dataclasses.replace(base, **changes)
        for name, allowed in (("fusion_algorithm", ("instruction", "priority")),
                              ("priority_cost_model", ("gpu", "cpu"))):
            if getattr(cfg, name) not in allowed:
                raise PassError(f"{name} must be one of {', '.join(map(repr, allowed))}, not "
                                f"{getattr(cfg, name)!r}")
        if cfg.variant not in ("gpu", "generic"):
            raise PassError(f"fusion variant must be 'gpu' or 'generic', not {cfg.variant!r}")
        if cfg.merger_version not in ("2022", "2023"):
            raise PassError(f"merger_version must be 2022 or 2023, not {cfg.merger_version!r}")
        return cfg


def setting_text(value: Any) -> str:
    """A setting's value as a `{setting=value}` spec writes it, which `from_options` reads back:
    a set as `{a,b}` (opcodes by name, sorted), a bool as true/false."""
    if isinstance(value, (set, frozenset)):
        return "{" + ",".join(sorted(getattr(v, "value", str(v)) for v in value)) + "}"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _coerce(key: str, raw: Any, current: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        if isinstance(current, bool):
            low = raw.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if isinstance(current, int):
            return int(raw)
        if isinstance(current, float):
            return float(raw)
        if isinstance(current, frozenset):
            items = [s.strip() for s in raw.strip("{}").split(",") if s.strip()]
            if key == "gpu_cheap_ops":
                return frozenset(Opcode(s) for s in items)
            return frozenset(items)
    except ValueError as e:
        raise PassError(f"bad value {raw!r} for fusion setting {key!r}") from e
    return raw
