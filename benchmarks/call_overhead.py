"""Benchmark: the cost of one call of a function of N small leaves, hlofuse.jit vs jax.jit.

The function adds 1 to each of N float32[16] leaves (a list in, a list out), so its kernels
cost next to nothing and a call's time is the per-call overhead: flattening the pytree, reading
the leaves' buffers, running the program, making N output jax.Arrays. Three ways, interleaved
(`harness.interleaved`, best of rounds, each round a batch of calls):

* jax.jit;
* hlofuse.jit: the compiled module as one XLA custom call inside jax.jit of a thin wrapper
  (`frontends/jax_ffi.py`), jax's C++ dispatch doing the rest;
* hlofuse.jit's direct path: leaves to numpy, the executable through ctypes, each output made a
  jax.Array (what every call did before the path through XLA; still the path of the
  interpreter and of signatures the custom call cannot run).

    python benchmarks/call_overhead.py [--leaves 1 10 50 200] [--repeat 15]
Writes results/call_overhead.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness


def add_one(xs: list[Any]) -> list[Any]:
    return [x + 1.0 for x in xs]


def batch(fn: Callable[[], Any], calls: int) -> Callable[[], Any]:
    import jax

    def run() -> Any:
        out = None
        for _ in range(calls):
            out = fn()
        return jax.block_until_ready(out)

    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--leaves", type=int, nargs="*", default=[1, 10, 50, 200])
    ap.add_argument("--repeat", type=int, default=15)
    ns = ap.parse_args(argv)
    import jax
    import jax.numpy as jnp
    import numpy as np

    import hlofuse

    rows = []
    for n in ns.leaves:
        xs = [jnp.full((16,), float(i), jnp.float32) for i in range(n)]
        jitted, ours = jax.jit(add_one), hlofuse.jit(add_one)
        want = jitted(xs)
        for got in (ours(xs), ours._call_direct((xs,), {})):
            assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
        calls = max(5, 2000 // n)
        cases = {
            "jax.jit": batch(lambda j=jitted, xs=xs: j(xs), calls),
            "hlofuse.jit": batch(lambda h=ours, xs=xs: h(xs), calls),
            "hlofuse.jit direct": batch(lambda h=ours, xs=xs: h._call_direct((xs,), {}), calls),
        }
        t0 = time.perf_counter()
        best = harness.interleaved(cases, ns.repeat)
        us = {name: seconds / calls * 1e6 for name, seconds in best.items()}
        row = {"leaves": n, "calls_per_round": calls, "us_per_call": us,
               "hlofuse_vs_jax": us["jax.jit"] / us["hlofuse.jit"],
               "direct_vs_jax": us["jax.jit"] / us["hlofuse.jit direct"]}
        rows.append(row)
        print(f"N={n:4d}  jax.jit {us['jax.jit']:8.1f} us  hlofuse.jit {us['hlofuse.jit']:8.1f} us"
              f" ({row['hlofuse_vs_jax']:.2f}x)  direct {us['hlofuse.jit direct']:8.1f} us"
              f" ({row['direct_vs_jax']:.2f}x)  [{time.perf_counter() - t0:.0f} s]", flush=True)
    path = harness.save("call_overhead", {
        "function": "[x + 1 for x in xs], xs: N float32[16] jax.Arrays",
        "note": "us per call, best of interleaved rounds; ratios are jax.jit time / time "
                "(above 1: faster than jax.jit)",
        "rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
