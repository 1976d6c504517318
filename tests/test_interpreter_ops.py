"""Unit tests of the reference interpreter: data movement, reductions and dot, convolution,
control flow, gather/scatter and sort, on small HLO-text modules with hand-checked values."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.errors import InterpreterError
from interpreter_helpers import f32, i32, run, unary

# ----- data movement ----------------------------------------------------------------------


def test_broadcast_maps_operand_dims_including_transposition() -> None:
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    r = unary("broadcast", "s32[2,3]", "s32[3,4,2]", x, "dimensions={2,0}")
    assert r.shape == (3, 4, 2)
    assert np.array_equal(r[:, 1, :], x.T)
    s = unary("broadcast", "s32[]", "s32[2,2]", np.array(7, np.int32), "dimensions={}")
    assert s.tolist() == [[7, 7], [7, 7]]


def test_reshape_transpose_reverse_slice() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert np.array_equal(unary("reshape", "f32[3,4]", "f32[2,6]", x), x.reshape(2, 6))
    assert np.array_equal(unary("transpose", "f32[3,4]", "f32[4,3]", x, "dimensions={1,0}"), x.T)
    assert np.array_equal(unary("reverse", "f32[3,4]", "f32[3,4]", x, "dimensions={0,1}"),
                          x[::-1, ::-1])
    sl = unary("slice", "f32[3,4]", "f32[2,2]", x, "slice={[0:3:2], [1:4:2]}")
    assert sl.tolist() == [[1, 3], [9, 11]]


def test_bitcast_is_reshape_with_default_layouts_only() -> None:
    x = np.arange(6, dtype=np.int32)
    assert unary("bitcast", "s32[6]{0}", "s32[2,3]{1,0}", x).tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(InterpreterError, match=r"bitcast.*instruction r in e.*layout"):
        unary("bitcast", "s32[6]{0}", "s32[2,3]{0,1}", x)
    b = np.array([[1, 0], [0, 1], [255, 255]], np.uint8)
    assert unary("bitcast", "u8[3,2]", "u16[3]", b).tolist() == [1, 256, 65535]


def test_dynamic_slice_and_update_clamp_start_indices() -> None:
    text = """
ENTRY e {
  x = s32[5] parameter(0)
  i = s32[] parameter(1)
  ds = s32[2] dynamic-slice(x, i), dynamic_slice_sizes={2}
  u = s32[2] constant({-1, -2})
  dus = s32[5] dynamic-update-slice(x, u, i)
  ROOT t = (s32[2], s32[5]) tuple(ds, dus)
}
"""
    x = i32(0, 1, 2, 3, 4)
    for start, ds, dus in [
        (10, [3, 4], [0, 1, 2, -1, -2]),
        (-3, [0, 1], [-1, -2, 2, 3, 4]),
        (1, [1, 2], [0, -1, -2, 3, 4]),
    ]:
        got = run(text, x, np.array(start, np.int32))
        assert got[0].tolist() == ds and got[1].tolist() == dus


def test_pad_with_negative_and_interior_padding() -> None:
    text = """
ENTRY e {
  x = s32[3] parameter(0)
  z = s32[] constant(0)
  ROOT p = s32[6] pad(x, z), padding=-1_2_1
}
"""
    # interior: [1,0,2,0,3]; crop 1 low -> [0,2,0,3]; 2 high -> [0,2,0,3,0,0]
    assert run(text, i32(1, 2, 3))[0].tolist() == [0, 2, 0, 3, 0, 0]


def test_concatenate_and_iota() -> None:
    text = """
ENTRY e {
  a = s32[2] parameter(0)
  b = s32[1] parameter(1)
  c = s32[3] concatenate(a, b), dimensions={0}
  io = s32[2,3] iota(), iota_dimension=1
  f = f32[3] iota(), iota_dimension=0
  ROOT t = (s32[3], s32[2,3], f32[3]) tuple(c, io, f)
}
"""
    c, io, f = run(text, i32(1, 2), i32(3))
    assert c.tolist() == [1, 2, 3]
    assert io.tolist() == [[0, 1, 2], [0, 1, 2]]
    assert f.tolist() == [0.0, 1.0, 2.0]


# ----- reductions, dot --------------------------------------------------------------------

ADD_F32 = """
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
"""

ARGMAX = """
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  eq = pred[] compare(v0, v1), direction=EQ
  lt = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(eq, lt)
  take0 = pred[] or(gt, tie)
  v = f32[] select(take0, v0, v1)
  i = s32[] select(take0, i0, i1)
  ROOT r = (f32[], s32[]) tuple(v, i)
}
"""


def test_reduce_sum_with_init_and_empty_dimension() -> None:
    text = ADD_F32 + """
