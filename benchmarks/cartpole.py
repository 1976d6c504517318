"""Benchmark: the paper's CartPole rollout on hlofuse's CPU backend vs jax.jit vs numpy eager.

For each variant (baseline, precomputed, separate, unrolled; see hlofuse/examples/cartpole.py)
the same JAX program is lowered once; hlofuse compiles that HLO under each pipeline (`none` is one
kernel per op, the eager baseline; `xla` is XLA's fusion rules) for the cpu backend, and jax.jit
compiles the program itself. All run on the same arguments in the same process, interleaved, and
the best of --repeat runs is kept. Reported: env-steps/s and the ratio to jax.jit of the same
variant, plus compile times (hlofuse cold = empty cache: pipeline + C generation + cc; warm =
compile() again in the same process after clearing its in-memory memo, i.e. from the disk cache;
jax.jit = lower + compile).

Before timing, every hlofuse executable is checked against the interpreter on a short rollout
(the same HLO module with few steps), since a long chaotic rollout amplifies last-bit differences
between sin/cos implementations.

    python benchmarks/cartpole.py                      # 2048 envs x 10,000 steps
    python benchmarks/cartpole.py --quick              # 256 envs x 200 steps, 1 repeat
Writes results/cartpole.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

import hlofuse
from hlofuse.backends import interpreter
from hlofuse.examples import cartpole
from hlofuse.frontends.jax import hlo_text
from hlofuse.text import parse

PIPELINES = ("none", "xla")


def _numpy_args(variant: str, args: tuple) -> tuple | None:
    """numpy_rollout's arguments for a precomputed-randomness variant, or None."""
    if variant in ("separate", "unrolled"):
        return args
    if variant == "precomputed":
        state, actions, resets = args
        return (*state, actions, *(np.ascontiguousarray(resets[:, i]) for i in range(4)))
    return None


def check_against_interpreter(variant: str, pipeline: str, envs: int) -> None:
    """Compile a 12-step version and compare with the interpreter (exact ints, float rtol)."""
    fn, args = cartpole.make(variant, envs, 12)
    text = hlo_text(fn, *args)
    exe = hlofuse.compile(text, pipeline=pipeline, backend="cpu")
    want = interpreter.run(parse(text), *args)
    got = exe(*args)
    for w, g in zip(want, got, strict=True):
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_array_equal(g, w)


def bench_variant(variant: str, envs: int, steps: int, repeat: int) -> dict[str, Any]:
    import jax

    fn, args = cartpole.make(variant, envs, steps)
    text = hlo_text(fn, *args)
    row: dict[str, Any] = {"variant": variant, "envs": envs, "steps": steps}

    jitted = jax.jit(fn)
    t_jax_compile, compiled = harness.timed(lambda: jitted.lower(*args).compile())
    row["jax_compile_s"] = t_jax_compile
    dev_args = [jax.device_put(a) for a in args]

    cases: dict[str, Any] = {
        "jax.jit": lambda: jax.block_until_ready(compiled(*dev_args)),
    }
    np_args = _numpy_args(variant, args)
    if np_args is not None:
        cases["numpy"] = lambda: cartpole.numpy_rollout(*np_args)

    from hlofuse.backends.cpu import build

    for pipeline in PIPELINES:
        check_against_interpreter(variant, pipeline, min(envs, 64))
        with tempfile.TemporaryDirectory() as cache:
            old = os.environ.get("HLOFUSE_CACHE_DIR")
            os.environ["HLOFUSE_CACHE_DIR"] = cache
            try:
                build._LOADED.clear()
                t_cold, exe = harness.timed(
                    lambda p=pipeline: hlofuse.compile(text, pipeline=p, backend="cpu"))
                build._LOADED.clear()
                t_warm, _ = harness.timed(
                    lambda p=pipeline: hlofuse.compile(text, pipeline=p, backend="cpu"))
            finally:
                if old is None:
                    del os.environ["HLOFUSE_CACHE_DIR"]
                else:
                    os.environ["HLOFUSE_CACHE_DIR"] = old
        row[f"hlofuse_{pipeline}_compile_cold_s"] = t_cold
        row[f"hlofuse_{pipeline}_compile_warm_s"] = t_warm
        cases[f"hlofuse-{pipeline}"] = lambda e=exe: e(*args)

    best = harness.interleaved(cases, repeat)
    work = envs * steps
    row["seconds"] = best
    row["env_steps_per_s"] = {k: work / v for k, v in best.items()}
    row["ratio_vs_jax"] = {k: best["jax.jit"] / v for k, v in best.items()}
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--variants", nargs="+", default=["precomputed", "separate", "baseline"],
                    choices=cartpole.VARIANTS)
    ap.add_argument("--quick", action="store_true", help="256 envs x 200 steps, 1 repeat")
    ap.add_argument("--out", default="cartpole")
    ns = ap.parse_args(argv)
    if ns.quick:
        ns.envs, ns.steps, ns.repeat = 256, 200, 1
    rows = []
    for variant in ns.variants:
        print(f"{variant}: {ns.envs} envs x {ns.steps} steps ...", flush=True)
        row = bench_variant(variant, ns.envs, ns.steps, ns.repeat)
        rows.append(row)
        for name, rate in row["env_steps_per_s"].items():
            print(f"  {name:14s} {harness.fmt_rate(rate)} env-steps/s"
                  f"  x{row['ratio_vs_jax'][name]:.2f} vs jax.jit")
        print(f"  compile: jax.jit {row['jax_compile_s']:.3f} s; hlofuse xla cold "
              f"{row['hlofuse_xla_compile_cold_s']:.3f} s, warm "
              f"{row['hlofuse_xla_compile_warm_s'] * 1e3:.1f} ms")
    path = harness.save(ns.out, {"rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
