"""Run JAX's whole op matrix (tests/jax_op_matrix.py) on hlofuse's backends against jax.jit and
print the figures: per backend the cases that match, and every case that does not, grouped.

    PYTHONPATH=src:tests python scripts/jax_op_matrix_report.py [--backend interpreter|cpu]
        [--op NAME ...] [--list] [--no-batch]

A case counts as passing only when it matches on every backend run. The first cpu run compiles
about 330 modules (minutes); later runs hit the compile cache.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

from jax_op_matrix import BACKENDS, all_cases, run_cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", action="append", choices=BACKENDS)
    ap.add_argument("--op", action="append", help="only these ops")
    ap.add_argument("--list", action="store_true", help="print every failing case")
    ap.add_argument("--no-batch", action="store_true", help="one module per case")
    args = ap.parse_args(argv)
    backends = tuple(args.backend or BACKENDS)
    cases = [c for c in all_cases() if not args.op or c.op in args.op]
    t0 = time.perf_counter()
    results = run_cases(cases, backends, batch=not args.no_batch)
    elapsed = time.perf_counter() - t0
    failing: dict[str, list[str]] = collections.defaultdict(list)
    print(f"JAX op matrix: {len(cases)} cases ({len(results)} runs) in {elapsed:.0f} s")
    for backend in backends:
        mine = [r for r in results if r.backend == backend]
        counts = collections.Counter(r.status for r in mine)
        share = 100.0 * counts["match"] / max(len(mine), 1)
        print(f"  {backend:12s} {counts['match']}/{len(mine)} match ({share:.1f}%)  "
              + "  ".join(f"{k}: {v}" for k, v in sorted(counts.items()) if k != "match"))
        for r in mine:
            if r.status != "match":
                failing[r.case.name].append(f"{backend} {r.status}: {r.detail.splitlines()[0]}")
    ok = len(cases) - len(failing)
    print(f"  all backends {ok}/{len(cases)} match ({100.0 * ok / max(len(cases), 1):.1f}%)")
    groups = collections.Counter(name.split("(")[0] for name in failing)
    if groups:
        print("failing (op[dtype]: cases):")
        for key, n in sorted(groups.items()):
            print(f"  {key}: {n}")
    if args.list:
        for name, lines in sorted(failing.items()):
            print(name)
            for line in lines:
                print("   ", line[:300])
    return 0 if not failing else 1


if __name__ == "__main__":
    sys.exit(main())
