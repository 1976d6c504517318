"""A column reduce read by other ops of its fusion (a bias gradient summed over the batch, then
an optimizer update) is computed whole with the unit-stride loop innermost, not per output
element with lane gathers (kernel_ir/lower/reduce.py, `_computed_whole`)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import hlofuse
from hlofuse.backends import interpreter
from hlofuse.text import parse

_HEAD = """HloModule {name}

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
"""

EPILOGUE = _HEAD.format(name="column_epilogue") + """
fused {
  g = f32[16,24,40] parameter(0)
  m = f32[40] parameter(1)
  z = f32[] constant(0)
  s = f32[40] reduce(g, z), dimensions={0,1}, to_apply=add
  c = f32[] constant(0.9)
  cb = f32[40] broadcast(c), dimensions={}
  mm = f32[40] multiply(m, cb)
  m2 = f32[40] add(mm, s)
  ROOT u = f32[40] multiply(m2, s)
}

ENTRY main {
  g = f32[16,24,40] parameter(0)
  m = f32[40] parameter(1)
  ROOT f = f32[40] fusion(g, m), kind=kLoop, calls=fused
}
"""

# the outer reduce reads the inner one: both computed whole, the inner first
NESTED = _HEAD.format(name="column_nested") + """
fused {
  g = f32[16,24,40] parameter(0)
  m = f32[40] parameter(1)
  z = f32[] constant(0)
  s1 = f32[24,40] reduce(g, z), dimensions={0}, to_apply=add
  two = f32[] constant(2)
  tb = f32[24,40] broadcast(two), dimensions={}
  d = f32[24,40] multiply(s1, tb)
  s2 = f32[40] reduce(d, z), dimensions={0}, to_apply=add
  ROOT u = f32[40] multiply(s2, m)
}

ENTRY main {
  g = f32[16,24,40] parameter(0)
  m = f32[40] parameter(1)
  ROOT f = f32[40] fusion(g, m), kind=kLoop, calls=fused
}
"""


def _kernel(exe: hlofuse.Executable) -> str:
    (k,) = [k for k in exe._runner.program.kernels if k.source]
    return k.source


def _check(text: str) -> str:
    exe = hlofuse.compile(text, pipeline=None)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((16, 24, 40)).astype(np.float32),
            rng.standard_normal(40).astype(np.float32)]
    np.testing.assert_allclose(exe(*args)[0], interpreter.run(parse(text), *args)[0],
                               rtol=2e-5, atol=2e-4)
    return _kernel(exe)


def test_a_column_reduce_with_an_epilogue_is_computed_whole_with_unit_stride() -> None:
    src = _check(EPILOGUE)
    assert src.count("a column reduce, computed whole") == 1
    assert not re.search(r"= \{in0\[", src)  # no lane gathers of the reduced input
    assert "in0 + r0 * 40 + j1" in src  # rows of the input, 16 lanes at a time


def test_a_column_reduce_of_a_column_reduce_computes_the_inner_one_first() -> None:
    """The inner reduce is asked for while the outer one's preamble nest is being built: its
    own nest goes before that one (`Builder.at_preamble`), not into it or after it."""
    src = _check(NESTED)
    assert src.count("a column reduce, computed whole") == 2


def test_a_column_reduce_read_by_a_dot_operand_is_computed_before_it() -> None:
    """A dot inside a fusion materialises its fused operand in the preamble; the column reduce
    that operand reads must be computed before that loop (it once came after it)."""
    text = _HEAD.format(name="column_dot") + """
