"""cexpr's C expressions against the interpreter, op by op and type by type.

One C file holds a tiny loop `out[i] = store(elementwise(load(a[i]), ...))` for every (opcode,
types) combination the interpreter runs; it is compiled once and each loop is called through
ctypes on inputs full of edge values (zeros of both signs, extremes, NaN, infinities, subnormals,
out-of-range shifts and float->int converts, division by zero) plus random bit patterns. Results
must equal the interpreter's bit for bit (any NaN equals any NaN); transcendental functions may
differ by mathlib's documented ulp bound (one ulp of the type for f16/bf16).

Both subnormal modes (`backends/subnormals.py`): each loop runs in its file's mode (fpenv.py's
`hf_fpcr_enter`, as `hf_entry` does), against the interpreter in the same mode; the "flush"
file holds the cases with a type that flushes.
"""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
import math
import warnings
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest

from hlofuse.backends import interpreter
from hlofuse.backends.cpu import cexpr
from hlofuse.backends.interpreter.numerics import total_order_key
from hlofuse.backends.subnormals import FLUSH_TYPES
from hlofuse.errors import CompileError
from hlofuse.ir.dtypes import DTYPES, DType
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import OPCODES, Category, Opcode
from hlofuse.text import parse

N = 1024
FLOATS = ("f16", "bf16", "f32", "f64")
# The byte-sized integer and IEEE-like float types; NEW: sub-byte integers, 8- and 4-bit floats
# and complex numbers, whose conversions are tested with PARTNERS and each other.
ALL = tuple(t for t, d in DTYPES.items()
            if not (d.is_narrow_int or d.is_small_float or d.is_complex))
NEW = tuple(t for t, d in DTYPES.items() if d.is_narrow_int or d.is_small_float or d.is_complex)
PARTNERS = ("pred", "s8", "u8", "s32", "u64", "f16", "f32", "f64")
TRANSCENDENTAL = {
    Opcode.CBRT, Opcode.COS, Opcode.ERF, Opcode.EXP, Opcode.EXPM1, Opcode.LOG, Opcode.LOG1P,
    Opcode.LOGISTIC, Opcode.SIN, Opcode.TAN, Opcode.TANH, Opcode.ATAN2, Opcode.POWER,
    Opcode.RSQRT, Opcode.ACOS, Opcode.ACOSH, Opcode.ASIN, Opcode.ASINH, Opcode.ATAN, Opcode.ATANH,
    Opcode.COSH, Opcode.SINH,
}
# Complex functions: the C library's against numpy's (a relative bound, finite results only:
# their special-value conventions differ).
COMPLEX_RTOL = {"c64": 1e-5, "c128": 1e-12}
REFERENCE_F64_ULP = 3
SPECIAL = {
    Opcode.CONVERT, Opcode.BITCAST_CONVERT, Opcode.COMPARE, Opcode.SELECT, Opcode.IS_FINITE,
    Opcode.REDUCE_PRECISION, Opcode.STOCHASTIC_CONVERT,
}


def _max_ulp(op: Opcode) -> int:
    """mathlib's documented bound for `op` (a float of ulps, per opcode), rounded up."""
    try:
        from hlofuse.backends.cpu import mathlib
    except ImportError:
        return 4
    bound = getattr(mathlib, "MAX_ULP", 4)
    if isinstance(bound, dict):
        bound = bound.get(op.value, 4)
    return max(1, math.ceil(bound))


@dataclass
class Case:
    op: Opcode
    text: str
    operand_dtypes: tuple[DType, ...]
    result: DType


def _module_text(op: str, operands: tuple[str, ...], result: str, attrs: str = "") -> str:
    params = "\n".join(f"  p{i} = {t}[{N}] parameter({i})" for i, t in enumerate(operands))
    args = ", ".join(f"p{i}" for i in range(len(operands)))
    return f"HloModule m\nENTRY e {{\n{params}\n  ROOT r = {result}[{N}] {op}({args}){attrs}\n}}\n"


