"""Benchmark: the cost of one while-loop iteration on hlofuse's CPU backend vs jax.jit.

The module is a while loop of N trivial iterations (an s32 counter and one f32 scalar add per
iteration), written in HLO and, for the peer, the same loop in JAX (`lax.fori_loop`). Time per
iteration = best run time / N. hlofuse's native driver runs the loop in C, with kernels called
directly and no Python between iterations; XLA's CPU runtime does the same in its own way.

    python benchmarks/loop_overhead.py [--iterations 1000000] [--repeat 5]
Writes results/loop_overhead.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

import hlofuse


def module_text(n: int) -> str:
    return f"""HloModule loop_overhead

cond {{
  p = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant({n})
  ROOT lt = pred[] compare(i, n), direction=LT
}}

body {{
  p = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[] get-tuple-element(p), index=1
  one = s32[] constant(1)
  half = f32[] constant(0.5)
  i1 = s32[] add(i, one)
  x1 = f32[] add(x, half)
  ROOT t = (s32[], f32[]) tuple(i1, x1)
}}

ENTRY main {{
  x0 = f32[] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[]) tuple(zero, x0)
  w = (s32[], f32[]) while(init), condition=cond, body=body
  ROOT r = f32[] get-tuple-element(w), index=1
}}
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ns = ap.parse_args(argv)
    n = ns.iterations
    x0 = np.float32(0.0)
    cases = {}
    results: dict[str, dict[str, float]] = {}
    for pipeline in ("none", "xla"):
        exe = hlofuse.compile(module_text(n), pipeline=pipeline, backend="cpu")
        got = exe(x0)[0]
        want = np.float32(0.5) * n if n < (1 << 24) else None
        if want is not None:
            assert float(got) == float(want), (got, want)
        cases[f"hlofuse-{pipeline}"] = lambda e=exe: e(x0)
    try:
        import jax
        from jax import lax

        def loop(x):
            return lax.fori_loop(0, n, lambda i, v: v + np.float32(0.5), x)

        jitted = jax.jit(loop)
        cases["jax.jit"] = lambda: jax.block_until_ready(jitted(x0))
    except ImportError:
        pass
    best = harness.interleaved(cases, ns.repeat)
    for name, seconds in best.items():
        results[name] = {"seconds": seconds, "ns_per_iteration": seconds / n * 1e9}
        print(f"{name:12s} {seconds / n * 1e9:8.2f} ns/iteration")
    path = harness.save("loop_overhead", {"iterations": n, "results": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
