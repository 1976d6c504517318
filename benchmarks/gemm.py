"""Benchmark: GFLOP/s of hlofuse's dots (own GEMM vs the OpenBLAS wheel) vs numpy and jax.jit,
on the dot shapes of real programs (small M, batch dimensions, transposed operands).

`own` (hlofuse's packed, register-blocked GEMM) and `blas` (OpenBLAS from the scipy-openblas32
wheel, through the task driver the cpu backend emits) are the C routines the backend generates,
timed in C: the best of many calls, so no Python overhead and little noise from a loaded
machine. numpy (`np.matmul`, its own bundled OpenBLAS) and jax.jit (the same dot_general under
XLA) are timed from Python, their call overhead included (it dominates the smallest shapes):
best of --repeat interleaved samples, by wall or (--cpu-time) process CPU time.

    python benchmarks/gemm.py [--repeat 7]          # writes results/gemm.json
    python benchmarks/gemm.py --threads 1 --cpu-time --out gemm_1thread

`--threads` (default: the runtime's, HLOFUSE_THREADS else the CPUs this process may use) is how
many threads of hlofuse's pool our GEMM and the BLAS driver may cut a dot into (OpenBLAS itself
always runs single-threaded inside them).

Conditions: OpenBLAS picks its kernels when it loads (OPENBLAS_CORETYPE overrides; the JSON
records it and the kernel set it chose, `corename`). Compare columns within one run.
"""

from __future__ import annotations

import argparse
import ctypes
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


_HARNESS = r"""
#include <time.h>
static double hf_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
/* The best of `reps` timed calls of our GEMM (which = 0) or the bound BLAS (which = 1) on
   c[batch][M][N] = op(a) x op(b), a stored K x M when ta, b stored N x K when tb. */
double hf_bench(int which, int64_t reps, int64_t batch, int64_t M, int64_t N, int64_t K,
                int ta, int tb, const float *a, const float *b, float *c, int threads) {
    const int64_t sam = ta ? 1 : K, sak = ta ? M : 1, sbk = tb ? 1 : N, sbn = tb ? K : 1;
    double best = 1e30;
    for (int64_t r = 0; r < reps; r++) {
        const double t0 = hf_now();
        if (which == 0)
            hflib_gemm_f32(batch, M, N, K, a, M * K, sam, sak, b, K * N, sbk, sbn, c, threads);
        else
            hflib_blas_f32(ta ? 112 : 111, tb ? 112 : 111, batch, M, N, K, a, M * K, sam,
                           ta ? M : K, b, K * N, sbn, tb ? K : N, c, threads);
        const double dt = hf_now() - t0;
        if (dt < best) best = dt;
    }
    return best;
}
"""


def kernels() -> ctypes.CDLL:
    """Our GEMM and the BLAS driver, exactly as the cpu backend emits them, with a timing loop
    (the library's BLAS pointers are bound when it loads, as for any module; its
    `hf_parallel_ptr` is pointed at the runtime's pool, as the executable does)."""
    from hlofuse.backends.cpu import build, cexpr, runtime
    from hlofuse.backends.cpu.library import gemm

    src = "\n".join([cexpr.prelude(), gemm.gemm_helper("f32"),
                     blas.declarations("f32", gemm.PARALLEL_WORK), _HARNESS])
    lib = build.load_library(src, name="bench_gemm")
    lib.hf_bench.restype = ctypes.c_double
    lib.hf_bench.argtypes = [ctypes.c_int, *[ctypes.c_int64] * 5, ctypes.c_int, ctypes.c_int,
                             *[ctypes.c_void_p] * 3, ctypes.c_int]
    pool = runtime.parallel_address()
    if pool is not None:
        ctypes.c_void_p.in_dll(lib, "hf_parallel_ptr").value = pool
    return lib


def per_call(fn: Any, min_s: float) -> tuple[Any, int]:
    """A sample of `fn`: as many calls as last about `min_s`, and that count."""
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
                         "--threads 1; jax.jit then still counts all its threads)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads of hlofuse's pool for our GEMM and the BLAS driver")
    args = ap.parse_args(argv)
    from hlofuse.backends.cpu import runtime

    threads = args.threads or runtime.default_threads()
    found = blas.find()
    rows = []
    lib = kernels()
    for name, batch, m, n, k, ta, tb in SHAPES:
        bd = (batch,) if batch > 1 else ()
        rng = np.random.default_rng(0)
        a = rng.standard_normal((*bd, *((k, m) if ta else (m, k)))).astype(np.float32)
        b = rng.standard_normal((*bd, *((n, k) if tb else (k, n)))).astype(np.float32)
        an = np.swapaxes(a, -1, -2) if ta else a
        bn = np.swapaxes(b, -1, -2) if tb else b
        want = an @ bn
        flops = 2.0 * batch * m * n * k
        reps = max(20, int(args.min_ms * 1e-3 * 100e9 / flops) * args.repeat)
        gf: dict[str, float] = {}
        for which, peer in ((0, "own"), (1, "blas")):
            if peer == "blas":
                if found is None:
                    continue
                blas.bind(lib, found)
            else:
                blas.unbind(lib)
            c = np.empty(want.shape, np.float32)
            t = lib.hf_bench(which, reps, batch, m, n, k, int(ta), int(tb), a.ctypes.data,
                             b.ctypes.data, c.ctypes.data, threads)
            np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-3 * math.sqrt(k))
            gf[peer] = flops / t / 1e9
        blas.bind(lib)
        contract = ([[a.ndim - (2 if ta else 1)], [b.ndim - (1 if tb else 2)]])
        batch_dims = ([[0], [0]] if batch > 1 else [[], []])
        jfn = jax.jit(lambda x, y, c=contract, bd=batch_dims: jax.lax.dot_general(
            x, y, (c, bd)))
        ja, jb = jnp.asarray(a), jnp.asarray(b)
        peers = {"numpy": lambda an=an, bn=bn: np.matmul(an, bn),
                 "jax.jit": lambda ja=ja, jb=jb, f=jfn: f(ja, jb).block_until_ready()}
        samples, calls = {}, {}
        for p, fn in peers.items():
            samples[p], calls[p] = per_call(fn, args.min_ms / 1e3)
        best = interleaved(samples, args.repeat,
                           time.process_time if args.cpu_time else time.perf_counter)
        gf.update({p: flops / (best[p] / calls[p]) / 1e9 for p in peers})
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
            "threads": threads, "load": os.getloadavg(), "repeat": args.repeat,
            "clock": "process CPU time" if args.cpu_time else "wall"}
    print(f"wrote {harness.save(args.out, {**info, 'rows': rows})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
