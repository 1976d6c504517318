"""The kernel IR's second printer (`backends/kernel_ir/pyprint.py`) as a third oracle: every
kernel of the built-in examples, of the C printer's crafted modules (`test_cpu_lower.CASES`:
each index map, row/column/variadic/multi-output reductions, reduce-window, gather, scatter,
dynamic-slice and in-place dynamic-update-slice, dot, map, narrow types), of a sort, of a
whole-loop fusion and of a few random modules, lowered and optimized exactly as the C backend
gets them (`optimize` for avx2, 2 threads), printed as Python, run on random inputs and
compared with the interpreter's value of the kernel instruction. Kernels the C backend may
update in place run twice: into fresh outputs and with each such input passed as its output.

The printer decides nothing (its docstring lists what it reads), so a kernel it gets wrong is
a fact the IR failed to record, or a pass that broke the kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cpu_lower_harness import compare, random_array, reference
from hlo_loops import mlp_scan, scan, scan_reducing_over_batch, stacked
from hlofuse.analysis.kernels import is_kernel
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.libop import LibOp
from hlofuse.backends.kernel_ir.lower import lower_kernel
from hlofuse.backends.kernel_ir.passes import optimize
from hlofuse.backends.kernel_ir.pyprint import PyKernel, PyPrintError, print_kernel
from hlofuse.backends.kernel_ir.target import Target
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, leaves
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse

EXAMPLES = Path(__file__).resolve().parents[1] / "src" / "hlofuse" / "examples"

SORT = """
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}
ENTRY e {
  p0 = f32[6,9] parameter(0)
  i = s32[6,9] iota(), iota_dimension=1
  n = f32[6,9] negate(p0)
  ROOT s = (f32[6,9], s32[6,9]) sort(n, i), dimensions={1}, to_apply=cmp
}"""

ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}"""

# Guarded values in a vector loop: an interior pad's condition varies by lane (imod), so
# `split` cannot cut it; a side reading no memory vectorizes (a lane-wise `cond`), a side
# loading from a parameter keeps the loop scalar (the vectorizer's rule).
HAND = {
    "pad_interior_iota": """
ENTRY e {
  i = f32[40] iota(), iota_dimension=0
  z = f32[] constant(-1)
  p = f32[79] pad(i, z), padding=0_0_1
  p1 = f32[79] parameter(0)
  ROOT a = f32[79] add(p, p1)
}""",
    "pad_interior_parameter": """
ENTRY e {
  p0 = f32[6,20] parameter(0)
  z = f32[] constant(-1)
  p = f32[6,41] pad(p0, z), padding=0_0x1_1_1
  ROOT n = f32[6,41] negate(p)
}""",
    # jnp.cumsum's row scan after reduce-window-rewriter: the first taps of each row read
    # before it, under a condition that varies by lane (masked loads, `mload`)
    "row_scan_masked": ADD + """
ENTRY e {
  p0 = s32[6,3,16] parameter(0)
  z = s32[] constant(0)
  zb = s32[6,3,16] broadcast(z), dimensions={}
  gt = pred[6,3,16] compare(p0, zb), direction=GT
  c = f32[6,3,16] convert(gt)
  zf = f32[] constant(0)
  ROOT r = f32[6,3,16] reduce-window(c, zf), window={size=1x1x16 pad=0_0x0_0x15_0}, to_apply=add
}""",
    "reverse_window_masked": ADD + """
ENTRY e {
  p0 = f32[5,40] parameter(0)
  zf = f32[] constant(0)
  ROOT r = f32[5,40] reduce-window(p0, zf), window={size=1x5 pad=0_0x0_4}, to_apply=add
}""",
}


def _cases() -> dict[str, tuple[str, str]]:
    try:
        from test_cpu_lower import CASES
    except pytest.skip.Exception:  # (no C compiler: those cases are skipped with it)
        return {}
    return dict(CASES)


CASES = _cases()


def kernels(module: object) -> list[Instruction]:
    """The kernels one run of the module launches: the entry's, and those of the computations
    its while loops, conditionals and calls run (not reducers or comparators)."""
    out: list[Instruction] = []
    seen: set[int] = set()
    todo: list[Computation] = [module.entry]  # type: ignore[attr-defined]
    while todo:
        comp = todo.pop()
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        for instr in comp.instructions:
            if instr.opcode is Opcode.WHILE:
                todo += [instr.attrs["body"], instr.attrs["condition"]]
            elif instr.opcode is Opcode.CONDITIONAL:
                todo += list(instr.branches)
            elif instr.opcode is Opcode.CALL:
                todo.append(instr.attrs["to_apply"])
            elif is_kernel(instr):
                out.append(instr)
    return out


