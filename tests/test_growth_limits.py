"""Work that could grow from a small input is bounded, by counting (never timing): the
instructions unrolling creates in a module (nested loops multiply), and the elements constant
folding evaluates (a tiny op with a huge padding, window or broadcast)."""

from __future__ import annotations

import numpy as np
import pytest

from hlo_loops import stacked
from hlofuse.backends import interpreter
from hlofuse.passes.fusion.small_loops import UnrollSmallLoops
from hlofuse.passes.fusion.trace import trace_of
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.passes.simplify.constant_fold import ConstantFolding, fold_work
from hlofuse.passes.simplify.growth import body_size, budget_limit, growth_of
from hlofuse.passes.simplify.unroll import WhileLoopUnroller
from hlofuse.text import parse

ROUNDS = """  c13 = u32[] constant(13)
  b13 = u32[2] broadcast(c13), dimensions={{}}
  c19 = u32[] constant(19)
  b19 = u32[2] broadcast(c19), dimensions={{}}
  l1 = u32[2] shift-left(x0, b13)
  r1 = u32[2] shift-right-logical(x0, b19)
  o1 = u32[2] xor(l1, r1)
  l2 = u32[2] shift-left(o1, b19)
  r2 = u32[2] shift-right-logical(o1, b13)
  {first} = u32[2] xor(l2, r2)
"""


def nested_rng_loops(depth: int, trips: int = 8) -> str:
    """`depth` nested while loops of `trips` iterations, each body a few threefry-like u32
    rounds (random-number loops, which unroll-small-loops always unrolls) around the next."""
    parts = ["HloModule nested\n"]
    for d in range(depth):
        inner = ""
        if d > 0:
            inner = (f"  z{d} = s32[] constant(0)\n"
                     f"  it{d} = (s32[], u32[2]) tuple(z{d}, xs)\n"
                     f"  w{d} = (s32[], u32[2]) while(it{d}), condition=cond{d - 1}, "
                     f"body=body{d - 1}\n"
                     f"  x = u32[2] get-tuple-element(w{d}), index=1\n")
        rounds = ROUNDS.format(first="xs" if d > 0 else "x")
        parts.append(f"""body{d} {{
  p = (s32[], u32[2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x0 = u32[2] get-tuple-element(p), index=1
{rounds}{inner}  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  y = u32[2] add(x, x0)
  ROOT t = (s32[], u32[2]) tuple(i1, y)
}}

cond{d} {{
  p = (s32[], u32[2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant({trips})
  ROOT lt = pred[] compare(i, n), direction=LT
}}
""")
    parts.append(f"""ENTRY main {{
  x = u32[2] parameter(0)
  z = s32[] constant(0)
  init = (s32[], u32[2]) tuple(z, x)
  w = (s32[], u32[2]) while(init), condition=cond{depth - 1}, body=body{depth - 1}
  ROOT r = u32[2] get-tuple-element(w), index=1
}}
""")
    return "\n".join(parts)


def _size(module: object) -> int:
    return sum(len(c.instructions) for c in module.computations)  # type: ignore[attr-defined]


def test_five_nested_loops_stay_within_the_unroll_budget() -> None:
    """8^5 copies of the innermost body unrolled completely would be ~550,000 instructions;
    the module's total stays within its budget and the refusal names the rule."""
    text = nested_rng_loops(5)
    assert len(text) < 5000
    module = parse(text)
    UnrollSmallLoops(unroll_small_loops=8).run(module)
    limit = budget_limit(module)
    assert limit == 8192  # the floor: the module is small
    assert 0 < growth_of(module) <= limit
    assert _size(module) <= limit + 200
    refused = [e for e in trace_of(module) if e.rule == "unroll_budget"]
    assert refused and refused[0].verdict == "refused"
    assert refused[0].figures["limit"] == limit
    assert "budget" in refused[0].reason


def test_the_budget_is_a_setting_and_values_hold() -> None:
    text = nested_rng_loops(3)
    module = parse(text)
    run_pipeline(module, "hlofuse{unroll_budget=300,unroll_budget_per_instruction=0}")
    assert growth_of(module) <= 300
    assert any(e.rule == "unroll_budget" for e in trace_of(module))
    x = np.array([0x12345678, 0x9ABCDEF0], np.uint32)
    np.testing.assert_array_equal(interpreter.run(module, x)[0],
                                  interpreter.run(parse(text), x)[0])


