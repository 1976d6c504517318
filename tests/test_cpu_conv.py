"""CPU backend convolutions (library/conv*.py) against the interpreter.

Every case is a one-instruction HLO module, all lowered into ONE C file (compiled once per test
module) with a harness per case, as in test_cpu_library.py. Each case names the routine it must
take (im2col + GEMM, the loop over all output features of grouped convolutions, or the direct
loop nest) and runs with the BLAS bound and with our own GEMM (pointers nulled). Float results
accumulate in float (double for f64) in a blocked order, so they match the interpreter's f64
sums within a tolerance that grows with the contraction length; integer results exactly.
Cases marked `chunk` are emitted with a tiny workspace per task (conv_gemm.CHUNK_ELEMS), so the
cut into many chunks (partial last chunk, every layout and both cuts) is exercised, and
`threads` > 1 cuts them into tasks on the runtime's pool.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import pytest

from hlofuse.backends import interpreter
from hlofuse.backends.cpu import build, cexpr, library, runtime
from hlofuse.backends.cpu.library import blas, conv_gemm
from hlofuse.backends.kernel_ir.lower.library import library_op
from hlofuse.errors import CompileError
from hlofuse.ir.shape import ArrayShape
from hlofuse.text import parse

NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
      "s32": np.int32, "s8": np.int8}


@dataclass
class Case:
    name: str
    hlo: str
    inputs: list[np.ndarray]
    route: str                      # "gemm", "grouped" or "direct"
    rtol: float
    atol: float
    threads: int = 1
    chunk: int | None = None        # conv_gemm.CHUNK_ELEMS while emitting
    module: object = field(default=None, repr=False)


def _out_size(n: int, k: int, stride: int, lo: int, hi: int, ld: int, rd: int) -> int:
    padded = (n - 1) * ld + 1 + lo + hi if n else lo + hi
    window = (k - 1) * rd + 1
    return max(0, (padded - window) // stride + 1) if padded >= window else 0


def conv(name: str, labels: str, n: int, c: int, o: int, spatial: list[int], kernel: list[int],
         *, stride: list[int] | None = None, pad: list[tuple[int, int]] | None = None,
         lhs_dilate: list[int] | None = None, rhs_dilate: list[int] | None = None,
         reversal: list[int] | None = None, fgc: int = 1, bgc: int = 1,
         types: tuple[str, str, str] = ("f32", "f32", "f32"), route: str = "gemm",
         threads: int = 1, chunk: int | None = None, seed: int = 0) -> Case:
    """A convolution of an input of batch n, c features and `spatial` extents with a kernel
    of `kernel` taps and o output features, laid out by `labels` (e.g. b01f_01io->b01f)."""
    nsp = len(spatial)
    stride = stride or [1] * nsp
    pad = pad or [(0, 0)] * nsp
    lhs_dilate = lhs_dilate or [1] * nsp
    rhs_dilate = rhs_dilate or [1] * nsp
    reversal = reversal or [0] * nsp
    outs = [_out_size(spatial[d], kernel[d], stride[d], *pad[d], lhs_dilate[d], rhs_dilate[d])
            for d in range(nsp)]
    lhs_l, rest = labels.split("_", 1)
    rhs_l, out_l = rest.split("->")

    def dims(lab: str, first: tuple[str, int], second: tuple[str, int], sp: list[int]
             ) -> list[int]:
        table = dict([first, second]) | {str(d): sp[d] for d in range(nsp)}
        return [table[ch] for ch in lab]

    ld = dims(lhs_l, ("b", n), ("f", c), spatial)
    rd = dims(rhs_l, ("o", o), ("i", c // fgc), kernel)
    od = dims(out_l, ("b", n // bgc), ("f", o), outs)
    x = lambda v: "x".join(map(str, v))  # noqa: E731
    window = f"size={x(kernel)}" if nsp else ""
    if nsp:
        if any(s != 1 for s in stride):
            window += f" stride={x(stride)}"
        if any(p != (0, 0) for p in pad):
            window += " pad=" + "x".join(f"{lo}_{hi}" for lo, hi in pad)
        if any(v != 1 for v in lhs_dilate):
            window += f" lhs_dilate={x(lhs_dilate)}"
        if any(v != 1 for v in rhs_dilate):
            window += f" rhs_dilate={x(rhs_dilate)}"
        if any(reversal):
            window += f" rhs_reversal={x(reversal)}"
    attrs = (f"window={{{window}}}, " if nsp else "") + f"dim_labels={labels}"
    if fgc > 1:
        attrs += f", feature_group_count={fgc}"
    if bgc > 1:
        attrs += f", batch_group_count={bgc}"
    lt, rt, ot = types
    hlo = f"""
