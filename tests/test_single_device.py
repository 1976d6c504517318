"""Collectives, async wrappers, copies, batch norm and the other ops of today's HLO on one device:
the interpreter's values (against numpy), the cpu backend (through the `single-device` lowering)
against the interpreter, and clear refusals for what one device cannot run."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.api import compile as hf_compile
from hlofuse.backends import cpu, interpreter
from hlofuse.backends.cpu.cexpr import UnsupportedOpError
from hlofuse.errors import InterpreterError
from hlofuse.passes.single_device import SingleDevice
from hlofuse.text import parse

needs_cc = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

ADD = """
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
"""

COLLECTIVES = """HloModule collectives
""" + ADD + """
negate_wrapped {
  p = f32[2,3] parameter(0)
  ROOT n = f32[2,3] negate(p)
}

ENTRY e {
  a = f32[2,3] parameter(0)
  b = s32[4] parameter(1)
  ar = (f32[2,3], s32[4]) all-reduce(a, b), replica_groups={{0}}, to_apply=add
  ar0 = f32[2,3] get-tuple-element(ar), index=0
  ag = f32[2,3] all-gather(ar0), replica_groups={{0}}, dimensions={1}
  rs = f32[2,3] reduce-scatter(ag), replica_groups={{0}}, dimensions={0}, to_apply=add
  a2a = (f32[2,3], s32[4]) all-to-all(rs, b), replica_groups={{0}}
  x = f32[2,3] get-tuple-element(a2a), index=0
  same = f32[2,3] collective-permute(x), source_target_pairs={{0,0}}
  none = f32[2,3] collective-permute(x), source_target_pairs={{0,1},{1,0}}
  cps = (f32[2,3], f32[2,3], u32[], u32[]) collective-permute-start(same),
      source_target_pairs={{0,0}}
  cpd = f32[2,3] collective-permute-done(cps)
  ars = f32[2,3] all-reduce-start(cpd), replica_groups={{0}}, to_apply=add
  ard = f32[2,3] all-reduce-done(ars)
  cs = (f32[2,3], f32[2,3], u32[]) copy-start(ard)
  cd = f32[2,3] copy-done(cs)
  as = ((f32[2,3]), f32[2,3], s32[]) async-start(cd), calls=negate_wrapped
  ad = f32[2,3] async-done(as)
  size = s32[] get-dimension-size(a), dimensions={1}
  ROOT t = (f32[2,3], f32[2,3], s32[4], s32[]) tuple(ad, none, b, size)
}
"""

BATCH_NORM = """HloModule bn
ENTRY e {
  x = f32[4,3,5] parameter(0)
  scale = f32[3] parameter(1)
  offset = f32[3] parameter(2)
  dy = f32[4,3,5] parameter(3)
  tr = (f32[4,3,5], f32[3], f32[3]) batch-norm-training(x, scale, offset), epsilon=0.001,
      feature_index=1
  mean = f32[3] get-tuple-element(tr), index=1
  var = f32[3] get-tuple-element(tr), index=2
  inf = f32[4,3,5] batch-norm-inference(x, scale, offset, mean, var), epsilon=0.001, feature_index=1
  gr = (f32[4,3,5], f32[3], f32[3]) batch-norm-grad(x, scale, mean, var, dy), epsilon=0.001,
      feature_index=1
  y = f32[4,3,5] get-tuple-element(tr), index=0
  dx = f32[4,3,5] get-tuple-element(gr), index=0
  ds = f32[3] get-tuple-element(gr), index=1
  do = f32[3] get-tuple-element(gr), index=2
  ROOT t = (f32[4,3,5], f32[3], f32[3], f32[4,3,5], f32[4,3,5], f32[3], f32[3]) tuple(y, mean,
      var, inf, dx, ds, do)
}
"""


def _args(seed: int, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def test_collectives_on_one_device_interpreter() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, -2, 3, -4], np.int32)
    out = interpreter.run(parse(COLLECTIVES), a, b)
    np.testing.assert_array_equal(out[0], -a)  # every collective an identity, then negate
    np.testing.assert_array_equal(out[1], np.zeros((2, 3), np.float32))  # nobody sends to 0
    np.testing.assert_array_equal(out[2], b)
    assert int(out[3]) == 3


@needs_cc
def test_collectives_on_one_device_cpu() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, -2, 3, -4], np.int32)
    want = interpreter.run(parse(COLLECTIVES), a, b)
    got = hf_compile(COLLECTIVES, pipeline="xla", backend="cpu")(a, b)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_single_device_pass_removes_collectives() -> None:
    module = parse(COLLECTIVES)
    assert SingleDevice().run(module)
    left = {i.opcode.value for i in module.all_instructions()}
    assert not left & {"all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                       "collective-permute", "copy-start", "async-start", "get-dimension-size"}
    a, b = np.ones((2, 3), np.float32), np.zeros(4, np.int32)
    out = interpreter.run(module, a, b)
    np.testing.assert_array_equal(out[0], -a)


def _bn_reference(x: np.ndarray, scale: np.ndarray, offset: np.ndarray, dy: np.ndarray,
                  eps: float) -> list[np.ndarray]:
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    axes = (0, 2)
    mean = x64.mean(axis=axes)
    var = x64.var(axis=axes)

    def col(v: np.ndarray) -> np.ndarray:  # a per-feature vector along dimension 1
        return v[None, :, None]

    norm = (x64 - col(mean)) / np.sqrt(col(var) + eps)
    y = norm * col(scale) + col(offset)
    n = x.size / x.shape[1]
    d_offset = dy64.sum(axis=axes)
    d_scale = (dy64 * norm).sum(axis=axes)
    dx = col(scale) / np.sqrt(col(var) + eps) * (
        dy64 - col(d_offset) / n - norm * col(d_scale) / n)
    return [y, mean, var, y, dx, d_scale, d_offset]


def test_batch_norm_interpreter_matches_reference() -> None:
    x, scale, offset, dy = _args(3, (4, 3, 5), (3,), (3,), (4, 3, 5))
    out = interpreter.run(parse(BATCH_NORM), x, scale, offset, dy)
    for got, want in zip(out, _bn_reference(x, scale, offset, dy, 0.001), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@needs_cc
def test_batch_norm_cpu_matches_interpreter() -> None:
    args = _args(4, (4, 3, 5), (3,), (3,), (4, 3, 5))
    want = interpreter.run(parse(BATCH_NORM), *args)
    got = hf_compile(BATCH_NORM, pipeline="xla", backend="cpu")(*args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


GROUP_OF_TWO = """HloModule g
ENTRY e {
  a = f32[2,3] parameter(0)
  ROOT g = f32[2,6] all-gather(a), replica_groups={{0,1}}, dimensions={1}
}
"""


def test_group_of_two_refused_interpreter() -> None:
    with pytest.raises(InterpreterError, match=r"all-gather.*instruction g.*group of several"):
        interpreter.run(parse(GROUP_OF_TWO), np.ones((2, 3), np.float32))


@needs_cc
def test_group_of_two_refused_cpu() -> None:
    with pytest.raises(UnsupportedOpError, match=r"instruction g .*all-gather.*several devices"):
        hf_compile(GROUP_OF_TWO, pipeline="xla", backend="cpu")


@needs_cc
@pytest.mark.parametrize("text, name", [
    ("c = c64[4] parameter(0)\n  ROOT f = c64[4] fft(c), fft_type=FFT, fft_length={4}", "f"),
    ("x = f32[4,3] parameter(0)\n  y = f32[2,3,5] parameter(1)\n  s = s32[2] parameter(2)\n"
     "  ROOT r = f32[4,5] ragged-dot(x, y, s), lhs_contracting_dims={1}, "
     "rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}", "r"),
])
def test_cpu_refuses_with_the_instruction_named(text: str, name: str) -> None:
    module = parse(f"HloModule m\nENTRY e {{\n  {text}\n}}\n")
    with pytest.raises(UnsupportedOpError, match=rf"instruction {name} "):
        cpu.generate(module)


def test_fft_matches_numpy() -> None:
    text = """HloModule f
