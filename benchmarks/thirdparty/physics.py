"""Rigid-body physics: brax's environments under each of its pipelines, and MuJoCo MJX's `step`.

brax, as its README and training notebook run an environment: `envs.get_environment(name,
backend=...)`, `jax.vmap(env.reset)` over keys, then `jax.vmap(env.step)` inside `lax.scan`
with actions the policy would give (here a fixed sinusoid of the step, so both compilers see the
same inputs):

    rollout(key) -> (final pipeline state q and qd, summed rewards)

MJX, as its tutorial does: `mjx.put_model(mj_model)`, `mjx.put_data`, a batch of data made by
`jax.vmap` over perturbed `qpos`, and `jax.vmap(mjx.step, in_axes=(None, 0))` for a few steps
in `lax.scan`; also with the conjugate-gradient solver and sparse Jacobians
(`opt.solver = mjSOL_CG`, `opt.jacobian = mjJAC_SPARSE`).

Contact dynamics are chaotic: last-bit differences grow; the small size is the short horizon.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import Case, Program


def make_brax_rollout(name: str, backend: str, envs: int, steps: int) -> Any:
    import jax
    import jax.numpy as jnp
    from brax import envs as brax_envs

    env = brax_envs.get_environment(name, backend=backend)

    def rollout(key: Any) -> Any:
        state = jax.vmap(env.reset)(jax.random.split(key, envs))

        def step(state: Any, t: Any) -> Any:
            phase = jnp.arange(env.action_size, dtype=jnp.float32)
            action = jnp.broadcast_to(jnp.sin(0.1 * t + phase), (envs, env.action_size))
            state = jax.vmap(env.step)(state, action)
            return state, state.reward

        state, rewards = jax.lax.scan(step, state, jnp.arange(steps, dtype=jnp.float32))
        return state.pipeline_state.q, state.pipeline_state.qd, rewards.sum(0)

    return rollout


def _brax(name: str, backend: str, envs: int, steps: int) -> Any:
    def build(small: bool) -> Case:
        import jax

        e, s = (4, 5) if small else (envs, steps)
        return Case(make_brax_rollout(name, backend, e, s), (jax.random.PRNGKey(3),),
                    f"{e} envs x {s} steps")
    return build


def _mjx_model(path: str, solver: str | None = None, sparse: bool = False) -> Any:
    import mujoco

    m = mujoco.MjModel.from_xml_path(path)
    if solver == "CG":
        m.opt.solver = mujoco.mjtSolver.mjSOL_CG
    if sparse:
        m.opt.jacobian = mujoco.mjtJacobian.mjJAC_SPARSE
    return m


def make_mjx_rollout(m: Any, batch: int, steps: int) -> tuple[Any, tuple[Any, ...]]:
    import jax
    import mujoco
    from mujoco import mjx

    mx = mjx.put_model(m)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    dx = mjx.put_data(m, d)
    noise = jax.random.uniform(jax.random.PRNGKey(0), (batch, m.nq), minval=-0.01, maxval=0.01)

    def rollout(mx: Any, dx: Any, noise: Any) -> Any:
        batch_d = jax.vmap(lambda n: dx.replace(qpos=dx.qpos + n))(noise)

        def step(d: Any, _: Any) -> Any:
            return jax.vmap(mjx.step, in_axes=(None, 0))(mx, d), None

        d, _ = jax.lax.scan(step, batch_d, None, length=steps)
        return d.qpos, d.qvel

    return rollout, (mx, dx, noise)


def _mjx(xml: str, solver: str | None, sparse: bool, batch: int, steps: int) -> Any:
    def build(small: bool) -> Case:
        from mujoco import mjx

        b, s = (2, 3) if small else (batch, steps)
        path = str(Path(mjx.__file__).parent / "test_data" / xml)
        fn, args = make_mjx_rollout(_mjx_model(path, solver, sparse), b, s)
        return Case(fn, args, f"{b} worlds x {s} steps")
    return build


_BRAX = "brax README / training notebook: vmap(env.step) in lax.scan"
_MJX = "MJX tutorial: vmap(mjx.step, in_axes=(None, 0))"
PROGRAMS = [
    Program("brax-ant-positional", "brax (positional)", _BRAX,
            _brax("ant", "positional", 64, 50), rtol=1e-3, atol=1e-4, chaotic=True),
    Program("brax-inverted_pendulum-generalized", "brax (generalized)", _BRAX,
            _brax("inverted_pendulum", "generalized", 256, 50), rtol=1e-3, atol=1e-4,
            chaotic=True),
    Program("brax-ant-spring", "brax (spring)", _BRAX, _brax("ant", "spring", 64, 50),
            rtol=1e-3, atol=1e-4, chaotic=True),
    Program("brax-hopper-mjx", "brax (mjx)", _BRAX, _brax("hopper", "mjx", 64, 20),
            rtol=1e-3, atol=1e-4, chaotic=True),
    Program("mjx-humanoid", "mujoco-mjx", _MJX, _mjx("humanoid/humanoid.xml", None, False, 16, 5),
            rtol=1e-3, atol=1e-4, chaotic=True),
    Program("mjx-humanoid-cg-sparse", "mujoco-mjx", _MJX + ", CG solver, sparse Jacobian",
            _mjx("humanoid/humanoid.xml", "CG", True, 16, 5), rtol=1e-3, atol=1e-4,
            chaotic=True),
]
