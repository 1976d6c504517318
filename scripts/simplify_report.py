"""Run the `simplify` pipeline on the HLO of every program in tests/programs.py and print a
table: instruction and computation counts before and after, calls left, time (CPU ms of
`simplify`, best of 3), and whether the interpreter's outputs are bit-identical before and
after.

    python scripts/simplify_report.py                  # all programs, markdown table
    python scripts/simplify_report.py -k cartpole      # programs whose name contains "cartpole"
    python scripts/simplify_report.py --big            # plus large generated programs (timing)
    python scripts/simplify_report.py --json out.json

"after inline" is the count after call-inlining and DCE alone: inlining copies a callee once
per call site, so for programs that call one computation many times (the unrolled CartPole)
the honest baseline for "how much did simplification remove" is that column.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from hlofuse.backends import interpreter  # noqa: E402
from hlofuse.ir.clone import clone_module  # noqa: E402
from hlofuse.ir.module import Module  # noqa: E402
from hlofuse.ir.opcodes import Opcode  # noqa: E402
from hlofuse.passes.pipelines import run_pipeline  # noqa: E402
from hlofuse.text import parse  # noqa: E402


@dataclass
class Row:
    name: str
    before: int
    after_inline: int
    after: int
    computations_before: int
    computations_after: int
    whiles_before: int
    whiles_after: int
    calls_after: int
    iterations: int
    ms: float
    outputs: str  # "identical", "close", "MISMATCH", "not run", "ERROR ..."


def count(module: Module) -> int:
    return sum(1 for _ in module.all_instructions())


def ops(module: Module, opcode: Opcode) -> int:
    return sum(1 for i in module.all_instructions() if i.opcode is opcode)


def compare(a: list[np.ndarray], b: list[np.ndarray]) -> str:
    identical = True
    for x, y in zip(a, b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype != y.dtype or x.shape != y.shape:
            return "MISMATCH"
        if x.tobytes() == y.tobytes():
            continue
        identical = False
        if x.dtype.kind in "iub" or not np.allclose(
            x.astype(np.float64), y.astype(np.float64), rtol=1e-6, atol=1e-6, equal_nan=True
        ):
            return "MISMATCH"
    return "identical" if identical else "close"


def measure(name: str, text: str, args: tuple | None, repeats: int = 3) -> Row:
    original = parse(text)
    inlined = clone_module(original)
    run_pipeline(inlined, "call-inliner,dce")
    best = float("inf")
    after = original
    iterations = 0
    for _ in range(repeats):
        after = clone_module(original)
        t0 = time.process_time()  # CPU time: wall time on a shared 2-core box is mostly noise
        report = run_pipeline(after, "simplify")
        best = min(best, time.process_time() - t0)
        iterations = report.iterations
    outputs = "not run"
    if args is not None:
        try:
            outputs = compare(interpreter.run(original, *args), interpreter.run(after, *args))
        except Exception as exc:  # report, do not stop the table
            outputs = f"ERROR {type(exc).__name__}: {str(exc)[:80]}"
    return Row(
        name, count(original), count(inlined), count(after), len(original.computations),
        len(after.computations), ops(original, Opcode.WHILE), ops(after, Opcode.WHILE),
        ops(after, Opcode.CALL), iterations, best * 1e3, outputs,
    )


def big_programs() -> list[tuple[str, str]]:
    """Large JAX programs for timing (not run through the interpreter)."""
    import jax
    import jax.numpy as jnp

    from hlofuse.examples import cartpole

    out = []
    fn, args = cartpole.make("baseline", 2048, 100)
    out.append(("big_cartpole_baseline_2048x100",
                jax.jit(fn).lower(*args).as_text(dialect="hlo", debug_info=True)))

    def cartpole_rng_unrolled(state: jax.Array, key_data: jax.Array) -> tuple:
        """The study's baseline step (threefry RNG in the loop) with scan(unroll=8)."""

        def body(carry: tuple, _: None) -> tuple:
            state, key = carry
            key, k_action, k_reset = jax.random.split(key, 3)
            action = jax.random.bernoulli(k_action, 0.5, state.shape[1:]).astype(jnp.int32)
            reset = jax.random.uniform(k_reset, state.shape, jnp.float32, -0.05, 0.05)
            state, reward, _ = cartpole._stacked_step(state, action, reset)
            return (state, key), reward.sum()

        key = jax.random.wrap_key_data(key_data)
        return jax.lax.scan(body, (state, key), None, length=96, unroll=8)

    state = np.zeros((4, 2048), np.float32)
    out.append(("big_cartpole_rng_scan_unroll8",
                jax.jit(cartpole_rng_unrolled).lower(state, np.zeros(2, np.uint32))
                .as_text(dialect="hlo", debug_info=True)))

    def mlp(params: list, x: jax.Array, y: jax.Array) -> jax.Array:
        def loss(ps: list) -> jax.Array:
            h = x
            for w, b in ps:
                h = jnp.tanh(h @ w + b)
            return jnp.mean((h - y) ** 2)

        grads = jax.grad(loss)(params)
        return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, grads)]

    rng = np.random.default_rng(0)
    params = [(rng.standard_normal((32, 32)).astype(np.float32),
               rng.standard_normal(32).astype(np.float32)) for _ in range(128)]
    x = rng.standard_normal((8, 32)).astype(np.float32)
    out.append(("big_mlp_128_layers_train_step",
                jax.jit(mlp).lower(params, x, x).as_text(dialect="hlo", debug_info=True)))

    def rollout(keys: jax.Array) -> jax.Array:
        def step(c: jax.Array, k: jax.Array) -> tuple:
            u = jax.random.uniform(k, c.shape)
            return jnp.sin(c) * u + jnp.cos(c), c.sum()

        return jax.lax.scan(step, jnp.zeros(64), keys, unroll=16)[0]

    keys = jax.random.split(jax.random.PRNGKey(0), 64)
    out.append(("big_scan_unroll16_rng",
                jax.jit(rollout).lower(keys).as_text(dialect="hlo", debug_info=True)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-k", default="", help="only programs whose name contains this")
    ap.add_argument("--big", action="store_true", help="also time large generated programs")
    ap.add_argument("--json", help="write the rows as JSON here")
    opts = ap.parse_args(argv)

    from programs import PROGRAMS, lower_to_hlo

    rows: list[Row] = []
    for p in PROGRAMS:
        if opts.k in p.name:
            rows.append(measure(p.name, lower_to_hlo(p), tuple(p.make_args())))
    if opts.big:
        for name, text in big_programs():
            rows.append(measure(name, text, None))

    print("| program | instrs before | after inline+dce | after simplify | change | "
          "comps | whiles | calls left | iters | cpu ms | outputs |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        change = 100.0 * (r.after - r.before) / r.before
        print(f"| {r.name} | {r.before} | {r.after_inline} | {r.after} | {change:+.0f}% | "
              f"{r.computations_before}->{r.computations_after} | "
              f"{r.whiles_before}->{r.whiles_after} | {r.calls_after} | {r.iterations} | "
              f"{r.ms:.1f} | {r.outputs} |")
    small = [r for r in rows if not r.name.startswith("big_")]
    if small:
        tb, ta = sum(r.before for r in small), sum(r.after for r in small)
        ti = sum(r.after_inline for r in small)
        print(f"\n{len(small)} programs: {tb} -> {ta} instructions ({100 * (ta - tb) / tb:+.0f}%; "
              f"{100 * (ta - ti) / ti:+.0f}% vs inline+dce), "
              f"{sum(r.ms for r in small):.0f} ms in total; outputs: "
              + ", ".join(f"{k} {sum(r.outputs == k for r in small)}"
                          for k in ("identical", "close", "MISMATCH")))
    if opts.json:
        Path(opts.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 1 if any(r.outputs == "MISMATCH" or r.outputs.startswith("ERROR") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
