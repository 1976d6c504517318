"""Benchmark: hlofuse's convolutions (cpu backend) against jax.jit, one convolution per program,
on the convolution shapes of real programs: flax's MNIST CNN train step (forward, input
gradient, weight gradients), flax's ResNet18 train step (7x7 stride 2, strided 3x3, 1x1,
lhs-dilated input gradients, rhs-dilated weight gradients), and a depthwise convolution with
its weight gradient (batch_group_count).

Each case is one `lax.conv_general_dilated` call, jitted by jax (inputs as device arrays) and
compiled by hlofuse (`hlofuse.compile(hlofuse.from_jax(...))`, numpy inputs); the HLO both get
is the convolution exactly as jax lowers it in those programs (checked: one convolution with
the listed dim_labels). Both are timed in one process, interleaved, best of N samples of
several calls each; the ratio is jax.jit's time over hlofuse's (> 1: hlofuse is faster).

    python benchmarks/conv.py                  # writes results/conv.json
    python benchmarks/conv.py --only cnn --repeat 3 --no-save

Threads: both use their defaults (jax's Eigen pool, hlofuse's HLOFUSE_THREADS else the CPUs
this process may use); `--threads N` sets hlofuse's.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

# (name, lhs shape, rhs shape, (lhs, rhs, out) specs, strides, padding, lhs dilation,
#  rhs dilation, feature groups, batch groups, the dim_labels jax lowers it to)
CASES: list[tuple[Any, ...]] = [
    ("cnn conv1 fwd", (32, 28, 28, 1), (3, 3, 1, 32), ("NHWC", "HWIO", "NHWC"), (1, 1),
     ((1, 1), (1, 1)), (1, 1), (1, 1), 1, 1, "b01f_01io->b01f"),
    ("cnn conv2 fwd", (32, 14, 14, 32), (3, 3, 32, 64), ("NHWC", "HWIO", "NHWC"), (1, 1),
     ((1, 1), (1, 1)), (1, 1), (1, 1), 1, 1, "b01f_01io->b01f"),
    ("cnn conv2 input grad", (32, 14, 14, 64), (3, 3, 32, 64), ("NHWC", "HWOI", "NHWC"),
     (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1, 1, "b01f_01oi->b01f"),
    ("cnn conv1 weight grad", (32, 28, 28, 1), (32, 28, 28, 32), ("CHWN", "IHWO", "HWNC"),
     (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1, 1, "f01b_i01o->01bf"),
    ("cnn conv2 weight grad", (32, 14, 14, 32), (32, 14, 14, 64), ("CHWN", "IHWO", "HWNC"),
     (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1, 1, "f01b_i01o->01bf"),
    ("resnet 7x7/2 fwd", (16, 32, 32, 3), (7, 7, 3, 16), ("NHWC", "HWIO", "NHWC"), (2, 2),
     ((3, 3), (3, 3)), (1, 1), (1, 1), 1, 1, "b01f_01io->b01f"),
    ("resnet 7x7/2 weight grad", (16, 32, 32, 3), (16, 16, 16, 16), ("CHWN", "IHWO", "HWNC"),
     (1, 1), ((3, 2), (3, 2)), (1, 1), (2, 2), 1, 1, "f01b_i01o->01bf"),
    ("resnet 3x3 16 fwd", (16, 8, 8, 16), (3, 3, 16, 16), ("NHWC", "HWIO", "NHWC"), (1, 1),
     ((1, 1), (1, 1)), (1, 1), (1, 1), 1, 1, "b01f_01io->b01f"),
    ("resnet 3x3/2 32 fwd", (16, 8, 8, 16), (3, 3, 16, 32), ("NHWC", "HWIO", "NHWC"), (2, 2),
     ((0, 1), (0, 1)), (1, 1), (1, 1), 1, 1, "b01f_01io->b01f"),
    ("resnet 1x1/2 64 fwd", (16, 4, 4, 32), (1, 1, 32, 64), ("NHWC", "HWIO", "NHWC"), (2, 2),
     ((0, 0), (0, 0)), (1, 1), (1, 1), 1, 1, "b01f_01io->b01f"),
    ("resnet 3x3 128 fwd", (16, 1, 1, 128), (3, 3, 128, 128), ("NHWC", "HWIO", "NHWC"),
     (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1, 1, "b01f_01io->b01f"),
    ("resnet 3x3 16 input grad", (16, 8, 8, 16), (3, 3, 16, 16), ("NHWC", "HWOI", "NHWC"),
     (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1, 1, "b01f_01oi->b01f"),
    ("resnet 3x3/2 input grad", (16, 4, 4, 32), (3, 3, 16, 32), ("NHWC", "HWOI", "NHWC"),
     (1, 1), ((2, 1), (2, 1)), (2, 2), (1, 1), 1, 1, "b01f_01oi->b01f"),
    ("resnet 3x3 16 weight grad", (16, 8, 8, 16), (16, 8, 8, 16), ("CHWN", "IHWO", "HWNC"),
     (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1, 1, "f01b_i01o->01bf"),
    ("resnet 3x3/2 weight grad", (16, 8, 8, 16), (16, 4, 4, 32), ("CHWN", "IHWO", "HWNC"),
     (1, 1), ((0, 1), (0, 1)), (1, 1), (2, 2), 1, 1, "f01b_i01o->01bf"),
    ("depthwise 3x3 fwd", (32, 28, 28, 64), (3, 3, 1, 64), ("NHWC", "HWIO", "NHWC"), (1, 1),
     ((1, 1), (1, 1)), (1, 1), (1, 1), 64, 1, "b01f_01io->b01f"),
    ("depthwise 3x3 weight grad", (32, 28, 28, 64), (32, 28, 28, 64), ("CHWN", "IHWO", "HWNC"),
     (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1, 64, "f01b_i01o->01bf"),
]


def build(case: tuple[Any, ...], threads: int | None) -> tuple[Any, Any, str]:
    """(jax callable, hlofuse callable, the HLO's dim_labels) of one case."""
    import jax
    import numpy as np
    from jax import lax

    import hlofuse

    (_, ls, rs, specs, strides, pad, ldil, rdil, fgc, bgc, _) = case

    def conv(x: Any, w: Any) -> Any:
        return lax.conv_general_dilated(x, w, strides, pad, ldil, rdil, specs,
                                        feature_group_count=fgc, batch_group_count=bgc)

    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(ls, np.float32), rng.standard_normal(rs, np.float32)]
    module = hlofuse.from_jax(conv, *xs)
    convs = [i for c in module.computations for i in c.instructions
             if i.opcode.value == "convolution"]
    got = str(convs[0].attrs.get("dim_labels")) if len(convs) == 1 else "?"
    exe = hlofuse.compile(module, threads=threads)
    jitted = jax.jit(conv)
    dev = [jax.device_put(x) for x in xs]
    want = np.asarray(jitted(*dev))
    mine = exe(*xs)[0]
    scale = float(np.abs(want).max()) or 1.0
    err = float(np.abs(mine - want).max()) / scale
    if err > 1e-4:
        raise AssertionError(f"{case[0]}: hlofuse differs from jax.jit by {err:.2e} (relative)")
    return (lambda: jitted(*dev).block_until_ready()), (lambda: exe(*xs)), got


