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
                    kernel = lower.lower_kernel(instr)
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


def _tile(g: ir.Graph, x: ir.Buffer, base: ir.Affine, stride: int, k: int) -> ir.Val:
    return g.make("tile", x.dtype, (), (x, base, stride, k))


def test_tiles_read_a_block_of_lanes() -> None:
    """A vector loop of 2 lanes over i0 in [0, 4) reading in0[2*i0 + k] as tiles of stride 2
    (lane l at 2*i0 + 2*l + k) and storing them back as a tile store: the block is in0[0, 8),
    in bounds; the verifier accepts it."""
    def body(g, x, out, i):
        cols = [_tile(g, x, ir.affine(i) * 2, 2, k) for k in (0, 1)]
        return [ir.Loop(i, 0, 4, [
            ir.StoreTile(out, ir.affine(i) * 2, 2, [cols[1], cols[0]])], vector=2)]

    verify(_kernel(body), "test")


@pytest.mark.parametrize("case,message", [
    (lambda g, x, out, i: [ir.Loop(i, 0, 4, [ir.Store(out, ir.affine(i), _tile(
        g, x, ir.affine(i) * 2, 2, 0))])], "tile %"),
    (lambda g, x, out, i: [ir.Loop(i, 0, 4, [ir.Store(out, ir.affine(i), _tile(
        g, x, ir.affine(i), 2, 0))], vector=2)], "does not advance by its stride 2"),
    (lambda g, x, out, i: [ir.Loop(i, 0, 4, [ir.Store(out, ir.affine(i), _tile(
        g, x, ir.affine(i) * 2, 2, 2))], vector=2)], "reads column 2 of 2"),
    (lambda g, x, out, i: [ir.Loop(i, 0, 4, [ir.Store(out, ir.affine(i), _tile(
        g, x, ir.affine(i) * 2 + 1, 2, 0))], vector=2)], "index 2*i0 + 2 of in0[8] spans"),
    (lambda g, x, out, i: [ir.Loop(i, 0, 4, [ir.StoreTile(
        out, ir.affine(i) * 2, 2, [g.const(0.0, F32)])], vector=2)], "has 1 values for stride"),
    (lambda g, x, out, i: [ir.Loop(i, 0, 8, [ir.StoreTile(
        out, ir.affine(i) * 2, 2, [g.const(0.0, F32)] * 2)])], "tile store of out0 outside"),
])
def test_broken_tiles_are_named(case, message: str) -> None:
    with pytest.raises(KernelIRError) as info:
        verify(_kernel(case), "test")
    assert message in str(info.value)


@pytest.mark.parametrize("width,kind,ok", [(4, "lanes", True), (6, "lanes", False),
                                           (4, "local", False)])
def test_lanes_reduce_combines_power_of_two_lanes_buffers(width: int, kind: str,
                                                           ok: bool) -> None:
    """`lanes_reduce` halves the lanes down to lane 0 (`ir.py`), so its buffers are `lanes`
    buffers of one power-of-two width."""
    k = _kernel(lambda g, x, out, i: [])
    parts = [ir.Buffer(f"p{j}", F32, width, kind) for j in range(3)]  # type: ignore[arg-type]
    k.locals += parts
    red = k.graph.make("lanes_reduce", F32, (), (ir.ScalarOp(Opcode.ADD, F32), *parts))
    k.body = [ir.Store(k.outputs[0], ir.ZERO, red)]
    if ok:
        verify(k, "test")
    else:
        with pytest.raises(KernelIRError, match="lanes_reduce %"):
            verify(k, "test")
