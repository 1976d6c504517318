"""dot-strength-reduction (passes/simplify/dot_strength.py): dots with a vector operand, and
batches of tiny matrix products, become a multiply and a sum; other dots stay; values hold
(up to the summation order) on the interpreter and the cpu backend."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.backends import interpreter
from pass_testing import all_opcodes, optimize

DOTS = {
    # (operand shapes and dot dims, result) -> rewritten?
    "batched_matvec": ("f32[64,2,3]", "f32[64,3]", "lhs_batch_dims={0}, lhs_contracting_dims={2},"
                       " rhs_batch_dims={0}, rhs_contracting_dims={1}", "f32[64,2]", True),
    "batched_vecmat": ("f32[64,3]", "f32[64,3,2]", "lhs_batch_dims={0}, lhs_contracting_dims={1},"
                       " rhs_batch_dims={0}, rhs_contracting_dims={1}", "f32[64,2]", True),
    "batched_dot": ("f32[64,5]", "f32[64,5]", "lhs_batch_dims={0}, lhs_contracting_dims={1}, "
                    "rhs_batch_dims={0}, rhs_contracting_dims={1}", "f32[64]", True),
    "big_gemv": ("f32[300,200]", "f32[200]", "lhs_contracting_dims={1}, "
                 "rhs_contracting_dims={0}", "f32[300]", True),
    "tiny_batched_matmul": ("f32[64,2,2]", "f32[64,2,2]", "lhs_batch_dims={0}, "
                            "lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                            "rhs_contracting_dims={1}", "f32[64,2,2]", True),
    "two_batch_dims_transposed": ("f32[2,64,3,3]", "f32[64,2,3,3]", "lhs_batch_dims={1,0}, "
                                  "lhs_contracting_dims={3}, rhs_batch_dims={0,1}, "
                                  "rhs_contracting_dims={2}", "f32[64,2,3,3]", True),
    "int_vector": ("s32[16,7]", "s32[7]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                   "s32[16]", True),
    "bf16_in_f32_out": ("bf16[32,4]", "bf16[4]", "lhs_contracting_dims={1}, "
                        "rhs_contracting_dims={0}", "f32[32]", True),
    "matmul_stays": ("f32[32,16]", "f32[16,8]", "lhs_contracting_dims={1}, "
                     "rhs_contracting_dims={0}", "f32[32,8]", False),
}


def _module(lhs: str, rhs: str, dims: str, out: str) -> str:
    return f"""HloModule m
ENTRY e {{
  a = {lhs} parameter(0)
  b = {rhs} parameter(1)
  ROOT d = {out} dot(a, b), {dims}
}}
"""


def _arg(shape: str, rng: np.random.Generator) -> np.ndarray:
    dtype, dims = shape.split("[")
    dims_t = tuple(int(d) for d in dims.rstrip("]").split(",") if d)
    if dtype == "s32":
        return rng.integers(-50, 50, dims_t).astype(np.int32)
    import ml_dtypes

    np_dtype = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}[dtype]
    return rng.uniform(-1, 1, dims_t).astype(np_dtype)


@pytest.mark.parametrize("case", sorted(DOTS))
def test_rewrite_keeps_values(case: str) -> None:
    lhs, rhs, dims, out, rewritten = DOTS[case]
    text = _module(lhs, rhs, dims, out)
    before, after, _ = optimize(text, "dot-strength-reduction")
    ops = all_opcodes(after)
    assert (ops["dot"] == 0) == rewritten, ops
    if rewritten:
        assert ops["reduce"] == 1 and ops["multiply"] == 1
    rng = np.random.default_rng(len(case))
    args = [_arg(lhs, rng), _arg(rhs, rng)]
    want = interpreter.run(before, *args)[0]
    got = interpreter.run(after, *args)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "i":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=1e-5, atol=1e-5)


def test_small_dot_limit_is_a_setting() -> None:
    lhs, rhs, dims, out, _ = DOTS["tiny_batched_matmul"]
    _, after, _ = optimize(_module(lhs, rhs, dims, out),
                           "dot-strength-reduction{small_dot_limit=4}")
    assert all_opcodes(after)["dot"] == 1  # 2 x 2 x 2 = 8 multiply-adds per batch element


def test_cpu_backend_matches_after_every_pipeline() -> None:
    """Under `xla` and `hlofuse` the rewritten dots fuse with their neighbours on the cpu
    backend (no library call left for a batch of 2x2 products); `none`, the eager baseline,
    keeps them dots. Every pipeline matches the interpreter."""
    pytest.importorskip("hlofuse.backends.cpu")
    from hlofuse import compile as hf_compile

    text = """HloModule m
ENTRY e {
  m = f32[256,2,2] parameter(0)
  v = f32[256,2] parameter(1)
  mm = f32[256,2,2] dot(m, m), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  mv = f32[256,2] dot(mm, v), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  ROOT t = f32[256,2] tanh(mv)
}
"""  # noqa: E501
    rng = np.random.default_rng(0)
    args = [rng.uniform(-1, 1, (256, 2, 2)).astype(np.float32),
            rng.uniform(-1, 1, (256, 2)).astype(np.float32)]
    from hlofuse.text import parse

    want = interpreter.run(parse(text), *args)[0]
    for pipeline in ("none", "xla", "hlofuse"):
        exe = hf_compile(text, pipeline=pipeline)
        dots = sum(i.opcode.value == "dot" for i in exe.module.all_instructions())
        assert dots == (2 if pipeline == "none" else 0), (pipeline, dots)
        np.testing.assert_allclose(exe(*args)[0], want, rtol=1e-5, atol=1e-6)