fused {
  g = f32[16,24,40] parameter(0)
  w = f32[40,8] parameter(1)
  z = f32[] constant(0)
  s = f32[40] reduce(g, z), dimensions={0,1}, to_apply=add
  sb = f32[4,40] broadcast(s), dimensions={1}
  ROOT d = f32[4,8] dot(sb, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY main {
  g = f32[16,24,40] parameter(0)
  w = f32[40,8] parameter(1)
  ROOT f = f32[4,8] fusion(g, w), kind=kOutput, calls=fused
}
"""
    exe = hlofuse.compile(text, pipeline=None)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((16, 24, 40)).astype(np.float32),
            rng.standard_normal((40, 8)).astype(np.float32)]
    np.testing.assert_allclose(exe(*args)[0], interpreter.run(parse(text), *args)[0],
                               rtol=2e-5, atol=2e-3)
    assert "a column reduce, computed whole" in _kernel(exe)


# ----- short reductions: the outputs-in-lanes schedule ------------------------------------------
# A reduction shorter than two vectors whose operand is strided along it runs sequentially
# inside a vector loop over its outputs (kernel_ir/passes/vectorize.py, `short_reduction`): one
# accumulator register per lane, each lane summing in the scalar loop's order. 37 outputs along
# the vector dimension leave a scalar tail at 4, 8 and 16 lanes.

_REDUCERS = """HloModule {name}

add {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT s = {t}[] add(a, b)
}}

max {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT s = {t}[] maximum(a, b)
}}
"""

# brax's MJX contact loop: three masked sums over the 11 contacts of each of 64 bodies' 3
# coordinates, one kLoop fusion (the reduced dimension in the middle)
MJX = _REDUCERS.format(name="short_mjx", t="f32") + """
fused {
  p0 = f32[37,3] parameter(0)
  p1 = f32[37,11,3] parameter(1)
  p2 = f32[37,11] parameter(2)
  p3 = f32[37,11] parameter(3)
  p4 = f32[37] parameter(4)
  p5 = f32[37] parameter(5)
  p6 = f32[37] parameter(6)
  zero = f32[] constant(0)
  zb = f32[37,11] broadcast(zero), dimensions={}
  b4 = f32[37,11] broadcast(p4), dimensions={0}
  m4 = f32[37,11] multiply(b4, p3)
  a4 = f32[37,11] add(p2, m4)
  l4 = pred[37,11] compare(a4, zb), direction=LT
  c4 = f32[37,11] convert(l4)
  w4 = f32[37,11,3] broadcast(c4), dimensions={0,1}
  x4 = f32[37,11,3] multiply(p1, w4)
  r4 = f32[37,3] reduce(x4, zero), dimensions={1}, to_apply=add
  o4 = f32[37,3] add(p0, r4)
  b5 = f32[37,11] broadcast(p5), dimensions={0}
  m5 = f32[37,11] multiply(b5, p3)
  a5 = f32[37,11] add(p2, m5)
  l5 = pred[37,11] compare(a5, zb), direction=LT
  c5 = f32[37,11] convert(l5)
  w5 = f32[37,11,3] broadcast(c5), dimensions={0,1}
  x5 = f32[37,11,3] multiply(p1, w5)
  r5 = f32[37,3] reduce(x5, zero), dimensions={1}, to_apply=add
  o5 = f32[37,3] add(p0, r5)
  b6 = f32[37,11] broadcast(p6), dimensions={0}
  m6 = f32[37,11] multiply(b6, p3)
  a6 = f32[37,11] add(p2, m6)
  l6 = pred[37,11] compare(a6, zb), direction=LT
  c6 = f32[37,11] convert(l6)
  w6 = f32[37,11,3] broadcast(c6), dimensions={0,1}
  x6 = f32[37,11,3] multiply(p1, w6)
  r6 = f32[37,3] reduce(x6, zero), dimensions={1}, to_apply=max
  o6 = f32[37,3] add(p0, r6)
  ROOT t = (f32[37,3], f32[37,3], f32[37,3]) tuple(o4, o5, o6)
}

