"""The timer `api` puts in the pass context (`Context.timer`, `passes/measure.py`): compile each
candidate module with the default backend, run it on random inputs, time the runs interleaved
and keep the best; cache the times on disk.

    time_candidates(key, {choice: module}) -> ({choice: ns}, cached) or None

Conditions enforced:
- Every candidate compiles with the default backend (an `HloError` means None: not measurable
  here) and every entry parameter is an array (floats drawn from a fixed-seed normal
  distribution, other types zeros).
- Runs are interleaved (A B C A B C ...) for `ROUNDS` rounds after one warm-up run each, and
  the best time of each candidate is kept, so a busy moment slows every candidate alike.
- The times are cached under `autotune/<key>` in the cache directory (JSON, verified like every
  cache entry: `cpu/cachefs.py`); an entry that does not name every candidate, or that does not
  parse, is measured again.
"""

from __future__ import annotations

import json
import math
import time

import numpy as np

from hlofuse.errors import HloError
from hlofuse.ir.module import Module
from hlofuse.ir.shape import ArrayShape

ROUNDS = 7  # interleaved timing rounds per candidate


def measured(candidates: dict[int, Module]) -> dict[int, float] | None:
    """ns of one run of each candidate (None: one does not compile here, or takes a
    non-array parameter)."""
    from hlofuse.backends import registry

    runs = {}
    for k, m in candidates.items():
        try:
            exe = registry.get(registry.default()).compile(m)
        except HloError:
            return None
        rng = np.random.default_rng(0)
        args = []
        for p in sorted(m.entry.parameters, key=lambda q: q.parameter_number or 0):
            shape = p.shape
            if not isinstance(shape, ArrayShape):
                return None
            args.append(rng.standard_normal(shape.dims).astype(shape.dtype.np)
                        if shape.dtype.is_float else np.zeros(shape.dims, shape.dtype.np))
        exe(*args)  # warm up
        runs[k] = (exe, args)
    best = {k: math.inf for k in candidates}
    for _ in range(ROUNDS):
        for k, (exe, args) in runs.items():
            t0 = time.perf_counter()
            exe(*args)
            best[k] = min(best[k], time.perf_counter() - t0)
    return {k: v * 1e9 for k, v in best.items()}


def time_candidates(key: str, candidates: dict[int, Module]
                    ) -> tuple[dict[int, float], bool] | None:
    """The timer `api` installs in the pass context: cached times, else measured and cached."""
    from hlofuse.backends.cpu import cachefs

    path = cachefs.directory("autotune") / key
    raw = cachefs.read_entry(path, "autotune")
    if raw is not None:
        try:
            cached = {int(k): float(v) for k, v in json.loads(raw)["ns"].items()}
            if set(cached) >= set(candidates):
                return {k: cached[k] for k in candidates}, True
        except (ValueError, KeyError, TypeError, AttributeError):
            pass  # a damaged entry is measured again
    times = measured(candidates)
    if times is None:
        return None
    cachefs.write_entry(path, "autotune", json.dumps(
        {"ns": {str(k): v for k, v in times.items()}}).encode())
    return times, False
