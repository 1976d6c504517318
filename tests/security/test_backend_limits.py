"""Huge, deep or cyclic modules get one hlofuse error naming the instruction (and the bytes) from
the cpu backend, never a MemoryError, OverflowError, RecursionError, a crash or a silently
truncated integer (backends/cpu/limits.py, executable.py, cprelude's hf_alloc).

The allocation failures are real: 64 TiB requests that malloc refuses.
"""

from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.backends import cpu, interpreter
from hlofuse.backends.cpu import ctext, limits
from hlofuse.errors import AllocationError, LimitError, ResourceLimitError
from hlofuse.text import parse

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

BIG = 1 << 44  # f32 elements: 64 TiB, within the 2^48-byte limit, beyond any machine here


def _compile(text: str) -> hlofuse.api.Executable:
    return hlofuse.compile(text, pipeline=None)


def test_array_beyond_the_byte_limit_names_instruction_and_bytes() -> None:
    n = 1 << 47
    text = (f"HloModule m\nENTRY e {{\n  p = f32[{n}] parameter(0)\n"
            f"  ROOT neg = f32[{n}] negate(p)\n}}\n")
    with pytest.raises(ResourceLimitError, match=rf"instruction p in computation e: the array "
                                                 rf"f32\[{n}\] needs {4 * n} bytes, more than"):
        _compile(text)


def test_integer_attribute_beyond_the_limit_is_refused() -> None:
    stride = 1 << 50
    text = ("HloModule m\nENTRY e {\n  p = f32[8] parameter(0)\n"
            f"  ROOT s = f32[1] slice(p), slice={{[0:8:{stride}]}}\n}}\n")
    with pytest.raises(ResourceLimitError, match=rf"instruction s .*attribute slice holds the "
                                                 rf"integer {stride}"):
        _compile(text)


def test_work_arena_beyond_the_limit_names_its_largest_buffers() -> None:
    n = 1 << 45  # three live 2^47-byte intermediates
    text = f"""HloModule m
ENTRY e {{
  p = f32[{n}] parameter(0)
  a = f32[{n}] negate(p)
  b = f32[{n}] exponential(p)
  c = f32[{n}] sine(p)
  d = f32[{n}] add(a, b)
  ROOT r = f32[{n}] add(d, c)
}}
"""
    with pytest.raises(ResourceLimitError, match=rf"the work arena needs \d+ bytes, more than "
                                                 rf".*largest buffers: f32\[{n}\] \w+ "
                                                 rf"\({4 * n} bytes\)"):
        _compile(text)


def test_output_allocation_failure_names_output_and_bytes() -> None:
    exe = _compile(f"HloModule m\nENTRY e {{\n  p = f32[] parameter(0)\n"
                   f"  ROOT big = f32[{BIG}] broadcast(p), dimensions={{}}\n}}\n")
    with pytest.raises(AllocationError, match=rf"cannot allocate {4 * BIG} bytes for output 0 "
                                              rf"of big"):
        exe(np.float32(1))


def test_arena_allocation_failure_is_an_error() -> None:
    exe = _compile(f"""HloModule m
add {{
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}}
ENTRY e {{
  p = f32[] parameter(0)
  big = f32[{BIG}] broadcast(p), dimensions={{}}
  z = f32[] constant(0)
  ROOT r = f32[] reduce(big, z), dimensions={{0}}, to_apply=add
}}
""")
    with pytest.raises(AllocationError, match=rf"cannot allocate the {4 * BIG} byte work arena.*"
                                              rf"the largest is f32\[{BIG}\] big"):
        exe(np.float32(1))
    with pytest.raises(AllocationError):  # and again: nothing leaked or left half-done
        exe(np.float32(1))


def test_kernel_scratch_allocation_failure_names_kernel_and_bytes() -> None:
    n = 1 << 22  # a [2^22, 2^22] f32 dot inside a fusion: 64 TiB of scratch (it contracts
    # 17 elements: a dot of at most 16 is computed per element, `reduce.per_element_dot`)
    exe = _compile(f"""HloModule m
fused_dot {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  x = f32[{n},17] broadcast(a), dimensions={{}}
  y = f32[17,{n}] broadcast(b), dimensions={{}}
  d = f32[{n},{n}] dot(x, y), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT s = f32[1,1] slice(d), slice={{[0:1], [0:1]}}
}}
ENTRY e {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT f = f32[1,1] fusion(a, b), kind=kLoop, calls=fused_dot
}}
""")
    args = (np.float32(1), np.float32(1))
    with pytest.raises(AllocationError, match=rf"kernel \w+ \(instruction f\) cannot allocate "
                                              rf"{4 * n * n} bytes of scratch"):
        exe(*args)


