"""`hlofuse demo`: the built-in CartPole case study, end to end, without JAX.

It loads the CartPole modules that ship as package data (generated from the project's own JAX
programs by scripts/gen_examples.py), simplifies them, runs them, and reports what it did.
"""

from __future__ import annotations

import time

import numpy as np

from hlofuse.ir.module import Module
from hlofuse.ir.shape import ArrayShape

VARIANTS = ("cartpole_baseline", "cartpole_precomputed", "cartpole_separate")


def demo_inputs(module: Module, seed: int = 0) -> list[np.ndarray]:
    """Plausible inputs for a CartPole module: small float states, random uint32 key words."""
    rng = np.random.default_rng(seed)
    out = []
    for p in module.entry.parameters:
        shape = p.shape
        assert isinstance(shape, ArrayShape), "CartPole modules take arrays"
        if shape.dtype.is_float:
            out.append(rng.uniform(-0.05, 0.05, shape.dims).astype(shape.dtype.np))
        elif shape.dtype.is_pred:
            out.append(rng.integers(0, 2, shape.dims).astype(np.bool_))
        else:
            info = np.iinfo(shape.dtype.np)
            out.append(rng.integers(0, min(int(info.max), 2**31 - 1), shape.dims,
                                    dtype=np.int64).astype(shape.dtype.np))
    return out


def _count(module: Module) -> int:
    return sum(len(c.instructions) for c in module.computations)


def _loop_kernels(module: Module) -> list[int]:
    """Kernels per iteration of each while loop, largest first (the time loop leads)."""
    from hlofuse.passes.fusion.kernels import count_kernels

    return sorted(count_kernels(module).loops.values(), reverse=True)


def run_demo(quick: bool = False) -> int:
    from hlofuse import examples
    from hlofuse.backends import interpreter
    from hlofuse.passes.pipelines import run_pipeline
    from hlofuse.text import parse

    print("hlofuse demo: the CartPole case study (Snider & Liang, 2023)\n")
    variants = VARIANTS[:1] if quick else VARIANTS
    for name in variants:
        module = parse(examples.text(name), source_name=str(examples.path(name)))
        before = _count(module)
        args = demo_inputs(module)
        t0 = time.perf_counter()
        expected = interpreter.run(module, *args)
        t_raw = time.perf_counter() - t0
        t0 = time.perf_counter()
        run_pipeline(module, "simplify")
        t_opt = time.perf_counter() - t0
        after = _count(module)
        got = interpreter.run(module, *args)
        same = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(expected, got,
                                                                        strict=True))
        print(f"{name}:")
        print(f"  {before} instructions as lowered by JAX -> {after} after `simplify` "
              f"({t_opt * 1e3:.0f} ms)")
        print(f"  interpreter run: {t_raw * 1e3:.0f} ms; outputs after simplification "
              f"{'identical' if same else 'DIFFER'}")
        fused = parse(examples.text(name))
        t0 = time.perf_counter()
        run_pipeline(fused, "xla")
        t_xla = time.perf_counter() - t0
        fused_out = interpreter.run(fused, *args)
        fused_same = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(expected, fused_out,
                                                                              strict=True))
        unfused_k, fused_k = _loop_kernels(module), _loop_kernels(fused)
        print(f"  kernels per time-loop iteration: {unfused_k[0]} unfused (`none`) -> "
              f"{fused_k[0]} with XLA's fusion rules (`xla`, {t_xla * 1e3:.0f} ms); "
              f"outputs {'identical' if fused_same else 'DIFFER'}")
        if len(fused_k) > 1:
            nested = ", ".join(f"{a} -> {b}" for a, b in zip(unfused_k[1:], fused_k[1:],
                                                             strict=False))
            print(f"  plus {len(fused_k) - 1} nested loops (the RNG's threefry rounds), "
                  f"kernels per trip: {nested}")
        for i, o in enumerate(got):
            print(f"  out_{i}: {o.dtype}{list(o.shape)} mean={np.mean(o.astype(np.float64)):.4g}")
        if not (same and fused_same):
            return 1
    print("\nWhy each boundary is there: docs/fusion.md, or "
          "`hlofuse opt FILE --pipeline xla -q --kernels --trace why.jsonl`.")
    print("Next: `hlofuse opt FILE --pipeline simplify` on your own HLO, "
          "`hlofuse run FILE --random-inputs 0`.")
    return 0
