"""Compile work stays near-linear in module size (issue 13).

The `xla` pipeline on generated modules of n and 4n instructions: the larger may do at most 6x
the work of the smaller (linear is 4x, quadratic 16x). Work is counted, not timed (a busy
machine would fail a timing): the Python and builtin calls made (`cProfile`'s call count),
which is the same on every run of the same code. Counting needs the pass core's sources, so
these tests are marked `pure_core` and run by tests/test_native.py under HLOFUSE_PURE=1 where
the core is compiled. The CPU times themselves are a benchmark (benchmarks/compile_time.py).

Also: a 10,000-instruction chain goes through `xla` under Python's default recursion limit and
ends as one kernel.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
from collections.abc import Callable

import pytest

from hlofuse.ir.computation import Computation
from hlofuse.ir.dtypes import DTYPES
from hlofuse.ir.fusion import create_fusion
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.base import Context, PassEvent
from hlofuse.passes.pipelines import build, run_pipeline
from hlofuse.text import parse

MAX_RATIO = 6.0


def chain_hlo(n: int, size: int = 1024) -> str:
    """n elementwise instructions in a row (binary ones read a second parameter)."""
    unary = ("tanh", "exponential", "negate")
    binary = ("add", "multiply", "subtract")
    lines = ["HloModule chain", "", "ENTRY main {",
             f"  p0 = f32[{size}] parameter(0)", f"  p1 = f32[{size}] parameter(1)"]
    prev = "p0"
    for i in range(n):
        op = (unary + binary)[i % 6]
        args = prev if op in unary else f"{prev}, p1"
        root = "ROOT " if i == n - 1 else ""
        lines.append(f"  {root}x{i} = f32[{size}] {op}({args})")
        prev = f"x{i}"
    return "\n".join([*lines, "}"]) + "\n"


def wide_hlo(k: int, size: int = 64) -> str:
    """k independent exp -> add -> tanh branches, each on its own parameter, one root tuple."""
    lines = ["HloModule wide", "", "ENTRY main {"]
    for i in range(k):
        lines += [f"  p{i} = f32[{size}] parameter({i})",
                  f"  e{i} = f32[{size}] exponential(p{i})",
                  f"  a{i} = f32[{size}] add(e{i}, p{i})",
                  f"  t{i} = f32[{size}] tanh(a{i})"]
    shapes = ", ".join([f"f32[{size}]"] * k)
    lines.append(f"  ROOT out = ({shapes}) tuple({', '.join(f't{i}' for i in range(k))})")
    return "\n".join([*lines, "}"]) + "\n"


def scan_hlo(steps: int, b: int = 8, d: int = 8) -> str:
    """An unrolled lax.scan of a GRU-like cell, as jax.lax.scan(..., unroll=True) lowers it
    once the calls are inlined: every step slices its input from one stacked parameter (so
    `steps` sibling fusions share that operand, all connected through the carry), two dots on
    the carry, an elementwise gate, and a row sum stacked into the second output."""
    f, g = f"f32[{b},{d}]", f"f32[{b}]"
    lines = ["HloModule scan", "", "add_f32 {", "  x = f32[] parameter(0)",
             "  y = f32[] parameter(1)", "  ROOT s = f32[] add(x, y)", "}", "", "ENTRY main {",
             f"  carry = {f} parameter(0)", f"  xs = f32[{steps},{b},{d}] parameter(1)",
             f"  w = f32[{d},{d}] parameter(2)", f"  u = f32[{d},{d}] parameter(3)",
             "  one = f32[] constant(1)", "  zero = f32[] constant(0)"]
    h, ys = "carry", []
    for t in range(steps):
        lines += [
            f"  s{t} = f32[1,{b},{d}] slice(xs), slice={{[{t}:{t + 1}], [0:{b}], [0:{d}]}}",
            f"  x{t} = {f} reshape(s{t})",
            f"  hu{t} = {f} dot({h}, u), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}",
            f"  za{t} = {f} add(hu{t}, x{t})",
            f"  zn{t} = {f} negate(za{t})",
            f"  ze{t} = {f} exponential(zn{t})",
            f"  ones{t} = {f} broadcast(one), dimensions={{}}",
            f"  zd{t} = {f} add(ze{t}, ones{t})",
            f"  z{t} = {f} divide(ones{t}, zd{t})",
            f"  omz{t} = {f} subtract(ones{t}, z{t})",
            f"  keep{t} = {f} multiply(omz{t}, {h})",
            f"  hw{t} = {f} dot({h}, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}",
            f"  ca{t} = {f} add(hw{t}, x{t})",
            f"  c{t} = {f} tanh(ca{t})",
            f"  new{t} = {f} multiply(z{t}, c{t})",
            f"  h{t} = {f} add(keep{t}, new{t})",
            f"  sq{t} = {f} multiply(h{t}, h{t})",
            f"  y{t} = {g} reduce(sq{t}, zero), dimensions={{1}}, to_apply=add_f32",
            f"  yb{t} = f32[1,{b}] reshape(y{t})"]
        h = f"h{t}"
        ys.append(f"yb{t}")
    lines += [f"  ys = f32[{steps},{b}] concatenate({', '.join(ys)}), dimensions={{0}}",
              f"  ROOT out = ({f}, f32[{steps},{b}]) tuple({h}, ys)"]
    return "\n".join([*lines, "}"]) + "\n"


def calls(fn: Callable[[], object]) -> int:
    """The Python and builtin calls `fn()` makes (its work, counted)."""
    prof = cProfile.Profile()
    prof.enable()
    try:
        fn()
    finally:
        prof.disable()
    return int(pstats.Stats(prof).total_calls)  # type: ignore[attr-defined]


def pass_calls(text: str, pass_name: str) -> int:
    """Calls `pass_name` made within the `xla` pipeline (summed over its runs)."""
    module = parse(text)
    counter = _PassCounter(pass_name)
    build("xla").execute(module, Context(observers=[counter]))
    return counter.spent


class _PassCounter:
    """An observer counting the calls made during one pass's runs."""

    def __init__(self, pass_name: str) -> None:
        self.pass_name, self.spent = pass_name, 0
        self.prof: cProfile.Profile | None = None

    def __call__(self, event: PassEvent) -> None:
        if event.pass_name != self.pass_name:
            return
        if event.phase == "start":
            self.prof = cProfile.Profile()
            self.prof.enable()
        elif self.prof is not None:
            self.prof.disable()
            self.spent += int(pstats.Stats(self.prof).total_calls)  # type: ignore[attr-defined]
            self.prof = None


