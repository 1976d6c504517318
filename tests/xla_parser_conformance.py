"""XLA's parser test and a sample of XLA's .hlo files, run through hlofuse's parser and verifier.

The data lives in `tests/data/xla/` (see its README: source repository, commit, licence):
`parser_cases.json` (every module string of `xla/hlo/parser/hlo_parser_test.cc` with what the
test expects of it) and `hlo/*.hlo` (XLA test files, directive comments removed). This module
is shared by `test_xla_parser_conformance.py` and `scripts/xla_conformance_report.py`:

    for case in load_parser_cases():
        outcome = run_case(case)       # Outcome(status, detail)

Statuses:

    pass          must-parse: parsed (and verified, when XLA's test verifies) and round-trips
                  (`print(parse(t))` re-parses to an equal module and prints the same text);
                  must-fail: rejected with an hlofuse error (an `HloError`)
    no-parse      must-parse, but hlofuse raised an HloError
    no-roundtrip  must-parse and parsed, but the printed text does not read back equal
    accepted      must-fail, but hlofuse accepted it
    crash         any exception that is not an HloError (always a bug)

Elided constants (`constant({...})`) are read as zeros here (`allow_elided_constants=True`, the
structure-only mode): XLA's test parses them, hlofuse refuses them by default on purpose.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hlofuse.errors import HloError
from hlofuse.ir.equality import module_diff
from hlofuse.text import parse, print_module

DATA = Path(__file__).resolve().parent / "data" / "xla"


@dataclass(frozen=True)
class Outcome:
    status: str
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"


def load_parser_cases() -> list[dict[str, Any]]:
    data = json.loads((DATA / "parser_cases.json").read_text())
    cases: list[dict[str, Any]] = data["cases"]
    for case in cases:
        gen = case.get("generator")
        if gen is not None and gen["kind"] == "nested_add":  # built in C++ by XLA's test
            depth = gen["depth"]
            case["text"] = ("f32[] " + "add(f32[] " * depth + "constant(0)"
                            + ", f32[] constant(0))" * depth)
    return cases


def load_hlo_files() -> dict[str, str]:
    """name -> text of every vendored .hlo file (all must parse)."""
    return {p.stem: p.read_text() for p in sorted((DATA / "hlo").glob("*.hlo"))}


def roundtrip_problem(text: str, *, verify: bool) -> str | None:
    """Why `text` does not survive parse -> print -> parse (None when it does)."""
    module = parse(text, verify=verify, allow_elided_constants=True)
    for long in (False, True):
        printed = print_module(module, long=long)
        again = parse(printed, verify=verify, allow_elided_constants=True)
        diff = module_diff(module, again)
        if diff is not None:
            return f"{'long' if long else 'short'} form: {diff}"
        if print_module(again, long=long) != printed:
            return f"{'long' if long else 'short'} form: printing is not stable"
    return None


def run_text(text: str, expect: str, *, verify: bool = True) -> Outcome:
    """The outcome of parsing `text` when XLA's test expects `expect` ("ok" or "error")."""
    try:
        if expect == "error":
            try:
                parse(text, verify=True, allow_elided_constants=True)
            except HloError as exc:
                return Outcome("pass", type(exc).__name__ + ": " + str(exc).split("\n")[0])
            return Outcome("accepted")
        try:
            problem = roundtrip_problem(text, verify=verify)
        except HloError as exc:
            return Outcome("no-parse", type(exc).__name__ + ": " + str(exc).split("\n")[0])
        return Outcome("no-roundtrip", problem) if problem else Outcome("pass")
    except RecursionError:
        return Outcome("crash", "RecursionError")
    except Exception as exc:
        return Outcome("crash", f"{type(exc).__name__}: {exc}")


def run_case(case: dict[str, Any]) -> Outcome:
    return run_text(case["text"], case["expect"], verify=case["verified"])
