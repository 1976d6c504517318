"""Benchmark: third-party JAX programs through `hlofuse.jit` against `jax.jit` (issue 28).

The programs (`thirdparty/`) come from eight libraries and are written the way those libraries'
own examples and docs write them: PureJaxRL's PPO and DQN, gymnax environments of every family,
brax under each pipeline, MuJoCo MJX, jumanji, diffrax, evosax, flax (CNN, ResNet, LSTM),
equinox and optax. Nothing in them is shaped for hlofuse.

Each program runs in a process of its own (a crash, a hang or a leak stays there; both
compilers start cold: hlofuse with a cache directory of its own that holds only the prebuilt
library, jax.jit with no persistent cache). Before the programs, hlofuse is prepared as an
install leaves it (`prepare`): its modules byte-compiled, and `hlofuse prebuild` run once (the
GEMM units, compiled once per machine as jax's runtime is compiled before its wheel ships;
`--cold-library` leaves it out, and each program compiles them too):

1. jax.jit: the first call (trace, lower, compile, run) and its outputs;
2. hlofuse.jit under each pipeline (default `hlofuse`; `--pipelines` adds `xla`): the first
   call, the backend that ran it (`cpu`, or `interpreter` after a fallback, which counts as a
   failure of the suite) and every warning it gave;
3. correctness: at the small size (a short horizon) every output leaf against jax.jit
   (`thirdparty/common.py: compare`); at the benchmark size too, except for chaotic programs,
   whose fraction of agreeing elements is reported;
4. time: best of interleaved rounds (`harness.interleaved`: the order rotates each round, and
   each timed call follows an untimed call of the same program, as in a loop that calls it
   back to back), inputs as jax device arrays.

Compile time is the first call minus the best steady call. hlofuse compiles the benchmark size
before the small one (which shares kernels with it) and after `jax.clear_caches()`, so its
first call traces, lowers and compiles from nothing, as jax.jit's did. The load average before
and after is recorded with each program.

    python benchmarks/thirdparty_suite.py                      # all programs, hlofuse + xla
    python benchmarks/thirdparty_suite.py --only ppo-cartpole flax-cnn
    python benchmarks/thirdparty_suite.py --report results/thirdparty.json   # the table again
    python benchmarks/thirdparty_suite.py --isa avx2 --out thirdparty_avx2

`--isa avx2` measures both compilers as an AVX2 machine would run them, on any x86 host with
AVX2: hlofuse generates and compiles for x86-64-v3 (`HLOFUSE_TARGET=avx2`) and jax.jit's
XLA for AVX2 (`--xla_cpu_max_isa=AVX2`: no EVEX instructions, no ymm16-31, no mask
registers, which XLA's default code on an AVX-512 host uses even at its 256-bit vector width).
The memory system and clocks stay this host's, which the table's title says. One part of
jax.jit is not limited: the libraries XLA calls for dots and convolutions (YNNPACK, Eigen)
choose their code by CPUID when they run, and ran AVX-512 code under the flag (measured: a
512^3 f32 dot at 256 GFLOP/s on one core, twice an AVX2 core's FMA peak; `XLA_FLAGS` has no
setting for them and YNNPACK reads CPUID itself). Each row records how many of jax.jit's
kernels are such calls (`xla_library_kernels`), and the AVX2 table marks those rows.

Writes results/thirdparty.json, results/thirdparty.md and results/thirdparty.png.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

DEFAULT_PIPELINES = ("hlofuse", "xla")
TIME_BUDGET_S = 4.0  # timing rounds per program: about this long in all, 3 to 15 rounds


def _block(x: Any) -> Any:
    import jax

    return jax.block_until_ready(x)


def run_one(name: str, pipelines: list[str], repeat: int | None) -> dict[str, Any]:
    """Everything measured for one program, in this process."""
    import jax
    from thirdparty import by_name
    from thirdparty.common import agreement, compare

    import hlofuse

    program = by_name(name)
    row: dict[str, Any] = {"program": name, "library": program.library,
                           "source": program.source, "chaotic": program.chaotic,
                           "load_before": os.getloadavg()}
    from hlofuse.backends.cpu import host_target

    row["hlofuse_march"] = host_target.march()
    row["xla_flags"] = os.environ.get("XLA_FLAGS", "")
    small, case = program.build(True), program.build(False)
    row["size"] = case.size
    jitted = jax.jit(case.fn, static_argnums=case.static_argnums)
    t0 = time.perf_counter()
    want = _block(jitted(*case.args))
    row["jax_first_s"] = time.perf_counter() - t0
    want_small = _block(jax.jit(small.fn, static_argnums=small.static_argnums)(*small.args))
    calls: dict[str, Any] = {"jax.jit": lambda: _block(jitted(*case.args))}
    results: dict[str, Any] = {}
    for pipeline in pipelines:
        res: dict[str, Any] = {"status": "ok"}
        results[pipeline] = res
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                # the benchmark size first, with jax's trace and lowering caches emptied: its
                # compile is as cold as jax.jit's was (the small size shares kernels with it)
                jax.clear_caches()
                h = hlofuse.jit(case.fn, static_argnums=case.static_argnums,
                                pipeline=pipeline)
                t0 = time.perf_counter()
                got = _block(h(*case.args))
                res["first_s"] = time.perf_counter() - t0
                res["backend"] = h.backend_for(*case.args)
                hs = hlofuse.jit(small.fn, static_argnums=small.static_argnums,
                                 pipeline=pipeline)
                ok, why = compare(program, hs(*small.args), want_small)
                res["small_ok"], res["small_why"] = ok, why
            res["warnings"] = sorted({str(w.message)[:300] for w in caught
                                      if "hlofuse" in str(w.message)})
            if program.chaotic:
                res["agreement"] = agreement(got, want, program.rtol, program.atol)
                ok_big, why_big = True, ""
            else:
                ok_big, why_big = compare(program, got, want)
            res["bench_ok"], res["bench_why"] = ok_big, why_big
            if not (ok and ok_big):
                res["status"] = "mismatch"
            elif res["backend"] != "cpu":
                res["status"] = "fallback"
            calls[f"hlofuse ({pipeline})"] = (lambda h=h: _block(h(*case.args)))
        except Exception as exc:
            res["status"] = "error"
            res["error"] = f"{type(exc).__name__}: {str(exc)[:600]}"
            res["traceback"] = traceback.format_exc()[-3000:]
    once = {k: harness.timed(fn)[0] for k, fn in calls.items()}  # (warm: compiled above)
    rounds = repeat or max(3, min(15, math.ceil(TIME_BUDGET_S / max(sum(once.values()), 1e-6))))
    best = harness.interleaved(calls, rounds)
    row["rounds"] = rounds
    row["jax_s"] = best["jax.jit"]
    row["jax_compile_s"] = max(row["jax_first_s"] - best["jax.jit"], 0.0)
    for pipeline, res in results.items():
        key = f"hlofuse ({pipeline})"
        if key in best:
            res["run_s"] = best[key]
            res["ratio"] = best["jax.jit"] / best[key]
            res["compile_s"] = max(res["first_s"] - best[key], 0.0)
    row["pipelines"] = results
    row["xla_library_kernels"] = xla_library_kernels(jitted, case.args)
    row["load_after"] = os.getloadavg()
    return row


def xla_library_kernels(jitted: Any, args: tuple[Any, ...]) -> dict[str, int]:
    """How many of jax.jit's kernels are library calls (its compiled HLO, from jax's cache):
    YNNPACK fusions (the dots of jaxlib 0.10 on x86) and plain dots and convolutions (Eigen).
    These libraries pick their kernels by CPUID when they run: `--xla_cpu_max_isa=AVX2`
    limits the code XLA generates, not theirs, so under `--isa avx2` on an AVX-512 host they
    still run AVX-512 code (a 512^3 f32 dot at 256 GFLOP/s on one core of this AMD EPYC, twice
    an AVX2 core's FMA peak)."""
    import re

    text = jitted.lower(*args).compile().as_text()
    return {"ynn_fusions": text.count("__ynn_fusion"),
            "dots": len(re.findall(r" dot\(", text)),
            "convolutions": len(re.findall(r" convolution\(", text))}


def _worker(args: argparse.Namespace) -> None:
    row = run_one(args.worker, args.pipelines, args.repeat)
    print("\nRESULT " + json.dumps(row, default=str), flush=True)


def prepare(seed: str, isa: str = "native") -> dict[str, Any]:
    """What every program's process starts from, as an installed hlofuse would have it:
    hlofuse's modules byte-compiled (an editable install with PYTHONDONTWRITEBYTECODE set
    compiles them from source at each import, 0.2-0.4 s of a first call that no installed
    copy pays) and the prebuilt library built for this machine into `seed`
    (`hlofuse prebuild`: the GEMM units, compiled once per machine, not per program), which
    each program's empty cache is seeded with. Returns what was done, for the JSON."""
    import compileall

    import hlofuse

    t0 = time.perf_counter()
    compileall.compile_dir(str(Path(hlofuse.__file__).parent), quiet=1)
    compiled_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "hlofuse", "prebuild"], check=True,
                   capture_output=True, env={**isa_env(isa), "HLOFUSE_CACHE_DIR": seed})
    return {"byte_compiled_s": round(compiled_s, 2),
            "prebuild_s": round(time.perf_counter() - t0, 2)}


