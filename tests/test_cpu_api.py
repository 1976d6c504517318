"""The cpu backend's user-facing side: `CpuExecutable`, `hlofuse.compile`, `hlofuse.jit`, profiles,
and the errors a user can meet (bad inputs, no C compiler, C that does not compile).

Tests marked "handwritten" call `CpuExecutable` with a hand-written C program, so they check the
executable's calling convention independently of the code generator.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import hlofuse
from hlofuse.api import Executable
from hlofuse.backends import cpu, interpreter
from hlofuse.backends.cpu import build
from hlofuse.backends.cpu.contract import Kernel, Program
from hlofuse.backends.cpu.executable import CpuExecutable, NativeRuntimeError
from hlofuse.errors import CompileError, HloError, InputError
from hlofuse.ir.module import Module
from hlofuse.text import parse

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

ADD = """HloModule add_module
ENTRY main {
  p0 = f32[4]{0} parameter(0)
  p1 = f32[4]{0} parameter(1)
  ROOT add = f32[4]{0} add(p0, p1)
}
"""

# A tuple parameter and a tuple result: ((s32[3], pred[3]), f32[]) -> (s32[3], f32[]).
TUPLES = """HloModule tuples
ENTRY main {
  p0 = (s32[3], pred[3]) parameter(0)
  p1 = f32[] parameter(1)
  a = s32[3] get-tuple-element(p0), index=0
  b = pred[3] get-tuple-element(p0), index=1
  zero = s32[] constant(0)
  z = s32[3] broadcast(zero), dimensions={}
  s = s32[3] select(b, a, z)
  ROOT t = (s32[3], f32[]) tuple(s, p1)
}
"""

HAND_ADD = r"""
#include <stdint.h>
#ifdef HF_PROFILE
uint64_t hf_prof_ns[1];
uint64_t hf_prof_calls[1];
#endif
static void k_add(const float *in0, const float *in1, float *out0) {
  for (int i = 0; i < 4; i++) out0[i] = in0[i] + in1[i];
}
int hf_entry(void *const *args, void *const *results) {
  k_add((const float *)args[0], (const float *)args[1], (float *)results[0]);
#ifdef HF_PROFILE
  hf_prof_calls[0] += 1;
  hf_prof_ns[0] += 1000;
#endif
  return 0;
}
"""

HAND_TUPLES = r"""
#include <stdint.h>
int hf_entry(void *const *args, void *const *results) {
  const int32_t *a = (const int32_t *)args[0];
  const uint8_t *b = (const uint8_t *)args[1];
  const float *c = (const float *)args[2];
  int32_t *s = (int32_t *)results[0];
  for (int i = 0; i < 3; i++) s[i] = b[i] ? a[i] : 0;
  *(float *)results[1] = *c;
  return 0;
}
"""

HAND_FAIL = r"""
int hf_entry(void *const *args, void *const *results) { return 7; }
"""


def _hand(text: str, source: str) -> CpuExecutable:
    from hlofuse.ir.shape import leaves

    module = parse(text)
    ins = tuple(s for p in module.entry.parameters for s in leaves(p.shape))
    outs = tuple(leaves(module.entry.root.shape))
    kernel = Kernel("k_add", "", ins, outs, "add", "loop")
    return CpuExecutable(module, Program(source, ins, outs, (kernel,)))


def _f32(*values: float) -> np.ndarray:
    return np.array(values, np.float32)


# -- the executable on hand-written C ------------------------------------------------------------


def test_handwritten_call_returns_fresh_outputs() -> None:
    exe = _hand(ADD, HAND_ADD)
    a, b = _f32(1, 2, 3, 4), _f32(10, 20, 30, 40)
    (out,) = exe(a, b)
    np.testing.assert_array_equal(out, _f32(11, 22, 33, 44))
    (again,) = exe(a, b)
    assert again is not out and out.flags.writeable and out.flags.c_contiguous


def test_handwritten_noncontiguous_and_readonly_inputs() -> None:
    exe = _hand(ADD, HAND_ADD)
    a = np.arange(8, dtype=np.float32)[::2]  # strided: must be copied, not read with stride 1
    b = _f32(1, 1, 1, 1)
    b.flags.writeable = False
    (out,) = exe(a, b)
    np.testing.assert_array_equal(out, _f32(1, 3, 5, 7))


def test_handwritten_tuple_parameter_and_result() -> None:
    exe = _hand(TUPLES, HAND_TUPLES)
    a = np.array([5, -6, 7], np.int32)
    b = np.array([True, False, True])
    got = exe((a, b), np.float32(2.5))  # a numpy scalar for f32[]
    want = interpreter.run(parse(TUPLES), (a, b), np.float32(2.5))
    assert [g.dtype for g in got] == [w.dtype for w in want]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((_f32(1, 2, 3, 4),), "takes 2 argument(s)"),
        ((_f32(1, 2, 3, 4), _f32(1, 2, 3)), "parameter 1 (p1): expected f32[4], got f32[3]"),
        ((_f32(1, 2, 3, 4), np.zeros(4, np.float64)),
         "parameter 1 (p1): expected f32[4], got f64[4]"),
        (([1.0, 2.0, 3.0, 4.0], _f32(1, 2, 3, 4)), "parameter 0 (p0)"),
    ],
    ids=["count", "shape", "dtype", "list"],
)
def test_handwritten_input_errors_name_the_parameter(args: tuple, needle: str) -> None:
    exe = _hand(ADD, HAND_ADD)
    with pytest.raises(InputError) as info:
        exe(*args)
    assert needle in str(info.value)


def test_handwritten_tuple_parameter_errors() -> None:
    exe = _hand(TUPLES, HAND_TUPLES)
    with pytest.raises(InputError, match=r"parameter 0 \(p0\)"):
        exe(np.zeros(3, np.int32), np.float32(1))
    with pytest.raises(InputError, match=r"parameter 0 \(p0\)"):
        exe((np.zeros(3, np.int32), np.zeros(3, np.int32)), np.float32(1))


def test_handwritten_failure_status_is_an_error() -> None:
    exe = _hand(ADD, HAND_FAIL)
    with pytest.raises(NativeRuntimeError, match="status 7"):
        exe(_f32(1, 2, 3, 4), _f32(1, 2, 3, 4))


def test_handwritten_profile_reads_the_counters() -> None:
    exe = _hand(ADD, HAND_ADD)
    prof = exe.profile(_f32(1, 2, 3, 4), _f32(1, 2, 3, 4), repeat=3)
    (row,) = prof.rows
    assert (row.kernel, row.instruction, row.kind, row.calls, row.total_ns) == (
        "k_add", "add", "loop", 3, 3000)
    assert row.bytes_per_call == 48 and row.ns_per_call == 1000
    assert row.gb_per_s == pytest.approx(0.048)
    d = prof.to_dict()
    assert d["kernels"][0]["calls"] == 3 and d["repeat"] == 3
    text = str(prof)
    assert "k_add" in text and "GB/s" in text and "1.0 us" in text
    # counters restart at every profile() call
    assert exe.profile(_f32(1, 2, 3, 4), _f32(1, 2, 3, 4)).rows[0].calls == 1


# -- compile / jit --------------------------------------------------------------------------------


def test_compile_defaults_to_cpu_and_hlofuse() -> None:
    exe = hlofuse.compile(ADD)
    assert (exe.backend, exe.pipeline) == ("cpu", "hlofuse")
    a, b = _f32(1, 2, 3, 4), _f32(0.5, 0.5, 0.5, 0.5)
    (out,) = exe(a, b)
    np.testing.assert_array_equal(out, a + b)
    assert "hf_entry" in exe.source
    prof = exe.profile(a, b)
    assert sum(r.calls for r in prof.rows) >= 1
    assert len(prof.rows) == len(exe._runner.program.kernels)


def test_compile_tuple_module_matches_interpreter() -> None:
    exe = hlofuse.compile(TUPLES)
    args = ((np.array([1, 2, 3], np.int32), np.array([True, False, True])), np.float32(4))
    got = exe(*args)
    want = interpreter.run(parse(TUPLES), *args)
    assert isinstance(got, tuple) and len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_compile_input_errors_name_the_parameter() -> None:
    exe = hlofuse.compile(ADD)
    with pytest.raises(InputError, match=r"parameter 0 \(p0\): expected f32\[4\], got s32\[4\]"):
        exe(np.zeros(4, np.int32), _f32(1, 2, 3, 4))


def test_interpreter_executable_has_no_profile_or_source() -> None:
    exe = hlofuse.compile(ADD, backend="interpreter")
    (out,) = exe(_f32(1, 2, 3, 4), _f32(1, 2, 3, 4))
    np.testing.assert_array_equal(out, _f32(2, 4, 6, 8))
    with pytest.raises(HloError, match="profile is not available on the 'interpreter' backend"):
        exe.profile(_f32(1, 2, 3, 4), _f32(1, 2, 3, 4))
    with pytest.raises(HloError, match="source is not available on the 'interpreter' backend"):
        _ = exe.source


def test_unknown_backend() -> None:
    with pytest.raises(HloError,
                       match="unknown backend 'tpu'; available: cpu, interpreter, gpu"):
        hlofuse.compile(ADD, backend="tpu")


def test_missing_compiler_names_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv("PATH", "")
    assert not cpu.available()
    with pytest.raises(build.CompilerNotFoundError) as info:
        hlofuse.compile(ADD)
    assert "interpreter" in str(info.value)
    assert isinstance(info.value, CompileError)
    exe = hlofuse.compile(ADD, backend="interpreter")  # the fallback still works
    assert exe(_f32(1, 1, 1, 1), _f32(1, 1, 1, 1))[0].tolist() == [2, 2, 2, 2]


def test_c_compile_failure_keeps_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path))

    def broken(module: Module, *options: object, **settings: object) -> Program:
        shape = module.entry.root.shape
        source = f"int hf_entry(void *const *a, void *const *r) {{ return @; }} /* {tmp_path} */"
        return Program(source, (shape, shape), (shape,), ())

    monkeypatch.setattr(cpu, "generate", broken)
    with pytest.raises(build.CCompileError) as info:
        hlofuse.compile(ADD)
    path = Path(info.value.path)
    assert path.exists() and str(path) in str(info.value)
    assert "return @;" in path.read_text()


def test_c_compile_error_names_the_kernel_and_its_instruction(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A C compile error (an hlofuse bug) says which kernel function it is in and which HLO
    instruction that kernel computes, whatever else the file holds."""
    from hlofuse.backends.cpu import kernels

    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_LOADED", {})

    class Broken(kernels.KernelPrinter):
        def print(self) -> str:
            text = super().print()
            head, brace, body = text.partition(")\n{\n")
            return head + brace + "    int x = @;\n" + body

    monkeypatch.setattr(kernels, "KernelPrinter", Broken)
    with pytest.raises(build.CCompileError) as info:
        hlofuse.compile(ADD)
    exc = info.value
    assert len(exc.functions) == 1 and exc.functions[0].startswith("add_"), exc.functions
    assert exc.instructions == ("add",)
    assert f"in {exc.functions[0]}, computing instruction add (exit" in str(exc)
    assert "int x = @;" in Path(exc.path).read_text()


