"""Benchmark: the paper's CartPole case study (its ablation) on hlofuse's CPU backend, with peers.

Rows of the ablation (hlofuse/examples/cartpole.py has the variants):
  baseline  RNG in the scan, stacked [4, N] state            (variant `baseline`)
  1         precomputed randomness                            (variant `precomputed`)
  2         XLA's rules relaxed: the `xla-relaxed` pipeline on 1
  3         four separate state arrays                        (variant `separate`)
  4         the scan unrolled 10x                             (variant `unrolled`)
and, beyond the paper, one row per transformation of the `hlofuse` pipeline on the baseline
program (cartpole_report.BEYOND_STEPS: fusible RNG, un-stacking, automatic unroll, whole-loop
fusion, each added to the previous; --no-beyond skips them).
Every variant runs under every hlofuse pipeline (`none` = one kernel per op, the eager baseline;
`xla`; `xla-relaxed`; and any later one in `hlofuse.passes.pipelines.PIPELINES` except
`simplify`), and under `jax.jit` of the same program. Peers, on the `separate` arguments and timed
in the same group as that variant: numpy eager, torch eager and `torch.compile` (when torch is
installed), and the hand-written C reference (`cartpole_ref.c`, the limit).

Method: everything runs in this process on the same arguments; cases of a group are interleaved
(A B C A B C ...) and the best of --repeat rounds is kept (harness.py). Reported: env-steps/s,
the speedup over the baseline (baseline variant under `xla`) and the ratio to jax.jit of the same
program. Before timing, every hlofuse executable is checked against the interpreter on a short
rollout (12 steps, a long chaotic rollout amplifies last-bit sin/cos differences), and every peer
against numpy_rollout. Slow cases may run fewer steps (--slow-steps, recorded per case); their
throughput is still env-steps/s.

A second part runs the same physics in every state layout (four [N] arrays, [N, 4], [4, N]) and
every reset layout (four [S, N] arrays, [S, N, 4], [S, 4, N]) against jax.jit of each
(cartpole_layouts.py; --no-layouts skips it). A third part sweeps the number of environments
from 1 to 65,536 (powers of 4) with fewer steps (about --sweep-budget env-steps per point) for
the `separate` program under each backend and peer: the paper's CPU/GPU crossover figure, here
per backend.

    python benchmarks/cartpole.py            # 2048 envs x 10,000 steps, sweep, plots
    python benchmarks/cartpole.py --quick    # 256 envs x 200 steps, small sweep
    hlofuse bench cartpole [same options]
Writes results/cartpole.json, results/cartpole.md, results/cartpole_ablation.png and
results/cartpole_scaling.png (--out NAME changes the stem).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cartpole_layouts
import cartpole_peers as peers
import cartpole_report as report
import harness

import hlofuse
from hlofuse.backends import interpreter
from hlofuse.examples import cartpole
from hlofuse.frontends.jax import hlo_text
from hlofuse.passes.pipelines import PIPELINES as ALL_PIPELINES
from hlofuse.text import parse

PIPELINES: tuple[str, ...] = tuple(p for p in ALL_PIPELINES if p != "simplify")
PEERS: tuple[str, ...] = ("numpy", "torch", "c")
CHECK_STEPS = 12
SWEEP_ENVS: tuple[int, ...] = tuple(4**k for k in range(9))  # 1 .. 65,536


@dataclasses.dataclass
class Config:
    envs: int = 2048
    steps: int = 10_000
    repeat: int = 5
    variants: tuple[str, ...] = cartpole.VARIANTS
    pipelines: tuple[str, ...] = PIPELINES
    peers: tuple[str, ...] = PEERS
    # Steps for the slowest cases ("variant:pipeline" -> steps); None = all run `steps`.
    slow_steps: dict[str, int] = dataclasses.field(default_factory=dict)
    compile_times: bool = True
    sweep_envs: tuple[int, ...] = SWEEP_ENVS
    sweep_budget: int = 1 << 22  # env-steps per sweep point
    sweep_min_steps: int = 32
    sweep_max_steps: int = 1000
    sweep_repeat: int = 3
    plots: bool = True
    out: str = "cartpole"
    results_dir: Path = harness.RESULTS
    progress: bool = True
    torch_threads: int | None = None  # torch.set_num_threads; None: torch's default
    layouts: bool = True  # the state/reset layout table (cartpole_layouts.py)
    beyond: bool = True  # the ablation rows of the hlofuse pipeline's transformations


# ---------------------------------------------------------------------------------------------
# hlofuse compile + check
# ---------------------------------------------------------------------------------------------


def check_against_interpreter(variant: str, pipeline: str, envs: int) -> None:
    """Compile a 12-step version and compare with the interpreter (exact ints, float rtol)."""
    fn, args = cartpole.make(variant, envs, CHECK_STEPS)
    text = hlo_text(fn, *args)
    exe = hlofuse.compile(text, pipeline=pipeline, backend="cpu")
    want = interpreter.run(parse(text), *args)
    got = exe(*args)
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        msg = f"hlofuse {variant}/{pipeline}: output {i} differs from the interpreter"
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=msg)
        else:
            np.testing.assert_array_equal(g, w, err_msg=msg)


def compile_timed(text: str, pipeline: str, measure: bool) -> tuple[Any, dict[str, float]]:
    """hlofuse.compile(text) for the cpu backend. With `measure`, compiles in an empty cache
    directory (cold: pipeline + C generation + cc) and again from that disk cache (warm)."""
    if not measure:
        return hlofuse.compile(text, pipeline=pipeline, backend="cpu"), {}
    from hlofuse.backends.cpu import build

    with tempfile.TemporaryDirectory() as cache:
        old = os.environ.get("HLOFUSE_CACHE_DIR")
        os.environ["HLOFUSE_CACHE_DIR"] = cache
        try:
            build._LOADED.clear()
            t_cold, exe = harness.timed(
                lambda: hlofuse.compile(text, pipeline=pipeline, backend="cpu"))
            build._LOADED.clear()
            t_warm, _ = harness.timed(
                lambda: hlofuse.compile(text, pipeline=pipeline, backend="cpu"))
        finally:
            if old is None:
                del os.environ["HLOFUSE_CACHE_DIR"]
            else:
                os.environ["HLOFUSE_CACHE_DIR"] = old
    return exe, {"cold_s": t_cold, "warm_s": t_warm}


def kernels_per_step(exe: Any, args: tuple, steps: int) -> float:
    """Kernel calls per env step, counted by the executable's profile of one run: the paper's
    "kernels per step" (loop control included, the few once-per-run kernels left out)."""
    prof = exe.profile(*args)
    return sum(r.calls for r in prof.rows if r.calls > 1) / steps


# ---------------------------------------------------------------------------------------------
# The ablation
# ---------------------------------------------------------------------------------------------


class Group:
    """Cases timed together (interleaved): name -> (callable, steps it runs)."""

    def __init__(self) -> None:
        self.cases: dict[str, Callable[[], Any]] = {}
        self.steps: dict[str, int] = {}

    def add(self, name: str, fn: Callable[[], Any], steps: int) -> None:
        self.cases[name] = fn
        self.steps[name] = steps


def _steps_for(cfg: Config, case: str) -> int:
    """Steps a case runs: `case` is "variant:pipeline" or a peer's name."""
    return min(cfg.steps, cfg.slow_steps.get(case, cfg.steps))


