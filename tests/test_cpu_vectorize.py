"""Vectorization that does not depend on the host: kernel IR tests assert the vector width each
target gets, and C tests compile the generated code for `-march=x86-64-v3` (AVX2) and
`-march=x86-64-v4` (AVX-512) — whatever machine runs them — and read the assembly.

The C checks compile kernels whose lengths are multiples of every vector width (no scalar tail
exists), so their functions must contain no scalar floating-point arithmetic at all and no calls:
everything, transcendentals included, runs on packed registers. Lane-by-lane fallbacks (ops with
no explicit vector form yet) must be vectorized by the compiler too, which these tests check.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from hlofuse.analysis.kernels import is_kernel
from hlofuse.backends.cpu import build, cexpr, mathlib
from hlofuse.backends.cpu.contract import Kernel
from hlofuse.backends.cpu.kernels import lower_kernel
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir import lower as kir_lower
from hlofuse.backends.kernel_ir.passes import optimize
from hlofuse.backends.kernel_ir.target import Target
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse

EXAMPLES = Path(__file__).resolve().parents[1] / "src" / "hlofuse" / "examples"
MARCH = {"avx2": "-march=x86-64-v3", "avx512": "-march=x86-64-v4"}
REGISTER = {"avx2": "ymm", "avx512": "zmm"}
# scalar floating-point arithmetic, conversions between scalar floats, and calls
SCALAR = re.compile(r"\b(v?(add|sub|mul|div|sqrt|max|min)s[sd]|vfn?m(add|sub)\d+s[sd]|"
                    r"v?cvts[sd]2s[sd]|call)\b")
FLAGS = ["-O3", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off", "-std=gnu11"]


def _compiler_accepts(flag: str) -> bool:
    try:
        cc = build.find_compiler()
    except build.CompilerNotFoundError:
        return False
    probe = subprocess.run([*cc, flag, "-x", "c", "-S", "-o", "-", "-"], input="int x;",
                           capture_output=True, text=True, timeout=60)
    return probe.returncode == 0


def _asm(tmp_path: Path, src: str, target: str) -> str:
    if not _compiler_accepts(MARCH[target]):
        pytest.skip(f"the C compiler does not accept {MARCH[target]}")
    path = tmp_path / f"k_{target}.c"
    path.write_text(src)
    out = subprocess.run([*build.find_compiler(), *FLAGS, MARCH[target], "-S",
                          str(path), "-o", "-"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _function(asm: str, name: str) -> str:
    """The assembly of one function (from its label to the end of its directives)."""
    m = re.search(rf"^{re.escape(name)}:\n(.*?)^\s*\.size\s+{re.escape(name)}", asm,
                  re.S | re.M)
    assert m, f"no function {name} in the assembly"
    return m.group(1)


def _kernel_asm(tmp_path: Path, text: str, target: str, pipeline: str | None = "xla"
                ) -> tuple[list[Kernel], str]:
    """The entry's kernels of `text` (after `pipeline`) printed for `target`, and the assembly
    of them all compiled together for its `-march`."""
    module = parse(text)
    if pipeline:
        run_pipeline(module, pipeline)
    kernels = [lower_kernel(i, Target.named(target)) for i in module.entry.instructions
               if is_kernel(i)]
    functions = {k.name: k.source for k in kernels}  # (equal kernels: one function)
    src = "#define HF_KERNEL\n" + cexpr.prelude() + "".join(functions.values())
    return kernels, _asm(tmp_path, src, target)


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_math_lane_loops_have_no_scalar_ops(tmp_path: Path, target: str) -> None:
    """Every f32 math routine, called lane by lane on a vector, compiles to packed code."""
    w = Target.named(target).vector_bytes // 4
    lines = [mathlib.source(), f"typedef float V __attribute__((vector_size({4 * w})));"]
    for op, (f32, _f64) in mathlib.FUNCTIONS.items():
        args = "x[l], y[l]" if op in mathlib.BINARY else "x[l]"
        lines.append(
            f"void k_{f32}(const float *restrict a, const float *restrict b, float *restrict o,"
            f" long n) {{ for (long i = 0; i + {w} <= n; i += {w}) {{ V x, y, r; "
            f"__builtin_memcpy(&x, a + i, sizeof x); __builtin_memcpy(&y, b + i, sizeof y); "
            f"for (int l = 0; l < {w}; ++l) r[l] = {f32}({args}); "
            f"__builtin_memcpy(o + i, &r, sizeof r); }} }}")
    asm = _asm(tmp_path, "\n".join(lines) + "\n", target)
    scalar = {f32: SCALAR.findall(_function(asm, f"k_{f32}"))
              for f32, _ in mathlib.FUNCTIONS.values()}
    assert not {k: v for k, v in scalar.items() if v}, scalar


def _kernels(text: str, target: str, pipeline: str = "xla") -> list[ir.Kernel]:
    module = parse(text)
    run_pipeline(module, pipeline)
    out = []
    for comp in module.computations_post_order():
        if comp.is_fusion_computation:
            continue
        for instr in comp.instructions:
            if is_kernel(instr):
                out.append(optimize(kir_lower.lower_kernel(instr), Target.named(target)))
    return out


def _sources(text: str, target: str) -> list[str]:
    """The C of each kernel of `text`'s entry computation (fused by `xla`) for `target`."""
    module = parse(text)
    run_pipeline(module, "xla")
    return [lower_kernel(i, Target.named(target)).source
            for i in module.entry.instructions if is_kernel(i)]


def _loops(k: ir.Kernel) -> list[ir.Loop]:
    return [s for s in ir.walk(k.body) if isinstance(s, ir.Loop)]


