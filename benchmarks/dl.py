"""Benchmark: deep-learning programs (JAX, flax, optax) on hlofuse's CPU backend vs jax.jit,
on a quiet machine and with one core busy.

Programs: `dl_programs.py` (softmax, layernorm, layernorm+GELU, a GELU MLP, attention, a flax
MLP forward and train step, an optax AdamW update, GPT-style train steps at 2 and 8 layers).

For each program:
1. lower it with JAX, compile it with hlofuse (the default `hlofuse` pipeline, cpu backend)
   and with jax.jit;
2. check every hlofuse output against jax.jit's (the program's tolerance) before timing;
3. time both, interleaved (best of --repeat samples; a sample is as many calls as last about
   --min-ms), with the inputs already where each wants them (numpy arrays for hlofuse, jax
   device arrays for jax.jit): computation, not transfers;
4. the same with one core busy: the benchmark starts a process spinning on one core (pinned to
   it) and stops it afterwards.
Peers: `--gemm both` (the default) adds hlofuse with the GEMM it does not use by default
(`blas.active()`: OpenBLAS, or our own when OpenBLAS's kernels are narrower than the CPU)
bound by hand. torch.compile runs the programs that have a torch version (softmax, the
layernorms, the GELU MLP, attention: not the flax/optax ones) where torch is installed
(`pip install torch==2.13.0`, the CPU wheel; not with --quick or --no-torch), checked against
jax.jit like hlofuse.

    python benchmarks/dl.py [--quick] [--only NAME ...] [--repeat 7] [--gemm default|both]
                            [--conditions quiet busy] [--profile] [--no-plot] [--update-readme]

Writes results/dl.json (results/dl_quick.json with --quick) and results/dl.png. `--profile`
adds hlofuse's per-kernel profile (quiet) of every program, its top kernels by class (dot,
reduction, elementwise) in the JSON. Ratios are jax.jit time / hlofuse time (> 1: hlofuse is
faster); compare them within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import dl_programs  # noqa: E402
import harness  # noqa: E402

import hlofuse  # noqa: E402
from hlofuse.backends.cpu.library import blas  # noqa: E402

CONDITIONS = ("quiet", "busy")


# ----- the busy core ------------------------------------------------------------------------

@contextlib.contextmanager
def busy_core() -> Iterator[int]:
    """A process spinning on one core (the last this process may use), for the duration."""
    cores = sorted(os.sched_getaffinity(0))
    core = cores[-1]
    code = (f"import os\nos.sched_setaffinity(0, {{{core}}})\n"
            "x = 0\nwhile True:\n    x += 1\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    time.sleep(0.3)  # let it start spinning
    try:
        yield core
    finally:
        proc.kill()
        proc.wait()


# ----- one program --------------------------------------------------------------------------

def _calls_for(fn: Callable[[], Any], min_s: float) -> int:
    """How many calls make a sample of at least `min_s` (after one warm-up call)."""
    fn()
    t0 = time.perf_counter()
    fn()
    dt = max(time.perf_counter() - t0, 1e-7)
    return max(1, math.ceil(min_s / dt))


def _sampled(fn: Callable[[], Any], n: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(n):
            fn()
    return run


class Case:
    """A program compiled by hlofuse and jax.jit, its inputs, and the callables to time."""

    def __init__(self, p: dl_programs.Program, with_torch: bool) -> None:
        import jax

        self.p = p
        args = p.make_args()
        self.flat = [np.asarray(a, order="C") for a in jax.tree_util.tree_leaves(args)]
        t0 = time.perf_counter()
        lowered = jax.jit(p.fn, keep_unused=True).lower(*args)
        text = lowered.as_text(dialect="hlo")
        t1 = time.perf_counter()
        self.exe = hlofuse.compile(text, backend="cpu")  # the default pipeline (hlofuse)
        t2 = time.perf_counter()
        self.jax_compiled = lowered.compile()
        t3 = time.perf_counter()
        self.compile_s = {"hlofuse": (t1 - t0) + (t2 - t1), "jax.jit": (t1 - t0) + (t3 - t2)}
        self.dev = jax.device_put(args)
        native = self.exe._runner  # the cpu backend's CpuExecutable
        self.lib = native._lib
        self.kernels = len(native.program.kernels)
        self.torch: Callable[[], Any] | None = None
        if with_torch and p.torch_fn is not None:
            import torch

            tensors = [torch.from_numpy(a.copy()) for a in self.flat]
            compiled = torch.compile(p.torch_fn)

            def run_torch() -> Any:
                with torch.inference_mode():
                    return compiled(*tensors)
            t4 = time.perf_counter()
            run_torch()  # compiles
            self.compile_s["torch.compile"] = time.perf_counter() - t4
            self.torch = run_torch

    def hlofuse(self) -> Any:
        return self.exe(*self.flat)

    def hlofuse_own_gemm(self) -> Any:
        blas.unbind(self.lib)
        try:
            return self.exe(*self.flat)
        finally:
            blas.bind(self.lib)

    def hlofuse_openblas(self) -> Any:
        blas.bind(self.lib, blas.find())
        try:
            return self.exe(*self.flat)
        finally:
            blas.bind(self.lib)

    def jax(self) -> Any:
        import jax

        return jax.block_until_ready(self.jax_compiled(*self.dev))

    def check(self) -> dict[str, Any]:
        """hlofuse's outputs against jax.jit's: the largest error and whether it is within the
        program's tolerance. Raises if not."""
        import jax

        got = self.hlofuse()
        want = [np.asarray(x) for x in jax.tree_util.tree_leaves(self.jax())]
        if len(got) != len(want):
            raise AssertionError(f"{self.p.name}: {len(got)} outputs, jax.jit has {len(want)}")
        worst = 0.0
        for g, w in zip(got, want, strict=True):
            g64, w64 = np.asarray(g, np.float64), np.asarray(w, np.float64)
            np.testing.assert_allclose(g64, w64, rtol=self.p.rtol, atol=self.p.atol,
                                       err_msg=f"{self.p.name}: hlofuse vs jax.jit")
            if g64.size:
                worst = max(worst, float(np.max(np.abs(g64 - w64))))
        if self.torch is not None:
            np.testing.assert_allclose(self.torch().numpy(), np.asarray(want[0]),
                                       rtol=self.p.rtol, atol=self.p.atol,
                                       err_msg=f"{self.p.name}: torch.compile vs jax.jit")
        return {"outputs": len(got), "max_abs_err": worst, "atol": self.p.atol,
                "rtol": self.p.rtol}

    def peers(self, gemm: str) -> dict[str, Callable[[], Any]]:
        out: dict[str, Callable[[], Any]] = {"hlofuse": self.hlofuse, "jax.jit": self.jax}
        if gemm == "both" and blas.find() is not None:  # the one that is not the default
            if blas.active() is None:
                out["hlofuse (OpenBLAS)"] = self.hlofuse_openblas
            else:
                out["hlofuse (own GEMM)"] = self.hlofuse_own_gemm
        if self.torch is not None:
            out["torch.compile"] = self.torch
        return out