def bench_variant(variant: str, cfg: Config, prog: harness.Progress,
                  with_peers: bool) -> dict[str, Any]:
    import jax

    envs, steps = cfg.envs, cfg.steps
    fn, args = cartpole.make(variant, envs, steps)
    text = hlo_text(fn, *args)
    row: dict[str, Any] = {"variant": variant, "envs": envs, "steps": steps}
    group = Group()

    prog.update(0, f"{variant}: jax.jit compile")
    jitted = jax.jit(fn)
    t_jax_compile, compiled = harness.timed(lambda: jitted.lower(*args).compile())
    row["jax_compile_s"] = t_jax_compile
    dev_args = [jax.device_put(a) for a in args]
    group.add("jax.jit", lambda: jax.block_until_ready(compiled(*dev_args)), steps)
    prog.update(1, f"{variant}: hlofuse compile + check")

    extra = [p for _, _, v, p in report.BEYOND_STEPS if v == variant and cfg.beyond
             and p not in cfg.pipelines]
    for pipeline in [*cfg.pipelines, *extra]:
        check_against_interpreter(variant, pipeline, min(envs, 64))
        p_steps = _steps_for(cfg, f"{variant}:{pipeline}")
        if p_steps == steps:
            p_text, p_args = text, args
        else:
            p_fn, p_args = cartpole.make(variant, envs, p_steps)
            p_text = hlo_text(p_fn, *p_args)
        exe, info = compile_timed(p_text, pipeline, cfg.compile_times)
        for key, value in info.items():
            row[f"hlofuse_{pipeline}_compile_{key}"] = value
        row[f"hlofuse_{pipeline}_kernels_per_step"] = kernels_per_step(exe, p_args, p_steps)
        group.add(f"hlofuse-{pipeline}", lambda e=exe, a=p_args: e(*a), p_steps)
        prog.update(1, f"{variant}: hlofuse {pipeline} checked")

    if with_peers:
        add_peers(group, cfg, args, row, prog)

    prog.update(0, f"{variant}: timing {len(group.cases)} cases")
    best = harness.interleaved(group.cases, cfg.repeat,
                               on_round=lambda i: prog.update(1, f"{variant}: round {i}"))
    row["seconds"] = best
    row["case_steps"] = group.steps
    rates = {k: envs * group.steps[k] / v for k, v in best.items()}
    row["env_steps_per_s"] = rates
    row["ratio_vs_jax"] = {k: r / rates["jax.jit"] for k, r in rates.items()}
    return row


