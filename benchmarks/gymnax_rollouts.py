"""Benchmark: gymnax rollouts through `hlofuse.jit`, against `jax.jit` of the same function.

The programs are gymnax's own environments (CartPole-v1, Acrobot-v1, and with --all also
Pendulum-v1, MountainCar-v0 and MinAtar's Breakout), written the way gymnax's examples write a
rollout: `jax.vmap` of `env.reset` and `env.step` over the environments, inside `lax.scan`, the
key split every step, random actions from `env.action_space(params).sample`, gymnax's
auto-reset inside `env.step`. Nothing here is shaped for hlofuse.

    rollout(key) -> (final observations [N, obs], summed rewards [N])

Cases, interleaved in one process (harness.py; best of --repeat rounds):
  jax.jit             the function under jax.jit, the key a device array
  hlofuse (xla)       hlofuse.jit(pipeline="xla"): XLA's fusion rules, our kernels
  hlofuse             hlofuse.jit(pipeline="hlofuse"): whole-loop fusion, fusible RNG, ...
Checked before timing: on a short rollout (10 steps) every hlofuse output matches jax.jit to
float32 rounding; over the full rollout the fraction of environments whose summed reward is
identical is reported (Acrobot is chaotic: last-bit sin/cos differences grow over hundreds of
steps and flip a few terminations, under both pipelines alike).

A sweep (--sweep) runs 1 to 65,536 environments (powers of 4) for each environment.

    python benchmarks/gymnax_rollouts.py                  # 2048 envs x 500 steps + sweep
    python benchmarks/gymnax_rollouts.py --quick          # 256 envs x 100 steps, no sweep
Writes results/gymnax.json and results/gymnax_sweep.png.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
import plots

ENVS = ("CartPole-v1", "Acrobot-v1")
MORE = ("Pendulum-v1", "MountainCar-v0", "Breakout-MinAtar")
CHECK_STEPS = 10


def make_rollout(name: str, envs: int, steps: int) -> Callable[[Any], Any]:
    """gymnax's rollout of `envs` environments for `steps` steps, as its examples write it."""
    import gymnax
    import jax

    env, params = gymnax.make(name)

    def rollout(key: Any) -> Any:
        key_reset, key_loop = jax.random.split(key)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(key_reset, envs), params)

        def step(carry: Any, _: Any) -> Any:
            obs, state, key = carry
            key, key_act, key_step = jax.random.split(key, 3)
            action = jax.vmap(env.action_space(params).sample)(jax.random.split(key_act, envs))
            out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(key_step, envs), state, action, params)
            obs, state, reward = out[0], out[1], out[2]
            return (obs, state, key), reward

        (obs, _, _), rewards = jax.lax.scan(step, (obs, state, key_loop), None, length=steps)
        return obs, rewards.sum(axis=0)

    return rollout


def _leaves(x: Any) -> list[np.ndarray]:
    import jax

    return [np.asarray(v) for v in jax.tree_util.tree_leaves(x)]


def check(name: str, envs: int, pipelines: list[str]) -> dict[str, float]:
    """Max abs difference to jax.jit of every hlofuse pipeline on a short rollout."""
    import jax

    import hlofuse

    fn = make_rollout(name, envs, CHECK_STEPS)
    key = jax.random.PRNGKey(1)
    want = _leaves(jax.jit(fn)(key))
    out = {}
    for p in pipelines:
        got = _leaves(hlofuse.jit(fn, pipeline=p)(key))
        diff = max(float(np.max(np.abs(g.astype(np.float64) - w))) for g, w in
                   zip(got, want, strict=True))
        if diff > 1e-3:
            raise SystemExit(f"{name} under {p}: differs from jax.jit by {diff} after "
                             f"{CHECK_STEPS} steps")
        out[p] = diff
    return out


