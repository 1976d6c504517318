"""The kernel IR printed as Triton (backends/gpu/triton_print.py), run under Triton's
interpreter on the CPU (TRITON_INTERPRET=1, torch tensors) and checked against the HLO
interpreter, kernel by kernel. Needs the optional `gpu` extra (torch, triton): skipped
without it. Never needs a GPU."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # (before triton is imported: triton.language's own jitted
    os.environ.setdefault("TRITON_INTERPRET", "1")  # helpers are made interpreted then)
pytest.importorskip("triton")

from cpu_lower_harness import compare, reference  # noqa: E402
from hlofuse.backends.gpu.triton_print import (  # noqa: E402
    GpuPrintError,
    TritonKernel,
    print_kernel,
)
from hlofuse.backends.kernel_ir import ir  # noqa: E402
from hlofuse.backends.kernel_ir.lower import lower_kernel  # noqa: E402
from hlofuse.backends.kernel_ir.passes import optimize  # noqa: E402
from hlofuse.backends.kernel_ir.passes.grid import grid  # noqa: E402
from hlofuse.backends.kernel_ir.target import Target  # noqa: E402
from hlofuse.ir.instruction import Instruction  # noqa: E402
from hlofuse.passes.pipelines import run_pipeline  # noqa: E402
from hlofuse.text import parse  # noqa: E402
from test_kernel_ir_pyprint import EXAMPLES, kernels, random_operands  # noqa: E402


def mapped(instr: Instruction, block: int = 32) -> ir.Kernel:
    """The target-independent kernel IR (the scalar target, one thread) and its GPU mapping."""
    return grid(optimize(lower_kernel(instr), Target.named("scalar"), threads=1, check=True),
                block)


def check(instr: Instruction, seed: int = 0, block: int = 32) -> ir.Kernel:
    kernel = mapped(instr, block)
    tk = TritonKernel(kernel)
    args, flat = random_operands(instr, seed)
    want = reference(instr, args)
    got = tk.run([np.ascontiguousarray(x) for x in flat])
    assert len(got) == len(want)
    for j, (g, w) in enumerate(zip(got, want, strict=True)):
        g = g.cpu().numpy()[: max(1, w.size)].reshape(w.shape)
        compare(g.astype(w.dtype), w, 1e-5, 1e-5, f"output {j}\n{tk.source}")
    return kernel


ELEMENTWISE = """HloModule e
ENTRY e {
  x = f32[1000] parameter(0)
  y = f32[1000] parameter(1)
  a = f32[1000] multiply(x, y)
  e = f32[1000] exponential(a)
  c = pred[1000] compare(x, y), direction=GT
  m = f32[1000] maximum(e, y)
  ROOT s = f32[1000] select(c, m, a)
}"""

ROW_REDUCE = """HloModule r
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  x = f32[37,50] parameter(0)
  z = f32[] constant(0)
  t = f32[37,50] tanh(x)
  ROOT r = f32[37] reduce(t, z), dimensions={1}, to_apply=add
}"""

TRANSPOSE_PAD = """HloModule t
ENTRY e {
  x = f32[6,9] parameter(0)
  t = f32[9,6] transpose(x), dimensions={1,0}
  z = f32[] constant(-1)
  ROOT p = f32[11,8] pad(t, z), padding=1_1x0_2
}"""


@pytest.mark.parametrize("text", [ELEMENTWISE, ROW_REDUCE, TRANSPOSE_PAD],
                         ids=["elementwise", "row_reduce", "transpose_pad"])
def test_kernels_match_the_interpreter(text: str) -> None:
    module = parse(text)
    run_pipeline(module, "xla")
    ks = kernels(module)
    assert ks
    for instr in ks:
        for seed in (0, 1):
            check(instr, seed)


# example -> kernels (under `xla`) that must print and match; the rest are refused with a
# GpuPrintError (a dot's library call, power, bitcast-convert, a local of several elements)
EXAMPLE_KERNELS = {"softmax": 2, "layernorm": 2, "adam_update": 5, "cartpole_separate": 6,
                   "cartpole_precomputed": 7, "cartpole_baseline": 27}


@pytest.mark.parametrize("name", list(EXAMPLE_KERNELS))
def test_examples(name: str) -> None:
    module = parse((EXAMPLES / f"{name}.hlo").read_text())
    run_pipeline(module, "xla")
    ran = 0
    for instr in kernels(module):
        try:
            check(instr)
        except GpuPrintError:
            continue  # (an op or form without a Triton form yet: refused, never wrong)
        ran += 1
    assert ran >= EXAMPLE_KERNELS[name]


def test_grid_pass_records_why() -> None:
    """One loop of independent iterations is spread over programs; the printer reads that."""
    module = parse(ELEMENTWISE)
    run_pipeline(module, "xla")
    (instr,) = kernels(module)
    kernel = mapped(instr, block=64)
    assert kernel.grid is not None and kernel.grid.grid_loop is not None
    mode, why = kernel.grid.modes[id(kernel.grid.grid_loop)]
    assert mode == "grid" and "independent" in why
    src = print_kernel(kernel)
    assert "tl.program_id(0)" in src and "pid * 64" in src
    assert "for c" not in src  # no in-program chunk loop


def test_unsupported_op_is_refused_naming_the_kernel() -> None:
    module = parse("""HloModule u
