"""CPU kernels (kernel IR lowering, passes, C printer): every kernel of crafted HLO modules,
generated for each vector width (the avx2 and avx512 targets' 8 and 16 f32 lanes, and scalar),
compiled (all in ONE C file per target) and compared with the interpreter on random inputs. Any
width runs on any host (the compiler splits vectors wider than the machine's registers).

Covers each index map (broadcast, reshape, transpose, slice, concatenate, pad, reverse, iota,
dynamic-slice, gather, dynamic-update-slice), reductions (row, column, scalar, variadic argmax,
multi-output, reduce-window), in-place dynamic-update-slice (out == in and out != in), constants
and the narrow/odd element types (f16, bf16, s8, u64, pred). Integers match exactly; floats
within a few ulp (sums: a relative 1e-4, they are accumulated in a different order).
"""

# ruff: noqa: E501  (HLO text lines are long)
from __future__ import annotations

import re

import numpy as np
import pytest

from cpu_lower_harness import Harness
from hlofuse.backends.cpu import build

try:
    build.find_compiler()
except build.CompilerNotFoundError:  # pragma: no cover
    pytest.skip("no C compiler", allow_module_level=True)

ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
"""

CASES: dict[str, tuple[str, str]] = {
    "elementwise": ("xla", """
ENTRY e {
  p0 = f32[64,33] parameter(0)
  p1 = f32[64,33] parameter(1)
  a = f32[64,33] add(p0, p1)
  m = f32[64,33] multiply(a, p0)
  x = f32[64,33] exponential(p1)
  c = pred[64,33] compare(m, x), direction=GT
  ROOT s = f32[64,33] select(c, m, x)
}"""),
    "broadcast_minor": ("xla", """
ENTRY e {
  p0 = f32[33] parameter(0)
  p1 = f32[64,33] parameter(1)
  b = f32[64,33] broadcast(p0), dimensions={1}
  ROOT a = f32[64,33] add(b, p1)
}"""),
    "broadcast_major_scalar": ("xla", """
ENTRY e {
  p0 = f32[64] parameter(0)
  p1 = f32[64,5,33] parameter(1)
  s = f32[] parameter(2)
  b = f32[64,5,33] broadcast(p0), dimensions={0}
  bs = f32[64,5,33] broadcast(s), dimensions={}
  a = f32[64,5,33] add(b, p1)
  ROOT m = f32[64,5,33] multiply(a, bs)
}"""),
    "broadcast_transposing": ("xla", """
ENTRY e {
  p0 = f32[7,5] parameter(0)
  b = f32[5,3,7] broadcast(p0), dimensions={2,0}
  ROOT n = f32[5,3,7] negate(b)
}"""),
    "transpose_reshape": ("xla", """
ENTRY e {
  p0 = f32[8,16,4] parameter(0)
  t = f32[4,8,16] transpose(p0), dimensions={2,0,1}
  r = f32[32,16] reshape(t)
  p1 = f32[32,16] parameter(1)
  ROOT a = f32[32,16] add(r, p1)
}"""),
    "slices": ("xla", """
ENTRY e {
  p0 = f32[10,20] parameter(0)
  s1 = f32[4,6] slice(p0), slice={[1:9:2], [2:20:3]}
  s2 = f32[4,6] slice(p0), slice={[6:10], [0:6]}
  ROOT a = f32[4,6] add(s1, s2)
}"""),
    "slice_rows": ("xla", """
ENTRY e {
  p0 = f32[10,20] parameter(0)
  s = f32[3,20] slice(p0), slice={[4:7], [0:20]}
  ROOT n = f32[3,20] negate(s)
}"""),
    "concatenate": ("xla", """
ENTRY e {
  p0 = f32[5,3] parameter(0)
  p1 = f32[5,4] parameter(1)
  p2 = f32[5,1] parameter(2)
  c = f32[5,8] concatenate(p0, p1, p2), dimensions={1}
  ROOT n = f32[5,8] negate(c)
}"""),
    "pad": ("xla", """
