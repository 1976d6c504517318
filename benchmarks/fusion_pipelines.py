"""Benchmark: what each fusion pipeline does to real modules, and how long it takes.

For every built-in example module (and, when JAX is installed, a large generated MLP training
step of a few thousand instructions), runs the pipelines `none`, `xla` and `xla-relaxed` and
reports kernels per execution of the entry, kernels per while-loop iteration, and the
pipeline's CPU time (best of --repeat runs). Results go to benchmarks/results/fusion_pipelines.json.

    python benchmarks/fusion_pipelines.py [--repeat 3] [--no-jax]

Kernel counts are exact; times are CPU seconds of the Python pipeline on this machine (compare
them as ratios, absolute times drift on shared machines).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from hlofuse import examples
from hlofuse.analysis.kernels import count_kernels
from hlofuse.ir.module import Module
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse

PIPELINES = ("none", "xla", "xla-relaxed")
RESULTS = Path(__file__).resolve().parent / "results" / "fusion_pipelines.json"


def big_mlp_text(layers: int = 256) -> str | None:
    """A deep MLP training step lowered by JAX (a few thousand instructions), or None."""
    try:
        import jax
        import jax.numpy as jnp
        import numpy as np
    except ImportError:
        return None

    def step(ws, x, y):
        def loss(ws):
            h = x
            for w in ws:
                h = jnp.tanh(h @ w)
            return jnp.mean((h - y) ** 2)

        g = jax.grad(loss)(ws)
        return [w - 0.01 * gw for w, gw in zip(ws, g, strict=True)]

    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((16, 16)).astype(np.float32) * 0.2 for _ in range(layers)]
    x = rng.standard_normal((8, 16)).astype(np.float32)
    return str(jax.jit(step).lower(ws, x, x).as_text(dialect="hlo", debug_info=True))


def instructions(module: Module) -> int:
    return sum(len(c.instructions) for c in module.computations)


def measure(name: str, text: str, repeat: int) -> dict[str, object]:
    row: dict[str, object] = {"module": name, "instructions": instructions(parse(text))}
    for pipeline in PIPELINES:
        best = float("inf")
        module = parse(text)
        for _ in range(repeat):
            module = parse(text)
            t0 = time.process_time()
            run_pipeline(module, pipeline)
            best = min(best, time.process_time() - t0)
        report = count_kernels(module)
        row[pipeline] = {
            "seconds": round(best, 4),
            "kernels_entry": report.entry,
            "kernels_per_iteration": dict(report.loops),
            "fusions_by_kind": dict(report.fusion_kinds),
        }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-jax", action="store_true", help="skip the JAX-generated module")
    args = parser.parse_args()
    modules = [(n, examples.text(n)) for n in examples.names()]
    if not args.no_jax:
        text = big_mlp_text()
        if text is not None:
            modules.append(("mlp_256_layers_train_step", text))
    rows = [measure(name, text, args.repeat) for name, text in modules]

    print("| module | instrs | kernels/iter none -> xla (xla-relaxed) | entry kernels none -> xla"
          " | xla pipeline CPU s |")
    print("|---|---:|---|---|---:|")
    for r in rows:
        none, xla, rel = r["none"], r["xla"], r["xla-relaxed"]
        assert isinstance(none, dict) and isinstance(xla, dict) and isinstance(rel, dict)
        loops = ", ".join(
            f"{none['kernels_per_iteration'][k]} -> {v} ({rel['kernels_per_iteration'].get(k)})"
            for k, v in xla["kernels_per_iteration"].items()
            if k in none["kernels_per_iteration"]
        ) or "-"
        print(f"| {r['module']} | {r['instructions']} | {loops} | "
              f"{none['kernels_entry']} -> {xla['kernels_entry']} | {xla['seconds']:.3f} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "machine": platform.platform(), "python": platform.python_version(),
        "repeat": args.repeat, "rows": rows,
    }, indent=2) + "\n")
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
