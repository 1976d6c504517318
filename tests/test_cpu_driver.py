"""The CPU backend's native driver (`backends/cpu/driver.py`, `buffers.py`): straight-line code,
tuples, while loops (counters, a row-per-step scan updated in place, nested loops), conditionals
(pred, index, out-of-range index), calls, tuple parameters, results aliasing inputs/constants.
Each module is compiled to C, run through `hf_entry` with ctypes, and compared with the
interpreter; structural facts (in-place pointer passing, no copy per iteration) are asserted on
the generated C.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from hlofuse.backends import interpreter
from hlofuse.backends.cpu import build, driver
from hlofuse.backends.cpu.cexpr import UnsupportedOpError
from hlofuse.ir.shape import leaves
from hlofuse.text import parse

try:
    build.find_compiler()
except build.CompilerNotFoundError:  # pragma: no cover
    pytest.skip("no C compiler", allow_module_level=True)


def _run(program, lib, arrays):
    ins = [np.ascontiguousarray(a) for a in arrays]
    outs = [np.empty(s.dims, s.dtype.np) for s in program.outputs]
    in_t = ctypes.c_void_p * max(1, len(ins))
    out_t = ctypes.c_void_p * max(1, len(outs))
    fn = lib.hf_entry
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    assert fn(in_t(*[a.ctypes.data for a in ins]), out_t(*[o.ctypes.data for o in outs])) == 0
    return outs


def _flatten(args):
    out = []
    for a in args:
        if isinstance(a, tuple):
            out.extend(_flatten(a))
        else:
            out.append(np.asarray(a))
    return out


def compile_and_check(text: str, *args, name: str = "t"):
    module = parse(text)
    program = driver.generate(module)
    assert len(program.inputs) == sum(len(leaves(p.shape)) for p in module.entry.parameters)
    lib = build.load_library(program.source, name=name)
    got = _run(program, lib, _flatten(args))
    want = interpreter.run(module, *args)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    return program, got


@pytest.fixture(autouse=True)
def _fast_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HLOFUSE_CC_OPT", "-O1")


def _entry_body(program) -> str:
    """The driver's code: `hf_run` (the entry computation), then `hf_entry` around it."""
    return program.source[program.source.index("int hf_run("):]


def _loop_text(program, loop: str) -> str:
    """The C lines of the `for (;;)` loop emitted for while instruction `loop`."""
    body = _entry_body(program)
    start = body.index(f"for (;;) {{  /* {loop} */")
    indent = body.rfind("\n", 0, start)
    pad = body[indent + 1:start]
    end = body.index("\n" + pad + "}", start)
    return body[start:end]


STRAIGHT = """
HloModule straight
ENTRY e {
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  c = f32[4] add(a, b)
  d = f32[4] multiply(c, a)
  k = f32[4] constant({1, 2, 3, 4})
  e = f32[4] subtract(d, k)
  r = f32[2,2] reshape(e)
  ROOT t = (f32[4], f32[4], f32[4], f32[2,2], f32[4]) tuple(e, a, k, r, c)
}
"""


def test_straight_line_results_alias_inputs_constants_and_each_other():
    a = np.arange(4, dtype=np.float32)
    b = np.array([0.5, -1, 2, 7], np.float32)
    program, _ = compile_and_check(STRAIGHT, a, b)
    body = _entry_body(program)
    # producers in the entry computation write results directly; aliases are copied
    assert re.search(r"subtract_\w+\(\w+, \(void \*\)hf_const\d+, results\[0\]\)", body)
    assert "memcpy(results[1], args[0], 16)" in body
    assert re.search(r"memcpy\(results\[2\], \(void \*\)hf_const\d+, 16\)", body)
    assert "memcpy(results[3], results[0], 16)" in body  # the reshape is an alias, not a kernel
    assert re.search(r"add_\w+\(args\[0\], args\[1\], results\[4\]\)", body)
    assert len(program.kernels) == 3


