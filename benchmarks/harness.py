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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def interleaved(cases: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """Best wall time (seconds) of each case over `repeat` interleaved rounds. Each case runs
    once first as a warm-up (compilation, caches)."""
    for fn in cases.values():
        fn()
    best = {name: float("inf") for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
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


def save(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "machine": machine(), **payload}
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path


def fmt_rate(x: float) -> str:
    return f"{x:.2e}"