def add_peers(group: Group, cfg: Config, args: tuple, row: dict[str, Any],
              prog: harness.Progress) -> None:
    """The peers on the `separate` arguments, each checked on a short rollout first."""
    steps = cfg.steps

    def short(fn: Callable[..., Any], name: str, envs: int | None = None) -> None:
        peers.check_peer(name, fn, envs=envs or min(cfg.envs, 64), steps=CHECK_STEPS)

    if "numpy" in cfg.peers:
        n_steps = _steps_for(cfg, "numpy")
        n_args = args if n_steps == steps else cartpole.make("separate", cfg.envs, n_steps)[1]
        group.add("numpy", lambda: cartpole.numpy_rollout(*n_args), n_steps)
    if "c" in cfg.peers:
        ref = peers.c_reference()
        short(ref, "C reference")
        group.add("C reference", lambda: ref(*args), steps)
    if "torch" in cfg.peers and peers.torch_available():
        prog.update(0, "peers: torch.compile (first compile is slow)")
        fns = peers.torch_rollouts()
        for name, fn in fns.items():
            # Check at the benchmark's batch size so torch.compile compiles once for it.
            t, _ = harness.timed(lambda f=fn, n=name: short(f, n, envs=cfg.envs))
            row[f"{name}_first_call_s"] = t
            t_steps = _steps_for(cfg, name)
            t_args = args if t_steps == steps else cartpole.make("separate", cfg.envs,
                                                                  t_steps)[1]
            group.add(name, lambda f=fn, a=t_args: f(*a), t_steps)
    prog.update(1, "peers checked")


# ---------------------------------------------------------------------------------------------
# Throughput vs number of environments
# ---------------------------------------------------------------------------------------------