TUPLE_PARAM = """
HloModule tparam
ENTRY e {
  p = (f32[3], (s32[2], f32[3])) parameter(0)
  q = s32[2] parameter(1)
  x = f32[3] get-tuple-element(p), index=0
  inner = (s32[2], f32[3]) get-tuple-element(p), index=1
  i = s32[2] get-tuple-element(inner), index=0
  y = f32[3] get-tuple-element(inner), index=1
  s = f32[3] add(x, y)
  j = s32[2] multiply(i, q)
  c = f32[3] copy(s)
  tok = token[] after-all()
  cd = f32[3] add-dependency(c, tok)
  cj = (f32[3], s32[2]) tuple(cd, j)
  ob = (f32[3], s32[2]) opt-barrier(cj)
  pid = u32[] partition-id()
  ROOT t = ((f32[3], s32[2]), s32[2], f32[3], u32[]) tuple(ob, i, y, pid)
}
"""


def test_entry_tuple_parameters_flatten_depth_first():
    x = np.array([1, 2, 3], np.float32)
    i = np.array([4, -5], np.int32)
    y = np.array([0.25, 0.5, 8], np.float32)
    q = np.array([3, 7], np.int32)
    program, _ = compile_and_check(TUPLE_PARAM, (x, (i, y)), q)
    assert len(program.inputs) == 4 and len(program.outputs) == 5
    body = _entry_body(program)
    assert "memcpy(results[2], args[1], 8)" in body
    # copy, add-dependency, opt-barrier are aliases: no kernel, no memcpy
    assert re.search(r"add_\w+\(args\[0\], args\[2\], results\[0\]\)", body)
    assert len(program.kernels) == 2


COUNTER = """
HloModule counter
cond {
  p = (s32[], f32[5]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[5]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[5] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  h = f32[5] constant({0.5, 0.5, 0.5, 0.5, 0.5})
  x1 = f32[5] multiply(x, h)
  x2 = f32[5] add(x1, x)
  ROOT t = (s32[], f32[5]) tuple(i1, x2)
}
ENTRY e {
  x0 = f32[5] parameter(0)
  i0 = s32[] parameter(1)
  init = (s32[], f32[5]) tuple(i0, x0)
  w = (s32[], f32[5]) while(init), condition=cond, body=body
  x = f32[5] get-tuple-element(w), index=1
  i = s32[] get-tuple-element(w), index=0
  ROOT r = (f32[5], s32[]) tuple(x, i)
}
"""


def test_counter_loop_swaps_pointers_without_copies():
    x0 = np.array([1, -2, 0.5, 3, 1e-3], np.float32)
    module = parse(COUNTER)
    program = driver.generate(module)
    lib = build.load_library(program.source, name="counter")
    for start in (0, 7, 10, 25):  # 10, 3, 0 and 0 iterations
        i0 = np.array(start, np.int32)
        got = _run(program, lib, [x0, i0])
        want = interpreter.run(module, x0, i0)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    loop = _loop_text(program, "w")
    assert "memcpy" not in loop
    # the body's producers write the spare buffers; then the pointers swap
    assert re.search(r"add_\w+\(\w+, \(void \*\)hf_const\d+, (hf_w\d+_0s)\)", loop)
    assert re.search(r"hf_w\d+_0 = hf_w\d+_0s;", loop)


SCAN = """
HloModule scan
cond {
  p = (s32[], f32[6,4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(6)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[6,4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  acc = f32[6,4] get-tuple-element(p), index=1
  x = f32[4] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x2 = f32[4] multiply(x, x)
  row = f32[1,4] reshape(x2)
  z = s32[] constant(0)
  acc2 = f32[6,4] dynamic-update-slice(acc, row, i, z)
  ROOT t = (s32[], f32[6,4], f32[4]) tuple(i1, acc2, x2)
}
ENTRY e {
  a = f32[4] parameter(0)
  acc0 = f32[6,4] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[6,4], f32[4]) tuple(zero, acc0, a)
  w = (s32[], f32[6,4], f32[4]) while(init), condition=cond, body=body
  ROOT r = f32[6,4] get-tuple-element(w), index=1
}
"""