def _nested_whiles(depth: int) -> str:
    comps = []
    for k in range(depth):
        if k + 1 < depth:
            inner = f"  ROOT w = s32[] while(p), condition=cond, body=body{k + 1}"
        else:
            inner = "  one = s32[] constant(1)\n  ROOT a = s32[] add(p, one)"
        comps.append(f"body{k} {{\n  p = s32[] parameter(0)\n{inner}\n}}\n")
    return ("HloModule nested\ncond {\n  p = s32[] parameter(0)\n  z = s32[] constant(0)\n"
            "  ROOT c = pred[] compare(p, z), direction=LT\n}\n" + "".join(reversed(comps))
            + "ENTRY e {\n  p = s32[] parameter(0)\n"
            "  ROOT w = s32[] while(p), condition=cond, body=body0\n}\n")


def test_control_flow_nested_hundreds_deep_is_refused_clearly() -> None:
    # the verifier refuses it first (call depth, hlofuse.ir.limits); the backend's own check
    # (limits.check_module) stands behind it for modules built in Python
    with pytest.raises(LimitError, match=r"deep|nest"):
        _compile(_nested_whiles(300))
    exe = _compile(_nested_whiles(limits.MAX_NESTING - 2))  # within the limit: runs
    assert int(exe(np.int32(-5))[0]) == 0


def test_cyclic_call_graph_is_refused() -> None:
    module = parse(_nested_whiles(3))
    body2 = next(c for c in module.computations if c.name == "body2")
    body1 = next(c for c in module.computations if c.name == "body1")
    inner = next(i for i in body1.instructions if i.opcode.value == "while")
    inner.attrs["body"] = body1  # body1 runs itself
    del body2
    with pytest.raises(ResourceLimitError, match="calls itself"):
        hlofuse.compile(module, pipeline=None)


def test_long_fused_chain_lowers_on_a_deep_stack() -> None:
    """A 400-op elementwise chain fuses into one kernel whose emitter recurses 400 levels."""
    lines = ["HloModule chain", "ENTRY e {", "  p0 = f32[16] parameter(0)"]
    prev = "p0"
    for i in range(400):
        lines.append(f"  n{i} = f32[16] add({prev}, p0)")
        prev = f"n{i}"
    lines[-1] = "  ROOT" + lines[-1][1:]
    text = "\n".join([*lines, "}", ""])
    x = np.linspace(-1, 1, 16, dtype=np.float32)
    exe = hlofuse.compile(text)
    np.testing.assert_allclose(exe(x)[0], interpreter.run(parse(text), x)[0], rtol=1e-5)


def test_integer_literals_that_fit_no_c_type_are_caught() -> None:
    ctext.check_integers("int64_t a = 9223372036854775807LL; uint64_t b = 0xffffffffffffffffULL;"
                         "/* 99999999999999999999999 */", "ok")
    for bad in ("9223372036854775808", "18446744073709551616u", "0x10000000000000000"):
        value = int(bad.rstrip("u"), 0)
        with pytest.raises(ctext.IntegerRangeError, match=rf"kernel k: .*integer {value}"):
            ctext.check_integers(f"x = {bad};", "kernel k")


@pytest.mark.parametrize("bits", [(3_000_000_000, 7), (1 << 40, 1 << 40), (3, (1 << 33) + 1)])
def test_huge_reduce_precision_attributes_are_not_truncated(bits: tuple[int, int]) -> None:
    """exponent_bits=3e9 used to reach an `int` parameter of the C helper and come out
    negative: a silent wrong answer. Attribute values now travel as int64_t."""
    e, m = bits
    for dt, np_t in (("f16", np.float16), ("f32", np.float32), ("f64", np.float64)):
        text = (f"HloModule m\nENTRY e {{\n  p = {dt}[4] parameter(0)\n  ROOT r = {dt}[4] "
                f"reduce-precision(p), exponent_bits={e}, mantissa_bits={m}\n}}\n")
        x = np.array([1.1, -3.7, 1e-3, np.nan]).astype(np_t)
        got = _compile(text)(x)[0]
        np.testing.assert_array_equal(got, interpreter.run(parse(text), x)[0])
