"""The CPU backend's math library (backends/cpu/mathlib.py) against numpy's float64 reference.

* f32: about a million inputs spread log-uniformly over the whole float range, both signs
  (random bit patterns), plus special values (+-0, +-inf, nan, denormals, the largest finite),
  values next to multiples of pi/2 and to the exp/expm1/logistic overflow and underflow
  thresholds; the error must stay within `MAX_ULP[op]`, nan/inf exactly where the reference
  has them, and zeros must carry the reference's sign.
* f64: random doubles within a few f64 ulps of numpy.
* A loop calling each f32 function is SIMD-vectorized by GCC with the backend's flags (without
  -fno-trapping-math too, and without -ffast-math).
"""

from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hlofuse.backends.cpu import build, mathlib

F32_TINY = np.float32(1e-45)
F32_MAX = np.finfo(np.float32).max


@pytest.fixture(scope="module")
def lib():
    try:
        return build.load_library(mathlib.harness_source(), name="mathlib_harness")
    except build.CompilerNotFoundError as exc:
        pytest.skip(str(exc))


def _around(values: np.ndarray, steps: int = 3) -> np.ndarray:
    """f32 values and their `steps` neighbours either side."""
    v = np.asarray(values, dtype=np.float32)
    out = [v]
    up, down = v.copy(), v.copy()
    for _ in range(steps):
        up = np.nextafter(up, np.float32(np.inf))
        down = np.nextafter(down, np.float32(-np.inf))
        out += [up, down]
    return np.concatenate(out)


def _specials() -> np.ndarray:
    # exp overflows above 88.72284, underflows to denormals below -87.33655, to 0 below -103.97208
    base = """0 1 2 0.5 3 10 0.1 3.1415927 2.7182817 88.72284 89 87.33655 103.97208 104 20 9 4
              3.92 0.84 1e-30 1e-38 1.1754944e-38 1.4e-45 1e30 131072 8388608 16777216 1e38"""
    b = np.array([*base.split(), F32_MAX, np.inf], dtype=np.float32)
    return np.concatenate([_around(b), -_around(b), np.float32([np.nan, -np.nan])])


def f32_inputs() -> np.ndarray:
    rng = np.random.default_rng(1234)
    bits = rng.integers(0, 2**32, size=600_000, dtype=np.uint64).astype(np.uint32)
    k = np.concatenate([np.arange(1, 2000), rng.integers(1, 2**40, 2000)]).astype(np.float64)
    near_pio2 = _around((k * (np.pi / 2)).astype(np.float32), 2)
    grids = [
        np.linspace(-12, 12, 150_001, dtype=np.float32),
        np.linspace(-110, 110, 50_001, dtype=np.float32),
        np.linspace(-1.5, 1.5, 50_001, dtype=np.float32),
    ]
    parts = [bits.view(np.float32), near_pio2, *grids, _specials()]
    return np.ascontiguousarray(np.concatenate(parts))


def f32_pairs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(99)
    n = 300_000
    x_bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    y_bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x_mod = rng.uniform(-10, 10, n).astype(np.float32)
    y_mod = rng.uniform(-40, 40, n).astype(np.float32)
    y_int = rng.integers(-40, 40, n).astype(np.float32)
    sp = np.concatenate([_specials()[::3], np.float32([-1, -2, -3, 1, 0.5, -0.5])])
    sx, sy = (a.ravel() for a in np.meshgrid(sp, sp))
    x = np.concatenate([x_bits, x_mod, x_mod, x_bits, sx])
    y = np.concatenate([y_bits, y_mod, y_int, y_mod, sy])
    return np.ascontiguousarray(x), np.ascontiguousarray(y)


@pytest.fixture(scope="module")
def inputs() -> np.ndarray:
    return f32_inputs()


@pytest.fixture(scope="module")
def pairs() -> tuple[np.ndarray, np.ndarray]:
    return f32_pairs()


