"""A sample of JAX's own op matrix (lax_test_util's records, see tests/jax_op_matrix.py) through
both backends against jax.jit: one case of every op and of every dtype, all in one module per
backend. `scripts/jax_op_matrix_report.py` runs all 3577 cases."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

import jax_op_matrix as matrix
from hlofuse.backends import cpu


def test_sample_matches_jax_on_both_backends() -> None:
    cases = matrix.all_cases()
    assert len(cases) == 3577  # 3182 lax_ops cases (x64), 248 reductions, 147 bitcasts
    picked = matrix.sample(cases, per_op=1, seed=15)
    ops = {c.op for c in picked}
    assert {"mulhi", "reduce", "bitcast_convert_type", "tan", "div"} <= ops
    dtypes = {c.dtype.name for c in picked}
    assert {"complex64", "complex128", "int4", "uint4", "float64", "bfloat16"} <= dtypes
    backends = matrix.BACKENDS if cpu.available() else ("interpreter",)
    results = matrix.run_cases(picked, backends, one_module=True)
    assert len(results) == len(picked) * len(backends)
    bad = [f"{r.backend} {r.case.name}: {r.status} {r.detail}" for r in results
           if r.status != "match"]
    assert not bad, "\n".join(bad)


def test_compare_reports_differences() -> None:
    import numpy as np

    assert matrix.compare([np.float32([1.0])], [np.float32([1.0 + 1e-7])], 1e-6) == ""
    assert "output 0" in matrix.compare([np.float32([1.0])], [np.float32([1.1])], 1e-6)
    assert "jax has" in matrix.compare([np.int32([1])], [np.int64([1])], 0)
    assert matrix.compare([np.float64([np.nan])], [np.float64([np.nan])], 0) == ""