def optimized(instr: Instruction, target: str = "avx2") -> ir.Kernel:
    """The kernel IR the C printer gets for `instr` (`backends/cpu/kernels.py`)."""
    return optimize(lower_kernel(instr), Target.named(target), threads=2, check=True)


def random_operands(instr: Instruction, seed: int) -> tuple[list[object], list[Any]]:
    """Random values of `instr`'s operands (a tuple for a tuple-shaped one; an operand used
    twice is one buffer) and their leaves in order, as the kernel's inputs."""
    rng = np.random.default_rng(seed)
    args: list[object] = []
    seen: dict[int, object] = {}
    for op in instr.operands:
        if id(op) not in seen:
            ls = [random_array(s, rng) for s in leaves(op.shape)]
            seen[id(op)] = tuple(ls) if not isinstance(op.shape, ArrayShape) else ls[0]
        args.append(seen[id(op)])
    flat = [x for a in args for x in (a if isinstance(a, tuple) else (a,))]
    return args, flat


def check_kernel(instr: Instruction, seed: int, rtol: float, atol: float,
                 target: str = "avx2") -> ir.Kernel:
    kernel = optimized(instr, target)
    py = PyKernel(kernel)
    args, flat = random_operands(instr, seed)
    want = reference(instr, args)
    for alias in ([False, True] if kernel.inplace else [False]):
        got = py.run(flat, alias)  # type: ignore[arg-type]
        assert len(got) == len(want)
        for j, (g, w) in enumerate(zip(got, want, strict=True)):
            what = f"kernel {kernel.name} output {j} (alias={alias})\n{py.source}"
            g = g.reshape(w.shape)
            assert g.dtype == w.dtype, what
            compare(g, w, rtol, atol, what)
    return kernel


def check_module(text: str, pipeline: str, seeds: tuple[int, ...] = (0,), rtol: float = 1e-4,
                 atol: float = 1e-4, target: str = "avx2") -> list[ir.Kernel]:
    module = parse(text)
    run_pipeline(module, pipeline)
    ks = kernels(module)
    assert ks, "no kernels"
    return [check_kernel(instr, seed, rtol, atol, target) for instr in ks for seed in seeds]


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.hlo")))
def test_examples(name: str) -> None:
    check_module((EXAMPLES / f"{name}.hlo").read_text(), "xla")


