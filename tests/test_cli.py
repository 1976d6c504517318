"""The `hlofuse` command line: every subcommand's happy path and its user errors.

Errors must be one clear line on stderr, a non-zero exit status, and never a traceback.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import hlofuse
import hlofuse.backends.cpu
from hlofuse.cli import main

ADD = """HloModule add_module
ENTRY main {
  p0 = f32[4]{0} parameter(0)
  p1 = f32[4]{0} parameter(1)
  ROOT add = f32[4]{0} add(p0, p1)
}
"""

TUPLE_OUT = """HloModule two_out
ENTRY main {
  p0 = s32[3] parameter(0)
  n = s32[3] negate(p0)
  inner = (s32[3], s32[3]) tuple(n, p0)
  ROOT t = (s32[3], (s32[3], s32[3])) tuple(p0, inner)
}
"""


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def add_file(tmp_path: Path) -> Path:
    p = tmp_path / "add.hlo"
    p.write_text(ADD)
    return p


def assert_clean_error(code: int, err: str, *needles: str) -> None:
    assert code != 0
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err


def test_parse_prints_canonical_text(capsys: pytest.CaptureFixture[str], add_file: Path) -> None:
    code, out, _ = run_cli(capsys, "parse", str(add_file))
    assert code == 0
    assert "ROOT add = f32[4]{0} add(p0, p1)" in out
    code, out_long, _ = run_cli(capsys, "parse", "--long", str(add_file))
    assert code == 0
    assert "%add = f32[4]{0} add(f32[4]{0} %p0, f32[4]{0} %p1)" in out_long


def test_run_with_npz_roundtrip(capsys: pytest.CaptureFixture[str], add_file: Path,
                                tmp_path: Path) -> None:
    a = np.arange(4, dtype=np.float32)
    b = np.full(4, 0.5, dtype=np.float32)
    np.savez(tmp_path / "in.npz", in_0=a, in_1=b)
    code, out, _ = run_cli(capsys, "run", str(add_file), "--inputs", str(tmp_path / "in.npz"),
                           "--output", str(tmp_path / "out.npz"))
    assert code == 0
    assert "out_0: float32[4]" in out
    result = np.load(tmp_path / "out.npz")
    assert result.files == ["out_0"]
    np.testing.assert_array_equal(result["out_0"], a + b)


def test_run_flattens_nested_tuple_outputs(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    f = tmp_path / "t.hlo"
    f.write_text(TUPLE_OUT)
    x = np.array([1, -2, 3], dtype=np.int32)
    np.savez(tmp_path / "in.npz", in_0=x)
    code, _, _ = run_cli(capsys, "run", str(f), "--inputs", str(tmp_path / "in.npz"),
                         "--output", str(tmp_path / "out.npz"))
    assert code == 0
    out = np.load(tmp_path / "out.npz")
    assert sorted(out.files) == ["out_0", "out_1", "out_2"]
    np.testing.assert_array_equal(out["out_0"], x)
    np.testing.assert_array_equal(out["out_1"], -x)
    np.testing.assert_array_equal(out["out_2"], x)


def test_run_random_inputs(capsys: pytest.CaptureFixture[str], add_file: Path) -> None:
    code, out, _ = run_cli(capsys, "run", str(add_file), "--random-inputs", "3")
    assert code == 0 and "out_0" in out


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "parse", str(tmp_path / "nope.hlo"))
    assert_clean_error(code, err, "nope.hlo: no such file")


def test_directory_instead_of_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "parse", str(tmp_path))
    assert_clean_error(code, err, "is a directory")


def test_binary_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "bin.hlo"
    f.write_bytes(b"\xff\xfe\x00\x81")
    code, _, err = run_cli(capsys, "parse", str(f))
    assert_clean_error(code, err, "not a text file")


def test_parse_error_names_line_and_column(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    f = tmp_path / "bad.hlo"
    f.write_text(ADD.replace("add(p0, p1)", "ad(p0, p1)"))
    code, _, err = run_cli(capsys, "parse", str(f))
    assert_clean_error(code, err, f"{f}:5:", "unknown opcode 'ad'")


def test_verify_error_names_instruction(capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    f = tmp_path / "bad.hlo"
    f.write_text(ADD.replace("p1 = f32[4]{0}", "p1 = f32[5]{0}"))
    code, _, err = run_cli(capsys, "parse", str(f))
    assert_clean_error(code, err, "add")


def test_run_without_inputs_lists_parameters(capsys: pytest.CaptureFixture[str],
                                             add_file: Path) -> None:
    code, _, err = run_cli(capsys, "run", str(add_file))
    assert_clean_error(code, err, "takes 2 inputs", "in_0: f32[4]", "--inputs")


def test_bad_npz_keys(capsys: pytest.CaptureFixture[str], add_file: Path,
                      tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", in_0=np.zeros(4, np.float32), x=np.zeros(4, np.float32))
    code, _, err = run_cli(capsys, "run", str(add_file), "--inputs", str(tmp_path / "in.npz"))
    assert_clean_error(code, err, "missing in_1", "unexpected x")


def test_not_an_npz(capsys: pytest.CaptureFixture[str], add_file: Path, tmp_path: Path) -> None:
    f = tmp_path / "in.npz"
    f.write_text("hello")
    code, _, err = run_cli(capsys, "run", str(add_file), "--inputs", str(f))
    assert_clean_error(code, err, "in.npz")


def test_missing_npz(capsys: pytest.CaptureFixture[str], add_file: Path, tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "run", str(add_file), "--inputs", str(tmp_path / "x.npz"))
    assert_clean_error(code, err, "x.npz: no such file")


def test_wrong_input_shape(capsys: pytest.CaptureFixture[str], add_file: Path,
                           tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", in_0=np.zeros(5, np.float32), in_1=np.zeros(4, np.float32))
    code, _, err = run_cli(capsys, "run", str(add_file), "--inputs", str(tmp_path / "in.npz"))
    assert_clean_error(code, err, "parameter 0", "f32[4]")


def test_wrong_input_dtype(capsys: pytest.CaptureFixture[str], add_file: Path,
                           tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", in_0=np.zeros(4, np.int32), in_1=np.zeros(4, np.float32))
    code, _, err = run_cli(capsys, "run", str(add_file), "--inputs", str(tmp_path / "in.npz"))
    assert_clean_error(code, err, "parameter 0")


def test_unknown_backend(capsys: pytest.CaptureFixture[str], add_file: Path) -> None:
    code, _, err = run_cli(capsys, "run", str(add_file), "--random-inputs", "0",
                           "--backend", "tpu")
    assert_clean_error(code, err, "unknown backend 'tpu'", "interpreter")


def test_opt_runs_pipeline_and_dumps(capsys: pytest.CaptureFixture[str], add_file: Path,
                                     tmp_path: Path) -> None:
    code, out, _ = run_cli(capsys, "opt", str(add_file), "--dump-dir", str(tmp_path / "d"))
    assert code == 0 and "HloModule" in out
    assert any((tmp_path / "d").iterdir())


def test_opt_unknown_pass_lists_valid_names(capsys: pytest.CaptureFixture[str],
                                            add_file: Path) -> None:
    code, _, err = run_cli(capsys, "opt", str(add_file), "--passes", "dce,no-such-pass")
    assert_clean_error(code, err, "no-such-pass", "dce", "cse")


def test_opt_unknown_pipeline(capsys: pytest.CaptureFixture[str], add_file: Path) -> None:
    code, _, err = run_cli(capsys, "opt", str(add_file), "--pipeline", "nope")
    assert_clean_error(code, err, "nope", "simplify")


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2


def test_demo_quick(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "demo", "--quick")
    assert code == 0
    # kernels per time-loop iteration under none / xla / xla-relaxed
    assert re.search(r"cartpole_separate\s+69\s+4\s+4", out), out
    # the boundary of precomputed's loop, with its rule and a fix
    assert "rule: multi-output-fusion: different loop shapes" in out
    assert "fix:" in out
    html = re.search(r"generated C: (\S+\.html)", out)
    assert html and Path(html.group(1)).stat().st_size > 10_000
    if hlofuse.backends.cpu.available():
        # one timed run per pipeline: none, xla and hlofuse
        assert out.count("outputs match the interpreter") == 3
        assert "from fusion" in out


# -- the cpu backend: run --backend cpu / --profile, emit ----------------------------------------

needs_cc = pytest.mark.skipif(
    not __import__("hlofuse.backends.cpu", fromlist=["available"]).available(),
    reason="no C compiler",
)


@needs_cc
@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_run_backends_agree(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                            backend: str) -> None:
    f = tmp_path / "t.hlo"
    f.write_text(TUPLE_OUT)
    x = np.array([4, -5, 6], dtype=np.int32)
    np.savez(tmp_path / "in.npz", in_0=x)
    code, _, err = run_cli(capsys, "run", str(f), "--backend", backend, "--pipeline", "xla",
                           "--inputs", str(tmp_path / "in.npz"),
                           "--output", str(tmp_path / "out.npz"))
    assert code == 0, err
    assert f"ran on {backend}" in err
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(out["out_1"], -x)
    np.testing.assert_array_equal(out["out_2"], x)


@needs_cc
def test_run_defaults_to_cpu(capsys: pytest.CaptureFixture[str], add_file: Path) -> None:
    code, out, err = run_cli(capsys, "run", str(add_file), "--random-inputs", "1")
    assert code == 0, err
    assert "ran on cpu" in err and "out_0: float32[4]" in out


@needs_cc
def test_run_profile_prints_kernel_table(capsys: pytest.CaptureFixture[str],
                                         add_file: Path) -> None:
    code, out, err = run_cli(capsys, "run", str(add_file), "--random-inputs", "1", "--profile")
    assert code == 0, err
    assert "# profile of add_module" in out
    assert "kernel" in out and "GB/s" in out and "add" in out


def test_run_profile_needs_cpu(capsys: pytest.CaptureFixture[str], add_file: Path) -> None:
    code, _, err = run_cli(capsys, "run", str(add_file), "--random-inputs", "1",
                           "--backend", "interpreter", "--profile")
    assert_clean_error(code, err, "--profile needs a backend that profiles, such as cpu")


def test_run_cpu_without_compiler(capsys: pytest.CaptureFixture[str], add_file: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv("PATH", "")
    code, _, err = run_cli(capsys, "run", str(add_file), "--random-inputs", "1",
                           "--backend", "cpu")
    assert_clean_error(code, err, "no C compiler", "interpreter")
    # without --backend the CLI picks the interpreter itself
    code, out, err = run_cli(capsys, "run", str(add_file), "--random-inputs", "1")
    assert code == 0 and "ran on interpreter" in err and "out_0" in out


def test_emit_prints_c(capsys: pytest.CaptureFixture[str], add_file: Path,
                       tmp_path: Path) -> None:
    code, out, err = run_cli(capsys, "emit", str(add_file))
    assert code == 0, err
    assert "int hf_entry(" in out
    code, out, err = run_cli(capsys, "emit", str(add_file), "--pipeline", "none",
                             "-o", str(tmp_path / "m.c"))
    assert code == 0, err
    assert out == ""
    assert "int hf_entry(" in (tmp_path / "m.c").read_text()


def test_emit_kernel_ir(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`emit --kernel-ir` prints each kernel's optimised kernel IR (one `kernel` per kernel
    the driver runs, loops inside a while body included), for the target asked for."""
    from hlofuse.backends.kernel_ir.dump import kernel_instructions
    from hlofuse.passes.pipelines import run_pipeline
    from hlofuse.text import parse

    text = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