def test_compile_errors_locate_functions_and_outlined_loops(tmp_path: Path) -> None:
    from hlofuse.backends.cpu import compile_errors

    c = tmp_path / "u.c"
    c.write_text("static inline int hf_helper(int a)\n{\n    return a;\n}\n"
                 "HF_KERNEL void fused_add_1f0c9a2e(const float *restrict in0)\n{\n"
                 "    int x = @;\n}\n"
                 "static void fused_mul_2e_p1(const float *in0, int64_t hf_lo)\n{\n  @;\n}\n")
    stderr = (f"{c}: In function 'fused_add_1f0c9a2e':\n{c}:7:13: error: expected expression\n"
              f"{c}:11:3: error: expected expression\n{c}:3:5: warning: unused\n")
    found = compile_errors.failing_functions(stderr, c)
    assert found == ("fused_add_1f0c9a2e", "fused_mul_2e_p1")
    kernels = [("fused_add_1f0c9a2e", "add.1"), ("fused_mul_2e", "mul.2"),
               ("fused_add_1f0c9a2e", "add.7")]
    assert compile_errors.instructions_of(found, kernels) == ("add.1", "add.7", "mul.2")
    assert compile_errors.instructions_of(("fused_mul_2e_p1_t",), kernels) == ("mul.2",)
    assert compile_errors.failing_functions("ld: cannot find -lfoo\n", c) == ()


