"""Benchmark: every JAX test program on hlofuse's CPU backend (pipeline `xla`) vs jax.jit.

The programs are the differential suite's (tests/programs.py): real JAX code lowered by JAX.
For each one: compile time (hlofuse cold, into an empty cache: pipeline + C generation + cc;
jax.jit: lower + compile) and run time (best of --repeat interleaved calls, each timed over
enough calls to last ~--min-ms). Their inputs are test-sized, so for the smallest programs the
run time is mostly call overhead; the `bytes` column (inputs + outputs) says which programs move
meaningful data, and the summary gives geometric means over all and over those >= 64 KiB.

    python benchmarks/programs.py [--repeat 3] [--only NAME ...]
Writes results/programs.json.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import harness  # noqa: E402

import hlofuse  # noqa: E402
import programs  # noqa: E402
from hlofuse.backends.cpu import build  # noqa: E402


def per_call(fn: Any, min_s: float) -> float:
    """Seconds per call, timing a batch of calls that lasts at least `min_s`."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_s:
            return dt / n
        n *= 4


def bench(p: programs.Program, repeat: int, min_s: float) -> dict[str, Any]:
    import jax

    args = p.make_args()
    text = programs.lower_to_hlo(p)
    row: dict[str, Any] = {"program": p.name}
    row["bytes"] = int(sum(np.asarray(a).nbytes for a in jax.tree_util.tree_leaves(args)))
    with tempfile.TemporaryDirectory() as cache:
        os.environ["HLOFUSE_CACHE_DIR"] = cache
        build._LOADED.clear()
        t_cold, exe = harness.timed(lambda: hlofuse.compile(text, pipeline="xla", backend="cpu"))
    del os.environ["HLOFUSE_CACHE_DIR"]
    jitted = jax.jit(p.fn, keep_unused=True)
    t_jax, compiled = harness.timed(lambda: jitted.lower(*args).compile())
    row["compile_s"] = {"hlofuse": t_cold, "jax.jit": t_jax}
    flat = [np.asarray(a) for a in jax.tree_util.tree_leaves(args)]
    dev = [jax.device_put(a) for a in args]
    row["bytes"] += int(sum(o.nbytes for o in exe(*flat)))
    best = {"hlofuse": math.inf, "jax.jit": math.inf}
    for _ in range(repeat):
        best["hlofuse"] = min(best["hlofuse"], per_call(lambda: exe(*flat), min_s))
        best["jax.jit"] = min(best["jax.jit"],
                              per_call(lambda: jax.block_until_ready(compiled(*dev)), min_s))
    row["run_s"] = best
    row["speedup_vs_jax"] = best["jax.jit"] / best["hlofuse"]
    row["compile_ratio_vs_jax"] = t_cold / t_jax
    return row


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--min-ms", type=float, default=20.0)
    ap.add_argument("--only", nargs="*")
    ns = ap.parse_args(argv)
    rows, failed = [], {}
    for p in programs.PROGRAMS:
        if ns.only and p.name not in ns.only:
            continue
        try:
            row = bench(p, ns.repeat, ns.min_ms / 1e3)
        except Exception as exc:  # a program the backend refuses is reported, not fatal
            failed[p.name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            print(f"{p.name:40s} FAILED {failed[p.name]}")
            continue
        rows.append(row)
        print(f"{p.name:40s} {row['bytes']:>9d} B  run x{row['speedup_vs_jax']:6.2f} vs jax  "
              f"compile {row['compile_s']['hlofuse']:.2f} s vs {row['compile_s']['jax.jit']:.2f} s",
              flush=True)
    big = [r for r in rows if r["bytes"] >= 64 * 1024]
    summary = {
        "programs": len(rows),
        "failed": failed,
        "geomean_speedup_vs_jax": geomean([r["speedup_vs_jax"] for r in rows]),
        "geomean_speedup_vs_jax_64KiB_plus": geomean([r["speedup_vs_jax"] for r in big]),
        "programs_64KiB_plus": len(big),
        "geomean_compile_ratio_vs_jax": geomean([r["compile_ratio_vs_jax"] for r in rows]),
    }
    print(summary)
    path = harness.save("programs", {"summary": summary, "rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