@pytest.mark.parametrize("name", list(CASES))
def test_crafted_modules(name: str) -> None:
    pipeline, text = CASES[name]
    rtol = 1e-4 if "reduce" in name or "dot" in name else 2e-5
    check_module(text, pipeline, seeds=(0, 1), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("name", list(HAND))
def test_guarded_values(name: str) -> None:
    ks = check_module(HAND[name], "xla", seeds=(0, 1), rtol=1e-6, atol=1e-6)
    conds = [v for k in ks for v in ir.body_values(k.body) if v.op == "cond"]
    assert conds


@pytest.mark.parametrize("target", ["avx512", "scalar"])
def test_other_vector_widths(target: str) -> None:
    for name in ("reduce_row", "reduce_column", "transpose_reshape", "gather_2d", "pad"):
        if name in CASES:
            pipeline, text = CASES[name]
            check_module(text, pipeline, rtol=1e-4, atol=1e-4, target=target)


def test_sort_is_a_library_call_run_from_its_comparator_function() -> None:
    ks = check_module(SORT, "xla", seeds=(0, 1))
    calls = [s for k in ks for s in ir.walk(k.body) if isinstance(s, ir.LibCall)]
    assert calls
    # `op` is plain data: the comparator is a kernel-IR function, run by the printer
    assert all(isinstance(s.op, LibOp) and s.op.func("compare") is not None for s in calls)


LIBRARY = ("conv_nhwc_strided", "conv_1d_s32_negative_pad", "select_scatter_min",
           "topk_f32_largest", "rng_default", "sort_lexicographic")


@pytest.mark.parametrize("name", LIBRARY)
def test_library_calls(name: str) -> None:
    """Library calls (`ir.LibCall`) run on the whole buffers from their plain data (sort and
    select-and-scatter by their functions, the others by the interpreter's handler): what this
    checks is those routines, the buffers' plumbing (operand leaves in, result leaves out)
    around them, and the kernels that feed and read them."""
    from test_cpu_library import CASES as LIBRARY_CASES

    (case,) = [c for c in LIBRARY_CASES if c.name == name]
    ks = check_module(case.hlo, "xla", rtol=max(case.rtol, 1e-5), atol=max(case.atol, 1e-5))
    assert any(isinstance(s, ir.LibCall) for k in ks for s in ir.walk(k.body))


LINALG = {
    "cholesky": """
ENTRY e {
  a = f32[2,4,4] parameter(0)
  ROOT c = f32[2,4,4] cholesky(a), lower=true
}""",
    "triangular_solve": """
ENTRY e {
  a = f64[3,3] parameter(0)
  b = f64[3,2] parameter(1)
  ROOT x = f64[3,2] triangular-solve(a, b), left_side=true, lower=true,
    transpose_a=TRANSPOSE
}""",
}


@pytest.mark.parametrize("name", [*LINALG, "getrf"])
def test_linear_algebra_library_calls(name: str) -> None:
    """cholesky, triangular-solve and a LAPACK custom call (validated from the op's data,
    `num_batch_dims` included) run by the interpreter's routines from the `LibOp` alone."""
    from lapack_cases import getrf_case

    text = getrf_case()[0] if name == "getrf" else LINALG[name]
    ks = check_module(text, "xla", rtol=1e-5, atol=1e-5)
    calls = [s for k in ks for s in ir.walk(k.body) if isinstance(s, ir.LibCall)]
    assert calls and all(isinstance(s.op, LibOp) for s in calls)


@pytest.mark.parametrize("side", ["true", "false"])
def test_lazy_selects(side: str) -> None:
    """A vector loop whose selects the lazy plan computes in a branch (`Loop.lazy`): the plan
    is ignored (it says how, not what) and the values stay the interpreter's."""
    from hlofuse.backends.kernel_ir.passes.lazy import LAZY_SELECT_MIN_OPS
    from test_cpu_lazy_select import _module as lazy_module

    ks = check_module(lazy_module(side, 3 * LAZY_SELECT_MIN_OPS, two=True), "xla",
                      seeds=(0, 1), rtol=1e-5, atol=1e-5)
    assert any(isinstance(s, ir.Loop) and s.lazy and s.lazy.sides
               for k in ks for s in ir.walk(k.body))


@pytest.mark.parametrize("make", [scan, stacked], ids=["scan", "stacked"])
def test_whole_loop_fusion(make: Callable[[], str]) -> None:
    """A while loop fused whole (`lower/whole_loop.py`): one kernel runs every iteration."""
    from hlofuse.passes.fusion.loop_fusion import is_whole_loop

    module = parse(make())
    run_pipeline(module, "hlofuse")
    whole = [i for i in kernels(module) if is_whole_loop(i)]
    assert whole
    for instr in whole:
        check_kernel(instr, 0, 1e-5, 1e-5)


@pytest.mark.parametrize("make", [mlp_scan, scan_reducing_over_batch],
                         ids=["mlp_scan", "scan_reducing_over_batch"])
def test_loop_bodies(make: Callable[[], str]) -> None:
    """Loops not fused whole: the kernels of their bodies and conditions."""
    module = parse(make())
    run_pipeline(module, "hlofuse")
    assert any(i.opcode is Opcode.WHILE for c in module.computations for i in c.instructions)
    check_module(make(), "hlofuse", rtol=1e-4, atol=1e-4)


def test_random_modules() -> None:
    from random_kernels import random_module

    for seed in (1, 2, 3, 4):
        text, (rtol, atol) = random_module(seed)
        check_module(text, "xla", rtol=rtol, atol=atol)


def test_source_holds_no_input_text() -> None:
    text = CASES["elementwise"][1] if CASES else (EXAMPLES / "softmax.hlo").read_text()
    text = text.replace("p0", "evil_name_q").replace("ENTRY e", "ENTRY hostile_entry")
    module = parse(text)
    run_pipeline(module, "xla")
    for instr in kernels(module):
        src = print_kernel(optimized(instr))
        assert "evil" not in src and "hostile" not in src and "fused" not in src


def test_unprintable_statement_is_refused() -> None:
    k = ir.Kernel("k", [], [], [object()], ir.Graph())  # type: ignore[list-item]
    with pytest.raises(PyPrintError, match="cannot print"):
        print_kernel(k)