ENTRY e {
  p0 = f32[6,5] parameter(0)
  z = f32[] constant(-7)
  p = f32[12,8] pad(p0, z), padding=2_-1_1x-1_4
  ROOT n = f32[12,8] negate(p)
}"""),
    "reverse_iota": ("xla", """
ENTRY e {
  p0 = s32[6,7] parameter(0)
  r = s32[6,7] reverse(p0), dimensions={0,1}
  i = s32[6,7] iota(), iota_dimension=1
  ROOT a = s32[6,7] add(r, i)
}"""),
    "iota_float": ("xla", """
ENTRY e {
  i = f32[4,9] iota(), iota_dimension=0
  p = f32[4,9] parameter(0)
  ROOT a = f32[4,9] multiply(i, p)
}"""),
    "dynamic_slice": ("xla", """
ENTRY e {
  p0 = f32[10,8] parameter(0)
  i = s32[] parameter(1)
  j = s32[] parameter(2)
  d = f32[3,4] dynamic-slice(p0, i, j), dynamic_slice_sizes={3,4}
  ROOT n = f32[3,4] negate(d)
}"""),
    "dynamic_slice_row": ("xla", """
ENTRY e {
  p0 = f32[100,64] parameter(0)
  i = s32[] parameter(1)
  z = s32[] constant(0)
  d = f32[1,64] dynamic-slice(p0, i, z), dynamic_slice_sizes={1,64}
  r = f32[64] reshape(d)
  p1 = f32[64] parameter(2)
  ROOT a = f32[64] add(r, p1)
}"""),
    "gather_rows": ("xla", """
ENTRY e {
  op = f32[10,4] parameter(0)
  idx = s32[5] parameter(1)
  ROOT g = f32[5,4] gather(op, idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
}"""),
    "gather_2d": ("xla", """
ENTRY e {
  op = f32[6,7] parameter(0)
  idx = s32[2,3] parameter(1)
  ROOT g = f32[3,2,3] gather(op, idx), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0,1}, index_vector_dim=0, slice_sizes={2,3}
}"""),
    "dus_inplace": ("none", """
ENTRY e {
  p0 = f32[10,4] parameter(0)
  u = f32[1,4] parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  ROOT d = f32[10,4] dynamic-update-slice(p0, u, i, z)
}"""),
    "dus_fused": ("xla", """
ENTRY e {
  p0 = f32[10,6] parameter(0)
  u = f32[2,3] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  n = f32[2,3] negate(u)
  ROOT d = f32[10,6] dynamic-update-slice(p0, n, i, j)
}"""),
    "dus_expression": ("xla", """
ENTRY e {
  p0 = f32[10,6] parameter(0)
  u = f32[2,3] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  e = f32[10,6] exponential(p0)
  ROOT d = f32[10,6] dynamic-update-slice(e, u, i, j)
}"""),
    "reduce_row": ("xla", ADD + """
ENTRY e {
  p0 = f32[16,100] parameter(0)
  z = f32[] constant(0)
  x = f32[16,100] exponential(p0)
  ROOT r = f32[16] reduce(x, z), dimensions={1}, to_apply=add
}"""),
    "reduce_column": ("xla", ADD + """
ENTRY e {
  p0 = f32[100,16] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[16] reduce(p0, z), dimensions={0}, to_apply=add
}"""),
    "reduce_middle": ("xla", ADD + """
ENTRY e {
  p0 = f32[6,7,8] parameter(0)
  z = f32[] constant(-1)
  ROOT r = f32[7] reduce(p0, z), dimensions={0,2}, to_apply=max
}"""),
    "reduce_scalar": ("xla", ADD + """