def time_case(case: Case, gemm: str, repeat: int, min_s: float) -> dict[str, float]:
    """Seconds per call of each peer: best of `repeat` interleaved samples."""
    peers = case.peers(gemm)
    calls = {name: _calls_for(fn, min_s) for name, fn in peers.items()}
    samples = {name: _sampled(fn, calls[name]) for name, fn in peers.items()}
    best = harness.interleaved(samples, repeat)
    return {name: best[name] / calls[name] for name in peers}


# ----- profile ------------------------------------------------------------------------------

def kernel_class(kernel: str, kind: str) -> str:
    if kind == "dot" or kernel.startswith("dot") or "_dot" in kernel:
        return "dot"
    if kind in ("input", "reduce") or "reduce" in kernel:
        return "reduction"
    return "elementwise"


def profile_case(case: Case, top: int = 8, runs: int = 7) -> dict[str, Any]:
    """hlofuse's per-kernel profile: each kernel's best time per call over `runs` profiled runs
    (on a loaded machine the best run of a kernel is the one the OS did not interrupt)."""
    best: dict[str, Any] = {}
    wall = math.inf
    for _ in range(runs):
        prof = case.exe.profile(*case.flat)
        wall = min(wall, prof.wall_ns)
        for r in prof.rows:
            if r.calls and (r.kernel not in best or r.ns_per_call < best[r.kernel][0]):
                best[r.kernel] = (r.ns_per_call, r)
    rows = sorted(best.values(), key=lambda x: -x[0] * x[1].calls)
    total = sum(ns * r.calls for ns, r in rows) or 1.0
    by_class: dict[str, float] = {}
    for ns, r in rows:
        c = kernel_class(r.kernel, r.kind)
        by_class[c] = by_class.get(c, 0.0) + ns * r.calls / total
    return {
        "wall_ms": wall / 1e6,
        "kernel_ms": total / 1e6,
        "share_by_class": by_class,
        "top": [{"kernel": r.kernel, "kind": r.kind, "class": kernel_class(r.kernel, r.kind),
                 "calls_per_run": r.calls, "us_per_call": ns / 1e3,
                 "share": ns * r.calls / total,
                 "gb_per_s": r.bytes_per_call / ns if ns else 0.0} for ns, r in rows[:top]],
    }


