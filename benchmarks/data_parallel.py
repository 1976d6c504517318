"""Benchmark: data-parallel training over N processes on JAX's own distributed runtime, each
process's model step an hlofuse program inside its jax.jit.

The model is a flax MLP classifier trained with optax's Adam on a fixed synthetic dataset
(global batch `--batch`, split evenly over the processes). Each process runs

    jax.jit(shard_map(step, mesh over all processes' devices))

where `step` is `hlofuse.jax_function(value_and_grad(loss))` on the process's local shard,
the loss and gradients are averaged by `jax.lax.pmean` (gloo all-reduce between processes),
and the optax update runs in the same jax.jit. `--model jax` runs the same step with jax
compiling the loss (the peer). With `--scaling 1 2 4` the launcher runs both models at each
process count in turn and saves results/data_parallel.json: steps per second and the ratio
against one process and against jax.

    python benchmarks/data_parallel.py --processes 2 --steps 20 [--print-losses]
    python benchmarks/data_parallel.py --scaling 1 2 4

On a cluster the worker is the same program: start one process per host with
`--worker RANK --processes N --coordinator HOST:PORT` (jax.distributed.initialize's
arguments), each feeding its own shard.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker(ns: argparse.Namespace) -> None:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=ns.coordinator,
                               num_processes=ns.processes, process_id=ns.worker)
    from functools import partial

    import flax.linen as nn
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import hlofuse

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            for width in (ns.width, ns.width):
                x = nn.relu(nn.Dense(width)(x))
            return nn.Dense(10)(x)

    model = MLP()
    tx = optax.adam(1e-3)

    def loss(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        logits = model.apply(params, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    grads = jax.value_and_grad(loss)
    threads = ns.threads or max(1, (os.cpu_count() or 1) // ns.processes)
    local = hlofuse.jax_function(grads, threads=threads) if ns.model == "hlofuse" else grads
    mesh = Mesh(np.array(jax.devices()), ("d",))

    @jax.jit
    @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P(), P("d"), P("d")),
             out_specs=(P(), P(), P()))
    def step(params: Any, opt: Any, x: jax.Array, y: jax.Array) -> Any:
        value, g = local(params, x, y)
        value, g = jax.lax.pmean((value, g), "d")
        updates, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, updates), opt, value

    rng = np.random.default_rng(0)
    xs = rng.standard_normal((ns.batch, ns.features)).astype(np.float32)
    ys = (np.abs(xs[:, :10]).argmax(axis=1)).astype(np.int32)  # a learnable labelling
    per = ns.batch // ns.processes
    mine = slice(ns.worker * per, (ns.worker + 1) * per)
    rows = NamedSharding(mesh, P("d"))
    x = jax.make_array_from_process_local_data(rows, xs[mine])
    y = jax.make_array_from_process_local_data(rows, ys[mine])
    params = model.init(jax.random.key(0), jnp.zeros((1, ns.features)))
    replicate = NamedSharding(mesh, P())
    params = jax.tree_util.tree_map(
        lambda a: jax.make_array_from_process_local_data(replicate, np.asarray(a)), params)
    opt = jax.tree_util.tree_map(
        lambda a: jax.make_array_from_process_local_data(replicate, np.asarray(a)),
        tx.init(params))
    losses = []
    params, opt, value = step(params, opt, x, y)  # compile and warm up
    losses.append(float(value))
    start = time.perf_counter()
    for _ in range(ns.steps - 1):
        params, opt, value = step(params, opt, x, y)
        losses.append(float(value))  # (reads the loss back each step, as a training loop logs)
    wall = time.perf_counter() - start
    if ns.worker == 0:
        if ns.print_losses:
            print("losses:", " ".join(f"{v:.8g}" for v in losses))
        print(json.dumps({"processes": ns.processes, "model": ns.model,
                          "steps_per_s": (ns.steps - 1) / wall if ns.steps > 1 else None,
                          "losses": losses}), flush=True)
    jax.distributed.shutdown()


def launch(ns: argparse.Namespace, processes: int, model: str) -> dict[str, Any]:
    """Run `processes` workers on this machine; worker 0's result."""
    port = _free_port()
    base = [sys.executable, __file__, "--processes", str(processes), "--steps", str(ns.steps),
            "--batch", str(ns.batch), "--features", str(ns.features), "--width",
            str(ns.width), "--model", model, "--coordinator", f"127.0.0.1:{port}",
            "--threads", str(ns.threads)]
    if ns.print_losses:
        base.append("--print-losses")
    env = {**os.environ, "XLA_FLAGS": os.environ.get("XLA_FLAGS", "")}
    procs = [subprocess.Popen([*base, "--worker", str(i)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(processes)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            raise RuntimeError(f"a worker failed (exit {p.returncode}):\n{err[-3000:]}")
    text = outs[0][0]
    if ns.print_losses:  # (gloo writes its own lines to stdout too)
        print(next(line for line in text.splitlines() if line.startswith("losses:")))
    return dict(json.loads(text.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0,
                    help="hlofuse threads per process (0: this machine's CPUs / processes)")
    ap.add_argument("--model", choices=("hlofuse", "jax"), default="hlofuse")
    ap.add_argument("--print-losses", action="store_true")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--coordinator", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--scaling", type=int, nargs="*", default=None)
    ap.add_argument("--rounds", type=int, default=3, help="--scaling: launches per point")
    ns = ap.parse_args(argv)
    if ns.batch % max(ns.processes, *(ns.scaling or [1])):
        ap.error("--batch must divide evenly over the processes")
    if ns.worker is not None:
        worker(ns)
        return 0
    if ns.scaling is None:
        print(json.dumps(launch(ns, ns.processes, ns.model)))
        return 0
    import harness

    rows = []
    for n in ns.scaling:
        best: dict[str, dict[str, Any]] = {}
        for _ in range(ns.rounds):  # (alternating; the best of the rounds)
            for model in ("jax", "hlofuse"):
                r = launch(ns, n, model)
                if model not in best or r["steps_per_s"] > best[model]["steps_per_s"]:
                    best[model] = r
        for model, r in best.items():
            rows.append({"processes": n, "model": model, "steps_per_s": r["steps_per_s"],
                         "final_loss": r["losses"][-1]})
            print(f"{n} processes, {model}: {r['steps_per_s']:.1f} steps/s, "
                  f"loss {r['losses'][-1]:.5f}", flush=True)
    rate = {(r["processes"], r["model"]): r["steps_per_s"] for r in rows}
    for r in rows:
        r["vs_1_process"] = r["steps_per_s"] / rate[(ns.scaling[0], r["model"])]
        r["vs_jax"] = r["steps_per_s"] / rate[(r["processes"], "jax")]
    path = harness.save("data_parallel", {
        "benchmark": "data_parallel", "machine": harness.machine(),
        "conditions": {"rounds": ns.rounds, "batch": ns.batch, "features": ns.features,
                       "width": ns.width, "steps": ns.steps,
                       "hlofuse_threads_per_process": ns.threads or "CPUs / processes"},
        "rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
