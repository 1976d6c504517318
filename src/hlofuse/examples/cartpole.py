"""The paper's CartPole case study, written in JAX (and once in plain numpy).

Gym CartPole-v1 physics (Euler integration), batched over ``num_envs`` environments and stepped
``steps`` times inside ``lax.scan``.  Four variants follow the study's optimisation steps (see
``docs``/``paper.md``, "The case study: CartPole"):

``baseline``
    As the study wrote it: threefry RNG (``jax.random``) *inside* the scan for the actions and for
    the fresh states of finished episodes; the state is one ``[4, N]`` array rebuilt every step
    with ``jnp.stack`` (a concatenate in HLO).
``precomputed``
    Step 1: the random numbers (actions and reset states) are drawn before the loop and fed to the
    scan as ``xs``; the state is still one stacked ``[4, N]`` array.
``separate``
    Step 3: precomputed randomness *and* four separate state arrays ``x, x_dot, theta, theta_dot``;
    no stack/concatenate anywhere.
``unrolled``
    Step 4: ``separate`` with ``lax.scan(..., unroll=10)``.

``make(variant, num_envs, steps)`` returns ``(fn, args)``: a pure function of positional arrays and
deterministic example arguments (numpy arrays; PRNG keys as raw ``uint32[2]`` threefry key data),
so ``jax.jit(fn).lower(*args)`` gives an HLO entry computation that takes plain arrays.

By default the precomputed variants take their random numbers as arguments (``randoms="args"``),
so their HLO contains no RNG at all and :func:`numpy_rollout` can run on the very same arguments.
With ``randoms="key"`` they instead take ``uint32[2]`` key data and draw every random number with
``jax.random`` *before* the scan, as the study's step 1 did.

This module imports jax; it is used only by the frontend, the benchmarks and the tests, never by
hlofuse's core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

# Gym CartPole-v1 constants.
GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART  # 1.1
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH  # 0.05
FORCE_MAG = 10.0
TAU = 0.02  # seconds between state updates
THETA_THRESHOLD_RADIANS = 12 * 2 * np.pi / 360  # 0.2094395...
X_THRESHOLD = 2.4
RESET_LOW = -0.05
RESET_HIGH = 0.05

VARIANTS: tuple[str, ...] = ("baseline", "precomputed", "separate", "unrolled")
UNROLL = 10

Args = tuple[Any, ...]


# ---------------------------------------------------------------------------------------------
# JAX implementation
# ---------------------------------------------------------------------------------------------


def _dynamics_parts(x: Any, x_dot: Any, theta: Any, theta_dot: Any, action: Any) -> tuple:
    """One Euler step of the cart-pole; works on jax arrays (and numpy arrays, see below)."""
    import jax.numpy as jnp

    force = jnp.where(action == 1, FORCE_MAG, -FORCE_MAG).astype(x.dtype)
    costheta = jnp.cos(theta)
    sintheta = jnp.sin(theta)
    temp = (force + POLEMASS_LENGTH * theta_dot**2 * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        (4.0 / 3.0 - MASSPOLE * costheta**2 / TOTAL_MASS) * LENGTH
    )
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    return (
        x + TAU * x_dot,
        x_dot + TAU * xacc,
        theta + TAU * theta_dot,
        theta_dot + TAU * thetaacc,
    )


def _done(x: Any, theta: Any) -> Any:
    import jax.numpy as jnp

    return jnp.where((jnp.abs(x) > X_THRESHOLD) | (jnp.abs(theta) > THETA_THRESHOLD_RADIANS), 1, 0)


def _stacked_step(state: Any, action: Any, reset_state: Any) -> tuple[Any, Any, Any]:
    """The study's step on a stacked ``[4, N]`` state: dynamics, done, reset_some, reward."""
    import jax.numpy as jnp

    x, x_dot, theta, theta_dot = state
    state = jnp.stack(_dynamics_parts(x, x_dot, theta, theta_dot, action))
    x, _, theta, _ = state
    done = _done(x, theta)
    state = jnp.where(done[None, :] == 1, reset_state, state)  # reset_some(done)
    reward = jnp.ones(done.shape, state.dtype)
    return state, reward, done