def _cases() -> list[Case]:
    out: list[Case] = []

    def add(op: Opcode, operands: tuple[str, ...], result: str, attrs: str = "") -> None:
        text = _module_text(op.value, operands, result, attrs)
        out.append(Case(op, text, tuple(DTYPES[t] for t in operands), DTYPES[result]))

    for op, info in OPCODES.items():
        if info.category is not Category.ELEMENTWISE or op in SPECIAL:
            continue
        for t in ALL + NEW:
            add(op, (t,) * (info.arity or 1), t)
    for f, r, i in (("f32", "u32", "s32"), ("f16", "u16", "s8"), ("f64", "u64", "u64"),
                    ("bf16", "u16", "s4")):
        add(Opcode.STOCHASTIC_CONVERT, (f, r), i)
    for t, part in (("c64", "f32"), ("c128", "f64")):
        for op in (Opcode.ABS, Opcode.REAL, Opcode.IMAG):
            add(op, (t,), part)
        add(Opcode.COMPLEX, (part, part), t)
    for s, d in itertools.product(ALL + NEW, ALL + NEW):
        if (s in NEW or d in NEW) and not {s, d} <= set(NEW + PARTNERS):
            continue
        add(Opcode.CONVERT, (s,), d)
        if s != d and DTYPES[s].bits == DTYPES[d].bits and "pred" not in (s, d):
            add(Opcode.BITCAST_CONVERT, (s,), d)
    for t in ALL + NEW:
        add(Opcode.SELECT, ("pred", t, t), t)
        for direction in ("EQ", "NE", "LT", "LE", "GT", "GE"):
            add(Opcode.COMPARE, (t, t), "pred", f", direction={direction}")
        if DTYPES[t].is_float:
            add(Opcode.IS_FINITE, (t,), "pred")
            for direction in ("EQ", "LT", "GE"):
                add(Opcode.COMPARE, (t, t), "pred", f", direction={direction}, type=TOTALORDER")
            for e, m in ((5, 10), (8, 7), (3, 2), (1, 0), (11, 52), (4, 30), (8, 23)):
                add(Opcode.REDUCE_PRECISION, (t,), t, f", exponent_bits={e}, mantissa_bits={m}")
        elif DTYPES[t].is_integral:
            kind = "UNSIGNED" if DTYPES[t].is_signed else "SIGNED"
            add(Opcode.COMPARE, (t, t), "pred", f", direction=LT, type={kind}")
    return out


def _edges(dt: DType) -> np.ndarray:
    if dt.is_pred:
        return np.array([False, True])
    if dt.is_small_float:  # every encoding
        return np.arange(1 << dt.bits, dtype=np.uint8).view(dt.np)
    if dt.is_complex:
        parts = _edges(DTYPES["f32" if dt.name == "c64" else "f64"])[::3].astype(np.float64)
        re, im = np.meshgrid(parts, parts)
        return _complex(re.reshape(-1), im.reshape(-1), dt)
    if dt.is_narrow_int:
        vals = np.arange(1 << dt.bits) - (1 << (dt.bits - 1) if dt.is_signed else 0)
        return vals.astype(dt.np)
    if dt.is_integral:
        bits = dt.bits
        lo = -(1 << (bits - 1)) if dt.is_signed else 0
        hi = (1 << (bits - 1)) - 1 if dt.is_signed else (1 << bits) - 1
        vals = [0, 1, -1, 2, -2, 3, -3, 7, 8, 15, 16, 31, 32, 33, 63, 64, 65, 100, -100,
                lo, hi, lo + 1, hi - 1, bits - 1, bits, bits + 1]
        u = np.dtype(f"u{bits // 8}")
        return np.array([v % (1 << bits) for v in vals], dtype=u).view(dt.np)
    f32 = np.finfo(np.float32)
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, 3.0, -7.0,
            100.5, -129.0, 127.5, 255.5, 65504.0, 65520.0, -1e5, 2.0**31, -(2.0**31), 2.0**32,
            2.0**63, -(2.0**63), 2.0**64, 1e30, -1e30, float(f32.max), float(f32.tiny),
            float(f32.smallest_subnormal), 6e-8, -3e-5, 1e-300, 5e-324, 1e300,
            np.inf, -np.inf, np.nan, -np.nan]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.array(vals, dtype=np.float64).astype(dt.np)