def pipeline_calls(text: str) -> int:
    module = parse(text)
    return calls(lambda: run_pipeline(module, "xla"))


def assert_near_linear(small: str, large: str) -> None:
    pipeline_calls(small)  # warm-up: imports, first-use caches
    n_small = pipeline_calls(small)
    n_large = pipeline_calls(large)
    ratio = n_large / n_small
    assert ratio < MAX_RATIO, (
        f"4x the instructions took {ratio:.1f}x the work ({n_small} calls -> {n_large})")


@pytest.mark.pure_core
def test_chain_scales_near_linearly() -> None:
    assert_near_linear(chain_hlo(500), chain_hlo(2000))


@pytest.mark.pure_core
def test_wide_graph_scales_near_linearly() -> None:
    assert_near_linear(wide_hlo(100), wide_hlo(400))


@pytest.mark.pure_core
def test_scan_multi_output_fusion_scales_near_linearly() -> None:
    """An unrolled scan: its steps are siblings of the stacked input, all connected, so
    sibling fusion refuses steps^2/2 pairs (each a trace line, as in XLA); those must stay
    cheap enough that multi-output fusion grows near-linearly with the module."""
    small, large = scan_hlo(32), scan_hlo(128)
    pass_calls(small, "multi-output-fusion")  # warm-up
    n_small = pass_calls(small, "multi-output-fusion")
    n_large = pass_calls(large, "multi-output-fusion")
    ratio = n_large / n_small
    assert ratio < MAX_RATIO, (
        f"4x the steps took {ratio:.1f}x the work in multi-output fusion "
        f"({n_small} calls -> {n_large})")


