"""Benchmark: GFLOP/s of hlofuse's dots (own GEMM vs the OpenBLAS wheel) vs numpy and jax.jit,
on the dot shapes of real programs (small M, batch dimensions, transposed operands).

Each shape is a one-dot HLO module compiled by hlofuse (pipeline `none`) and run with the BLAS
pointers bound (`blas`) and unbound (`own`: hlofuse's packed, register-blocked GEMM); numpy is
`np.matmul` (its own bundled OpenBLAS), jax.jit the same dot under XLA. Times are per call,
Python call overhead included for every peer, best of --repeat interleaved samples.

    python benchmarks/gemm.py [--repeat 7]          # writes results/gemm.json
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/gemm.py --out gemm_1thread

Conditions: OpenBLAS picks its kernels when it loads (OPENBLAS_CORETYPE overrides; the JSON
records it and the kernel set it chose, `corename`). Compare columns within one run.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

import hlofuse  # noqa: E402
from hlofuse.backends.cpu.library import blas  # noqa: E402

# (name, batch, M, N, K, lhs transposed, rhs transposed): where they come from
SHAPES = [
    ("mlp fwd, 8 rows", 1, 8, 512, 128, False, False),
    ("mlp fwd, 32 rows", 1, 32, 512, 128, False, False),
    ("qkv projection", 1, 512, 384, 128, False, False),
    ("mlp up 512x128x512", 1, 512, 512, 128, False, False),
    ("mlp down 512x512->128", 1, 512, 128, 512, False, False),
    ("issue's 128x256x256", 1, 128, 256, 256, False, False),
    ("weight grad x^T g", 1, 128, 512, 512, True, False),
    ("input grad g W^T", 1, 512, 128, 512, False, True),
    ("attn scores q k^T (32 heads)", 32, 64, 64, 32, False, True),
    ("attn p v (32 heads)", 32, 64, 32, 64, False, False),
    ("square 256", 1, 256, 256, 256, False, False),
]


def module(batch: int, m: int, n: int, k: int, ta: bool, tb: bool) -> str:
    bd = [batch] if batch > 1 else []
    lhs = [*bd, *((k, m) if ta else (m, k))]
    rhs = [*bd, *((n, k) if tb else (k, n))]
    off = len(bd)
    dims = (f"lhs_contracting_dims={{{off + (0 if ta else 1)}}}, "
            f"rhs_contracting_dims={{{off + (1 if tb else 0)}}}")
    if bd:
        dims = "lhs_batch_dims={0}, rhs_batch_dims={0}, " + dims

    def t(d: list[int]) -> str:
        return "f32[" + ",".join(map(str, d)) + "]"

    return (f"ENTRY e {{\n  a = {t(lhs)} parameter(0)\n  b = {t(rhs)} parameter(1)\n"
            f"  ROOT d = {t([*bd, m, n])} dot(a, b), {dims}\n}}\n"), lhs, rhs  # type: ignore


def per_call(fn: Any, min_s: float) -> tuple[Any, int]:
    fn()
    t0 = time.perf_counter()
    fn()
    n = max(1, math.ceil(min_s / max(time.perf_counter() - t0, 1e-7)))

    def run() -> None:
        for _ in range(n):
            fn()
    return run, n


def interleaved(cases: dict[str, Any], repeat: int, clock: Any) -> dict[str, float]:
    """harness.interleaved with a choice of clock."""
    best = {name: math.inf for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            t0 = clock()
            fn()
            best[name] = min(best[name], clock() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    import jax
    import jax.numpy as jnp

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--min-ms", type=float, default=30.0)
    ap.add_argument("--out", default="gemm")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time samples by process CPU time, not wall time: on a loaded machine "
                         "this excludes the time the OS gave to others (use with one thread: "
                         "OMP_NUM_THREADS=1; jax.jit then still counts all its threads)")
    args = ap.parse_args(argv)
    found = blas.find()
    rows = []
    for name, batch, m, n, k, ta, tb in SHAPES:
        text, lhs, rhs = module(batch, m, n, k, ta, tb)  # type: ignore[misc]
        exe = hlofuse.compile(text, pipeline="none", backend="cpu")
        lib = exe._native._lib  # type: ignore[union-attr]
        rng = np.random.default_rng(0)
        a = rng.standard_normal(lhs).astype(np.float32)
        b = rng.standard_normal(rhs).astype(np.float32)
        an = np.swapaxes(a, -1, -2) if ta else a
        bn = np.swapaxes(b, -1, -2) if tb else b
        want = an @ bn
        contract = ([[len(lhs) - (2 if ta else 1)], [len(rhs) - (1 if tb else 2)]])
        batch_dims = ([[0], [0]] if batch > 1 else [[], []])
        jfn = jax.jit(lambda x, y, c=contract, bd=batch_dims: jax.lax.dot_general(
            x, y, (c, bd)))
        ja, jb = jnp.asarray(a), jnp.asarray(b)

        def own(exe: Any = exe, lib: Any = lib, a: Any = a, b: Any = b) -> Any:
            blas.unbind(lib)
            try:
                return exe(a, b)
            finally:
                blas.bind(lib)

        peers = {"own": own, "numpy": lambda an=an, bn=bn: np.matmul(an, bn),
                 "jax.jit": lambda ja=ja, jb=jb, f=jfn: f(ja, jb).block_until_ready()}
        if found is not None:
            def with_blas(exe: Any = exe, lib: Any = lib, a: Any = a, b: Any = b) -> Any:
                blas.bind(lib, found)
                try:
                    return exe(a, b)
                finally:
                    blas.bind(lib)

            peers["blas"] = with_blas
        for peer in ("own", "blas"):
            if peer in peers:
                got = peers[peer]()[0]
                np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * math.sqrt(k))
        samples, calls = {}, {}
        for p, fn in peers.items():
            samples[p], calls[p] = per_call(fn, args.min_ms / 1e3)
        best = interleaved(samples, args.repeat,
                           time.process_time if args.cpu_time else time.perf_counter)
        flops = 2.0 * batch * m * n * k
        gf = {p: flops / (best[p] / calls[p]) / 1e9 for p in peers}
        row = {"shape": name, "batch": batch, "m": m, "n": n, "k": k, "lhs_t": ta,
               "rhs_t": tb, "gflops": gf}
        if "blas" in gf:
            row["own_vs_blas"] = gf["own"] / gf["blas"]
        rows.append(row)
        print(f"{name:30s} " + "  ".join(f"{p} {v:7.1f}" for p, v in gf.items())
              + (f"  own/blas {row['own_vs_blas']:.2f}" if "own_vs_blas" in row else ""),
              flush=True)
    active = blas.active()
    info = {"blas": None if found is None else {"name": found.name, "version": found.version,
                                                "corename": found.corename},
            "default_gemm": "own" if active is None else "blas",
            "env": {k: v for k, v in os.environ.items()
                    if k.startswith(("OPENBLAS_", "OMP_", "HLOFUSE_"))},
            "load": os.getloadavg(), "repeat": args.repeat,
            "clock": "process CPU time" if args.cpu_time else "wall"}
    print(f"wrote {harness.save(args.out, {**info, 'rows': rows})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
