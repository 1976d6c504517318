"""CartPole in every layout RL code uses, hlofuse (`xla` and `hlofuse` pipelines, cpu backend)
vs jax.jit of the same program and the hand-written C: the state as four [N] arrays, one [N, 4]
or one [4, N] array; the precomputed resets as four [S, N] arrays, one [S, N, 4] (read as
`rst[:, k]`) or one [S, 4, N] array; the scan's per-step output none, a scalar (environments
reset that step: a sum over the batch) or per environment (`[S, N]`)
(`hlofuse.examples.cartpole.make_layout`). Part of benchmarks/cartpole.py (`--layouts`), or on
its own:

    python benchmarks/cartpole_layouts.py [--envs 2048] [--steps 10000] [--repeat 5]

For each of the 27 programs: env-steps/s of every peer, hlofuse's ratios to jax.jit, the
`hlofuse` pipeline's kernels per run (the whole loop is one of them), and whether every loop
over the environments in the `xla` pipeline's loop body kernels is a vector loop (read off the
kernel IR for this machine's target: explicit SIMD, not the C compiler's choice). The C reference
(`cartpole_ref.c: cartpole_ref_layout`) reads the same resets and emits the same output, with
the state as four arrays (its rows only). Each executable is first checked against the
interpreter on a 12-step rollout.
"""

from __future__ import annotations

import argparse
import sys
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

CHECK_STEPS = 12


def vectorized(exe: Any, envs: int) -> bool:
    """Is every loop over `envs` or more iterations in the while body's kernels a vector loop?"""
    from hlofuse.analysis.kernels import is_kernel
    from hlofuse.backends.cpu import host_target
    from hlofuse.backends.kernel_ir import ir
    from hlofuse.backends.kernel_ir import lower as kir_lower
    from hlofuse.backends.kernel_ir.passes import optimize
    from hlofuse.ir.opcodes import Opcode

    module = exe.module
    bodies = [i.attrs["body"] for c in module.computations_post_order()
              for i in c.instructions if i.opcode is Opcode.WHILE]
    target = host_target.detect()
    found = False
    for comp in bodies:
        for instr in comp.instructions:
            if not is_kernel(instr):
                continue
            k = optimize(kir_lower.lower_kernel(instr), target)
            for s in ir.walk(k.body):
                if isinstance(s, ir.Loop) and s.hi - s.lo >= envs - envs % max(1, s.vector or 1):
                    found = True
                    if not s.vector and target.vector_bytes:
                        return False
    return found


def _check(fn: Any, args: tuple, text: str, exe_short: Any) -> None:
    want = interpreter.run(parse(text), *args)
    got = exe_short(*args)
    for w, g in zip(want, got, strict=True):
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_array_equal(g, w)


PIPELINES = ("xla", "hlofuse")


def run_layouts(envs: int, steps: int, repeat: int, prog: harness.Progress | None = None,
                outputs: tuple[str, ...] = cartpole.STEP_OUTPUTS) -> list[dict[str, Any]]:
    import jax
    from cartpole_peers import c_reference_layout

    rows = []
    for ys in outputs:
        for sl in cartpole.STATE_LAYOUTS:
            for rl in cartpole.RESET_LAYOUTS:
                name = f"state {sl} / resets {rl} / ys {ys}"
                if prog is not None:
                    prog.update(0, f"layouts: {name}")
                s_fn, s_args = cartpole.make_layout(sl, rl, min(envs, 64), CHECK_STEPS, ys=ys)
                s_text = hlo_text(s_fn, *s_args)
                for pipeline in PIPELINES:
                    _check(s_fn, s_args, s_text,
                           hlofuse.compile(s_text, pipeline=pipeline, backend="cpu"))
                if sl == "four":
                    _check(s_fn, s_args, s_text, c_reference_layout(rl, ys))
                fn, args = cartpole.make_layout(sl, rl, envs, steps, ys=ys)
                text = hlo_text(fn, *args)
                exes = {p: hlofuse.compile(text, pipeline=p, backend="cpu") for p in PIPELINES}
                compiled = jax.jit(fn).lower(*args).compile()
                dev = [jax.device_put(a) for a in args]
                peers = {"jax.jit": lambda c=compiled, d=dev: jax.block_until_ready(c(*d))}
                for p, exe in exes.items():
                    peers[f"hlofuse[{p}]"] = lambda e=exe, a=args: e(*a)
                if sl == "four":
                    ref = c_reference_layout(rl, ys)
                    peers["C"] = lambda f=ref, a=args: f(*a)
                best = harness.interleaved(peers, repeat)
                prof = exes["hlofuse"].profile(*args)
                row = {
                    "state": sl, "resets": rl, "ys": ys, "envs": envs, "steps": steps,
                    "seconds": best,
                    "env_steps_per_s": {k: envs * steps / v for k, v in best.items()},
                    "ratio_vs_jax": {p: best["jax.jit"] / best[f"hlofuse[{p}]"]
                                     for p in PIPELINES},
                    "hlofuse_vs_xla": best["hlofuse[xla]"] / best["hlofuse[hlofuse]"],
                    "kernels_per_run": sum(r.calls for r in prof.rows),
                    "xla_body_vectorized": vectorized(exes["xla"], envs),
                }
                if "C" in best:
                    row["hlofuse_vs_c"] = best["C"] / best["hlofuse[hlofuse]"]
                rows.append(row)
                if prog is not None:
                    prog.update(1, f"layouts: {name}: "
                                f"{row['ratio_vs_jax']['hlofuse']:.2f}x jax.jit")
    return rows


def markdown(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| ys | state | resets | jax.jit env-steps/s | `hlofuse` env-steps/s | `hlofuse` vs "
             "jax.jit | `xla` vs jax.jit | `hlofuse` vs `xla` | `hlofuse` vs C | kernels/run "
             "| `xla` body vectorized |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    state_names = {"four": "four [N]", "n4": "[N, 4]", "4n": "[4, N]"}
    reset_names = {"four": "four [S, N]", "sn4": "[S, N, 4]", "s4n": "[S, 4, N]"}
    ys_names = {"none": "none", "scalar": "scalar (sum)", "env": "per env [S, N]"}
    for r in rows:
        rate = r["env_steps_per_s"]
        vs_c = f"{r['hlofuse_vs_c']:.2f}x" if "hlofuse_vs_c" in r else "-"
        lines.append(
            f"| {ys_names[r['ys']]} | {state_names[r['state']]} | {reset_names[r['resets']]} "
            f"| {rate['jax.jit']:.2e} | {rate['hlofuse[hlofuse]']:.2e} "
            f"| {r['ratio_vs_jax']['hlofuse']:.2f}x | {r['ratio_vs_jax']['xla']:.2f}x "
            f"| {r['hlofuse_vs_xla']:.2f}x | {vs_c} | {r['kernels_per_run']} "
            f"| {'yes' if r['xla_body_vectorized'] else 'NO'} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--envs", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ys", nargs="*", default=list(cartpole.STEP_OUTPUTS),
                    choices=cartpole.STEP_OUTPUTS)
    ap.add_argument("--out", default="cartpole_layouts")
    ns = ap.parse_args(argv)
    rows = run_layouts(ns.envs, ns.steps, ns.repeat, outputs=tuple(ns.ys))
    path = harness.save(ns.out, {"rows": rows})
    print("\n".join(markdown(rows)))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
