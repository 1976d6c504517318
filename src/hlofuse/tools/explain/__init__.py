"""`hlofuse explain`: why a program is N kernels and not 1, and which line caused each boundary.

    from hlofuse.tools.explain import explain, compare
    print(explain(module).to_text())                 # Module, HLO text, a path, or fn + args
    print(compare(module, ["none", "xla"]).to_text())

    hlofuse explain FILE | --example NAME [--pipeline hlofuse] [--pipeline xla ...] [--json]

One `--pipeline` gives the full explanation (kernels per loop iteration, each kernel's ops,
source lines and bytes, every boundary with the rule that made it and what would remove it);
several give the side-by-side table of kernels and bytes moved per run of each loop.
See docs/explain.md for how to read the output.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from hlofuse.ir.module import Module
from hlofuse.passes.defaults import DEFAULT_PIPELINE
from hlofuse.tools.explain.analyse import ExplainError, analyse, to_module
from hlofuse.tools.explain.model import (
    Boundary,
    Comparison,
    Explanation,
    Fix,
    KernelInfo,
    Refusal,
    Section,
    Transformation,
)

__all__ = ["Boundary", "Comparison", "ExplainError", "Explanation", "Fix", "KernelInfo",
           "Refusal", "Section", "Transformation", "add_arguments", "compare", "explain",
           "load_input", "main"]


def explain(target: Module | str | Any, *args: Any, pipeline: str = DEFAULT_PIPELINE,
            verify_fixes: bool = False) -> Explanation:
    """Explain `target` (a Module, HLO text, a file path, or a JAX function called with
    `args`) under `pipeline`. The input module is not modified."""
    return analyse(to_module(target, *args), pipeline, verify_fixes=verify_fixes)


def compare(target: Module | str | Any, pipelines: list[str] | tuple[str, ...] = (
        "none", "xla", "xla-relaxed"), *args: Any) -> Comparison:
    """Kernels and bytes moved per run of every section (entry, each loop per iteration)
    under each pipeline, side by side."""
    base = to_module(target, *args)
    rows: dict[str, dict[str, tuple[int | None, int | None]]] = {}
    explanations: dict[str, Explanation] = {}
    for p in pipelines:
        expl = analyse(base.clone(), p)
        explanations[p] = expl
        for s in expl.sections:
            rows.setdefault(s.title, {})[p] = (s.kernels_per_run, expl.bytes_per_run.get(s.title))
    return Comparison(base.name, list(pipelines), rows, explanations)


# ----- command line -------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", help="HLO text file")
    parser.add_argument("--example", metavar="NAME",
                        help="a built-in example instead of FILE (hlofuse.examples.names())")
    parser.add_argument("--pipeline", action="append", metavar="NAME",
                        help=f"pipeline (default {DEFAULT_PIPELINE}, what compile runs); repeat to "
                             "compare pipelines side by side")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--verify-fixes", action="store_true",
                        help="re-run the pipeline with each suggested setting to measure it")
    parser.add_argument("--brief", action="store_true",
                        help="omit the earlier refusals of each boundary")


def load_input(args: argparse.Namespace) -> Module:
    """The module named by FILE or --example (shared with `hlofuse lint`)."""
    from pathlib import Path

    from hlofuse.errors import InputError
    from hlofuse.text import parse

    if (args.file is None) == (args.example is None):
        raise InputError("give exactly one of FILE or --example NAME")
    if args.example is not None:
        from hlofuse import examples

        try:
            return parse(examples.text(args.example), source_name=str(examples.path(
                args.example)))
        except KeyError as exc:
            raise InputError(str(exc.args[0])) from None
    p = Path(args.file)
    if not p.is_file():
        raise InputError(f"{args.file}: no such file")
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise InputError(f"{args.file}: not a text file (expected HLO text)") from None
    return parse(text, source_name=args.file)


def main(args: argparse.Namespace) -> int:
    module = load_input(args)
    pipelines = args.pipeline or [DEFAULT_PIPELINE]
    if len(pipelines) > 1:
        result: Explanation | Comparison = compare(module, pipelines)
    else:
        result = explain(module, pipeline=pipelines[0], verify_fixes=args.verify_fixes)
    if args.json:
        print(json.dumps(result.to_json(), indent=2, default=str))
    elif isinstance(result, Explanation):
        print(result.to_text(history=not args.brief))
    else:
        print(result.to_text())
    return 0
