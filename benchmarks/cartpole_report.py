"""Tables for the CartPole case study (benchmarks/cartpole.py): the ablation in the paper's form,
every variant under every pipeline, compile times and the batch-size sweep, as Markdown.

`paper_table(rows, pipelines)` picks one configuration per ablation step (the paper's steps on
hlofuse) and the peers, with env-steps/s, the speedup over the baseline (the `baseline` variant
under the `xla` pipeline, as the paper's baseline is naive JAX on XLA) and the ratio to jax.jit
of the same program (for peers: jax.jit of the `separate` program, timed in the same group).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# (step, change, variant, pipeline) of the paper's ablation, on hlofuse.
STEPS: tuple[tuple[str, str, str, str], ...] = (
    ("baseline", "RNG in the scan, stacked [4, N] state", "baseline", "xla"),
    ("1", "precompute the random numbers", "precomputed", "xla"),
    ("2", "relax the fusion rules (`xla-relaxed`, on 1)", "precomputed", "xla-relaxed"),
    ("3", "four separate state arrays, no stack", "separate", "xla"),
    ("4", "unroll the scan 10x", "unrolled", "xla"),
)
# The hlofuse pipeline's transformations, one more per row, on the paper's program as written
# (beyond the paper: XLA cannot make them). Each pipeline string switches the later ones off.
BEYOND_STEPS: tuple[tuple[str, str, str, str], ...] = (
    ("5", "fusible random numbers: threefry's loops unrolled into the kernels", "baseline",
     "hlofuse{unstack_loop_state=false,auto_unroll=false,whole_loop_fusion=false}"),
    ("6", "+ the stacked [4, N] state carried as four arrays (un-stacking)", "baseline",
     "hlofuse{auto_unroll=false,whole_loop_fusion=false}"),
    ("7", "+ automatic unroll (cost model)", "baseline", "hlofuse{whole_loop_fusion=false}"),
    ("8", "+ whole-loop fusion: the `hlofuse` pipeline", "baseline", "hlofuse"),
)
PAPER = {"baseline": "-", "1": "1.87x", "2": "~1.1x", "3": "3.41x", "4": "10.5x total",
         "numpy eager": "-", "torch eager": "0.13x of best XLA", "torch.compile":
         "1.97x of best XLA (TorchScript)", "C reference": "28x (hand-written CUDA)"}
PEER_CASES = (("numpy eager", "numpy"), ("torch eager", "torch eager"),
              ("torch.compile", "torch.compile"), ("C reference", "C reference"))
BASE_PIPELINES = ("none", "xla", "xla-relaxed")


def _rate(row: dict[str, Any] | None, case: str) -> float | None:
    if row is None:
        return None
    return row["env_steps_per_s"].get(case)


def paper_table(rows: list[dict[str, Any]], pipelines: tuple[str, ...] | list[str]
                ) -> list[dict[str, Any]]:
    by_variant = {r["variant"]: r for r in rows}
    base = _rate(by_variant.get("baseline"), "hlofuse-xla")
    out: list[dict[str, Any]] = []

    def entry(step: str, change: str, row: dict[str, Any] | None, case: str,
              jax_case: str = "jax.jit", **extra: Any) -> None:
        rate = _rate(row, case)
        jax = _rate(row, jax_case)
        out.append({
            "step": step, "change": change, "case": case, **extra,
            "env_steps_per_s": rate,
            "steps_run": None if row is None else row.get("case_steps", {}).get(case),
            "speedup_vs_baseline": rate / base if rate and base else None,
            "jax_env_steps_per_s": jax,
            "kernels_per_step": None if row is None or not case.startswith("hlofuse-") else
            row.get(f"hlofuse_{case.removeprefix('hlofuse-')}_kernels_per_step"),
            "ratio_vs_jax": rate / jax if rate and jax else None,
            "paper": PAPER.get(step),
        })

    for step, change, variant, pipeline in STEPS + BEYOND_STEPS:
        row = by_variant.get(variant)
        if row is not None and _rate(row, f"hlofuse-{pipeline}") is not None:
            entry(step, change, row, f"hlofuse-{pipeline}", variant=variant, pipeline=pipeline)
    for pipeline in pipelines:
        if pipeline in BASE_PIPELINES:
            continue
        best = max((r for r in rows if _rate(r, f"hlofuse-{pipeline}")),
                   key=lambda r: _rate(r, f"hlofuse-{pipeline}") or 0.0, default=None)
        if best is not None:
            entry(f"+{pipeline}", f"the `{pipeline}` pipeline (best variant: {best['variant']})",
                  best, f"hlofuse-{pipeline}", variant=best["variant"], pipeline=pipeline)
    sep = by_variant.get("separate")
    best_jax = max(rows, key=lambda r: _rate(r, "jax.jit") or 0.0, default=None)
    if best_jax is not None:
        entry("jax.jit", f"XLA CPU's best (`{best_jax['variant']}`)", best_jax, "jax.jit",
              variant=best_jax["variant"], peer=True)
    for label, case in PEER_CASES:
        if _rate(sep, case) is not None:
            entry(label, "peer, same program as 3", sep, case, variant="separate", peer=True)
    return out


def _fmt(x: float | None, spec: str = ".2e", suffix: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def _kernels(k: float | None) -> str:
    """Kernel calls per env step; a whole-loop kernel is a fraction of one per step."""
    if k is None:
        return "-"
    return f"{k:.1f}" if k >= 0.1 or k == 0 else f"{k:.1e}"


def row_summary(row: dict[str, Any]) -> str:
    parts = [f"{row['variant']}:"]
    for name, rate in sorted(row["env_steps_per_s"].items(), key=lambda kv: -kv[1]):
        parts.append(f"{name} {rate:.2e} (x{row['ratio_vs_jax'][name]:.2f} jax)")
    return "  ".join(parts)


def markdown(payload: dict[str, Any]) -> str:
    cfg = payload["config"]
    m = payload.get("machine", {})
    load = payload.get("load_average", {})
    lines = [
        f"# CartPole case study: {cfg['envs']} envs x {cfg['steps']:,} steps",
        "",
        f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores; {m.get('date', '')}; hlofuse "
        f"{m.get('hlofuse_commit', '?')}, jax {m.get('jax', '-')}, torch "
        f"{_torch(cfg)}, numpy {m.get('numpy', '?')}; best of "
        f"{cfg['repeat']} interleaved runs; load average before/after "
        f"{_fmt_load(load.get('before'))} / {_fmt_load(load.get('after'))}; whole run "
        f"{payload.get('wall_s', 0):.0f} s.",
        "",
        "## The ablation (paper's form)",
        "",
        "Speedup over the baseline (the `baseline` program under hlofuse's `xla` pipeline); "
        "\"vs jax.jit\" is the ratio to jax.jit of the same program in the same run. The "
        "paper's column is what the study reported on XLA:GPU.",
        "",
        "| step | change | hlofuse | kernels/step | env-steps/s | speedup vs baseline "
        "| vs jax.jit | jax.jit env-steps/s | paper |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for e in payload["table"]:
        who = e.get("pipeline") or ("peer" if e.get("peer") else "")
        lines.append(
            f"| {e['step']} | {e['change']} | {who} | {_kernels(e.get('kernels_per_step'))} "
            f"| {_fmt(e['env_steps_per_s'])} | "
            f"{_fmt(e['speedup_vs_baseline'], '.2f', 'x')} | "
            f"{_fmt(e['ratio_vs_jax'], '.2f', 'x')} | {_fmt(e['jax_env_steps_per_s'])} | "
            f"{e.get('paper') or '-'} |")
    pipelines = cfg["pipelines"]
    lines += [
        "",
        "## Every program under every pipeline",
        "",
        "env-steps/s (ratio to jax.jit of the same program; hlofuse's kernel calls per env "
        "step, loop control included).",
        "",
        "| program | " + " | ".join(f"hlofuse `{p}`" for p in pipelines) + " | jax.jit |",
        "|---|" + "---:|" * (len(pipelines) + 1),
    ]
    for row in payload["rows"]:
        cells = []
        for case in [f"hlofuse-{p}" for p in pipelines] + ["jax.jit"]:
            rate = row["env_steps_per_s"].get(case)
            ratio = row["ratio_vs_jax"].get(case)
            k = row.get(f"hlofuse_{case.removeprefix('hlofuse-')}_kernels_per_step")
            ks = "" if k is None else f"; {_kernels(k)} k/step"
            cells.append("-" if rate is None else f"{rate:.2e} ({ratio:.2f}x{ks})")
        lines.append(f"| {row['variant']} | " + " | ".join(cells) + " |")
    lines += _compile_table(payload, pipelines)
    lines += _layout_table(payload.get("layouts"))
    lines += _sweep_table(payload.get("scaling"))
    lines += _notes(payload)
    return "\n".join(lines) + "\n"


def _torch(cfg: dict[str, Any]) -> str:
    if not cfg.get("torch"):
        return "not installed"
    return f"{cfg['torch']} ({cfg.get('torch_threads_used')} threads)"


def _fmt_load(v: Any) -> str:
    return "-" if not v else ", ".join(f"{x:.1f}" for x in v)


def _compile_table(payload: dict[str, Any], pipelines: list[str]) -> list[str]:
    rows = payload["rows"]
    if not any(f"hlofuse_{p}_compile_cold_s" in r for r in rows for p in pipelines):
        return []
    lines = ["", "## Compile times (seconds; hlofuse cold = empty cache, warm = from the disk "
             "cache)", "",
             "| program | jax.jit | " + " | ".join(f"`{p}` cold / warm" for p in pipelines)
             + " |", "|---|---:|" + "---:|" * len(pipelines)]
    for r in rows:
        cells = [f"{r.get(f'hlofuse_{p}_compile_cold_s', float('nan')):.2f} / "
                 f"{r.get(f'hlofuse_{p}_compile_warm_s', float('nan')):.3f}" for p in pipelines]
        lines.append(f"| {r['variant']} | {r['jax_compile_s']:.2f} | " + " | ".join(cells)
                     + " |")
    return lines


def _layout_table(rows: list[dict[str, Any]] | None) -> list[str]:
    if not rows:
        return []
    import cartpole_layouts

    return ["", "## Every layout of the state and of the precomputed resets", "",
            "The `separate` physics with the state and the resets stored as RL code stores "
            "them, and the scan's per-step output as RL code emits it; hlofuse's `hlofuse` and "
            "`xla` pipelines vs jax.jit of the same program and the hand-written C; \"`xla` "
            "body vectorized\": every loop over the environments in the `xla` pipeline's loop "
            "body kernels is an explicit vector loop.", "", *cartpole_layouts.markdown(rows)]


def _sweep_table(sweep: dict[str, Any] | None) -> list[str]:
    if not sweep:
        return []
    names = list(sweep["series"])
    lines = ["", f"## Throughput vs number of environments (`{sweep['program']}` program, "
             f"env-steps/s, best of {sweep['repeat']})", "",
             "| envs | steps | " + " | ".join(names) + " |",
             "|---:|---:|" + "---:|" * len(names)]
    for i, envs in enumerate(sweep["envs"]):
        cells = [_fmt(sweep["series"][n][i]) for n in names]
        lines.append(f"| {envs:,} | {sweep['steps'][i]} | " + " | ".join(cells) + " |")
    return lines


def _notes(payload: dict[str, Any]) -> list[str]:
    cfg = payload["config"]
    fewer = sorted({(r["variant"], case, n) for r in payload["rows"]
                    for case, n in r.get("case_steps", {}).items() if n != r["steps"]})
    lines = ["", "Notes:", ""]
    if fewer:
        lines.append("- To keep the full run short, these cases ran fewer steps (throughput is "
                     "per env-step, so rows stay comparable): "
                     + "; ".join(f"{c} in `{v}`: {n:,}" for v, c, n in fewer) + ".")
    lines.append("- Every hlofuse executable was checked against the interpreter on a "
                 f"{cfg['envs'] if cfg['envs'] < 64 else 64}-env, 12-step rollout before "
                 "timing; the peers against numpy_rollout.")
    lines.append("- torch.compile runs one compiled step function per iteration of a Python "
                 "loop; the C reference runs the time loop inside the kernel per block of 256 "
                 "environments with hlofuse's vectorized sin/cos and OpenMP.")
    return lines


BEGIN, END = "<!-- cartpole-table:begin -->", "<!-- cartpole-table:end -->"


def update_readme(payload: dict[str, Any], readme: Path) -> bool:
    """Replaces the text between the README's cartpole-table markers with this run's header
    line and its first two tables; False when the markers are missing."""
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        return False
    md = markdown(payload)
    body = md[md.index("## The ablation"):md.index("\n## Compile times")] if (
        "\n## Compile times" in md) else md[md.index("## The ablation"):md.index("\nNotes:")]
    header = md.splitlines()[2]
    block = f"{BEGIN}\nLatest run: {header}\n\n{body.rstrip().replace('## ', '### ')}\n{END}"
    head, rest = text.split(BEGIN, 1)
    readme.write_text(head + block + rest.split(END, 1)[1])
    return True
