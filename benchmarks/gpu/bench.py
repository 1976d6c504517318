"""The gpu backend against its peers on one GPU, in one process (issue 32's case study).

    python benchmarks/gpu/bench.py [--out DIR] [--smoke]

Sections (each peer on the same GPU, arrays already on the device, times the median of
repeated runs after a warm-up, synchronised; ratios are peer time / hlofuse time):

* `cartpole`: the paper's CartPole, 2048 environments x 10,000 steps, as the paper wrote it
  (`baseline`: threefry inside the scan) and with separate state and precomputed resets
  (`separate`): jax.jit (XLA GPU), hlofuse's `xla` and `hlofuse` pipelines on
  `backend="gpu"`, torch.compile of the same step (the time loop in Python), and a hand-written
  CUDA CartPole (CuPy RawKernel: one thread per environment, the time loop inside, the state
  in registers; `separate` only). Kernels per step: launches counted by hlofuse's driver, and
  the kernels of XLA GPU's optimised while body (its compiled HLO).
* `sweep`: `separate`, 100 steps, 1 to 1M environments: jax.jit, hlofuse, hand CUDA.
* `dl`: the deep-learning programs of `benchmarks/dl_programs.py` (softmax, layernorm,
  layernorm+GELU, a GELU MLP, attention, a flax MLP train step, the flax+optax GPT step):
  jax.jit against hlofuse's compiled module run on torch tensors (`hlofuse.compile(...,
  backend="gpu")`); a program the gpu backend refuses is listed with the refusal.

Writes DIR/gpu.json (GPU, driver and versions named), DIR/gpu.md and DIR/gpu_sweep.png.
`--smoke`: tiny sizes, for checking the script on a machine without a GPU (TRITON_INTERPRET=1).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

import hlofuse  # noqa: E402
from hlofuse.examples import cartpole  # noqa: E402

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
DEVICE = "cuda" if CUDA else "cpu"

import jax  # noqa: E402


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], budget: float, block: Callable[[Any], None]) -> float:
    """Median seconds of `fn()` (synchronised by `block`), after a warm-up, within `budget`
    (at least three runs, or one where a run alone takes longer than the budget)."""
    t = time.perf_counter()
    block(fn())
    least = 1 if time.perf_counter() - t > budget else 3
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < least or (time.perf_counter() - start < budget and len(times) < 50):
        t = time.perf_counter()
        block(fn())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def jax_block(x: Any) -> None:
    jax.block_until_ready(x)


def torch_block(_: Any) -> None:
    sync()


def to_torch(a: Any) -> Any:
    return torch.from_dlpack(a) if hasattr(a, "__dlpack__") else torch.as_tensor(a)


def xla_kernels_per_step(fn: Callable[..., Any], args: tuple[Any, ...]) -> int | None:
    """Kernels XLA GPU launches per iteration of the program's while loop: the fusions, custom
    calls and other kernel instructions of its compiled while body."""
    try:
        text = jax.jit(fn).lower(*args).compile().as_text()
    except Exception:
        return None
    from hlofuse.text import parse

    module = parse(text)
    best = None
    for w in (i for c in module.computations for i in c.instructions
              if i.opcode.value == "while"):
        body = w.attrs.get("body")
        n = sum(1 for i in body.instructions if i.opcode.value in (
            "fusion", "custom-call", "convolution", "dot", "sort", "scatter", "reduce",
            "copy", "dynamic-update-slice", "rng-bit-generator"))
        best = max(best or 0, n)
    return best


# ----- hand-written CUDA CartPole ---------------------------------------------------------------

CUDA_CARTPOLE = r"""
extern "C" __global__ void cartpole(float *x, float *xd, float *th, float *thd, float *total,
                                    int *episodes, const int *actions, const float *rx,
                                    const float *rxd, const float *rth, const float *rthd,
                                    int n, int steps) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = xd[i], c = th[i], d = thd[i], r = 0.0f; int e = 0;
  for (int t = 0; t < steps; ++t) {
    long k = (long)t * n + i;
    float force = actions[k] == 1 ? 10.0f : -10.0f;
    float ct = cosf(c), st = sinf(c);
    float temp = (force + 0.05f * d * d * st) / 1.1f;
    float thacc = (9.8f * st - ct * temp) / ((4.0f / 3.0f - 0.1f * ct * ct / 1.1f) * 0.5f);
    float xacc = temp - 0.05f * thacc * ct / 1.1f;
    a = a + 0.02f * b; b = b + 0.02f * xacc; c = c + 0.02f * d; d = d + 0.02f * thacc;
    int done = (fabsf(a) > 2.4f) || (fabsf(c) > 0.20943951023931953f);
    if (done) { a = rx[k]; b = rxd[k]; c = rth[k]; d = rthd[k]; }
    r += 1.0f; e += done;
  }
  x[i] = a; xd[i] = b; th[i] = c; thd[i] = d; total[i] = r; episodes[i] = e;
}
"""


def hand_cuda(args: list[Any], n: int, steps: int) -> Callable[[], Any] | None:
    """The hand-written kernel on copies of the state (CuPy), or None without CuPy / a GPU."""
    if not CUDA:
        return None
    try:
        import cupy
    except ImportError:
        return None
    kernel = cupy.RawKernel(CUDA_CARTPOLE, "cartpole")
    ins = [cupy.from_dlpack(to_torch(a)) for a in args]
    state0 = [s.copy() for s in ins[:4]]
    total = cupy.zeros(n, cupy.float32)
    episodes = cupy.zeros(n, cupy.int32)

    def run() -> Any:
        state = [s.copy() for s in state0]
        threads = 128
        kernel(((n + threads - 1) // threads,), (threads,),
               (*state, total, episodes, *ins[4:], np.int32(n), np.int32(steps)))
        return state

    return run


# ----- torch.compile of the same CartPole step ----------------------------------------------------


def torch_compile_cartpole(args: list[Any], steps: int) -> Callable[[], Any] | None:
    try:
        def step(x: Any, xd: Any, th: Any, thd: Any, total: Any, eps: Any, act: Any,
                 rx: Any, rxd: Any, rth: Any, rthd: Any) -> tuple[Any, ...]:
            force = torch.where(act == 1, 10.0, -10.0)
            ct, st = torch.cos(th), torch.sin(th)
            temp = (force + 0.05 * thd * thd * st) / 1.1
            thacc = (9.8 * st - ct * temp) / ((4.0 / 3.0 - 0.1 * ct * ct / 1.1) * 0.5)
            xacc = temp - 0.05 * thacc * ct / 1.1
            x, xd, th, thd = x + 0.02 * xd, xd + 0.02 * xacc, th + 0.02 * thd, thd + 0.02 * thacc
            done = (x.abs() > 2.4) | (th.abs() > 0.20943951023931953)
            x, xd = torch.where(done, rx, x), torch.where(done, rxd, xd)
            th, thd = torch.where(done, rth, th), torch.where(done, rthd, thd)
            return x, xd, th, thd, total + 1.0, eps + done.to(torch.int32)

        compiled = torch.compile(step)
        t = [to_torch(a) for a in args]

        def run() -> Any:
            x, xd, th, thd = (s.clone() for s in t[:4])
            total = torch.zeros_like(x)
            eps = torch.zeros(x.shape, dtype=torch.int32, device=x.device)
            for k in range(steps):
                x, xd, th, thd, total, eps = compiled(x, xd, th, thd, total, eps, t[4][k],
                                                      t[5][k], t[6][k], t[7][k], t[8][k])
            return x

        return run
    except Exception:
        return None


# ----- sections ----------------------------------------------------------------------------------


def device_args(args: tuple[Any, ...]) -> list[Any]:
    return [jax.device_put(np.asarray(a)) for a in args]


def hlofuse_gpu(fn: Callable[..., Any], args: list[Any], pipeline: str
                ) -> tuple[Callable[[], Any], Any, float]:
    text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
    t = time.perf_counter()
    exe = hlofuse.compile(text, pipeline, backend="gpu")
    targs = [to_torch(a) for a in args]
    exe(*targs)
    sync()
    compile_s = time.perf_counter() - t
    return (lambda: exe(*targs)), exe._runner, compile_s


def cartpole_section(envs: int, steps: int, budget: float) -> list[dict[str, Any]]:
    rows = []
    for variant in ("baseline", "separate"):
        fn, host_args = cartpole.make(variant, num_envs=envs, steps=steps)
        args = device_args(host_args)
        row: dict[str, Any] = {"variant": variant, "envs": envs, "steps": steps}
        jfn = jax.jit(fn)
        row["jax_s"] = timed(lambda: jfn(*args), budget, jax_block)  # noqa: B023
        row["jax_kernels_per_step"] = xla_kernels_per_step(fn, tuple(args))
        want = [np.asarray(x) for x in jax.tree_util.tree_leaves(jfn(*args))]
        for pipeline in ("xla", "hlofuse"):
            try:
                run, runner, compile_s = hlofuse_gpu(fn, args, pipeline)
                row[f"{pipeline}_s"] = timed(run, budget, torch_block)
                row[f"{pipeline}_compile_s"] = compile_s
                row[f"{pipeline}_kernels_per_step"] = runner.launches / steps
                got = [g.cpu().numpy() for g in run()]
                row[f"{pipeline}_max_abs_diff"] = max(
                    float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))))
                    for g, w in zip(got, want, strict=True))
            except Exception as exc:
                row[f"{pipeline}_error"] = f"{type(exc).__name__}: {exc}"[:400]
        if variant == "separate":
            cuda = hand_cuda(args, envs, steps)
            if cuda is not None:
                row["cuda_s"] = timed(cuda, budget, torch_block)
            tc = torch_compile_cartpole(args, steps) if CUDA else None
            if tc is not None:
                try:
                    row["torch_compile_s"] = timed(tc, budget, torch_block)
                except Exception as exc:
                    row["torch_compile_error"] = f"{type(exc).__name__}: {exc}"[:400]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def sweep_section(sizes: list[int], steps: int, budget: float) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        fn, host_args = cartpole.make("separate", num_envs=n, steps=steps)
        args = device_args(host_args)
        jfn = jax.jit(fn)
        row: dict[str, Any] = {"envs": n, "steps": steps,
                               "jax_s": timed(lambda: jfn(*args), budget, jax_block)}  # noqa: B023
        try:
            run, _, _ = hlofuse_gpu(fn, args, "hlofuse")
            row["hlofuse_s"] = timed(run, budget, torch_block)
        except Exception as exc:
            row["hlofuse_error"] = f"{type(exc).__name__}: {exc}"[:400]
        cuda = hand_cuda(args, n, steps)
        if cuda is not None:
            row["cuda_s"] = timed(cuda, budget, torch_block)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def dl_section(budget: float, smoke: bool) -> list[dict[str, Any]]:
    import dl_programs

    rows = []
    names = ["softmax", "layernorm", "layernorm_gelu", "gelu_mlp", "attention",
             "mlp_train_step", "gpt_train_step_2"]
    programs = {p.name: p for p in dl_programs.PROGRAMS}
    for name in names[:2] if smoke else names:
        p = programs.get(name)
        if p is None:
            continue
        row: dict[str, Any] = {"program": name}
        try:
            args = jax.tree_util.tree_map(lambda a: jax.device_put(np.asarray(a)), p.make_args())
            flat, tree = jax.tree_util.tree_flatten(args)

            def fn(*leaves: Any, _p: Any = p, _tree: Any = tree) -> Any:
                return _p.fn(*jax.tree_util.tree_unflatten(_tree, list(leaves)))

            jfn = jax.jit(fn)
            row["jax_s"] = timed(lambda: jfn(*flat), budget, jax_block)  # noqa: B023
            run, runner, compile_s = hlofuse_gpu(fn, flat, "hlofuse")
            row["hlofuse_s"] = timed(run, budget, torch_block)
            row["hlofuse_compile_s"] = compile_s
            row["launches"] = runner.launches
            want = [np.asarray(x) for x in jax.tree_util.tree_leaves(jfn(*flat))]
            got = [g.cpu().numpy() for g in run()]
            row["max_abs_diff"] = max(float(np.max(np.abs(g.astype(np.float64) - w)))
                                      for g, w in zip(got, want, strict=True))
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                           "jax": jax.__version__, "cuda": CUDA}
    import triton

    env["triton"] = triton.__version__
    if CUDA:
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cuda_runtime"] = torch.version.cuda
        try:
            import subprocess

            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception:
            env["driver"] = None
    env["jax_devices"] = [str(d) for d in jax.devices()]
    return env


def report(results: dict[str, Any], out: Path) -> None:
    lines = [f"# hlofuse gpu backend: {results['env'].get('gpu', 'no GPU (smoke run)')}", "",
             f"torch {results['env']['torch']}, triton {results['env']['triton']}, jax "
             f"{results['env']['jax']}, driver {results['env'].get('driver')}", "",
             "## CartPole (ratios: peer time / hlofuse time; >1 means hlofuse is faster)", "",
             "| variant | jax.jit s | xla s | hlofuse s | hlofuse vs jax | cuda s | hlofuse/cuda"
             " speed | torch.compile s | kernels/step jax, xla, hlofuse |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results["cartpole"]:
        h = r.get("hlofuse_s")
        ratio = f"{r['jax_s'] / h:.1f}x" if h else r.get("hlofuse_error", "-")
        cuda = r.get("cuda_s")
        vs_cuda = f"{cuda / h:.2f}" if (h and cuda) else "-"
        lines.append(
            f"| {r['variant']} | {r['jax_s']:.4g} | {r.get('xla_s', float('nan')):.4g} | "
            f"{h or float('nan'):.4g} | {ratio} | {cuda or float('nan'):.4g} | {vs_cuda} | "
            f"{r.get('torch_compile_s', float('nan')):.4g} | {r.get('jax_kernels_per_step')}, "
            f"{r.get('xla_kernels_per_step')}, {r.get('hlofuse_kernels_per_step')} |")
    lines += ["", "## Batch sweep (separate, hlofuse pipeline)", "",
              "| envs | jax.jit s | hlofuse s | vs jax | cuda s |", "|---|---|---|---|---|"]
    for r in results["sweep"]:
        h = r.get("hlofuse_s")
        lines.append(f"| {r['envs']} | {r['jax_s']:.4g} | {h or float('nan'):.4g} | "
                     f"{(r['jax_s'] / h) if h else float('nan'):.2f} | "
                     f"{r.get('cuda_s', float('nan')):.4g} |")
    lines += ["", "## Deep-learning programs", "",
              "| program | jax.jit s | hlofuse s | vs jax | launches | note |",
              "|---|---|---|---|---|---|"]
    for r in results["dl"]:
        h = r.get("hlofuse_s")
        lines.append(f"| {r['program']} | {r.get('jax_s', float('nan')):.4g} | "
                     f"{h or float('nan'):.4g} | "
                     f"{(r['jax_s'] / h) if h and r.get('jax_s') else float('nan'):.2f} | "
                     f"{r.get('launches', '-')} | {r.get('error', '')} |")
    (out / "gpu.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for key, label in (("jax_s", "jax.jit"), ("hlofuse_s", "hlofuse"), ("cuda_s", "hand CUDA")):
            pts = [(r["envs"], r["envs"] * r["steps"] / r[key]) for r in results["sweep"]
                   if r.get(key)]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("environments")
        ax.set_ylabel("environment steps / s")
        ax.set_title(f"CartPole (separate), {results['env'].get('gpu', 'no GPU')}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "gpu_sweep.png", dpi=120)
    except Exception:
        traceback.print_exc()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu"))
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of timing per peer")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"env": environment()}
    print(json.dumps(results["env"]), flush=True)
    budget = 0.2 if args.smoke else args.budget
    if args.smoke:
        results["cartpole"] = cartpole_section(64, 4, budget)
        results["sweep"] = sweep_section([1, 32], 3, budget)
    else:
        results["cartpole"] = cartpole_section(2048, 10_000, budget)
        results["sweep"] = sweep_section([1, 64, 1024, 16384, 262144, 1048576], 100, budget)
    results["dl"] = dl_section(budget, args.smoke)
    (out / "gpu.json").write_text(json.dumps(results, indent=1))
    report(results, out)
    print((out / "gpu.md").read_text())


if __name__ == "__main__":
    main()