# ----- report -------------------------------------------------------------------------------

def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def table(rows: list[dict[str, Any]], peers: list[str]) -> str:
    extra = [p for p in peers if p not in ("hlofuse", "jax.jit")]
    head = ["program", "kernels"]
    for cond in CONDITIONS:
        head += [f"hlofuse {cond} ms", f"jax.jit {cond} ms", f"vs jax.jit {cond}"]
        head += [f"{p} vs jax.jit {cond}" for p in extra]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["program"], str(r["kernels"])]
        for cond in CONDITIONS:
            t = r["time_s"].get(cond)
            if t is None:
                cells += ["-"] * (3 + len(extra))
                continue
            cells += [f"{t['hlofuse'] * 1e3:.3f}", f"{t['jax.jit'] * 1e3:.3f}",
                      f"{t['jax.jit'] / t['hlofuse']:.2f}x"]
            cells += [f"{t['jax.jit'] / t[p]:.2f}x" if p in t else "-" for p in extra]
        lines.append("| " + " | ".join(cells) + " |")
    geo = ["geomean", ""]
    for cond in CONDITIONS:
        ratios = [r["time_s"][cond]["jax.jit"] / r["time_s"][cond]["hlofuse"]
                  for r in rows if cond in r["time_s"]]
        geo += ["", "", f"{geomean(ratios):.2f}x"]
        for p in extra:
            rp = [r["time_s"][cond]["jax.jit"] / r["time_s"][cond][p]
                  for r in rows if cond in r["time_s"] and p in r["time_s"][cond]]
            geo.append(f"{geomean(rp):.2f}x")
    lines.append("| " + " | ".join(geo) + " |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["program"] for r in rows]
    x = np.arange(len(names))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.2))
    width = 0.38
    for k, cond in enumerate(CONDITIONS):
        ratios = [r["time_s"][cond]["jax.jit"] / r["time_s"][cond]["hlofuse"]
                  if cond in r["time_s"] else np.nan for r in rows]
        bars = ax1.bar(x + (k - 0.5) * width, ratios, width, label=cond)
        ax1.bar_label(bars, fmt="%.2f", fontsize=7)
    ax1.axhline(1.0, color="black", lw=0.8)
    ax1.set_yscale("log")
    ax1.set_ylabel("speed vs jax.jit (jax.jit time / hlofuse time)")
    ax1.set_title("hlofuse vs jax.jit, same condition")
    ax1.set_xticks(x, names, rotation=35, ha="right", fontsize=8)
    ax1.legend()
    for k, peer in enumerate(("hlofuse", "jax.jit")):
        slow = [r["time_s"]["busy"][peer] / r["time_s"]["quiet"][peer]
                if "busy" in r["time_s"] and "quiet" in r["time_s"] else np.nan for r in rows]
        bars = ax2.bar(x + (k - 0.5) * width, slow, width, label=peer)
        ax2.bar_label(bars, fmt="%.2f", fontsize=7)
    ax2.axhline(1.0, color="black", lw=0.8)
    ax2.axhline(2.0, color="grey", lw=0.8, ls="--")
    ax2.set_yscale("log")
    ax2.set_ylabel("busy time / quiet time")
    ax2.set_title("slowdown with one core busy")
    ax2.set_xticks(x, names, rotation=35, ha="right", fontsize=8)
    ax2.legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def title(info: dict[str, Any], m: dict[str, Any]) -> str:
    gemm = info["default_gemm"] + (f" (OpenBLAS kernels: {info['blas']['corename']})"
                                   if info["blas"] else "")
    load = ", ".join(f"{x:.1f}" for x in info["load_before_after"][0])
    env = "".join(f"; {k}={v}" for k, v in sorted(info.get("env", {}).items()))
    return (f"{m['cpu']}, {m['cores']} cores, load average before {load}; hlofuse "
            f"{m.get('hlofuse_commit')}, jax {m.get('jax')}; dots: {gemm}{env}")