ENTRY e {
  x = c64[2,8] parameter(0)
  f = c64[2,8] fft(x), fft_type=FFT, fft_length={8}
  i = c64[2,8] fft(f), fft_type=IFFT, fft_length={8}
  r = f32[2,8] real(x)
  rf = c64[2,5] fft(r), fft_type=RFFT, fft_length={8}
  ir = f32[2,8] fft(rf), fft_type=IRFFT, fft_length={8}
  ROOT t = (c64[2,8], c64[2,8], c64[2,5], f32[2,8]) tuple(f, i, rf, ir)
}
"""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 8)) + 1j * rng.standard_normal((2, 8))).astype(np.complex64)
    f, i, rf, ir = interpreter.run(parse(text), x)
    np.testing.assert_allclose(f, np.fft.fft(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(i, x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rf, np.fft.rfft(x.real), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ir, x.real, rtol=1e-5, atol=1e-5)


def test_ragged_dot_groups_rows() -> None:
    text = """HloModule r
ENTRY e {
  x = f32[5,3] parameter(0)
  y = f32[2,3,4] parameter(1)
  s = s32[2] parameter(2)
  ROOT r = f32[5,4] ragged-dot(x, y, s), lhs_contracting_dims={1}, rhs_contracting_dims={1},
      lhs_ragged_dims={0}, rhs_group_dims={0}
}
"""
    x, y = _args(5, (5, 3), (2, 3, 4))
    sizes = np.array([2, 2], np.int32)  # rows 0-1 use y[0], rows 2-3 y[1], row 4 no group
    (out,) = interpreter.run(parse(text), x, y, sizes)
    want = np.concatenate([x[:2] @ y[0], x[2:4] @ y[1], np.zeros((1, 4), np.float32)])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