def sweep_steps(cfg: Config, envs: int) -> int:
    return int(min(cfg.sweep_max_steps, max(cfg.sweep_min_steps, cfg.sweep_budget // envs)))


def run_sweep(cfg: Config, prog: harness.Progress) -> dict[str, Any]:
    import jax

    with_torch = "torch" in cfg.peers and peers.torch_available()
    torch_fns = peers.torch_rollouts(dynamic=None) if with_torch else {}
    ref = peers.c_reference() if "c" in cfg.peers else None
    # xla-relaxed fuses the `separate` program exactly as xla does; later pipelines are kept.
    pipelines = [p for p in cfg.pipelines if p != "xla-relaxed"] or list(cfg.pipelines)
    series: dict[str, list[float | None]] = {}
    points: list[dict[str, Any]] = []
    for envs in cfg.sweep_envs:
        steps = sweep_steps(cfg, envs)
        fn, args = cartpole.make("separate", envs, steps)
        text = hlo_text(fn, *args)
        prog.update(0, f"sweep {envs} envs: compile + check")
        group = Group()
        compiled = jax.jit(fn).lower(*args).compile()
        dev_args = [jax.device_put(a) for a in args]
        group.add("jax.jit", lambda c=compiled, d=dev_args: jax.block_until_ready(c(*d)), steps)
        for pipeline in pipelines:
            check_against_interpreter("separate", pipeline, min(envs, 64))
            exe = hlofuse.compile(text, pipeline=pipeline, backend="cpu")
            group.add(f"hlofuse-{pipeline}", lambda e=exe, a=args: e(*a), steps)
        if "numpy" in cfg.peers:
            group.add("numpy", lambda a=args: cartpole.numpy_rollout(*a), steps)
        if ref is not None:
            group.add("C reference", lambda a=args: ref(*a), steps)
        for name, tfn in torch_fns.items():
            peers.check_peer(name, tfn, envs=envs, steps=min(steps, CHECK_STEPS))
            group.add(name, lambda f=tfn, a=args: f(*a), steps)
        prog.update(1, f"sweep {envs} envs: timing")
        best = harness.interleaved(group.cases, cfg.sweep_repeat)
        rates = {k: envs * steps / v for k, v in best.items()}
        points.append({"envs": envs, "steps": steps, "env_steps_per_s": rates})
        for name, rate in rates.items():
            series.setdefault(name, [None] * (len(points) - 1)).append(rate)
        for values in series.values():
            values.extend([None] * (len(points) - len(values)))
        prog.update(1, f"sweep {envs} envs done")
    return {
        "program": "separate",
        "envs": [p["envs"] for p in points],
        "steps": [p["steps"] for p in points],
        "repeat": cfg.sweep_repeat,
        "series": series,
        "points": points,
        "note": "torch.compile with dynamic=None: recompiles once with dynamic sizes",
    }


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def _total_units(cfg: Config, variants: list[str]) -> int:
    per_variant = 1 + len(cfg.pipelines) + 1 + cfg.repeat
    beyond = sum(1 for _, _, v, p in report.BEYOND_STEPS if v in variants
                 and p not in cfg.pipelines) if cfg.beyond else 0
    peers_units = 1 if cfg.peers else 0
    layouts = 9 if cfg.layouts else 0
    return (len(variants) * per_variant + beyond + peers_units + 2 * len(cfg.sweep_envs)
            + layouts)


def run(cfg: Config) -> dict[str, Any]:
    """Runs the benchmark; writes JSON, Markdown and (if cfg.plots) PNGs; returns the payload."""
    variants = list(cfg.variants)
    if cfg.peers and "separate" not in variants:
        variants.append("separate")  # the peers are timed in the `separate` group
    if cfg.torch_threads and peers.torch_available():
        import torch

        torch.set_num_threads(cfg.torch_threads)
    prog = harness.Progress(_total_units(cfg, variants), "cartpole", enabled=cfg.progress)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    rows = []
    try:
        for variant in variants:
            row = bench_variant(variant, cfg, prog, with_peers=bool(cfg.peers)
                                and variant == "separate")
            rows.append(row)
            prog.write(report.row_summary(row))
        layouts = cartpole_layouts.run_layouts(cfg.envs, cfg.steps, cfg.repeat, prog) \
            if cfg.layouts else None
        sweep = run_sweep(cfg, prog) if cfg.sweep_envs else None
    finally:
        prog.close()
    config = dataclasses.asdict(cfg)
    config["results_dir"] = str(cfg.results_dir)
    config["torch"] = _torch_version()
    config["torch_threads_used"] = _torch_threads()
    payload: dict[str, Any] = {
        "config": config,
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "wall_s": time.perf_counter() - t0,
        "rows": rows,
        "table": report.paper_table(rows, cfg.pipelines),
        "layouts": layouts,
        "scaling": sweep,
    }
    path = harness.save(cfg.out, payload, cfg.results_dir)
    payload = json.loads(path.read_text())
    md = cfg.results_dir / f"{cfg.out}.md"
    md.write_text(report.markdown(payload))
    written = [path, md]
    if cfg.plots:
        import plots

        written += plots.write_all(payload, cfg.results_dir, cfg.out)
    payload["written"] = [str(p) for p in written]
    return payload


def _torch_threads() -> int | None:
    if not peers.torch_available():
        return None
    import torch

    return int(torch.get_num_threads())


def _torch_version() -> str | None:
    if not peers.torch_available():
        return None
    import torch

    return str(torch.__version__)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--envs", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--variants", nargs="+", default=list(cartpole.VARIANTS),
                    choices=cartpole.VARIANTS)
    ap.add_argument("--pipelines", nargs="+", default=list(PIPELINES), choices=PIPELINES)
    ap.add_argument("--peers", nargs="*", default=list(PEERS), choices=PEERS,
                    help="numpy, torch (eager and torch.compile, if installed), c (reference)")
    ap.add_argument("--slow-steps", nargs="*", default=None, metavar="CASE=STEPS",
                    help="fewer steps for slow cases, e.g. baseline:none=2000 numpy=2000 "
                         "(CASE is variant:pipeline, numpy, 'torch eager' or torch.compile)")
    ap.add_argument("--no-compile-times", action="store_true",
                    help="skip cold/warm compile measurements (faster)")
    ap.add_argument("--sweep", nargs="*", type=int, default=None, metavar="ENVS",
                    help="batch sizes for the scaling sweep (default 1, 4, ..., 65536; "
                         "none given: no sweep)")
    ap.add_argument("--sweep-budget", type=int, default=1 << 22,
                    help="about this many env-steps per sweep point")
    ap.add_argument("--sweep-repeat", type=int, default=3)
    ap.add_argument("--torch-threads", type=int, default=None,
                    help="torch.set_num_threads for the torch peers (default: torch's own)")
    ap.add_argument("--no-beyond", action="store_true",
                    help="skip the ablation rows of the hlofuse pipeline's transformations")
    ap.add_argument("--no-layouts", action="store_true",
                    help="skip the state/reset layout table")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--update-readme", action="store_true",
                    help="put the tables into benchmarks/README.md (between its markers)")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="256 envs x 200 steps, 1 repeat, sweep 1..4096 with few steps")
    ap.add_argument("--out", default="cartpole", help="stem of the result files")
    ap.add_argument("--results-dir", default=str(harness.RESULTS))


