"""Helpers for the pass tests: parse-run-count in HLO text, and the differential check that a
pass keeps the interpreter's outputs (bitwise for integers and predicates; for floats equal
values, NaN where NaN, and the same sign of zero)."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hlofuse.ir.clone import clone_module
from hlofuse.ir.module import Module
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.base import PipelineReport
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse


def optimize(text: str, spec: str) -> tuple[Module, Module, PipelineReport]:
    """Parse `text` (verified), run `spec` on it with verification on; (before, after, report)."""
    before = parse(text, verify=True)
    after = clone_module(before)
    report = run_pipeline(after, spec, verify=True)
    return before, after, report


def opcodes(module: Module, computation: str | None = None) -> Counter[str]:
    """Opcode text -> count, over the entry (or the named computation)."""
    comp = module.entry if computation is None else module.computation(computation)
    return Counter(i.opcode.value for i in comp.instructions)


def all_opcodes(module: Module) -> Counter[str]:
    return Counter(i.opcode.value for i in module.all_instructions())


def instruction_count(module: Module) -> int:
    return sum(1 for _ in module.all_instructions())


def _elements(shape: ArrayShape) -> st.SearchStrategy[object]:
    dt = shape.dtype
    if dt.is_pred:
        return st.booleans()
    if dt.is_float:
        return st.floats(
            width=32 if dt.bits >= 32 else 16,
            allow_nan=True,
            allow_infinity=True,
            allow_subnormal=False,
        )
    info = np.iinfo(dt.np)
    return st.integers(int(info.min), int(info.max))


def args_strategy(module: Module) -> st.SearchStrategy[tuple[np.ndarray, ...]]:
    """Random arguments for the entry computation (special float values included)."""
    parts = []
    for p in module.entry.parameters:
        assert isinstance(p.shape, ArrayShape), "test modules take array parameters"
        parts.append(hnp.arrays(p.shape.dtype.np, p.shape.dims, elements=_elements(p.shape)))
    return st.tuples(*parts)


def random_args(module: Module, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in module.entry.parameters:
        s = p.shape
        assert isinstance(s, ArrayShape)
        if s.dtype.is_float:
            out.append(rng.standard_normal(s.dims).astype(s.dtype.np))
        elif s.dtype.is_pred:
            out.append(rng.integers(0, 2, s.dims).astype(bool))
        else:
            info = np.iinfo(s.dtype.np)
            lo, hi = max(int(info.min), -100), min(int(info.max), 100)
            out.append(rng.integers(lo, hi + 1, s.dims).astype(s.dtype.np))
    return out


def assert_same(
    a: list[np.ndarray], b: list[np.ndarray], *, rtol: float = 0.0, atol: float = 0.0
) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape, (i, x.dtype, y.dtype, x.shape, y.shape)
        if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
            xf, yf = x.astype(np.float64), y.astype(np.float64)
            assert np.array_equal(np.isnan(xf), np.isnan(yf)), f"output {i}: NaNs differ"
            ok = ~np.isnan(xf)
            if rtol == 0.0 and atol == 0.0:
                assert np.array_equal(xf[ok], yf[ok]), f"output {i}: {x} != {y}"
                assert np.array_equal(np.signbit(xf[ok]), np.signbit(yf[ok])), (
                    f"output {i}: signs of zero differ"
                )
            else:
                np.testing.assert_allclose(xf[ok], yf[ok], rtol=rtol, atol=atol)
        else:
            assert np.array_equal(x, y), f"output {i}: {x} != {y}"


def check_outputs(before: Module, after: Module, args: list[np.ndarray] | tuple) -> None:
    from hlofuse.backends import interpreter

    assert_same(interpreter.run(before, *args), interpreter.run(after, *args))