ENTRY e {
  p0 = f32[1000] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(p0, z), dimensions={0}, to_apply=add
}"""),
    "reduce_argmax": ("xla", """
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
ENTRY e {
  p0 = f32[8,50] parameter(0)
  io = s32[8,50] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  z = s32[] constant(0)
  ROOT r = (f32[8], s32[8]) reduce(p0, io, ninf, z), dimensions={1}, to_apply=argmax
}"""),
    "multi_output_reduce": ("none", ADD + """
fused {
  p0 = f32[32,40] parameter(0)
  z = f32[] constant(0)
  ninf = f32[] constant(-inf)
  e = f32[32,40] exponential(p0)
  s = f32[32] reduce(e, z), dimensions={1}, to_apply=add
  m = f32[32] reduce(p0, ninf), dimensions={1}, to_apply=max
  ROOT t = (f32[32], f32[32], f32[32,40]) tuple(s, m, e)
}
ENTRY e {
  p = f32[32,40] parameter(0)
  ROOT f = (f32[32], f32[32], f32[32,40]) fusion(p), kind=kInput, calls=fused
}"""),
    "multi_output_column": ("none", ADD + """
fused {
  p0 = f32[30,20] parameter(0)
  z = f32[] constant(0)
  n = f32[30,20] negate(p0)
  s = f32[20] reduce(n, z), dimensions={0}, to_apply=add
  ROOT t = (f32[20], f32[30,20]) tuple(s, n)
}
ENTRY e {
  p = f32[30,20] parameter(0)
  ROOT f = (f32[20], f32[30,20]) fusion(p), kind=kInput, calls=fused
}"""),
    "multi_shape_fallback": ("none", """
fused {
  p0 = f32[4,5] parameter(0)
  n = f32[4,5] negate(p0)
  s = f32[5,4] transpose(n), dimensions={1,0}
  r = f32[20] reshape(n)
  ROOT t = (f32[5,4], f32[20]) tuple(s, r)
}
ENTRY e {
  p = f32[4,5] parameter(0)
  ROOT f = (f32[5,4], f32[20]) fusion(p), kind=kLoop, calls=fused
}"""),
    "reduce_window": ("xla", ADD + """
ENTRY e {
  p0 = f32[10,12] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[5,13] reduce-window(p0, z), window={size=3x3 stride=2x1 pad=1_1x1_2}, to_apply=add
}"""),
    "reduce_window_dilated_max": ("xla", ADD + """
ENTRY e {
  p0 = f32[7,6] parameter(0)
  z = f32[] constant(-3)
  ROOT r = f32[6,4] reduce-window(p0, z), window={size=2x3 pad=1_0x1_1 lhs_dilate=1x2 rhs_dilate=2x3 stride=1x2}, to_apply=max
}"""),
    "constant_array": ("xla", """
ENTRY e {
  c = f32[2,3] constant({{1, 2, 3}, {4, 5, 6}})
  p = f32[2,3] parameter(0)
  ROOT a = f32[2,3] multiply(c, p)
}"""),
    "f16_bf16": ("xla", """
ENTRY e {
  p0 = f16[40] parameter(0)
  p1 = bf16[40] parameter(1)
  c = f16[40] convert(p1)
  a = f16[40] add(p0, c)
  m = f16[40] multiply(a, p0)
  ROOT b = bf16[40] convert(m)
}"""),
    "s8_u64_pred": ("xla", """
ENTRY e {
  p0 = s8[50] parameter(0)
  p1 = s8[50] parameter(1)
  m = s8[50] multiply(p0, p1)
  a = s8[50] add(m, m)
  q0 = u64[50] parameter(2)
  q1 = u64[50] parameter(3)
  x = u64[50] xor(q0, q1)
  c = pred[50] compare(q0, q1), direction=LT
  d = pred[50] compare(p0, p1), direction=GE
  o = pred[50] and(c, d)
  ca = u64[50] convert(a)
  s = u64[50] select(o, x, ca)
  ROOT t = (u64[50], pred[50]) tuple(s, o)
}"""),
    "reduce_f16": ("xla", ADD.replace("f32", "f16") + """