def all_peers(rows: list[dict[str, Any]]) -> list[str]:
    peers: list[str] = []
    for r in rows:
        for t in r["time_s"].values():
            peers += [p for p in t if p not in peers]
    return peers


def replot(path: Path, readme: bool) -> int:
    """Redraw the plot (and the table; with `readme`, README's) from a results file."""
    import json

    data = json.loads(path.read_text())
    png = path.with_suffix(".png")
    plot(data["rows"], png, title(data, data["machine"]))
    print(f"wrote {png}")
    data["table"] = table(data["rows"], all_peers(data["rows"]))
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(data["table"])
    if readme:
        update_readme(data["table"], data, data["machine"])
    return 0


def update_readme(text: str, info: dict[str, Any], m: dict[str, Any]) -> None:
    path = HERE / "README.md"
    readme = path.read_text()
    begin, end = "<!-- dl-table:begin -->", "<!-- dl-table:end -->"
    if begin not in readme or end not in readme:
        return
    load = " / ".join(", ".join(f"{x:.1f}" for x in la) for la in info["load_before_after"])
    head = (f"Latest run: {m['cpu']}, {m['cores']} cores; {m['date']}; hlofuse "
            f"{m.get('hlofuse_commit')}, jax {m.get('jax')}; dots: {info['default_gemm']}; "
            f"best of {info['repeat']} interleaved samples of >= {info['min_sample_s'] * 1e3:.0f}"
            f" ms; load average before/after {load}; whole run {info['wall_s']:.0f} s. "
            "Times in ms; \"vs jax.jit\" = jax.jit time / hlofuse time.")
    a, rest = readme.split(begin, 1)
    _, b = rest.split(end, 1)
    path.write_text(f"{a}{begin}\n{head}\n\n{text}\n{end}{b}")


