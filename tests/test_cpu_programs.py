"""The cpu backend against the interpreter on every JAX test program (tests/programs.py), under the
pipelines `none` (one kernel per op), `xla`, `xla-relaxed` and `hlofuse` (whole loops).

Each program is lowered once (`programs.lower_to_hlo`), optimised with the pipeline, compiled to C
(through the build cache) and run on the program's own inputs (`make_args`, as in
tests/test_differential.py); the interpreter runs the same optimised module on the same inputs.
Integer and bool outputs must be equal; float outputs must agree on NaN positions and be close
within `TOLERANCES` below (or the program's own tolerance against jax.jit when that is looser):

| dtype | rtol  | atol  | why the generated C may differ from the interpreter                  |
|-------|-------|-------|----------------------------------------------------------------------|
| f64   | 1e-12 | 1e-14 | reductions and dots accumulate in a different order                  |
| f32   | 1e-5  | 1e-6  | mathlib's polynomial transcendentals (a few ulp); sums and dots      |
|       |       |       | accumulate in f32 (the interpreter: every op in f64, rounded once)   |
| f16   | 2e-3  | 2e-3  | computed in f32 and rounded per op: chains differ by 1-2 ulp of f16  |
| bf16  | 2e-2  | 2e-2  | as f16, with bf16's 8-bit mantissa                                   |

A program the backend genuinely cannot run (an op the lowering refuses with a CompileError) is
listed in `REFUSED` with the reason and runs as a strict xfail: it must keep raising exactly that.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from hlofuse.backends import cpu, interpreter  # noqa: E402
from hlofuse.backends.cpu import build  # noqa: E402
from hlofuse.errors import CompileError  # noqa: E402
from hlofuse.passes.pipelines import run_pipeline  # noqa: E402
from hlofuse.text import parse  # noqa: E402
from programs import PROGRAMS, Program, lower_to_hlo  # noqa: E402

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

PIPELINES = ("none", "xla", "xla-relaxed", "hlofuse")

# dtype name -> (rtol, atol); see the table in the module docstring.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-12, 1e-14),
    "float32": (1e-5, 1e-6),
    "float16": (2e-3, 2e-3),
    "bfloat16": (2e-2, 2e-2),
}

# program name -> why the cpu backend refuses it (an unsupported op, named). Empty: every program
# runs.
REFUSED: dict[str, str] = {}


@functools.cache
def _args(p: Program) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(a) for a in p.make_args())


def _compare(where: str, got: list[np.ndarray], want: list[np.ndarray], p: Program) -> None:
    assert len(got) == len(want), f"{where}: {len(got)} outputs, the interpreter gave {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        at = f"{where} output {i}"
        assert g.shape == w.shape, f"{at}: shape {g.shape} != {w.shape}"
        assert g.dtype == w.dtype, f"{at}: dtype {g.dtype} != {w.dtype}"
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=at)
            continue
        rtol, atol = TOLERANCES[w.dtype.name]
        rtol, atol = max(rtol, p.rtol), max(atol, p.atol)
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(g64), np.isnan(w64), err_msg=at + " (nan)")
        np.testing.assert_allclose(g64, w64, rtol=rtol, atol=atol, err_msg=at)


def _cases() -> list[object]:
    cases = []
    for p in PROGRAMS:
        for pipeline in PIPELINES:
            marks = []
            if p.name in REFUSED:
                marks.append(pytest.mark.xfail(reason=REFUSED[p.name], raises=CompileError,
                                               strict=True))
            cases.append(pytest.param(p, pipeline, id=f"{p.name}-{pipeline}", marks=marks))
    return cases


@pytest.mark.parametrize(("program", "pipeline"), _cases())
def test_cpu_matches_interpreter(program: Program, pipeline: str) -> None:
    module = parse(lower_to_hlo(program))
    run_pipeline(module, pipeline)
    args = _args(program)
    try:
        exe = cpu.compile_module(module)
    except (build.CCompileError, build.CompilerNotFoundError):
        raise
    except CompileError as exc:
        if program.name in REFUSED:
            raise
        pytest.fail(f"{program.name} ({pipeline}): the cpu backend refused it: {exc}")
    got = exe(*args)
    want = interpreter.run(module, *args)
    _compare(f"{program.name} ({pipeline})", got, want, program)