ENTRY e {
  x = f32[2,3] parameter(0)
  one = f32[] constant(1)
  ROOT r = f32[2] reduce(x, one), dimensions={1}, to_apply=add
}
"""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert run(text, x)[0].tolist() == [4.0, 13.0]
    empty = text.replace("f32[2,3]", "f32[2,0]")
    assert run(empty, np.zeros((2, 0), np.float32))[0].tolist() == [1.0, 1.0]


def test_variadic_reduce_argmax_picks_first_maximum() -> None:
    text = ARGMAX + """
ENTRY e {
  x = f32[2,5] parameter(0)
  io = s32[2,5] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[2], s32[2]) reduce(x, io, ninf, zero), dimensions={1}, to_apply=argmax
}
"""
    x = f32(1, 7, 3, 7, 0, -1, -2, -3, -4, -5).reshape(2, 5)
    v, i = run(text, x)
    assert v.tolist() == [7.0, -1.0] and i.tolist() == [1, 0]


def test_reduce_window_sum_with_stride_and_padding() -> None:
    text = ADD_F32 + """
ENTRY e {
  x = f32[5] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[3] reduce-window(x, z), window={size=3 stride=2 pad=1_1}, to_apply=add
}
"""
    # padded [0,1,2,3,4,5,0]; windows at 0,2,4: 0+1+2, 2+3+4, 4+5+0
    assert run(text, f32(1, 2, 3, 4, 5))[0].tolist() == [3.0, 9.0, 9.0]


def test_dot_general_batch_and_contracting_dims() -> None:
    text = """
ENTRY e {
  a = f32[2,3,4] parameter(0)
  b = f32[2,4,5] parameter(1)
  ROOT d = f32[2,3,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2},
      rhs_batch_dims={0}, rhs_contracting_dims={1}
}
"""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((2, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(run(text, a, b)[0], a @ b, rtol=1e-6)
    ints = """
ENTRY e {
  a = s8[2,2] parameter(0)
  b = s8[2,2] parameter(1)
  ROOT d = s32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    x = np.array([[127, 127], [-128, 1]], np.int8)
    assert run(ints, x, x)[0].tolist() == [[127 * 127 - 128 * 127, 127 * 127 + 127],
                                           [-128 * 127 - 128, -128 * 127 + 1]]


def test_convolution_1d_against_numpy() -> None:
    text = """
ENTRY e {
  x = f32[1,6,2] parameter(0)
  k = f32[3,2,4] parameter(1)
  ROOT c = f32[1,2,4] convolution(x, k), window={size=3 stride=2}, dim_labels=b0f_0io->b0f
}
"""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 6, 2)).astype(np.float32)
    k = rng.standard_normal((3, 2, 4)).astype(np.float32)
    want = np.stack([np.einsum("wc,wco->o", x[0, s : s + 3], k) for s in (0, 2)])[None]
    np.testing.assert_allclose(run(text, x, k)[0], want, rtol=1e-5)


# ----- control flow -----------------------------------------------------------------------


def test_while_call_and_fusion() -> None:
    text = """
cond {
  s = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}

double {
  x = f32[] parameter(0)
  ROOT d = f32[] add(x, x)
}

fused {
  a = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT b = s32[] add(a, one)
}

body {
  s = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[] get-tuple-element(s), index=1
  i1 = s32[] fusion(i), kind=kLoop, calls=fused
  x2 = f32[] call(x), to_apply=double
  ROOT t = (s32[], f32[]) tuple(i1, x2)
}

ENTRY e {
  x = f32[] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[]) tuple(z, x)
  ROOT w = (s32[], f32[]) while(init), condition=cond, body=body
}
"""
    i, x = run(text, np.array(1.5, np.float32))
    assert int(i) == 5 and float(x) == 48.0


def test_conditional_pred_and_index_with_out_of_range_index() -> None:
    branches = """
b0 {
  x = f32[] parameter(0)
  ROOT r = f32[] negate(x)
}

b1 {
  x = f32[] parameter(0)
  ROOT r = f32[] add(x, x)
}

b2 {
  x = f32[] parameter(0)
  ROOT r = f32[] multiply(x, x)
}
"""
    indexed = branches + """
ENTRY e {
  i = s32[] parameter(0)
  x = f32[] parameter(1)
  ROOT c = f32[] conditional(i, x, x, x), branch_computations={b0, b1, b2}
}
"""
    x = np.array(3.0, np.float32)
    got = [float(run(indexed, np.array(i, np.int32), x)[0]) for i in (0, 1, 2, 7, -1)]
    assert got == [-3.0, 6.0, 9.0, 9.0, 9.0]
    pred = branches + """
ENTRY e {
  p = pred[] parameter(0)
  x = f32[] parameter(1)
  ROOT c = f32[] conditional(p, x, x), true_computation=b1, false_computation=b0
}
"""
    assert float(run(pred, np.array(True), x)[0]) == 6.0
    assert float(run(pred, np.array(False), x)[0]) == -3.0