def test_scan_writes_rows_in_place():
    a = np.array([1, 1.01, 0.99, -1.001], np.float32)
    acc = np.full((6, 4), 7, np.float32)
    program, _ = compile_and_check(SCAN, a, acc)
    body = _entry_body(program)
    # the caller's array is copied once, before the loop, into the result buffer...
    copy = "memcpy(results[0], args[1], 96);"
    assert body.index(copy) < body.index("for (;;)")
    assert body.count("memcpy") == 1
    loop = _loop_text(program, "w")
    # ...and the dynamic-update-slice kernel gets that same buffer as input 0 and as output
    assert re.search(r"dynamic_update_slice\w*\(results\[0\], [^;]*, results\[0\]\)\);  "
                     r"/\* acc2 \(in place\)", loop)
    kernel = next(k for k in program.kernels if k.instruction == "acc2")
    assert kernel.inplace == {0: 0}


NESTED = """
HloModule nested
icond {
  p = (s32[], f32[3]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  m = s32[] constant(4)
  ROOT lt = pred[] compare(j, m), direction=LT
}
ibody {
  p = (s32[], f32[3]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  v = f32[3] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j1 = s32[] add(j, one)
  fj = f32[] convert(j)
  b = f32[3] broadcast(fj), dimensions={}
  v1 = f32[3] add(v, b)
  ROOT t = (s32[], f32[3]) tuple(j1, v1)
}
ocond {
  p = (s32[], f32[3], f32[5,3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
obody {
  p = (s32[], f32[3], f32[5,3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[3] get-tuple-element(p), index=1
  hist = f32[5,3] get-tuple-element(p), index=2
  z = s32[] constant(0)
  it = (s32[], f32[3]) tuple(z, v)
  inner = (s32[], f32[3]) while(it), condition=icond, body=ibody
  v2 = f32[3] get-tuple-element(inner), index=1
  row = f32[1,3] reshape(v2)
  hist2 = f32[5,3] dynamic-update-slice(hist, row, i, z)
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[3], f32[5,3]) tuple(i1, v2, hist2)
}
ENTRY e {
  v0 = f32[3] parameter(0)
  h0 = f32[5,3] parameter(1)
  z = s32[] constant(0)
  h1 = f32[5,3] negate(h0)
  init = (s32[], f32[3], f32[5,3]) tuple(z, v0, h1)
  w = (s32[], f32[3], f32[5,3]) while(init), condition=ocond, body=obody
  v = f32[3] get-tuple-element(w), index=1
  h = f32[5,3] get-tuple-element(w), index=2
  ROOT r = (f32[3], f32[5,3], f32[5,3]) tuple(v, h, h0)
}
"""


def test_nested_while_with_inner_loop_and_in_place_history():
    v0 = np.array([0.5, -1, 2], np.float32)
    h0 = np.arange(15, dtype=np.float32).reshape(5, 3)
    program, _ = compile_and_check(NESTED, v0, h0)
    body = _entry_body(program)
    # the negated history is owned and dead after the loop starts: it is updated in place
    # with no copy at all
    assert "memcpy" not in body.split("for (;;)")[0]
    assert "(in place)" in _loop_text(program, "w")


CONDITIONALS = """
HloModule conds
add1 {
  p = f32[4] parameter(0)
  one = f32[] constant(1)
  b = f32[4] broadcast(one), dimensions={}
  ROOT r = f32[4] add(p, b)
}
neg {
  p = f32[4] parameter(0)
  ROOT r = f32[4] negate(p)
}
ident {
  p = f32[4] parameter(0)
  ROOT r = f32[4] copy(p)
}
twice {
  p = (f32[4], s32[]) parameter(0)
  x = f32[4] get-tuple-element(p), index=0
  k = s32[] get-tuple-element(p), index=1
  x2 = f32[4] add(x, x)
  ROOT r = (f32[4], s32[]) tuple(x2, k)
}
ENTRY e {
  idx = s32[] parameter(0)
  pr = pred[] parameter(1)
  x = f32[4] parameter(2)
  y = f32[4] parameter(3)
  c1 = f32[4] conditional(idx, x, y, x), branch_computations={add1, neg, ident}
  c2 = f32[4] conditional(pr, x, c1), true_computation=neg, false_computation=add1
  k = s32[] constant(9)
  tk = (f32[4], s32[]) tuple(y, k)
  cl = (f32[4], s32[]) call(tk), to_apply=twice
  cx = f32[4] get-tuple-element(cl), index=0
  ck = s32[] get-tuple-element(cl), index=1
  ROOT r = (f32[4], f32[4], f32[4], s32[]) tuple(c1, c2, cx, ck)
}
"""


