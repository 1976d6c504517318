"""Benchmark: GCC's loop if-conversion off in every kernel vs only where a kernel loads under a
condition (`kernel_ir.query.guarded_load`, the `HF_NO_IFCONV` attribute; `cpu/units.py`).

GCC 12.2 miscompiled a guarded load that if-conversion made a masked load, so kernels were
compiled with `-fno-tree-loop-if-convert`; that flag on every kernel slowed evosax's Open-ES
1.7x. For each program (third-party, `thirdparty/`), under the `xla` and `hlofuse` pipelines:
jax.jit, the kernels as compiled now ("guarded": the attribute on the kernels that need it) and
with the flag on every kernel ("all", the old workaround), interleaved in one process
(`harness.interleaved`, best of rounds). Inputs are the program's own; jax.jit gets device
arrays.

    python benchmarks/ifconvert.py [--only evosax-open-es gymnax-Catch-bsuite] [--repeat 15]
Writes results/ifconvert.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

DEFAULT = ["evosax-open-es", "evosax-cma-es", "gymnax-Catch-bsuite", "optax-adamw"]
FLAG = "-fno-tree-loop-if-convert"


def _host(a: Any) -> Any:
    import jax
    import numpy as np

    try:  # (as jax types it: a Python int is s32 under jax's default, not numpy's s64)
        return np.asarray(jax.numpy.asarray(a))
    except TypeError:  # a typed PRNG key: its raw words
        return np.asarray(jax.random.key_data(a))


def measure(name: str, repeat: int) -> dict[str, Any]:
    import jax
    from thirdparty import by_name

    import hlofuse
    from hlofuse.backends.cpu import units
    from hlofuse.frontends.jax import hlo_text

    case = by_name(name).build(False)
    text = hlo_text(case.fn, *case.args)
    args = [_host(a) for a in jax.tree_util.tree_leaves(case.args)]
    jitted = jax.jit(case.fn)
    cases: dict[str, Any] = {"jax": lambda: jax.block_until_ready(jitted(*case.args))}
    saved = units.KERNEL_WORKAROUNDS
    for pipeline in ("xla", "hlofuse"):
        for variant, flags in (("guarded", saved), ("all", (*saved, FLAG))):
            units.KERNEL_WORKAROUNDS = flags
            try:
                exe = hlofuse.compile(text, pipeline=pipeline)
            finally:
                units.KERNEL_WORKAROUNDS = saved
            cases[f"{pipeline}/{variant}"] = lambda exe=exe: exe(*args)
    best = harness.interleaved(cases, repeat)
    row = {k: v * 1e3 for k, v in best.items()}
    ratios = {k: best["jax"] / v for k, v in best.items() if k != "jax"}
    print(f"{name:24s} jax {row['jax']:8.2f} ms  " + "  ".join(
        f"{k} {row[k]:8.2f} ms ({ratios[k]:.2f}x)" for k in ratios))
    return {"program": name, "ms": row, "vs_jax": ratios}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    os.environ.setdefault("HLOFUSE_CACHE_DIR", tempfile.mkdtemp())  # compile both variants
    rows = [measure(n, args.repeat) for n in args.only]
    path = harness.save("ifconvert", {"benchmark": "ifconvert", "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
