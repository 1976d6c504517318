"""The named fusion pipelines (`none`, `xla`, `xla-relaxed`) on every JAX program of
tests/programs.py: the module verifies, prints and reads back, the interpreter gives the very same
outputs as on the unoptimised module (fusion only regroups work: bitwise equal for integers,
equal for floats, NaN where NaN), and `xla` never launches more kernels than `none`."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

pytest.importorskip("jax")

from hlofuse.analysis.kernels import KernelReport, count_kernels
from hlofuse.backends import interpreter
from hlofuse.ir.module import Module
from hlofuse.ir.verifier import verify
from hlofuse.passes.pipelines import PIPELINES, run_pipeline
from hlofuse.text import parse, print_module
from programs import PROGRAMS, Program, lower_to_hlo

PIPELINE_NAMES = ("none", "xla", "xla-relaxed")


@cache
def _text(name: str) -> str:
    return lower_to_hlo(next(p for p in PROGRAMS if p.name == name), debug_info=False)


@cache
def _reference(name: str) -> list[np.ndarray] | None:
    program = next(p for p in PROGRAMS if p.name == name)
    try:
        return [np.asarray(x) for x in interpreter.run(parse(_text(name)), *_args(program))]
    except Exception:  # the interpreter cannot run the original: nothing to compare
        return None


def _args(program: Program) -> list[np.ndarray]:
    return [np.asarray(a) for a in program.make_args()]


@cache
def _optimised(name: str, pipeline: str) -> Module:
    module = parse(_text(name))
    run_pipeline(module, pipeline)
    return module


def _total(report: KernelReport) -> int:
    return report.total_static


def _same(want: np.ndarray, got: np.ndarray, where: str) -> None:
    assert want.dtype == got.dtype and want.shape == got.shape, where
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want, err_msg=where)
        return
    w, g = want.astype(np.float64), got.astype(np.float64)
    assert np.array_equal(np.isnan(w), np.isnan(g)), f"{where}: NaNs differ"
    ok = ~np.isnan(w)
    np.testing.assert_allclose(g[ok], w[ok], rtol=1e-5, atol=1e-6, err_msg=where)


def test_pipelines_registered() -> None:
    for name in PIPELINE_NAMES:
        assert name in PIPELINES


@pytest.mark.parametrize("pipeline", PIPELINE_NAMES)
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_pipeline_keeps_outputs(program: Program, pipeline: str) -> None:
    module = _optimised(program.name, pipeline)
    verify(module)
    parse(print_module(module))
    want = _reference(program.name)
    if want is None:
        pytest.skip("the interpreter cannot run the original program")
    got = interpreter.run(module, *_args(program))
    assert len(got) == len(want)
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        _same(w, np.asarray(g), f"{program.name} under {pipeline}, output {i}")


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_xla_never_more_kernels_than_none(program: Program) -> None:
    none = count_kernels(_optimised(program.name, "none"))
    xla = count_kernels(_optimised(program.name, "xla"))
    relaxed = count_kernels(_optimised(program.name, "xla-relaxed"))
    assert _total(xla) <= _total(none), (xla.summary(), none.summary())
    assert _total(relaxed) <= _total(none), (relaxed.summary(), none.summary())
    for loop, n in xla.loops.items():
        assert n <= none.loops.get(loop, n), (loop, xla.summary(), none.summary())