def run_isolated(name: str, pipelines: list[str], repeat: int | None, timeout: float,
                 seed: str | None = None, isa: str = "native") -> dict[str, Any]:
    """`run_one` in a fresh process with an hlofuse cache of its own: empty, or a copy of
    `seed` (the prebuilt library alone, `prepare`)."""
    with tempfile.TemporaryDirectory(prefix="hlofuse-suite-") as cache:
        if seed is not None:
            shutil.copytree(seed, cache, dirs_exist_ok=True)
        env = {**isa_env(isa), "HLOFUSE_CACHE_DIR": cache}
        cmd = [sys.executable, __file__, "--worker", name, "--pipelines", *pipelines]
        if repeat:
            cmd += ["--repeat", str(repeat)]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return {"program": name, "status": "timeout", "wall_s": timeout}
        wall = time.perf_counter() - t0
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            row: dict[str, Any] = json.loads(line[len("RESULT "):])
            row["wall_s"] = wall
            return row
    return {"program": name, "status": "crash", "returncode": proc.returncode,
            "stderr": proc.stderr[-3000:], "wall_s": wall}


def status(row: dict[str, Any], pipeline: str = "hlofuse") -> str:
    if "pipelines" not in row:
        return str(row.get("status", "?"))
    return str(row["pipelines"].get(pipeline, {}).get("status", "-"))


