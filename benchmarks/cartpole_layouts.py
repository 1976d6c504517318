"""CartPole in every layout RL code uses, hlofuse (`xla` pipeline, cpu backend) vs jax.jit of the
same program: the state as four [N] arrays, one [N, 4] or one [4, N] array; the precomputed
resets as four [S, N] arrays, one [S, N, 4] (read as `rst[:, k]`) or one [S, 4, N] array
(`hlofuse.examples.cartpole.make_layout`). Part of benchmarks/cartpole.py (`--layouts`), or on
its own:

    python benchmarks/cartpole_layouts.py [--envs 2048] [--steps 10000] [--repeat 5]

For each of the 9 programs: env-steps/s of both, the ratio, hlofuse's kernels per env step, and
whether every loop over the environments in the loop body's kernels is a vector loop (read off
the kernel IR for this machine's target: explicit SIMD, not the C compiler's choice). Each
executable is first checked against the interpreter on a 12-step rollout.
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


def run_layouts(envs: int, steps: int, repeat: int, prog: harness.Progress | None = None
                ) -> list[dict[str, Any]]:
    import jax

    rows = []
    for sl in cartpole.STATE_LAYOUTS:
        for rl in cartpole.RESET_LAYOUTS:
            name = f"state {sl} / resets {rl}"
            if prog is not None:
                prog.update(0, f"layouts: {name}")
            s_fn, s_args = cartpole.make_layout(sl, rl, min(envs, 64), CHECK_STEPS)
            s_text = hlo_text(s_fn, *s_args)
            _check(s_fn, s_args, s_text, hlofuse.compile(s_text, backend="cpu"))
            fn, args = cartpole.make_layout(sl, rl, envs, steps)
            text = hlo_text(fn, *args)
            exe = hlofuse.compile(text, backend="cpu")
            compiled = jax.jit(fn).lower(*args).compile()
            dev = [jax.device_put(a) for a in args]
            best = harness.interleaved({
                "jax.jit": lambda c=compiled, d=dev: jax.block_until_ready(c(*d)),
                "hlofuse": lambda e=exe, a=args: e(*a),
            }, repeat)
            prof = exe.profile(*args)
            rows.append({
                "state": sl, "resets": rl, "envs": envs, "steps": steps,
                "seconds": best,
                "env_steps_per_s": {k: envs * steps / v for k, v in best.items()},
                "ratio_vs_jax": best["jax.jit"] / best["hlofuse"],
                "kernels_per_step": sum(r.calls for r in prof.rows if r.calls > 1) / steps,
                "main_kernel_vectorized": vectorized(exe, envs),
            })
            if prog is not None:
                prog.update(1, f"layouts: {name}: {rows[-1]['ratio_vs_jax']:.2f}x jax.jit")
    return rows


def markdown(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| state | resets | jax.jit env-steps/s | hlofuse env-steps/s | vs jax.jit | "
             "kernels/step | vectorized |", "|---|---|---:|---:|---:|---:|---|"]
    state_names = {"four": "four [N]", "n4": "[N, 4]", "4n": "[4, N]"}
    reset_names = {"four": "four [S, N]", "sn4": "[S, N, 4]", "s4n": "[S, 4, N]"}
    for r in rows:
        rate = r["env_steps_per_s"]
        lines.append(
            f"| {state_names[r['state']]} | {reset_names[r['resets']]} "
            f"| {rate['jax.jit']:.2e} | {rate['hlofuse']:.2e} | {r['ratio_vs_jax']:.2f}x "
            f"| {r['kernels_per_step']:.0f} | {'yes' if r['main_kernel_vectorized'] else 'NO'} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--envs", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default="cartpole_layouts")
    ns = ap.parse_args(argv)
    rows = run_layouts(ns.envs, ns.steps, ns.repeat)
    path = harness.save(ns.out, {"rows": rows})
    print("\n".join(markdown(rows)))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
