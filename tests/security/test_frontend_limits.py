"""Hostile HLO against the front end's limits (`hlofuse.ir.limits`): XLA's shape limits in the
parser (line:column) and the verifier (the instruction), acyclicity, and nesting that used to
end in RecursionError: deep tuple shapes, literals, calls, whiles, expression chains."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.backends import interpreter
from hlofuse.errors import (
    AllocationError,
    HloParseError,
    HloVerifyError,
    InterpreterLimitError,
    LimitError,
    ParseLimitError,
    VerifyLimitError,
)
from hlofuse.ir import limits
from hlofuse.ir.dtypes import F32
from hlofuse.ir.shape import ArrayShape, TupleShape
from hlofuse.ir.verifier import verify
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse


def _param(shape: str) -> str:
    return f"HloModule m\nENTRY e {{\n  ROOT p = {shape} parameter(0)\n}}\n"


def _parse_error(text: str, cls: type[HloParseError] = HloParseError) -> HloParseError:
    with pytest.raises(cls) as info:
        parse(text)
    assert type(info.value) is cls, repr(info.value)
    return info.value


# ----- XLA's shape limits -------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "column", "message"), [
    ("f32[9223372036854775808]", 16, "dimension size 9223372036854775808 does not fit in int64"),
    ("f32[4,99999999999999999999999]", 18, "does not fit in int64"),
    ("f32[4," + "9" * 5000 + "]", 18, "does not fit in int64"),
    ("f32[4611686018427387904]", 12, "its size in bytes overflows int64"),
    ("f32[3037000500,3037000500]", 12, "its size in bytes overflows int64"),
    ("s64[2,2305843009213693952]", 12, "its size in bytes overflows int64"),
    ("f32[" + ",".join(["1"] * 65) + "]", 12, "rank 65 is above the limit of 64"),
    ("f32[" + ",".join(["1"] * 65) + "]{" + ",".join(str(i) for i in range(64, -1, -1)) + "}",
     12, "rank 65 is above the limit of 64"),
])
def test_parser_enforces_xla_shape_limits(shape: str, column: int, message: str) -> None:
    err = _parse_error(_param(shape), ParseLimitError)
    assert isinstance(err, LimitError)
    assert (err.line, err.column) == (3, column), str(err)
    assert message in err.message


def test_largest_valid_shapes_parse() -> None:
    assert parse(_param("pred[9223372036854775807]")).entry.root.shape.dims == (2**63 - 1,)
    assert parse(_param("f32[2305843009213693951]")) is not None  # 2^63 - 4 bytes
    rank64 = parse(_param("f32[" + ",".join(["1"] * 64) + "]"))
    out = interpreter.run(rank64, np.ones([1] * 64, np.float32))
    assert out[0].shape == (1,) * 64


@pytest.mark.parametrize(("shape", "column", "message"), [
    ("f32[-1]", 16, "expected a dimension size (a non-negative integer), got '-1'"),
    ("f32[<=-4]", 18, "expected a dimension size (a non-negative integer), got '-4'"),
    ("f32[4,?3]", 19, "expected ']' to close the dimensions of a shape, got '3'"),
])
def test_negative_and_malformed_dynamic_dimensions_are_parse_errors(shape: str, column: int,
                                                                    message: str) -> None:
    err = _parse_error(_param(shape))
    assert (err.line, err.column) == (3, column), str(err)
    assert message in err.message


def test_verifier_enforces_the_same_limits_on_shapes_built_by_code() -> None:
    m = parse("HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)"
              "\n}\n")
    for bad, message in [
        (ArrayShape(F32, (2**63,)), "does not fit in int64"),
        (ArrayShape(F32, (2**62,)), "overflows int64"),
        (ArrayShape(F32, (1,) * 65), "rank 65 is above the limit"),
    ]:
        m.entry.parameter(0).shape = bad
        with pytest.raises(VerifyLimitError) as info:
            verify(m)
        assert info.value.instruction == "p" and info.value.computation == "e"
        assert message in info.value.message
    m.entry.parameter(0).shape = ArrayShape(F32, (-1,))
    with pytest.raises(HloVerifyError) as info:
        verify(m)
    assert not isinstance(info.value, LimitError) and "negative" in info.value.message


@pytest.mark.parametrize(("text", "column", "message"), [
    (_param("f32[4]").replace("parameter(0)", "parameter(99999999999999999999)"), 29,
     "integer 99999999999999999999 does not fit in int64"),
    ("HloModule m\nENTRY e {\n  ROOT c = s32[] constant(" + "7" * 5000 + ")\n}\n", 27,
     "is out of range for literal's primitive type S32"),
    ("HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0), metadata={source_line="
     "123456789012345678901}\n}\n", 54, "in metadata field source_line does not fit in int64"),
])
def test_integers_beyond_int64(text: str, column: int, message: str) -> None:
    err = _parse_error(text, ParseLimitError if "int64" in message else HloParseError)
    assert (err.line, err.column) == (3, column), str(err)
    assert message in err.message
    assert len(str(err)) < 1000  # the 5000 digits are not quoted back


# ----- cycles -------------------------------------------------------------------------------

SELF_OPERAND = """HloModule m
ENTRY e {
  p = f32[] parameter(0)
  a = f32[] add(a, p)
  ROOT r = f32[] negate(a)
}
"""


def test_instruction_that_is_its_own_operand() -> None:
    with pytest.raises(HloVerifyError) as info:
        parse(SELF_OPERAND)
    assert (info.value.instruction, info.value.computation) == ("a", "e")
    assert "its own operand" in info.value.message


def test_instruction_that_is_its_own_control_predecessor() -> None:
    text = SELF_OPERAND.replace("a = f32[] add(a, p)", "a = f32[] add(p, p), "
                                "control-predecessors={a}")
    with pytest.raises(HloVerifyError) as info:
        parse(text)
    assert info.value.instruction == "a" and "its own control predecessor" in str(info.value)


def test_two_instruction_cycle() -> None:
    text = SELF_OPERAND.replace("a = f32[] add(a, p)", "a = f32[] add(b, p)\n  b = f32[] "
                                "negate(a)")
    with pytest.raises(HloVerifyError) as info:
        parse(text)
    assert info.value.instruction in ("a", "b") and "cycle" in info.value.message


def test_computation_that_calls_itself() -> None:
    text = """HloModule m