ENTRY e {
  x = f32[64] parameter(0)
  ROOT r = f32[64] erf(x)
}""")
    (instr,) = kernels(module)
    with pytest.raises(GpuPrintError, match=r"kernel erf.*erf"):
        print_kernel(mapped(instr))


# (example, pipeline, kernel): a whole loop with the time loop inside (programs, lanes), the
# paper's with threefry in it, a column reduction's row of registers, f32 power, a grid loop
COMPILED = [("cartpole_separate", "hlofuse", "fusion.11"),
            ("cartpole_baseline", "hlofuse", "fusion.22"),
            ("softmax", "hlofuse", "reduce_max.23"), ("mlp_train_step", "xla", "fusion.2"),
            ("adam_update", "xla", "fusion.12"), ("softmax", "xla", "fusion.5")]

_COMPILE = """
import importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
for path, sig, warps in json.load(open(sys.argv[1])):
    spec = importlib.util.spec_from_file_location("k", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    k = triton.compile(ASTSource(mod.kernel, signature=sig, constexprs={}),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    assert k.asm["cubin"], path
    print("compiled", path)
"""


def test_kernels_compile_for_a_real_gpu(tmp_path: Path) -> None:
    """The interpreter runs Python, not Triton's compiler: the same kernels are also compiled
    ahead of time to sm_90 cubins (Triton's own compiler and ptxas; no GPU needed), which
    checks what the interpreter does not (types of values carried through loops, scalar and
    block shapes). In a process of its own: Triton's interpreter patches `triton.language`
    in place, and a compile beside it breaks later interpreted kernels."""
    import json
    import subprocess
    import sys

    from hlofuse.backends.gpu.triton_print import _HEADER, print_kernel, signature

    jobs = []
    for name, pipeline, kernel in COMPILED:
        module = parse((EXAMPLES / f"{name}.hlo").read_text())
        run_pipeline(module, pipeline)
        (instr,) = [i for i in kernels(module) if i.name == kernel]
        k = mapped(instr, 128)
        path = tmp_path / f"{name}_{pipeline}_{kernel.replace('.', '_')}.py"
        path.write_text(_HEADER + print_kernel(k))
        assert k.grid is not None
        jobs.append((str(path), signature(k), k.grid.warps))
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    done = subprocess.run([sys.executable, "-c", _COMPILE, str(tmp_path / "jobs.json")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("compiled") == len(COMPILED)


def test_whole_loop_state_stays_in_registers() -> None:
    """CartPole's whole-loop kernel: each lane's six state elements are loaded once before the
    100-step time loop, kept in registers through it, and stored once after it
    (`GridPlan.carried`); the time loop reads only the step's reset tables from memory."""
    module = parse((EXAMPLES / "cartpole_separate.hlo").read_text())
    run_pipeline(module, "hlofuse")
    (instr,) = [i for i in kernels(module) if i.name == "fusion.11"]
    kernel = mapped(instr, 128)
    assert kernel.grid is not None
    ((_lane, state),) = kernel.grid.carried.values()
    assert len(state) == 6 and {b.kind for b, _ in state} == {"out"}
    src = print_kernel(kernel)
    head, loop = src.split("for x2 in range(0, 100):")
    body, tail = loop.split("\n    tl.store", 1)
    for b, _ in state:
        name = f"b{len(kernel.inputs) + b.index}"
        assert f"tl.load({name} +" in head and f"{name} +" not in body
        assert f"store({name} +" in "\n    tl.store" + tail
    check(instr)