def _check(op: str, ours: np.ndarray, ref64: np.ndarray, *xs: np.ndarray) -> None:
    err = mathlib.ulp_error(ours, ref64)
    worst = int(np.argmax(err))
    where = ", ".join(f"{x[worst]!r}" for x in xs)
    assert err[worst] <= mathlib.MAX_ULP[op], (
        f"{op}({where}) = {ours[worst]!r}, reference {ref64[worst]!r}: "
        f"{err[worst]:.3f} ulp > {mathlib.MAX_ULP[op]}"
    )
    ref32 = ref64.astype(np.float32)
    zero = ref32 == 0
    bad = np.flatnonzero(zero & (np.signbit(ours) != np.signbit(ref32)))
    assert bad.size == 0, f"{op}: sign of zero differs at {[x[bad[0]] for x in xs]}"


UNARY = [op for op in mathlib.FUNCTIONS if op not in mathlib.BINARY]


@pytest.mark.parametrize("op", UNARY)
def test_f32_unary_within_max_ulp(lib, inputs, op):
    ours = mathlib.call_array(lib, mathlib.FUNCTIONS[op][0], inputs)
    _check(op, ours, mathlib.reference(op, inputs), inputs)


@pytest.mark.parametrize("op", sorted(mathlib.BINARY))
def test_f32_binary_within_max_ulp(lib, pairs, op):
    x, y = pairs
    ours = mathlib.call_array(lib, mathlib.FUNCTIONS[op][0], x, y)
    _check(op, ours, mathlib.reference(op, x, y), x, y)


def test_f32_special_values(lib):
    def f(op: str, *xs: float) -> np.float32:
        arrs = [np.array([v], dtype=np.float32) for v in xs]
        return mathlib.call_array(lib, mathlib.FUNCTIONS[op][0], *arrs)[0]

    inf, nan = np.float32(np.inf), np.float32(np.nan)
    assert np.isnan(f("sine", inf)) and np.isnan(f("cosine", -inf)) and np.isnan(f("tan", nan))
    assert f("exponential", 89.0) == inf and f("exponential", -104.0) == 0
    assert f("exponential", -100.0) > 0  # a denormal, not flushed
    assert f("log", 0.0) == -inf and np.isnan(f("log", -1.0)) and f("log", inf) == inf
    assert f("log", 1e-45) == np.float32(np.log(np.float64(F32_TINY)))
    assert f("power", nan, 0.0) == 1 and f("power", 1.0, nan) == 1
    assert np.isnan(f("power", -8.0, 1.0 / 3.0)) and f("power", -2.0, 3.0) == -8
    assert f("power", -0.0, -3.0) == -inf and f("power", 0.0, -2.0) == inf
    assert f("power", -1.0, inf) == 1 and f("power", -inf, 0.5) == inf
    assert f("atan2", -0.0, -0.0) == np.float32(-np.pi) and np.signbit(f("atan2", -0.0, 1.0))
    assert f("atan2", inf, -inf) == np.float32(3 * np.pi / 4)
    assert f("rsqrt", -0.0) == -inf and f("cbrt", -27.0) == -3


F64_CASES = {
    # op: (low, high) of the random inputs' magnitudes, as powers of ten
    "sine": (-8, 6),
    "cosine": (-8, 6),
    "tan": (-8, 6),
    "exponential": (-8, 2.8),
    "exponential-minus-one": (-8, 2.8),
    "log": (-300, 300),
    "log-plus-one": (-8, 300),
    "tanh": (-8, 2),
    "logistic": (-8, 2.8),
    "sqrt": (-300, 300),
    "rsqrt": (-300, 300),
    "cbrt": (-300, 300),
    "erf": (-8, 1),
}


@pytest.mark.parametrize("op", [*F64_CASES, "power", "atan2"])
def test_f64_against_numpy(lib, op):
    rng = np.random.default_rng(7)
    n = 50_000

    def draw(lo: float, hi: float, signed: bool = True) -> np.ndarray:
        v = 10.0 ** rng.uniform(lo, hi, n)
        return v * rng.choice([-1.0, 1.0], n) if signed else v

    if op == "power":
        xs = (draw(-3, 3, signed=False), rng.uniform(-50, 50, n))
    elif op == "atan2":
        xs = (draw(-30, 30), draw(-30, 30))
    else:
        lo, hi = F64_CASES[op]
        xs = (draw(lo, hi, signed=op not in ("log", "sqrt", "rsqrt", "log-plus-one")),)
    ours = mathlib.call_array(lib, mathlib.FUNCTIONS[op][1], *xs)
    ref = mathlib.reference(op, *xs)
    ulps = np.abs(ours - ref) / np.spacing(np.abs(ref))
    assert np.all(np.isfinite(ours) == np.isfinite(ref))
    finite = np.isfinite(ref)
    assert np.max(ulps[finite]) <= 4, f"{op}: {np.max(ulps[finite])} f64 ulp"