def test_map_applies_scalar_computation() -> None:
    text = ADD_F32 + """
ENTRY e {
  a = f32[3] parameter(0)
  b = f32[3] parameter(1)
  ROOT m = f32[3] map(a, b), dimensions={0}, to_apply=add
}
"""
    assert run(text, f32(1, 2, 3), f32(10, 20, 30))[0].tolist() == [11, 22, 33]


def test_tokens_barrier_and_ids() -> None:
    text = """
ENTRY e {
  x = f32[2] parameter(0)
  tok = token[] after-all()
  d = f32[2] add-dependency(x, tok)
  b = f32[2] opt-barrier(d)
  pid = u32[] partition-id()
  ROOT t = (f32[2], u32[]) tuple(b, pid)
}
"""
    x, pid = run(text, f32(1, 2))
    assert x.tolist() == [1, 2] and int(pid) == 0


# ----- gather, scatter, sort --------------------------------------------------------------


def test_gather_rows_with_clamped_start_indices() -> None:
    text = """
ENTRY e {
  x = f32[4,2] parameter(0)
  i = s32[3,1] parameter(1)
  ROOT g = f32[3,2] gather(x, i), offset_dims={1}, collapsed_slice_dims={0},
      start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}
}
"""
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    got = run(text, x, np.array([[2], [9], [-5]], np.int32))[0]
    assert got.tolist() == [[4, 5], [6, 7], [0, 1]]


SCATTER = """
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

second {
  x = f32[] parameter(0)
  ROOT y = f32[] parameter(1)
}

ENTRY e {
  x = f32[5] parameter(0)
  i = s32[4,1] parameter(1)
  u = f32[4] parameter(2)
  ROOT s = f32[5] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=COMBINER
}
"""


def test_scatter_add_combines_duplicates_and_skips_out_of_bounds() -> None:
    x = np.zeros(5, np.float32)
    idx = np.array([[1], [1], [7], [-1]], np.int32)
    got = run(SCATTER.replace("COMBINER", "add"), x, idx, f32(1, 2, 4, 8))[0]
    assert got.tolist() == [0, 3, 0, 0, 0]
    got = run(SCATTER.replace("COMBINER", "second"), x, np.array([[0], [2], [2], [4]], np.int32),
              f32(1, 2, 3, 4))[0]
    assert got.tolist() == [1, 0, 3, 0, 4]


def test_scatter_window_partly_out_of_bounds_is_skipped() -> None:
    text = """
add {
  x = s32[] parameter(0)
  y = s32[] parameter(1)
  ROOT s = s32[] add(x, y)
}

ENTRY e {
  x = s32[5] parameter(0)
  i = s32[2] parameter(1)
  u = s32[2,2] parameter(2)
  ROOT s = s32[5] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
"""
    got = run(text, np.zeros(5, np.int32), i32(1, 4), np.array([[1, 2], [3, 4]], np.int32))[0]
    assert got.tolist() == [0, 1, 2, 0, 0]


def test_sort_variadic_stable_with_key_comparator() -> None:
    text = """
cmp {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] parameter(2)
  d = f32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}

ENTRY e {
  k = s32[6] parameter(0)
  v = f32[6] parameter(1)
  ROOT s = (s32[6], f32[6]) sort(k, v), dimensions={0}, is_stable=true, to_apply=cmp
}
"""
    k, v = run(text, i32(3, 1, 3, 0, 1, 3), f32(0, 1, 2, 3, 4, 5))
    assert k.tolist() == [0, 1, 1, 3, 3, 3] and v.tolist() == [3, 1, 4, 0, 2, 5]
    k, v = run(text.replace("direction=LT", "direction=GT"), i32(3, 1, 3, 0, 1, 3),
               f32(0, 1, 2, 3, 4, 5))
    assert k.tolist() == [3, 3, 3, 1, 1, 0] and v.tolist() == [0, 2, 5, 1, 4, 3]


def test_sort_lexicographic_comparator_uses_network() -> None:
    text = """
cmp {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  lt0 = pred[] compare(a, b), direction=LT
  eq0 = pred[] compare(a, b), direction=EQ
  gt1 = pred[] compare(c, d), direction=GT
  second = pred[] and(eq0, gt1)
  ROOT r = pred[] or(lt0, second)
}

ENTRY e {
  k = s32[3,7] parameter(0)
  v = s32[3,7] parameter(1)
  ROOT s = (s32[3,7], s32[3,7]) sort(k, v), dimensions={1}, is_stable=true, to_apply=cmp
}
"""
    rng = np.random.default_rng(3)
    k = rng.integers(0, 3, (3, 7)).astype(np.int32)
    v = rng.integers(0, 4, (3, 7)).astype(np.int32)
    sk, sv = run(text, k, v)
    for r in range(3):
        order = sorted(range(7), key=lambda j, r=r: (k[r, j], -v[r, j], j))
        assert sk[r].tolist() == k[r, order].tolist() and sv[r].tolist() == v[r, order].tolist()


