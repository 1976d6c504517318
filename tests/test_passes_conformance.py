"""`simplify` on every module of the XLA conformance corpus (../shared/conformance): it runs
with verification between passes on all of them (fusion computations, layouts, tokens,
collectives and custom-calls included), and where the interpreter can run a module at a small
size, its outputs are unchanged."""

from __future__ import annotations

import pytest

from conformance import load_cases
from hlofuse.backends import interpreter
from hlofuse.errors import HloError
from hlofuse.ir.clone import clone_module
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse
from pass_testing import assert_same, random_args

CASES = load_cases()
MAX_BYTES = 8_000_000  # skip the interpreter on GPU-sized modules


@pytest.mark.skipif(not CASES, reason="conformance corpus not found")
def test_simplify_on_conformance_modules() -> None:
    checked = 0
    for case_id, case in CASES.items():
        try:
            before = parse(case["hlo"], verify=True)
        except HloError:
            continue  # the parser's tests own these
        after = clone_module(before)
        run_pipeline(after, "simplify", verify=True)
        params = before.entry.parameters
        if not all(isinstance(p.shape, ArrayShape) for p in params) or any(
            isinstance(i.shape, ArrayShape) and i.shape.nbytes > MAX_BYTES
            for i in before.all_instructions()
        ):
            continue
        args = random_args(before)
        try:
            want = interpreter.run(before, *args)
        except HloError:
            continue  # custom-calls, outfeed, layout-changing bitcasts, ...
        got = interpreter.run(after, *args)
        try:
            assert_same(want, got)
        except AssertionError as exc:
            raise AssertionError(f"{case_id}: {exc}") from exc
        checked += 1
    assert checked >= len(CASES) // 2
