"""While loops: the trip-count analysis, the while-loop simplifier (trip count 0/1, invariant
forwarding, constant sinking, dead tuple elements) and the unroller."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlofuse.analysis.loops import induction_variable, trip_count
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import TupleShape
from hlofuse.text import parse
from pass_testing import (
    all_opcodes,
    args_strategy,
    check_outputs,
    opcodes,
    optimize,
    random_args,
)


def loop(init: str = "0", step: str = "add(i, one)", direction: str = "LT", bound: str = "10",
         dtype: str = "s32", swap: bool = False) -> str:
    """A JAX-style counted loop: (i, x, k, junk); x = x * k + i each step; junk is dead."""
    cmp = f"compare(n, i), direction={direction}" if swap else \
        f"compare(i, n), direction={direction}"
    return f"""
HloModule loop

cond {{
  p = ({dtype}[], f32[4], f32[4], f32[4]) parameter(0)
  i = {dtype}[] get-tuple-element(p), index=0
  n = {dtype}[] constant({bound})
  ROOT lt = pred[] {cmp}
}}

body {{
  p = ({dtype}[], f32[4], f32[4], f32[4]) parameter(0)
  i = {dtype}[] get-tuple-element(p), index=0
  x = f32[4] get-tuple-element(p), index=1
  k = f32[4] get-tuple-element(p), index=2
  junk = f32[4] get-tuple-element(p), index=3
  one = {dtype}[] constant(1)
  i2 = {dtype}[] {step}
  xk = f32[4] multiply(x, k)
  fi = f32[] convert(i)
  fb = f32[4] broadcast(fi), dimensions={{}}
  x2 = f32[4] add(xk, fb)
  j2 = f32[4] exponential(junk)
  ROOT t = ({dtype}[], f32[4], f32[4], f32[4]) tuple(i2, x2, k, j2)
}}

ENTRY e {{
  x0 = f32[4] parameter(0)
  i0 = {dtype}[] constant({init})
  k0 = f32[4] constant({{0.5, 1, -1, 2}})
  init = ({dtype}[], f32[4], f32[4], f32[4]) tuple(i0, x0, k0, x0)
  w = ({dtype}[], f32[4], f32[4], f32[4]) while(init), condition=cond, body=body
  r = f32[4] get-tuple-element(w), index=1
  kk = f32[4] get-tuple-element(w), index=2
  ROOT o = (f32[4], f32[4]) tuple(r, kk)
}}
"""


def _while(text: str):  # type: ignore[no-untyped-def]
    m = parse(text, verify=True)
    return next(i for i in m.entry.instructions if i.opcode is Opcode.WHILE)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, 10),
        ({"init": "3"}, 7),
        ({"init": "10"}, 0),
        ({"init": "12"}, 0),
        ({"direction": "LE"}, 11),
        ({"direction": "NE"}, 10),
        ({"step": "add(one, i)"}, 10),
        ({"step": "multiply(i, one)"}, None),  # not an induction update
        ({"init": "10", "bound": "0", "step": "subtract(i, one)", "direction": "GT"}, 10),
        ({"init": "10", "bound": "0", "step": "subtract(i, one)", "direction": "GE"}, 11),
        ({"swap": True, "direction": "GT"}, 10),  # n > i  ==  i < n
        ({"step": "subtract(i, one)"}, None),  # counts away from the bound: never ends
        ({"direction": "NE", "bound": "-3"}, None),  # wraps around: no count
        ({"dtype": "u8", "bound": "250"}, 250),
        ({"dtype": "s8", "direction": "LE", "bound": "127"}, None),  # i = 128 overflows s8
    ],
)
def test_trip_count(kwargs: dict, expected: int | None) -> None:
    w = _while(loop(**kwargs))
    assert trip_count(w) == expected


def test_trip_count_with_bound_carried_in_the_tuple() -> None:
    text = """
HloModule m

