"""Generates tests/hlo/whole_loop_grid.hlo: a MinAtar-like scan (jax.vmap of a step inside
lax.scan) whose per-element state is a 10 x 10 grid."""
from pathlib import Path

import jax
import jax.numpy as jnp

N, S = 300, 7
table = jnp.array([3, 1, 4, 1, 5, 9, 2, 6], jnp.int32)

def env_step(s, t):
    pos, grid, obs = s
    hit = grid[pos % 10, (pos // 10) % 10]                  # read at a position of its own
    grid = grid.at[pos % 10, (pos * 3) % 10].set(0.0)       # one point per element
    grid = grid.at[2:4, :].add(0.5)                         # rows 2..3, a constant start
    grid = jnp.where(grid.sum() > 60.0, grid * 0.5, grid)   # a reduce over the 100 cells
    obs = jnp.zeros((10, 10, 2), bool).at[pos % 10, (pos + 1) % 10, 0].set(True)
    obs = obs.at[:, :, 1].set(grid > 1.0)                   # never read: only the last counts
    pos = pos + table[(pos + t) % 8] + (hit > 0.7).astype(jnp.int32)
    return pos, grid, obs

def rollout(pos, grid, obs):
    def step(c, t):
        return jax.vmap(env_step, in_axes=(0, None))(c, t), None
    return jax.lax.scan(step, (pos, grid, obs), jnp.arange(S, dtype=jnp.int32))[0]

args = (jnp.zeros(N, jnp.int32), jnp.zeros((N, 10, 10)), jnp.zeros((N, 10, 10, 2), bool))
text = jax.jit(rollout).lower(*args).as_text(dialect="hlo")
(Path(__file__).parent / "whole_loop_grid.hlo").write_text(text)
