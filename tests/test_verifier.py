"""Tests of `hlofuse.ir.verifier`: inconsistent modules are rejected with an error naming the
instruction at fault; every conformance case and the JAX probe verify cleanly; it is fast."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hlofuse.errors import HloVerifyError
from hlofuse.ir.computation import Computation
from hlofuse.ir.dtypes import F32
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape
from hlofuse.ir.verifier import verify, verify_instruction
from hlofuse.text import parse

ROOT = Path(__file__).resolve().parents[1]
CONFORMANCE = ROOT.parent / "shared" / "conformance" / "xla_fusion_cases.jsonl"
PROBE = ROOT / "tests" / "hlo" / "jax_probe_short.hlo"

ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""

# (case id, HLO text, instruction the error names, message substring)
BAD_MODULES: list[tuple[str, str, str, str]] = [
    ("add_shape_mismatch", """
ENTRY e {
  p0 = f32[4] parameter(0)
  p1 = f32[5] parameter(1)
  ROOT a = f32[4] add(p0, p1)
}""", "a", "add operands must have the same dimensions: f32[4] vs f32[5]"),
    ("declared_shape_wrong", """
ENTRY e {
  p0 = f32[4] parameter(0)
  ROOT n = f32[5] negate(p0)
}""", "n", "declared shape f32[5] does not match the inferred shape f32[4] of negate"),
    ("declared_dtype_wrong", """
ENTRY e {
  p0 = f32[4] parameter(0)
  ROOT n = s32[4] negate(p0)
}""", "n", "declared shape s32[4] does not match the inferred shape f32[4]"),
    ("broadcast_dims_wrong", """
ENTRY e {
  p = f32[3] parameter(0)
  ROOT b = f32[2,3] broadcast(p), dimensions={0}
}""", "b", "broadcast operand dimension 0 (size 3) maps to output dimension 0 (size 2)"),
    ("bad_gte_index", """
ENTRY e {
  p = (f32[], s32[]) parameter(0)
  ROOT g = f32[] get-tuple-element(p), index=2
}""", "g", "get-tuple-element index 2 out of range"),
    ("reduce_bad_to_apply", """
