"""The kernel IR (backends/kernel_ir): values, affine folding, lowering, and each pass's structure
(split, jam, collapse, vectorize, parallelize, hoist). Numerical results of every pass are checked
against the interpreter in tests/test_cpu_lower.py (at several vector widths); these tests pin
what each transformation does and refuses to do.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import hlofuse
from hlofuse.analysis.kernels import is_kernel
from hlofuse.backends.cpu.cvec import INLINE_VMATH_CALLS
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir import lower as kir_lower
from hlofuse.backends.kernel_ir.passes import (
    collapse,
    hoist,
    jam,
    optimize,
    parallelize,
    split,
    vectorize,
)
from hlofuse.backends.kernel_ir.passes.parallel import access_counts
from hlofuse.backends.kernel_ir.passes.vectorize import ACCUMULATORS
from hlofuse.backends.kernel_ir.printer import format_kernel
from hlofuse.backends.kernel_ir.target import Target
from hlofuse.ir.dtypes import F32, PRED, S32, S64, U64
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse

ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def kernels(text: str, pipeline: str = "xla") -> list[ir.Kernel]:
    module = parse(text)
    run_pipeline(module, pipeline)
    return [kir_lower.lower_kernel(i) for i in module.entry.instructions if is_kernel(i)]


def one(text: str, pipeline: str = "xla") -> ir.Kernel:
    (k,) = kernels(text, pipeline)
    return k


def loops(k: ir.Kernel) -> list[ir.Loop]:
    return [s for s in ir.walk(k.body) if isinstance(s, ir.Loop)]


def vals(k: ir.Kernel) -> list[ir.Val]:
    return ir.postorder([v for s in ir.walk(k.body) for v in ir.stmt_vals(s)])


# ----- values and affine expressions -----------------------------------------------------------


def test_values_are_interned_and_constants_keep_their_bits() -> None:
    g = ir.Graph()
    buf = ir.Buffer("in0", F32, 8, "in")
    i = ir.Var("i", 0, 8)
    a = g.load(buf, ir.affine(i) + 1)
    assert g.load(buf, ir.affine(i) + 1) is a
    op = ir.ScalarOp(Opcode.ADD, F32)
    assert g.alu(op, a, a) is g.alu(op, a, a)
    assert g.const(0.0, F32) is not g.const(-0.0, F32)
    assert g.const(math.nan, F32) is g.const(math.nan, F32)


def test_idiv_imod_fold_when_the_remainder_is_in_range() -> None:
    g = ir.Graph()
    i, k = ir.Var("i", 0, 100), ir.Var("k", 0, 4)
    x = ir.affine(i) * 4 + ir.affine(k)
    assert g.idiv(x, 4) == ir.affine(i)
    assert g.imod(x, 4) == ir.affine(k)
    wide = ir.Var("j", 0, 5)  # j may reach 4: no longer provably a remainder
    y = ir.affine(i) * 4 + ir.affine(wide)
    assert [t.op for t in g.idiv(y, 4).vals()] == ["idiv"]


def test_idiv_imod_pull_out_the_multiples_of_the_divisor() -> None:
    """x = n*y + r with r >= 0 (but not below n): x // n = y + r // n and x % n = r % n, so
    an index such as ((j + 384*r) / 128) % 3 becomes (j / 128) % 3, then j / 128 when j < 384."""
    g = ir.Graph()
    j, r = ir.Var("j", 0, 384), ir.Var("r", 0, 512)
    x = ir.affine(j) + ir.affine(r) * 384
    q = g.idiv(x, 128)
    assert q.coef(r) == 3 and [v.op for v in q.vals()] == ["idiv"]
    assert q.vals()[0].args[0].arg == ir.affine(j)  # the division reads j alone
    m = g.imod(q, 3)
    assert m == q.without(r)  # j / 128 lies in [0, 3): it is its own remainder
    assert [v.op for v in g.imod(x, 32).vals()] == ["imod"]
    assert g.imod(x, 32).vals()[0].args[0].arg == ir.affine(j)
    # a remainder part that may be negative is left whole
    k = ir.Var("k", -4, 4)
    z = ir.affine(r) * 8 + ir.affine(k) + 8  # (>= 4, but its part k may be below 0)
    assert [v.args[0].arg for v in g.idiv(z, 8).vals()] == [z]


def test_deep_chains_need_no_recursion() -> None:
    g = ir.Graph()
    buf = ir.Buffer("in0", F32, 1, "in")
    v = g.load(buf, ir.ZERO)
    op = ir.ScalarOp(Opcode.NEGATE, F32)
    for _ in range(20_000):
        v = g.alu(op, v)
    assert len(ir.postorder([v])) == 20_001
    assert ir.reads(v) == {buf} and not ir.deps(v)


def test_a_long_elementwise_fusion_lowers_and_prints() -> None:
    from hlofuse.backends.cpu.kernels import lower_kernel

    body = ["  p = f32[64] parameter(0)", "  v0 = f32[64] exponential(p)"]
    body += [f"  v{n} = f32[64] exponential(v{n - 1})" for n in range(1, 3000)]
    text = "ENTRY e {\n" + "\n".join(body) + "\n  ROOT r = f32[64] add(v2999, p)\n}"
    module = parse(text)
    run_pipeline(module, "xla")
    (instr,) = [i for i in module.entry.instructions if is_kernel(i)]
    k = lower_kernel(instr, Target.named("avx2"))
    # one vector loop, no tail; exp reads its operand under DAZ, unflushed (cexpr.DAZ_SAFE_F32);
    # the first calls inline, the rest to the out-of-line copy (cvec.INLINE_VMATH_CALLS)
    inline, called = k.source.count("= hf_exp_v8_f32(("), k.source.count("= hf_exp_v8_f32_call((")
    assert (inline, called) == (INLINE_VMATH_CALLS, 3000 - INLINE_VMATH_CALLS)


# ----- split, jam, collapse --------------------------------------------------------------------

CONCAT = """
ENTRY e {
  p0 = f32[1,300] parameter(0)
  p1 = f32[1,300] parameter(1)
  p2 = f32[1,300] parameter(2)
  e = f32[1,300] exponential(p0)
  c = f32[3,300] concatenate(e, p1, p2), dimensions={0}
  z = f32[] constant(0)
  ROOT p = f32[3,302] pad(c, z), padding=0_0x1_1
}"""


def test_split_makes_pieces_branch_free() -> None:
    k = one(CONCAT)
    assert any(v.op == "cond" for v in vals(k))
    split(k)
    assert not any(v.op == "cond" for v in vals(k))
    # each row is its own piece (no loop over 1 row); columns: pad | body | pad
    assert sorted((lp.lo, lp.hi) for lp in loops(k)) == [(1, 301)] * 3


def test_jam_merges_siblings_and_refuses_dependences() -> None:
    k = one(CONCAT)
    split(k)
    jam(k)
    stores = [s for s in ir.walk(k.body) if isinstance(s, ir.Store)]
    assert [(lp.lo, lp.hi) for lp in loops(k)] == [(1, 301)] and len(stores) == 9
    # a loop reading what the previous one writes is not jammed
    g = ir.Graph()
    a, b = ir.Buffer("t0", F32, 8, "local"), ir.Buffer("out0", F32, 8, "out")
    i, j = ir.Var("i", 0, 8), ir.Var("j", 0, 8)
    first = ir.Loop(i, 0, 8, [ir.Store(a, ir.affine(i), g.const(1.0, F32))])
    second = ir.Loop(j, 0, 8, [ir.Store(b, ir.affine(j), g.load(a, ir.affine(j) * 0 + 7))])
    kern = ir.Kernel("k", [], [b], [first, second], g, locals=[a])
    jam(kern)
    assert len(kern.body) == 2


def test_regroup_jams_reductions_across_their_inits_and_results() -> None:
    """`jam.regroup` (the outputs-in-lanes schedule's): each accumulator's init moves above
    the first loop, each result below the second; a statement depending on both loops stops
    it."""
    from hlofuse.backends.kernel_ir.passes.jam import regroup

    g = ir.Graph()
    x = ir.Buffer("in0", F32, 8, "in", 0)
    out = ir.Buffer("out0", F32, 2, "out", 0)
    accs = [ir.Buffer(f"acc{n}", F32, 1, "local") for n in range(2)]
    add = ir.ScalarOp(Opcode.ADD, F32)

    def reduction(n: int, between: list[ir.Stmt]) -> list[ir.Stmt]:
        r = ir.Var("r", 0, 8)
        acc = accs[n]
        body = [ir.Store(acc, ir.ZERO, g.alu(add, g.load(acc, ir.ZERO),
                                             g.load(x, ir.affine(r))))]
        return [ir.Store(acc, ir.ZERO, g.const(float(n), F32)), ir.Loop(r, 0, 8, body),
                *between, ir.Store(out, ir.affine(n), g.load(acc, ir.ZERO))]

    k = ir.Kernel("k", [x], [out], reduction(0, []) + reduction(1, []), g, locals=accs)
    body = regroup(k, k.body)
    kinds = [type(s).__name__ for s in body]
    assert kinds == ["Store", "Store", "Loop", "Store", "Store"]
    assert [s.buf for s in body if isinstance(s, ir.Store)] == [*accs, out, out]
    (loop,) = [s for s in body if isinstance(s, ir.Loop)]
    assert [s.buf for s in loop.body] == accs  # both reductions in one loop
    assert len(k.body) == 6  # the original statements are not changed
    # acc1's init reads out0[0], written after the first loop: it can move neither way
    blocked = ir.Store(accs[1], ir.ZERO, g.load(out, ir.ZERO))
    first = reduction(0, [])
    second = reduction(1, [])
    k2 = ir.Kernel("k", [x], [out], [*first, blocked, *second[1:]], g, locals=accs)
    assert len([s for s in regroup(k2, k2.body) if isinstance(s, ir.Loop)]) == 2

def test_collapse_flattens_elementwise_nests_only() -> None:
    k = one("""
ENTRY e {
  p0 = f32[64,33] parameter(0)
  ROOT n = f32[64,33] negate(p0)
}""")
    collapse(k)
    assert [(lp.lo, lp.hi) for lp in loops(k)] == [(0, 2112)]
    k = one("""
ENTRY e {
  p0 = f32[33] parameter(0)
  p1 = f32[64,33] parameter(1)
  b = f32[64,33] broadcast(p0), dimensions={1}
  ROOT a = f32[64,33] add(b, p1)
}""")
    collapse(k)
    assert [(lp.lo, lp.hi) for lp in loops(k)] == [(0, 64), (0, 33)]


# ----- vectorize -------------------------------------------------------------------------------

ELEMENTWISE = """
ENTRY e {
  p0 = f32[1003] parameter(0)
  ROOT s = f32[1003] sine(p0)
}"""


@pytest.mark.parametrize("target,width", [("avx512", 16), ("avx2", 8), ("sse2", 4),
                                          ("neon", 4), ("scalar", 0)])
def test_vector_width_follows_the_target(target: str, width: int) -> None:
    k = optimize(one(ELEMENTWISE), Target.named(target))
    shape = [(lp.lo, lp.hi, lp.vector) for lp in loops(k)]
    if width:
        main = 1003 // width * width
        assert shape == [(0, main, width), (main, 1003, 0)]  # vector loop, scalar tail
    else:
        assert shape == [(0, 1003, 0)]


def test_f64_loops_get_half_the_lanes() -> None:
    k = optimize(one("""
ENTRY e {
  p0 = f64[1024] parameter(0)
  ROOT s = f64[1024] sqrt(p0)
}"""), Target.named("avx2"))
    assert [lp.vector for lp in loops(k)] == [4]


def test_interleaved_rows_become_tiles_within_bounds() -> None:
    text = """
ENTRY e {
  s = f32[%d,4] parameter(0)
  c0 = f32[%d,1] slice(s), slice={[0:%d], [0:1]}
  c3 = f32[%d,1] slice(s), slice={[0:%d], [3:4]}
  a = f32[%d,1] add(c0, c3)
  ROOT r = f32[%d] reshape(a)
}"""
    k = optimize(one(text % ((64,) * 7)), Target.named("avx2"))
    tiles = [v for v in vals(k) if v.op == "tile"]
    assert {(v.arg[2], v.arg[3]) for v in tiles} == {(4, 0), (4, 3)}
    # a strided read whose row is not whole (stride 2 over rows of 4) stays a per-lane gather
    k = optimize(one("""
ENTRY e {
  s = f32[64] parameter(0)
  ROOT c = f32[32] slice(s), slice={[0:64:2]}
}"""), Target.named("avx2"))
    assert [lp.vector for lp in loops(k)] == [8]
    assert {v.arg[2] for v in vals(k) if v.op == "tile"} == {2}


def test_small_inner_loops_are_unrolled_into_an_outer_vector_loop() -> None:
    """Sum over the 4 columns of [n, 4]: vector over n, the columns unrolled, accumulators
    privatised per lane."""
    k = optimize(one(ADD + """
ENTRY e {
  p = f32[256,4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[256] reduce(p, z), dimensions={1}, to_apply=add
}"""), Target.named("avx2"))
    assert [lp.vector for lp in loops(k)] == [8]
    assert any(b.kind == "lanes" for b in k.locals)
    assert any(v.op == "tile" for v in vals(k))


def test_row_reduction_uses_partial_sums_of_the_identity() -> None:
    k = optimize(one(ADD + """
ENTRY e {
  p = f32[1000] parameter(0)
  z = f32[] constant(5)
  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add
}"""), Target.named("avx2"))
    partials = [b for b in k.locals if b.kind == "lanes"]
    assert len(partials) == ACCUMULATORS
    init = [s for s in ir.walk(k.body) if isinstance(s, ir.Store) and s.buf in partials
            and s.value.op == "const"]
    assert [ir.const_value(s.value) for s in init] == [-0.0] * ACCUMULATORS  # not the init 5
    (red,) = [v for v in vals(k) if v.op == "lanes_reduce"]
    assert set(red.buffers) == set(partials)
    # 1000 = 31 iterations of 4 vectors of 8 (one partial each), then one vector into the
    # first partial; no scalar tail
    assert [(lp.lo, lp.hi, lp.vector, ir.step_of(lp)) for lp in loops(k)] == \
        [(0, 992, 8, 32), (992, 1000, 8, 8)]


def test_short_row_reductions_use_fewer_partials() -> None:
    """A row of 2 whole vectors gets 2 partials; the 4 leftover lanes run in the scalar
    tail."""
    k = optimize(one(ADD + """
ENTRY e {
  p = f32[20] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add
}"""), Target.named("avx2"))
    partials = [b for b in k.locals if b.kind == "lanes"]
    assert len(partials) == 2
    (red,) = [v for v in vals(k) if v.op == "lanes_reduce"]
    assert set(red.buffers) == set(partials)
    assert [(lp.lo, lp.hi, lp.vector, ir.step_of(lp)) for lp in loops(k)] == \
        [(0, 16, 8, 16), (16, 20, 0, 1)]


def test_guarded_gathers_varying_by_lane_stay_scalar() -> None:
    """An interior pad reads its operand only at even positions, at p[i // 2]: a gather under
    a condition that varies by lane. In bounds, but read on every lane it costs more than the
    branch saves (GPT-2's train step ran 1.5x slower so), so the loop stays scalar."""
    k = optimize(one("""
ENTRY e {
  p = f32[64] parameter(0)
  z = f32[] constant(0)
  ROOT q = f32[127] pad(p, z), padding=0_0_1
}"""), Target.named("avx2"))
    assert any(v.op == "cond" for v in vals(k))
    assert not any(lp.vector for lp in loops(k))


def test_guarded_contiguous_reads_become_masked_loads() -> None:
    """A row scan's first taps read before the row (and, in its first row, before the buffer)
    where the window's padding is: the loop over the outputs runs in lanes (a window along the
    minor dimension), each tap one masked load that reads only the lanes inside the row."""
    k = optimize(one(ADD + """
ENTRY e {
  p0 = f32[8,16] parameter(0)
  zf = f32[] constant(0)
  ROOT r = f32[8,16] reduce-window(p0, zf), window={size=1x16 pad=0_0x15_0}, to_apply=add
}"""), Target.named("avx512"))
    vector = [lp for lp in loops(k) if lp.vector]
    assert len(vector) == 1 and vector[0].vector == 16
    masked = [v for v in vals(k) if v.op == "mload"]
    assert masked and all(v.args[0].dtype.is_pred for v in masked)
    assert not any(v.op == "lanes_reduce" for v in vals(k)), "outputs in lanes, no combine"
    forms = vector[0].forms
    assert forms is not None and forms.compare32, "the tap's position compared in 32 bits"


def test_variadic_reductions_are_not_reassociated() -> None:
    k = optimize(one("""
argmax {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  v = f32[] select(gt, a, b)
  i = s32[] select(gt, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  p0 = f32[8,500] parameter(0)
  io = s32[8,500] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  z = s32[] constant(0)
  ROOT r = (f32[8], s32[8]) reduce(p0, io, ninf, z), dimensions={1}, to_apply=argmax
}"""), Target.named("avx2"))
    assert not any(lp.vector for lp in loops(k))


# ----- parallelize, hoist ----------------------------------------------------------------------


def test_parallel_only_when_big_and_disjoint() -> None:
    k = one("""
ENTRY e {
  p0 = f32[512,256] parameter(0)
  ROOT n = f32[512,256] negate(p0)
}""")
    parallelize(k, threads=2)
    assert loops(k)[0].parallel
    k = one("""
ENTRY e {
  p0 = f32[64] parameter(0)
  ROOT n = f32[64] negate(p0)
}""")
    parallelize(k, threads=2)
    assert not loops(k)[0].parallel
    k = one(ADD + """
ENTRY e {
  p = f32[100000] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add
}""")
    parallelize(k, threads=2)  # every iteration folds into one accumulator: not parallel
    assert not any(lp.parallel for lp in loops(k))


def test_a_loop_reading_a_shared_local_stays_serial() -> None:
    # a column reduction over a large [500, 65536] input keeps its accumulator in heap scratch,
    # then copies it out: that copy loop reads a local the kernel shares, which the outlined
    # range function would not receive (gymnax rollouts' reward sum failed to compile)
    text = ADD + """
ENTRY e {
  p = f32[500,65536] parameter(0)
  z = f32[] parameter(1)
  ROOT r = f32[65536] reduce(p, z), dimensions={0}, to_apply=add
}"""
    k = one(text)
    parallelize(k, threads=2)
    counts = access_counts(k.body)
    for lp in loops(k):
        if lp.parallel:
            mine = access_counts(lp.body)
            assert all(mine[b] == counts[b] for b in mine if b.kind in ("local", "lanes"))
    if not hlofuse.backends.cpu.available():
        return
    exe = hlofuse.compile(text, threads=2)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((500, 65536)).astype(np.float32)
    z = np.float32(0.5)
    np.testing.assert_allclose(exe(x, z)[0], x.sum(0, dtype=np.float64) + 0.5, rtol=1e-4,
                               atol=1e-3)


def test_hoist_moves_invariants_but_not_guarded_or_written_reads() -> None:
    g = ir.Graph()
    x = ir.Buffer("in0", F32, 16, "in")
    t = ir.Buffer("t0", F32, 1, "local")
    out = ir.Buffer("out0", F32, 16, "out")
    i = ir.Var("i", 0, 16)
    neg = ir.ScalarOp(Opcode.NEGATE, F32)
    add = ir.ScalarOp(Opcode.ADD, F32)
    invariant = g.alu(neg, g.load(x, ir.affine(3)))
    written = g.alu(neg, g.load(t, ir.ZERO))  # t is stored in the loop
    lt = ir.ScalarOp(Opcode.COMPARE, PRED, (("direction", "LT"),))
    first = g.alu(lt, g.index(ir.affine(i)), g.const(1, S64))
    # guarded by a condition on i: x[15] is in bounds whatever i is (hoisted, speculated);
    # x[p[0]] may not be (p[0] is any s32), so it stays behind its condition
    p = ir.Buffer("in1", S32, 1, "in", index=1)
    safe = g.alu(neg, g.load(x, ir.affine(15)))
    where = g.load(p, ir.ZERO)  # itself in bounds: hoisted
    unsafe = g.alu(neg, g.load(x, ir.Affine(((where, 1),))))
    guarded = g.cond(first, g.alu(add, safe, unsafe), g.const(0.0, F32))
    body = [ir.Store(t, ir.ZERO, g.load(x, ir.affine(i))),
            ir.Store(out, ir.affine(i), g.alu(add, g.alu(add, invariant, written), guarded))]
    k = ir.Kernel("k", [x, p], [out], [ir.Loop(i, 0, 16, body)], g, locals=[t])
    hoist(k)
    lets = [s.value for s in k.body if isinstance(s, ir.Let)]
    assert lets == [invariant, safe, where]


def test_printed_kernels_read_like_the_ir() -> None:
    k = optimize(one(ELEMENTWISE), Target.named("avx2"))
    text = format_kernel(k)
    assert "for i0 in [0, 1000) vector 8:" in text and "sine.f32(in0[i0])" in text


def test_vectorize_does_nothing_for_the_scalar_target() -> None:
    k = one(ELEMENTWISE)
    vectorize(k, Target.named("scalar"))
    assert not any(lp.vector for lp in loops(k))


def test_value_bounds_of_a_clamp_of_an_unknown_value() -> None:
    """min(max(x, 0), 26) lies in [0, 26] whatever x is (a gathered position that jnp.take
    clamps): each end of a maximum or minimum is known where one operand bounds it."""
    g = ir.Graph()
    b = ir.Buffer("b", S64, 8, "in")
    x = g.load(b, ir.affine(ir.Var("i", 0, 8)))
    f = g.alu(ir.ScalarOp(Opcode.MULTIPLY, S64), x, x)  # no bounds: may wrap around
    assert ir.value_bounds(f) is None
    lo = g.alu(ir.ScalarOp(Opcode.MAXIMUM, S64), f, g.const(0, S64))
    assert ir.value_bounds(lo) is None  # [0, ?)
    both = g.alu(ir.ScalarOp(Opcode.MINIMUM, S64), lo, g.const(26, S64))
    assert ir.value_bounds(both) == (0, 26)
    hi_first = g.alu(ir.ScalarOp(Opcode.MAXIMUM, S64),
                     g.alu(ir.ScalarOp(Opcode.MINIMUM, S64), f, g.const(26, S64)),
                     g.const(-3, S64))
    assert ir.value_bounds(hi_first) == (-3, 26)


def test_value_bounds_of_arithmetic_stop_where_it_could_wrap() -> None:
    g = ir.Graph()
    i = g.index(ir.affine(ir.Var("i", 0, 2048)))
    u64 = ir.ScalarOp(Opcode.CONVERT, U64)
    x = g.alu(ir.ScalarOp(Opcode.ADD, U64), g.alu(u64, i), g.const(4096, U64))
    assert ir.value_bounds(x) == (4096, 4096 + 2047)
    shr = ir.ScalarOp(Opcode.SHIFT_RIGHT_LOGICAL, U64)
    assert ir.value_bounds(g.alu(shr, x, g.const(32, U64))) == (0, 0)
    big = g.alu(ir.ScalarOp(Opcode.MULTIPLY, U64), x, g.const(1 << 60, U64))
    assert ir.value_bounds(big) is None  # may wrap around 2^64
    neg = g.alu(ir.ScalarOp(Opcode.SUBTRACT, S64), i, g.const(5000, S64))
    assert ir.value_bounds(neg) == (-5000, 2047 - 5000)
    memo: dict[int, ir.Bounds] = {}
    deep = x
    for _ in range(12):  # x * 2^12 (a DAG that doubles at every level: linear with a memo)
        deep = g.alu(ir.ScalarOp(Opcode.ADD, U64), deep, deep)
    assert ir.value_bounds(deep, memo=memo) == (4096 << 12, (4096 + 2047) << 12)
    assert len(memo) <= 16