def _complex(re: np.ndarray, im: np.ndarray, dt: DType) -> np.ndarray:
    out = np.empty(len(re), dtype=dt.np)
    out.real, out.imag = re, im
    return out


def _random(dt: DType, n: int, rng: np.random.Generator) -> np.ndarray:
    if dt.is_pred:
        return rng.integers(0, 2, n).astype(bool)
    if dt.is_small_float or dt.is_narrow_int:  # uniformly over the encodings
        return _edges(dt)[rng.integers(0, 1 << dt.bits, n)]
    if dt.is_complex:
        part = DTYPES["f32" if dt.name == "c64" else "f64"]
        return _complex(_random(part, n, rng), _random(part, n, rng), dt)
    u = np.dtype(f"u{dt.itemsize}")
    bits = rng.integers(0, np.iinfo(u).max, n, dtype=u, endpoint=True).view(dt.np)
    if dt.is_integral:
        small = rng.integers(-40, 40, n).astype(dt.np)
        return np.where(rng.random(n) < 0.5, bits, small)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaled = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(dt.np)
    return np.where(rng.random(n) < 0.5, bits, scaled)


def _inputs(case: Case, rng: np.random.Generator) -> list[np.ndarray]:
    arrays = []
    for k, dt in enumerate(case.operand_dtypes):
        edges = _edges(dt)
        if k == 0:
            head = np.tile(edges, len(edges))
        elif k == 1:
            head = np.repeat(edges, len(edges))
        else:
            head = rng.permutation(np.tile(edges, len(edges)))
        head = head[:N // 2]
        arrays.append(np.concatenate([head, _random(dt, N - len(head), rng)]).astype(dt.np))
    return arrays


def _storage(x: np.ndarray, dt: DType) -> np.ndarray:
    if dt.is_pred:
        return np.ascontiguousarray(x.astype(np.uint8))
    return np.ascontiguousarray(x)


@dataclass
class Built:
    case: Case
    fn: str
    inputs: list[np.ndarray]
    expected: np.ndarray


def _flushes(case: Case) -> bool:
    return any(dt.name in FLUSH_TYPES for dt in (*case.operand_dtypes, case.result))


@pytest.fixture(scope="module", params=["keep", "flush"])
def compiled(request: pytest.FixtureRequest) -> tuple[list[Built], list[str], ctypes.CDLL]:
    """Every case the interpreter runs, its expected output, and the compiled C library, with
    subnormals kept or flushed (`request.param`)."""
    from hlofuse.backends.cpu import build, fpenv

    try:
        build.find_compiler()
    except CompileError:
        pytest.skip("no C compiler")
    mode = request.param
    rng = np.random.default_rng(0)
    built: list[Built] = []
    missing: list[str] = []
    body: list[str] = []
    for k, case in enumerate(_cases()):
        inputs = _inputs(case, rng)
        if mode == "flush" and not _flushes(case):
            continue
        try:
            module = parse(case.text)
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                expected = interpreter.run(module, *inputs, subnormals=mode)[0]
        except Exception:  # the interpreter does not run this combination
            continue
        root: Instruction = module.entry.root
        loads = [cexpr.load(dt, f"a{j}[i]") for j, dt in enumerate(case.operand_dtypes)]
        try:
            expr = cexpr.elementwise(root, loads)
        except cexpr.UnsupportedOpError as exc:
            missing.append(f"{case.op.value} {case.text.splitlines()[-2].strip()}: {exc}")
            continue
        fn = f"t_{k}"
        params = [f"const {cexpr.ctype(dt)} *restrict a{j}" for j, dt in
                  enumerate(case.operand_dtypes)]
        params.append(f"{cexpr.ctype(case.result)} *restrict out")
        body.append(
            f"void {fn}({', '.join(params)}, int n) {{\n"
            "  const hf_fpcr_t fpcr = hf_fpcr_enter();\n"
            f"  for (int i = 0; i < n; i++) out[i] = {cexpr.store(case.result, expr)};\n"
            "  hf_fpcr_leave(fpcr);\n}\n"
        )
        built.append(Built(case, fn, inputs, np.asarray(expected)))
    source = fpenv.define(mode) + cexpr.prelude() + "".join(body)
    lib = build.load_library(source, name=f"test_cpu_cexpr_{mode}")
    return built, missing, lib


def _call(lib: ctypes.CDLL, b: Built) -> np.ndarray:
    ins = [_storage(x, dt) for x, dt in zip(b.inputs, b.case.operand_dtypes, strict=True)]
    out = np.zeros(N, dtype=np.uint8 if b.case.result.is_pred else b.case.result.np)
    fn = getattr(lib, b.fn)
    fn(*[ctypes.c_void_p(x.ctypes.data) for x in ins], ctypes.c_void_p(out.ctypes.data),
       ctypes.c_int(N))
    return out.astype(bool) if b.case.result.is_pred else out


def _key(x: np.ndarray) -> np.ndarray:
    it = np.dtype(f"i{x.dtype.itemsize}")
    i = np.ascontiguousarray(x).view(it).astype(np.int64)
    return np.where(i < 0, -(i & np.iinfo(it).max), i)


def _mismatches(b: Built, got: np.ndarray) -> np.ndarray:
    exp = b.expected
    dt = b.case.result
    if dt.is_complex:
        if b.case.op in TRANSCENDENTAL:
            ok = ~np.isfinite(exp) | (np.abs(got - exp) <= COMPLEX_RTOL[dt.name] * np.abs(exp))
            return np.flatnonzero(~ok)
        part = dataclasses.replace(b, case=dataclasses.replace(
            b.case, result=DTYPES["f32" if dt.name == "c64" else "f64"]))
        bad_re = _mismatches(dataclasses.replace(part, expected=exp.real), got.real.copy())
        bad_im = _mismatches(dataclasses.replace(part, expected=exp.imag), got.imag.copy())
        return np.union1d(bad_re, bad_im)
    if dt.is_small_float:
        gn, en = np.isnan(got.astype(np.float64)), np.isnan(exp.astype(np.float64))
        dist = np.abs(total_order_key(got) - total_order_key(exp))
        tol = 1 if b.case.op in TRANSCENDENTAL else 0
        return np.flatnonzero((gn != en) | (~gn & ~en & (dist > tol)))
    if not dt.is_float:
        return np.flatnonzero(got != exp)
    with np.errstate(invalid="ignore"):
        gn, en = np.isnan(got.astype(np.float64)), np.isnan(exp.astype(np.float64))
    if b.case.op in TRANSCENDENTAL:
        # f16/bf16: f32 math rounded to the type is within one ulp of the interpreter's f64
        # math rounded once. f64: the interpreter's own numpy functions are not correctly
        # rounded (up to a few ulp, e.g. SVML), so allow that on top of mathlib's bound.
        tol = {"f16": 1, "bf16": 1, "f32": _max_ulp(b.case.op)}.get(
            dt.name, _max_ulp(b.case.op) + REFERENCE_F64_ULP)
        far = np.abs(_key(got) - _key(exp)) > tol
        return np.flatnonzero((gn != en) | (~gn & ~en & far))
    differ = _key(got) != _key(exp)
    return np.flatnonzero((gn != en) | (~gn & ~en & differ))


def _describe(b: Built, got: np.ndarray, bad: np.ndarray) -> str:
    root = b.case.text.splitlines()[-2].strip()
    rows = []
    for i in bad[:4]:
        args = ", ".join(repr(x[i]) for x in b.inputs)
        rows.append(f"    ({args}) -> C {got[i]!r}, interpreter {b.expected[i]!r}")
    return f"{root} [{b.case.operand_dtypes[0]}]: {len(bad)} mismatches\n" + "\n".join(rows)


OPS = sorted({c.op for c in _cases()}, key=lambda o: o.value)


@pytest.mark.parametrize("op", OPS, ids=[o.value for o in OPS])
def test_matches_interpreter(compiled: tuple[list[Built], list[str], ctypes.CDLL],
                             op: Opcode) -> None:
    built, missing, lib = compiled
    mine = [b for b in built if b.case.op is op]
    flush_file = bool(built) and all(_flushes(b.case) for b in built)
    assert mine or op in (Opcode.IMAG,) or flush_file, f"the interpreter ran no case of {op.value}"
    failures = []
    for b in mine:
        got = _call(lib, b)
        bad = _mismatches(b, got)
        if len(bad):
            failures.append(_describe(b, got, bad))
    unsupported = [m for m in missing if m.startswith(op.value + " ")]
    assert not unsupported, "cexpr refuses what the interpreter runs:\n" + "\n".join(unsupported)
    assert not failures, "\n".join(failures)


def _nans(dt: DType) -> np.ndarray:
    """NaNs with payloads, both signs, quiet and signaling (none for non-float types)."""
    if not dt.is_float or dt.is_small_float:
        return np.zeros(0, dt.np)
    exp = {16: 5, 32: 8, 64: 11}[dt.bits] if dt.name != "bf16" else 8
    man = dt.bits - 1 - exp
    base = ((1 << exp) - 1) << man
    pats = [base | 1, base | (1 << (man - 1)) | 5, base | ((1 << man) - 1), base | 2]
    pats += [p | (1 << (dt.bits - 1)) for p in pats]
    return np.array(pats, dtype=f"u{dt.itemsize}").view(dt.np)


def test_literals_round_trip(compiled: tuple[list[Built], list[str], ctypes.CDLL]) -> None:
    """`literal` and `array_initializer` give the exact values, including -0, inf, nan,
    subnormals and integer extremes."""
    from hlofuse.backends.cpu import build

    rng = np.random.default_rng(1)
    body = []
    arrays = {}
    for name in ALL + NEW:
        dt = DTYPES[name]
        values = np.concatenate([_edges(dt), _random(dt, 64, rng), _nans(dt)]).astype(dt.np)
        arrays[name] = values
        ct = cexpr.ctype(dt)
        body.append(f"static const {ct} init_{name}[] = {cexpr.array_initializer(values, dt)};\n")
        lits = ", ".join(cexpr.store(dt, cexpr.literal(v, dt)) for v in values)
        body.append(f"void lit_{name}({ct} *out) {{\n  const {ct} v[] = {{{lits}}};\n"
                    f"  memcpy(out, v, sizeof v);\n}}\n"
                    f"void arr_{name}({ct} *out) {{ memcpy(out, init_{name}, sizeof init_{name});"
                    " }\n")
    lib = build.load_library(cexpr.prelude() + "".join(body), name="test_cpu_cexpr_literals")
    for name, values in arrays.items():
        dt = DTYPES[name]
        for kind in ("lit", "arr"):
            out = np.zeros(len(values), dtype=np.uint8 if dt.is_pred else dt.np)
            getattr(lib, f"{kind}_{name}")(ctypes.c_void_p(out.ctypes.data))
            want = _storage(values, dt)
            if dt.is_complex or dt.is_narrow_int or dt.is_small_float:  # the storage bytes
                np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8),
                                              err_msg=f"{kind} {name}")
            elif dt.is_float:  # bit for bit: -0, NaN sign and payload, subnormals
                u = f"u{dt.itemsize}"
                np.testing.assert_array_equal(out.view(u), want.view(u), err_msg=f"{kind} {name}")
            else:
                np.testing.assert_array_equal(out, want, err_msg=f"{kind} {name}")


