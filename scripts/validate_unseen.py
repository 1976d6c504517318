"""Check hlofuse on real JAX programs that the test suite does not contain.

For each program: lower with JAX, parse, check the print/parse round trip, run the reference
interpreter (raw and after `simplify`) and compare with jax.jit; then compile it on the cpu
backend under `none`, `xla` and `xla-relaxed` (when a C compiler exists) and compare with the
interpreter. Prints one line per program and a summary; exits non-zero on any failure.
Usage: python scripts/validate_unseen.py
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import hlofuse
from hlofuse.backends import cpu, interpreter
from hlofuse.ir.equality import module_diff
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse, print_module

RNG = np.random.default_rng(1234)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# --- RL environments -------------------------------------------------------------------------

def pendulum_rollout(th, thdot, key):
    """Gym Pendulum-v1, batched, random torques from threefry inside the scan."""
    def step(carry, _):
        th, thdot, key = carry
        key, sub = jax.random.split(key)
        u = jax.random.uniform(sub, th.shape, minval=-2.0, maxval=2.0)
        norm = ((th + jnp.pi) % (2 * jnp.pi)) - jnp.pi
        cost = norm**2 + 0.1 * thdot**2 + 0.001 * u**2
        thdot = jnp.clip(thdot + (3 * 10.0 / 2 * jnp.sin(th) + 3.0 * u) * 0.05, -8, 8)
        th = th + thdot * 0.05
        return (th, thdot, key), -cost
    (th, thdot, _), rewards = lax.scan(step, (th, thdot, key), None, length=12)
    return th, thdot, rewards.sum(0)


def acrobot_rk4(s, a):
    """Acrobot dynamics integrated with RK4 inside a fori_loop."""
    def dsdt(s):
        t1, t2, d1, d2 = s[0], s[1], s[2], s[3]
        d11 = 1.0 + 1.0 * (0.25 + 1.0 + 2 * 0.5 * jnp.cos(t2)) + 2.0
        d22 = 1.0 * 0.25 + 1.0
        phi2 = 1.0 * 0.5 * 9.8 * jnp.cos(t1 + t2 - jnp.pi / 2)
        dd2 = (a + d22 / d11 * phi2 - phi2) / (d22 - d22**2 / d11)
        dd1 = -(d22 * dd2 + phi2) / d11
        return jnp.stack([d1, d2, dd1, dd2])
    def rk4(_, s):
        k1 = dsdt(s)
        k2 = dsdt(s + 0.1 * k1)
        k3 = dsdt(s + 0.1 * k2)
        k4 = dsdt(s + 0.2 * k3)
        return s + 0.2 / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    s = lax.fori_loop(0, 5, rk4, s)
    wrapped = jnp.where(s[:2] > jnp.pi, s[:2] - 2 * jnp.pi, s[:2])
    return s, wrapped, jnp.argmax(jnp.abs(s), axis=0)


def gridworld_step(pos, actions, walls):
    """A batched gridworld: integer moves, clipping, wall lookup by gather, one-hot rewards."""
    moves = jnp.array([[0, 1], [1, 0], [0, -1], [-1, 0]], dtype=jnp.int32)
    new = jnp.clip(pos + moves[actions], 0, 7)
    blocked = walls[new[:, 0], new[:, 1]]
    pos = jnp.where(blocked[:, None], pos, new)
    reward = (pos[:, 0] == 7) & (pos[:, 1] == 7)
    visits = jnp.zeros((8, 8), jnp.int32).at[pos[:, 0], pos[:, 1]].add(1)
    return pos, reward.astype(jnp.float32), visits


# --- training steps --------------------------------------------------------------------------

def mlp_adam_step(w1, b1, w2, b2, m1, v1, x, y, step):
    """Two-layer MLP, softmax cross-entropy, Adam on the first layer's weights."""
    def loss(w1, b1, w2, b2):
        h = jax.nn.gelu(x @ w1 + b1)
        logits = h @ w2 + b2
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))
    loss_value, (g1, gb1, g2, gb2) = jax.value_and_grad(loss, argnums=(0, 1, 2, 3))(w1, b1, w2, b2)
    m1 = 0.9 * m1 + 0.1 * g1
    v1 = 0.999 * v1 + 0.001 * g1**2
    mhat = m1 / (1 - 0.9**step)
    vhat = v1 / (1 - 0.999**step)
    w1 = w1 - 1e-3 * mhat / (jnp.sqrt(vhat) + 1e-8)
    return loss_value, w1, b1 - 1e-3 * gb1, w2 - 1e-3 * g2, b2 - 1e-3 * gb2, m1, v1


def gru_rollout(h0, xs, wz, wr, wh):
    def cell(h, x):
        hx = jnp.concatenate([h, x], axis=-1)
        z = jax.nn.sigmoid(hx @ wz)
        r = jax.nn.sigmoid(hx @ wr)
        hh = jnp.tanh(jnp.concatenate([r * h, x], axis=-1) @ wh)
        h = (1 - z) * h + z * hh
        return h, h.mean(-1)
    return lax.scan(cell, h0, xs)


