"""Forms XLA's parser and verifier accept that hlofuse once refused, and forms they reject that
hlofuse once accepted (issue 29 item 3): each accepted form parses, verifies and round-trips
(`print(parse(t))` reads back equal and prints the same); dynamic shapes do not run, and say so
with `UnsupportedOpError` naming the instruction."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from hlofuse import api
from hlofuse.backends import interpreter
from hlofuse.backends.cpu.cexpr import UnsupportedOpError
from hlofuse.errors import HloError, HloParseError, HloVerifyError
from hlofuse.ir.shape import DIM_BOUNDED, DIM_STATIC, DIM_UNBOUNDED, ArrayShape
from hlofuse.text import parse, print_module

sys.path.insert(0, str(Path(__file__).resolve().parent))
from xla_parser_conformance import roundtrip_problem


def module(body: str, *, comps: str = "") -> str:
    return f"HloModule m\n\n{comps}ENTRY e {{\n{body}\n}}\n"


ACCEPTED: dict[str, str] = {
    "dot-s8-s16": module("""  a = s8[2,3] parameter(0)
  b = s16[3,4] parameter(1)
  ROOT d = s32[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}"""),
    "dot-bf16-s4": module("""  a = bf16[2,3] parameter(0)
  b = s4[3,4] parameter(1)
  ROOT d = f32[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}"""),
    "dynamic-bounded": module("""  a = s32[2,<=2,2] parameter(0)
  ROOT n = s32[2,<=2,2] negate(a)"""),
    "dynamic-unbounded": module("""  a = f32[?] parameter(0)
  ROOT n = f32[?] negate(a)"""),
    "dynamic-layout": module("""  a = f32[<=4,3]{0,1} parameter(0)
  s = s32[] parameter(1)
  ROOT d = f32[<=4,3]{0,1} set-dimension-size(a, s), dimensions={0}"""),
    "dynamic-in-tuple": module("""  a = f32[<=4] parameter(0)
  b = f32[?,2] parameter(1)
  ROOT t = (f32[<=4], f32[?,2]) tuple(a, b)"""),
    "dynamic-reshape": module("""  a = f32[4,2] parameter(0)
  s0 = s32[] parameter(1)
  s1 = s32[] parameter(2)
  ROOT r = f32[<=8,<=2] dynamic-reshape(a, s0, s1)"""),
    "dynamic-entry-layout": "HloModule m, entry_computation_layout={(f32[<=4]{0})->f32[<=4]{0}}"
                            "\n\nENTRY e {\n  a = f32[<=4]{0} parameter(0)\n"
                            "  ROOT n = f32[<=4]{0} negate(a)\n}\n",
    "constant-splat": module("  ROOT c = f32[3,3] constant(1)"),
    "constant-splat-complex": module("  ROOT c = c64[2] constant((1, -2))"),
    "constant-splat-pred": module("  ROOT c = pred[2,1] constant(true)"),
}

REJECTED: dict[str, tuple[str, type[HloError], str]] = {
    "recv-not-tuple": (module("""  t = token[] after-all()
  r = f32[] recv(t), channel_id=1
  ROOT d = (f32[], token[]) recv-done(r), channel_id=1"""), HloVerifyError,
        r"recv must produce a \(data, u32\[\], token\[\]\) tuple"),
    "dynamic-reshape-no-sizes": (module("""  a = f32[4] parameter(0)
  ROOT r = f32[<=4] dynamic-reshape(a)"""), HloVerifyError,
        r"needs 1 dimension size operand\(s\) after the operand, found 0"),
    "dynamic-reshape-float-size": (module("""  a = f32[4] parameter(0)
  s = f32[] parameter(1)
  ROOT r = f32[<=4] dynamic-reshape(a, s)"""), HloVerifyError, "must be an integer"),
    "dot-pred-s8": (module("""  a = pred[2,3] parameter(0)
  b = s8[3,4] parameter(1)
  ROOT d = s8[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}"""),
        HloVerifyError, "both be pred or neither"),
    "dot-narrow-result": (module("""  a = s8[2,3] parameter(0)
  b = s16[3,4] parameter(1)
  ROOT d = s8[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}"""),
        HloVerifyError, "must not be narrower"),
    "dynamic-bound-missing": (module("  ROOT a = f32[<=] parameter(0)"), HloParseError,
                              "expected a dimension size"),
    "splat-out-of-range": (module("  ROOT c = s8[3] constant(300)"), HloParseError,
                           "out of range"),
    "splat-two-values": (module("  ROOT c = f32[2] constant(1 2)"), HloParseError,
                         "unexpected '2' after the literal"),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_forms_parse_verify_and_roundtrip(name: str) -> None:
    text = ACCEPTED[name]
    parse(text)  # verified
    assert roundtrip_problem(text, verify=True) is None


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_rejected_forms(name: str) -> None:
    text, error, match = REJECTED[name]
    with pytest.raises(error, match=match):
        parse(text)


def test_dynamic_dimensions_are_read_and_printed() -> None:
    m = parse(ACCEPTED["dynamic-in-tuple"])
    a, b = m.entry.parameters
    assert a.shape == ArrayShape(a.shape.dtype, (4,), None, None, (DIM_BOUNDED,))
    assert b.shape.dynamic == (DIM_UNBOUNDED, DIM_STATIC)
    assert b.shape.dims == (0, 2)
    assert a.shape.is_dynamic and not ArrayShape(a.shape.dtype, (4,)).is_dynamic
    assert a.shape != ArrayShape(a.shape.dtype, (4,))  # f32[<=4] is not f32[4]
    printed = print_module(m)
    assert "f32[<=4] parameter(0)" in printed and "f32[?,2] parameter(1)" in printed
    assert "ROOT t = (f32[<=4], f32[?,2]) tuple(a, b)" in printed


def test_constant_splat_values() -> None:
    m = parse(ACCEPTED["constant-splat"])
    value = m.entry.root.literal
    assert isinstance(value, np.ndarray)
    np.testing.assert_array_equal(value, np.ones((3, 3), np.float32))
    assert "constant({ {1, 1, 1}, {1, 1, 1}, {1, 1, 1} })" in print_module(m)
    c = parse(ACCEPTED["constant-splat-complex"]).entry.root.literal
    np.testing.assert_array_equal(c, np.array([1 - 2j, 1 - 2j], np.complex64))


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_dynamic_shapes_do_not_run(backend: str) -> None:
    text = ACCEPTED["dynamic-bounded"]
    with pytest.raises(UnsupportedOpError, match=r"instruction a in e \(parameter\) has the "
                       r"dynamic shape s32\[2,<=2,2\]"):
        api.compile(text, backend=backend)
    with pytest.raises(UnsupportedOpError, match="dynamic shape"):
        api.compile(parse(text), backend=backend)


def test_dynamic_shapes_do_not_run_on_the_interpreter_directly() -> None:
    m = parse(ACCEPTED["dynamic-layout"])
    with pytest.raises(UnsupportedOpError, match=r"instruction a in e .*f32\[<=4,3\]"):
        interpreter.run(m, np.zeros((4, 3), np.float32), np.int32(2))
