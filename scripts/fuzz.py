"""Differential fuzzer: random JAX programs run by jax.jit, hlofuse's interpreter and the cpu
backend, compared (docs/testing.md, "The differential fuzzer").

    python scripts/fuzz.py --budget 2000 --seed 7 --out fuzz.json --shrink-dir fuzz_min/

`--budget` counts programs (never time); `--exclude` drops generator tags (complex-dot,
complex-scatter-add, subbyte-convert, u64-index, float-dot-int-result, pow-subnormal,
complex-minmax, fp8-window-pad, loop-small-float, fnuz-nan-order, small-float-dot-int-result;
docs/testing.md). The JSON report has
the totals, every disagreement (program, backend, status, detail, which of the three is wrong),
one entry per disagreement class with its minimized HLO module (written under --shrink-dir),
and the (opcode, element type) coverage against the op table.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from pathlib import Path

import jax
import numpy as np

from hlofuse.frontends.fuzz import generate, jax_x64, run_programs, shrink_module, verdict
from hlofuse.frontends.fuzz.coverage import report
from hlofuse.frontends.fuzz.runner import Coverage, lower


def _class_key(desc: str, status: str, why: str) -> str:
    head = re.sub(r"\[(.*?)\].*", r"[\1]", desc)
    return f"{head} {status}: {why}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=500, help="programs to generate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=8, help="programs per compiled module")
    ap.add_argument("--exclude", default="", help="comma-separated generator tags to skip")
    ap.add_argument("--out", type=Path, default=Path("fuzz_report.json"))
    ap.add_argument("--shrink-dir", type=Path, default=Path("fuzz_min"))
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    exclude = frozenset(t for t in args.exclude.split(",") if t)
    rng = np.random.default_rng(args.seed)
    cov = Coverage()
    rejected = 0
    outcomes = []
    with jax_x64():
        done = 0
        while done < args.budget:
            progs = []
            while len(progs) < min(args.batch, args.budget - done):
                p = generate(rng, exclude)
                try:
                    jax.jit(p.fn, keep_unused=True).lower(*p.args)
                except Exception:
                    rejected += 1
                    continue
                progs.append(p)
            outcomes.extend(run_programs(progs, cov, args.batch))
            done += len(progs)
            print(f"\r{done}/{args.budget}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        by_prog: dict[int, list] = {}
        for o in outcomes:
            by_prog.setdefault(id(o.program), []).append(o)
        bad, classes = [], {}
        args.shrink_dir.mkdir(parents=True, exist_ok=True)
        for outs in by_prog.values():
            wrong = [o for o in outs if o.status in ("mismatch", "crash")]
            if not wrong:
                continue
            why = verdict(outs)
            for o in wrong:
                bad.append({"program": o.program.desc, "backend": o.backend, "status": o.status,
                            "detail": o.detail[:600], "verdict": why})
            key = _class_key(outs[0].program.desc, wrong[0].status, why)
            if key in classes:
                classes[key]["count"] += 1
                continue
            p = outs[0].program
            text, flat, _ = lower([p])
            small = shrink_module(text, flat, p.tol) or text
            name = f"{len(classes):03d}.hlo"
            (args.shrink_dir / name).write_text(
                f"// {p.desc}: {why}\n// {wrong[0].backend}: {wrong[0].detail[:300]!r}\n"
                .replace("\n// ", "\n// ", 1) + small)
            classes[key] = {"count": 1, "example": p.desc, "verdict": why,
                            "detail": wrong[0].detail[:400], "module": name,
                            "minimized_lines": small.count("\n")}
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[f"{o.backend}:{o.status}"] = counts.get(f"{o.backend}:{o.status}", 0) + 1
    unsupported = sorted({re.sub(r"instruction \S+ in (computation )?\S+", "instruction",
                                 o.detail)[:200] for o in outcomes if o.status == "unsupported"})
    rep = {"seed": args.seed, "budget": args.budget, "programs": len(by_prog),
           "rejected_by_jax": rejected, "exclude": sorted(exclude), "outcomes": counts,
           "disagreeing_programs": sum(1 for v in by_prog.values()
                                       if any(o.status in ("mismatch", "crash") for o in v)),
           "recorded_programs": sum(1 for v in by_prog.values()
                                    if any(o.status == "recorded" for o in v)
                                    and not any(o.status in ("mismatch", "crash") for o in v)),
           "recorded": sorted({o.detail.split(": ", 1)[0] for o in outcomes
                               if o.status == "recorded"}),
           "classes": classes, "unsupported": unsupported, "disagreements": bad,
           "coverage": report(cov.pairs)}
    args.out.write_text(json.dumps(rep, indent=1, default=str))
    print(json.dumps({k: rep[k] for k in ("programs", "outcomes", "disagreeing_programs",
                                          "recorded_programs")}))
    for k, v in classes.items():
        print(f"{v['count']:4d}  {k}  -> {args.shrink_dir / v['module']}")
    c = rep["coverage"]
    print(f"coverage: {c['pairs_reached']}/{c['pairs_total']} pairs "
          f"({c['pairs_emittable']} of them JAX can emit)")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