def per_call(fn: Any, min_s: float) -> tuple[Any, int]:
    """`fn` repeated to last about `min_s` a sample, and the count."""
    fn()
    t0 = time.perf_counter()
    fn()
    n = max(1, math.ceil(min_s / max(time.perf_counter() - t0, 1e-7)))

    def run() -> None:
        for _ in range(n):
            fn()
    return run, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="interleaved samples (best kept)")
    ap.add_argument("--sample", type=float, default=0.05, help="seconds per sample")
    ap.add_argument("--threads", type=int, default=None, help="hlofuse's threads")
    ap.add_argument("--only", default="", help="cases whose name contains this")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    rows = []
    print(f"{'case':30} {'dim_labels':18} {'jax.jit ms':>11} {'hlofuse ms':>11} {'ratio':>6}")
    for case in CASES:
        if args.only not in case[0]:
            continue
        jx, hf, labels = build(case, args.threads)
        if labels != case[-1]:
            raise AssertionError(f"{case[0]}: jax lowered dim_labels={labels}, not {case[-1]}")
        jrun, jn = per_call(jx, args.sample)
        hrun, hn = per_call(hf, args.sample)
        best = harness.interleaved({"jax": jrun, "hlofuse": hrun}, args.repeat)
        tj, th = best["jax"] / jn * 1e3, best["hlofuse"] / hn * 1e3
        rows.append({"case": case[0], "dim_labels": labels,
                     "lhs": list(case[1]), "rhs": list(case[2]), "jax_ms": round(tj, 4),
                     "hlofuse_ms": round(th, 4), "speedup": round(tj / th, 3)})
        print(f"{case[0]:30} {labels:18} {tj:11.3f} {th:11.3f} {tj / th:6.2f}", flush=True)
    if rows:
        geo = math.exp(sum(math.log(r["speedup"]) for r in rows) / len(rows))
        print(f"geomean speedup (jax.jit time / hlofuse time): {geo:.2f}")
        if not args.no_save:
            from hlofuse.backends.cpu.library import blas

            used = blas.active()
            harness.save("conv", {"threads": args.threads,
                                  "gemm": f"OpenBLAS ({used.corename} kernels)" if used
                                  else "hlofuse's own GEMM",
                                  "repeat": args.repeat, "cases": rows,
                                  "geomean_speedup": round(geo, 3)})


if __name__ == "__main__":
    main()