# -- jit -----------------------------------------------------------------------------------------

jax = pytest.importorskip("jax")
jnp = jax.numpy


def test_jit_defaults_to_cpu() -> None:
    def f(x: object, y: object) -> object:
        return jnp.sin(x) * y + 1.0

    x, y = np.linspace(-2, 2, 16, dtype=np.float32), np.full(16, 3.0, np.float32)
    g = hlofuse.jit(f)
    assert g.backend_for(x, y) == "cpu"
    np.testing.assert_allclose(np.asarray(g(x, y)), np.sin(x) * y + 1.0, rtol=1e-6, atol=1e-6)


def test_jit_falls_back_to_interpreter_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(module: object, *options: object, **settings: object) -> Program:
        raise CompileError("instruction fft.1: the cpu backend does not support opcode fft")

    monkeypatch.setattr(cpu, "generate", refuse)
    x = np.arange(4, dtype=np.float32)
    g = hlofuse.jit(lambda v: v * 2.0)
    with pytest.warns(RuntimeWarning, match="does not support opcode fft"):
        out = g(x)
    np.testing.assert_array_equal(np.asarray(out), x * 2)
    assert g.backend_for(x) == "interpreter"
    explicit = hlofuse.jit(lambda v: v * 2.0, backend="cpu")
    with pytest.raises(CompileError, match="opcode fft"):
        explicit(x)


def test_jit_explicit_interpreter() -> None:
    g = hlofuse.jit(lambda v: v + 1, backend="interpreter", pipeline=None)
    x = np.arange(3, dtype=np.int32)
    np.testing.assert_array_equal(np.asarray(g(x)), x + 1)
    assert g.backend_for(x) == "interpreter"


def test_executable_is_exported() -> None:
    assert hlofuse.Executable is Executable