neg {
  a = f32[] parameter(0)
  ROOT n = f32[] negate(a)
}
ENTRY e {
  p = f32[8,4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[8] reduce(p, z), dimensions={1}, to_apply=neg
}""", "r", "reduce to_apply neg must take 2 parameters, takes 1"),
    ("reduce_to_apply_wrong_type", ADD.replace("f32", "s32") + """
ENTRY e {
  p = f32[8,4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[8] reduce(p, z), dimensions={1}, to_apply=add
}""", "r", "accumulator s32[] differs from init value 0 f32[]"),
    ("while_body_wrong_shape", """
cond {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[4]) parameter(0)
  ROOT x = f32[4] get-tuple-element(p), index=1
}
ENTRY e {
  init = (s32[], f32[4]) parameter(0)
  ROOT w = (s32[], f32[4]) while(init), condition=cond, body=body
}""", "w", "while body body must return the loop shape (s32[], f32[4]), returns f32[4]"),
    ("while_condition_not_pred", """
cond {
  p = (s32[]) parameter(0)
  ROOT i = s32[] get-tuple-element(p), index=0
}
body {
  ROOT p = (s32[]) parameter(0)
}
ENTRY e {
  init = (s32[]) parameter(0)
  ROOT w = (s32[]) while(init), condition=cond, body=body
}""", "w", "while condition cond must return pred[], returns s32[]"),
    ("conditional_branch_count", """
b0 {
  ROOT p = f32[] parameter(0)
}
ENTRY e {
  sel = pred[] parameter(0)
  x = f32[] parameter(1)
  ROOT c = f32[] conditional(sel, x, x, x), branch_computations={b0, b0, b0}
}""", "c", "a conditional with a pred selector takes true_computation and false_computation"),
    ("conditional_operand_count", """
b0 {
  ROOT p = f32[] parameter(0)
}
ENTRY e {
  sel = s32[] parameter(0)
  x = f32[] parameter(1)
  ROOT c = f32[] conditional(sel, x), branch_computations={b0, b0, b0}
}""", "c", "conditional has 3 branches but 1 branch operands"),
    ("conditional_branch_parameter", """
b0 {
  ROOT p = f32[] parameter(0)
}
b1 {
  ROOT p = s32[] parameter(0)
}
ENTRY e {
  sel = s32[] parameter(0)
  x = f32[] parameter(1)
  ROOT c = f32[] conditional(sel, x, x), branch_computations={b0, b1}
}""", "c", "conditional branch b1 parameter s32[] does not match operand 2 f32[]"),
    ("fusion_parameter_mismatch", """
fused {
  p0 = f32[5] parameter(0)
  ROOT n = f32[5] negate(p0)
}
ENTRY e {
  x = f32[4] parameter(0)
  ROOT f = f32[5] fusion(x), kind=kLoop, calls=fused
}""", "f", "fusion operand 0 f32[4] does not match parameter 0 f32[5] of fused"),
    ("fusion_parameter_count", """
fused {
  p0 = f32[4] parameter(0)
  p1 = f32[4] parameter(1)
  ROOT a = f32[4] add(p0, p1)
}
ENTRY e {
  x = f32[4] parameter(0)
  ROOT f = f32[4] fusion(x), kind=kLoop, calls=fused
}""", "f", "fusion passes 1 operands to fused, which takes 2 parameters"),
    ("call_parameter_mismatch", ADD + """
ENTRY e {
  x = f32[] parameter(0)
  y = s32[] parameter(1)
  ROOT c = f32[] call(x, y), to_apply=add
}""", "c", "call operand 1 s32[] does not match parameter 1 f32[] of add"),
    ("compare_type_mismatch", """
ENTRY e {
  x = f32[4] parameter(0)
  ROOT c = pred[4] compare(x, x), direction=LT, type=UNSIGNED
}""", "c", "compare type UNSIGNED does not fit operands f32[4]"),
    ("slice_out_of_bounds", """
ENTRY e {
  x = f32[10] parameter(0)
  ROOT s = f32[4] slice(x), slice={[8:12]}
}""", "s", "slice [8:12] out of bounds in dimension 0 of f32[10]"),
    ("dot_contracting_mismatch", """
ENTRY e {
  a = f32[2,3] parameter(0)
  b = f32[4,5] parameter(1)
  ROOT d = f32[2,5] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""", "d", "dot contracting dimension sizes differ: lhs dimension 1 of f32[2,3] is 3"),
    ("gather_slice_sizes_wrong", """
ENTRY e {
  x = f32[10,7] parameter(0)
  i = s32[5] parameter(1)
  ROOT g = f32[5,7] gather(x, i), offset_dims={1}, collapsed_slice_dims={0},
      start_index_map={0}, index_vector_dim=1, slice_sizes={1,8}
}""", "g", "gather slice_sizes={1,8} out of bounds in dimension 1 of f32[10,7]"),
    ("concatenate_dims_mismatch", """
ENTRY e {
  a = f32[2,3] parameter(0)
  b = f32[3,3] parameter(1)
  ROOT c = f32[5,3] concatenate(a, b), dimensions={1}
}""", "c", "concatenate operands may differ only in dimension 1"),
    ("transpose_not_permutation", """
ENTRY e {
  x = f32[2,3] parameter(0)
  ROOT t = f32[3,2] transpose(x), dimensions={1,1}
}""", "t", "transpose dimensions={1,1} is not a permutation"),
    ("select_branch_mismatch", """
ENTRY e {
  p = pred[4] parameter(0)
  a = f32[4] parameter(1)
  b = f32[3] parameter(2)
  ROOT s = f32[4] select(p, a, b)
}""", "s", "select branches must have the same shape: f32[4] vs f32[3]"),
    ("sort_comparator_returns_float", ADD + """
ENTRY e {
  x = f32[8] parameter(0)
  ROOT srt = f32[8] sort(x), dimensions={0}, to_apply=add
}""", "srt", "sort comparator add must return pred[], returns f32[]"),
    ("dynamic_slice_too_large", """
ENTRY e {
  x = f32[10] parameter(0)
  i = s32[] parameter(1)
  ROOT d = f32[11] dynamic-slice(x, i), dynamic_slice_sizes={11}
}""", "d", "dynamic-slice size 11 out of bounds in dimension 0 of f32[10]"),
    ("reshape_element_count", """
ENTRY e {
  x = f32[2,3] parameter(0)
  ROOT r = f32[7] reshape(x)
}""", "r", "reshape must keep the element count"),
    ("iota_dimension", """
ENTRY e {
  ROOT i = s32[4] iota(), iota_dimension=1
}""", "i", "iota_dimension 1 out of range for s32[4]"),
    ("scatter_update_too_large", ADD + """
ENTRY e {
  x = f32[3,3] parameter(0)
  i = s32[2] parameter(1)
  u = f32[2,4] parameter(2)
  ROOT sc = f32[3,3] scatter(x, i, u), to_apply=add, update_window_dims={1},
      inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1
}""", "sc", "scatter update window dimension 1 of f32[2,4] is larger than operand"),
    ("pad_negative", """
ENTRY e {
  x = f32[4] parameter(0)
  z = f32[] constant(0)
  ROOT p = f32[0] pad(x, z), padding=-3_-2
}""", "p", "pad makes dimension 0 of f32[4] negative"),
    ("binary_implicit_broadcast", """
ENTRY e {
  x = f32[4] parameter(0)
  z = f32[] constant(1)
  ROOT m = f32[4] multiply(x, z)
}""", "m", "multiply operands must have the same dimensions: f32[4] vs f32[]"),
    ("exp_of_integer", """
ENTRY e {
  x = s32[4] parameter(0)
  ROOT y = s32[4] exponential(x)
}""", "y", "exponential expects a floating-point or complex operand, found s32[4]"),
    ("map_arity", ADD + """
ENTRY e {
  x = f32[4] parameter(0)
  ROOT m = f32[4] map(x), dimensions={0}, to_apply=add
}""", "m", "map function add must take (f32[]), takes (f32[], f32[])"),
    ("reduce_window_wrong_rank", ADD + """
ENTRY e {
  x = f32[4,4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[2,2] reduce-window(x, z), window={size=2 stride=2}, to_apply=add
}""", "r", "reduce-window window has 1 dimensions but the operand has 2"),
]


def _module(text: str) -> Module:
    return parse("HloModule bad\n" + text, verify=False)


@pytest.mark.parametrize("case_id,text,instr,message", BAD_MODULES,
                         ids=[c[0] for c in BAD_MODULES])
def test_bad_module_is_rejected(case_id: str, text: str, instr: str, message: str) -> None:
    module = _module(text)
    with pytest.raises(HloVerifyError) as info:
        verify(module)
    assert info.value.instruction == instr
    assert info.value.computation is not None
    assert message in info.value.message, info.value.message


def test_same_module_text_without_the_fault_verifies() -> None:
    verify(_module("""
ENTRY e {
  p0 = f32[4] parameter(0)
  p1 = f32[4] parameter(1)
  ROOT a = f32[4] add(p0, p1)
}"""))


def test_verify_instruction_checks_one_instruction() -> None:
    module = _module(BAD_MODULES[0][1])
    root = module.entry.root
    with pytest.raises(HloVerifyError, match="same dimensions") as info:
        verify_instruction(root)
    assert info.value.instruction == "a" and info.value.computation == "e"
    verify_instruction(module.entry.parameter(0))


# ----- structural faults, built programmatically ---------------------------------------------


def _simple() -> Module:
    """p -> n = negate(p) -> ROOT x = exponential(n)."""
    return _module("""
ENTRY e {
  p = f32[4] parameter(0)
  n = f32[4] negate(p)
  ROOT x = f32[4] exponential(n)
}""")


def _get(module: Module, name: str) -> Instruction:
    return module.instruction(name)


def _expect(module: Module, instr: str | set[str] | None, message: str) -> None:
    with pytest.raises(HloVerifyError) as info:
        verify(module)
    allowed = instr if isinstance(instr, set) else {instr}
    assert info.value.instruction in allowed, str(info.value)
    assert message in info.value.message, info.value.message


def test_users_list_out_of_sync() -> None:
    module = _simple()
    _get(module, "n").users.remove(_get(module, "x"))
    _expect(module, "x", "operand n does not list x among its users")


def test_stale_user() -> None:
    module = _simple()
    _get(module, "p").users.append(_get(module, "x"))
    _expect(module, "p", "x is listed as a user but does not use p")


def test_duplicate_users() -> None:
    module = _simple()
    p = _get(module, "p")
    p.users.append(p.users[0])
    _expect(module, "p", "users list has duplicates")


def test_operand_from_another_computation() -> None:
    module = _module(ADD + """
ENTRY e {
  p = f32[] parameter(0)
  ROOT n = f32[] negate(p)
}""")
    other = module.computation("add").parameter(0)
    module.entry.root.set_operand(0, other)
    _expect(module, "n", "operand a is in computation add, not in e")


def test_cycle() -> None:
    module = _simple()
    _get(module, "n").set_operand(0, _get(module, "x"))
    _expect(module, {"n", "x"}, "is part of a cycle through operand")


def test_instructions_out_of_order_but_acyclic_verify() -> None:
    module = _simple()
    module.entry.instructions.reverse()
    verify(module)


def test_root_not_in_computation() -> None:
    module = _simple()
    stray = Instruction.create(Opcode.NEGATE, ArrayShape(F32, (4,)), [_get(module, "p")],
                               name="stray")
    module.entry.root = stray
    _expect(module, "stray", "does not belong to computation e")


def test_duplicate_instruction_names() -> None:
    module = _simple()
    _get(module, "x").name = "n"
    _expect(module, "n", "instruction name n is used twice")


def test_duplicate_parameter_numbers() -> None:
    module = _module("""
ENTRY e {
  p0 = f32[4] parameter(0)
  p1 = f32[4] parameter(1)
  ROOT a = f32[4] add(p0, p1)
}""")
    module.entry.parameter(1).parameter_number = 0
    _expect(module, "p1", "parameter number 0 is used twice (also by p0)")


def test_parameter_number_gap() -> None:
    module = _module("""
ENTRY e {
  p0 = f32[4] parameter(0)
  p1 = f32[4] parameter(1)
  ROOT a = f32[4] add(p0, p1)
}""")
    module.entry.parameter(1).parameter_number = 2
    _expect(module, None, "parameter numbers must be 0..1, but 1 is missing")


def test_unknown_computation() -> None:
    module = _module(ADD + """
ENTRY e {
  x = f32[] parameter(0)
  ROOT c = f32[] call(x, x), to_apply=add
}""")
    stranger = Computation("stranger")
    a = stranger.add(Instruction.create(Opcode.PARAMETER, ArrayShape(F32, ()), name="a",
                                        parameter_number=0))
    b = stranger.add(Instruction.create(Opcode.PARAMETER, ArrayShape(F32, ()), name="b",
                                        parameter_number=1))
    stranger.root = stranger.add(Instruction.create(Opcode.ADD, ArrayShape(F32, ()), [a, b]))
    module.entry.root.attrs["to_apply"] = stranger
    _expect(module, "c", "calls computation stranger, which is not in the module")


def test_fusion_back_link_missing() -> None:
    module = _module("""
fused {
  p0 = f32[4] parameter(0)
  ROOT n = f32[4] negate(p0)
}
ENTRY e {
  x = f32[4] parameter(0)
  ROOT f = f32[4] fusion(x), kind=kLoop, calls=fused
}""")
    module.computation("fused").fusion_instruction = None
    _expect(module, "f", "does not point back at this fusion")


def test_fused_computation_called_by_another_instruction() -> None:
    module = _module("""
fused {
  p0 = f32[4] parameter(0)
  ROOT n = f32[4] negate(p0)
}
ENTRY e {
  x = f32[4] parameter(0)
  f = f32[4] fusion(x), kind=kLoop, calls=fused
  ROOT c = f32[4] call(f), to_apply=fused
}""")
    _expect(module, "c", "calls fused computation fused, which belongs to fusion f")


def test_constant_literal_mismatch() -> None:
    module = _module("""
ENTRY e {
  ROOT c = f32[3] constant({1, 2, 3})
}""")
    module.entry.root.literal = np.zeros((3,), np.float64)
    _expect(module, "c", "literal has numpy dtype float64")
    module.entry.root.literal = np.zeros((4,), np.float32)
    _expect(module, "c", "literal has numpy shape (4,)")


def test_missing_entry() -> None:
    module = Module("empty")
    with pytest.raises(HloVerifyError, match="has no entry computation"):
        verify(module)


def test_control_predecessor_elsewhere() -> None:
    module = _module(ADD + """
ENTRY e {
  p = f32[] parameter(0)
  ROOT n = f32[] negate(p)
}""")
    module.entry.root.control_predecessors.append(module.computation("add").root)
    _expect(module, "n", "control predecessor s is not in computation e")


def test_tuple_and_multi_output_fusion_compare_elementwise() -> None:
    module = _module("""
fused {
  p0 = f32[4] parameter(0)
  n = f32[4] negate(p0)
  e = f32[4] exponential(p0)
  ROOT t = (f32[4], f32[4]) tuple(n, e)
}
ENTRY e {
  x = f32[4] parameter(0)
  ROOT f = (f32[4], f32[4]) fusion(x), kind=kLoop, calls=fused
}""")
    verify(module)
    module.entry.root.shape = TupleShape((ArrayShape(F32, (4,)), ArrayShape(F32, (5,))))
    _expect(module, "f", "declared shape (f32[4], f32[5]) does not match the inferred shape "
                         "(f32[4], f32[4]) of fusion")


def test_layouts_are_ignored() -> None:
    verify(_module("""
ENTRY e {
  p = f32[2,3]{0,1} parameter(0)
  ROOT c = f32[2,3]{1,0} copy(p)
}"""))


def test_mixed_precision_is_opt_out() -> None:
    module = _module("""
ENTRY e {
  p = f16[4] parameter(0)
  ROOT c = f32[4] copy(p)
}""")
    verify(module)
    with pytest.raises(HloVerifyError, match="declared shape f32\\[4\\] does not match"):
        verify(module, allow_mixed_precision=False)


# ----- clean inputs ---------------------------------------------------------------------------


def _conformance_cases() -> list[dict[str, str]]:
    if not CONFORMANCE.exists():
        return []
    return [json.loads(line) for line in CONFORMANCE.read_text().splitlines() if line.strip()]


@pytest.mark.skipif(not CONFORMANCE.exists(), reason="conformance cases not present")
def test_every_conformance_case_verifies() -> None:
    cases = _conformance_cases()
    assert len(cases) >= 136
    failures = []
    for case in cases:
        try:
            verify(parse(case["hlo"], verify=False, allow_elided_constants=True))
        except HloVerifyError as e:
            failures.append(f"{case['id']}: {e}")
    assert not failures, "\n".join(failures)


@pytest.mark.skipif(not PROBE.exists(), reason="tests/hlo/jax_probe_short.hlo not present")
def test_jax_probe_verifies() -> None:
    verify(parse(PROBE.read_text(), verify=False))


def _chain(n: int) -> Module:
    lines = ["HloModule big", "ENTRY e {", "  p0 = f32[64] parameter(0)",
             "  p1 = f32[64] parameter(1)", "  x0 = f32[64] add(p0, p1)"]
    ops = ["multiply(x{i}, p1)", "exponential(x{i})", "maximum(x{i}, p0)", "negate(x{i})"]
    for i in range(n - 4):
        lines.append(f"  x{i + 1} = f32[64] " + ops[i % len(ops)].format(i=i))
    lines.append(f"  ROOT t = (f32[64]) tuple(x{n - 4})")
    lines.append("}")
    return parse("\n".join(lines), verify=False)


def test_verify_work_grows_linearly() -> None:
    """Verifying 4x the instructions does about 4x the work (calls counted: a count, not a
    timing a busy machine would fail)."""
    from test_compile_scaling import calls

    small, large = _chain(1250), _chain(5000)
    assert len(large.entry.instructions) == 5000
    verify(small)
    n_small = calls(lambda: verify(small))
    n_large = calls(lambda: verify(large))
    assert n_large / n_small < 4.5, (n_small, n_large)


def test_recursion_through_two_computations() -> None:
    module = _module("""
f {
  a = f32[] parameter(0)
  ROOT n = f32[] negate(a)
}
g {
  b = f32[] parameter(0)
  ROOT c = f32[] call(b), to_apply=f
}
ENTRY e {
  x = f32[] parameter(0)
  ROOT y = f32[] call(x), to_apply=g
}""")
    verify(module)
    f = module.computation("f")
    f.root.attrs["to_apply"] = module.computation("g")
    f.root.opcode = Opcode.CALL
    _expect(module, {"n", "c"}, "recursion is not allowed")


# ----- rng: XLA's ShapeVerifier::HandleRng ----------------------------------------------------


def _rng(operands: str, dtype: str = "f32", dist: str = "rng_uniform") -> str:
    return f"""
ENTRY e {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT r = {dtype}[8] rng({operands}), distribution={dist}
}}"""


@pytest.mark.parametrize("dtype,dist", [("f32", "rng_uniform"), ("f32", "rng_normal"),
                                        ("bf16", "rng_normal"), ("s32", "rng_uniform"),
                                        ("u8", "rng_uniform"), ("pred", "rng_uniform")])
def test_rng_with_two_scalar_operands_verifies(dtype: str, dist: str) -> None:
    """The form XLA's rng tests write (rng(lo, hi) for uniform, rng(mu, sigma) for normal)."""
    verify(_module(_rng("a, b", dtype, dist)))


@pytest.mark.parametrize("operands,found", [("", 0), ("a", 1), ("a, b, a", 3)])
def test_rng_operand_count_other_than_two_is_rejected(operands: str, found: int) -> None:
    with pytest.raises(HloVerifyError) as info:
        verify(_module(_rng(operands)))
    assert info.value.instruction == "r" and info.value.computation == "e"
    assert f"rng expects 2 operands, found {found}" in info.value.message


@pytest.mark.parametrize("dtype,dist,message", [
    ("s32", "rng_normal", "rng_normal needs a floating-point element type, found s32[]"),
    ("pred", "rng_normal", "rng_normal needs a floating-point element type, found pred[]"),
    ("c64", "rng_normal", "rng_normal needs a floating-point element type, found c64[]"),
    ("c64", "rng_uniform", "rng_uniform needs a floating-point, integral or pred element type"),
    ("f32", "rng_invalid", "rng distribution must be rng_uniform or rng_normal"),
])
def test_rng_element_type_and_distribution_rules(dtype: str, dist: str, message: str) -> None:
    with pytest.raises(HloVerifyError) as info:
        verify(_module(_rng("a, b", dtype, dist)))
    assert info.value.instruction == "r"
    assert message in info.value.message, info.value.message
