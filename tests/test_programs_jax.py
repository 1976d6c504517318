"""The differential-suite program registry itself: every program runs under jax.jit, lowers to HLO
text, and the programs jointly cover the HLO opcodes hlofuse must handle."""

from __future__ import annotations

import re
from functools import cache

import pytest

jax = pytest.importorskip("jax")

import numpy as np  # noqa: E402

import programs  # noqa: E402  (tests/ is on sys.path under pytest's default rootdir import mode)
from programs import (  # noqa: E402
    COMPARE_DIRECTIONS,
    IMPOSSIBLE_OPCODES,
    PROGRAMS,
    REQUIRED_OPCODES,
    Program,
    by_name,
    hlo_opcodes,
    lower_to_hlo,
)

# The regex of the brief: it sees array-shaped instructions only (tuple shapes contain spaces).
SIMPLE_OPCODE_RE = re.compile(r"= [^ ]+ ([a-z\-]+)\(")

# Opcodes from the required list that JAX 0.10.2 cannot produce in lowered HLO (and why):
#   logistic -- lax.logistic lowers to divide(1, 1 + exp(-x)); its hlo.logistic lowering is
#               commented out in jax/_src/lax/lax.py ("There is no HLO logistic/sigmoid
#               primitive").
#   copy     -- copy_p lowers to its operand (StableHLO has no copy op); `copy` instructions are
#               only inserted by XLA's compile-time passes (copy insertion / layout assignment).
# optimization-barrier is spelled `opt-barrier` in HLO text and is covered under that name.
EXPECTED_IMPOSSIBLE = {"logistic", "copy"}


@cache
def _hlo(name: str) -> str:
    return lower_to_hlo(by_name(name))


def test_registry_shape() -> None:
    assert len(PROGRAMS) >= 48
    names = [p.name for p in PROGRAMS]
    assert len(set(names)) == len(names)
    for p in PROGRAMS:
        assert isinstance(p, Program)
        assert re.fullmatch(r"[a-z][a-z0-9_]*", p.name), p.name
        assert p.rtol > 0 and p.atol > 0
        assert by_name(p.name) is p
    with pytest.raises(KeyError):
        by_name("no_such_program")


def test_required_tags_present() -> None:
    tags = set().union(*(p.tags for p in PROGRAMS))
    assert {"rng", "loop", "scan", "gather", "scatter", "sort", "cond", "dot", "reduce"} <= tags
    assert {"while", "cartpole", "grad", "optimizer"} <= tags


@pytest.mark.parametrize("name", [p.name for p in PROGRAMS])
def test_program_runs_and_lowers(name: str) -> None:
    p = by_name(name)
    args = p.make_args()
    again = p.make_args()
    for a, b in zip(args, again, strict=True):  # deterministic inputs
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for a in args:
        assert isinstance(a, np.ndarray | np.generic), type(a)
        assert np.asarray(a).dtype.itemsize <= 4, "no 64-bit inputs (x64 is off)"
    out = jax.jit(p.fn)(*args)
    leaves = jax.tree.leaves(out)
    assert leaves
    for leaf in leaves:
        assert np.asarray(leaf).dtype.itemsize <= 4
        assert np.asarray(leaf).size <= 1 << 16, "keep programs small for the interpreter"
    text = _hlo(name)
    assert text.startswith("HloModule ")
    assert "ENTRY " in text
    assert text.count(" parameter(") >= len(args)
    ops = hlo_opcodes(text)
    assert "parameter" in ops
    # The simple regex finds a subset of what the robust parser finds.
    assert set(SIMPLE_OPCODE_RE.findall(text)) <= ops


def test_opcode_coverage() -> None:
    seen: set[str] = set()
    for p in PROGRAMS:
        seen |= hlo_opcodes(_hlo(p.name))
    missing = REQUIRED_OPCODES - seen
    assert not missing, f"no program produces: {sorted(missing)}"
    assert set(IMPOSSIBLE_OPCODES) == EXPECTED_IMPOSSIBLE
    # Still impossible? If JAX starts emitting one of them, move it to REQUIRED_OPCODES.
    assert not (seen & EXPECTED_IMPOSSIBLE), sorted(seen & EXPECTED_IMPOSSIBLE)


def test_compare_directions_and_total_order() -> None:
    texts = [_hlo(p.name) for p in PROGRAMS]
    directions = set().union(*(re.findall(r"direction=([A-Z]+)", t) for t in texts))
    assert directions >= COMPARE_DIRECTIONS
    assert any("type=TOTALORDER" in t for t in texts)


def test_edge_case_programs_exercise_their_semantics() -> None:
    """Spot checks that the edge cases are really in the inputs (XLA semantics via jax.jit)."""
    p = by_name("int32_div_rem_edge_cases")
    a, b = p.make_args()
    div, rem = (np.asarray(x) for x in jax.jit(p.fn)(a, b)[:2])
    assert div[5] == -1 and rem[5] == 5  # x / 0, x % 0
    assert div[6] == np.iinfo(np.int32).min and rem[6] == 0  # INT_MIN / -1

    p = by_name("convert_float_to_int_saturating")
    (a,) = p.make_args()
    i32 = np.asarray(jax.jit(p.fn)(a)[0])
    assert i32[0] == 0  # nan -> 0
    assert i32[1] == np.iinfo(np.int32).max and i32[2] == np.iinfo(np.int32).min

    text = _hlo("scatter_at_set_add_mul_min_max")
    assert "scatter(" in text
    text = _hlo("switch_three_branches")
    assert "conditional(" in text and "branch_computations={" in text
    # three-branch switch
    assert any(len(m.split(",")) == 3 for m in re.findall(r"branch_computations=\{([^}]*)\}", text))


def test_cartpole_programs_cover_the_paper_variants() -> None:
    names = {p.name for p in PROGRAMS if "cartpole" in p.tags}
    assert {
        "cartpole_baseline",
        "cartpole_precomputed",
        "cartpole_separate",
        "cartpole_unrolled",
    } <= names
    baseline = hlo_opcodes(_hlo("cartpole_baseline"))
    separate = hlo_opcodes(_hlo("cartpole_separate"))
    assert {"while", "concatenate", "shift-left", "xor"} <= baseline  # threefry inside the loop
    assert "concatenate" not in separate and "xor" not in separate


def test_cartpole_numpy_matches_jax() -> None:
    from hlofuse.examples import cartpole

    fn, args = cartpole.make("separate", 64, 30)
    got = cartpole.numpy_rollout(*args)
    want = jax.jit(fn)(*args)
    assert len(got) == len(want) == 6
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-4, atol=1e-4)
    assert programs.by_name("cartpole_separate").tags >= {"scan", "cartpole"}


def test_builtin_examples_are_listed_and_relocatable() -> None:
    from hlofuse import examples

    names = examples.names()
    for variant in ("baseline", "precomputed", "separate", "unrolled"):
        assert f"cartpole_{variant}" in names
    for name in names:
        text = examples.text(name)
        assert text.startswith("HloModule ")
        assert examples.path(name).read_text(encoding="utf-8") == text
        table = text.split("FileNames\n", 1)[1].split("\n\n", 1)[0] if "FileNames" in text else ""
        for line in table.splitlines():  # no absolute, machine-specific source paths
            assert not re.search(r'"(/|[A-Za-z]:\\)', line), line
    with pytest.raises(KeyError, match="cartpole_baseline"):
        examples.text("no_such_example")
