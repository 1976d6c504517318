"""Fusion mechanics on the IR (hlofuse.ir.fusion): create, fuse, multi-output, merge."""

from __future__ import annotations

import numpy as np

from fusion_helpers import random_args
from hlofuse.backends import interpreter
from hlofuse.ir import fusion as F
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.verifier import verify
from hlofuse.text import parse, print_module

CHAIN = """
HloModule m
ENTRY e {
  p0 = f32[8] parameter(0)
  p1 = f32[8] parameter(1)
  add = f32[8] add(p0, p1)
  exp = f32[8] exponential(add)
  ROOT mul = f32[8] multiply(exp, p0)
}
"""

DIAMOND = """
HloModule m
ENTRY e {
  p0 = f32[8] parameter(0)
  p1 = f32[8] parameter(1)
  add = f32[8] add(p0, p1)
  neg = f32[8] negate(add)
  exp = f32[8] exponential(add)
  ROOT t = (f32[8], f32[8]) tuple(neg, exp)
}
"""


def _same_outputs(text: str, module: object) -> None:
    before = parse(text)
    args = random_args(before)
    after = interpreter.run(module, *args)  # type: ignore[arg-type]
    for w, g in zip(interpreter.run(before, *args), after):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def _check(text: str, module: object) -> None:
    verify(module)  # type: ignore[arg-type]
    parse(print_module(module))  # type: ignore[arg-type]
    _same_outputs(text, module)


def test_create_fusion_wraps_instruction_and_links_back() -> None:
    m = parse(CHAIN)
    mul = m.instruction("mul")
    fusion = F.create_fusion(mul, "kLoop")
    assert m.entry.root is fusion
    assert fusion.name == "fusion" and fusion.fusion_kind == "kLoop"
    comp = fusion.fused_computation
    assert comp.fusion_instruction is fusion and comp in m.computations
    assert comp.name.startswith("fused_computation")
    assert [p.parameter_number for p in comp.parameters] == [0, 1]
    assert comp.root.opcode is Opcode.MULTIPLY and comp.root.name == "mul"
    _check(CHAIN, m)


def test_fuse_instruction_chain_dedups_operands_and_removes_dead_producers() -> None:
    m = parse(CHAIN)
    fusion = F.create_fusion(m.instruction("mul"))
    F.fuse_instruction(fusion, m.instruction("exp"))
    F.fuse_instruction(fusion, m.instruction("add"))
    assert [o.name for o in fusion.operands] == ["p0", "p1"]  # p0 read twice, one operand
    assert {i.opcode for i in F.fused_instructions(fusion)} == {
        Opcode.ADD, Opcode.EXP, Opcode.MULTIPLY}
    assert [i.name for i in m.entry.instructions] == ["p0", "p1", "fusion"]
    assert F.fused_parameter_for(fusion, m.instruction("p1")).parameter_number == 1
    _check(CHAIN, m)


def test_fuse_instruction_duplicates_producer_with_other_users() -> None:
    m = parse(DIAMOND)
    fusion = F.create_fusion(m.instruction("exp"))
    F.fuse_instruction(fusion, m.instruction("add"))
    assert m.instruction("add").parent is m.entry  # still used by neg: duplicated
    assert len(F.fused_instructions(fusion)) == 2
    _check(DIAMOND, m)


def test_fuse_fusion_producer_merges_its_computation() -> None:
    m = parse(CHAIN)
    producer = F.create_fusion(m.instruction("exp"))
    F.fuse_instruction(producer, m.instruction("add"))
    consumer = F.create_fusion(m.instruction("mul"))
    producer_comp = producer.fused_computation
    F.fuse_instruction(consumer, producer)
    assert producer.parent is None and producer_comp not in m.computations
    assert sorted(i.opcode.value for i in F.fused_instructions(consumer)) == [
        "add", "exponential", "multiply"]
    _check(CHAIN, m)


def test_fuse_into_multi_output_exports_the_producer() -> None:
    m = parse(DIAMOND)
    fusion = F.create_fusion(m.instruction("exp"))
    F.fuse_into_multi_output(fusion, m.instruction("add"))
    assert F.is_multi_output_fusion(fusion)
    assert all(i.name != "add" or i.parent is not m.entry for i in m.all_instructions())
    gtes = [u for u in fusion.users if u.opcode is Opcode.GET_TUPLE_ELEMENT]
    assert len(gtes) == 2  # exp for the tuple, add for neg
    _check(DIAMOND, m)


def test_fuse_into_multi_output_of_a_root_producer() -> None:
    text = """
HloModule m
ENTRY e {
  p0 = f32[8] parameter(0)
  add = f32[8] add(p0, p0)
  ROOT neg = f32[8] negate(add)
}
"""
    m = parse(text)
    fusion = F.create_fusion(m.instruction("neg"))
    F.fuse_into_multi_output(fusion, m.instruction("add"))
    assert m.entry.root.opcode is Opcode.GET_TUPLE_ELEMENT
    _check(text, m)


def test_merge_sibling_fusions_multi_output() -> None:
    m = parse(DIAMOND)
    a = F.create_fusion(m.instruction("neg"))
    b = F.create_fusion(m.instruction("exp"))
    F.merge_fusions_multi_output(a, b)
    assert b.parent is None
    assert [o.name for o in a.operands] == ["add"]
    root = a.fused_computation.root
    assert root.opcode is Opcode.TUPLE and root.operand_count == 2
    _check(DIAMOND, m)


def test_merge_consumer_into_producer_fusion() -> None:
    m = parse(CHAIN)
    a = F.create_fusion(m.instruction("exp"))
    b = F.create_fusion(m.instruction("mul"))
    F.merge_fusions_multi_output(a, b)
    assert b.parent is None
    assert a.fused_computation.root.opcode is Opcode.TUPLE
    _check(CHAIN, m)


def test_set_kind_validates() -> None:
    m = parse(CHAIN)
    fusion = F.create_fusion(m.instruction("mul"))
    F.set_kind(fusion, "kInput")
    assert fusion.fusion_kind == "kInput"
    try:
        F.set_kind(fusion, "kBogus")
    except ValueError:
        pass
    else:
        raise AssertionError("kBogus accepted")


def test_fuse_multi_output_producer_read_through_gtes() -> None:
    text = """
HloModule m
fp {
  x = f32[8] parameter(0)
  n = f32[8] negate(x)
  e = f32[8] exponential(x)
  ROOT t = (f32[8], f32[8]) tuple(n, e)
}
ENTRY e {
  p0 = f32[8] parameter(0)
  prod = (f32[8], f32[8]) fusion(p0), kind=kLoop, calls=fp
  g0 = f32[8] get-tuple-element(prod), index=0
  g1 = f32[8] get-tuple-element(prod), index=1
  c = f32[8] add(g0, g1)
  ROOT out = (f32[8], f32[8]) tuple(c, g1)
}
"""
    m = parse(text)
    consumer = F.create_fusion(m.instruction("c"))
    F.fuse_into_multi_output(consumer, m.instruction("prod"))
    assert [o.name for o in consumer.operands] == ["p0"]
    assert all(i.name != "prod" for i in m.entry.instructions)
    _check(text, m)
