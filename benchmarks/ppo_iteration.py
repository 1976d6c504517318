"""Benchmark: one PureJaxRL PPO training iteration and its rollout phase, through
`hlofuse.jit` (pipelines `hlofuse` and `xla`) against `jax.jit` of the same functions.

The program is `thirdparty/purejaxrl.py`'s `make_ppo_train` (PureJaxRL's ppo.py line for line:
flax actor-critic, gymnax CartPole-v1, optax, distrax's categorical policy; rollout in a scan,
GAE as a reverse scan, minibatch epochs) at 2048 environments x 128 steps, 4 epochs x 4
minibatches, one update. The rollout phase is that file's `_env_step` scanned 128 steps on its
own (the policy network inside the scan, actions sampled from it, the environment stepped).

    python benchmarks/ppo_iteration.py [--envs 2048] [--steps 128] [--repeat 3]

Reports seconds, ratios to jax.jit, whether the rollout's scan became one whole-loop kernel
(and the rule that refused it otherwise), and saves results/ppo_iteration.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

PIPELINES = ("hlofuse", "xla")


def make_rollout(envs: int, steps: int) -> tuple[Any, tuple[Any, ...]]:
    """PureJaxRL's `_env_step` scanned `steps` times, and its arguments (initial network
    parameters, environment state, observations, key)."""
    import gymnax
    import jax
    import jax.numpy as jnp
    from gymnax.wrappers.purerl import FlattenObservationWrapper, LogWrapper
    from thirdparty.purejaxrl import _ppo_modules

    env, env_params = gymnax.make("CartPole-v1")
    env = LogWrapper(FlattenObservationWrapper(env))
    network = _ppo_modules()(env.action_space(env_params).n, activation="tanh")
    key = jax.random.PRNGKey(0)
    params = network.init(key, jnp.zeros(env.observation_space(env_params).shape))
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, envs),
                                                             env_params)

    def rollout(params: Any, env_state: Any, last_obs: Any, rng: Any) -> Any:
        def _env_step(runner_state: Any, unused: Any) -> Any:
            env_state, last_obs, rng = runner_state
            rng, _rng = jax.random.split(rng)
            pi, value = network.apply(params, last_obs)
            action = pi.sample(seed=_rng)
            log_prob = pi.log_prob(action)
            rng, _rng = jax.random.split(rng)
            rng_step = jax.random.split(_rng, envs)
            obsv, env_state, reward, terminated, truncated, _info = jax.vmap(
                env.step, in_axes=(0, 0, 0, None))(rng_step, env_state, action, env_params)
            done = jnp.logical_or(terminated, truncated)
            return (env_state, obsv, rng), (done, action, value, reward, log_prob, last_obs)

        return jax.lax.scan(_env_step, (env_state, last_obs, rng), None, steps)

    return rollout, (params, env_state, obs, jax.random.PRNGKey(1))


def whole_loop_events(fn: Any, args: tuple[Any, ...]) -> list[str]:
    """The whole-loop-fusion decisions of `fn` under the `hlofuse` pipeline, as explain
    writes them."""
    import hlofuse
    from hlofuse.frontends.jax import hlo_text

    text = str(hlofuse.explain(hlo_text(fn, *args), pipeline="hlofuse"))
    return [line.strip() for line in text.splitlines()
            if line.strip().startswith(("whole-loop-fusion", "hoist-loop-reductions"))]


def measure(name: str, fn: Any, args: tuple[Any, ...], repeat: int) -> dict[str, Any]:
    import jax

    import hlofuse

    jitted = jax.jit(fn)
    dev = jax.device_put(args)
    jax.block_until_ready(jitted(*dev))
    cases = {"jax.jit": lambda: jax.block_until_ready(jitted(*dev))}
    for p in PIPELINES:
        f = hlofuse.jit(fn, pipeline=p)
        jax.block_until_ready(f(*dev))
        cases[f"hlofuse ({p})"] = lambda f=f: jax.block_until_ready(f(*dev))
    best = harness.interleaved(cases, repeat)
    return {"program": name, "seconds": best,
            "ratio_to_jax": {k: best["jax.jit"] / v for k, v in best.items() if k != "jax.jit"},
            "whole_loop": whole_loop_events(fn, args)}


def main(argv: list[str] | None = None) -> int:
    import jax
    from thirdparty.purejaxrl import make_ppo_train, ppo_config

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--envs", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="ppo_iteration")
    ns = ap.parse_args(argv)
    rollout, r_args = make_rollout(ns.envs, ns.steps)
    train = make_ppo_train(ppo_config(ns.envs, ns.steps, 1, 4, 4))
    rows = [measure("rollout", rollout, r_args, ns.repeat),
            measure("iteration", train, (jax.random.PRNGKey(30),), ns.repeat)]
    for r in rows:
        ratios = ", ".join(f"{k} {v:.2f}x" for k, v in r["ratio_to_jax"].items())
        print(f"{r['program']:<10} jax.jit {r['seconds']['jax.jit'] * 1e3:.1f} ms; {ratios}")
        for line in r["whole_loop"]:
            print(f"    {line[:220]}")
    path = harness.save(ns.out, {"config": vars(ns), "rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