ENTRY e {
  p0 = f16[12,30] parameter(0)
  z = f16[] constant(0)
  ROOT r = f16[12] reduce(p0, z), dimensions={1}, to_apply=add
}"""),
    "large_parallel": ("xla", """
ENTRY e {
  p0 = f32[512,256] parameter(0)
  p1 = f32[256] parameter(1)
  b = f32[512,256] broadcast(p1), dimensions={1}
  ROOT m = f32[512,256] multiply(p0, b)
}"""),
    "scatter_add": ("none", ADD + """
ENTRY e {
  op = f32[10,4] parameter(0)
  idx = s32[6] parameter(1)
  upd = f32[6,4] parameter(2)
  ROOT s = f32[10,4] scatter(op, idx, upd), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}"""),
    "scatter_assign_2d": ("none", """
assign {
  a = s32[] parameter(0)
  ROOT b = s32[] parameter(1)
}
ENTRY e {
  op = s32[6,5] parameter(0)
  idx = s32[4,2] parameter(1)
  upd = s32[4,2,2] parameter(2)
  ROOT s = s32[6,5] scatter(op, idx, upd), update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=assign
}"""),
    "scatter_fused": ("none", ADD + """
fused {
  op = f32[8,3] parameter(0)
  idx = s32[5,1] parameter(1)
  upd = f32[5,3] parameter(2)
  n = f32[5,3] negate(upd)
  e = f32[8,3] exponential(op)
  ROOT s = f32[8,3] scatter(e, idx, n), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
ENTRY e {
  a = f32[8,3] parameter(0)
  b = s32[5,1] parameter(1)
  c = f32[5,3] parameter(2)
  ROOT f = f32[8,3] fusion(a, b, c), kind=kLoop, calls=fused
}"""),
    "dot_in_fusion": ("none", """
fused {
  a = f32[6,5] parameter(0)
  b = f32[5,4] parameter(1)
  bias = f32[4] parameter(2)
  na = f32[6,5] negate(a)
  d = f32[6,4] dot(na, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[6,4] broadcast(bias), dimensions={1}
  ROOT r = f32[6,4] add(d, bb)
}
ENTRY e {
  a = f32[6,5] parameter(0)
  b = f32[5,4] parameter(1)
  c = f32[4] parameter(2)
  ROOT f = f32[6,4] fusion(a, b, c), kind=kOutput, calls=fused
}"""),
    "dot_unfused": ("none", """
ENTRY e {
  a = f32[3,7] parameter(0)
  b = f32[7,2] parameter(1)
  ROOT d = f32[3,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""),
    "map": ("none", """
mul_add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  m = f32[] multiply(a, b)
  ROOT s = f32[] add(m, a)
}
ENTRY e {
  a = f32[9] parameter(0)
  b = f32[9] parameter(1)
  ROOT m = f32[9] map(a, b), dimensions={0}, to_apply=mul_add
}"""),
    "bitcast_convert_widths": ("none", """
ENTRY e {
  p0 = f32[16] parameter(0)
  b = u8[16,4] bitcast-convert(p0)
  p1 = u32[3,2] parameter(1)
  w = u64[3] bitcast-convert(p1)
  p2 = s16[5,4] parameter(2)
  x = f64[5] bitcast-convert(p2)
  ROOT t = (u8[16,4], u64[3], f64[5]) tuple(b, w, x)
}"""),
    "concatenate_major": ("xla", """
ENTRY e {
  p0 = f32[1,300] parameter(0)
  p1 = f32[2,300] parameter(1)
  p2 = f32[300] parameter(2)
  r = f32[1,300] reshape(p2)
  e = f32[1,300] exponential(p0)
  c = f32[4,300] concatenate(e, p1, r), dimensions={0}
  z = f32[] constant(0)
  p = f32[4,302] pad(c, z), padding=0_0x1_1
  ROOT n = f32[4,302] negate(p)
}"""),
    # two reductions over a concatenate: `split` cuts the row loop at 21, each piece is
    # vectorized with partial accumulators named after the same accumulator (MJX's CG solver
    # hit it: `redeclaration of 'acc0p'`)
    "reduce_split_multi_output": ("xla", ADD + """
ENTRY e {
  a = f32[4,21] parameter(0)
  b = f32[4,32] parameter(1)
  z = f32[] constant(0)
  c = f32[4,53] concatenate(a, b), dimensions={1}
  e = f32[4,53] exponential(c)
  r1 = f32[4] reduce(c, z), dimensions={1}, to_apply=add
  r2 = f32[4] reduce(e, z), dimensions={1}, to_apply=add
  ROOT t = (f32[4], f32[4]) tuple(r1, r2)
}"""),
}


@pytest.fixture(scope="module", params=["avx2", "avx512", "scalar"])
def built(request) -> tuple[Harness, dict[str, list[int]], object]:  # type: ignore[no-untyped-def]
    h = Harness(request.param)
    ids = {name: h.add_module(text, pipeline) for name, (pipeline, text) in CASES.items()}
    return h, ids, h.build()


@pytest.fixture(scope="module")
def lowered() -> tuple[Harness, dict[str, list[int]]]:
    """The cases lowered (not compiled), for structure tests on their kernel IR."""
    h = Harness("avx2")
    return h, {name: h.add_module(text, pipeline) for name, (pipeline, text) in CASES.items()}


def _loops(k):
    from hlofuse.backends.kernel_ir import ir

    return [s for s in ir.walk(k.body) if isinstance(s, ir.Loop)]


def _vals(k):
    from hlofuse.backends.kernel_ir import ir

    roots = [v for s in ir.walk(k.body) for v in ir.stmt_vals(s)]
    return ir.postorder(roots)


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_matches_interpreter(built, name: str) -> None:
    h, ids, lib = built
    assert ids[name], f"{name}: no kernels"
    for kid in ids[name]:
        for seed in (0, 1):
            h.check(lib, kid, seed, rtol=1e-4 if "reduce" in name or "dot" in name else 2e-5)


def test_dynamic_slice_start_clamped(built) -> None:
    h, ids, lib = built
    (kid,) = ids["dynamic_slice"]
    rng = np.random.default_rng(3)
    p0 = rng.normal(size=(10, 8)).astype(np.float32)
    for i, j in [(-5, 2), (9, 7), (100, -100), (2, 3)]:
        h.check(lib, kid, args=[p0, np.int32(i), np.int32(j)])
        h.check(lib, kid, args=[p0, np.asarray(i, np.int32), np.asarray(j, np.int32)])


def test_dus_in_place_is_reported_and_writes_only_the_update(built) -> None:
    h, ids, lib = built
    (kid,) = ids["dus_inplace"]
    k = h.entries[kid].kernel
    assert k.inplace == {0: 0}
    assert "memcpy" in k.source and "restrict in0" not in k.source
    p0 = np.arange(40, dtype=np.float32).reshape(10, 4)
    u = np.full((1, 4), -1, np.float32)
    for start in (3, 12, -2):
        h.check(lib, kid, args=[p0, u, np.asarray(start, np.int32), np.asarray(0, np.int32)])
    # the update loop covers the update only (4 elements), not the operand
    assert re.search(r"for \(int64_t \w+ = 0; \w+ < 4;", k.source)


def test_scatter_in_place(built) -> None:
    h, ids, lib = built
    (kid,) = ids["scatter_add"]
    assert h.entries[kid].kernel.inplace == {0: 0}
    op = np.zeros((10, 4), np.float32)
    upd = np.ones((6, 4), np.float32)
    idx = np.array([1, 1, 9, 10, -1, 3], np.int32)  # repeats add up; out-of-bounds are skipped
    h.check(lib, kid, args=[op, idx, upd])
    got = h.run(lib, kid, [op, idx, upd])[0]
    assert got[1].tolist() == [2, 2, 2, 2] and got[9].tolist() == [1] * 4 and got.sum() == 16
    (kid,) = ids["scatter_fused"]
    assert h.entries[kid].kernel.inplace == {}


def test_fused_dus_in_place(built) -> None:
    h, ids, _lib = built
    (kid,) = ids["dus_fused"]
    assert h.entries[kid].kernel.inplace == {0: 0}
    (kid,) = ids["dus_expression"]
    assert h.entries[kid].kernel.inplace == {}


def test_kernel_names_and_signatures(built) -> None:
    h, ids, _lib = built
    names = [e.kernel.name for e in h.entries]
    assert len(names) == len(set(names))
    (kid,) = ids["reduce_row"]
    assert h.entries[kid].kernel.name.startswith("fused_reduce_add")
    (kid,) = ids["dus_inplace"]
    assert h.entries[kid].kernel.name.startswith("dynamic_update_slice")
    for e in h.entries:  # (if-conversion off where the kernel loads under a condition)
        src = e.kernel.source
        assert f"HF_KERNEL void {e.kernel.name}(" in src or \
            f"HF_KERNEL HF_NO_IFCONV void {e.kernel.name}(" in src
    (kid,) = ids["reduce_row"]  # no guarded load: compiled with GCC's if-conversion
    assert "HF_NO_IFCONV" not in h.entries[kid].kernel.source
    padded = [e for e in h.entries if e.kernel.name.startswith("fused_negate_pad")]
    assert padded and all("HF_KERNEL HF_NO_IFCONV void" in e.kernel.source for e in padded)


def test_elementwise_is_one_flat_loop_and_nests_when_needed(lowered) -> None:
    from hlofuse.backends.kernel_ir import ir

    h, ids = lowered
    (kid,) = ids["elementwise"]
    k = h.kernel_ir(kid)
    loops = _loops(k)
    # [64, 33] collapsed into one flat loop of 2112 = 264 vectors of 8, no tail, no division
    assert [(lp.lo, lp.hi, lp.vector) for lp in loops] == [(0, 2112, 8)]
    assert not any(v.op in ("idiv", "imod") for v in _vals(k))
    (kid,) = ids["broadcast_minor"]
    k = h.kernel_ir(kid)
    loops = _loops(k)
    # a nest (rows x 33 columns: 4 vectors of 8 and a 1-column tail), no division per element
    assert loops[0].hi == 64 and not loops[0].vector and not loops[0].parallel
    assert [(lp.lo, lp.hi, lp.vector) for lp in loops[1:]] == [(0, 32, 8), (32, 33, 0)]
    assert not any(v.op in ("idiv", "imod") for v in _vals(k))
    (kid,) = ids["large_parallel"]
    k = h.kernel_ir(kid)
    assert any(lp.parallel for lp in _loops(k))
    assert all(isinstance(s, ir.Loop | ir.Let | ir.Comment) for s in k.body)


def test_concatenate_on_an_outer_dimension_splits_the_loop(lowered) -> None:
    from hlofuse.backends.kernel_ir import ir

    h, ids = lowered
    (kid,) = ids["concatenate_major"]
    k = h.kernel_ir(kid)
    # one branch-free piece per concatenated row and per padding region: no `if`, no `cond`
    assert not any(isinstance(s, ir.If) for s in ir.walk(k.body))
    assert not any(v.op == "cond" for v in _vals(k))
    stores = [s for s in ir.walk(k.body) if isinstance(s, ir.Store)]
    assert len({id(s) for s in stores}) >= 3 * 3  # (3 row pieces) x (pad, body, pad) columns


def test_multi_output_reduce_shares_one_nest(lowered) -> None:
    from hlofuse.backends.kernel_ir import ir

    h, ids = lowered
    (kid,) = ids["multi_output_reduce"]
    k = h.kernel_ir(kid)
    # one outer loop over the 32 rows, the 40 reduced elements inside it (exp once per element)
    outer = [s for s in k.body if hasattr(s, "var")]
    assert len(outer) == 1 and outer[0].hi == 32
    # each inner loop computes exp once per element: once per copy of the body (a reduction's
    # vector loop runs step / vector copies, one per partial accumulator)
    inner = [s for s in ir.walk(outer[0].body) if isinstance(s, ir.Loop)]
    assert inner
    for lp in inner:
        roots = [v for s in ir.walk(lp.body) for v in ir.stmt_vals(s)]
        exps = [v for v in ir.postorder(roots)
                if v.op == "alu" and v.arg.opcode.value == "exponential"]
        assert len(exps) == ir.step_of(lp) // max(1, lp.vector), (lp.lo, lp.hi, lp.vector)


def test_column_reduction_inner_loop_is_unit_stride(lowered) -> None:
    h, ids = lowered
    (kid,) = ids["reduce_column"]
    k = h.kernel_ir(kid)
    accs = [b for b in k.locals if b.name.startswith("acc")]
    assert any(b.size == 16 for b in accs)  # a row of accumulators
    inner = [lp for lp in _loops(k) if lp.vector]
    assert inner and all(lp.hi - lp.lo == 16 for lp in inner)  # the 16 columns, 2 vectors


def test_row_reduction_keeps_partial_sums(lowered) -> None:
    """A long row reduction is a vector loop into `lanes` partial sums, combined after it."""
    h, ids = lowered
    (kid,) = ids["reduce_scalar"]
    k = h.kernel_ir(kid)
    assert any(lp.vector == 8 for lp in _loops(k))
    assert any(b.kind == "lanes" for b in k.locals)
    assert any(v.op == "lanes_reduce" for v in _vals(k))


def test_split_reduction_pieces_get_their_own_partials(built) -> None:
    """Each piece of a reduction loop cut by `split` has partial accumulators of its own, with
    C names of their own (never a redeclaration, never one shadowing another)."""
    import re as _re

    h, ids, _lib = built
    (kid,) = ids["reduce_split_multi_output"]
    src = h.entries[kid].kernel.source
    src = src[src.index("HF_KERNEL void"):]  # the kernel function, not the vector helpers
    declared = _re.findall(r"^\s*hf_v\d+_\w+ (\w+);$", src, _re.MULTILINE)
    assert len(declared) == len(set(declared))
    if h.target is not None and h.target.vector_bytes:
        assert len(declared) >= 4  # two reductions x two pieces


def test_printer_makes_every_c_name_unique() -> None:
    """A kernel IR whose buffers and nested loop variables share names (as passes may make
    them) prints one C variable per buffer and per loop, and computes the right values."""
    import ctypes

    from hlofuse.backends.cpu import cexpr
    from hlofuse.backends.cpu.cprint import KernelPrinter
    from hlofuse.backends.cpu.cvec import VecLib
    from hlofuse.backends.kernel_ir import ir
    from hlofuse.ir.dtypes import F32
    from hlofuse.ir.opcodes import Opcode

    g = ir.Graph()
    inp = ir.Buffer("in0", F32, 12, "in", 0)
    out = ir.Buffer("out0", F32, 3, "out", 0)
    acc_a = ir.Buffer("acc0", F32, 1, "local")
    acc_b = ir.Buffer("acc0", F32, 1, "local")  # the same name, another buffer
    clash = ir.Buffer("v1", F32, 1, "local")  # the printer's own value pattern
    i = ir.Var("i0", 0, 3)
    j = ir.Var("i0", 0, 4)  # nested inside i, the same name
    add = ir.ScalarOp(Opcode.ADD, F32)
    zero = g.const(0.0, F32)

    def row_sum(acc: ir.Buffer) -> list[ir.Stmt]:
        x = g.load(inp, ir.affine(i) * 4 + ir.affine(j))
        inner = ir.Loop(j, 0, 4, [ir.Store(acc, ir.ZERO, g.alu(add, g.load(acc, ir.ZERO), x))])
        return [ir.Store(acc, ir.ZERO, zero), inner]

    total = g.alu(add, g.load(acc_a, ir.ZERO), g.load(acc_b, ir.ZERO))
    body = [*row_sum(acc_a), *row_sum(acc_b), ir.Store(clash, ir.ZERO, total),
            ir.Store(out, ir.affine(i), g.load(clash, ir.ZERO))]
    k = ir.Kernel("dup_names", [inp], [out], [ir.Loop(i, 0, 3, body)], g,
                  locals=[acc_a, acc_b, clash])
    lib = VecLib()
    src = KernelPrinter(k, lib).print()
    decls = re.findall(r"^\s*float (\w+)\[1\];$", src, re.MULTILINE)
    assert len(decls) == 3 and len(set(decls)) == 3 and "v1" not in decls, src
    loops = re.findall(r"for \(int64_t (\w+) =", src)
    assert len(loops) == 3 and len(set(loops[:2])) == 2, src  # nested: two names
    c = cexpr.prelude() + lib.text() + src + \
        "void run(const float *a, float *b) { dup_names(a, b); }\n"
    so = build.load_library(c, name="test_dup_names")
    a = np.arange(12, dtype=np.float32)
    b = np.zeros(3, np.float32)
    so.run(a.ctypes.data_as(ctypes.c_void_p), b.ctypes.data_as(ctypes.c_void_p))
    np.testing.assert_array_equal(b, 2 * a.reshape(3, 4).sum(axis=1))


def test_cond_sides_share_what_both_compute() -> None:
    """What both sides of a cond compute (a loaded value and its square, under nested conds)
    prints once, before the branch (`kernel_ir/conds.py`); the values stay right."""
    import ctypes

    from hlofuse.backends.cpu import cexpr
    from hlofuse.backends.cpu.cprint import KernelPrinter
    from hlofuse.backends.cpu.cvec import VecLib
    from hlofuse.backends.kernel_ir import ir
    from hlofuse.ir.dtypes import F32, PRED, S64
    from hlofuse.ir.opcodes import Opcode

    g = ir.Graph()
    inp = ir.Buffer("in0", F32, 8, "in", 0)
    out = ir.Buffer("out0", F32, 8, "out", 0)
    i = ir.Var("i0", 0, 8)
    mul = ir.ScalarOp(Opcode.MULTIPLY, F32)
    add = ir.ScalarOp(Opcode.ADD, F32)
    lt = ir.ScalarOp(Opcode.COMPARE, PRED, (("direction", "LT"),))
    x = g.load(inp, ir.affine(i))
    sq = g.alu(mul, x, x)
    small = g.alu(lt, g.index(ir.affine(i)), g.const(3, S64))
    tiny = g.alu(lt, g.index(ir.affine(i)), g.const(1, S64))
    inner = g.cond(tiny, g.alu(add, sq, g.const(1.0, F32)), g.alu(add, sq, sq))
    value = g.cond(small, inner, g.alu(mul, sq, g.const(3.0, F32)))
    k = ir.Kernel("shared_sides", [inp], [out], [ir.Loop(i, 0, 8, [ir.Store(out, ir.affine(i),
                                                                            value)])], g)
    lib = VecLib()
    src = KernelPrinter(k, lib).print()
    assert src.count("in0[i0]") == 1 and src.count("* (v") == 1, src
    c = cexpr.prelude() + lib.text() + src + \
        "void run(const float *a, float *b) { shared_sides(a, b); }\n"
    so = build.load_library(c, name="test_shared_sides")
    a = np.arange(8, dtype=np.float32) - 2
    b = np.zeros(8, np.float32)
    so.run(a.ctypes.data_as(ctypes.c_void_p), b.ctypes.data_as(ctypes.c_void_p))
    s = a * a
    np.testing.assert_array_equal(b, np.where(np.arange(8) < 3,
                                              np.where(np.arange(8) < 1, s + 1, s + s), s * 3))