def test_conditionals_index_out_of_range_pred_and_calls():
    module = parse(CONDITIONALS)
    program = driver.generate(module)
    lib = build.load_library(program.source, name="conds")
    x = np.array([1, -2, 3.5, 0], np.float32)
    y = np.array([10, 20, 30, 40], np.float32)
    for idx in (0, 1, 2, 3, -1, 1 << 30):
        for pr in (True, False):
            args = [np.array(idx, np.int32), np.array(pr), x, y]
            got = _run(program, lib, args)
            want = interpreter.run(module, *args)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g, w)
    body = _entry_body(program)
    assert "switch (" in body and "if (*(const uint8_t *)args[1])" in body
    # the call is inlined: its kernel writes the result directly
    assert re.search(r"\(args\[3\], args\[3\], results\[2\]\)", body)


SHUFFLE = """
HloModule shuffle
cond {
  p = (s32[], f32[3], f32[3], f32[3], f32[3], f32[3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[3], f32[3], f32[3], f32[3], f32[3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f32[3] get-tuple-element(p), index=1
  b = f32[3] get-tuple-element(p), index=2
  c = f32[3] get-tuple-element(p), index=3
  e = f32[3] get-tuple-element(p), index=5
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  s = f32[3] add(a, c)
  s2 = f32[3] add(s, e)
  k = f32[3] constant({1, 2, 3})
  ROOT t = (s32[], f32[3], f32[3], f32[3], f32[3], f32[3]) tuple(i1, b, a, s2, s2, k)
}
ENTRY e {
  a = f32[3] parameter(0)
  b = f32[3] parameter(1)
  z = s32[] constant(0)
  init = (s32[], f32[3], f32[3], f32[3], f32[3], f32[3]) tuple(z, a, b, a, b, b)
  w = (s32[], f32[3], f32[3], f32[3], f32[3], f32[3]) while(init), condition=cond, body=body
  w1 = f32[3] get-tuple-element(w), index=1
  w2 = f32[3] get-tuple-element(w), index=2
  w3 = f32[3] get-tuple-element(w), index=3
  w4 = f32[3] get-tuple-element(w), index=4
  w5 = f32[3] get-tuple-element(w), index=5
  ROOT r = (f32[3], f32[3], f32[3], f32[3], f32[3], f32[3]) tuple(w1, w2, w3, w4, w5, a)
}
"""


def test_loop_leaves_swapped_duplicated_and_constant_are_copied_into_the_spare():
    a = np.array([1, 2, 3], np.float32)
    b = np.array([-4, 0.5, 6], np.float32)
    program, _ = compile_and_check(SHUFFLE, a, b)
    loop = _loop_text(program, "w")
    # leaves 1 and 2 trade places, leaf 4 repeats leaf 3's value, leaf 5 is a constant:
    # those are copies; leaf 3 is written directly by its producer
    assert loop.count("memcpy") == 4
    assert re.search(r"\(hf_b\d+, hf_w\d+_5, hf_w\d+_3s\)", loop)


ZERO_TRIPS = """
HloModule zero_trip_alias

cond {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  zero = s32[] constant(0)
  ROOT gt = pred[] compare(i, zero), direction=GT
}

body_one {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  acc = f32[4] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] subtract(i, one)
  onef = f32[] constant(1)
  ones = f32[4] broadcast(onef), dimensions={}
  acc2 = f32[4] add(acc, ones)
  ROOT t = (s32[], f32[4]) tuple(j, acc2)
}

cond2 {
  p = (s32[], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  zero = s32[] constant(0)
  ROOT gt = pred[] compare(i, zero), direction=GT
}

body_x {
  p = (s32[], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  acc = f32[4] get-tuple-element(p), index=1
  x = f32[4] get-tuple-element(p), index=2
  one = s32[] constant(1)
  j = s32[] subtract(i, one)
  acc2 = f32[4] add(acc, x)
  ROOT t = (s32[], f32[4], f32[4]) tuple(j, acc2, x)
}

ENTRY e {
  n = s32[] parameter(0)
  x = f32[4] parameter(1)
  z = f32[] constant(0)
  b = f32[4] broadcast(z), dimensions={}
  t1 = (s32[], f32[4]) tuple(n, b)
  w1 = (s32[], f32[4]) while(t1), condition=cond, body=body_one
  r1 = f32[4] get-tuple-element(w1), index=1
  three = s32[] constant(3)
  t2 = (s32[], f32[4], f32[4]) tuple(three, b, x)
  w2 = (s32[], f32[4], f32[4]) while(t2), condition=cond2, body=body_x
  r2 = f32[4] get-tuple-element(w2), index=1
  ROOT s = f32[4] add(r1, r2)
}
"""


