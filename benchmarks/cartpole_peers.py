"""The CartPole case study's peers: the hand-written C reference and PyTorch (eager, compiled).

All take the `separate` variant's arguments (see hlofuse/examples/cartpole.py): the four state
arrays `x, x_dot, theta, theta_dot` (float32[N]), `actions` (int32[S, N]) and the four reset arrays
(float32[S, N] each), and return `(x, x_dot, theta, theta_dot, total_reward, episodes)` as numpy
arrays, like `cartpole.numpy_rollout`.

- `c_reference()`: cartpole_ref.c with hlofuse's vectorizable f32 sin/cos (mathlib's
  small-argument polynomials) prepended, compiled by hlofuse's build cache with the backend's
  flags plus `-fopenmp`, called through ctypes. The time
  loop runs inside the kernel per block of 256 environments (the limit a compiler aims at).
- `torch_rollouts()`: the same step written in torch; eager runs it op by op, `torch.compile`
  compiles the step function once and the Python loop calls it each iteration (one compiled
  step per iteration, as XLA would launch a loop body), both on CPU tensors.

Every peer is checked against `numpy_rollout` on a short run before the benchmark times it
(`check_peer`); float tolerances are loose because sin/cos differ in the last bits and a rollout
amplifies them, so only the first steps are compared.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hlofuse.examples import cartpole

Rollout = Callable[..., tuple[np.ndarray, ...]]
HERE = Path(__file__).resolve().parent


def _library() -> ctypes.CDLL:
    """cartpole_ref.c compiled with the f32 polynomials without the large-argument fallback
    (the pole angle stays within 12 degrees of upright, or is reset), as a hand-writer would
    pick them, and OpenMP (hlofuse's own code needs none: its threads are the runtime's pool;
    the reference's `omp parallel for` and `omp simd` do)."""
    from hlofuse.backends.cpu import build, mathlib

    source = (mathlib.source() + "\n#define HF_SIN hf__sin_small_f32\n"
              "#define HF_COS hf__cos_small_f32\n" + (HERE / "cartpole_ref.c").read_text())
    return build.load_library(source, name="cartpole_ref", extra_flags=("-fopenmp",))


def c_reference() -> Rollout:
    """The hand-written C rollout as a Python function of the `separate` arguments."""
    fn = _library().cartpole_ref
    fn.restype = None
    fn.argtypes = [ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * 15

    def run(x: np.ndarray, x_dot: np.ndarray, theta: np.ndarray, theta_dot: np.ndarray,
            actions: np.ndarray, *resets: np.ndarray) -> tuple[np.ndarray, ...]:
        n = x.shape[0]
        steps = actions.shape[0]
        ins = [np.ascontiguousarray(a, np.float32) for a in (x, x_dot, theta, theta_dot)]
        acts = np.ascontiguousarray(actions, np.int32)
        rs = [np.ascontiguousarray(r, np.float32) for r in resets]
        if acts.shape != (steps, n) or any(r.shape != (steps, n) for r in rs):
            raise ValueError("cartpole_ref: actions and resets must be [steps, num_envs]")
        outs = [np.empty(n, np.float32) for _ in range(5)] + [np.empty(n, np.int32)]
        fn(n, steps, *(a.__array_interface__["data"][0] for a in (*ins, acts, *rs, *outs)))
        return tuple(outs)

    return run


def c_reference_layout(reset_layout: str, ys: str) -> Rollout:
    """The hand-written C rollout (`cartpole_ref_layout`) as a Python function of
    `cartpole.make_layout(state_layout="four", reset_layout, ys=ys)`'s arguments: it reads the
    resets in their layout and emits the same per-step output."""
    fn = _library().cartpole_ref_layout
    fn.restype = None
    fn.argtypes = ([ctypes.c_int64] * 2 + [ctypes.c_void_p] * 9 + [ctypes.c_int64] * 2
                   + [ctypes.c_void_p] * 9)

    def ptr(a: np.ndarray | None) -> int | None:
        return None if a is None else int(a.__array_interface__["data"][0])

    def run(x: np.ndarray, x_dot: np.ndarray, theta: np.ndarray, theta_dot: np.ndarray,
            actions: np.ndarray, *resets: np.ndarray) -> tuple[np.ndarray, ...]:
        n, steps = x.shape[0], actions.shape[0]
        f32 = np.dtype(np.float32).itemsize
        if reset_layout == "four":
            tables = [np.ascontiguousarray(r, np.float32) for r in resets]
            bases = [ptr(r) for r in tables]
            strides = (n, 1)
        else:
            (table,) = (np.ascontiguousarray(r, np.float32) for r in resets)
            step = 1 if reset_layout == "sn4" else n  # element k's offset from element 0
            bases = [ptr(table) + k * step * f32 for k in range(4)]  # type: ignore[operator]
            strides = (4 * n, 4 if reset_layout == "sn4" else 1)
        outs = [np.empty(n, np.float32) for _ in range(5)] + [np.empty(n, np.int32)]
        blocks = -(-n // 256)
        per_step = np.empty(steps, np.float32) if ys == "scalar" else None
        partial = np.empty(blocks * steps, np.float32) if ys == "scalar" else None
        xs = np.empty((steps, n), np.float32) if ys == "env" else None
        fn(n, steps, *(ptr(a) for a in (x, x_dot, theta, theta_dot, actions)), *bases, *strides,
           *(ptr(a) for a in (*outs, per_step, partial, xs)))
        extra = () if ys == "none" else ((per_step,) if ys == "scalar" else (xs,))
        return (*outs, *extra)

    return run


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _torch_step() -> Callable[..., tuple]:
    import torch

    f32 = torch.float32
    c = {name: torch.tensor(v, dtype=f32) for name, v in (
        ("gravity", cartpole.GRAVITY), ("masspole", cartpole.MASSPOLE),
        ("total_mass", cartpole.TOTAL_MASS), ("length", cartpole.LENGTH),
        ("polemass_length", cartpole.POLEMASS_LENGTH), ("tau", cartpole.TAU),
        ("force_mag", cartpole.FORCE_MAG), ("four_thirds", 4.0 / 3.0),
        ("x_threshold", cartpole.X_THRESHOLD),
        ("theta_threshold", cartpole.THETA_THRESHOLD_RADIANS))}
    gravity, masspole, total_mass = c["gravity"], c["masspole"], c["total_mass"]
    length, pml, tau = c["length"], c["polemass_length"], c["tau"]
    force_mag, four_thirds = c["force_mag"], c["four_thirds"]
    x_thr, th_thr = c["x_threshold"], c["theta_threshold"]

    def step(x: Any, x_dot: Any, theta: Any, theta_dot: Any, total_reward: Any, episodes: Any,
             action: Any, r_x: Any, r_x_dot: Any, r_theta: Any, r_theta_dot: Any) -> tuple:
        force = torch.where(action == 1, force_mag, -force_mag)
        costheta = torch.cos(theta)
        sintheta = torch.sin(theta)
        temp = (force + pml * theta_dot**2 * sintheta) / total_mass
        thetaacc = (gravity * sintheta - costheta * temp) / (
            (four_thirds - masspole * costheta**2 / total_mass) * length)
        xacc = temp - pml * thetaacc * costheta / total_mass
        x, x_dot = x + tau * x_dot, x_dot + tau * xacc
        theta, theta_dot = theta + tau * theta_dot, theta_dot + tau * thetaacc
        done = ((x.abs() > x_thr) | (theta.abs() > th_thr)).to(torch.int32)
        reset = done == 1
        x = torch.where(reset, r_x, x)
        x_dot = torch.where(reset, r_x_dot, x_dot)
        theta = torch.where(reset, r_theta, theta)
        theta_dot = torch.where(reset, r_theta_dot, theta_dot)
        return x, x_dot, theta, theta_dot, total_reward + 1.0, episodes + done

    return step


def torch_rollouts(dynamic: bool | None = False) -> dict[str, Rollout]:
    """{"torch eager": ..., "torch.compile": ...}; each converts its inputs to tensors once per
    call (zero-copy `from_numpy`) and runs the time loop in Python. `dynamic` is torch.compile's:
    False specializes on the batch size (the ablation: one size), None recompiles once with
    dynamic sizes when a new size comes (the batch-size sweep)."""
    import torch

    torch.set_grad_enabled(False)
    eager = _torch_step()
    compiled = torch.compile(_torch_step(), dynamic=dynamic)

    def make(step: Callable[..., tuple]) -> Rollout:
        def run(x: np.ndarray, x_dot: np.ndarray, theta: np.ndarray, theta_dot: np.ndarray,
                actions: np.ndarray, *resets: np.ndarray) -> tuple[np.ndarray, ...]:
            t = [torch.from_numpy(np.ascontiguousarray(a)) for a in (x, x_dot, theta, theta_dot)]
            acts = torch.from_numpy(np.ascontiguousarray(actions))
            rs = [torch.from_numpy(np.ascontiguousarray(r)) for r in resets]
            carry = (*t, torch.zeros_like(t[0]), torch.zeros(t[0].shape, dtype=torch.int32))
            for i in range(acts.shape[0]):
                carry = step(*carry, acts[i], rs[0][i], rs[1][i], rs[2][i], rs[3][i])
            return tuple(v.numpy() for v in carry)

        return run

    return {"torch eager": make(eager), "torch.compile": make(compiled)}


def check_peer(name: str, fn: Rollout, envs: int = 64, steps: int = 12) -> None:
    """Compare `fn` with numpy_rollout on a short rollout (exact ints, float rtol 1e-4)."""
    _, args = cartpole.make("separate", envs, steps)
    want = cartpole.numpy_rollout(*args)
    got = fn(*args)
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        g = np.asarray(g)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name}: output {i} differs from numpy_rollout")
        else:
            np.testing.assert_array_equal(g, w,
                                          err_msg=f"{name}: output {i} differs from numpy_rollout")