# ----- main ---------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="fewer programs (no 8-layer GPT) and samples: a smoke run, ~2 min")
    ap.add_argument("--only", nargs="*", help="program names")
    ap.add_argument("--repeat", type=int, default=None, help="samples per peer (default 7)")
    ap.add_argument("--min-ms", type=float, default=None, help="length of a sample")
    ap.add_argument("--gemm", choices=("default", "both"), default="both")
    ap.add_argument("--conditions", nargs="*", default=list(CONDITIONS), choices=CONDITIONS,
                    help="conditions to time (none: only check, and --profile)")
    ap.add_argument("--profile", action="store_true", help="per-kernel profiles (quiet)")
    ap.add_argument("--no-torch", action="store_true",
                    help="no torch.compile peers (default: where torch is installed)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--replot", metavar="JSON", help="only redraw the plot of a results file")
    ap.add_argument("--update-readme", action="store_true",
                    help="rewrite the table in benchmarks/README.md (between its dl-table marks)")
    ap.add_argument("--out", default=None, help="results name (default dl or dl_quick)")
    ap.add_argument("--results-dir", default=None)
    args = ap.parse_args(argv)
    if args.replot:
        return replot(Path(args.replot), args.update_readme)
    repeat = args.repeat or (3 if args.quick else 7)
    min_s = (args.min_ms or (20 if args.quick else 50)) / 1e3
    progs = [p for p in dl_programs.PROGRAMS
             if (not args.quick or p.quick) and (not args.only or p.name in args.only)]
    if not progs:
        ap.error("no program selected")
    t_start = time.perf_counter()
    load_before = os.getloadavg()
    found = blas.find()
    with_torch = False
    if not args.no_torch and not args.quick:
        try:
            import torch

            with_torch = True
            torch_version = torch.__version__
        except ImportError:
            pass
    cases: list[Case] = []
    rows: list[dict[str, Any]] = []
    for p in progs:
        print(f"compiling {p.name} ...", file=sys.stderr, flush=True)
        case = Case(p, with_torch)
        row: dict[str, Any] = {"program": p.name, "kernels": case.kernels,
                               "compile_s": case.compile_s, "check": case.check(),
                               "time_s": {}}
        cases.append(case)
        rows.append(row)
    peers: list[str] = []
    for cond in args.conditions:
        ctx = busy_core() if cond == "busy" else contextlib.nullcontext()
        with ctx:
            for case, row in zip(cases, rows, strict=True):
                print(f"timing {case.p.name} ({cond}) ...", file=sys.stderr, flush=True)
                row["time_s"][cond] = time_case(case, args.gemm, repeat, min_s)
                peers += [p for p in row["time_s"][cond] if p not in peers]
    if args.profile:
        for case, row in zip(cases, rows, strict=True):
            row["profile"] = profile_case(case)
    info = {
        "conditions": {"quiet": "nothing started by the benchmark",
                       "busy": "a process spinning on one core, pinned to it"},
        "repeat": repeat, "min_sample_s": min_s, "quick": args.quick,
        "blas": None if found is None else {"name": found.name, "version": found.version,
                                            "corename": found.corename},
        "default_gemm": "own GEMM" if blas.active() is None else "OpenBLAS",
        "torch": torch_version if with_torch else None,
        "openblas_env": {k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_")},
        "env": {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "HLOFUSE_"))},
        "load_before_after": [load_before, os.getloadavg()],
        "wall_s": time.perf_counter() - t_start,
    }
    text = table(rows, peers) if peers else ""
    name = args.out or ("dl_quick" if args.quick else "dl")
    out = harness.save(name, {**info, "table": text, "rows": rows}, args.results_dir)
    print(text)
    print(f"wrote {out}")
    if not args.no_plot and all(c in rows[0]["time_s"] for c in CONDITIONS):
        png = out.with_suffix(".png")
        plot(rows, png, title(info, harness.machine()))
        print(f"wrote {png}")
    if args.update_readme and text:
        update_readme(text, info, harness.machine())
    if args.profile:
        for row in rows:
            pr = row["profile"]
            shares = ", ".join(f"{k} {v:.0%}" for k, v in sorted(pr["share_by_class"].items()))
            print(f"\n{row['program']}: {pr['kernel_ms']:.3f} ms in kernels ({shares})")
            for k in pr["top"][:5]:
                print(f"  {k['share']:6.1%}  {k['class']:<11} {k['kernel']:<40} "
                      f"{k['us_per_call']:9.1f} us x {k['calls_per_run']:.0f}  "
                      f"{k['gb_per_s']:.2f} GB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