def wrap_every_instruction_calls(n: int) -> int:
    """Calls made wrapping each of n independent instructions of one computation into its own
    fusion, as instruction fusion does (`create_fusion` while removals are deferred). Each
    reads its own parameter and nothing reads them (but the root): a shared operand's user list
    and a wide user's operand list cost a scan per edit, which is not what this measures."""
    shape = ArrayShape(DTYPES["f32"], (8,))
    module = Module("wide")
    comp = module.add_computation(Computation("main"), entry=True)
    negates = []
    for i in range(n):
        p = comp.add(Instruction.create(Opcode.PARAMETER, shape, name=f"p{i}",
                                        parameter_number=i))
        negates.append(comp.add(Instruction.create(Opcode.NEGATE, shape, [p])))
    comp.root = negates[-1]

    def wrap() -> None:
        with comp.deferred_removals():
            for instr in reversed(negates):
                create_fusion(instr)

    return calls(wrap)


@pytest.mark.pure_core
def test_wrapping_instructions_into_fusions_scales_near_linearly() -> None:
    """Each new fusion takes its instruction's slot (found through an index of the list, not a
    scan), and its fused computation goes before the caller in the module's list (looked for
    from the end): both were O(n) per fusion, O(n^2) per pass on a large entry. (A scan by a
    builtin such as `list.index` is one call whatever its length; benchmarks/compile_time.py
    times the pipeline itself.)"""
    wrap_every_instruction_calls(500)  # warm-up
    n_small = wrap_every_instruction_calls(3000)
    n_large = wrap_every_instruction_calls(12000)
    ratio = n_large / n_small
    assert ratio < MAX_RATIO, (
        f"4x the instructions took {ratio:.1f}x the work to wrap ({n_small} calls -> "
        f"{n_large})")


def test_scan_module_fuses_like_xla() -> None:
    """The generated scan fuses: each step's elementwise gate is one kernel with its slice."""
    module = parse(scan_hlo(4))
    run_pipeline(module, "xla")
    assert not any(i.opcode is Opcode.SLICE for i in module.entry.instructions)


def test_deep_chain_fuses_without_recursion() -> None:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # Python's default: passes must not lean on a raised one
    try:
        module = parse(chain_hlo(10_000))
        run_pipeline(module, "xla")
    finally:
        sys.setrecursionlimit(limit)
    root = module.entry.root
    assert root.opcode is Opcode.FUSION
    assert len(root.fused_computation.instructions) == 10_000 + 2  # the ops and p0, p1
    kernels = [i for i in module.entry.instructions if i.opcode is not Opcode.PARAMETER]
    assert kernels == [root]


def test_opcode_members_are_plain_class_attributes() -> None:
    """`Opcode.X` is read millions of times per compile. Python 3.11's EnumType.__getattr__
    would route every such read through a slow hook; Opcode's metaclass has none, and the
    class still behaves as the Enum it is."""
    import enum

    from hlofuse.ir.attributes import AttrKind
    from hlofuse.ir.opcodes import Category
    from hlofuse.passes.fusion.predicates import UseKind

    for cls in (Opcode, Category, AttrKind, UseKind):
        assert not any("__getattr__" in vars(k) for k in type(cls).__mro__), cls
        assert all(vars(cls)[name] is member for name, member in cls.__members__.items())
    assert UseKind(3) is UseKind.USE and min(UseKind.USE, UseKind.REUSE) is UseKind.REUSE
    assert "FUSION" in vars(Opcode) and Opcode.FUSION is vars(Opcode)["FUSION"]
    assert isinstance(Opcode.ADD, enum.Enum) and issubclass(Opcode, enum.Enum)
    assert Opcode("add") is Opcode.ADD and Opcode["ADD"] is Opcode.ADD
    assert [op.name for op in Opcode][:3] == ["ABS", "ACOS", "ACOSH"]
    assert len(Opcode) == len(Opcode.__members__) == len(set(Opcode)) > 100
    assert Opcode.ADD in Opcode and repr(Opcode.ADD) == "<Opcode.ADD: 'add'>"
    assert str(Opcode.GET_TUPLE_ELEMENT) == "get-tuple-element"
    try:
        Opcode("not-an-opcode")
    except ValueError as err:
        assert "not a valid Opcode" in str(err)
    else:
        raise AssertionError("Opcode('not-an-opcode') did not raise")


