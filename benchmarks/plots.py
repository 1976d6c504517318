"""Plots of the CartPole case study from its JSON payload (matplotlib, Agg backend, PNG).

- `ablation(payload, path)`: left, every program under every hlofuse pipeline and jax.jit (log
  scale); right, the paper's form: one bar per ablation step and peer (linear scale), labelled
  with its speedup over the baseline.
- `scaling(payload, path)`: throughput vs number of environments per backend and peer, log-log.

    python benchmarks/plots.py [results/cartpole.json]    # redraws the PNGs next to the JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

COLORS = {
    "hlofuse-none": "#c7c7c7", "hlofuse-xla": "#1f77b4", "hlofuse-xla-relaxed": "#6baed6",
    "jax.jit": "#ff7f0e", "numpy": "#2ca02c", "torch eager": "#d62728",
    "torch.compile": "#9467bd", "C reference": "#000000",
}
EXTRA = ["#8c564b", "#e377c2", "#17becf", "#bcbd22"]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def throughput_axes(ax: Any, xlabel: str, title: str) -> None:
    """Log-log env-steps/s against batch size, the layout of every throughput sweep plot."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("env-steps / s")
    ax.set_title(title)
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=8)


def _color(name: str, i: int) -> str:
    return COLORS.get(name, EXTRA[i % len(EXTRA)])


def ablation(payload: dict[str, Any], path: Path) -> Path:
    plt = _plt()
    from matplotlib.ticker import NullFormatter

    cfg = payload["config"]
    rows = payload["rows"]
    cases = [f"hlofuse-{p}" for p in cfg["pipelines"]] + ["jax.jit"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.2), gridspec_kw={"width_ratios": [1, 1.1]})

    width = 0.8 / len(cases)
    for j, case in enumerate(cases):
        xs, ys = [], []
        for i, row in enumerate(rows):
            rate = row["env_steps_per_s"].get(case)
            if rate:
                xs.append(i + (j - (len(cases) - 1) / 2) * width)
                ys.append(rate)
        ax1.bar(xs, ys, width, label=case, color=_color(case, j), edgecolor="black",
                linewidth=0.4)
    ax1.set_xticks(range(len(rows)), [r["variant"] for r in rows])
    ax1.set_yscale("log")
    ax1.yaxis.set_minor_formatter(NullFormatter())
    ax1.set_ylabel("env-steps / s")
    ax1.set_title("every program under every pipeline")
    ax1.legend(fontsize=8)
    ax1.grid(axis="y", which="both", alpha=0.3)

    table = [e for e in payload["table"] if e["env_steps_per_s"]]
    labels = [e["step"] if e.get("peer") else f"{e['step']}: {e.get('pipeline')}" for e in table]
    values = [e["env_steps_per_s"] for e in table]
    colors = [_color(e["case"], i) for i, e in enumerate(table)]
    y = list(range(len(table)))[::-1]
    ax2.barh(y, values, color=colors, edgecolor="black", linewidth=0.4)
    ax2.set_yticks(y, labels)
    ax2.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
    ax2.set_xlabel("env-steps / s (linear)")
    for yi, e in zip(y, table, strict=True):
        sp = e.get("speedup_vs_baseline")
        if sp:
            ax2.text(e["env_steps_per_s"] + max(values) * 0.01, yi, f"{sp:.2f}x",
                     va="center", fontsize=8)
    ax2.set_xlim(0, max(values) * 1.15)
    ax2.set_title("ablation steps and peers (speedup over the baseline)")
    ax2.grid(axis="x", which="both", alpha=0.3)

    m = payload.get("machine", {})
    fig.suptitle(f"CartPole, {cfg['envs']} envs x {cfg['steps']:,} steps  "
                 f"({m.get('cpu', '')}, {m.get('cores', '?')} cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def scaling(payload: dict[str, Any], path: Path) -> Path:
    plt = _plt()
    sweep = payload["scaling"]
    fig, ax = plt.subplots(figsize=(8, 5.2))
    for i, (name, values) in enumerate(sweep["series"].items()):
        pts = [(e, v) for e, v in zip(sweep["envs"], values, strict=True) if v]
        if not pts:
            continue
        ax.plot(*zip(*pts, strict=True), marker="o", ms=4, label=name, color=_color(name, i),
                linestyle="--" if name == "C reference" else "-")
    throughput_axes(ax, "number of environments",
                    f"CartPole throughput vs batch size (`{sweep['program']}` program)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_all(payload: dict[str, Any], directory: Path, stem: str) -> list[Path]:
    """Both PNGs (the scaling plot only when the payload has a sweep); [] without matplotlib."""
    try:
        _plt()
    except ImportError:
        print("matplotlib is not installed: no plots (pip install 'hlofuse[bench]')")
        return []
    out = [ablation(payload, Path(directory) / f"{stem}_ablation.png")]
    if payload.get("scaling"):
        out.append(scaling(payload, Path(directory) / f"{stem}_scaling.png"))
    return out


if __name__ == "__main__":
    src = Path(sys.argv[1] if len(sys.argv) > 1 else
               Path(__file__).resolve().parent / "results" / "cartpole.json")
    data = json.loads(src.read_text())
    for p in write_all(data, src.parent, src.stem):
        print(f"wrote {p}")
