"""Layout attributes after `:` (`f32[8,128]{1,0:T(8,128)S(1)}`): parsed into
`ir.shape.LayoutAttrs`, printed back from the fields, or rejected at line:column."""

from __future__ import annotations

import pytest

from hlofuse.errors import HloParseError
from hlofuse.ir.dtypes import F32
from hlofuse.ir.equality import modules_equal
from hlofuse.ir.shape import ArrayShape, LayoutAttrs, format_shape
from hlofuse.text import parse, print_module


def _module(layout: str, dims: str = "8,128") -> str:
    return (f"HloModule m\nENTRY e {{\n  p = f32[{dims}]{{{layout}}} parameter(0)\n"
            f"  ROOT c = f32[{dims}]{{{layout}}} copy(f32[{dims}]{{{layout}}} p)\n}}\n")


def _param_shape(text: str) -> ArrayShape:
    shape = parse(text).entry.parameter(0).shape
    assert isinstance(shape, ArrayShape)
    return shape


def test_every_attribute_is_parsed_into_its_field() -> None:
    shape = _param_shape(_module("1,0:T(8,128)(2,*)L(1024)#(u32)*(u64)E(16)S(1)SC(0:1,2)(1:4)M(8)"))
    assert shape.layout == (1, 0)
    assert shape.layout_attrs == LayoutAttrs(
        tiles=((8, 128), (2, None)), tail_padding_alignment=1024, index_type="u32",
        pointer_type="u64", element_size_bits=16, memory_space=1,
        split_configs=((0, (1, 2)), (1, (4,))), dynamic_shape_metadata_prefix_bytes=8)


@pytest.mark.parametrize("layout", [
    "1,0:T(8,128)",
    "1,0:T(8,128)(2,1)",
    "0,1:S(1)",
    "1,0:E(4)",
    "1,0:T(8,128)(2,*)L(1024)#(u32)*(u64)E(16)S(1)SC(0:1,2)(1:4)M(8)",
    "1,0:SC(1:)",
])
def test_round_trip_prints_from_the_structure(layout: str) -> None:
    text = _module(layout)
    module = parse(text)
    printed = print_module(module)
    assert "{" + layout + "}" in printed
    again = parse(printed)
    assert modules_equal(module, again)
    assert print_module(again) == printed


def test_spacing_is_normalised_and_defaults_are_not_printed() -> None:
    shape = _param_shape(_module("1,0: T( 8 , 128 ) L(1) S(0)"))
    assert shape.layout_attrs == LayoutAttrs(tiles=((8, 128),))
    assert format_shape(shape) == "f32[8,128]{1,0:T(8,128)}"


def test_scalar_with_attributes_and_shape_from_code() -> None:
    text = "HloModule m\nENTRY e {\n  ROOT p = f32[]{:S(2)} parameter(0)\n}\n"
    assert print_module(parse(text)).count("f32[]{:S(2)}") == 1
    built = ArrayShape(F32, (4,), (0,), LayoutAttrs(memory_space=1, element_size_bits=32))
    assert format_shape(built) == "f32[4]{0:E(32)S(1)}"
    assert built.layout_extra == ":E(32)S(1)"
    assert ArrayShape(F32, (4,), (0,)).layout_extra == ""
    assert built.compatible(ArrayShape(F32, (4,)))  # attributes are layout: ignored


@pytest.mark.parametrize(("layout", "at", "message"), [
    ("1,0:Q(1)", "Q", "unknown layout attribute 'Q'"),
    ("1,0:T(8,128", "}", "expected ')' to close a layout tile"),
    ("1,0:S(1)T(2)", "T(2)", "layout attribute T repeated or out of order"),
    ("1,0:T(1)T(2)", "T(2)", "layout attribute T repeated or out of order"),
    ("1,0:D(D,D)", "D(", "sparse layouts (D(...)) are not supported"),
    ("1,0:P(f32[4])", "P(", "sparse layouts (P(...)) are not supported"),
    ("1,0:#(f32)", "f32)", "expected an unsigned integer type"),
    ("1,0:T(8,128)*/ junk", "/", "expected '(' after * in a layout"),
    ("1,0:S(99999999999999999999)", "999", "does not fit in int64"),
    ("1,0:S(x)", "x", "expected an integer for layout attribute S"),
    ("1,0:T(0,128)", "T(0", "layout tile dimension 0 is not in 1..2^63-1"),
    ("1,0:S(-1)", "S(-1", "layout memory space S(-1) must be in 0..2^63-1"),
    ("1,0:SC(5:1)", "SC", "layout split config SC(5:...) names no dimension"),
    ("1,0:SC(0:2,1)", "SC", "layout split indices must be positive and ascending"),
])
def test_malformed_attributes_are_rejected_at_their_column(layout: str, at: str,
                                                           message: str) -> None:
    text = _module(layout)
    with pytest.raises(HloParseError) as info:
        parse(text)
    err = info.value
    line = text.split("\n")[2]
    assert message in err.message, err.message
    assert err.line == 3
    # the error points into the layout, at the offending part (or the start of the
    # attributes for a range problem found after reading them all)
    start = line.index(":") + 1
    assert start <= err.column - 1 <= line.index("}", start), (err.column, line)
    if message.startswith(("unknown", "layout attribute T", "sparse", "expected an unsigned",
                           "expected '('", "expected an integer")):
        assert err.column == line.index(at, start) + 1, str(err)


def test_control_characters_in_a_layout_are_rejected() -> None:
    with pytest.raises(HloParseError) as info:
        parse(_module("1,0:T(8,128)\x1b"))
    assert info.value.line == 3 and "expected a layout attribute" in info.value.message
