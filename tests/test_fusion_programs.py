"""The XLA fusion passes on real JAX programs: every program still verifies and computes the
same values after instruction fusion (both passes) and the fusion merger, and never launches
more kernels than before."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")

from hlofuse.analysis.kernels import count_kernels
from hlofuse.backends import interpreter
from hlofuse.ir.verifier import verify
from hlofuse.passes.base import Pipeline
from hlofuse.passes.fusion.core_passes import InstructionFusion
from hlofuse.passes.fusion.fusion_merger import FusionMerger
from hlofuse.text import parse, print_module
from programs import PROGRAMS, Program, lower_to_hlo

PIPELINE = Pipeline("xla-vertical", [InstructionFusion(may_duplicate=False),
                                     InstructionFusion(may_duplicate=True), FusionMerger()])


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_program_unchanged_by_fusion(program: Program) -> None:
    text = lower_to_hlo(program)
    before = parse(text)
    after = parse(text)
    PIPELINE.run(after)
    verify(after)
    parse(print_module(after))
    assert count_kernels(after).entry <= count_kernels(before).entry
    args = [np.asarray(a) for a in program.make_args()]
    try:
        want = interpreter.run(before, *args)
    except Exception as exc:  # the interpreter cannot run the original: nothing to compare
        pytest.skip(f"interpreter: {exc}")
    got = interpreter.run(after, *args)
    for w, g in zip(want, got):
        w, g = np.asarray(w), np.asarray(g)
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w)
        else:  # float types, bf16 included
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                       rtol=1e-5, atol=1e-6)
