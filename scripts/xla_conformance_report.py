"""Conformance with XLA's parser test and XLA's .hlo files: the figures of issue 15.

    PYTHONPATH=src:tests python scripts/xla_conformance_report.py [--list] [--run]

Runs every module string of `tests/data/xla/parser_cases.json` and every file of
`tests/data/xla/hlo/` through `tests/xla_parser_conformance.run_text` and prints:
the share of must-parse modules that parse and round-trip, the share of must-fail modules
rejected with an hlofuse error, the .hlo files that parse and round-trip (without the verifier,
as XLA's tools read them) and those that also verify, and (with `--list`) every case that does
not pass, with the reason.

`--run` also runs every must-parse module and .hlo file that verifies (with random inputs, array
parameters only) on the interpreter and the cpu backend (pipeline "xla") and compares them:
each runs on both and matches (floats to 1e-4 relative, 1e-2 for 16- and 8-bit floats, whose
dots the cpu accumulates differently), or
is refused with an hlofuse error naming why; anything else is a crash (a bug).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from xla_parser_conformance import (
    Outcome,
    load_hlo_files,
    load_parser_cases,
    run_case,
    run_text,
)


def _arg(shape: object, rng: np.random.Generator) -> np.ndarray:
    from hlofuse.ir.shape import ArrayShape

    assert isinstance(shape, ArrayShape)
    dt, dims = shape.dtype, shape.dims
    if dt.is_pred:
        return rng.random(dims) < 0.5
    if dt.is_complex:
        return (rng.standard_normal(dims) + 1j * rng.standard_normal(dims)).astype(dt.np)
    if dt.is_integral:
        return rng.integers(0, 2, dims).astype(dt.np)
    return rng.standard_normal(dims).astype(dt.np)


def _rtol(x: np.ndarray) -> float:
    """1e-4, or 1e-2 for 16- and 8-bit floats (their sums round in the type on the cpu)."""
    return 1e-2 if x.dtype.kind not in "biuc" and x.dtype.itemsize <= 2 else 1e-4


def run_on_backends(texts: list[tuple[str, str]]) -> collections.Counter[str]:
    """Run each module on both backends; print what does not run or match."""
    from hlofuse.api import compile as hf_compile
    from hlofuse.backends import interpreter
    from hlofuse.errors import HloError
    from hlofuse.ir.shape import ArrayShape
    from hlofuse.ir.verifier import verify
    from hlofuse.text import parse

    rng = np.random.default_rng(0)
    stats: collections.Counter[str] = collections.Counter()
    for name, text in texts:
        try:
            module = parse(text, allow_elided_constants=True)
            verify(module)
        except HloError:
            continue
        params = [p.shape for p in module.entry.parameters]
        if not all(isinstance(s, ArrayShape) and s.nbytes < 1 << 24 for s in params):
            stats["skipped (tuple or large parameters)"] += 1
            continue
        args = [_arg(s, rng) for s in params]
        outcome = {}
        for backend in ("interpreter", "cpu"):
            try:
                if backend == "interpreter":
                    outcome[backend] = interpreter.run(module, *args)
                else:
                    outcome[backend] = list(hf_compile(module.clone(), "xla", "cpu")(*args))
            except HloError as exc:
                outcome[backend] = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # reported as a crash
                outcome[backend] = exc
        for backend, value in outcome.items():
            if isinstance(value, Exception):
                stats["crash"] += 1
                print(f"  crash        {backend} {name}: {type(value).__name__}: {value}")
            elif isinstance(value, str):
                stats[f"{backend} refused"] += 1
                print(f"  refused      {backend} {name}: {value.splitlines()[0][:140]}")
        got, want = outcome["cpu"], outcome["interpreter"]
        if isinstance(got, list) and isinstance(want, list):
            with np.errstate(all="ignore"):
                same = all(np.allclose(np.asarray(g).astype(np.complex128),
                                       np.asarray(w).astype(np.complex128), rtol=_rtol(w),
                                       atol=1e-5, equal_nan=True) for g, w in zip(got, want))
            stats["both run and match" if same else "mismatch"] += 1
            if not same:
                print(f"  mismatch     {name}")
    return stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="list every case that does not pass")
    ap.add_argument("--run", action="store_true", help="also run the modules on both backends")
    args = ap.parse_args(argv)
    results: list[tuple[str, str, Outcome]] = []
    for case in load_parser_cases():
        results.append((case["name"], case["expect"], run_case(case)))
    texts = load_hlo_files()
    # XLA's tools read these files without verifying them (one declares an impossible
    # transpose): parse and round-trip as they do; verification is reported on its own.
    files = [(name, "ok", run_text(text, "ok", verify=False)) for name, text in texts.items()]
    verified = [(name, "ok", run_text(text, "ok")) for name, text in texts.items()]
    for title, rows in (("must parse and round-trip", [r for r in results if r[1] == "ok"]),
                        ("must fail with an hlofuse error",
                         [r for r in results if r[1] == "error"]),
                        (".hlo files parse and round-trip", files),
                        (".hlo files also pass the verifier", verified)):
        passed = sum(o.passed for _, _, o in rows)
        counts = collections.Counter(o.status for _, _, o in rows if not o.passed)
        print(f"{title}: {passed}/{len(rows)} ({100.0 * passed / max(1, len(rows)):.1f}%)"
              + (f"  not passing: {dict(counts)}" if counts else ""))
    if args.list:
        for name, _, outcome in results + verified:
            if not outcome.passed:
                print(f"  {outcome.status:12} {name}: {outcome.detail[:150]}")
    if args.run:
        cases = [(c["name"], c["text"]) for c in load_parser_cases() if c["expect"] == "ok"]
        stats = run_on_backends(cases + sorted(texts.items()))
        print("run on both backends: " + ", ".join(f"{k}: {v}" for k, v in sorted(stats.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
