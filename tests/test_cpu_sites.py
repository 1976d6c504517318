"""Long runs of kernel calls printed as a table (`backends/cpu/sites.py`): the values are the
interpreter's, every place kind (argument, result, constant, arena buffer, a view into an
argument) reaches the kernel, short runs and a while loop's carried pointers stay direct calls,
and the profile and the failing-kernel index count table sites as they count direct calls."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from hlofuse.backends import interpreter
from hlofuse.backends.cpu import build, driver, sites
from hlofuse.text import parse

try:
    build.find_compiler()
except build.CompilerNotFoundError:  # pragma: no cover
    pytest.skip("no C compiler", allow_module_level=True)

_OPS = ("add", "multiply", "subtract", "maximum")


@pytest.fixture(autouse=True)
def _fast_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HLOFUSE_CC_OPT", "-O1")


def chain(n: int) -> str:
    """An unfused chain of `n` elementwise kernels reading an argument, a row of another
    argument in place, a constant and each other; two results."""
    lines = ["HloModule chain",
             "row_plus {",  # reads row 1 of m in place (views.py)
             "  m = f32[2,8] parameter(0)",
             "  row = f32[1,8] slice(m), slice={[1:2], [0:8]}",
             "  r = f32[8] reshape(row)",
             "  a = f32[8] parameter(1)",
             "  ROOT s = f32[8] add(r, a)",
             "}",
             "ENTRY e {",
             "  a = f32[8] parameter(0)",
             "  m = f32[2,8] parameter(1)",
             "  k = f32[8] constant({1, 2, 3, 4, 5, 6, 7, 8})",
             "  x0 = f32[8] fusion(m, a), kind=kLoop, calls=row_plus"]
    for i in range(1, n):
        other = ("a", "k", f"x{max(0, i - 3)}", "a")[i % 4]
        lines.append(f"  x{i} = f32[8] {_OPS[i % 4]}(x{i - 1}, {other})")
    lines += [f"  ROOT t = (f32[8], f32[8]) tuple(x{n - 1}, x{n // 2})", "}"]
    return "\n".join(lines)


def _run(program, lib, arrays):
    outs = [np.empty(s.dims, s.dtype.np) for s in program.outputs]
    in_t = ctypes.c_void_p * len(arrays)
    out_t = ctypes.c_void_p * len(outs)
    lib.hf_entry.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.hf_entry.restype = ctypes.c_int
    status = lib.hf_entry(in_t(*[a.ctypes.data for a in arrays]),
                          out_t(*[o.ctypes.data for o in outs]))
    assert status == 0
    return outs


def _args() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(8).astype(np.float32),
            rng.standard_normal((2, 8)).astype(np.float32)]


def _hf_run(program) -> str:
    source = program.source
    return source[source.index("int hf_run("):source.index("int hf_entry(")]


@pytest.mark.parametrize("n", [sites.TABLE_RUN - 1, sites.TABLE_RUN, 40])
def test_a_long_run_of_calls_runs_from_a_table_with_the_interpreters_values(n: int):
    module = parse(chain(n))
    program = driver.generate(module)
    assert len(program.kernels) == n
    body = _hf_run(program)
    if n < sites.TABLE_RUN:
        assert "hf_sites_run(" not in program.source
        assert body.count("HF_CALL(") == n
    else:
        assert f"hf_sites_run(hf_sites + 0, {n}, args, results, hf_arena, hf_at);" in body
        assert "HF_CALL(" not in body
        rows = re.findall(r"^  \{(\d+), (\d+), (\d+), (\d+)\},", program.source, re.M)
        assert [int(k) for _, k, _, _ in rows] == list(range(n))  # sites in schedule order
        kinds = {int(kind) for kind in re.findall(r"^  \{(\d), \d+, -?\d+\},$",
                                                   program.source, re.M)}
        assert kinds == {0, 1, 2, 3}  # arena, argument, result and constant places
        assert re.search(r"^  \{1, 1, 32\},$", program.source, re.M)  # m's row 1, in place
    lib = build.load_library(program.source, name=f"chain{n}")
    args = _args()
    got = _run(program, lib, args)
    want = interpreter.run(module, *args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_profile_counts_each_table_site_once_per_run():
    n = 20
    program = driver.generate(parse(chain(n)))
    lib = build.load_library(program.source, name="chain_prof", extra_flags=("-DHF_PROFILE",))
    for _ in range(3):
        _run(program, lib, _args())
    calls = list((ctypes.c_uint64 * n).in_dll(lib, "hf_prof_calls"))
    assert calls == [3] * n


LOOP = """
HloModule loop
body {{
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[8] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  y0 = f32[8] multiply(x, x)
{chain}
  ROOT t = (s32[], f32[8]) tuple(i1, y{last})
}}
cond {{
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}}
ENTRY e {{
  x = f32[8] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[8]) tuple(z, x)
  w = (s32[], f32[8]) while(init), condition=cond, body=body
  ROOT out = f32[8] get-tuple-element(w), index=1
}}
"""


@pytest.mark.parametrize("reads_x", [True, False])
def test_calls_on_a_loops_carried_pointers_stay_direct_and_the_rest_is_tabled(reads_x: bool):
    n = 24
    other = "x" if reads_x else "c"
    chain_lines = "\n".join(
        ["  c = f32[8] constant({1, 2, 3, 4, 5, 6, 7, 8})"]
        + [f"  y{i} = f32[8] {('add', 'multiply')[i % 2]}(y{i - 1}, {other})"
           for i in range(1, n)])
    text = LOOP.format(chain=chain_lines, last=n - 1)
    module = parse(text)
    program = driver.generate(module)
    body = _hf_run(program)
    direct = re.findall(r"HF_CALL\(\d+, \w+\(([^)]*)\)\);", body)
    assert direct and all("hf_w" in operands for operands in direct)  # carried pointers
    if reads_x:  # every call in the body reads x, a carried leaf
        assert "hf_sites_run(" not in body
    else:  # y1..y22 read only the body's own buffers and a constant; y23 writes the spare
        assert re.search(r"for \(;;\) \{.*hf_sites_run\(hf_sites \+ 0, 22,", body, re.S)
    lib = build.load_library(program.source, name=f"loop_sites_{reads_x}")
    x = np.linspace(-0.5, 0.5, 8, dtype=np.float32)
    (got,) = _run(program, lib, [x])
    (want,) = interpreter.run(module, x)
    np.testing.assert_allclose(got, want, rtol=1e-6)
