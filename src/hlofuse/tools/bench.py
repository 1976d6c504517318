"""`hlofuse bench NAME [OPTIONS]`: runs a benchmark script from the source checkout's
`benchmarks/` directory (cartpole, programs, loop-overhead), passing OPTIONS to its `main`.

The benchmarks are measurements, not part of the installed package: they need the repository
(and jax, matplotlib, optionally torch: `pip install -e '.[bench]'`). The directory is found as
`$HLOFUSE_BENCHMARKS`, else `benchmarks/` next to the `src/` holding this package (an editable
install), else `./benchmarks`. `hlofuse bench cartpole --help` lists the benchmark's options.

Wiring in cli.py:

    p = sub.add_parser("bench", help="run a benchmark (the CartPole case study, ...)")
    bench.add_arguments(p)
    p.set_defaults(func=bench.main)
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from hlofuse.escape import terminal

BENCHMARKS: dict[str, str] = {
    "cartpole": "cartpole.py",
    "programs": "programs.py",
    "loop-overhead": "loop_overhead.py",
}


class BenchmarkNotFoundError(RuntimeError):
    """The benchmarks directory (a source checkout's `benchmarks/`) is not reachable."""


def benchmarks_dir() -> Path:
    candidates = []
    from hlofuse import env

    given = env.path("HLOFUSE_BENCHMARKS")
    if given is not None:
        candidates.append(given)
    candidates.append(Path(__file__).resolve().parents[3] / "benchmarks")
    candidates.append(Path.cwd() / "benchmarks")
    for c in candidates:
        if (c / "harness.py").is_file():
            return c
    raise BenchmarkNotFoundError(
        "hlofuse bench: no benchmarks/ directory found (looked in "
        + ", ".join(str(c) for c in candidates)
        + "); the benchmarks ship with the source repository, not the package: run from a "
        "clone (pip install -e '.[bench]') or set HLOFUSE_BENCHMARKS to its benchmarks/ path")


def load(name: str) -> ModuleType:
    """Imports benchmarks/<script> as a module (its directory goes on sys.path, as when the
    script runs directly)."""
    path = benchmarks_dir() / BENCHMARKS[name]
    if not path.is_file():
        raise BenchmarkNotFoundError(f"hlofuse bench: {path} does not exist")
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"hlofuse_bench_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(spec.name, None)
        raise
    return module


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("benchmark", choices=sorted(BENCHMARKS),
                        help="which benchmark; `hlofuse bench NAME --help` lists its options")
    parser.add_argument("options", nargs=argparse.REMAINDER,
                        help="passed to the benchmark (e.g. --quick)")


def main(args: argparse.Namespace) -> int:
    try:
        module = load(args.benchmark)
    except BenchmarkNotFoundError as exc:
        print(terminal(str(exc)), file=sys.stderr)
        return 2
    except ImportError as exc:
        print(terminal(f"hlofuse bench {args.benchmark}: missing dependency ({exc}); "
                       "install the bench extra: pip install -e '.[bench]'"), file=sys.stderr)
        return 2
    result = module.main(list(args.options))
    return int(result or 0)