def test_called_computations_lists_every_attribute_in_order() -> None:
    """`Instruction.called_computations` (and `passes.utils.called`, the same function) with its
    fast paths lists what the ordered walk over `COMPUTATION_ATTRS` does, on modules with
    fusions, reduces, while loops and conditionals."""
    from pathlib import Path

    from hlofuse.ir.attributes import COMPUTATION_ATTRS
    from hlofuse.passes.utils import called

    def walk(instr: Instruction) -> list[Computation]:
        out: list[Computation] = []
        for key in COMPUTATION_ATTRS:
            value = instr.attrs.get(key)
            if value is not None:
                out.extend(value if isinstance(value, tuple) else (value,))
        return out

    here = Path(__file__).parent / "hlo"
    seen = several = 0
    for name in ("xla_control_flow.hlo", "xla_reduce_fusion.hlo", "jax_loop_short.hlo",
                 "jax_mlp_short.hlo"):
        module = parse((here / name).read_text())
        run_pipeline(module, "xla")
        for comp in module.computations:
            for instr in comp.instructions:
                assert called(instr) == walk(instr), instr.name
                seen += bool(walk(instr))
                several += len(walk(instr)) > 1
    assert seen >= 5 and several >= 1


def negate_chain(n: int) -> tuple[Computation, list[Instruction]]:
    """A computation of one parameter and n negates in a row, in a module."""
    shape = ArrayShape(DTYPES["f32"], (8,))
    module = Module("chain")
    comp = module.add_computation(Computation("main"), entry=True)
    prev = comp.add(Instruction.create(Opcode.PARAMETER, shape, name="p", parameter_number=0))
    instrs = [prev]
    for _ in range(n):
        prev = comp.add(Instruction.create(Opcode.NEGATE, shape, [prev]))
        instrs.append(prev)
    comp.root = prev
    return comp, instrs


def test_positions_stay_right_through_every_kind_of_edit() -> None:
    """`Computation.position` answers from an index that may be stale after insertions,
    removals, slot replacements and in-place reordering: it must still give the instruction's
    true index every time."""
    import random

    rng = random.Random(7)
    comp, instrs = negate_chain(300)
    shape = instrs[0].shape
    for step in range(3000):
        listed = comp.instructions
        x = listed[rng.randrange(len(listed))]
        kind = step % 5
        if kind == 0:  # insert after or before (shifts the later ones)
            new = Instruction.create(Opcode.NEGATE, shape, [listed[0]])
            comp.add(new, after=x) if rng.random() < 0.5 else comp.add(new, before=x)
        elif kind == 1:  # remove an unused, non-root one
            dead = [i for i in listed if not i.users and i is not comp.root]
            if dead:
                comp.remove(rng.choice(dead))
        elif kind == 2 and x.opcode is Opcode.NEGATE:  # one slot written
            comp.replace_instruction(x, Instruction.create(Opcode.NEGATE, shape, x.operands))
        elif kind == 3:  # reordered in place by the caller, who says so
            k = listed.index(x)
            j = rng.randrange(len(listed))
            del listed[k]
            listed.insert(j, x)
            comp.moved(2)
        for y in rng.sample(comp.instructions, 5):
            assert comp.position(y) == comp.instructions.index(y)
    # an edit nobody reported still gives right answers (by a rebuilt index)
    listed = comp.instructions
    listed.reverse()
    assert all(comp.position(y) == k for k, y in enumerate(listed))


def insert_after_calls(n: int) -> int:
    """Calls made inserting an instruction after each of n in a computation of n (as
    multi-output fusion inserts get-tuple-elements after the fusions it grows), in random
    order."""
    import random

    comp, instrs = negate_chain(n)
    order = instrs[1:]
    random.Random(3).shuffle(order)

    def insert() -> None:
        for x in order:
            comp.add(Instruction.create(Opcode.NEGATE, x.shape, [x]), after=x)

    return calls(insert)


@pytest.mark.pure_core
def test_inserting_after_instructions_scales_below_quadratic() -> None:
    """A position lookup was a scan of the list, O(n) per insertion after an instruction:
    multi-output fusion's merges paid it for every get-tuple-element they add (16x for 4x the
    instructions, measured 16.6x). Lookups now cost O(sqrt(n)) amortized after insertions
    anywhere (8x)."""
    insert_after_calls(500)  # warm-up
    n_small = insert_after_calls(3000)
    n_large = insert_after_calls(12000)
    ratio = n_large / n_small
    assert ratio < 11.0, (
        f"4x the instructions took {ratio:.1f}x the work to insert after ({n_small} calls -> "
        f"{n_large})")
