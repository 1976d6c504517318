"""Contiguous slices read through a pointer into the operand (backends/driver_ir/views.py): the
steps of an unrolled scan share one function, nothing is written through a view, and values
are the interpreter's and the same as without views, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.backends import interpreter
from hlofuse.backends.driver_ir import schedule
from hlofuse.backends.driver_ir.views import contiguous_offset, view_plan
from hlofuse.ir.dtypes import F32
from hlofuse.ir.shape import ArrayShape
from hlofuse.text import parse

pytestmark = pytest.mark.usefixtures("private_cpu_cache")  # (conftest.py)


def _shape(dims: tuple[int, ...], layout: tuple[int, ...] | None = None) -> ArrayShape:
    return ArrayShape(F32, dims, layout)


@pytest.mark.parametrize(("dims", "ranges", "layout", "offset"), [
    ((8, 4, 16), [(3, 4, 1), (0, 4, 1), (0, 16, 1)], None, 3 * 64),  # one step of a scan
    ((8, 4, 16), [(2, 5, 1), (0, 4, 1), (0, 16, 1)], None, 2 * 64),  # several whole rows
    ((8, 4, 16), [(5, 6, 1), (1, 3, 1), (0, 16, 1)], None, 5 * 64 + 16),  # part of one row
    ((8, 4, 16), [(5, 6, 1), (1, 2, 1), (4, 9, 1)], None, 5 * 64 + 16 + 4),
    ((8, 4, 16), [(0, 8, 1), (0, 4, 1), (0, 8, 1)], None, None),  # minor half: strided
    ((8, 4, 16), [(0, 2, 1), (1, 3, 1), (0, 16, 1)], None, None),  # 2 x 2 rows: a gap
    ((8, 4, 16), [(0, 8, 2), (0, 4, 1), (0, 16, 1)], None, None),  # a stride
    ((8, 4, 16), [(4, 5, 3), (0, 4, 1), (0, 16, 1)], None, 4 * 64),  # stride on extent 1
    ((8, 4, 16), [(4, 4, 1), (0, 4, 1), (0, 16, 1)], None, None),  # empty
    # A declared column-major layout is not how the buffer is stored (row-major, always): a
    # column is strided, a row contiguous.
    ((6, 10), [(0, 6, 1), (7, 8, 1)], (0, 1), None),
    ((6, 10), [(2, 3, 1), (0, 10, 1)], (0, 1), 2 * 10),
    ((4, 3), [(0, 4, 1), (1, 2, 1)], (0, 1), None),
])
def test_contiguous_offset(dims, ranges, layout, offset) -> None:
    operand = _shape(dims, layout)
    sliced = _shape(tuple((hi - lo + st - 1) // st for lo, hi, st in ranges), layout)
    assert contiguous_offset(operand, sliced, ranges) == offset


def test_the_declared_layouts_do_not_change_the_offset() -> None:
    ranges = [(2, 3, 1), (0, 10, 1)]
    for a, b in [((0, 1), (1, 0)), ((1, 0), (0, 1)), ((0, 1), (0, 1))]:
        assert contiguous_offset(_shape((6, 10), a), _shape((1, 10), b), ranges) == 20
        assert contiguous_offset(_shape((6, 10), a), _shape((6, 1), b),
                                 [(0, 6, 1), (7, 8, 1)]) is None


def _scan(steps: int) -> str:
    """An unrolled scan as jax emits one: step t slices xs[t] inside its fusion."""
    lines = ["HloModule scan", "", "ENTRY e {", f"  xs = f32[{steps},16,32] parameter(0)",
             "  h0 = f32[16,32] parameter(1)", "  w = f32[32,32] parameter(2)"]
    for t in range(steps):
        lines += [
            f"  s{t} = f32[1,16,32] slice(xs), slice={{[{t}:{t + 1}], [0:16], [0:32]}}",
            f"  x{t} = f32[16,32] reshape(s{t})",
            f"  m{t} = f32[16,32] dot(h{t}, w), lhs_contracting_dims={{1}}, "
            "rhs_contracting_dims={0}",
            f"  a{t} = f32[16,32] add(m{t}, x{t})",
            f"  h{t + 1} = f32[16,32] tanh(a{t})",
        ]
    lines += [f"  ROOT out = f32[16,32] copy(h{steps})", "}", ""]
    return "\n".join(lines)


def _args(steps: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal((steps, 16, 32)).astype(np.float32),
            rng.standard_normal((16, 32)).astype(np.float32),
            (rng.standard_normal((32, 32)) / 8).astype(np.float32)]


def test_scan_steps_share_one_function_and_read_their_step_in_place(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    steps = 6
    text = _scan(steps)
    args = _args(steps)
    exe = hlofuse.compile(text, pipeline="xla")
    program = exe._runner.program
    printed = [k for k in program.kernels if k.source]
    # per step a dot and a fusion (slice, add, tanh): two functions in all
    assert len(program.kernels) == 2 * steps and len(printed) == 2
    for t in range(1, steps):
        assert f"(char *)args[0] + {t * 16 * 32 * 4})" in program.source
    got = exe(*args)
    want = interpreter.run(parse(text), *args)
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-5)
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path / "plain"))
    monkeypatch.setattr(schedule, "view_plan", lambda instr: None)
    plain = hlofuse.compile(text, pipeline="xla")
    assert len([k for k in plain._runner.program.kernels if k.source]) == steps + 1
    assert np.array_equal(plain(*args)[0], got[0])


def test_a_strided_slice_stays_inside_its_kernel() -> None:
    text = """HloModule m