@pytest.mark.parametrize("trips", [0, 2])
def test_a_loop_that_runs_no_iteration_keeps_its_init_buffer(trips: int) -> None:
    """w1 runs `trips` iterations from b's buffer; a loop that runs none leaves its result
    pointer at b, so w2 (later, given b too) must not take b's buffer over while w1's result
    is still to be read. diffrax's gradient (an equinox checkpointed loop with no step to
    redo) once summed w2's result twice this way. Reuse stays where it is safe: w2's own
    init buffer carries its state when nothing else may read it."""
    x = np.arange(4, dtype=np.float32)
    program, (got,) = compile_and_check(ZERO_TRIPS, np.int32(trips), x)
    np.testing.assert_array_equal(got, trips + 3 * x)
    alone = ZERO_TRIPS.replace("ROOT s = f32[4] add(r1, r2)", "ROOT s = f32[4] add(r2, r2)")
    program2, _ = compile_and_check(alone, np.int32(trips), x)
    # without w1's result read after w2, w2 takes b's buffer for its accumulator: one buffer
    # fewer than when it may not
    assert len(program2.source.split("hf_arena + ")) < len(program.source.split("hf_arena + "))


UNSUPPORTED = """
HloModule bad
ENTRY e {
  x = f32[4] parameter(0)
  ROOT c = f32[4] custom-call(x), custom_call_target="my_op"
}
"""


def test_unsupported_instruction_is_named():
    with pytest.raises(UnsupportedOpError, match=r"instruction c .*custom-call.*my_op"):
        driver.generate(parse(UNSUPPORTED))


@pytest.mark.parametrize("target", sorted(__import__(
    "hlofuse.ir.opcodes", fromlist=["IDENTITY_CUSTOM_CALLS"]).IDENTITY_CUSTOM_CALLS))
def test_identity_custom_calls_run_on_both_backends(target: str) -> None:
    """The op table's identity custom calls (sharding annotations, host moves, jax's
    annotate_device_placement) forward their operand on the cpu backend as the interpreter
    does (the cpu backend once refused annotate_device_placement: its own copy of the set)."""
    text = UNSUPPORTED.replace('"my_op"', f'"{target}"').replace(
        "ROOT c = f32[4] custom-call(x)", "c = f32[4] custom-call(x)") \
        .replace("\n}\n", "\n  ROOT r = f32[4] add(c, c)\n}\n")
    x = np.arange(4, dtype=np.float32)
    want = interpreter.run(parse(text), x)
    from hlofuse.backends import cpu

    np.testing.assert_array_equal(cpu.compile_module(parse(text))(x)[0], want[0])
    np.testing.assert_array_equal(want[0], 2 * x)


TRIVIAL_LOOP = """
HloModule trivial
cond {
  i = s32[] parameter(0)
  n = s32[] constant(1000000)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  i = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT i1 = s32[] add(i, one)
}
ENTRY e {
  i0 = s32[] parameter(0)
  ROOT w = s32[] while(i0), condition=cond, body=body
}
"""


