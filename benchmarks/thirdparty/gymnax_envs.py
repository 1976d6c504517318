"""gymnax environments of every family (classic control, bsuite, MinAtar, misc), each rolled
out the way gymnax's README and `getting_started` notebook write it: `jax.vmap` of
`env.reset` / `env.step` over the environments inside `lax.scan`, the key split every step,
random actions from `env.action_space(params).sample`, gymnax's auto-reset inside `env.step`.

    rollout(key) -> (final observations, per-step rewards summed over time, episode ends)
"""

from __future__ import annotations

from typing import Any

from .common import Case, Program


def make_rollout(name: str, envs: int, steps: int) -> Any:
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
            obs, state, reward, terminated, truncated, _ = jax.vmap(
                env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(key_step, envs), state, action, params)
            return (obs, state, key), (reward, terminated | truncated)

        (obs, _, _), (rewards, dones) = jax.lax.scan(step, (obs, state, key_loop), None,
                                                     length=steps)
        return obs, rewards.sum(axis=0), dones.sum(axis=0)

    return rollout


def _case(name: str, small: bool, envs: int, steps: int) -> Case:
    import jax

    envs, steps = (8, 10) if small else (envs, steps)
    return Case(make_rollout(name, envs, steps), (jax.random.PRNGKey(7),),
                f"{envs} envs x {steps} steps")


def _env(name: str, family: str, envs: int, steps: int, **kw: Any) -> Program:
    return Program(f"gymnax-{name}", f"gymnax ({family})", "gymnax README: vmap(env.step) in "
                   "lax.scan", lambda small: _case(name, small, envs, steps), **kw)


PROGRAMS = [
    _env("CartPole-v1", "classic control", 2048, 200),
    _env("Pendulum-v1", "classic control", 2048, 200, rtol=1e-3, atol=1e-4, chaotic=True),
    _env("Acrobot-v1", "classic control", 1024, 100, rtol=1e-3, atol=1e-4, chaotic=True),
    _env("MountainCar-v0", "classic control", 2048, 200),
    _env("Catch-bsuite", "bsuite", 1024, 100),
    _env("DeepSea-bsuite", "bsuite", 1024, 100),
    _env("MemoryChain-bsuite", "bsuite", 1024, 100),
    _env("Breakout-MinAtar", "MinAtar", 512, 100),
    _env("Asterix-MinAtar", "MinAtar", 256, 50),
    _env("Freeway-MinAtar", "MinAtar", 256, 50),
    _env("SpaceInvaders-MinAtar", "MinAtar", 256, 50),
    _env("FourRooms-misc", "misc", 1024, 100),
]