# What `--isa` sets in each process (prepare's prebuild, and every program's worker).
ISA_ENV: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"HLOFUSE_TARGET": "avx2", "XLA_FLAGS": "--xla_cpu_max_isa=AVX2"},
}


def isa_env(isa: str) -> dict[str, str]:
    """os.environ with `--isa`'s settings (XLA_FLAGS appended to any the caller set)."""
    env = dict(os.environ)
    for key, value in ISA_ENV[isa].items():
        env[key] = f"{env[key]} {value}" if key == "XLA_FLAGS" and env.get(key) else value
    return env


def cpu_kind(isa: str = "native") -> str:
    if isa != "native":
        return f"{isa.upper()} code on an {cpu_kind()} host"
    try:
        flags = Path("/proc/cpuinfo").read_text().split("flags", 1)[1].split("\n", 1)[0]
    except (OSError, IndexError):
        return "?"
    return "AVX-512" if "avx512f" in flags else ("AVX2" if "avx2" in flags else "no AVX2")


def table(payload: dict[str, Any]) -> str:
    rows = payload["rows"]
    pipelines = payload["pipelines"]
    head = ["program", "library", "size", "status", "backend", "vs jax.jit",
            *[f"`{p}` vs jax.jit" for p in pipelines[1:]], "compile s (jax.jit)", "jax.jit s"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        res = row.get("pipelines", {})
        main = res.get(pipelines[0], {})
        cells = [row["program"] + _library_mark(row, payload), row.get("library", ""),
                 row.get("size", ""),
                 status(row, pipelines[0]), main.get("backend", "-"), _ratio(main)]
        cells += [_ratio(res.get(p, {})) for p in pipelines[1:]]
        comp = main.get("compile_s")
        cells.append(f"{comp:.1f} ({row['jax_compile_s']:.1f})" if comp is not None else "-")
        cells.append(f"{row['jax_s']:.4f}" if "jax_s" in row else "-")
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
    ratios = [r["pipelines"][pipelines[0]]["ratio"] for r in rows
              if "ratio" in r.get("pipelines", {}).get(pipelines[0], {})]
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        out.append("")
        out.append(f"{len(rows)} programs; {sum(status(r, pipelines[0]) == 'ok' for r in rows)} "
                   f"ok; geomean `{pipelines[0]}` vs jax.jit {geo:.2f}x over {len(ratios)} "
                   f"timed; slowest {min(ratios):.2f}x.")
    if any(_library_mark(row, payload) for row in rows):
        out.append("")
        out.append("\\* jax.jit's dots or convolutions here are library calls (YNNPACK fusions or "
                   "Eigen: `xla_library_kernels` in the JSON) that choose their code by CPUID "
                   "when they run, so they ran AVX-512 code on this host whatever `XLA_FLAGS` "
                   "said, where hlofuse's ran AVX2 code; on an AVX2 machine both would, so "
                   "these rows understate hlofuse by up to those calls' share of jax.jit's "
                   "time. † jax.jit's only library calls here are YNNPACK fusions of "
                   "elementwise ops or reductions, CPUID-dispatched too.")
    return "\n".join(out)


def _library_mark(row: dict[str, Any], payload: dict[str, Any]) -> str:
    """Under `--isa` other than native: "*" where jax.jit's dots or convolutions are library
    calls (CPUID-dispatched), "†" where its only library calls are other YNNPACK fusions."""
    lib = row.get("xla_library_kernels", {})
    if payload.get("isa", "native") == "native":
        return ""
    if lib.get("dots", 0) + lib.get("convolutions", 0):
        return "*"
    return "†" if lib.get("ynn_fusions", 0) else ""


def _ratio(res: dict[str, Any]) -> str:
    if "ratio" not in res:
        return res.get("status", "-")
    mark = "" if res.get("status") == "ok" else f" ({res.get('status')})"
    return f"{res['ratio']:.2f}x{mark}"


def plot(payload: dict[str, Any], path: Path) -> Path:
    from plots import _plt

    plt = _plt()
    pipelines = payload["pipelines"]
    rows = [r for r in payload["rows"] if "ratio" in r.get("pipelines", {}).get(pipelines[0], {})]
    fig, ax = plt.subplots(figsize=(10, max(4, 0.32 * len(rows) + 1.5)))
    names = [r["program"] for r in rows]
    height = 0.8 / len(pipelines)
    for k, p in enumerate(pipelines):
        vals = [r["pipelines"].get(p, {}).get("ratio", float("nan")) for r in rows]
        ax.barh([i + k * height for i in range(len(rows))], vals, height=height,
                label=f"hlofuse `{p}`")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(rows))], names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("speed vs jax.jit (higher is faster; log scale)")
    m = payload["machine"]
    ax.set_title(f"third-party programs: hlofuse.jit vs jax.jit ({m.get('cpu', '?')}, "
                 f"{payload.get('cpu_kind', '?')}, {m.get('cores', '?')} cores)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", help="program names (default: all)")
    ap.add_argument("--pipelines", nargs="*", default=list(DEFAULT_PIPELINES))
    ap.add_argument("--repeat", type=int, help="timing rounds (default: by run time)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per program")
    ap.add_argument("--out", default="thirdparty", help="results/<out>.{json,md,png}")
    ap.add_argument("--report", help="print the table of a saved JSON payload")
    ap.add_argument("--cold-library", action="store_true",
                    help="no `hlofuse prebuild` first: each program compiles the GEMM too")
    ap.add_argument("--isa", choices=sorted(ISA_ENV), default="native",
                    help="avx2: both compilers generate AVX2 code (on an AVX-512 host too)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args)
        return
    if args.report:
        print(table(json.loads(Path(args.report).read_text())))
        return
    from thirdparty import PROGRAMS

    names = args.only or [p.name for p in PROGRAMS]
    rows = []
    t0 = time.perf_counter()
    seed_dir = tempfile.TemporaryDirectory(prefix="hlofuse-suite-seed-")
    seed = None if args.cold_library else seed_dir.name
    prepared = prepare(seed_dir.name, args.isa) if seed else {}
    for name in names:
        row = run_isolated(name, args.pipelines, args.repeat, args.timeout, seed, args.isa)
        rows.append(row)
        res = row.get("pipelines", {}).get(args.pipelines[0], {})
        print(f"{name:40s} {status(row, args.pipelines[0]):9s} "
              f"{_ratio(res):>16s}  ({row.get('wall_s', 0):.0f} s)", flush=True)
        if status(row, args.pipelines[0]) not in ("ok",):
            detail = res.get("error") or res.get("small_why") or res.get("bench_why") or \
                row.get("stderr", "")[-400:]
            print(f"    {detail}", flush=True)
    seed_dir.cleanup()
    payload = {"pipelines": args.pipelines, "cpu_kind": cpu_kind(args.isa), "isa": args.isa,
               "isa_env": ISA_ENV[args.isa], "rows": rows,
               "prepared": prepared, "wall_s": time.perf_counter() - t0}
    path = harness.save(args.out, payload)
    text = table(json.loads(path.read_text()))
    path.with_suffix(".md").write_text(text + "\n")
    plot(json.loads(path.read_text()), path.with_suffix(".png"))
    print(text)


if __name__ == "__main__":
    main()
