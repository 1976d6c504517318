"""The fuzzer's control families: while loops, conditionals, scans, nested calls, optimization
barriers and random bits (see `ops.py` for the registry).

Conditions enforced:

* loops and branches carry one to three values of any element types JAX has (bool, sub-byte
  integers, the 8- and 4-bit floats, complex), each updated by `base.step`;
* `lax.fori_loop` with static trip counts 0-4, `lax.while_loop` with a counter of any integer
  type (sub-byte included) against a bound passed as an argument (0-4, within the type: every
  loop ends);
* `lax.cond` on a bool argument, `lax.switch` over two to four branches on an int32 index out of
  range too (JAX clamps it);
* `lax.scan` over zero to four steps, either direction, unrolled or not, carrying state and
  stacking per-step outputs;
* a nested `jax.jit` (XLA's call) around another family's program; `lax.optimization_barrier`
  of a tuple of any types;
* `lax.rng_bit_generator` with each algorithm (default, threefry, philox) and both key forms
  (u32[4], u64[2]) to every unsigned output type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import ml_dtypes
import numpy as np
from jax import lax

from hlofuse.frontends.fuzz.base import (
    ALL,
    ANY_INT,
    EXACT,
    SMALL_FLOAT,
    TRANS,
    UINT,
    ULP,
    Program,
    inexact,
    pick,
    shape,
    step,
    values,
)

__all__ = ["barrier", "branch", "loop", "nested_call", "rng_bits", "scan"]

_Step = Callable[[Any], Any]
_TWO_BIT = (np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.uint2))


def _state(rng: np.random.Generator, most: int = 3) -> tuple[list[np.ndarray], list[str],
                                                             list[_Step]]:
    """One to `most` carried values of random types with a step each."""
    xs, names, fns = [], [], []
    for _ in range(int(rng.integers(1, most + 1))):
        dt = pick(rng, ALL)
        name, fn = step(rng, dt)
        xs.append(values(rng, shape(rng, int(rng.integers(0, 3))), dt, 0.05))
        names.append(f"{dt.name}:{name}")
        fns.append(fn)
    return xs, names, fns


def _apply(fns: list[_Step], vals: Any) -> tuple[Any, ...]:
    return tuple(f(v) for f, v in zip(fns, vals, strict=True))


def _tol(xs: list[np.ndarray], names: list[str] | None = None) -> str:
    """ULP for float state; TRANS where a complex value is squared each iteration: XLA's CPU
    contracts a complex multiply to fused multiply-adds or not depending on the array's shape
    (c64/c128 [4,3] squared: the plain formula; [3,4], [12] and the rest: fused; measured), a
    one-ulp difference of the spec itself that each squaring doubles (2^4 ulps after 4)."""
    named = zip(xs, names or [""] * len(xs), strict=True)
    if any(x.dtype.kind == "c" and n.endswith(":sq") for x, n in named):
        return TRANS
    return ULP if any(inexact(x.dtype) for x in xs) else EXACT


def _small_float_tag(xs: list[np.ndarray]) -> frozenset[str]:
    """loop-small-float: a loop carrying a 16-/8-/4-bit float beside another value (the cpu
    backend's whole-loop kernel zeroes it when it is smaller than the other: open in
    benchmarks/results/fuzz_findings.md)."""
    return frozenset({"loop-small-float"}) if len(xs) > 1 and any(
        x.dtype in SMALL_FLOAT for x in xs) else frozenset()


def loop(rng: np.random.Generator) -> Program:
    xs, names, fns = _state(rng)
    if rng.random() < 0.5:
        n = int(rng.integers(0, 5))
        return Program("loop", lambda *a: lax.fori_loop(0, n, lambda i, c: _apply(fns, c), a),
                       xs, _tol(xs, names), f"fori[{','.join(names)}]x{n}", _small_float_tag(xs))
    it = pick(rng, ANY_INT)
    hi = int(ml_dtypes.iinfo(it).max)
    bound = np.asarray(min(int(rng.integers(0, 5)), hi)).astype(it)
    zero, one = np.asarray(0).astype(it), np.asarray(1).astype(it)

    def fn(b: Any, *a: Any) -> Any:
        return lax.while_loop(lambda c: c[0] < b,
                              lambda c: (c[0] + one, *_apply(fns, c[1:])), (zero, *a))

    return Program("loop", fn, [bound, *xs], _tol(xs, names),
                   f"while[{it.name}<{bound}; {','.join(names)}]", _small_float_tag(xs))


def branch(rng: np.random.Generator) -> Program:
    xs, names, _ = _state(rng)
    nb = 2 if rng.random() < 0.4 else int(rng.integers(2, 5))
    branches = [[step(rng, x.dtype) for x in xs] for _ in range(nb)]
    fns = [(lambda fs: (lambda *a: _apply(fs, a)))([f for _, f in b]) for b in branches]
    desc = "|".join(",".join(n for n, _ in b) for b in branches)
    if nb == 2 and rng.random() < 0.5:
        p = values(rng, (), np.dtype(bool))
        return Program("branch", lambda q, *a: lax.cond(q, fns[0], fns[1], *a), [p, *xs],
                       _tol(xs), f"cond[{','.join(names)}]({desc})")
    i = np.asarray(rng.integers(-1, nb + 2), dtype=np.int32)
    return Program("branch", lambda j, *a: lax.switch(j, fns, *a), [i, *xs], _tol(xs),
                   f"switch{nb}[{','.join(names)}]({desc})")


def scan(rng: np.random.Generator) -> Program:
    carry, names, fns = _state(rng, 2)
    length = int(rng.integers(0, 5))
    xdt = pick(rng, ALL)
    xs = values(rng, (length, *shape(rng, int(rng.integers(0, 2)))), xdt, 0.05)
    xname, xfn = step(rng, xdt)
    rev, unroll = bool(rng.random() < 0.3), int(rng.integers(1, 3))
    if {xdt, carry[0].dtype} & set(_TWO_BIT):  # unrolled, JAX concatenates the stacked outputs:
        unroll = 1                              # XLA's CPU aborts on 2-bit concatenates

    def body(c: Any, x: Any) -> Any:
        return _apply(fns, c), (xfn(x), c[0])

    def fn(x: Any, *c: Any) -> Any:
        return lax.scan(body, c, x, reverse=rev, unroll=unroll)

    return Program("scan", fn, [xs, *carry], _tol([xs, *carry], ["", *names]),
                   f"scan[{xdt.name}:{xname}; {','.join(names)}]x{length}"
                   f"{'r' if rev else ''}u{unroll}")


def barrier(rng: np.random.Generator) -> Program:
    xs, names, fns = _state(rng)
    return Program("barrier", lambda *a: _apply(fns, lax.optimization_barrier(_apply(fns, a))),
                   xs, _tol(xs, names), f"opt_barrier[{','.join(names)}]")


def nested_call(rng: np.random.Generator, inner: Program) -> Program:
    """`inner` under a nested jax.jit: XLA's call (a library function decorated with jit)."""
    return Program("call", jax.jit(inner.fn), inner.args, inner.tol, f"call:{inner.desc}",
                   inner.tags)


_ALGS = (lax.RandomAlgorithm.RNG_DEFAULT, lax.RandomAlgorithm.RNG_THREE_FRY,
         lax.RandomAlgorithm.RNG_PHILOX)


def rng_bits(rng: np.random.Generator) -> Program:
    if rng.random() < 0.5:
        key = rng.integers(0, 2**32, 4, dtype=np.uint64).astype(np.uint32)
    else:
        key = rng.integers(0, 2**64 - 1, 2, dtype=np.uint64, endpoint=True)
    out = pick(rng, UINT)
    shp = shape(rng, int(rng.integers(1, 4)), empty=0.03)
    alg = pick(rng, _ALGS)
    return Program("rng_bit_generator", lambda k: lax.rng_bit_generator(k, shp, out, alg), [key],
                   EXACT, f"rng_bit_generator[{out.name},{alg.name},{key.dtype.name}]{list(shp)}")