cond {
  s = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  x = f32[64] get-tuple-element(s), index=1
  y = f32[64] sine(x)
  ROOT t = (s32[], f32[64]) tuple(j, y)
}
ENTRY e {
  x = f32[64,100] parameter(0)
  z = f32[] constant(0)
  r = f32[64] reduce(x, z), dimensions={1}, to_apply=add
  zero = s32[] constant(0)
  t = (s32[], f32[64]) tuple(zero, r)
  w = (s32[], f32[64]) while(t), condition=cond, body=body
  ROOT o = f32[64] get-tuple-element(w), index=1
}"""
    f = tmp_path / "loop.hlo"
    f.write_text(text)
    module = parse(text)
    run_pipeline(module, "xla")
    count = len(kernel_instructions(module))
    assert count >= 2  # the reduce, and the sine inside the loop body
    code, out, err = run_cli(capsys, "emit", str(f), "--pipeline", "xla", "--kernel-ir",
                             "--target", "avx2")
    assert code == 0, err
    assert out.count("\nkernel ") == count and "vector 8" in out and "sine.f32(" in out
    code, out, err = run_cli(capsys, "emit", str(f), "--pipeline", "xla", "--kernel-ir",
                             "--target", "scalar")
    assert code == 0, err
    assert out.count("\nkernel ") == count and re.search(r"\) vector \d", out) is None
    code, _, err = run_cli(capsys, "emit", str(f), "--kernel-ir", "--target", "vax")
    assert_clean_error(code, err, "unknown target 'vax'")


def test_emit_errors_are_clean(capsys: pytest.CaptureFixture[str], add_file: Path,
                               tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "emit", str(tmp_path / "nope.hlo"))
    assert_clean_error(code, err, "nope.hlo: no such file")
    code, _, err = run_cli(capsys, "emit", str(add_file), "--pipeline", "nope")
    assert_clean_error(code, err, "nope")


@pytest.mark.usefixtures("private_cpu_cache")
def test_prebuild_compiles_the_libraries_once_and_programs_reuse_them(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`hlofuse prebuild` builds the GEMM units, the runtime and the jax handler into the cache;
    run again, it finds them all there; a program with a dot then compiles no GEMM unit."""
    from hlofuse.backends.cpu import build

    assert main(["prebuild"]) == 0
    first = capsys.readouterr().out
    names = ["hflib_gemm_f32", "hflib_gemm_f64", "hlofuse_runtime", "hlofuse_xla_ffi"]
    for name in names:
        assert f"{name}: built" in first
    assert main(["prebuild"]) == 0
    second = capsys.readouterr().out
    for name in names:
        assert f"{name}: cached" in second
    compiled: list[str] = []
    real = build._compile_object
    monkeypatch.setattr(build, "_compile_object",
                        lambda unit, okey, name, *a: (compiled.append(name),
                                                      real(unit, okey, name, *a))[1])
    text = """HloModule d
ENTRY e {
  a = f32[8,16] parameter(0)
  b = f32[16,4] parameter(1)
  ROOT d = f32[8,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""
    x = np.arange(128, dtype=np.float32).reshape(8, 16) / 100
    y = np.arange(64, dtype=np.float32).reshape(16, 4) / 10
    (got,) = hlofuse.compile(text, backend="cpu")(x, y)
    np.testing.assert_allclose(got, x @ y, rtol=1e-5)
    assert "hlofuse_gemm" not in compiled