def measure(name: str, envs: int, steps: int, pipelines: list[str], repeat: int
            ) -> dict[str, Any]:
    """Env-steps/s of jax.jit and of hlofuse under each pipeline, one interleaved group."""
    import jax

    import hlofuse

    fn = make_rollout(name, envs, steps)
    key = jax.device_put(jax.random.PRNGKey(0))
    jitted = jax.jit(fn)
    cases: dict[str, Callable[[], Any]] = {
        "jax.jit": lambda: jax.block_until_ready(jitted(key))}
    compile_s: dict[str, float] = {}
    outputs: dict[str, list[np.ndarray]] = {"jax.jit": _leaves(jitted(key))}
    for p in pipelines:
        f = hlofuse.jit(fn, pipeline=p)
        t0 = time.perf_counter()
        outputs[p] = _leaves(f(key))
        compile_s[p] = time.perf_counter() - t0
        cases[f"hlofuse ({p})"] = lambda f=f: f(key)
    best = harness.interleaved(cases, repeat)
    rate = {k: envs * steps / v for k, v in best.items()}
    same = {p: float(np.mean(outputs[p][1] == outputs["jax.jit"][1])) for p in pipelines}
    return {"env": name, "envs": envs, "steps": steps, "seconds": best,
            "env_steps_per_s": rate,
            "ratio_to_jax": {k: rate[k] / rate["jax.jit"] for k in rate if k != "jax.jit"},
            "compile_and_first_run_s": compile_s,
            "same_reward_sum_fraction": same}


def sweep(name: str, sizes: list[int], steps: int, repeat: int) -> dict[str, Any]:
    rows = []
    for n in sizes:
        r = measure(name, n, steps, ["hlofuse"], repeat)
        rows.append({"envs": n, "env_steps_per_s": r["env_steps_per_s"],
                     "ratio_to_jax": r["ratio_to_jax"]["hlofuse (hlofuse)"]})
        print(f"  {name:<14} {n:>6} envs  jax.jit {r['env_steps_per_s']['jax.jit']:.2e}  "
              f"hlofuse {r['env_steps_per_s']['hlofuse (hlofuse)']:.2e}  "
              f"({rows[-1]['ratio_to_jax']:.2f}x)", flush=True)
    return {"env": name, "steps": steps, "rows": rows}


def plot(payload: dict[str, Any], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install 'hlofuse[bench]')")
        return None
    sweeps = payload["sweep"]
    fig, axes = plt.subplots(1, len(sweeps), figsize=(6 * len(sweeps), 4.6), squeeze=False)
    for ax, s in zip(axes[0], sweeps, strict=True):
        xs = [r["envs"] for r in s["rows"]]
        for label, key in (("jax.jit", "jax.jit"), ("hlofuse", "hlofuse (hlofuse)")):
            ax.plot(xs, [r["env_steps_per_s"][key] for r in s["rows"]], marker="o", ms=4,
                    label=label)
        plots.throughput_axes(ax, "environments", f"gymnax {s['env']}, {s['steps']} steps")
    m = payload.get("machine", {})
    fig.suptitle(f"gymnax rollouts vs batch size ({m.get('cpu', '')}, "
                 f"{m.get('cores', '?')} cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--all", action="store_true", help=f"also {', '.join(MORE)}")
    ap.add_argument("--sweep", action=argparse.BooleanOptionalAction, default=True,
                    help="batch sizes 1..65536 (default on)")
    ap.add_argument("--quick", action="store_true", help="256 envs x 100 steps, no sweep")
    ap.add_argument("--out", default="gymnax")
    args = ap.parse_args(argv)
    if args.quick:
        args.envs, args.steps, args.repeat, args.sweep = 256, 100, 3, False
    names = [*ENVS, *(MORE if args.all else ())]
    pipelines = ["xla", "hlofuse"]
    results = []
    for name in names:
        diffs = check(name, 64, pipelines)
        r = measure(name, args.envs, args.steps, pipelines, args.repeat)
        r["check_max_abs_diff"] = diffs
        results.append(r)
        rates = r["env_steps_per_s"]
        print(f"{name:<14} {args.envs} envs x {args.steps} steps: " + ", ".join(
            f"{k} {v:.2e}/s" for k, v in rates.items()) + "  ratio to jax.jit: " + ", ".join(
            f"{k} {v:.2f}x" for k, v in r["ratio_to_jax"].items()), flush=True)
    payload: dict[str, Any] = {
        "config": {"envs": args.envs, "steps": args.steps, "repeat": args.repeat},
        "results": results, "sweep": []}
    if args.sweep:
        sizes = [4 ** k for k in range(9)]
        for name in ENVS:
            payload["sweep"].append(sweep(name, sizes, args.steps, max(2, args.repeat // 2)))
    path = harness.save(args.out, payload)
    print(f"wrote {path}")
    if payload["sweep"]:
        import json

        saved = json.loads(path.read_text())
        png = plot(saved, path.with_name(f"{args.out}_sweep.png"))
        if png is not None:
            print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