@pytest.mark.parametrize("target,width", [("avx2", 8), ("avx512", 16), ("sse2", 4)])
@pytest.mark.parametrize("example", ["cartpole_separate", "cartpole_precomputed"])
def test_cartpole_batch_loops_are_vector_loops(example: str, target: str, width: int) -> None:
    kernels = _kernels((EXAMPLES / f"{example}.hlo").read_text(), target)
    big = [k for k in kernels if any(b.size >= 2048 for b in k.outputs)]
    assert len(big) >= 2
    for k in big:
        loops = [lp for lp in _loops(k) if lp.hi - lp.lo >= 2048]
        assert loops and all(lp.vector == width for lp in loops), k.name


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_cartpole_kernels_compile_to_packed_code(tmp_path: Path, target: str) -> None:
    """The CartPole step's kernels (2048 environments: no tail) contain no scalar float op."""
    module = parse((EXAMPLES / "cartpole_separate.hlo").read_text())
    run_pipeline(module, "xla")
    kernels = [lower_kernel(i, Target.named(target))
               for c in module.computations_post_order() if not c.is_fusion_computation
               for i in c.instructions if is_kernel(i)]
    big = [k for k in kernels if any(s.size >= 2048 for s in k.outputs)]
    functions = {k.name: k.source for k in kernels}  # (equal kernels: one function)
    src = "#define HF_KERNEL\n" + cexpr.prelude() + "".join(functions.values())
    asm = _asm(tmp_path, src, target)
    for k in big:
        body = _function(asm, k.name)
        assert not SCALAR.findall(body), (k.name, SCALAR.findall(body)[:10])
        assert REGISTER[target] in body, k.name


# layouts and dtypes the vectorizer must handle explicitly (lengths are multiples of 16)
LAYOUTS = {
    "interleaved_read": """
ENTRY e {
  s = f32[512,4] parameter(0)
  c0 = f32[512,1] slice(s), slice={[0:512], [0:1]}
  c2 = f32[512,1] slice(s), slice={[0:512], [2:3]}
  a = f32[512,1] add(c0, c2)
  ROOT r = f32[512] reshape(a)
}""",
    "interleaved_write": """
ENTRY e {
  x = f32[512] parameter(0)
  y = f32[512] parameter(1)
  sx = f32[512] sine(x)
  cy = f32[512] cosine(y)
  a = f32[512,1] reshape(sx)
  b = f32[512,1] reshape(cy)
  c = f32[512,1] reshape(x)
  d = f32[512,1] reshape(y)
  ROOT s = f32[512,4] concatenate(a, b, c, d), dimensions={1}
}""",
    "transpose": """
ENTRY e {
  s = f32[4,512] parameter(0)
  t = f32[512,4] transpose(s), dimensions={1,0}
  ROOT n = f32[512,4] negate(t)
}""",
    "mixed_dtypes": """
ENTRY e {
  a = f16[512] parameter(0)
  b = bf16[512] parameter(1)
  i = s32[512] parameter(2)
  p = pred[512] parameter(3)
  af = f32[512] convert(a)
  bf = f32[512] convert(b)
  fi = f32[512] convert(i)
  m = f32[512] multiply(af, bf)
  s = f32[512] select(p, m, fi)
  c = pred[512] compare(s, af), direction=GT
  ROOT t = (f32[512], pred[512], f16[512]) tuple(s, c, a)
}""",
}


@pytest.mark.parametrize("target", ["avx2", "avx512"])
@pytest.mark.parametrize("case", list(LAYOUTS))
def test_layouts_vectorize(tmp_path: Path, case: str, target: str) -> None:
    text = LAYOUTS[case]
    kernels = _kernels(text, target)
    for k in kernels:
        loops = [lp for lp in _loops(k) if lp.hi - lp.lo >= 512]
        assert loops and all(lp.vector for lp in loops), k.name
    ck, asm = _kernel_asm(tmp_path, text, target)
    for k in ck:
        body = _function(asm, k.name)
        assert not SCALAR.findall(body), (k.name, SCALAR.findall(body)[:10])



# brax MJX's contact sums: a masked sum over the 11 contacts (the middle dimension, stride 3)
# of each body's 3 coordinates, read by an add (a kLoop fusion)
SHORT_MASKED_SUM = """HloModule short_masked_sum

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

fused {
  p0 = f32[64,3] parameter(0)
  p1 = f32[64,11,3] parameter(1)
  p2 = f32[64,11] parameter(2)
  zero = f32[] constant(0)
  zb = f32[64,11] broadcast(zero), dimensions={}
  l = pred[64,11] compare(p2, zb), direction=LT
  c = f32[64,11] convert(l)
  w = f32[64,11,3] broadcast(c), dimensions={0,1}
  x = f32[64,11,3] multiply(p1, w)
  r = f32[64,3] reduce(x, zero), dimensions={1}, to_apply=add
  ROOT o = f32[64,3] add(p0, r)
}

ENTRY main {
  p0 = f32[64,3] parameter(0)
  p1 = f32[64,11,3] parameter(1)
  p2 = f32[64,11] parameter(2)
  ROOT f = f32[64,3] fusion(p0, p1, p2), kind=kLoop, calls=fused
}
"""


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_a_short_strided_sum_compiles_to_packed_code(tmp_path: Path, target: str) -> None:
    """The outputs-in-lanes schedule (`vectorize.short_reduction`): no horizontal sum, no
    scalar tail, gathers built in registers (no lane loop); the mask converted to 1.0/0.0 by a
    blend on the comparison, not through pred bytes."""
    module = parse(SHORT_MASKED_SUM)
    (k,) = [lower_kernel(i, Target.named(target)) for i in module.entry.instructions
            if is_kernel(i)]
    fn = k.source[k.source.index("HF_KERNEL void"):]
    assert "hf_hred" not in fn and "hf_l" not in fn and "hf_blend" in fn
    asm = _asm(tmp_path, "#define HF_KERNEL\n" + cexpr.prelude() + k.source, target)
    body = _function(asm, k.name)
    assert not SCALAR.findall(body), SCALAR.findall(body)[:10]
    assert REGISTER[target] in body

