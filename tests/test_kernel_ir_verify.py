"""The kernel IR verifier (`backends/kernel_ir/verify.py`): it accepts what the lowering and
every pass produce (all kernels of the repository's HLO files and built-in examples, on two
targets,
checked after each pass), and it rejects each broken invariant it states, naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hlofuse.backends.kernel_ir import ir, lower
from hlofuse.backends.kernel_ir.dump import kernel_instructions
from hlofuse.backends.kernel_ir.passes import optimize
from hlofuse.backends.kernel_ir.target import Target
from hlofuse.backends.kernel_ir.verify import KernelIRError, verify
from hlofuse.ir.dtypes import F32
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse

HLO = sorted((Path(__file__).parent / "hlo").glob("*.hlo"))


def _programs() -> list[tuple[str, str]]:
    from hlofuse import examples

    return [(p.name, p.read_text()) for p in HLO] + \
        [(name, examples.text(name)) for name in examples.names()]


@pytest.mark.parametrize("pipeline", ["xla", "hlofuse"])
def test_every_pass_keeps_the_invariants(pipeline: str) -> None:
    checked = 0
    for _name, text in _programs():
        try:
            module = parse(text)
            run_pipeline(module, pipeline)
        except Exception:  # (a file made to test the parser's errors)
            continue
        for instr in kernel_instructions(module):
            for target in ("avx2", "scalar"):
                try:
                    kernel = lower.lower_kernel(instr, set())
                except lower.LoweringError:
                    continue
                optimize(kernel, Target.named(target), threads=2, check=True)
                checked += 1
    assert checked >= 20


def _kernel(body_of, *, inplace: dict[int, int] | None = None) -> ir.Kernel:
    g = ir.Graph()
    x = ir.Buffer("in0", F32, 8, "in", 0)
    out = ir.Buffer("out0", F32, 8, "out", 0)
    i = ir.Var("i0", 0, 8)
    body = body_of(g, x, out, i)
    return ir.Kernel("k", [x], [out], body, g, inplace=inplace or {})


NEG = ir.ScalarOp(Opcode.NEGATE, F32)


@pytest.mark.parametrize("case,message", [
    (lambda g, x, out, i: [ir.Store(out, ir.affine(i), g.load(x, ir.affine(i)))],
     "variable i0 used outside the loop"),
    (lambda g, x, out, i: [ir.Loop(i, 0, 8, [ir.Store(x, ir.affine(i), g.const(1.0, F32))])],
     "store into input in0"),
    (lambda g, x, out, i: [ir.Loop(i, 0, 8, [ir.Store(out, ir.affine(i) + 1,
                                                      g.load(x, ir.affine(i)))])],
     "index i0 + 1 of out0[8] spans [1, 8]"),
    (lambda g, x, out, i: [ir.Loop(i, 0, 8, [ir.Loop(i, 0, 8, [])])], "bound twice"),
    (lambda g, x, out, i: [ir.Loop(i, 0, 8, [ir.Store(ir.Buffer("t", F32, 8, "local"),
                                                      ir.affine(i), g.const(0.0, F32))])],
     "buffer t is not the kernel's"),
    (lambda g, x, out, i: [ir.Loop(i, 0, 6, [ir.Store(out, ir.affine(i), g.alu(
        NEG, g.load(x, ir.affine(i))))], vector=4)], "does not divide into steps of 4"),
])
def test_broken_invariants_are_named(case, message: str) -> None:
    with pytest.raises(KernelIRError) as info:
        verify(_kernel(case), "test")
    assert str(info.value).startswith("kernel k after test: ") and message in str(info.value)


def test_guarded_reads_and_inplace_inputs_pass() -> None:
    """A read under a cond side may be out of bounds where its condition is false, and an
    input the kernel pairs with an output may be stored into."""
    def body(g, x, out, i):
        from hlofuse.ir.dtypes import PRED, S64

        first = g.alu(ir.ScalarOp(Opcode.COMPARE, PRED, (("direction", "GT"),)),
                      g.index(ir.affine(i)), g.const(0, S64))
        guarded = g.cond(first, g.load(x, ir.affine(i) - 1), g.const(0.0, F32))
        return [ir.Loop(i, 0, 8, [ir.Store(out, ir.affine(i), guarded),
                                  ir.Store(x, ir.affine(i), g.const(2.0, F32))])]

    verify(_kernel(body, inplace={0: 0}), "test")