def _baseline(num_envs: int, steps: int) -> Callable[..., tuple]:
    import jax
    import jax.numpy as jnp
    from jax import lax

    def rollout(state: Any, key_data: Any) -> tuple:
        key = jax.random.wrap_key_data(key_data)

        def body(carry: tuple, _: Any) -> tuple[tuple, None]:
            state, key, total_reward, episodes = carry
            key, k_action, k_reset = jax.random.split(key, 3)
            action = jax.random.bernoulli(k_action, 0.5, (num_envs,)).astype(jnp.int32)
            reset_state = jax.random.uniform(
                k_reset, (4, num_envs), jnp.float32, RESET_LOW, RESET_HIGH
            )
            state, reward, done = _stacked_step(state, action, reset_state)
            return (state, key, total_reward + reward, episodes + done), None

        init = (
            state,
            key,
            jnp.zeros((num_envs,), jnp.float32),
            jnp.zeros((num_envs,), jnp.int32),
        )
        (state, _, total_reward, episodes), _ = lax.scan(body, init, None, length=steps)
        return state, total_reward, episodes

    return rollout


def _precomputed_randoms(key_data: Any, num_envs: int, steps: int) -> tuple[Any, Any]:
    """Draws all actions ``[steps, N]`` and reset states ``[steps, 4, N]`` with jax.random."""
    import jax
    import jax.numpy as jnp

    key = jax.random.wrap_key_data(key_data)
    k_action, k_reset = jax.random.split(key)
    actions = jax.random.bernoulli(k_action, 0.5, (steps, num_envs)).astype(jnp.int32)
    resets = jax.random.uniform(k_reset, (steps, 4, num_envs), jnp.float32, RESET_LOW, RESET_HIGH)
    return actions, resets


def _precomputed(num_envs: int, steps: int, randoms: str) -> Callable[..., tuple]:
    import jax.numpy as jnp
    from jax import lax

    def run(state: Any, actions: Any, resets: Any) -> tuple:
        def body(carry: tuple, xs: tuple) -> tuple[tuple, None]:
            state, total_reward, episodes = carry
            action, reset_state = xs
            state, reward, done = _stacked_step(state, action, reset_state)
            return (state, total_reward + reward, episodes + done), None

        init = (state, jnp.zeros((num_envs,), jnp.float32), jnp.zeros((num_envs,), jnp.int32))
        (state, total_reward, episodes), _ = lax.scan(body, init, (actions, resets))
        return state, total_reward, episodes

    if randoms == "args":
        return run

    def rollout(state: Any, key_data: Any) -> tuple:
        actions, resets = _precomputed_randoms(key_data, num_envs, steps)
        return run(state, actions, resets)

    return rollout


def _separate(num_envs: int, steps: int, randoms: str, unroll: int) -> Callable[..., tuple]:
    import jax.numpy as jnp
    from jax import lax

    def run(
        x: Any,
        x_dot: Any,
        theta: Any,
        theta_dot: Any,
        actions: Any,
        reset_x: Any,
        reset_x_dot: Any,
        reset_theta: Any,
        reset_theta_dot: Any,
    ) -> tuple:
        def body(carry: tuple, xs: tuple) -> tuple[tuple, None]:
            x, x_dot, theta, theta_dot, total_reward, episodes = carry
            action, r_x, r_x_dot, r_theta, r_theta_dot = xs
            x, x_dot, theta, theta_dot = _dynamics_parts(x, x_dot, theta, theta_dot, action)
            done = _done(x, theta)
            reset = done == 1
            x = jnp.where(reset, r_x, x)
            x_dot = jnp.where(reset, r_x_dot, x_dot)
            theta = jnp.where(reset, r_theta, theta)
            theta_dot = jnp.where(reset, r_theta_dot, theta_dot)
            reward = jnp.ones(done.shape, x.dtype)
            carry = (x, x_dot, theta, theta_dot, total_reward + reward, episodes + done)
            return carry, None

        init = (
            x,
            x_dot,
            theta,
            theta_dot,
            jnp.zeros((num_envs,), jnp.float32),
            jnp.zeros((num_envs,), jnp.int32),
        )
        xs = (actions, reset_x, reset_x_dot, reset_theta, reset_theta_dot)
        carry, _ = lax.scan(body, init, xs, unroll=unroll)
        return carry

    if randoms == "args":
        return run

    def rollout(x: Any, x_dot: Any, theta: Any, theta_dot: Any, key_data: Any) -> tuple:
        actions, resets = _precomputed_randoms(key_data, num_envs, steps)
        return run(
            x,
            x_dot,
            theta,
            theta_dot,
            actions,
            resets[:, 0],
            resets[:, 1],
            resets[:, 2],
            resets[:, 3],
        )

    return rollout