ENTRY e {
  x = f32[16,32] parameter(0)
  s = f32[16,8] slice(x), slice={[0:16], [8:16]}
  ROOT t = f32[16,8] tanh(s)
}
"""
    module = parse(text)
    from hlofuse.passes.pipelines import run_pipeline

    run_pipeline(module, "xla")
    fusion = next(i for i in module.entry.instructions if i.opcode.value == "fusion")
    assert view_plan(fusion) is None
    x = np.random.default_rng(2).standard_normal((16, 32)).astype(np.float32)
    got = hlofuse.compile(text)(x)[0]
    np.testing.assert_allclose(got, np.tanh(x[:, 8:16]), rtol=0, atol=4e-6)


def test_no_kernel_writes_through_a_view() -> None:
    """`e` is an owned buffer, dead after the fusion reads its second row, and the fusion's
    root is a dynamic-update-slice of that row, which its lowering offers to update in
    place; the driver keeps views read-only and gives the result a buffer of its own."""
    text = """HloModule m
ENTRY e {
  p = f32[4,32] parameter(0)
  w = f32[32,64] parameter(1)
  u = f32[1,8] parameter(2)
  e = f32[4,64] dot(p, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s1 = f32[1,64] slice(e), slice={[1:2], [0:64]}
  i = s32[] constant(0)
  j = s32[] constant(40)
  ROOT b = f32[1,64] dynamic-update-slice(s1, u, i, j)
}
"""
    module = parse(text)
    from hlofuse.passes.pipelines import run_pipeline

    run_pipeline(module, "xla")
    views = [i for i in module.entry.instructions if view_plan(i) is not None]
    assert len(views) == 1  # the row read is a view
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((4, 32)).astype(np.float32),
            rng.standard_normal((32, 64)).astype(np.float32) / 4,
            rng.standard_normal((1, 8)).astype(np.float32)]
    exe = hlofuse.compile(text)
    assert "(char *)hf_b" in exe._runner.program.source  # a view of an internal buffer
    kernels = {k.instruction: k for k in exe._runner.program.kernels}
    plan = view_plan(views[0])
    assert plan is not None and plan.offsets == {1: 64 * 4}
    from hlofuse.backends.cpu.kernels import lower_kernel

    assert set(lower_kernel(plan.kernel).inplace.values()) == {1}  # offered
    assert not set(kernels[views[0].name].inplace.values()) & set(plan.offsets)
    got = exe(*args)
    want = interpreter.run(parse(text), *args)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-6, atol=2e-6)