def test_unsupported_names_instruction() -> None:
    module = parse(_module_text("bitcast-convert", ("f32",), "f16").replace(
        f"f16[{N}]", f"f16[{N},2]"))
    with pytest.raises(cexpr.UnsupportedOpError, match=r"r: bitcast-convert.*interpreter"):
        cexpr.elementwise(module.entry.root, ["x"])


def test_types() -> None:
    assert cexpr.ctype(DTYPES["pred"]) == "uint8_t"
    assert cexpr.ctype(DTYPES["bf16"]) == "uint16_t"
    assert cexpr.compute_type(DTYPES["f16"]) == "float"
    assert cexpr.compute_type(DTYPES["s64"]) == "int64_t"
    assert cexpr.load(DTYPES["f32"], "x") == "x"
    assert ml_dtypes.bfloat16 == DTYPES["bf16"].np


def _round_trip(t: str) -> str:
    return cexpr.store(DTYPES[t], cexpr.load(DTYPES[t], "a[i]"))


def test_half_conversions_exhaustive() -> None:
    """Every f16/bf16 bit pattern survives load+store unchanged (NaN payloads included); f32 and
    f64 values round to f16/bf16 exactly like numpy/ml_dtypes (1M random bit patterns plus every
    value halfway between neighbouring f16s)."""
    from hlofuse.backends.cpu import build

    source = cexpr.prelude() + "".join(
        f"void rt_{t}(const uint16_t *a, uint16_t *o, int n) {{"
        f" for (int i = 0; i < n; i++) o[i] = {_round_trip(t)}; }}\n"
        f"void from32_{t}(const float *a, uint16_t *o, int n) {{"
        f" for (int i = 0; i < n; i++) o[i] = {cexpr.store(DTYPES[t], 'a[i]')}; }}\n"
        for t in ("f16", "bf16")
    ) + (
        "void from64_f16(const double *a, uint16_t *o, int n) {"
        " for (int i = 0; i < n; i++) o[i] = hf_f64_to_f16(a[i]); }\n"
    )
    lib = build.load_library(source, name="test_cpu_cexpr_half")

    def call(fn: str, x: np.ndarray) -> np.ndarray:
        out = np.zeros(x.size, np.uint16)
        getattr(lib, fn)(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(out.ctypes.data),
                         ctypes.c_int(x.size))
        return out

    every = np.arange(1 << 16, dtype=np.uint16)
    for t in ("f16", "bf16"):
        np.testing.assert_array_equal(call(f"rt_{t}", every), every, err_msg=t)
    rng = np.random.default_rng(2)
    halves = every.view(np.float16).astype(np.float64)
    with np.errstate(invalid="ignore"):
        sums = halves[:-1] + halves[1:]
    mids = (sums / 2)[np.isfinite(sums)]
    f32 = np.concatenate([rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint32).view(np.float32),
                          mids.astype(np.float32)])
    f64 = np.concatenate([rng.integers(0, 1 << 64, 1 << 20, dtype=np.uint64).view(np.float64),
                          (rng.standard_normal(1 << 16) * 1e-3), mids, np.nextafter(mids, 0)])
    with np.errstate(all="ignore"):
        cases = [("from32_f16", f32, f32.astype(np.float16)),
                 ("from32_bf16", f32, f32.astype(ml_dtypes.bfloat16)),
                 ("from64_f16", f64, f64.astype(np.float16))]
    for fn, x, want in cases:
        got = call(fn, np.ascontiguousarray(x)).view(want.dtype)
        nan = np.isnan(want.astype(np.float32))
        assert (np.isnan(got.astype(np.float32)) == nan).all(), fn
        bad = np.flatnonzero(got.view(np.uint16)[~nan] != want.view(np.uint16)[~nan])
        assert bad.size == 0, (fn, x[~nan][bad[:5]], got[~nan][bad[:5]], want[~nan][bad[:5]])