@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_f32_math_calls_the_explicit_vector_forms(target: str) -> None:
    """sin and cos (and exp, log, tanh, logistic) in a vector loop are vmath's vector functions,
    not lane loops over the scalar ones."""
    module = parse(LAYOUTS["interleaved_write"])
    run_pipeline(module, "xla")
    src = "".join(lower_kernel(i, Target.named(target)).source
                  for i in module.entry.instructions if is_kernel(i))
    w = Target.named(target).vector_bytes // 4
    assert f"hf_sin_v{w}_f32(" in src and f"hf_cos_v{w}_f32(" in src
    assert "hf_sin_f32(" not in src and "hf_cos_f32(" not in src

SHIFTS = """
ENTRY e {
  a = u32[64] parameter(0)
  n = u32[64] parameter(1)
  b = s32[64] parameter(2)
  m = s32[64] parameter(3)
  c = u8[64] parameter(4)
  k = u8[64] parameter(5)
  l = u32[64] shift-left(a, n)
  r = u32[64] shift-right-logical(a, n)
  sa = s32[64] shift-right-arithmetic(b, m)
  sl = s32[64] shift-left(b, m)
  cl = u8[64] shift-left(c, k)
  cr = u8[64] shift-right-arithmetic(c, k)
  ROOT t = (u32[64], u32[64], s32[64], s32[64], u8[64], u8[64]) tuple(l, r, sa, sl, cl, cr)
}"""


