"""Measure the f32 error of the CPU backend's math library (backends/cpu/mathlib.py).

Unary functions are swept over f32 bit patterns 0, s, 2s, ... up to 2^32 (stride s, default 1 =
every pattern: all finite values of both signs, denormals, infinities, nans); the reference is
numpy's float64 result, the error is in f32 ulps of that reference (`mathlib.ulp_error`: nan/inf
must match exactly). Binary functions (power, atan2) take random pairs: random bit patterns,
moderate values, integer exponents, and every pair of a list of special values.

Prints a table (function, max ulp, the input where it occurs) and, with --write, replaces the
table between the `<!-- ulp-table -->` markers in docs/mathlib.md.

    python scripts/mathlib_ulp.py                # every pattern (about 1 CPU-hour)
    python scripts/mathlib_ulp.py --stride 17 -j 2 --write
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from hlofuse.backends.cpu import build, mathlib

CHUNK = 1 << 24
DOC = Path(__file__).resolve().parent.parent / "docs" / "mathlib.md"


def _lib():
    return build.load_library(mathlib.harness_source(), name="mathlib_harness")


def _sweep_chunk(args: tuple[str, int, int]) -> tuple[float, float, int]:
    """(max ulp, input, count) over the patterns start, start+stride, ... < start + CHUNK*stride."""
    op, start, stride = args
    stop = min(start + CHUNK * stride, 1 << 32)
    x = np.arange(start, stop, stride, dtype=np.uint64).astype(np.uint32).view(np.float32)
    ours = mathlib.call_array(_lib(), mathlib.FUNCTIONS[op][0], x)
    err = mathlib.ulp_error(ours, mathlib.reference(op, x))
    i = int(np.argmax(err))
    return float(err[i]), float(x[i]), int(x.size)


def sweep_unary(op: str, stride: int, pool: ProcessPoolExecutor) -> tuple[float, str, int]:
    starts = range(0, 1 << 32, CHUNK * stride)
    best, where, count = -1.0, "", 0
    for err, x, n in pool.map(_sweep_chunk, [(op, s, stride) for s in starts]):
        count += n
        if err > best:
            best, where = err, f"x={np.float32(x)!r}"
    return best, where, count


def _pairs(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)

    def bits() -> np.ndarray:
        return rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)

    kind = seed % 4
    if kind == 0:
        return bits(), bits()
    if kind == 1:
        return rng.uniform(-10, 10, n).astype(np.float32), rng.uniform(-40, 40, n).astype(
            np.float32
        )
    if kind == 2:
        return bits(), rng.integers(-200, 200, n).astype(np.float32)
    return rng.uniform(0, 4, n).astype(np.float32), bits()


def _specials() -> np.ndarray:
    v = np.float32([0, 1, 2, 3, 0.5, 1.5, 10, 1e-45, 1e-38, 1e38, np.inf, np.nan, 89, 104])
    near = np.concatenate([v, np.nextafter(v, np.float32(np.inf))])
    return np.concatenate([near, -near])


def _pair_chunk(args: tuple[str, int, int]) -> tuple[float, str, int]:
    op, seed, n = args
    x, y = _pairs(seed, n) if seed >= 0 else (a.ravel() for a in np.meshgrid(*[_specials()] * 2))
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    ours = mathlib.call_array(_lib(), mathlib.FUNCTIONS[op][0], x, y)
    err = mathlib.ulp_error(ours, mathlib.reference(op, x, y))
    i = int(np.argmax(err))
    return float(err[i]), f"args=({x[i]!r}, {y[i]!r})", int(x.size)


def sweep_binary(op: str, pairs: int, pool: ProcessPoolExecutor) -> tuple[float, str, int]:
    jobs = [(op, -1, 0)] + [(op, seed, CHUNK) for seed in range(max(1, pairs // CHUNK))]
    best, where, count = -1.0, "", 0
    for err, at, n in pool.map(_pair_chunk, jobs):
        count += n
        if err > best:
            best, where = err, at
    return best, where, count


def table(rows: list[tuple[str, str, float, str, int]]) -> str:
    out = ["| opcode | f32 function | max ulp measured | MAX_ULP | worst input | inputs |"]
    out.append("| --- | --- | --- | --- | --- | --- |")
    for op, name, err, where, count in rows:
        out.append(
            f"| {op} | `{name}` | {err:.4f} | {mathlib.MAX_ULP[op]} | `{where}` | {count:,} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stride", type=int, default=1, help="sweep every STRIDE-th bit pattern")
    ap.add_argument("--pairs", type=int, default=1 << 27, help="random pairs for power/atan2")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--only", nargs="*", help="opcodes to measure (default: all)")
    ap.add_argument("--write", action="store_true", help="update the table in docs/mathlib.md")
    args = ap.parse_args(argv)
    _lib()  # compile once before forking
    rows = []
    ops = args.only or list(mathlib.FUNCTIONS)
    with ProcessPoolExecutor(args.jobs) as pool:
        for op in ops:
            t0 = time.time()
            if op in mathlib.BINARY:
                err, where, count = sweep_binary(op, args.pairs, pool)
            else:
                err, where, count = sweep_unary(op, args.stride, pool)
            rows.append((op, mathlib.FUNCTIONS[op][0], err, where, count))
            flag = "" if err <= mathlib.MAX_ULP[op] else "  EXCEEDS MAX_ULP"
            print(f"{op:24s} {err:8.4f} ulp at {where} ({time.time() - t0:.0f} s){flag}")
            sys.stdout.flush()
    text = table(rows)
    print(text)
    if args.write:
        sweep = "every f32 bit pattern" if args.stride == 1 else f"every {args.stride}th pattern"
        block = f"<!-- ulp-table -->\nMeasured over {sweep} (unary), {args.pairs:,} random pairs "
        block += f"plus all special pairs (binary).\n\n{text}\n<!-- /ulp-table -->"
        doc = DOC.read_text()
        doc = re.sub(r"<!-- ulp-table -->.*<!-- /ulp-table -->", lambda _: block, doc, flags=re.S)
        DOC.write_text(doc)
    return 0 if all(r[2] <= mathlib.MAX_ULP[r[0]] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
