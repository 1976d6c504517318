"""The `simplify` pipeline on the HLO of every program in tests/programs.py: the interpreter's
outputs do not change (bitwise for integers and predicates; floats identical or within 1e-6),
no `call` is left, and the module does not grow beyond what inlining alone makes it."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

pytest.importorskip("jax")

from hlofuse.backends import interpreter
from hlofuse.ir.clone import clone_module
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse
from pass_testing import instruction_count
from programs import PROGRAMS, by_name, lower_to_hlo


@cache
def _hlo(name: str) -> str:
    return lower_to_hlo(by_name(name))


@pytest.mark.parametrize("name", [p.name for p in PROGRAMS])
def test_simplify_keeps_outputs_and_removes_calls(name: str) -> None:
    p = by_name(name)
    before = parse(_hlo(name), verify=True)
    inlined = clone_module(before)
    run_pipeline(inlined, "call-inliner,dce")
    after = clone_module(before)
    report = run_pipeline(after, "simplify", verify=True)
    assert report.converged

    assert not any(i.opcode is Opcode.CALL for i in after.all_instructions())
    assert instruction_count(after) <= instruction_count(inlined)
    if instruction_count(inlined) == instruction_count(before):  # no call sites were copied
        assert instruction_count(after) <= instruction_count(before)

    args = p.make_args()
    want = interpreter.run(before, *args)
    got = interpreter.run(after, *args)
    assert len(want) == len(got)
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert w.dtype == g.dtype and w.shape == g.shape, (i, w.dtype, g.dtype)
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-6,
                                       atol=1e-6, equal_nan=True, err_msg=f"output {i}")

    # a second run finds nothing left to do
    assert not run_pipeline(after, "simplify").changed
