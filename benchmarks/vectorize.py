"""Benchmark: memory-bound kernels the vectorizer must handle explicitly, as GB/s, against this
machine's copy bandwidth (numpy's `np.copyto` of the same bytes) and against jax.jit of the same
program.

Programs (written in JAX, lowered, compiled by hlofuse with the `xla` pipeline): an elementwise
chain, a row broadcast, a column broadcast, a transpose, a strided slice, an interleaved [N, 4]
read and write, selects with pred and int predicates, and mixed dtypes (f32, s32, pred, f16,
bf16). Bytes are the program's inputs plus outputs (a lower bound on its traffic). Each case is
checked against jax.jit first; cases are interleaved and the best of --repeat rounds is kept.

    python benchmarks/vectorize.py [--n 4194304] [--repeat 20] [--out vectorize]

Writes results/vectorize.json.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

import hlofuse


def programs(n: int) -> dict[str, tuple[Callable[..., Any], tuple[np.ndarray, ...]]]:
    import jax.numpy as jnp
    import ml_dtypes

    rng = np.random.default_rng(0)
    f32 = rng.standard_normal(n).astype(np.float32)
    g32 = rng.standard_normal(n).astype(np.float32)
    rows = n // 256
    m = f32.reshape(rows, 256)
    n4 = f32.reshape(n // 4, 4)
    mask = rng.integers(0, 2, n).astype(bool)
    ints = rng.integers(-3, 3, n).astype(np.int32)
    half = f32.astype(np.float16)
    bf = f32.astype(ml_dtypes.bfloat16)
    return {
        "chain": (lambda x, y: jnp.tanh(x * 1.5 + y) * y - x, (f32, g32)),
        "broadcast_row": (lambda a, r: a + r[None, :], (m, m[0].copy())),
        "broadcast_col": (lambda a, c: a * c[:, None], (m, m[:, 0].copy())),
        "transpose": (lambda a: a.T * 2.0, (m,)),
        "strided_slice": (lambda x: x[::2] + x[1::2], (f32,)),
        "interleaved_read": (lambda s: s[:, 0] * s[:, 1] + s[:, 2] - s[:, 3], (n4,)),
        "interleaved_write": (lambda x: jnp.stack([x, -x, x * x, x + 1], axis=1), (f32[: n // 4],)),
        "select_pred": (lambda p, x, y: jnp.where(p, x, y), (mask, f32, g32)),
        "select_int": (lambda i, x, y: jnp.where(i > 0, x * 2, y), (ints, f32, g32)),
        "mixed_dtypes": (lambda h, b, i, p: (jnp.where(p, h.astype(jnp.float32) *
                                                       b.astype(jnp.float32), i.astype(
                                                           jnp.float32)),
                                            (h.astype(jnp.float32) > 0), h * 2),
                         (half, bf, ints, mask)),
    }


def _bytes(args: tuple[np.ndarray, ...], outs: Any) -> int:
    import jax

    return sum(a.nbytes for a in args) + sum(np.asarray(o).nbytes for o in jax.tree.leaves(outs))


def run(n: int, repeat: int) -> dict[str, Any]:
    import jax

    rows = []
    for name, (fn, args) in programs(n).items():
        exe = hlofuse.jit(fn)
        jf = jax.jit(fn).lower(*args).compile()
        dev = [jax.device_put(a) for a in args]
        want = jax.block_until_ready(jf(*dev))
        got = exe(*args)
        for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
            np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                       rtol=2e-3, atol=2e-3, err_msg=name)
        nbytes = _bytes(args, want)
        src = np.empty(nbytes // 2, np.uint8)
        dst = np.empty_like(src)
        best = harness.interleaved({
            "hlofuse": lambda e=exe, a=args: e(*a),
            "jax.jit": lambda c=jf, d=dev: jax.block_until_ready(c(*d)),
            "numpy copy": lambda s=src, d=dst: np.copyto(d, s),
        }, repeat)
        gbs = {k: nbytes / v / 1e9 for k, v in best.items()}
        rows.append({"program": name, "bytes": nbytes, "seconds": best, "gb_per_s": gbs,
                     "vs_jax": best["jax.jit"] / best["hlofuse"],
                     "vs_copy": gbs["hlofuse"] / gbs["numpy copy"]})
        print(f"{name:18s} hlofuse {gbs['hlofuse']:6.2f} GB/s  jax.jit {gbs['jax.jit']:6.2f}  "
              f"copy {gbs['numpy copy']:6.2f}  -> {rows[-1]['vs_jax']:.2f}x jax.jit, "
              f"{rows[-1]['vs_copy']:.2f} of copy", flush=True)
    return {"n": n, "repeat": repeat, "rows": rows}


def markdown(payload: dict[str, Any]) -> str:
    lines = ["| program | hlofuse GB/s | jax.jit GB/s | copy GB/s | vs jax.jit | of copy |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in payload["rows"]:
        g = r["gb_per_s"]
        lines.append(f"| {r['program']} | {g['hlofuse']:.2f} | {g['jax.jit']:.2f} | "
                     f"{g['numpy copy']:.2f} | {r['vs_jax']:.2f}x | {r['vs_copy']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 22, help="elements per array")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", default="vectorize")
    ns = ap.parse_args(argv)
    payload = run(ns.n, ns.repeat)
    path = harness.save(ns.out, payload)
    print(markdown(payload))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
