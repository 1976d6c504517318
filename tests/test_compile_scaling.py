"""Compile time stays near-linear in module size (issue 13).

The `xla` pipeline on generated modules of n and 4n instructions: the larger may take at most
6x the CPU time of the smaller (linear is 4x, quadratic 16x). CPU time of this process
(`time.process_time`), best of a few runs with the garbage collector paused, so other work on
a busy machine barely moves it; sizes keep the whole file to a few seconds.

Also: a 10,000-instruction chain goes through `xla` under Python's default recursion limit and
ends as one kernel.
"""

from __future__ import annotations

import gc
import sys
import time

from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse

MAX_RATIO = 6.0


def chain_hlo(n: int, size: int = 1024) -> str:
    """n elementwise instructions in a row (binary ones read a second parameter)."""
    unary = ("tanh", "exponential", "negate")
    binary = ("add", "multiply", "subtract")
    lines = ["HloModule chain", "", "ENTRY main {",
             f"  p0 = f32[{size}] parameter(0)", f"  p1 = f32[{size}] parameter(1)"]
    prev = "p0"
    for i in range(n):
        op = (unary + binary)[i % 6]
        args = prev if op in unary else f"{prev}, p1"
        root = "ROOT " if i == n - 1 else ""
        lines.append(f"  {root}x{i} = f32[{size}] {op}({args})")
        prev = f"x{i}"
    return "\n".join([*lines, "}"]) + "\n"


def wide_hlo(k: int, size: int = 64) -> str:
    """k independent exp -> add -> tanh branches, each on its own parameter, one root tuple."""
    lines = ["HloModule wide", "", "ENTRY main {"]
    for i in range(k):
        lines += [f"  p{i} = f32[{size}] parameter({i})",
                  f"  e{i} = f32[{size}] exponential(p{i})",
                  f"  a{i} = f32[{size}] add(e{i}, p{i})",
                  f"  t{i} = f32[{size}] tanh(a{i})"]
    shapes = ", ".join([f"f32[{size}]"] * k)
    lines.append(f"  ROOT out = ({shapes}) tuple({', '.join(f't{i}' for i in range(k))})")
    return "\n".join([*lines, "}"]) + "\n"


def pipeline_cpu_seconds(text: str, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        module = parse(text)
        gc.collect()
        gc.disable()
        try:
            t0 = time.process_time()
            run_pipeline(module, "xla")
            best = min(best, time.process_time() - t0)
        finally:
            gc.enable()
    return best


def assert_near_linear(small: str, large: str) -> None:
    pipeline_cpu_seconds(small, repeat=1)  # warm-up: imports, first-use caches
    t_small = pipeline_cpu_seconds(small)
    t_large = pipeline_cpu_seconds(large)
    ratio = t_large / t_small
    assert ratio < MAX_RATIO, (
        f"4x the instructions took {ratio:.1f}x the time ({t_small:.3f} s -> {t_large:.3f} s)")


def test_chain_scales_near_linearly() -> None:
    assert_near_linear(chain_hlo(500), chain_hlo(2000))


def test_wide_graph_scales_near_linearly() -> None:
    assert_near_linear(wide_hlo(100), wide_hlo(400))


def test_deep_chain_fuses_without_recursion() -> None:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # Python's default: passes must not lean on a raised one
    try:
        module = parse(chain_hlo(10_000))
        run_pipeline(module, "xla")
    finally:
        sys.setrecursionlimit(limit)
    root = module.entry.root
    assert root.opcode is Opcode.FUSION
    assert len(root.fused_computation.instructions) == 10_000 + 2  # the ops and p0, p1
    kernels = [i for i in module.entry.instructions if i.opcode is not Opcode.PARAMETER]
    assert kernels == [root]