# The layouts RL code stores state and precomputed resets in (issue: the main kernel must
# vectorize in all of them). State: four [N] arrays, one [N, 4] array, one [4, N] array; resets:
# four [S, N] arrays, one [S, N, 4] array, one [S, 4, N] array.
STATE_LAYOUTS: tuple[str, ...] = ("four", "n4", "4n")
RESET_LAYOUTS: tuple[str, ...] = ("four", "sn4", "s4n")
STEP_OUTPUTS: tuple[str, ...] = ("none", "scalar", "env")


def _layout(num_envs: int, steps: int, state_layout: str, reset_layout: str, ys: str = "none"
            ) -> Callable[..., tuple]:
    import jax.numpy as jnp
    from jax import lax

    def split_state(state: tuple) -> tuple:
        if state_layout == "four":
            return state
        (s,) = state
        return tuple(s[:, k] for k in range(4)) if state_layout == "n4" else tuple(s)

    def join_state(parts: tuple) -> tuple:
        if state_layout == "four":
            return parts
        return (jnp.stack(parts, axis=1 if state_layout == "n4" else 0),)

    def split_reset(r: tuple) -> tuple:
        if reset_layout == "four":
            return r
        (rs,) = r
        return tuple(rs[:, k] for k in range(4)) if reset_layout == "sn4" else tuple(rs)

    def run(*args: Any) -> tuple:
        n_state = 4 if state_layout == "four" else 1
        state = tuple(args[:n_state])
        actions = args[n_state]
        resets = tuple(args[n_state + 1:])

        def body(carry: tuple, xs: tuple) -> tuple[tuple, Any]:
            state, total_reward, episodes = carry
            action, reset = xs
            x, x_dot, theta, theta_dot = split_state(state)
            x, x_dot, theta, theta_dot = _dynamics_parts(x, x_dot, theta, theta_dot, action)
            done = _done(x, theta)
            reset_now = done == 1
            fresh = split_reset(reset)
            parts = tuple(jnp.where(reset_now, r, v)
                          for r, v in zip(fresh, (x, x_dot, theta, theta_dot), strict=True))
            reward = jnp.ones(done.shape, x.dtype)
            out = {"none": None, "scalar": jnp.sum(done.astype(x.dtype)), "env": parts[0]}[ys]
            return (join_state(parts), total_reward + reward, episodes + done), out

        init = (state, jnp.zeros((num_envs,), jnp.float32), jnp.zeros((num_envs,), jnp.int32))
        (state, total_reward, episodes), out = lax.scan(body, init, (actions, resets))
        return (*state, total_reward, episodes) + (() if out is None else (out,))

    return run


