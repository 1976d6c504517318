"""What a third-party program of the suite is: a function, its arguments, and how to check it.

Every program is written the way its library's own examples or docs write it (the source is
named in each module's docstring); nothing in it is shaped for hlofuse. `build(small)` makes the
function and its arguments (jax device arrays and pytrees of them): `small=True` is the size
the test suite runs (seconds), `small=False` the benchmark size.

Checking against jax.jit (`compare`): float leaves within `rtol`/`atol`, integer and bool
leaves equal; a program may allow a fraction of its integer elements (`int_mismatch`) to differ,
or to differ by more than `int_atol` (the step counts of adaptive ODE solves, which last-bit
differences move by a few steps). Chaotic programs (`chaotic=True`: rigid-body contact, long RL
rollouts whose terminations flip on last-bit differences) are checked at the small size only,
a short horizon; at the benchmark size the fraction of equal leaves is reported, not required.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Case:
    """One call: `fn(*args)` with `static_argnums` as jax.jit would take them."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    size: str                              # what the call computes, e.g. "256 envs x 128 steps"
    static_argnums: tuple[int, ...] = ()


@dataclass(frozen=True)
class Program:
    name: str
    library: str                           # the libraries it is written with
    source: str                            # the example or doc it follows
    build: Callable[[bool], Case] = field(repr=False)
    rtol: float = 1e-4
    atol: float = 1e-5
    chaotic: bool = False
    int_mismatch: float = 0.0              # fraction of integer elements allowed to differ
    int_atol: int = 0                      # (by more than int_atol from jax.jit's)


def leaves(tree: Any) -> list[np.ndarray]:
    import jax

    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def compare(program: Program, got: Any, want: Any) -> tuple[bool, str]:
    """(ok, why): every leaf of `got` against jax.jit's `want`."""
    g, w = leaves(got), leaves(want)
    if len(g) != len(w):
        return False, f"{len(g)} outputs, jax.jit has {len(w)}"
    worst = ""
    for k, (a, b) in enumerate(zip(g, w, strict=True)):
        if a.shape != b.shape:
            return False, f"output {k}: shape {a.shape}, jax.jit {b.shape}"
        if a.dtype != b.dtype:
            return False, f"output {k}: dtype {a.dtype}, jax.jit {b.dtype}"
        if a.dtype.kind in "fc":
            bad = ~np.isclose(a, b, rtol=program.rtol, atol=program.atol, equal_nan=True)
            if bad.any():
                err = np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))[bad])
                return False, (f"output {k} {a.shape}: {int(bad.sum())} of {a.size} elements "
                               f"differ (max abs error {err:.3g})")
        else:
            far = a != b
            if program.int_atol:
                far = np.abs(a.astype(np.int64) - b.astype(np.int64)) > program.int_atol
            frac = float(np.mean(far)) if a.size else 0.0
            beyond = f" by more than {program.int_atol}" if program.int_atol else ""
            if frac > program.int_mismatch:
                return False, f"output {k} {a.shape}: {frac:.1%} of the elements differ{beyond}"
            if (a != b).any():
                worst = (f"output {k}: {float(np.mean(a != b)):.1%} of the integer elements "
                         f"differ" + (f" ({frac:.1%}{beyond})" if beyond else "") + " (allowed)")
    return True, worst


def agreement(got: Any, want: Any, rtol: float = 1e-3, atol: float = 1e-4) -> float:
    """The fraction of elements (over all leaves) that agree: reported for chaotic programs."""
    total = same = 0
    for a, b in zip(leaves(got), leaves(want), strict=True):
        if a.dtype.kind in "fc":
            same += int(np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True).sum())
        else:
            same += int((a == b).sum())
        total += a.size
    return same / total if total else 1.0