ENTRY e {{
  a = {lt}{ld} parameter(0)
  b = {rt}{rd} parameter(1)
  ROOT c = {ot}{od} convolution(a, b), {attrs}
}}"""
    rng = np.random.default_rng(seed)

    def sample(shape: list[int], t: str) -> np.ndarray:
        if t.startswith("s"):
            return rng.integers(-5, 6, size=shape).astype(NP[t])
        return rng.uniform(-1, 1, size=shape).astype(NP[t])

    k = c // fgc * math.prod(kernel)  # products summed per result element
    if ot.startswith("s"):
        rtol = atol = 0.0
    elif "bf16" in types:
        rtol, atol = 1e-2, 1e-2
    elif "f16" in types:
        rtol, atol = 2e-3, 2e-3
    else:
        rtol, atol = 2e-5, 1e-5 * max(1.0, k / 256)
    return Case(name, hlo, [sample(ld, lt), sample(rd, rt)], route, rtol, atol, threads, chunk)


NHWC, INPUT_GRAD, WEIGHT_GRAD = "b01f_01io->b01f", "b01f_01oi->b01f", "f01b_i01o->01bf"
P1 = [(1, 1), (1, 1)]

CASES = [
    # the five convolutions of flax's MNIST CNN step, smaller batch
    conv("cnn_conv1", NHWC, 4, 1, 32, [28, 28], [3, 3], pad=P1),
    conv("cnn_conv2", NHWC, 4, 32, 64, [14, 14], [3, 3], pad=P1),
    conv("cnn_input_grad", INPUT_GRAD, 4, 64, 32, [14, 14], [3, 3], pad=P1),
    conv("cnn_weight_grad1", WEIGHT_GRAD, 1, 4, 32, [28, 28], [28, 28], pad=P1),
    conv("cnn_weight_grad2", WEIGHT_GRAD, 32, 4, 64, [14, 14], [14, 14], pad=P1),
    # ResNet's forms: 7x7 stride 2, strided 3x3 with asymmetric padding, 1x1 stride 2,
    # lhs-dilated input gradients, rhs-dilated weight gradients (negative padding too)
    conv("resnet_7x7s2", NHWC, 2, 3, 16, [16, 16], [7, 7], stride=[2, 2], pad=[(3, 3)] * 2),
    conv("resnet_3x3s2", NHWC, 2, 16, 32, [8, 8], [3, 3], stride=[2, 2], pad=[(0, 1)] * 2),
    conv("resnet_1x1s2", NHWC, 2, 32, 64, [4, 4], [1, 1], stride=[2, 2]),
    conv("resnet_input_grad_s2", INPUT_GRAD, 2, 32, 16, [4, 4], [3, 3], pad=[(2, 1)] * 2,
         lhs_dilate=[2, 2]),
    conv("resnet_input_grad_1x1", INPUT_GRAD, 2, 32, 16, [4, 4], [1, 1], pad=[(0, 1)] * 2,
         lhs_dilate=[2, 2]),
    conv("resnet_weight_grad_s2", WEIGHT_GRAD, 16, 2, 32, [8, 8], [4, 4], pad=[(0, 1)] * 2,
         rhs_dilate=[2, 2]),
    conv("resnet_weight_grad_neg_pad", WEIGHT_GRAD, 16, 2, 32, [8, 8], [4, 4],
         pad=[(0, -1)] * 2, rhs_dilate=[2, 2]),
    conv("resnet_weight_grad_7x7", WEIGHT_GRAD, 3, 2, 16, [16, 16], [8, 8], pad=[(3, 2)] * 2,
         rhs_dilate=[2, 2]),
    # base dilation: one convolution per output phase (some phases without taps)
    conv("phases_reversed", NHWC, 2, 3, 4, [5, 6], [3, 2], pad=[(2, 0), (1, 3)],
         lhs_dilate=[3, 2], reversal=[1, 0]),
    conv("phases_more_than_taps", INPUT_GRAD, 2, 4, 3, [4, 4], [2, 2], pad=[(1, 2), (0, 0)],
         lhs_dilate=[3, 3]),
    conv("phases_one_dim", "b0f_0io->b0f", 3, 4, 5, [7], [4], pad=[(3, 3)], lhs_dilate=[2]),
    conv("lhs_dilate_strided", NHWC, 2, 3, 4, [5, 5], [3, 3], pad=[(1, 1), (2, 0)],
         lhs_dilate=[2, 2], stride=[2, 1]),
    conv("phases_grouped", NHWC, 2, 8, 8, [4, 4], [3, 3], pad=[(2, 1)] * 2, lhs_dilate=[2, 2],
         fgc=8, route="grouped"),
    conv("one_position", NHWC, 3, 8, 8, [1, 1], [3, 3], pad=P1),
    # other layouts: NCHW (C through a workspace), OIHW kernel (W read transposed), the
    # kernel's feature pair split by a spatial dim, a result with features first
    conv("nchw", "bf01_oi01->bf01", 2, 5, 6, [7, 6], [3, 2], pad=[(1, 0), (0, 1)]),
    conv("nchw_dilated_reversed", "bf01_oi01->bf01", 1, 2, 3, [6, 5], [2, 3],
         pad=[(1, 0), (2, 1)], lhs_dilate=[2, 1], rhs_dilate=[1, 2], reversal=[1, 0]),
    conv("odd_layouts", "0bf1_i0o1->f01b", 3, 4, 5, [6, 7], [2, 3], stride=[1, 2],
         reversal=[0, 1]),
    conv("reversed_both", NHWC, 2, 3, 4, [6, 6], [3, 2], pad=[(2, 1), (0, 2)],
         reversal=[1, 1], rhs_dilate=[2, 1]),
    conv("negative_pad", NHWC, 2, 3, 4, [9, 8], [3, 3], pad=[(-1, 2), (2, -2)],
         stride=[2, 1]),
    conv("lhs_and_rhs_dilate", NHWC, 2, 3, 5, [5, 6], [3, 2], pad=[(1, 2), (0, 1)],
         lhs_dilate=[3, 2], rhs_dilate=[2, 3], stride=[2, 3]),
    # groups: few groups through per-group GEMMs, many through the grouped loop
    conv("feature_groups_2", NHWC, 2, 8, 6, [6, 6], [3, 3], fgc=2),
    conv("batch_groups_2", NHWC, 4, 3, 4, [5, 5], [2, 2], bgc=2),
    conv("depthwise", NHWC, 2, 16, 16, [9, 9], [3, 3], pad=P1, fgc=16, route="grouped"),
    conv("depthwise_multiplier", NHWC, 2, 8, 16, [7, 7], [3, 3], pad=P1, stride=[2, 2],
         fgc=8, route="grouped"),
    conv("depthwise_weight_grad", WEIGHT_GRAD, 8, 4, 8, [9, 9], [9, 9], pad=P1, bgc=8,
         route="grouped"),
    conv("depthwise_nchw_dilated", "bf01_oi01->bf01", 2, 6, 6, [7, 7], [3, 3],
         pad=[(2, 1), (1, 1)], lhs_dilate=[2, 1], rhs_dilate=[1, 2], reversal=[1, 0],
         fgc=6, route="grouped"),
    # 1-D, 3-D, no spatial dimension at all
    conv("conv_1d", "b0f_0io->b0f", 3, 4, 5, [20], [5], stride=[3], pad=[(2, 1)]),
    conv("conv_3d", "b012f_012io->b012f", 2, 3, 4, [5, 6, 4], [3, 2, 2],
         pad=[(1, 1), (0, 1), (1, 0)], stride=[1, 2, 1]),
    conv("conv_0d", "bf_io->bf", 5, 7, 3, [], []),
    # element types: f64, f16, bf16, mixed, integers (direct loop)
    conv("f64", NHWC, 2, 6, 5, [7, 7], [3, 3], pad=P1, types=("f64", "f64", "f64")),
    conv("f16", NHWC, 2, 6, 5, [7, 7], [3, 3], pad=P1, types=("f16", "f16", "f16")),
    conv("bf16", INPUT_GRAD, 2, 6, 5, [7, 7], [3, 3], pad=P1, types=("bf16", "bf16", "bf16")),
    conv("bf16_in_f32_out", WEIGHT_GRAD, 4, 3, 5, [6, 6], [6, 6], pad=P1,
         types=("bf16", "bf16", "f32")),
    conv("f16_depthwise", NHWC, 2, 8, 8, [5, 5], [3, 3], pad=P1, fgc=8,
         types=("f16", "f16", "f16"), route="grouped"),
    conv("s32", "b0f_0io->b0f", 2, 3, 2, [10], [3], pad=[(-1, 2)],
         types=("s32", "s32", "s32"), route="direct"),
    conv("s8_to_s32", NHWC, 2, 3, 4, [5, 5], [2, 2], types=("s8", "s8", "s32"),
         route="direct"),
    conv("s8_to_f32", NHWC, 2, 3, 4, [5, 5], [2, 2], types=("s8", "s8", "f32")),
    conv("empty_window", NHWC, 2, 3, 4, [2, 2], [3, 3], route="direct"),
    # workspaces cut into many chunks, and tasks on threads
    conv("chunks_mk", NHWC, 3, 5, 7, [9, 8], [3, 3], pad=P1, chunk=100),
    conv("chunks_km", NHWC, 3, 1, 7, [9, 8], [3, 3], pad=P1, chunk=50),
    conv("chunks_cut_k_mk", WEIGHT_GRAD, 5, 1, 6, [9, 9], [9, 9], pad=P1, chunk=40),
    conv("chunks_cut_k_km", WEIGHT_GRAD, 5, 4, 6, [7, 7], [7, 7], pad=P1, chunk=300),
    conv("chunks_nchw", "bf01_oi01->bf01", 3, 4, 5, [9, 8], [3, 3], pad=P1, chunk=70),
    conv("threads_forward", NHWC, 8, 32, 64, [14, 14], [3, 3], pad=P1, threads=3),
    conv("threads_input_grad", INPUT_GRAD, 8, 64, 32, [14, 14], [3, 3], pad=P1, threads=3),
    conv("threads_weight_grad", WEIGHT_GRAD, 16, 8, 32, [14, 14], [14, 14], pad=P1,
         threads=3),
    conv("threads_groups", NHWC, 8, 32, 32, [14, 14], [3, 3], pad=P1, fgc=2, threads=2),
    conv("threads_depthwise", NHWC, 8, 64, 64, [28, 28], [3, 3], pad=P1, fgc=64, threads=3,
         route="grouped"),
    conv("threads_chunks", NHWC, 4, 8, 16, [20, 20], [3, 3], pad=P1, chunk=500, threads=4),
]


def _harness(i: int, case: Case, names: set[str]) -> tuple[str, str]:
    module = parse(case.hlo)
    case.module = module
    instr = module.entry.root
    saved = conv_gemm.CHUNK_ELEMS
    if case.chunk is not None:
        conv_gemm.CHUNK_ELEMS = case.chunk
    try:
        defs, stmts = library.emit(library_op(instr), ["ins[0]", "ins[1]"], ["outs[0]"], names,
                                   case.threads)
    finally:
        conv_gemm.CHUNK_ELEMS = saved
    marker = {"gemm": "im2col + GEMM", "grouped": "output features at once",
              "direct": "convolution: dim_labels"}[case.route]
    assert marker in defs, f"{case.name} did not take the {case.route} routine"
    body = "\n".join("    " + line for line in stmts.rstrip("\n").split("\n"))
    return defs, f"void run_{i}(void **ins, void **outs) {{\n{body}\n}}\n"


@pytest.fixture(scope="module")
def compiled() -> ctypes.CDLL:
    names: set[str] = set()
    parts = [cexpr.prelude()]
    for i, case in enumerate(CASES):
        parts += _harness(i, case, names)
    lib = build.load_library("\n".join(parts), name="test_cpu_conv")
    pool = runtime.parallel_address()
    if pool is not None:
        ctypes.c_void_p.in_dll(lib, "hf_parallel_ptr").value = pool
    return lib


def _run(lib: ctypes.CDLL, i: int, case: Case) -> np.ndarray:
    shape = case.module.entry.root.shape  # type: ignore[attr-defined]
    assert isinstance(shape, ArrayShape)
    ins = [np.ascontiguousarray(x) for x in case.inputs]
    out = np.full(shape.dims, 77, shape.dtype.np)  # every element must be written
    in_ptrs = (ctypes.c_void_p * 2)(*[x.ctypes.data for x in ins])
    out_ptrs = (ctypes.c_void_p * 1)(out.ctypes.data)
    getattr(lib, f"run_{i}")(in_ptrs, out_ptrs)
    return out


def _check(case: Case, got: np.ndarray) -> None:
    want = interpreter.run(case.module, *case.inputs)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    if case.rtol == 0 and case.atol == 0:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=case.rtol, atol=case.atol)


@pytest.mark.parametrize("i", range(len(CASES)), ids=[c.name for c in CASES])
def test_matches_interpreter(compiled: ctypes.CDLL, i: int) -> None:
    _check(CASES[i], _run(compiled, i, CASES[i]))


GEMM = [i for i, c in enumerate(CASES) if c.route == "gemm"]


@pytest.mark.parametrize("i", GEMM, ids=[CASES[i].name for i in GEMM])
def test_own_gemm_matches_interpreter(compiled: ctypes.CDLL, i: int) -> None:
    """With the BLAS pointers null, the chunk products run our own GEMM."""
    blas.unbind(compiled)
    try:
        got = _run(compiled, i, CASES[i])
    finally:
        blas.bind(compiled)
    _check(CASES[i], got)


def _defs(case: Case) -> str:
    return _harness(0, case, set())[0]


def test_cases_cover_every_plan() -> None:
    """Between them the cases take every layout of P, both cuts, W read in place (row- and
    column-major) and packed, C in place and through a workspace."""
    text = "".join(_defs(c) for c in CASES if c.route == "gemm")
    for facet in ("P stored [M][K]", "P stored [K][M]", "tasks cut M", "tasks cut K",
                  "W in place", "W packed", "C in place", "C a workspace"):
        assert facet in text, facet
    nchw = _defs(next(c for c in CASES if c.name == "nchw"))
    assert "W in place" in nchw and "C a workspace" in nchw


def test_base_dilation_splits_into_phases() -> None:
    """An input gradient of a stride-2 convolution is one product per output phase (2 x 2);
    a dimension with a window stride reads its holes as zeros instead (2 x 1)."""
    s2 = _defs(next(c for c in CASES if c.name == "resnet_input_grad_s2"))
    assert s2.count("im2col + GEMM") == 4
    # (plus the unphased product for a kernel holding an inf or a NaN: with a window stride
    # XLA's Eigen convolution multiplies the holes' zeros, as `conv_plan.plan` says)
    strided = _defs(next(c for c in CASES if c.name == "lhs_dilate_strided"))
    assert strided.count("im2col + GEMM") == 3
    # the 1x1 kernel's odd phases have no tap: zeros from the direct loop nest (plus the whole
    # direct loop nest that skips the holes for a kernel holding an inf or a NaN, as XLA)
    one = _defs(next(c for c in CASES if c.name == "resnet_input_grad_1x1"))
    assert one.count("im2col + GEMM") == 1 and one.count("convolution: dim_labels") == 4


def test_accumulates_in_float() -> None:
    """f32 results accumulate in float, as XLA's: not the interpreter's f64 sum rounded once
    (a long contraction shows it), yet within the documented tolerance."""
    case = conv("long", WEIGHT_GRAD, 64, 1, 8, [32, 32], [32, 32], pad=P1)
    defs, fn = _harness(0, case, set())
    lib = build.load_library("\n".join([cexpr.prelude(), defs, fn]), name="test_cpu_conv_acc")
    got = _run(lib, 0, case)
    want = interpreter.run(case.module, *case.inputs)[0]
    assert not np.array_equal(got, want)
    np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol)


def test_bad_groups_name_the_instruction() -> None:
    module = parse("""
ENTRY e {
  a = f32[1,5,5,6] parameter(0)
  b = f32[3,3,4,4] parameter(1)
  ROOT bad_conv = f32[1,3,3,4] convolution(a, b), window={size=3x3},
    dim_labels=b01f_01io->b01f, feature_group_count=4
}""", verify=False)
    with pytest.raises(CompileError, match="bad_conv"):
        library.emit(library_op(module.entry.root), ["a", "b"], ["c"], set())