# Defaults of the committed full run: the slow rows run fewer steps (see the JSON's case_steps).
FULL_SLOW_STEPS = {"torch eager": 1000, "torch.compile": 1000}


def config_from_args(ns: argparse.Namespace) -> Config:
    if ns.slow_steps is None:
        slow = dict(FULL_SLOW_STEPS)
    else:
        slow = {}
        for item in ns.slow_steps:
            case, _, n = item.rpartition("=")
            if not case or not n.isdigit():
                raise SystemExit(f"--slow-steps: expected CASE=STEPS, got {item!r}")
            slow[case] = int(n)
    cfg = Config(envs=ns.envs, steps=ns.steps, repeat=ns.repeat, variants=tuple(ns.variants),
                 pipelines=tuple(ns.pipelines), peers=tuple(ns.peers), slow_steps=slow,
                 compile_times=not ns.no_compile_times,
                 sweep_envs=SWEEP_ENVS if ns.sweep is None else tuple(ns.sweep),
                 sweep_budget=ns.sweep_budget, sweep_repeat=ns.sweep_repeat,
                 plots=not ns.no_plots, out=ns.out, results_dir=Path(ns.results_dir),
                 progress=not ns.no_progress, torch_threads=ns.torch_threads,
                 layouts=not ns.no_layouts, beyond=not ns.no_beyond)
    if ns.quick:
        cfg.envs, cfg.steps, cfg.repeat = 256, 200, 1
        cfg.slow_steps = {}
        cfg.sweep_envs = tuple(e for e in cfg.sweep_envs if e <= 4096)
        cfg.sweep_budget, cfg.sweep_max_steps, cfg.sweep_repeat = 1 << 16, 200, 1
    return cfg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_arguments(ap)
    ns = ap.parse_args(argv)
    return run_main(ns)


def run_main(ns: argparse.Namespace) -> int:
    cfg = config_from_args(ns)
    print(f"CartPole: {cfg.envs} envs x {cfg.steps} steps, best of {cfg.repeat}; variants "
          f"{', '.join(cfg.variants)}; pipelines {', '.join(cfg.pipelines)}; peers "
          f"{', '.join(cfg.peers) or '-'}", flush=True)
    payload = run(cfg)
    print(report.markdown(payload))
    if ns.update_readme:
        readme = Path(__file__).resolve().parent / "README.md"
        if report.update_readme(payload, readme):
            print(f"updated {readme}")
        else:
            print(f"{readme} has no {report.BEGIN} ... {report.END} markers; not updated")
    for p in payload["written"]:
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
