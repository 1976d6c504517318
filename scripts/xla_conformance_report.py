"""Conformance with XLA's parser test and XLA's .hlo files: the figures of issue 15.

    PYTHONPATH=src:tests python scripts/xla_conformance_report.py [--list]

Runs every module string of `tests/data/xla/parser_cases.json` and every file of
`tests/data/xla/hlo/` through `tests/xla_parser_conformance.run_text` and prints:
the share of must-parse modules that parse and round-trip, the share of must-fail modules
rejected with an hlofuse error, the .hlo files that parse and round-trip (without the verifier,
as XLA's tools read them) and those that also verify, and (with `--list`) every case that does
not pass, with the reason.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from xla_parser_conformance import (
    Outcome,
    load_hlo_files,
    load_parser_cases,
    run_case,
    run_text,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="list every case that does not pass")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
