"""Slices and bitcasts under non-default layouts give the interpreter's values on the cpu
backend (backends/driver_ir/views.py): a view into an operand is taken only where the slice is
contiguous in the buffer as stored (row-major, whatever layout the HLO declares), at the
offset that storage implies; a slice contiguous only in the declared layout (a column of
`f32[4,3]{0,1}`) is read element by element."""

from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.backends import interpreter
from hlofuse.backends.cpu.cexpr import UnsupportedOpError
from hlofuse.backends.driver_ir.views import view_plan
from hlofuse.ir.opcodes import Opcode
from hlofuse.text import parse

pytestmark = pytest.mark.usefixtures("private_cpu_cache")  # (conftest.py)


def _slice_module(layout: str, ranges: str, out: str) -> str:
    return f"""HloModule layout_slice
ENTRY e {{
  p = f32[4,3]{layout} parameter(0)
  s = f32[{out}]{layout} slice(p), slice={ranges}
  one = f32[] constant(1)
  b = f32[{out}]{layout} broadcast(one), dimensions={{}}
  ROOT a = f32[{out}]{layout} add(s, b)
}}
"""


CASES = [
    ("{0,1}", "{[0:4], [1:2]}", "4,1"),  # a column: contiguous only in the declared layout
    ("{0,1}", "{[2:3], [0:3]}", "1,3"),  # a row: contiguous in the stored buffer
    ("{0,1}", "{[1:3], [0:3]}", "2,3"),
    ("{0,1}", "{[0:4], [2:3]}", "4,1"),
    ("{1,0}", "{[0:4], [1:2]}", "4,1"),
    ("{1,0}", "{[3:4], [0:3]}", "1,3"),
]


@pytest.mark.parametrize(("layout", "ranges", "out"), CASES)
@pytest.mark.parametrize("pipeline", ["hlofuse", "xla"])
def test_slices_under_declared_layouts_match_the_interpreter(layout: str, ranges: str, out: str,
                                                             pipeline: str) -> None:
    text = _slice_module(layout, ranges, out)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    want = interpreter.run(parse(text), x)[0]
    got = hlofuse.compile(text, pipeline=pipeline)(x)[0]
    np.testing.assert_array_equal(got, want)


def test_a_column_of_a_column_major_operand_is_no_view_and_a_row_is() -> None:
    for ranges, out, viewed in (("{[0:4], [1:2]}", "4,1", False),
                                ("{[2:3], [0:3]}", "1,3", True)):
        module = parse(_slice_module("{0,1}", ranges, out))
        hlofuse.api.build_runner(module, pipeline="hlofuse", backend="interpreter")
        fusions = [i for i in module.entry.instructions if i.opcode is Opcode.FUSION]
        assert len(fusions) == 1
        plan = view_plan(fusions[0])
        assert (plan is not None) == viewed, ranges
        if plan is not None:
            assert plan.offsets == {0: 2 * 3 * 4}  # row 2, row-major, in bytes


_BITCAST = """HloModule layout_bitcast
ENTRY e {
  p = f32[6,4]{0,1} parameter(0)
  s = f32[6,1]{0,1} slice(p), slice={[0:6], [3:4]}
  r = f32[6]{0} bitcast(s)
  two = f32[] constant(2)
  b = f32[6]{0} broadcast(two), dimensions={}
  ROOT m = f32[6]{0} multiply(r, b)
}
"""

_BITCAST_ROW = """HloModule layout_bitcast_row
ENTRY e {
  p = f32[6,4]{1,0} parameter(0)
  s = f32[1,4]{1,0} slice(p), slice={[5:6], [0:4]}
  r = f32[4]{0} bitcast(s)
  n = f32[4]{0} negate(r)
  ROOT t = (f32[4]{0}, f32[1,4]{1,0}) tuple(n, s)
}
"""


@pytest.mark.parametrize("text", [_BITCAST, _BITCAST_ROW])
@pytest.mark.parametrize("pipeline", ["hlofuse", "xla", None])
def test_bitcasts_of_slices_match_the_interpreter_or_both_refuse(text: str,
                                                                 pipeline: str | None) -> None:
    x = np.arange(24, dtype=np.float32).reshape(6, 4) - 7
    try:
        want = interpreter.run(parse(text), x)
    except hlofuse.errors.InterpreterError:  # a bitcast of a non-default layout
        with pytest.raises(UnsupportedOpError, match="instruction r"):
            hlofuse.compile(text, pipeline=pipeline)
        return
    got = hlofuse.compile(text, pipeline=pipeline)(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