ENTRY main {
  p0 = f32[37,3] parameter(0)
  p1 = f32[37,11,3] parameter(1)
  p2 = f32[37,11] parameter(2)
  p3 = f32[37,11] parameter(3)
  p4 = f32[37] parameter(4)
  p5 = f32[37] parameter(5)
  p6 = f32[37] parameter(6)
  ROOT f = (f32[37,3], f32[37,3], f32[37,3]) fusion(p0, p1, p2, p3, p4, p5, p6),
    kind=kLoop, calls=fused
}
"""


def _middle_root(t: str, n: int = 11) -> str:
    """Root reduces (a kInput fusion: the reduction nest's row of 3 accumulators) of the middle
    dimension, a sum and a maximum of the same input."""
    return _REDUCERS.format(name=f"short_middle_root_{t}", t=t) + f"""
fused {{
  x = {t}[37,{n},3] parameter(0)
  y = {t}[37,{n},3] parameter(1)
  m = {t}[37,{n},3] multiply(x, y)
  z = {t}[] constant(0)
  s = {t}[37,3] reduce(m, z), dimensions={{1}}, to_apply=add
  h = {t}[37,3] reduce(x, z), dimensions={{1}}, to_apply=max
  ROOT r = ({t}[37,3], {t}[37,3]) tuple(s, h)
}}

ENTRY main {{
  x = {t}[37,{n},3] parameter(0)
  y = {t}[37,{n},3] parameter(1)
  ROOT f = ({t}[37,3], {t}[37,3]) fusion(x, y), kind=kInput, calls=fused
}}
"""


def _value(t: str, shape: str, dims: str, out: str, transpose: str = "") -> str:
    """A reduce read by an add (a kLoop fusion: the reduce computed per output element)."""
    src = "x"
    tr = ""
    if transpose:
        shape, tshape, perm = transpose.split(";")
        tr = f"  xt = {t}[{tshape}] transpose(x), dimensions={{{perm}}}\n"
        src = "xt"
    return _REDUCERS.format(name=f"short_value_{t}", t=t) + f"""
fused {{
  x = {t}[{shape}] parameter(0)
  b = {t}[{out}] parameter(1)
{tr}  z = {t}[] constant(0)
  r = {t}[{out}] reduce({src}, z), dimensions={{{dims}}}, to_apply=add
  ROOT o = {t}[{out}] add(r, b)
}}

ENTRY main {{
  x = {t}[{shape}] parameter(0)
  b = {t}[{out}] parameter(1)
  ROOT f = {t}[{out}] fusion(x, b), kind=kLoop, calls=fused
}}
"""


ARGMAX = """HloModule short_argmax

argmax {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  eq = pred[] compare(a, b), direction=EQ
  lt = pred[] compare(ai, bi), direction=LT
  tie = pred[] and(eq, lt)
  keep = pred[] or(gt, tie)
  v = f32[] select(keep, a, b)
  i = s32[] select(keep, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}

fused {
  x = f32[37,6,3] parameter(0)
  io = s32[37,6,3] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  z = s32[] constant(0)
  ROOT r = (f32[37,3], s32[37,3]) reduce(x, io, ninf, z), dimensions={1}, to_apply=argmax
}

ENTRY main {
  x = f32[37,6,3] parameter(0)
  ROOT f = (f32[37,3], s32[37,3]) fusion(x), kind=kInput, calls=fused
}
"""

SHORT = {
    "mjx_middle_multi_output": MJX,
    "middle_root_f32": _middle_root("f32"),
    "middle_root_f64": _middle_root("f64", 5),
    "middle_root_f16": _middle_root("f16"),
    "middle_root_bf16": _middle_root("bf16"),
    "middle_root_s32": _middle_root("s32"),
    "middle_value_f32": _value("f32", "37,11,3", "1", "37,3"),
    "middle_value_f16": _value("f16", "37,11,3", "1", "37,3"),
    "middle_value_s8": _value("s8", "37,11,3", "1", "37,3"),
    # the reduced dimension minor, read through a transpose: stride 37 along it, unit stride
    # along the outputs
    "minor_transposed_f32": _value("f32", "", "1", "37", transpose="11,37;37,11;1,0"),
    # the reduced dimension major: the column path (already outputs in lanes)
    "major_f32": _value("f32", "11,37,3", "0", "37,3"),
    "major_value_short_minor": _value("f32", "37,11,3", "0,2", "11"),
    "argmax_middle": ARGMAX,
}
# schedules: the outputs-in-lanes one (a vector loop holding the reduction's sequential loop)
# where the operand is strided along a short reduced dimension
LANES = {"mjx_middle_multi_output", "middle_root_f32", "middle_root_f64", "middle_root_f16",
         "middle_root_bf16", "middle_root_s32", "middle_value_f32", "middle_value_f16",
         "middle_value_s8", "minor_transposed_f32", "argmax_middle"}


@pytest.fixture(scope="module")
def short_built() -> dict[str, tuple[object, dict[str, list[int]], object]]:
    from cpu_lower_harness import Harness

    out = {}
    for target in ("avx2", "avx512", "scalar"):
        h = Harness(target)
        ids = {name: h.add_module(text, "none") for name, text in SHORT.items()}
        out[target] = (h, ids, h.build())
    return out


@pytest.mark.parametrize("name", list(SHORT))
def test_short_reductions_match_the_interpreter_at_every_width(short_built, name: str) -> None:
    for h, ids, lib in short_built.values():
        (kid,) = ids[name]
        for seed in (0, 1):
            h.check(lib, kid, seed, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(LANES))
def test_short_reductions_sum_in_the_scalar_order(short_built, name: str) -> None:
    """Each lane sums its own reduction in order: the results are the scalar kernel's bit for
    bit at 8 and 16 lanes (f16 and bf16 included: each add rounded, in XLA's order)."""
    h0, ids0, lib0 = short_built["scalar"]
    (k0,) = ids0[name]
    args = h0.inputs(k0, 3)
    want = h0.run(lib0, k0, list(args))
    for target in ("avx2", "avx512"):
        h, ids, lib = short_built[target]
        (kid,) = ids[name]
        got = h.run(lib, kid, list(args))
        for g, w in zip(got, want, strict=True):
            assert g.tobytes() == w.tobytes(), (name, target)


def _schedule(name: str, target: str = "avx2"):  # type: ignore[no-untyped-def]
    from hlofuse.backends.kernel_ir import ir
    from hlofuse.backends.kernel_ir.lower import lower_kernel
    from hlofuse.backends.kernel_ir.passes import optimize
    from hlofuse.backends.kernel_ir.target import Target

    k = optimize(lower_kernel(parse(SHORT[name]).entry.root), Target.named(target))
    loops = [s for s in ir.walk(k.body) if isinstance(s, ir.Loop)]
    roots = [v for s in ir.walk(k.body) for v in ir.stmt_vals(s)]
    hsums = [v for v in ir.postorder(roots) if v.op == "lanes_reduce"]
    return k, loops, hsums


@pytest.mark.parametrize("name", sorted(LANES))
@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_short_strided_reductions_put_their_outputs_in_lanes(name: str, target: str) -> None:
    from hlofuse.backends.kernel_ir import ir

    _k, loops, hsums = _schedule(name, target)
    (outer,) = [lp for lp in loops if lp.vector]
    assert outer.lo == 0 and outer.hi // outer.vector * outer.vector == 37 // outer.vector * \
        outer.vector  # over the 37 outputs (then a scalar tail)
    inner = [s for s in outer.body if isinstance(s, ir.Loop)]  # the reductions, jammed
    if inner:
        assert len(inner) == 1 and not inner[0].vector and inner[0].hi - inner[0].lo in (5, 6, 11)
    else:  # shorter than the vector: fully unrolled into the vector loop (`_unrollable`)
        assert target == "avx512" and name in ("middle_root_f64", "minor_transposed_f32")
    assert not hsums  # no horizontal combine


def test_the_mjx_sums_share_one_loop_and_its_loads() -> None:
    """The 3 outputs x 3 coordinates of the MJX fusion: nine accumulator registers updated by
    one loop over the 11 contacts, which loads each operand element once."""
    from hlofuse.backends.kernel_ir import ir

    _k, loops, _ = _schedule("mjx_middle_multi_output")
    (outer,) = [lp for lp in loops if lp.vector]
    (inner,) = [s for s in outer.body if isinstance(s, ir.Loop)]
    assert inner.hi - inner.lo == 11
    stores = [s for s in inner.body if isinstance(s, ir.Store)]
    assert len(stores) == 9 and all(s.buf.kind == "lanes" for s in stores)
    roots = [v for s in inner.body for v in ir.stmt_vals(s)]
    loads = [v for v in ir.postorder(roots)
             if v.op == "load" and v.buffer.kind == "in" and inner.var in ir.deps(v)]
    assert len(loads) == len({(v.buffer, v.index) for v in loads}) == 5  # p1 x 3, p2, p3


def test_a_contiguous_short_row_stays_vectorized_along_itself() -> None:
    """A short row with unit stride along the reduced dimension loads whole vectors along it;
    the outputs' lanes would gather (the rule's second condition)."""
    text = _value("f32", "37,11", "1", "37")
    from hlofuse.backends.kernel_ir import ir
    from hlofuse.backends.kernel_ir.lower import lower_kernel
    from hlofuse.backends.kernel_ir.passes import optimize
    from hlofuse.backends.kernel_ir.target import Target

    k = optimize(lower_kernel(parse(text).entry.root), Target.named("avx2"))
    roots = [v for s in ir.walk(k.body) for v in ir.stmt_vals(s)]
    assert any(v.op == "lanes_reduce" for v in ir.postorder(roots))


def test_a_short_reduction_is_the_same_on_any_number_of_threads() -> None:
    """Big enough to be cut into chunks for the thread pool: each output is one lane's
    in-order sum, so the result does not depend on the chunks."""
    text = _middle_root("f32").replace("37,", "4096,")
    rng = np.random.default_rng(7)
    args = [rng.standard_normal((4096, 11, 3)).astype(np.float32) for _ in range(2)]
    one = hlofuse.compile(text, pipeline=None, threads=1)
    four = hlofuse.compile(text, pipeline=None, threads=4)
    assert "hf_parallel_ptr" in four.source
    for a, b in zip(one(*args), four(*args), strict=True):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