def test_the_budget_is_shared_by_every_unroll_of_a_module() -> None:
    """The count lives in the module: a second pass (or a second run) sees what the first one
    created, and the budget is set by the module's size before its first unroll."""
    module = parse(nested_rng_loops(2))
    WhileLoopUnroller(factor=8, max_growth=150, growth_per_instruction=0).run(module)
    first = growth_of(module)
    assert 0 < first <= 150
    assert not WhileLoopUnroller(factor=8, max_growth=150, growth_per_instruction=0).run(module)
    assert growth_of(module) == first


def test_the_budget_grows_with_the_module() -> None:
    module = parse(nested_rng_loops(2))
    base = sum(body_size(c) for c in module.computations)
    assert 40 < base <= _size(module)
    assert budget_limit(module, 10, 1000) == 1000 * base


def test_auto_unroll_refuses_past_the_budget() -> None:
    module = parse(stacked(64, 24))
    run_pipeline(module, "hlofuse{whole_loop_fusion=false,min_unroll_gain=1.0,"
                         "unroll_budget=10,unroll_budget_per_instruction=0}")
    (event,) = [e for e in trace_of(module) if e.pass_name == "auto-unroll"]
    assert event.verdict == "refused" and event.rule == "unroll_budget"
    assert growth_of(module) <= 10


def test_unroller_settings_are_checked() -> None:
    from hlofuse.errors import PassError

    with pytest.raises(PassError):
        WhileLoopUnroller(max_growth=-1)


# ----- constant folding ----------------------------------------------------------------------

def reduce_window(pad: int, stride: int, source: str = "c = f32[4] constant({1, 2, 3, 4})"
                  ) -> str:
    return f"""HloModule rw
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY main {{
  {source}
  init = f32[] constant(0)
  ROOT rw = f32[3] reduce-window(c, init), window={{size=4 stride={stride} pad={pad}_{pad}}}, \
to_apply=add
}}
"""


def _opcodes(module: object) -> list[str]:
    return [i.opcode.value for i in module.entry.instructions]  # type: ignore[attr-defined]


def test_a_tiny_reduce_window_with_huge_padding_is_not_folded() -> None:
    """3 results from 4 elements, but the interpreter would pad to 2^29 elements (2 GiB)."""
    pad = 1 << 28
    module = parse(reduce_window(pad, pad))
    rw = module.entry.root
    assert fold_work(rw) > 1 << 29
    assert not ConstantFolding().run(module)
    assert _opcodes(module)[-1] == "reduce-window"
    run_pipeline(module, "hlofuse")
    assert "reduce-window" in str([i.opcode.value for c in module.computations
                                   for i in c.instructions])