def make_layout(state_layout: str, reset_layout: str, num_envs: int = 2048, steps: int = 100,
                seed: int = 0, ys: str = "none") -> tuple[Callable[..., tuple], Args]:
    """The ``separate`` variant's physics with the state held as ``state_layout`` (four [N]
    arrays, ``n4`` = one [N, 4] array, ``4n`` = one [4, N] array) and the precomputed resets as
    ``reset_layout`` (four [S, N] arrays, ``sn4`` = one [S, N, 4] array read as ``rst[:, k]``,
    ``s4n`` = one [S, 4, N] array). Returns ``(fn, args)`` like `make`; the outputs are the final
    state (in its layout), total_reward and episodes, then the scan's per-step output ``ys``:
    ``none``, ``scalar`` (the number of environments reset that step: a sum over the batch, as
    code that logs one number per step) or ``env`` (every environment's x: ``[S, N]``)."""
    if state_layout not in STATE_LAYOUTS or reset_layout not in RESET_LAYOUTS or \
            ys not in STEP_OUTPUTS:
        raise KeyError(f"unknown layout {state_layout!r}/{reset_layout!r}/{ys!r}")
    state = initial_state(num_envs, seed)
    actions, resets = random_inputs(num_envs, steps, seed + 1)
    state_args: Args = {
        "four": tuple(np.ascontiguousarray(state[i]) for i in range(4)),
        "n4": (np.ascontiguousarray(state.T),),
        "4n": (state,),
    }[state_layout]
    reset_args: Args = {
        "four": tuple(np.ascontiguousarray(resets[:, i]) for i in range(4)),
        "sn4": (np.ascontiguousarray(resets.transpose(0, 2, 1)),),
        "s4n": (resets,),
    }[reset_layout]
    fn = _layout(num_envs, steps, state_layout, reset_layout, ys)
    name = f"cartpole_state_{state_layout}_resets_{reset_layout}" + \
        ("" if ys == "none" else f"_ys_{ys}")
    fn.__name__ = fn.__qualname__ = name
    return fn, (*state_args, actions, *reset_args)


# ---------------------------------------------------------------------------------------------
# Example arguments
# ---------------------------------------------------------------------------------------------


def initial_state(num_envs: int, seed: int = 0) -> np.ndarray:
    """Gym's reset: every state variable uniform in [-0.05, 0.05); shape ``[4, N]`` float32."""
    rng = np.random.default_rng(seed)
    return rng.uniform(RESET_LOW, RESET_HIGH, size=(4, num_envs)).astype(np.float32)