def ppo_loss(logits, actions, adv, old_logp, key):
    logp_all = jax.nn.log_softmax(logits)
    logp = jnp.take_along_axis(logp_all, actions[:, None], axis=1)[:, 0]
    ratio = jnp.exp(logp - old_logp)
    clipped = jnp.clip(ratio, 0.8, 1.2)
    entropy = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1).mean()
    sampled = jax.random.categorical(key, logits)
    loss = -jnp.minimum(ratio * adv, clipped * adv).mean() - 0.01 * entropy
    return loss, sampled, jnp.sort(ratio)[::-1][:4]


def kmeans_step(points, centroids):
    d = jnp.sum((points[:, None, :] - centroids[None, :, :]) ** 2, axis=-1)
    assign = jnp.argmin(d, axis=1)
    onehot = jax.nn.one_hot(assign, centroids.shape[0])
    sums = onehot.T @ points
    counts = onehot.sum(0)[:, None]
    return jnp.where(counts > 0, sums / jnp.maximum(counts, 1), centroids), assign


def conv_net(x, k, b):
    y = lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = jax.nn.relu(y + b)
    return lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def key_data(seed: int) -> np.ndarray:
    return np.asarray(jax.random.key_data(jax.random.PRNGKey(seed)))


def _keyed(fn: Callable) -> Callable:
    def wrapped(*args):
        *rest, k = args
        return fn(*rest, jax.random.wrap_key_data(k))
    wrapped.__name__ = fn.__name__
    return wrapped


PROGRAMS: list[tuple[str, Callable, tuple]] = [
    ("pendulum_rollout", _keyed(pendulum_rollout), (f32(64), f32(64), key_data(0))),
    ("acrobot_rk4", acrobot_rk4, (f32(4, 32) * 0.1, f32(32))),
    ("gridworld_step", gridworld_step,
     (RNG.integers(0, 8, (50, 2)).astype(np.int32), RNG.integers(0, 4, 50).astype(np.int32),
      RNG.random((8, 8)) < 0.2)),
    ("mlp_adam_step", mlp_adam_step,
     (f32(16, 32) * 0.1, f32(32) * 0.1, f32(32, 10) * 0.1, f32(10) * 0.1, f32(16, 32) * 0.01,
      np.abs(f32(16, 32)) * 0.01, f32(8, 16), np.eye(10, dtype=np.float32)[RNG.integers(0, 10, 8)],
      np.float32(3.0))),
    ("gru_rollout", gru_rollout,
     (f32(4, 8), f32(6, 4, 3), f32(11, 8) * 0.3, f32(11, 8) * 0.3, f32(11, 8) * 0.3)),
    ("ppo_loss", _keyed(ppo_loss),
     (f32(32, 6), RNG.integers(0, 6, 32).astype(np.int32), f32(32), f32(32) - 2.0, key_data(7))),
    ("kmeans_step", kmeans_step, (f32(40, 3), f32(5, 3))),
    ("conv_net", conv_net, (f32(2, 8, 8, 3), f32(3, 3, 3, 4) * 0.3, f32(4) * 0.1)),
]


def compare(name: str, got: list[np.ndarray], want: list[np.ndarray]) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} outputs vs {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        w = np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"out_{i}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if w.dtype.kind in "biu":
            if not np.array_equal(g, w):
                return f"out_{i}: integer mismatch"
        elif not np.allclose(g, w, rtol=2e-5, atol=2e-5, equal_nan=True):
            err = np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))
            return f"out_{i}: max abs error {err:.3g}"
    return None


def main() -> int:
    failures = 0
    ops: set[str] = set()
    for name, fn, args in PROGRAMS:
        t0 = time.perf_counter()
        try:
            module = hlofuse.from_jax(fn, *args)
            text = print_module(module)
            again = parse(text)
            diff = module_diff(module, again)
            if diff is not None or print_module(again) != text:
                raise AssertionError(f"round trip: {diff}")
            ops |= {i.opcode.value for i in module.all_instructions()}
            want = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
            n_raw = sum(len(c.instructions) for c in module.computations)
            got = interpreter.run(module, *args)
            problem = compare(name, got, want)
            run_pipeline(module, "simplify", verify=True)
            n_opt = sum(len(c.instructions) for c in module.computations)
            reference = interpreter.run(module, *args)
            problem = problem or compare(name, reference, want)
            if cpu.available():
                for pipeline in ("none", "xla", "xla-relaxed"):
                    exe = hlofuse.compile(text, pipeline=pipeline, backend="cpu")
                    bad = compare(name, list(exe(*args)), reference)
                    problem = problem or (f"cpu {pipeline}: {bad}" if bad else None)
        except Exception as exc:
            problem = f"{type(exc).__name__}: {exc}"
            n_raw = n_opt = 0
        dt = time.perf_counter() - t0
        status = "ok  " if problem is None else "FAIL"
        failures += problem is not None
        print(f"{status} {name:20s} {n_raw:5d} -> {n_opt:5d} instrs  {dt:5.2f}s"
              + (f"  {problem}" if problem else ""))
    backends = "interpreter and cpu backend (none/xla/xla-relaxed)" if cpu.available() \
        else "interpreter (no C compiler: cpu backend not checked)"
    print(f"\n{len(PROGRAMS) - failures}/{len(PROGRAMS)} unseen programs match jax.jit on the "
          f"{backends}; {len(ops)} distinct opcodes exercised")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
