"""XLA's own parser test, case by case, and a sample of XLA's .hlo files (tests/data/xla).

Every module string of `xla/hlo/parser/hlo_parser_test.cc` that XLA expects to parse must parse
here (verified when XLA's test verifies) and round-trip; every one XLA expects to reject must be
rejected with an hlofuse error (never a crash). The .hlo files must parse and round-trip as
XLA's tools read them (unverified); all but one also verify (the one declares a transpose that
XLA's verifier rejects too). A few cases also check what was built, not only that it parsed.
`scripts/xla_conformance_report.py` prints the same as figures.
"""

from __future__ import annotations

import pytest

from hlofuse.errors import HloError, HloVerifyError, ParseLimitError
from hlofuse.ir.opcodes import Opcode
from hlofuse.text import parse, print_module
from xla_parser_conformance import load_hlo_files, load_parser_cases, run_case, run_text

CASES = {case["name"]: case for case in load_parser_cases()}
FILES = load_hlo_files()
UNVERIFIABLE = {"tools__print_indexing_test": "transpose f32[256,512] -> f32[512,256] with "
                "dimensions={0,1}: XLA's verifier rejects it too (the tool does not verify)"}


def test_the_data_is_all_there() -> None:
    assert len(CASES) == 331
    assert sum(c["expect"] == "error" for c in CASES.values()) == 82
    assert len(FILES) == 28


@pytest.mark.parametrize("name", sorted(CASES))
def test_parser_case(name: str) -> None:
    outcome = run_case(CASES[name])
    assert outcome.passed, f"{outcome.status}: {outcome.detail}"


@pytest.mark.parametrize("name", sorted(FILES))
def test_hlo_file(name: str) -> None:
    outcome = run_text(FILES[name], "ok", verify=False)
    assert outcome.passed, f"{outcome.status}: {outcome.detail}"
    if name in UNVERIFIABLE:
        with pytest.raises(HloVerifyError):
            parse(FILES[name])
    else:
        parse(FILES[name])


def _module(name: str) -> str:
    case = CASES[name]
    return print_module(parse(case["text"], verify=case["verified"],
                              allow_elided_constants=True))


def test_nested_instructions_get_xlas_names() -> None:
    assert _module("CreateNonRoundtripTestCases/AmbiguousNames").splitlines()[3:8] == [
        "  parameter.anon = f32[10] parameter(0)",
        "  parameter.anon.1 = f32[10] parameter(1)",
        "  add = f32[10] add(parameter.anon, parameter.anon.1)",
        "  add.anon = f32[10] add(add, add)",
        "  ROOT add2 = f32[10] add(add, add.anon)",
    ]


def test_single_instruction_text_makes_its_operands_parameters() -> None:
    module = parse(CASES["HloParserSingleOpTest/SingleOp"]["text"], verify=False)
    root = module.entry.root
    assert root.opcode is Opcode.MULTIPLY
    assert [(o.opcode, o.parameter_number, o.name) for o in root.operands] == [
        (Opcode.PARAMETER, 0, "broadcast"), (Opcode.PARAMETER, 1, "x")]


def test_async_sugar_wraps_the_op_in_a_computation() -> None:
    case = CASES["HloParserTest/AsyncInstructionWithAttributesShouldPropagateToWrappedInstruction"]
    module = parse(case["text"])
    done = module.entry.root
    start = done.operand(0)
    assert (start.opcode, done.opcode) == (Opcode.ASYNC_START, Opcode.ASYNC_DONE)
    wrapped = start.attrs["calls"][0]
    assert done.attrs["calls"][0] is wrapped
    assert wrapped.root.opcode is Opcode.ADD
    assert wrapped.root.metadata.op_name == "sample name"
    assert start.attrs["backend_config"] == wrapped.root.attrs["backend_config"]


def test_rejections_name_what_xla_names() -> None:
    for name, words in [("HloParserTest/ConstantF16Overflow", "out of range"),
                        ("HloParserTest/InvalidNanPayloadBf16", "NaN payload 0x3ff"),
                        ("HloParserTest/UnexpectedAttribute", 'unexpected attribute "calls"'),
                        ("HloParserTest/AsyncOpSharedComputation", "more than one async op"),
                        ("HloParserTest/TranscendentalAccuracyInvalidOp",
                         'unexpected attribute "result_accuracy"')]:
        with pytest.raises(HloError, match=words):
            parse(CASES[name]["text"])


def test_deep_nesting_is_a_limit_error_not_a_crash() -> None:
    with pytest.raises(ParseLimitError, match="MAX_NESTING_DEPTH"):
        parse(CASES["HloParserTest/DeeplyNestedOperandsDoesNotStackOverflow"]["text"])
