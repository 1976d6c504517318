"""Benchmark: the `hlofuse` pipeline with priority fusion under the CPU cost model
(`hlofuse-priority`: `fusion_algorithm=priority`, `priority_cost_model=cpu`) against the
`hlofuse` pipeline as it is (instruction fusion and the fusion merger), beside jax.jit (issue
35's A/B).

Programs: the deep-learning programs of `dl_programs.py` (softmax, layernorms, a GELU MLP,
attention, flax MLP forward and train step, an optax AdamW update, GPT train steps) and the
gymnax rollouts of the third-party suite (`thirdparty/gymnax_envs.py`, written as gymnax's
README writes them, at their benchmark sizes). For each: both pipelines through `hlofuse.jit`,
every output checked against jax.jit (the program's tolerance; chaotic rollouts at their small
size), kernels per run of each (loops times their trips), then the three timed interleaved in
one process (best of rounds, `harness.interleaved`), inputs as jax device arrays.

    python benchmarks/priority_ab.py [--only NAME ...] [--rounds 7] [--gymnax]

The gymnax rollouts are opt-in (`--gymnax`): priority fusion's queue over their unrolled
threefry rounds (thousands of elementwise ops in a few growing fusions) re-estimates the growing
fusions at every step: CartPole's pipeline takes 18.6 s against `hlofuse`'s 0.2 s (its loop is
then whole-loop fused as under `hlofuse`).

Writes results/priority_ab.{json,md}. Ratios: `hlofuse` time / `hlofuse-priority` time (> 1:
priority fusion is faster) and jax.jit time / each.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

PIPELINES = ("hlofuse", "hlofuse-priority")
GYMNAX = ("gymnax-CartPole-v1", "gymnax-Acrobot-v1", "gymnax-Pendulum-v1",
          "gymnax-MountainCar-v0", "gymnax-Breakout-MinAtar", "gymnax-Catch-bsuite",
          "gymnax-FourRooms-misc")


def _cases() -> list[tuple[str, Callable[[], tuple[Callable[..., Any], tuple[Any, ...],
                                                   tuple[int, ...]]], Callable[..., Any]]]:
    """(name, build -> (fn, args, static_argnums), check(got, want) -> None)."""
    import dl_programs
    import jax
    import numpy as np
    from thirdparty import by_name
    from thirdparty.common import compare

    out: list[Any] = []
    for p in dl_programs.PROGRAMS:
        def build(p: Any = p) -> Any:
            return p.fn, tuple(jax.device_put(a) for a in p.make_args()), ()

        def check(got: Any, want: Any, p: Any = p) -> None:
            for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
                np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=p.atol,
                                           rtol=p.rtol)
        out.append((p.name, build, check))
    for name in GYMNAX:
        program = by_name(name)

        def build_g(program: Any = program) -> Any:
            case = program.build(program.chaotic)  # (chaotic: the short horizon is checked)
            return case.fn, case.args, case.static_argnums

        def check_g(got: Any, want: Any, program: Any = program) -> None:
            ok, why = compare(program, got, want)
            assert ok, why
        out.append((name, build_g, check_g))
    return out


def run_case(name: str, build: Callable[[], Any], check: Callable[..., None], rounds: int
             ) -> dict[str, Any]:
    import jax

    import hlofuse
    from hlofuse.analysis.kernels import kernels_per_run

    fn, args, static = build()
    jitted = jax.jit(fn, static_argnums=static)
    want = jax.block_until_ready(jitted(*args))
    calls: dict[str, Callable[[], Any]] = {"jax.jit": lambda: jax.block_until_ready(
        jitted(*args))}
    row: dict[str, Any] = {"program": name, "kernels": {}}
    for pipeline in PIPELINES:
        h = hlofuse.jit(fn, static_argnums=static, pipeline=pipeline)
        check(jax.block_until_ready(h(*args)), want)
        row["kernels"][pipeline] = kernels_per_run(h.lower(*args).entry)
        calls[pipeline] = (lambda h=h: jax.block_until_ready(h(*args)))
    best = harness.interleaved(calls, rounds)
    row["seconds"] = best
    row["priority_vs_hlofuse"] = best["hlofuse"] / best["hlofuse-priority"]
    row["vs_jax"] = {p: best["jax.jit"] / best[p] for p in PIPELINES}
    return row


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| program | kernels `hlofuse` | kernels `hlofuse-priority` | `hlofuse` vs jax.jit "
             "| `hlofuse-priority` vs jax.jit | priority / hlofuse speed |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['program']} | error: {r['error'][:120]} | | | | |")
            continue
        k, v = r["kernels"], r["vs_jax"]
        lines.append(f"| {r['program']} | {k['hlofuse']} | {k['hlofuse-priority']} | "
                     f"{v['hlofuse']:.2f}x | {v['hlofuse-priority']:.2f}x | "
                     f"{r['priority_vs_hlofuse']:.2f}x |")
    ok = [r for r in rows if "error" not in r]
    better = sum(r["priority_vs_hlofuse"] > 1.03 for r in ok)
    worse = sum(r["priority_vs_hlofuse"] < 0.97 for r in ok)
    lines.append("")
    lines.append(
        f"{len(ok)} programs: geomean vs jax.jit `hlofuse` "
        f"{geomean([r['vs_jax']['hlofuse'] for r in ok]):.2f}x, `hlofuse-priority` "
        f"{geomean([r['vs_jax']['hlofuse-priority'] for r in ok]):.2f}x; priority fusion "
        f"faster by more than 3% on {better}, slower by more than 3% on {worse}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default="priority_ab")
    ap.add_argument("--gymnax", action="store_true",
                    help="the gymnax rollouts too (hlofuse-priority's compile of their unrolled "
                         "threefry rounds is slow: see the module docstring)")
    args = ap.parse_args()
    rows = []
    for name, build, check in _cases():
        if (args.only and name not in args.only) or (name in GYMNAX and not args.gymnax
                                                      and not args.only):
            continue
        try:
            row = run_case(name, build, check, args.rounds)
        except Exception as exc:  # a failing program is reported, the others still run
            row = {"program": name, "error": f"{type(exc).__name__}: {exc}"}
        rows.append(row)
        print(row["program"], row.get("priority_vs_hlofuse", row.get("error")), flush=True)
    path = harness.save(args.out, {"pipelines": list(PIPELINES), "rows": rows})
    text = table(rows)
    path.with_suffix(".md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