def _vectorized_lines(flags: list[str], src: Path) -> set[int]:
    cc = build.find_compiler()
    proc = subprocess.run(
        [*cc, *flags, "-fopt-info-vec-optimized", "-c", str(src), "-o", "/dev/null"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return {
        int(m.group(1))
        for m in re.finditer(rf"{src.name}:(\d+):\d+: optimized: loop vectorized", proc.stderr)
    }


@pytest.mark.parametrize("march", ["-march=x86-64-v3", "-march=x86-64-v4"])
def test_f32_loops_vectorize(tmp_path, march):
    """Plain loops over the routines vectorize for AVX2 and AVX-512 whatever the host (the
    backend's vector loops call them lane by lane: tests/test_cpu_vectorize.py)."""
    from test_cpu_vectorize import _compiler_accepts

    if not _compiler_accepts(march):
        pytest.skip(f"the C compiler does not accept {march}")
    lines = [mathlib.source()]
    for op in mathlib.FUNCTIONS:
        name = mathlib.FUNCTIONS[op][0]
        args = "a[i], b[i]" if op in mathlib.BINARY else "a[i]"
        lines.append(
            f"void v_{name}(const float *restrict a, const float *restrict b, "
            f"float *restrict o, long n) {{ for (long i = 0; i < n; i++) "
            f"o[i] = {name}({args}); }}"
        )
    src = tmp_path / "vec.c"
    text = "\n".join(lines) + "\n"
    src.write_text(text)
    loop_line = {
        line.split("(")[0].removeprefix("void v_"): number
        for number, line in enumerate(text.splitlines(), start=1)
        if line.startswith("void v_")
    }
    assert len(loop_line) == len(mathlib.FUNCTIONS)
    flags = ["-O3", march, "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off",
             "-std=gnu11"]  # the backend's IEEE-preserving flags (build.BASE_FLAGS)
    done = _vectorized_lines(flags, src)
    missing = [name for name, line in loop_line.items() if line not in done]
    assert not missing, f"not vectorized with {flags}: {missing}"


@pytest.mark.parametrize("w", [4, 8, 16])
def test_vector_forms_match_scalar_bit_for_bit(lib, inputs, w):
    """vmath's vector instantiation (what vector loops call for exp, log, tanh, logistic)
    gives exactly the scalar function's bits on every input, at every vector width (GCC lowers
    the widths the host lacks to pairs), with and without subnormal results."""
    from hlofuse.backends.cpu import vmath
    from hlofuse.backends.cpu.cvec import VecLib

    vl = VecLib()
    names = {op: vl.vmath(op, w) for op in vmath.OPS}
    lines = [mathlib.source(), vl.text()]
    for op, name in names.items():
        lines.append(
            f"void vec_{op}(const float *a, float *o, long n) {{ for (long i = 0; i < n; "
            f"i += {w}) {{ hf_v{w}_f32 x; memcpy(&x, a + i, sizeof x); x = {name}(x); "
            f"memcpy(o + i, &x, sizeof x); }} }}")
    vec = build.load_library("\n".join(lines) + "\n", name=f"vmath_v{w}")
    x = inputs[: inputs.size // w * w]
    opcode = {"exp": "exponential", "log": "log", "tanh": "tanh", "logistic": "logistic",
              "sin": "sine", "cos": "cosine"}
    for op in vmath.OPS:
        want = mathlib.call_array(lib, mathlib.FUNCTIONS[opcode[op]][0], x)
        got = np.empty_like(x)
        getattr(vec, f"vec_{op}")(x.ctypes.data_as(ctypes.c_void_p),
                                  got.ctypes.data_as(ctypes.c_void_p), ctypes.c_long(x.size))
        same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
        assert same.all(), f"{op}: vector {got[~same][:3]} != scalar {want[~same][:3]} " \
                           f"at {x[~same][:3]}"