c {
  p = f32[] parameter(0)
  ROOT r = f32[] call(p), to_apply=c
}
ENTRY e {
  p = f32[] parameter(0)
  ROOT r = f32[] call(p), to_apply=c
}
"""
    with pytest.raises(HloVerifyError) as info:
        parse(text)
    assert info.value.computation == "c" and "calls its own computation c" in str(info.value)


def test_computations_that_call_each_other() -> None:
    text = """HloModule m
a {
  p = f32[] parameter(0)
  ROOT r = f32[] call(p), to_apply=b
}
b {
  p = f32[] parameter(0)
  ROOT r = f32[] call(p), to_apply=a
}
ENTRY e {
  p = f32[] parameter(0)
  ROOT r = f32[] call(p), to_apply=a
}
"""
    with pytest.raises(HloVerifyError) as info:
        parse(text)
    assert "recursion is not allowed" in info.value.message


# ----- deep nesting -------------------------------------------------------------------------


def _nested_tuple(depth: int) -> str:
    return "(" * depth + "f32[2]" + ")" * depth


def test_tuple_shapes_up_to_the_limit_work_end_to_end() -> None:
    depth = limits.MAX_TUPLE_DEPTH
    lines = [f"  p = {_nested_tuple(depth)} parameter(0)"]
    prev = "p"
    for i in range(depth):
        lines.append(f"  g{i} = get-tuple-element({prev}), index=0")
        prev = f"g{i}"
    lines.append(f"  ROOT r = f32[2] negate({prev})")
    text = "HloModule m\nENTRY e {\n" + "\n".join(lines) + "\n}\n"
    value: object = np.arange(2, dtype=np.float32)
    for _ in range(depth):
        value = (value,)
    assert interpreter.run(parse(text), value)[0].tolist() == [-0.0, -1.0]
    module = parse(text)
    run_pipeline(module, "xla")
    assert interpreter.run(module, value)[0].tolist() == [-0.0, -1.0]


@pytest.mark.parametrize("depth", [limits.MAX_TUPLE_DEPTH + 1, 5000])
def test_tuple_shapes_nested_too_deep(depth: int) -> None:
    text = _param(_nested_tuple(depth))
    err = _parse_error(text, ParseLimitError)
    assert (err.line, err.column) == (3, 12 + limits.MAX_TUPLE_DEPTH), str(err)
    assert "tuple shapes nested more than 64 deep" in err.message
    assert len(str(err)) < 1000


def test_inferred_tuple_shapes_nested_too_deep() -> None:
    lines = ["  p = f32[2] parameter(0)"]
    prev = "p"
    for i in range(limits.MAX_TUPLE_DEPTH + 1):
        lines.append(f"  t{i} = tuple({prev})")
        prev = f"t{i}"
    text = "HloModule m\nENTRY e {\n" + "\n".join(lines) + "\n}\n"
    err = _parse_error(text, ParseLimitError)
    assert err.line == 3 + limits.MAX_TUPLE_DEPTH + 1
    assert f"'t{limits.MAX_TUPLE_DEPTH}'" in err.message


def test_deeply_nested_literal_braces() -> None:
    text = "HloModule m\nENTRY e {\n  ROOT c = f32[1] constant(" + "{" * 5000 + "1" + \
        "}" * 5000 + ")\n}\n"
    err = _parse_error(text)
    assert (err.line, err.column) == (3, 29)  # the second `{`: dimension 0 holds elements
    assert "expected a literal element of type f32, got '{'" in err.message


def test_high_rank_literals() -> None:
    ok = "HloModule m\nENTRY e {\n  ROOT c = f32[" + ",".join(["1"] * 64) + "] constant(" + \
        "{" * 64 + "5" + "}" * 64 + ")\n}\n"
    assert interpreter.run(parse(ok))[0].reshape(-1).tolist() == [5.0]
    too_deep = ok.replace("f32[1,", "f32[1,1,").replace("constant({", "constant({{")
    err = _parse_error(too_deep.replace("}" * 64, "}" * 65), ParseLimitError)
    assert "rank 65" in err.message and (err.line, err.column) == (3, 12)


def _nested_calls(depth: int) -> str:
    lines = ["HloModule m", "c0 {\n  p = f32[2] parameter(0)\n  ROOT r = f32[2] negate(p)\n}"]
    for i in range(1, depth):
        lines.append(f"c{i} {{\n  p = f32[2] parameter(0)\n  ROOT r = f32[2] call(p), "
                     f"to_apply=c{i - 1}\n}}")
    lines.append(f"ENTRY e {{\n  p = f32[2] parameter(0)\n  ROOT r = f32[2] call(p), "
                 f"to_apply=c{depth - 1}\n}}")
    return "\n".join(lines) + "\n"


def _nested_whiles(depth: int) -> str:
    lines = ["HloModule m",
             "cond {\n  p = s32[] parameter(0)\n  n = s32[] constant(3)\n"
             "  ROOT lt = pred[] compare(p, n), direction=LT\n}",
             "b0 {\n  p = s32[] parameter(0)\n  one = s32[] constant(1)\n"
             "  ROOT r = s32[] add(p, one)\n}"]
    for i in range(1, depth):
        lines.append(f"b{i} {{\n  p = s32[] parameter(0)\n  w = s32[] while(p), condition=cond,"
                     f" body=b{i - 1}\n  one = s32[] constant(1)\n  ROOT r = s32[] add(w, one)"
                     "\n}")
    lines.append(f"ENTRY e {{\n  p = s32[] parameter(0)\n  ROOT w = s32[] while(p), "
                 f"condition=cond, body=b{depth - 1}\n}}")
    return "\n".join(lines) + "\n"


def test_calls_and_whiles_nested_to_the_limit_run() -> None:
    depth = limits.MAX_CALL_DEPTH - 1  # plus the entry
    calls = parse(_nested_calls(depth))
    assert interpreter.run(calls, np.ones(2, np.float32))[0].tolist() == [
        (-1.0) ** depth] * 2
    whiles = parse(_nested_whiles(depth))
    expected = _nested_whiles_value(depth)
    assert int(interpreter.run(whiles, np.int32(0))[0]) == expected
    run_pipeline(whiles, "xla")
    assert int(interpreter.run(whiles, np.int32(0))[0]) == expected


def _nested_whiles_value(depth: int) -> int:
    """What `_nested_whiles(depth)` computes from 0, in plain Python."""
    def body(level: int, x: int) -> int:
        if level == 0:
            return x + 1
        while x < 3:
            x = body(level - 1, x)
        return x + 1

    x = 0
    while x < 3:
        x = body(depth - 1, x)
    return x


@pytest.mark.parametrize(("build", "depth"), [(_nested_calls, 3000), (_nested_whiles, 300),
                                              (_nested_calls, limits.MAX_CALL_DEPTH)])
def test_calls_and_whiles_nested_too_deep(build, depth: int) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(VerifyLimitError) as info:
        parse(build(depth))
    err = info.value
    assert "the limit is 64 (hlofuse.ir.limits.MAX_CALL_DEPTH)" in err.message
    assert err.instruction is not None and err.computation is not None


def test_interpreter_bounds_nesting_of_unverified_modules() -> None:
    module = parse(_nested_calls(200), verify=False)
    with pytest.raises(InterpreterLimitError) as info:
        interpreter.run(module, np.ones(2, np.float32))
    assert "MAX_CALL_DEPTH" in str(info.value)


def test_long_expression_chain() -> None:
    n = 3000
    lines = ["  p = f32[4] parameter(0)"]
    prev = "p"
    for i in range(n):
        lines.append(f"  a{i} = f32[4] negate({prev})")
        prev = f"a{i}"
    text = "HloModule m\nENTRY e {\n" + "\n".join(lines) + f"\n  ROOT r = f32[4] abs({prev})\n}}\n"
    module = parse(text)
    x = np.arange(4, dtype=np.float32)
    assert interpreter.run(module, x)[0].tolist() == [0, 1, 2, 3]
    run_pipeline(module, "simplify")
    assert interpreter.run(module, x)[0].tolist() == [0, 1, 2, 3]


def test_call_dag_that_explodes_when_inlined() -> None:
    lines = ["HloModule m", "c0 {\n  p = f32[] parameter(0)\n  ROOT r = f32[] negate(p)\n}"]
    for i in range(1, 40):
        lines.append(f"c{i} {{\n  p = f32[] parameter(0)\n  a = f32[] call(p), to_apply=c{i - 1}"
                     f"\n  b = f32[] call(a), to_apply=c{i - 1}\n  ROOT r = f32[] add(a, b)\n}}")
    lines.append("ENTRY e {\n  p = f32[] parameter(0)\n  ROOT r = f32[] call(p), to_apply=c39\n}")
    module = parse("\n".join(lines) + "\n")
    with pytest.raises(LimitError) as info:
        run_pipeline(module, "simplify")
    assert "MAX_INLINED_INSTRUCTIONS" in str(info.value)


# ----- allocations --------------------------------------------------------------------------


def test_results_beyond_memory_are_allocation_errors() -> None:
    text = ("HloModule m\nENTRY e {\n  z = f32[] constant(0)\n  ROOT big = f32[1048576,1048576,"
            "1024] broadcast(z), dimensions={}\n}\n")
    with pytest.raises(AllocationError) as info:
        interpreter.run(parse(text))
    err = info.value
    assert err.nbytes == 4 * 2**50 and "instruction big in e" in str(err)
    assert "4503599627370496 bytes (4.0 PiB)" in str(err)


def test_allocation_failures_inside_handlers_name_the_instruction(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from hlofuse.backends.interpreter import core
    from hlofuse.ir.opcodes import Opcode

    def out_of_memory(*_: object) -> object:
        raise MemoryError

    monkeypatch.setitem(core.HANDLERS, Opcode.NEGATE, out_of_memory)
    text = "HloModule m\nENTRY e {\n  p = f32[8] parameter(0)\n  ROOT n = f32[8] negate(p)\n}\n"
    with pytest.raises(AllocationError) as info:
        interpreter.run(parse(text), np.zeros(8, np.float32))
    assert info.value.nbytes == 32 and "instruction n in e" in str(info.value)


def test_elided_constants_beyond_memory() -> None:
    text = "HloModule m\nENTRY e {\n  ROOT c = f32[1099511627776,1024] constant({...})\n}\n"
    with pytest.raises(AllocationError) as info:
        parse(text, allow_elided_constants=True)
    assert "constant c (<text>:3:45)" in str(info.value)  # the elided value
    assert info.value.nbytes == 2**52


def test_huge_tuple_shape_validates_iteratively() -> None:
    shape: TupleShape | ArrayShape = ArrayShape(F32, (2,))
    for _ in range(10000):
        shape = TupleShape((shape,))
    from hlofuse.ir.shape import shape_problem, tuple_depth

    assert tuple_depth(shape) == 10000
    problem = shape_problem(shape)
    assert problem is not None and problem.limit
