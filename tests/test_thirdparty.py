"""A fixed sample of the third-party suite (benchmarks/thirdparty/, issue 28) at its small size,
through `hlofuse.jit` with the default pipeline: each program runs natively (the cpu backend,
no fallback to the interpreter, no hlofuse warning) and every output matches jax.jit.

The sample covers what those programs need beyond the project's own corpus: PureJaxRL's PPO
(LAPACK QR in flax's orthogonal init, threefry inside the rollout scan, the GAE scan, minibatch
permutations), a flax CNN train step with `TrainState.create`'s Python-int step (weak types,
convolutions and their gradients), an equinox MLP step (partitioned modules), diffrax's
adaptive solve (equinox's error check is a host callback; loops with unknown trip counts) and
a MinAtar environment (integer grids, gathers, scatters). The benchmark sizes and the other
programs run in benchmarks/thirdparty_suite.py.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("jax")
for lib in ("flax", "optax", "gymnax", "distrax", "equinox", "diffrax"):
    pytest.importorskip(lib)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from thirdparty import by_name  # noqa: E402
from thirdparty.common import Program, compare  # noqa: E402

SAMPLE = ("ppo-cartpole", "flax-cnn-trainstate", "equinox-mlp", "diffrax-tsit5-pid",
          "gymnax-Breakout-MinAtar")


@pytest.mark.parametrize("name", SAMPLE)
def test_program_runs_natively_and_matches_jax(name: str) -> None:
    import jax

    import hlofuse

    program = by_name(name)
    case = program.build(True)
    want = jax.jit(case.fn, static_argnums=case.static_argnums)(*case.args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jitted = hlofuse.jit(case.fn, static_argnums=case.static_argnums)
        got = jitted(*case.args)
    assert jitted.backend_for(*case.args) == "cpu"
    assert not [w for w in caught if "hlofuse" in str(w.message)], \
        [str(w.message) for w in caught]
    ok, why = compare(program, got, want)
    assert ok, why


def test_compare_integer_tolerances() -> None:
    """Integer leaves: equal, or (int_atol) within int_atol of jax.jit's, a fraction
    (int_mismatch) excepted: diffrax's step counts move by a few steps on last-bit
    differences (benchmarks/thirdparty/science.py)."""
    import numpy as np

    def program(**kw: float) -> Program:
        return Program("p", "lib", "src", lambda small: None, **kw)  # type: ignore[arg-type]

    want = (np.array([1.0, 2.0], np.float32), np.array([20, 21, 19, 30], np.int32))
    near = (want[0], np.array([25, 16, 19, 30], np.int32))   # off by 5 and 3
    far = (want[0], np.array([26, 21, 19, 30], np.int32))    # one off by 6
    assert compare(program(), want, want) == (True, "")
    ok, why = compare(program(), near, want)
    assert not ok and "50.0% of the elements differ" in why
    ok, why = compare(program(int_atol=5), near, want)
    assert ok and "50.0% of the integer elements differ" in why
    ok, why = compare(program(int_atol=5), far, want)
    assert not ok and "25.0% of the elements differ by more than 5" in why
    assert compare(program(int_atol=5, int_mismatch=0.25), far, want)[0]
    assert not compare(program(int_mismatch=0.25), near, want)[0]
    assert compare(program(int_mismatch=0.5), near, want)[0]