def random_inputs(num_envs: int, steps: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Precomputed randomness drawn with numpy: actions ``int32[steps, N]`` in {0, 1} and reset
    states ``float32[steps, 4, N]`` uniform in [-0.05, 0.05)."""
    rng = np.random.default_rng(seed)
    actions = rng.integers(0, 2, size=(steps, num_envs)).astype(np.int32)
    resets = rng.uniform(RESET_LOW, RESET_HIGH, size=(steps, 4, num_envs)).astype(np.float32)
    return actions, resets


def key_data(seed: int = 0) -> np.ndarray:
    """Raw threefry key data, as ``jax.random.key_data(jax.random.PRNGKey(seed))`` would give."""
    return np.array([0, seed], dtype=np.uint32)


def make(
    variant: str,
    num_envs: int = 2048,
    steps: int = 100,
    *,
    randoms: str = "args",
    seed: int = 0,
) -> tuple[Callable[..., tuple], Args]:
    """Builds one CartPole rollout variant.

    Returns ``(fn, args)``; ``fn(*args)`` runs ``steps`` steps of ``num_envs`` environments and
    returns the final state then ``total_reward`` (float32[N], the sum of per-step rewards) and
    ``episodes`` (int32[N], how many episodes ended, i.e. how many resets happened).

    Signatures (N = num_envs, S = steps):

    * ``baseline``: ``(state f32[4,N], key_data u32[2]) -> (state, total_reward, episodes)``
    * ``precomputed``: ``(state f32[4,N], actions s32[S,N], resets f32[S,4,N])
      -> (state, total_reward, episodes)``; with ``randoms="key"``: ``(state, key_data)``
    * ``separate`` / ``unrolled``: ``(x, x_dot, theta, theta_dot, actions s32[S,N],
      reset_x, reset_x_dot, reset_theta, reset_theta_dot (each f32[S,N]))
      -> (x, x_dot, theta, theta_dot, total_reward, episodes)``; with ``randoms="key"``:
      ``(x, x_dot, theta, theta_dot, key_data)``
    """
    if variant not in VARIANTS:
        raise KeyError(f"unknown CartPole variant {variant!r}; valid: {', '.join(VARIANTS)}")
    if randoms not in ("args", "key"):
        raise ValueError(f"randoms must be 'args' or 'key', not {randoms!r}")
    if num_envs < 1 or steps < 1:
        raise ValueError("num_envs and steps must be positive")

    state = initial_state(num_envs, seed)
    if variant == "baseline":
        return _named(_baseline(num_envs, steps), variant, randoms), (state, key_data(seed))

    if randoms == "key":
        rand_args: Args = (key_data(seed),)
    else:
        actions, resets = random_inputs(num_envs, steps, seed + 1)
        if variant == "precomputed":
            rand_args = (actions, resets)
        else:
            rand_args = (actions, *(np.ascontiguousarray(resets[:, i]) for i in range(4)))

    if variant == "precomputed":
        return _named(_precomputed(num_envs, steps, randoms), variant, randoms), (state, *rand_args)
    unroll = UNROLL if variant == "unrolled" else 1
    fn = _named(_separate(num_envs, steps, randoms, unroll), variant, randoms)
    return fn, (*(np.ascontiguousarray(state[i]) for i in range(4)), *rand_args)


def _named(fn: Callable[..., tuple], variant: str, randoms: str) -> Callable[..., tuple]:
    """Names the rollout after its variant, so the HLO module is ``jit_cartpole_<variant>``."""
    name = f"cartpole_{variant}" + ("_rng" if randoms == "key" and variant != "baseline" else "")
    fn.__name__ = name
    fn.__qualname__ = name
    return fn


# ---------------------------------------------------------------------------------------------
# Plain numpy reference (the ``separate`` variant, same math, float32)
# ---------------------------------------------------------------------------------------------


def numpy_rollout(
    x: np.ndarray,
    x_dot: np.ndarray,
    theta: np.ndarray,
    theta_dot: np.ndarray,
    actions: np.ndarray,
    reset_x: np.ndarray,
    reset_x_dot: np.ndarray,
    reset_theta: np.ndarray,
    reset_theta_dot: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """The ``separate`` variant in plain numpy, float32 throughout; takes the same arguments as
    ``make("separate", ...)[1]`` and returns the same outputs.  Results agree with jax.jit up to
    float rounding (sin/cos implementations differ in the last bits)."""
    f32 = np.float32
    gravity, masspole, total_mass = f32(GRAVITY), f32(MASSPOLE), f32(TOTAL_MASS)
    length, polemass_length, tau = f32(LENGTH), f32(POLEMASS_LENGTH), f32(TAU)
    force_mag, four_thirds = f32(FORCE_MAG), f32(4.0 / 3.0)
    x_threshold, theta_threshold = f32(X_THRESHOLD), f32(THETA_THRESHOLD_RADIANS)

    x, x_dot = np.asarray(x, f32).copy(), np.asarray(x_dot, f32).copy()
    theta, theta_dot = np.asarray(theta, f32).copy(), np.asarray(theta_dot, f32).copy()
    total_reward = np.zeros(x.shape, f32)
    episodes = np.zeros(x.shape, np.int32)
    for t in range(actions.shape[0]):
        force = np.where(actions[t] == 1, force_mag, -force_mag).astype(f32)
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        temp = (force + polemass_length * theta_dot**2 * sintheta) / total_mass
        thetaacc = (gravity * sintheta - costheta * temp) / (
            (four_thirds - masspole * costheta**2 / total_mass) * length
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        x, x_dot, theta, theta_dot = (
            x + tau * x_dot,
            x_dot + tau * xacc,
            theta + tau * theta_dot,
            theta_dot + tau * thetaacc,
        )
        done = ((np.abs(x) > x_threshold) | (np.abs(theta) > theta_threshold)).astype(np.int32)
        reset = done == 1
        x = np.where(reset, reset_x[t], x)
        x_dot = np.where(reset, reset_x_dot[t], x_dot)
        theta = np.where(reset, reset_theta[t], theta)
        theta_dot = np.where(reset, reset_theta_dot[t], theta_dot)
        total_reward += f32(1.0)
        episodes += done
    return x, x_dot, theta, theta_dot, total_reward, episodes