def test_loop_overhead_and_profile_counters(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HLOFUSE_CC_OPT", "-O3")
    module = parse(TRIVIAL_LOOP)
    program = driver.generate(module)
    lib = build.load_library(program.source, name="trivial")
    i0 = np.array(0, np.int32)
    (out,) = _run(program, lib, [i0])
    assert int(out) == 1000000  # (its time per iteration: benchmarks/loop_overhead.py)
    prof = build.load_library(program.source, name="trivial", extra_flags=("-DHF_PROFILE",))
    (out,) = _run(program, prof, [np.array(999990, np.int32)])
    n = len(program.kernels)
    calls = list((ctypes.c_uint64 * n).in_dll(prof, "hf_prof_calls"))
    ns = list((ctypes.c_uint64 * n).in_dll(prof, "hf_prof_ns"))
    by_name = {k.instruction: c for k, c in zip(program.kernels, calls, strict=True)}
    assert by_name == {"lt": 11, "i1": 10} and int(out) == 1000000
    assert all(t > 0 for t in ns)


@pytest.mark.parametrize("name", ["cartpole_separate", "cartpole_baseline"])
def test_cartpole_examples_under_xla_match_the_interpreter(name: str):
    from hlofuse import examples
    from hlofuse.passes.pipelines import run_pipeline

    module = parse(examples.text(name))
    run_pipeline(module, "xla")
    rng = np.random.default_rng(0)
    args = []
    for p in module.entry.parameters:
        s = p.shape
        if s.dtype.is_float:
            args.append((rng.random(s.dims) * 0.1 - 0.05).astype(s.dtype.np))
        else:
            args.append(rng.integers(0, 2, s.dims).astype(s.dtype.np))
    program = driver.generate(module)
    lib = build.load_library(program.source, name=name)
    got = _run(program, lib, args)
    want = interpreter.run(module, *args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    if name == "cartpole_separate":  # the time loop: one fused step, no copies
        loop = _loop_text(program, next(
            i.name for i in module.entry.instructions if i.opcode.value == "while"))
        assert "memcpy" not in loop and loop.count("HF_CALL") == 4


MIXED = """
HloModule mixed
double {
  p = (s32[], f32[4]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  x = f32[4] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j1 = s32[] add(j, one)
  x2 = f32[4] add(x, x)
  ROOT t = (s32[], f32[4]) tuple(j1, x2)
}
dcond {
  p = (s32[], f32[4]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(j, n), direction=LT
}
negb {
  p = f32[4] parameter(0)
  ROOT r = f32[4] negate(p)
}
loopb {
  p = f32[4] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[4]) tuple(z, p)
  w = (s32[], f32[4]) while(t), condition=dcond, body=double
  ROOT r = f32[4] get-tuple-element(w), index=1
}
scale {
  p = f32[4] parameter(0)
  h = f32[4] constant({0.5, 0.25, 2, -1})
  ROOT r = f32[4] multiply(p, h)
}
cond {
  p = (s32[], f32[4], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[4], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4] get-tuple-element(p), index=1
  h = f32[8] get-tuple-element(p), index=2
  two = s32[] constant(2)
  m = s32[] remainder(i, two)
  c = f32[4] conditional(m, x, x), branch_computations={negb, loopb}
  cl = f32[4] call(c), to_apply=scale
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[4], f32[8]) tuple(i1, cl, h)
}
ENTRY e {
  x0 = f32[4] parameter(0)
  v = f32[8] parameter(1)
  nv = f32[8] negate(v)
  u = f32[2] constant({100, 200})
  idx = s32[] constant(3)
  d = f32[8] dynamic-update-slice(nv, u, idx)
  z = s32[] constant(0)
  init = (s32[], f32[4], f32[8]) tuple(z, x0, d)
  outer = (s32[], f32[4], f32[8]) while(init), condition=cond, body=body
  wx = f32[4] get-tuple-element(outer), index=1
  wh = f32[8] get-tuple-element(outer), index=2
  ROOT r = (f32[4], f32[8], f32[8]) tuple(wx, wh, d)
}
"""


def test_conditional_and_call_in_a_loop_body_and_a_loop_in_a_branch():
    x0 = np.array([1, -2, 0.5, 3], np.float32)
    v = np.arange(8, dtype=np.float32)
    program, _ = compile_and_check(MIXED, x0, v)
    body = _entry_body(program)
    # straight-line in place: the negated copy is dead after the update, so the
    # dynamic-update-slice writes over it (never over the caller's `v`); the value reaches the
    # root through the loop's pass-through leaf, so both write results[1] directly
    assert re.search(r"negate\w*\(args\[1\], results\[1\]\)", body)
    assert re.search(r"\(results\[1\], [^;]*, results\[1\]\)\);  /\* d \(in place\)", body)
    assert "memcpy(results[2], results[1], 32)" in body
    # the call's kernel writes the loop's spare buffer directly: no copy for leaf 1
    loop = _loop_text(program, "outer")
    assert re.search(r"multiply_\w+\(\w+, \(void \*\)hf_const\d+, hf_w\d+_1s\)", loop)
    assert "switch (" in loop and loop.count("for (;;)") == 2


NESTED_SCAN = """
HloModule nscan
icond {
  p = (s32[], s32[], f32[12,2]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(j, n), direction=LT
}
ibody {
  p = (s32[], s32[], f32[12,2]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  i = s32[] get-tuple-element(p), index=1
  m = f32[12,2] get-tuple-element(p), index=2
  four = s32[] constant(4)
  i4 = s32[] multiply(i, four)
  r = s32[] add(i4, j)
  fr = f32[] convert(r)
  row = f32[1,2] broadcast(fr), dimensions={}
  z = s32[] constant(0)
  m2 = f32[12,2] dynamic-update-slice(m, row, r, z)
  one = s32[] constant(1)
  j1 = s32[] add(j, one)
  ROOT t = (s32[], s32[], f32[12,2]) tuple(j1, i, m2)
}
ocond {
  p = (s32[], f32[12,2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
obody {
  p = (s32[], f32[12,2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  m = f32[12,2] get-tuple-element(p), index=1
  z = s32[] constant(0)
  it = (s32[], s32[], f32[12,2]) tuple(z, i, m)
  inner = (s32[], s32[], f32[12,2]) while(it), condition=icond, body=ibody
  m2 = f32[12,2] get-tuple-element(inner), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[12,2]) tuple(i1, m2)
}
ENTRY e {
  m0 = f32[12,2] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[12,2]) tuple(z, m0)
  outer = (s32[], f32[12,2]) while(init), condition=ocond, body=obody
  ROOT r = f32[12,2] get-tuple-element(outer), index=1
}
"""


def test_nested_scan_updates_one_buffer_in_place_across_both_loops():
    m0 = np.full((12, 2), -1, np.float32)
    program, _ = compile_and_check(NESTED_SCAN, m0)
    body = _entry_body(program)
    # one copy of the caller's matrix (into the result) before the outer loop, none inside
    # either loop: the inner loop's kernel updates the result buffer in place
    copy = "memcpy(results[0], args[0], 96);"
    assert body.index(copy) < body.index("for (;;)") and body.count("memcpy") == 1
    outer = _loop_text(program, "outer")
    assert re.search(r"\(results\[0\], [^;]*, results\[0\]\)\);  /\* m2 \(in place\)", outer)


def _random_loop(rng: np.random.Generator, tag: str,
                 params: list[str]) -> tuple[list[str], list[str], dict[str, str]]:
    """One while loop with randomly wired carried state: leaves that pass through, trade places,
    repeat each other, become constants or fresh values; a matrix updated by
    dynamic-update-slice (in place unless the old matrix is read afterwards); 0 to 4 trips;
    inits drawn from `params` (the entry's parameters and earlier loops' fresh inits, so two
    loops may start from one buffer). Returns the computations' lines, the entry lines, and
    the entry values to return (name -> shape)."""
    k = int(rng.integers(2, 5))
    st = "(s32[], " + ", ".join(["f32[4]"] * k) + ", f32[3,4])"
    cond = [f"{tag}c {{", f"  p = {st} parameter(0)",
            "  i = s32[] get-tuple-element(p), index=0",
            f"  n = s32[] constant({int(rng.integers(0, 5))})",
            "  ROOT lt = pred[] compare(i, n), direction=LT", "}"]
    body = [f"{tag}b {{", f"  p = {st} parameter(0)", "  i = s32[] get-tuple-element(p), index=0"]
    body += [f"  v{j} = f32[4] get-tuple-element(p), index={j + 1}" for j in range(k)]
    body += [f"  m = f32[3,4] get-tuple-element(p), index={k + 1}",
             "  one = s32[] constant(1)", "  i1 = s32[] add(i, one)",
             "  three = s32[] constant(3)", "  r = s32[] remainder(i, three)",
             "  z = s32[] constant(0)"]
    vals = [f"v{j}" for j in range(k)]
    roots = []
    for j in range(k):
        choice = rng.integers(0, 5)
        if choice == 0 or (choice == 4 and not roots):
            roots.append(vals[int(rng.integers(0, k))])  # pass-through or a shuffle
        elif choice == 1:
            body.append(f"  c{j} = f32[4] constant({{{j}, 1, 2, 3}})")
            roots.append(f"c{j}")
        elif choice == 4:
            roots.append(roots[int(rng.integers(0, len(roots)))])  # repeat a leaf
        else:
            a, b = vals[int(rng.integers(0, k))], vals[int(rng.integers(0, k))]
            op = "add" if choice == 2 else "multiply"
            body.append(f"  e{j} = f32[4] {op}({a}, {b})")
            vals.append(f"e{j}")
            roots.append(f"e{j}")
    mode = rng.integers(0, 3)
    if mode == 0:
        mroot = "m"
    else:
        body += [f"  row = f32[1,4] reshape({roots[0]})",
                 "  m2 = f32[3,4] dynamic-update-slice(m, row, r, z)"]
        mroot = "m2"
        if mode == 2:  # read the old matrix after the update: no longer in place
            body += ["  old = f32[1,4] slice(m), slice={[0:1], [0:4]}",
                     "  oldr = f32[4] reshape(old)", "  o2 = f32[4] add(oldr, v0)"]
            roots[-1] = "o2"
    body.append(f"  ROOT t = {st} tuple(i1, {', '.join(roots)}, {mroot})")
    body.append("}")
    entry = [f"  {tag}z = s32[] constant(0)"]
    inits = []
    for j in range(k):
        choice = rng.integers(0, 3)
        if choice == 0:
            inits.append(params[int(rng.integers(0, len(params)))])
        elif choice == 1:
            entry.append(f"  {tag}n{j} = f32[4] negate({params[int(rng.integers(0, 2))]})")
            inits.append(f"{tag}n{j}")
        else:
            inits.append(inits[-1] if inits else params[0])
    entry.append(f"  {tag}m0 = f32[3,4] {'negate' if rng.integers(0, 2) else 'copy'}(mat)")
    entry.append(f"  {tag}i = {st} tuple({tag}z, {', '.join(inits)}, {tag}m0)")
    entry.append(f"  {tag}w = {st} while({tag}i), condition={tag}c, body={tag}b")
    outs = {}
    for j in range(k + 1):
        shape = "f32[3,4]" if j == k else "f32[4]"
        entry.append(f"  {tag}o{j} = {shape} get-tuple-element({tag}w), index={j + 1}")
        outs[f"{tag}o{j}"] = shape
    outs[inits[0]] = "f32[4]"  # an init value is also returned: it must survive the loop
    return cond + body, entry, outs


@pytest.mark.parametrize("seed", range(8))
def test_random_loop_state_wiring_matches_the_interpreter(seed: int):
    rng = np.random.default_rng(seed)
    comps: list[str] = []
    entry = ["ENTRY e {", "  a = f32[4] parameter(0)", "  b = f32[4] parameter(1)",
             "  mat = f32[3,4] parameter(2)"]
    outs: dict[str, str] = {}
    updated_in_place = 0
    pool = ["a", "b"]  # a loop's init may be an earlier loop's (owned) init as well
    for n in range(4):
        c, e, o = _random_loop(rng, f"l{n}", pool)
        comps += c
        entry += e
        outs.update(o)
        pool += [line.split()[0] for line in e if " negate(" in line and "f32[4]" in line]
        updated_in_place += "  m2 = " in "\n".join(c) and "  old = " not in "\n".join(c)
    entry.append(f"  ROOT r = ({', '.join(outs.values())}) tuple({', '.join(outs)})")
    entry.append("}")
    text = "HloModule rnd\n" + "\n".join(comps) + "\n" + "\n".join(entry) + "\n"
    a = np.array([1, -2, 0.5, 3], np.float32)
    b = np.array([0.25, 4, -1, 2], np.float32)
    mat = np.arange(12, dtype=np.float32).reshape(3, 4)
    program, _ = compile_and_check(text, a, b, mat, name=f"rnd{seed}")
    # exactly the loops that never read the old matrix after updating it update it in place
    assert _entry_body(program).count("(in place)") == updated_in_place
    np.testing.assert_array_equal(a, [1, -2, 0.5, 3])  # the caller's arrays are never written
    np.testing.assert_array_equal(mat, np.arange(12).reshape(3, 4))