def _vector_ops_match_interpreter(text: str, args: tuple, target: str,
                                  monkeypatch: pytest.MonkeyPatch, bytewise: bool = False
                                  ) -> None:
    """Every kernel of `text` (fused by `xla`) prints without a lane loop on a vector target,
    and the cpu backend for `target` gives the interpreter's values on `args` (by bytes when
    `bytewise`: NaN payloads and zero signs too)."""
    import numpy as np

    from hlofuse.backends import cpu, interpreter

    module = parse(text)
    run_pipeline(module, "xla")
    for kernel in [i for i in module.entry.instructions if is_kernel(i)]:
        k = lower_kernel(kernel, Target.named(target))
        if target != "scalar":
            assert "hf_l <" not in k.source, f"{k.name}: an op fell back to a lane loop"
    want = interpreter.run(module, *args)
    monkeypatch.setenv("HLOFUSE_TARGET", target)
    got = cpu.compile_module(module)(*args)
    for g, w in zip(got, want, strict=True):
        if bytewise:
            np.testing.assert_array_equal(np.asarray(g).view(np.uint8),
                                          np.asarray(w).view(np.uint8))
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("target", ["avx2", "avx512", "scalar"])
def test_shifts_are_vector_ops_with_xla_semantics(target: str, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    """Shifts (threefry's rotations) print as vector shifts, not lane loops, and keep XLA's
    meaning for amounts at or beyond the width (0, or the sign for arithmetic shifts) and for
    negative amounts; checked against the interpreter (generic vector types run on any host:
    64-byte vectors become two 32-byte ones on AVX2)."""
    import numpy as np

    rng = np.random.default_rng(0)
    amounts = np.array([0, 1, 7, 8, 13, 31, 32, 33, 63, 64, 255, 2**31, 2**32 - 1, 5, 16, 24]
                       * 4, dtype=np.uint32)
    args = (rng.integers(0, 2**32, 64, dtype=np.uint32), amounts,
            rng.integers(-2**31, 2**31, 64, dtype=np.int32), amounts.view(np.int32),
            rng.integers(0, 256, 64, dtype=np.uint8), (amounts % 256).astype(np.uint8))
    _vector_ops_match_interpreter(SHIFTS, args, target, monkeypatch)


BY_CONSTANTS = """
ENTRY e {
  a = u32[64] parameter(0)
  b = s32[64] parameter(1)
  c = s64[64] parameter(2)
  three = u32[] constant(3)
  t = u32[64] broadcast(three), dimensions={}
  seven = s32[] constant(7)
  s = s32[64] broadcast(seven), dimensions={}
  big = s64[] constant(1000003)
  g = s64[64] broadcast(big), dimensions={}
  r = u32[64] remainder(a, t)
  q = u32[64] divide(a, t)
  sr = s32[64] remainder(b, s)
  sq = s32[64] divide(b, s)
  cr = s64[64] remainder(c, g)
  ROOT out = (u32[64], u32[64], s32[64], s32[64], s64[64]) tuple(r, q, sr, sq, cr)
}
"""


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_divides_by_positive_constants_are_vector_ops(target: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An integer divide or remainder by a positive constant (MinAtar's `randint`: random
    bits % 3) prints as a vector `/` or `%` (GCC makes multiplies of it), not a lane loop of
    XLA's division helper; C's truncation is XLA's there, negative dividends included."""
    import numpy as np

    rng = np.random.default_rng(1)
    b = rng.integers(-2**31, 2**31, 64, dtype=np.int32)
    b[:4] = [-2**31, -7, -1, 2**31 - 1]
    args = (rng.integers(0, 2**32, 64, dtype=np.uint32), b,
            rng.integers(-2**62, 2**62, 64, dtype=np.int64))
    _vector_ops_match_interpreter(BY_CONSTANTS, args, target, monkeypatch)


PADDED_WINDOWS = """HloModule windows
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p0 = s32[37,16] parameter(0)
  z = s32[] constant(0)
  zb = s32[37,16] broadcast(z), dimensions={}
  gt = pred[37,16] compare(p0, zb), direction=GT
  c = f32[37,16] convert(gt)
  zf = f32[] constant(0)
  scan = f32[37,16] reduce-window(c, zf), window={size=1x16 pad=0_0x15_0}, to_apply=add
  p1 = f32[9,45] parameter(1)
  back = f32[9,45] reduce-window(p1, zf), window={size=1x5 pad=0_0x0_4}, to_apply=add
  ROOT t = (f32[37,16], f32[9,45]) tuple(scan, back)
}"""


@pytest.mark.parametrize("target", ["avx2", "avx512", "scalar"])
def test_padded_windows_read_through_masked_loads(target: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A window along the minor dimension whose taps read padding (jnp.cumsum's row scan, a
    reverse scan reading past the row's and the buffer's end) runs its outputs in lanes, each
    tap a masked vector load (`mload`: the target's masked load instruction under GCC, lanes
    elsewhere) that reads no element outside the buffer; the interpreter's values (sums of
    small integers: exact in any order)."""
    import numpy as np

    sources = _sources(PADDED_WINDOWS, target)
    assert (target != "scalar") == any("hf_mld_" in src for src in sources)
    rng = np.random.default_rng(3)
    args = (rng.integers(-3, 4, (37, 16), dtype=np.int32),
            rng.integers(-50, 50, (9, 45)).astype(np.float32))  # exact sums in any order
    _vector_ops_match_interpreter(PADDED_WINDOWS, args, target, monkeypatch, bytewise=True)


TRANSPOSED_PIECES = """HloModule pieces
ENTRY e {
  a = f32[6,7,5] parameter(0)
  b = f32[6,4,3,5] parameter(1)
  s = f32[6,4,2,5] slice(b), slice={[0:6],[0:4],[1:3],[0:5]}
  bb = f32[6,4,2,2,5] broadcast(s), dimensions={0,1,2,4}
  r = f32[6,16,5] reshape(bb)
  c = f32[6,23,5] concatenate(a, r), dimensions={1}
  ROOT t = f32[6,5,23] transpose(c), dimensions={0,2,1}
}"""


@pytest.mark.parametrize("target", ["avx2", "avx512", "scalar"])
def test_delinearised_indices_divide_in_32_bit_lanes(target: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A concatenate of a reshaped broadcast read through a transpose (MJX's contact Jacobian
    pieces): the vector loop's coordinates are quotients and remainders of its variable. They
    lie in [0, 2^31) and only address memory, so they are computed in unsigned 32-bit lanes
    (`lanes.index32`), never as 64-bit vector divisions (no instruction: GCC divided lane by
    lane); the interpreter's values."""
    import numpy as np

    (src,) = _sources(TRANSPOSED_PIECES, target)
    wide = [line for line in src.splitlines()
            if "_i64(" in line and (" / " in line or " % " in line)]
    assert not wide, wide[:3]
    if target != "scalar":
        assert re.search(r"hf_v\d+_u32 v\d+ = v\d+ / hf_splat_v\d+_u32", src)
    rng = np.random.default_rng(4)
    args = (rng.standard_normal((6, 7, 5)).astype(np.float32),
            rng.standard_normal((6, 4, 3, 5)).astype(np.float32))
    _vector_ops_match_interpreter(TRANSPOSED_PIECES, args, target, monkeypatch, bytewise=True)


# NaNs of both signs, signed zeros, f32 and f64 subnormals, infinities, a bf16 subnormal
SPECIAL_FLOATS = [float("nan"), -float("nan"), 0.0, -0.0, 1e-45, -1e-45, 1e-310, -1e-310,
                  float("inf"), -float("inf"), 2.5, -3.0, 1e-39, -1e-39, 6e-8, -6e-8, 1e-40]

SIGNS = """HloModule signs
ENTRY e {
  a = f32[67] parameter(0)
  b = f64[67] parameter(1)
  c = bf16[67] parameter(2)
  sa = f32[67] sign(a)
  sb = f64[67] sign(b)
  sc = bf16[67] sign(c)
  ROOT t = (f32[67], f64[67], bf16[67]) tuple(sa, sb, sc)
}"""


@pytest.mark.parametrize("target", ["avx2", "avx512", "scalar"])
def test_float_sign_is_a_vector_op(target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Float sign (optax's lion update) prints as vector bit operations, not a lane loop, and
    keeps the scalar rule: NaN and zeros stay themselves, subnormals are zeros where the file
    flushes them; checked against the interpreter on every special value, in vector lanes
    and the tail."""
    import ml_dtypes
    import numpy as np

    x = np.array((SPECIAL_FLOATS * 4)[:67])
    args = (x.astype(np.float32), x, x.astype(ml_dtypes.bfloat16))
    _vector_ops_match_interpreter(SIGNS, args, target, monkeypatch, bytewise=True)


ORDERS = """HloModule orders
ENTRY e {
  a = f32[67] parameter(0)
  b = f32[67] parameter(1)
  c = f64[67] parameter(2)
  d = f64[67] parameter(3)
  i = s32[67] parameter(4)
  j = s32[67] parameter(5)
  k = s32[67] parameter(6)
  u = s8[67] parameter(7)
  h = bf16[67] parameter(8)
  lt = pred[67] compare(a, b), direction=LT, type=TOTALORDER
  le = pred[67] compare(c, d), direction=LE, type=TOTALORDER
  eq = pred[67] compare(a, b), direction=EQ, type=TOTALORDER
  fa = pred[67] is-finite(a)
  fc = pred[67] is-finite(c)
  fh = pred[67] is-finite(h)
  cl = s32[67] clamp(i, j, k)
  si = s32[67] sign(j)
  su = s8[67] sign(u)
  ROOT t = (pred[67], pred[67], pred[67], pred[67], pred[67], pred[67], s32[67], s32[67],
            s8[67]) tuple(lt, le, eq, fa, fc, fh, cl, si, su)
}"""


@pytest.mark.parametrize("target", ["avx2", "avx512", "scalar"])
def test_total_order_compares_is_finite_int_clamp_and_sign_are_vector_ops(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """TOTALORDER float compares (as cprelude's hf_tokey keys), is-finite (exponent bits),
    integer clamp and integer sign print as vector ops, not lane loops, with the scalar
    forms' results on NaNs of both signs, signed zeros, infinities and subnormals."""
    import ml_dtypes
    import numpy as np

    rng = np.random.default_rng(3)
    x = np.array((SPECIAL_FLOATS * 4)[:67])
    y = rng.permutation(x)
    ints = rng.integers(-40, 40, (3, 67)).astype(np.int32)
    args = (x.astype(np.float32), y.astype(np.float32), x, y, *ints,
            rng.integers(-3, 3, 67).astype(np.int8), x.astype(ml_dtypes.bfloat16))
    _vector_ops_match_interpreter(ORDERS, args, target, monkeypatch)


@pytest.mark.skipif(not __import__("hlofuse.backends.cpu", fromlist=["available"]).available(),
                    reason="no C compiler")
@pytest.mark.parametrize(("host", "target", "want"), [
    ("avx512", "avx2", "-march=x86-64-v3"),  # what an AVX2 machine's compiler generates
    ("avx512", "avx512", "-march=x86-64-v4"),
    ("avx512", "sse2", "-march=x86-64"),
    ("avx2", "avx512", None),  # wider than the host: its code could not run here
    ("avx2", "neon", None),  # foreign
    ("avx2", "scalar", None),
    ("avx2", "", None),  # no HLOFUSE_TARGET
])
def test_a_named_target_compiles_for_its_level_where_the_host_runs_it(
        host: str, target: str, want: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host is faked, so every row runs on any machine; None: the host's own -march."""
    from hlofuse.backends.cpu import host_target

    monkeypatch.setattr(host_target, "_detect", lambda argv: Target.named(host))
    monkeypatch.setenv("HLOFUSE_TARGET", target)
    flags = build.flags()
    marches = [f for f in flags if f.startswith("-march=")]
    assert marches == [want or host_target.NATIVE_MARCH]


def test_an_s32_iota_is_computed_in_32_bit_lanes() -> None:
    """A causal mask (s32 iotas compared) builds its positions in 32-bit lanes, not in 64-bit
    ones converted (half the vector work); the values are the interpreter's."""
    import numpy as np

    from hlofuse.backends import cpu, interpreter

    text = """
ENTRY e {
  p = f32[64,64] parameter(0)
  r = s32[64,64] iota(), iota_dimension=0
  c = s32[64,64] iota(), iota_dimension=1
  ge = pred[64,64] compare(r, c), direction=GE
  m = f32[] constant(-1e9)
  mb = f32[64,64] broadcast(m), dimensions={}
  ROOT s = f32[64,64] select(ge, p, mb)
}"""
    module = parse(text)
    run_pipeline(module, "xla")
    (kernel,) = [i for i in module.entry.instructions if is_kernel(i)]
    k = lower_kernel(kernel, Target.named("avx2"))
    assert "hf_iota32_v8()" in k.source
    # no 64-bit index converted to 32 bits (an unused 64-bit one may be printed: GCC drops it)
    assert not re.search(r"__builtin_convertvector\(\(v\d+\), hf_v8_i32\)", k.source), k.source
    if not cpu.available():
        return
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    np.testing.assert_array_equal(cpu.compile_module(module)(x)[0],
                                  interpreter.run(parse(text), x)[0])


@pytest.mark.parametrize("offset", ["4096", "1099511627776", "p"])  # 2^12, 2^40, a parameter
def test_counter_words_are_computed_in_32_bit_lanes(offset: str) -> None:
    """The two 32-bit words of a 64-bit element counter (JAX's threefry): with a known offset
    the high word is a constant and the low word is 32-bit lane arithmetic (`passes/narrow`);
    with an unknown one the 64-bit arithmetic stays. Values are the interpreter's."""
    import numpy as np

    from hlofuse.backends import cpu, interpreter

    c = "u64[] parameter(0)" if offset == "p" else f"u64[] constant({offset})"
    text = f"""
ENTRY e {{
  c = {c}
  i = u64[1024] iota(), iota_dimension=0
  cb = u64[1024] broadcast(c), dimensions={{}}
  s = u64[1024] add(i, cb)
  k = u64[] constant(32)
  kb = u64[1024] broadcast(k), dimensions={{}}
  h = u64[1024] shift-right-logical(s, kb)
  hi = u32[1024] convert(h)
  lo = u32[1024] convert(s)
  ROOT x = u32[1024] xor(hi, lo)
}}"""
    module = parse(text)
    run_pipeline(module, "xla")
    (kernel,) = [i for i in module.entry.instructions if is_kernel(i)]
    k = lower_kernel(kernel, Target.named("avx2"))
    body = k.source[k.source.index("HF_KERNEL void"):]
    wide = "hf_v8_u64" in body  # 64-bit lanes (an unused i64 index may be printed: GCC drops it)
    assert wide == (offset == "p"), body
    if not cpu.available():
        return
    args = (np.uint64(5 << 33),) if offset == "p" else ()
    np.testing.assert_array_equal(cpu.compile_module(module)(*args)[0],
                                  interpreter.run(parse(text), *args)[0])


def _column_chain(ops: int) -> str:
    """[4, 64] in, transposed, [64, 4] out: `ops` multiply-adds per element (distinct
    constants), a loop over 64 rows around an inner loop over the 4 columns."""
    lines = ["ENTRY e {", "  p = f32[4,64] parameter(0)",
             "  x0 = f32[64,4] transpose(p), dimensions={1,0}"]
    for i in range(ops):
        lines += [f"  c{i} = f32[] constant({1 + i / 1000})",
                  f"  b{i} = f32[64,4] broadcast(c{i}), dimensions={{}}",
                  f"  m{i} = f32[64,4] multiply(x{i}, b{i})",
                  f"  x{i + 1} = f32[64,4] add(m{i}, x0)"]
    lines += [f"  ROOT r = f32[64,4] negate(x{ops})", "}"]
    return "\n".join(lines)


@pytest.mark.parametrize("ops,vector", [(8, True), (400, False)])
def test_inner_loops_unroll_into_a_vector_loop_only_while_the_body_stays_small(
        ops: int, vector: bool) -> None:
    """The 4 columns of a [64, 4] layout unroll into a vector loop over the rows while the
    unrolled body holds at most UNROLL_VALUES_MAX values; a longer chain (4 x 800 values)
    keeps its loop nest, which GCC compiles in a fraction of the time. Values are the
    interpreter's either way."""
    import numpy as np

    from hlofuse.backends import cpu, interpreter
    from hlofuse.backends.kernel_ir.passes.vectorize import UNROLL_VALUES_MAX

    assert (4 * 2 * ops > UNROLL_VALUES_MAX) is not vector
    text = _column_chain(ops)
    (k,) = _kernels(text, "avx2")
    rows = [lp for lp in _loops(k) if lp.hi - lp.lo == 64]
    assert rows and all(bool(lp.vector) is vector for lp in rows), ops
    if not cpu.available():
        return
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    module = parse(text)
    run_pipeline(module, "xla")
    np.testing.assert_array_equal(cpu.compile_module(module)(x)[0],
                                  interpreter.run(parse(text), x)[0])


def _tail_call_source(params: int = 16) -> str:
    """A function of `params` pointers (most passed on the stack) whose last act is a call
    passing 9 64-byte vectors (the 9th on the stack under AVX-512): the shape of a kernel that
    ends in an interleaving store helper GCC did not inline (`hf_int9_v16_f32`)."""
    args = ", ".join(f"const float *i{k}" for k in range(params))
    loads = " ".join(f"v16 a{k} = ld(i{k});" for k in range(params))
    vals = ", ".join(f"a{k} * a{k + 8}" for k in range(8))
    return f"""#include <string.h>
typedef float v16 __attribute__((vector_size(64)));
static inline v16 ld(const float *p) {{ v16 v; memcpy(&v, p, 64); return v; }}
static __attribute__((noinline)) void sink(float *p, v16 a0, v16 a1, v16 a2, v16 a3, v16 a4, v16 a5,
                                    v16 a6, v16 a7, v16 a8)
{{ v16 s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8; memcpy(p, &s, 64); }}
void kernel({args}, float *out)
{{
  {loads}
  sink(out, {vals}, a7 + a15);
}}
int main(void) {{
  static float x[{params}][16]; float o[16];
  for (int k = 0; k < {params}; ++k) for (int i = 0; i < 16; ++i) x[k][i] = 1.0f;
  kernel({", ".join(f"x[{k}]" for k in range(params))}, o);
  return o[0] == 10.0f ? 0 : 1;
}}
"""


def test_the_backend_flags_make_no_sibling_calls_that_misalign_vector_arguments(
        tmp_path: Path) -> None:
    """GCC 12 with sibling calls passes a tail call's 9th 64-byte vector through the caller's
    incoming argument area (16-byte aligned) with an aligned store: `jmp sink` after a
    `vmovaps` there, a crash on an AVX-512 host (MJX's humanoid). The backend's flags
    (`compiler.BASE_FLAGS`) call instead; where the host has AVX-512 the program runs."""
    src = tmp_path / "tail.c"
    src.write_text(_tail_call_source())
    if not _compiler_accepts(MARCH["avx512"]):
        pytest.skip("the C compiler does not accept -march=x86-64-v4")
    flags = [f for f in build.flags() if not f.startswith("-march=") and f != "-shared"]
    # at the kernels' level (the suite's HLOFUSE_CC_OPT=-O1 makes no sibling calls at all)
    cc = [*build.find_compiler(), *flags, MARCH["avx512"], "-O2"]
    asm = subprocess.run([*cc, "-S", str(src), "-o", "-"], capture_output=True, text=True,
                         timeout=120)
    assert asm.returncode == 0, asm.stderr[-2000:]
    body = asm.stdout.split("kernel:", 1)[1].split(".size", 1)[0]
    assert re.search(r"\bcall\s+sink", body) and not re.search(r"\bjmp\s+sink", body), body
    if "avx512f" not in Path("/proc/cpuinfo").read_text(errors="replace").split():
        return
    exe = tmp_path / "tail"
    subprocess.run([*cc, str(src), "-o", str(exe)], check=True, timeout=120)
    assert subprocess.run([str(exe)], timeout=60).returncode == 0


def _gathers(n: int) -> str:
    """A [256] sum of `n` gathers from one table at data-dependent positions (idx + k)."""
    lines = ["ENTRY e {", "  t = f32[1024] parameter(0)", "  i = s32[256,1] parameter(1)"]
    for k in range(n):
        lines += [f"  c{k} = s32[] constant({k})",
                  f"  b{k} = s32[256,1] broadcast(c{k}), dimensions={{}}",
                  f"  i{k} = s32[256,1] add(i, b{k})",
                  f"  g{k} = f32[256] gather(t, i{k}), offset_dims={{}}, "
                  "collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, "
                  "slice_sizes={1}"]
    acc = "g0"
    for k in range(1, n):
        lines.append(f"  s{k} = f32[256] add({acc}, g{k})")
        acc = f"s{k}"
    lines += [f"  ROOT r = f32[256] negate({acc})", "}"]
    return "\n".join(lines)


@pytest.mark.parametrize("n", [8, 72])
def test_a_loop_of_many_gathers_uses_the_targets_gather_instruction(
        tmp_path: Path, n: int) -> None:
    """A vector loop with more than GATHERS_AS_LANES data-dependent gathers marks them
    (`LaneForms.gather`) and prints them through `VecLib.gather` (AVX-512: vgatherdps; GCC 12
    spent 23 s on 220 lane-by-lane 16-lane gathers of a MinAtar kernel); a few stay lane
    loads. Values are the interpreter's either way."""
    import numpy as np

    from hlofuse.backends import cpu, interpreter
    from hlofuse.backends.kernel_ir.passes.lanes import GATHERS_AS_LANES

    many = n > GATHERS_AS_LANES
    text = _gathers(n)
    marked = [len(lp.forms.gather) for k in _kernels(text, "avx512") for lp in _loops(k)
              if lp.vector and lp.forms is not None]
    assert marked and (max(marked) > GATHERS_AS_LANES) is many and (max(marked) == 0) is not many
    module = parse(text)
    run_pipeline(module, "xla")
    src = "".join(lower_kernel(i, Target.named("avx512")).source
                  for i in module.entry.instructions if is_kernel(i))
    assert ("hf_gather_v16_f32(" in src) is many
    if many:
        asm = _asm(tmp_path, "#define HF_KERNEL\n" + cexpr.prelude() + src, "avx512")
        assert "vgatherdps" in asm
    if not cpu.available():
        return
    rng = np.random.default_rng(5)
    t = rng.standard_normal(1024).astype(np.float32)
    i = rng.integers(0, 1024 - n, (256, 1)).astype(np.int32)
    np.testing.assert_array_equal(cpu.compile_module(module)(t, i)[0],
                                  interpreter.run(parse(text), t, i)[0])


NARROW_CONVERTS = """HloModule converts
ENTRY e {
  b = u8[64] parameter(0)
  c = s8[64] parameter(1)
  h = s16[64] parameter(2)
  i = s32[64] parameter(3)
  u = u32[64] parameter(4)
  p = pred[64] parameter(5)
  x = f32[64] parameter(6)
  y = f32[64] parameter(7)
  bi = s32[64] convert(b)
  ci = s32[64] convert(c)
  bl = s64[64] convert(b)
  hl = s64[64] convert(h)
  ib = u8[64] convert(i)
  ic = s8[64] convert(i)
  ub = u8[64] convert(u)
  pf = f32[64] convert(p)
  bf = f32[64] convert(b)
  cf = f32[64] convert(c)
  lt = pred[64] compare(x, y), direction=LT
  s = f32[64] select(p, x, y)
  ROOT t = (s32[64], s32[64], s64[64], s64[64], u8[64], s8[64], u8[64], f32[64], f32[64],
            f32[64], pred[64], f32[64]) tuple(bi, ci, bl, hl, ib, ic, ub, pf, bf, cf, lt, s)
}"""


@pytest.mark.parametrize("target", ["avx2", "avx512", "scalar"])
def test_narrow_integer_lanes_convert_as_vectors(target: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """8- and 16-bit lanes (pred, u8, s8, s16) widen to and narrow from 32- and 64-bit lanes
    as vector code: GCC 12 compiles one `__builtin_convertvector` across a 4x width change
    lane by lane (byte extracts and inserts; brax's pendulum ran 2x slower on AVX2 for it),
    so `cvec.convert` steps a halving or doubling at a time. Values match the interpreter and
    the compiled kernels extract or insert no lane."""
    import numpy as np

    rng = np.random.default_rng(1)
    x = rng.standard_normal(64).astype(np.float32)
    args = (rng.integers(0, 256, 64, dtype=np.uint8), rng.integers(-128, 128, 64, dtype=np.int8),
            rng.integers(-2**15, 2**15, 64, dtype=np.int16),
            rng.integers(-2**31, 2**31, 64, dtype=np.int32),
            rng.integers(0, 2**32, 64, dtype=np.uint32), rng.integers(0, 2, 64).astype(bool),
            x, np.where(rng.random(64) < 0.5, x, rng.standard_normal(64).astype(np.float32)))
    _vector_ops_match_interpreter(NARROW_CONVERTS, args, target, monkeypatch)
    if target == "scalar":
        return
    kernels, asm = _kernel_asm(tmp_path, NARROW_CONVERTS, target)
    for k in kernels:
        lanewise = re.findall(r"\bv?p(extr|insr)[bwdq]\b", _function(asm, k.name))
        assert not lanewise, (k.name, len(lanewise))


# brax's generalized pipeline (inverted_pendulum): a 2 x 2 matrix-vector product per body,
# accumulated in f64 (jax's dot_general with preferred_element_type f64, strength-reduced)
F64_PAIRS = """HloModule f64_pairs
add {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT s = f64[] add(a, b)
}
fused {
  p0 = f32[256,2] parameter(0)
  v = f64[256,2] convert(p0)
  vb = f64[256,2,2] broadcast(v), dimensions={0,2}
  p1 = f32[256,2,2] parameter(1)
  m = f64[256,2,2] convert(p1)
  x = f64[256,2,2] multiply(m, vb)
  zero = f64[] constant(0)
  ROOT r = f64[256,2] reduce(x, zero), dimensions={2}, to_apply=add
}
ENTRY e {
  p0 = f32[256,2] parameter(0)
  p1 = f32[256,2,2] parameter(1)
  ROOT f = f64[256,2] fusion(p0, p1), kind=kInput, calls=fused
}"""


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_wide_tile_shuffles_stay_in_registers(tmp_path: Path, target: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """[n, 2] and [n, 4] arrays read and written as column vectors of f64 (brax's 2 x 2
    products): vectors wider than the target's registers are shuffled in register-sized parts
    (`cvec.shuffle_helper`): GCC 12 spilled the 64-byte whole-vector shuffles to the stack on
    AVX2, element by element (2.7x the kernel's time). The kernel moves no element on its own
    and keeps its values in registers, and matches the interpreter."""
    import numpy as np

    from hlofuse.backends import cpu, interpreter

    (k,), asm = _kernel_asm(tmp_path, F64_PAIRS, target, pipeline=None)
    assert "hf_deint" in k.source and "hf_int2_" in k.source
    body = _function(asm, k.name)
    lanes = re.findall(r"\bvmov[lh]pd\b|\bvmovsd\b|\bvextractf64x2\b", body)
    assert not lanes, (k.name, len(lanes))  # no element moved on its own
    assert len(re.findall(r"\(%rsp\)", body)) <= 2, k.name  # (an accumulator's zeros)
    rng = np.random.default_rng(2)
    args = (rng.standard_normal((256, 2), dtype=np.float32),
            rng.standard_normal((256, 2, 2), dtype=np.float32))
    module = parse(F64_PAIRS)
    want = interpreter.run(module, *args)
    monkeypatch.setenv("HLOFUSE_TARGET", target)
    (got,) = cpu.compile_module(module)(*args)
    np.testing.assert_allclose(got, want[0], rtol=1e-12)


def _columns_product(rows: int, cols: int) -> str:
    """brax's positional pipeline: each column of a [rows, cols] f32 array sliced out and
    combined (a quaternion or 3 x 3 matrix per body, `cols` wide), one value per row."""
    lines = [f"HloModule columns_{cols}", "ENTRY e {", f"  p = f32[{rows},{cols}] parameter(0)"]
    for c in range(cols):
        lines.append(f"  s{c} = f32[{rows},1] slice(p), slice={{[0:{rows}], [{c}:{c + 1}]}}")
        lines.append(f"  c{c} = f32[{rows}] reshape(s{c})")
    acc = "c0"
    for c in range(1, cols):
        lines.append(f"  m{c} = f32[{rows}] multiply({acc}, c{c})")
        lines.append(f"  a{c} = f32[{rows}] add(m{c}, c{c})")
        acc = f"a{c}"
    lines += [f"  ROOT r = f32[{rows}] negate({acc})", "}"]
    return "\n".join(lines)


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_wide_rows_read_as_tiles(target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Columns of rows up to TILE_STRIDE_MAX elements wide (brax's ant: 27, 36 and 64) are
    read as tiles (`hf_deintN`: whole vectors, shuffled) rather than assembled lane by lane
    from strided loads, whose initializers cost GCC about 7 ms of -O2 each (brax's ant had
    1,600 of them: a quarter of its compile) for no faster code. Wider rows still gather."""
    import numpy as np

    from hlofuse.backends.kernel_ir.passes.vectorize import TILE_STRIDE_MAX

    for cols in (27, 36, 64, TILE_STRIDE_MAX + 1):
        (src,) = _sources(_columns_product(64, cols), target)
        gathered = re.findall(r"= \{in\d+\[", src)
        if cols <= 64:
            assert f"hf_deint{cols}_" in src and not gathered, cols
        else:
            assert f"hf_deint{cols}_" not in src and gathered, cols
    # one column of 32-wide rows stays lane loads: a tile would load all 32 (Freeway-MinAtar's
    # one-column slices ran 3.7 -> 5.2 ms a rollout as tiles)
    one = ("HloModule one_column\nENTRY e {\n  p = f32[64,32] parameter(0)\n"
           "  s = f32[64,1] slice(p), slice={[0:64], [5:6]}\n  r = f32[64] reshape(s)\n"
           "  ROOT n = f32[64] negate(r)\n}")
    (src,) = _sources(one, target)
    assert "hf_deint32_" not in src, "a tile for one column of 32"
    x = np.random.default_rng(3).standard_normal((64, 27)).astype(np.float32) * 0.5
    _vector_ops_match_interpreter(_columns_product(64, 27), (x,), target, monkeypatch)


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_rows_whose_columns_read_reused_accumulators_store_as_tiles(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """MuJoCo MJX's velocity fusion (tests/hlo/mjx_column_stores.hlo, cut from its step):
    outputs of [16, 12] rows whose columns are sums through short-reduction accumulators the
    next column reuses, so a column's value cannot move to where the row's last column is
    stored. Each is held in a register where it was computed and the row stored as a tile
    (`hf_int12`), not 84 columns lane by lane (GCC: 2.1 s for this kernel, 0.7 s now). Values
    are the interpreter's."""
    import numpy as np

    from hlofuse.backends import cpu, interpreter

    text = (Path(__file__).parent / "hlo" / "mjx_column_stores.hlo").read_text()
    (src,) = [s for s in _sources(text, target) if "hf_int" in s or "hf_l <" in s]
    assert "hf_l <" not in src and src.count("hf_int12_") >= 7
    module = parse(text)
    rng = np.random.default_rng(7)
    args = [rng.integers(0, 3, p.shape.dims).astype(np.int32) if p.shape.dtype.name == "s32"
            else rng.standard_normal(p.shape.dims).astype(np.float32)
            for p in module.entry.parameters]
    want = interpreter.run(module, *args)
    monkeypatch.setenv("HLOFUSE_TARGET", target)
    got = cpu.compile_module(parse(text))(*args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


DYNAMIC_COLUMN = """HloModule dynamic_column
ENTRY e {
  p0 = f32[64,3,4] parameter(0)
  p1 = s32[] parameter(1)
  z = s32[] constant(0)
  ds = f32[64,1,4] dynamic-slice(p0, z, p1, z), dynamic_slice_sizes={64,1,4}
  r = f32[64,4] reshape(ds)
  c0 = f32[64,1] slice(r), slice={[0:64], [0:1]}
  c1 = f32[64,1] slice(r), slice={[0:64], [1:2]}
  c3 = f32[64,1] slice(r), slice={[0:64], [3:4]}
  m = f32[64,1] multiply(c0, c1)
  a = f32[64,1] add(m, c3)
  ROOT o = f32[64] reshape(a)
}"""


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_a_column_chosen_per_call_reads_the_row_as_a_tile(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`x[i, 4 * j + c]` with j one of a few values fixed per call (MuJoCo MJX's bodies and
    joints): the row is read as one tile (`hf_deint12`) and the column selected on j
    (`vectorize._dynamic_column`), not assembled from 16 lane loads a vector step. Values
    match the interpreter for j inside and outside the clamp's range."""
    import numpy as np

    from hlofuse.backends import cpu, interpreter

    (src,) = _sources(DYNAMIC_COLUMN, target)
    assert "hf_deint12_" in src and not re.findall(r"= \{in\d+\[", src)
    x = np.random.default_rng(4).standard_normal((64, 3, 4)).astype(np.float32)
    monkeypatch.setenv("HLOFUSE_TARGET", target)
    run = cpu.compile_module(parse(DYNAMIC_COLUMN))
    for j in (-1, 0, 1, 2, 5):
        want = interpreter.run(parse(DYNAMIC_COLUMN), x, np.int32(j))
        np.testing.assert_array_equal(run(x, np.int32(j))[0], want[0])