# ----- linear algebra ---------------------------------------------------------------------


def test_cholesky_reads_one_triangle() -> None:
    rng = np.random.default_rng(5)
    m = rng.standard_normal((2, 4, 4))
    spd = (m @ np.swapaxes(m, -1, -2) + 4 * np.eye(4)).astype(np.float32)
    junk = spd.copy()
    junk[:, 0, 3] = 99.0  # upper triangle must be ignored when lower=true
    lo = unary("cholesky", "f32[2,4,4]", "f32[2,4,4]", junk, "lower=true")
    np.testing.assert_allclose(lo @ np.swapaxes(lo, -1, -2), spd, rtol=1e-5, atol=1e-5)
    assert np.all(np.triu(lo, 1) == 0)
    up = unary("cholesky", "f32[2,4,4]", "f32[2,4,4]", spd, "lower=false")
    np.testing.assert_allclose(np.swapaxes(up, -1, -2) @ up, spd, rtol=1e-5, atol=1e-5)


def test_triangular_solve_sides_and_transposes() -> None:
    rng = np.random.default_rng(6)
    a = (rng.standard_normal((3, 3)) + 3 * np.eye(3)).astype(np.float32)
    b = rng.standard_normal((3, 2)).astype(np.float32)
    text = """
ENTRY e {
  a = f32[3,3] parameter(0)
  b = f32[3,2] parameter(1)
  ROOT x = f32[3,2] triangular-solve(a, b), left_side=true, lower=true, transpose_a=TRANSPOSE
}
"""
    x = run(text, a, b)[0]
    np.testing.assert_allclose(np.tril(a).T @ x, b, rtol=1e-4, atol=1e-5)
    right = """
ENTRY e {
  a = f32[3,3] parameter(0)
  b = f32[2,3] parameter(1)
  ROOT x = f32[2,3] triangular-solve(a, b), left_side=false, lower=false, unit_diagonal=true,
      transpose_a=NO_TRANSPOSE
}
"""
    x = run(right, a, b.T.copy())[0]
    u = np.triu(a, 1) + np.eye(3, dtype=np.float32)
    np.testing.assert_allclose(x @ u, b.T, rtol=1e-4, atol=1e-5)


def test_variadic_reducer_calling_a_fusion_runs_vectorised() -> None:
    text = """
f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ge = pred[] compare(a, b), direction=GE
  v = f32[] select(ge, a, b)
  eq = pred[] compare(a, b), direction=EQ
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  m = s32[] minimum(i, j)
  k = s32[] select(ge, i, j)
  r = s32[] select(eq, m, k)
  ROOT t = (f32[], s32[]) tuple(v, r)
}

minmax {
  a = f32[] parameter(0)
  i = s32[] parameter(1)
  b = f32[] parameter(2)
  j = s32[] parameter(3)
  ROOT t = (f32[], s32[]) fusion(a, b, i, j), kind=kLoop, calls=f
}

ENTRY e {
  x = f32[300,7] parameter(0)
  io = s32[300,7] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[300], s32[300]) reduce(x, io, ninf, zero), dimensions={1}, to_apply=minmax
}
"""
    x = np.random.default_rng(7).integers(0, 4, (300, 7)).astype(np.float32)
    v, i = run(text, x)
    assert np.array_equal(v, x.max(axis=1)) and np.array_equal(i, x.argmax(axis=1))


def test_gather_index_vector_dim_first() -> None:
    text = """
ENTRY e {
  x = f32[4,5] parameter(0)
  i = s32[2,3] parameter(1)
  ROOT g = f32[3] gather(x, i), offset_dims={}, collapsed_slice_dims={0,1},
      start_index_map={1,0}, index_vector_dim=0, slice_sizes={1,1}
}
"""
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    idx = np.array([[4, 0, 2], [3, 1, 0]], np.int32)  # column j = (col, row) of element j
    assert run(text, x, idx)[0].tolist() == [x[3, 4], x[1, 0], x[0, 2]]


def test_erf_of_a_scalar_is_an_array() -> None:
    """erf goes through Python's math.erf per element; of a 0-d operand (a scalar constant
    being folded, as flax/optax programs have) that gives a float, not an array."""
    r = unary("erf", "f32[]", "f32[]", np.array(0.5, np.float32))
    assert r.shape == () and r.dtype == np.float32
    assert abs(float(r) - 0.5204999) < 1e-6