def test_the_cpu_backend_reads_huge_padding_without_building_it() -> None:
    from hlofuse.backends.cpu import compile_module

    pad = 1 << 40  # 8 TiB of padding: only the windows that touch data are read
    module = parse(reduce_window(pad, pad, "c = f32[4] parameter(0)"))
    out = compile_module(module)(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(out[0], np.array([0, 6, 0], np.float32))


def test_small_windows_still_fold() -> None:
    module = parse(reduce_window(2, 2))
    assert ConstantFolding().run(module)
    assert _opcodes(module) == ["constant"]
    np.testing.assert_array_equal(interpreter.run(module)[0], np.array([3, 10, 7], np.float32))


def test_every_folder_shares_the_work_bound() -> None:
    """One bound for every opcode: a fold past `max_work` is refused whatever the op."""
    rows = ", ".join("{" + ", ".join(["1"] * 32) + "}" for _ in range(8))
    cols = ", ".join("{" + ", ".join(["2"] * 8) + "}" for _ in range(32))
    text = f"""HloModule m
ENTRY main {{
  a = f32[8,32] constant({{{rows}}})
  b = f32[32,8] constant({{{cols}}})
  ROOT d = f32[8,8] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""
    module = parse(text)
    work = fold_work(module.entry.root)
    assert work >= 8 * 8 * 32
    assert not ConstantFolding(max_work=work - 1).run(parse(text))
    assert ConstantFolding(max_work=work).run(module)


def test_a_fold_that_runs_out_of_memory_is_left_alone() -> None:
    """Past the bound's own check (here switched off), a MemoryError while evaluating leaves
    the op for the backend instead of escaping as an internal error. (The interpreter's
    convolution pads in memory; its reduce-window no longer does, so that one folds.)"""
    pad = 1 << 40
    module = parse(f"""HloModule cv
ENTRY main {{
  c = f32[1,1,4] constant({{{{{{1, 2, 3, 4}}}}}})
  k = f32[1,1,1] constant({{{{{{1}}}}}})
  ROOT cv = f32[1,1,3] convolution(c, k), window={{size=1 stride={pad} pad={pad}_{pad}}}, \
dim_labels=bf0_oi0->bf0
}}
""")
    assert not ConstantFolding(max_work=1 << 62).run(module)
    assert _opcodes(module)[-1] == "convolution"
    folded = parse(reduce_window(pad, pad))
    assert ConstantFolding(max_work=1 << 62).run(folded)
    assert _opcodes(folded)[-1] == "constant"


def one_trip_loop_dag(depth: int) -> str:
    """Loops of one trip whose bodies each hold two loops over the body below: inlining every
    one-trip loop makes 2^depth copies of the innermost body."""
    parts = ["HloModule dag\n"]
    for d in range(depth):
        inner = "  x2 = f32[2] sine(x1)\n" if d == 0 else f"""  za = s32[] constant(0)
  ia = (s32[], f32[2]) tuple(za, x1)
  wa = (s32[], f32[2]) while(ia), condition=cond, body=body{d - 1}
  xa = f32[2] get-tuple-element(wa), index=1
  ib = (s32[], f32[2]) tuple(za, xa)
  wb = (s32[], f32[2]) while(ib), condition=cond, body=body{d - 1}
  x2 = f32[2] get-tuple-element(wb), index=1
"""
        parts.append(f"""body{d} {{
  p = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x0 = f32[2] get-tuple-element(p), index=1
  x1 = f32[2] cosine(x0)
{inner}  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[2]) tuple(i1, x2)
}}
""")
    parts.append(f"""cond {{
  p = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(1)
  ROOT lt = pred[] compare(i, n), direction=LT
}}

ENTRY main {{
  x = f32[2] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[2]) tuple(z, x)
  w = (s32[], f32[2]) while(init), condition=cond, body=body{depth - 1}
  ROOT r = f32[2] get-tuple-element(w), index=1
}}
""")
    return "\n".join(parts)


def test_one_trip_loops_are_inlined_within_the_budget() -> None:
    """2^30 copies unbounded; the simplifier's inlining charges the module's budget."""
    from hlofuse.passes.simplify.while_loops import WhileLoopSimplifier

    module = parse(one_trip_loop_dag(30))
    while WhileLoopSimplifier(max_growth=400, growth_per_instruction=0).run(module):
        pass
    assert 0 < growth_of(module) <= 400
    assert any(i.opcode.value == "while" for c in module.computations for i in c.instructions)


def test_one_trip_loops_still_inline_and_values_hold() -> None:
    text = one_trip_loop_dag(4)
    module = parse(text)
    run_pipeline(module, "simplify")
    assert not any(i.opcode.value == "while" for c in module.computations
                   for i in c.instructions)
    x = np.array([0.5, -1.25], np.float32)
    np.testing.assert_allclose(interpreter.run(module, x)[0], interpreter.run(parse(text), x)[0],
                               rtol=1e-6)


def test_a_reducer_with_a_loop_is_never_folded() -> None:
    """The reducer's trip count (2^31 here) is the input's to choose: the fold's work is
    unknown, so the reduce is left for the backend."""
    text = """HloModule m
body {
  p = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[]) tuple(i1, x)
}
cond {
  p = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(2147483647)
  ROOT lt = pred[] compare(i, n), direction=LT
}
slow_add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  z = s32[] constant(0)
  init = (s32[], f32[]) tuple(z, a)
  w = (s32[], f32[]) while(init), condition=cond, body=body
  a1 = f32[] get-tuple-element(w), index=1
  ROOT s = f32[] add(a1, b)
}
ENTRY main {
  c = f32[4] constant({1, 2, 3, 4})
  zero = f32[] constant(0)
  ROOT r = f32[] reduce(c, zero), dimensions={0}, to_apply=slow_add
}
"""
    module = parse(text)
    assert fold_work(module.entry.root) > 1 << 60
    assert not ConstantFolding().run(module)
    assert _opcodes(module)[-1] == "reduce"