cond {
  p = (s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] get-tuple-element(p), index=1
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] get-tuple-element(p), index=1
  two = s32[] constant(2)
  i2 = s32[] add(i, two)
  ROOT t = (s32[], s32[]) tuple(i2, n)
}

ENTRY e {
  z = s32[] constant(1)
  n0 = s32[] constant(8)
  init = (s32[], s32[]) tuple(z, n0)
  ROOT w = (s32[], s32[]) while(init), condition=cond, body=body
}
"""
    w = _while(text)
    assert trip_count(w) == 4  # i = 1, 3, 5, 7
    iv = induction_variable(w)
    assert iv is not None and (iv.index, iv.init, iv.step, iv.bound) == (0, 1, 2, 8)


def test_simplifier_drops_dead_elements_and_sinks_constants() -> None:
    before, after, _ = optimize(loop(), "while-loop-simplifier")
    w = next(i for i in after.entry.instructions if i.opcode is Opcode.WHILE)
    assert isinstance(w.shape, TupleShape) and len(w.shape.elements) == 2  # (i, x)
    body = w.attrs["body"]
    assert opcodes(after, body.name)["exponential"] == 0  # the dead element's update is gone
    assert opcodes(after, body.name)["constant"] == 2  # one, and the sunk k0
    # the invariant k is read from the init outside the loop
    assert after.entry.root.operand(1).opcode is Opcode.CONSTANT
    check_outputs(before, after, random_args(before))


def test_simplifier_keeps_elements_the_condition_or_side_effects_read() -> None:
    text = loop().replace(
        "  j2 = f32[4] exponential(junk)\n",
        "  j2 = f32[4] exponential(junk)\n  tok = token[] after-all()\n"
        "  o = token[] outfeed(j2, tok)\n")
    _, after, _ = optimize(text, "while-loop-simplifier")
    w = next(i for i in after.entry.instructions if i.opcode is Opcode.WHILE)
    assert len(w.shape.elements) == 3  # type: ignore[union-attr]  (i, x, junk): k sunk


def test_trip_count_zero_removes_the_loop() -> None:
    before, after, _ = optimize(loop(init="10"), "while-loop-simplifier,tuple-simplifier,dce")
    assert "while" not in all_opcodes(after)
    assert [c.name for c in after.computations] == ["e"]
    check_outputs(before, after, random_args(before))


def test_trip_count_one_inlines_the_body() -> None:
    before, after, _ = optimize(loop(init="9"), "while-loop-simplifier,tuple-simplifier,dce")
    assert "while" not in all_opcodes(after)
    assert opcodes(after)["multiply"] == 1
    check_outputs(before, after, random_args(before))


def test_shared_body_is_copied_before_editing() -> None:
    text = loop().replace(
        "  ROOT o = (f32[4], f32[4]) tuple(r, kk)",
        "  w2 = (s32[], f32[4], f32[4], f32[4]) while(init), condition=cond, body=body\n"
        "  jj = f32[4] get-tuple-element(w2), index=3\n"
        "  ROOT o = (f32[4], f32[4], f32[4]) tuple(r, kk, jj)")
    before, after, _ = optimize(text, "while-loop-simplifier,dce")
    whiles = [i for i in after.entry.instructions if i.opcode is Opcode.WHILE]
    assert len(whiles) == 2
    assert whiles[0].attrs["body"] is not whiles[1].attrs["body"]
    check_outputs(before, after, random_args(before))


@pytest.mark.parametrize(("trip", "factor", "whiles"), [(10, 5, 1), (10, 4, 1), (3, 4, 0),
                                                         (4, 4, 0)])
def test_unroller(trip: int, factor: int, whiles: int) -> None:
    text = loop(init=str(10 - trip))
    before, after, _ = optimize(text, f"while-loop-unroller{{factor={factor}}}")
    assert all_opcodes(after)["while"] == whiles
    if whiles:
        w = next(i for i in after.entry.instructions if i.opcode is Opcode.WHILE)
        assert opcodes(after, w.attrs["body"].name)["multiply"] == factor
        assert trip_count(w) is None or trip_count(w) == trip // factor
        peeled = opcodes(after)["multiply"]
        assert peeled == trip % factor
    check_outputs(before, after, random_args(before))


def test_unroll_then_simplify_leaves_k_copies() -> None:
    before, after, _ = optimize(loop(), "unroll-while{factor=5},simplify")
    w = next(i for i in after.entry.instructions if i.opcode is Opcode.WHILE)
    assert trip_count(w) == 2
    body = w.attrs["body"].name
    assert opcodes(after, body)["multiply"] == 5 and opcodes(after, body)["tuple"] == 1
    assert opcodes(after, body)["get-tuple-element"] == 2
    check_outputs(before, after, random_args(before))


def test_unroller_leaves_unknown_trip_counts() -> None:
    _, _, report = optimize(loop(step="multiply(i, one)"), "while-loop-unroller")
    assert not report.changed


CASES = [
    (loop(), "while-loop-simplifier"),
    (loop(init="9"), "while-loop-simplifier"),
    (loop(init="3", direction="LE"), "while-loop-unroller{factor=3}"),
    (loop(init="10", bound="0", step="subtract(i, one)", direction="GT"),
     "while-loop-unroller{factor=4},simplify"),
]


@pytest.mark.parametrize(("text", "spec"), CASES, ids=[str(i) for i in range(len(CASES))])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_while_passes_keep_interpreter_outputs(text: str, spec: str,
                                               data: st.DataObject) -> None:
    before, after, _ = optimize(text, spec)
    check_outputs(before, after, data.draw(args_strategy(before)))


def test_side_effecting_loops_run_their_effects_the_right_number_of_times() -> None:
    fx = loop().replace(
        "  j2 = f32[4] exponential(junk)\n",
        "  j2 = f32[4] exponential(junk)\n  tok = token[] after-all()\n"
        "  o = token[] outfeed(j2, tok)\n")
    _, after, _ = optimize(fx.replace("i0 = s32[] constant(0)", "i0 = s32[] constant(9)"),
                           "while-loop-simplifier,dce")
    assert all_opcodes(after)["while"] == 0 and all_opcodes(after)["outfeed"] == 1
    _, after, _ = optimize(fx.replace("i0 = s32[] constant(0)", "i0 = s32[] constant(10)"),
                           "while-loop-simplifier,dce")
    assert all_opcodes(after)["while"] == 0 and all_opcodes(after)["outfeed"] == 0
    _, after, _ = optimize(fx.replace("i0 = s32[] constant(0)", "i0 = s32[] constant(7)"),
                           "while-loop-unroller{factor=4},dce")
    assert all_opcodes(after)["while"] == 0 and all_opcodes(after)["outfeed"] == 3


def test_constant_false_condition_means_zero_trips() -> None:
    text = loop().replace("  ROOT lt = pred[] compare(i, n), direction=LT",
                          "  ROOT f = pred[] constant(false)")
    assert trip_count(_while(text)) == 0
    before, after, _ = optimize(text, "simplify")
    assert "while" not in all_opcodes(after)
    check_outputs(before, after, random_args(before))


def test_a_fused_condition_keeps_its_trip_count() -> None:
    """Priority fusion fuses the bound's constant into the condition's compare; the trip count
    is still read through the fusion (whole-loop fusion and auto-unroll need it)."""
    from hlo_loops import stacked
    from hlofuse.analysis.loops import condition_of
    from hlofuse.passes.pipelines import run_pipeline

    module = parse(stacked(s=20))
    run_pipeline(module, "xla-priority")
    (w,) = [i for c in module.computations for i in c.instructions if i.opcode is Opcode.WHILE]
    assert condition_of(w).root.opcode is Opcode.FUSION
    assert trip_count(w) == 20
