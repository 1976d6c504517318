"""Shared timing and reporting for the benchmarks in this directory.

Every benchmark runs hlofuse and its peers in one process, interleaved (A B C A B C ...), and
keeps the best time of each: on a shared machine the minimum is the least noisy estimate of what
the code costs. Results are written as JSON under results/ together with the machine they were
measured on; compare ratios, not absolute times.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def interleaved(cases: dict[str, Callable[[], Any]], repeat: int,
                on_round: Callable[[int], None] | None = None) -> dict[str, float]:
    """Best wall time (seconds) of each case over `repeat` interleaved rounds. Each case runs
    once first as a warm-up (compilation, caches). Round i starts at case i (mod their number),
    so no case always runs right after the same other one, and each timed call follows an
    untimed call of the same case, as in a loop that calls one function back to back: a
    runtime's pool threads keep spinning for a while after a call (jax.jit's and hlofuse's
    both) and sleep after that; timed right after another case, a call either lost a core to
    that case's spinning threads (optax's 0.3-0.5 ms updates read 8-12% slower in the column
    timed right after jax.jit than in the next one, on the same kernels) or paid for waking
    its own. `on_round(i)` is called after the warm-up (i = 0) and after each round
    (i = 1..repeat), e.g. to advance a progress bar."""
    for fn in cases.values():
        fn()
    if on_round is not None:
        on_round(0)
    best = {name: float("inf") for name in cases}
    order = list(cases.items())
    for i in range(repeat):
        k = i % max(1, len(order))
        for name, fn in order[k:] + order[:k]:
            fn()
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
        if on_round is not None:
            on_round(i + 1)
    return best


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    try:
        import numpy

        info["numpy"] = numpy.__version__
    except ImportError:
        pass
    try:
        import jax

        info["jax"] = jax.__version__
    except ImportError:
        pass
    with contextlib.suppress(OSError):
        info["hlofuse_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    try:
        from hlofuse.backends.cpu import build

        cc = build.find_compiler()
        info["cc"] = build._compiler_identity(tuple(cc))
        info["cflags"] = " ".join(build.flags())
    except Exception as exc:
        info["cc"] = f"unavailable: {exc}"
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def save(name: str, payload: dict[str, Any], directory: Path | None = None) -> Path:
    directory = RESULTS if directory is None else Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    payload = {"benchmark": name, "machine": machine(), **payload}
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path


def fmt_rate(x: float) -> str:
    return f"{x:.2e}"


class Progress:
    """A progress bar: tqdm when installed (the `bench` extra), else one line per update on
    stderr. `update(n, desc)` advances by n units and shows what runs next."""

    def __init__(self, total: int, desc: str = "", enabled: bool = True) -> None:
        self.total, self.done, self.enabled = total, 0, enabled
        self.t0 = time.perf_counter()
        self._bar: Any = None
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self._bar = tqdm(total=total, desc=desc, unit="task", dynamic_ncols=True,
                         file=sys.stderr)

    def update(self, n: int = 1, desc: str = "") -> None:
        self.done += n
        if not self.enabled:
            return
        if self._bar is not None:
            if desc:
                self._bar.set_description_str(desc, refresh=False)
            self._bar.update(n)
        else:
            elapsed = time.perf_counter() - self.t0
            print(f"  [{self.done}/{self.total} {elapsed:6.1f}s] {desc}", file=sys.stderr,
                  flush=True)

    def write(self, line: str) -> None:
        """Print a line without breaking the bar."""
        if self._bar is not None:
            self._bar.write(line)
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
