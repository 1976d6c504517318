"""The decisions printers read, made by kernel-IR passes (`kernel_ir/passes/place.py`, `lazy.py`,
`lanes.py`): local placement, lazy selects and lane forms are recorded on the IR, the C printer
follows them, and the verifier (`kernel_ir/verify.py`) rejects a plan that breaks their
invariants."""

from __future__ import annotations

import pytest

from hlofuse.analysis.kernels import is_kernel
from hlofuse.backends.cpu.cprint import KernelPrinter
from hlofuse.backends.cpu.cvec import VecLib
from hlofuse.backends.kernel_ir import ir, lower
from hlofuse.backends.kernel_ir.passes import optimize, place, plan
from hlofuse.backends.kernel_ir.passes.lazy import LAZY_SELECT_MIN_OPS
from hlofuse.backends.kernel_ir.target import Target
from hlofuse.backends.kernel_ir.verify import KernelIRError, verify
from hlofuse.ir.dtypes import F32
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse

N = 256
ADD = ir.ScalarOp(Opcode.ADD, F32)


def _kernels(text: str, target: str = "avx2") -> list[ir.Kernel]:
    module = parse(text)
    run_pipeline(module, "xla")
    out = []
    for instr in module.entry.instructions:
        if is_kernel(instr):
            k = lower.lower_kernel(instr)
            out.append(optimize(k, Target.named(target), check=True))
    return out


def _vector_loops(k: ir.Kernel) -> list[ir.Loop]:
    return [s for s in ir.walk(k.body) if isinstance(s, ir.Loop) and s.vector]


def _lazy_module(long_ops: int) -> str:
    """select(x > 0, <a chain of `long_ops` ops of x>, x)."""
    lines, cur = [], "x"
    for i in range(long_ops):
        op = ("sine", "multiply", "add")[i % 3]
        args = cur if op == "sine" else f"{cur}, kb"
        lines.append(f"  a{i} = f32[{N}] {op}({args})")
        cur = f"a{i}"
    return "\n".join([
        "HloModule lazy", "", "ENTRY e {", f"  x = f32[{N}] parameter(0)",
        "  k = f32[] constant(1.25)", f"  kb = f32[{N}] broadcast(k), dimensions={{}}",
        "  z = f32[] constant(0)", f"  zb = f32[{N}] broadcast(z), dimensions={{}}",
        f"  p = pred[{N}] compare(x, zb), direction=GT", *lines,
        f"  s = f32[{N}] select(p, {cur}, x)", f"  ROOT r = f32[{N}] negate(s)", "}", ""])


PEEP = """HloModule peep

ENTRY e {
  x = f32[1024] parameter(0)
  io = s32[1024] iota(), iota_dimension=0
  c5 = s32[] constant(5)
  c5b = s32[1024] broadcast(c5), dimensions={}
  m = s32[1024] multiply(io, c5b)
  z = f32[] constant(0)
  zb = f32[1024] broadcast(z), dimensions={}
  p = pred[1024] compare(x, zb), direction=LT
  s = f32[1024] select(p, x, zb)
  cv = f32[1024] convert(p)
  a = f32[1024] add(s, cv)
  mf = f32[1024] convert(m)
  ROOT r = (f32[1024], f32[1024]) tuple(a, mf)
}
"""


def test_a_long_side_is_planned_lazy_and_printed_in_a_branch() -> None:
    (k,) = _kernels(_lazy_module(3 * LAZY_SELECT_MIN_OPS))
    (loop,) = _vector_loops(k)
    assert loop.lazy is not None and list(loop.lazy.sides.values()) == [1]
    assert [len(ms) for ms in loop.lazy.groups.values()] == [1]
    assert KernelPrinter(k, VecLib()).print().count("if (hf_any_v8(") == 1


def test_a_short_side_is_not_lazy() -> None:
    (k,) = _kernels(_lazy_module(6))
    (loop,) = _vector_loops(k)
    assert loop.lazy is not None and not loop.lazy.sides
    assert "hf_any_v" not in KernelPrinter(k, VecLib()).print()


def test_the_printer_follows_the_plan_not_its_own_analysis() -> None:
    """With the plan emptied, the same kernel prints blends: the printer decides nothing."""
    (k,) = _kernels(_lazy_module(3 * LAZY_SELECT_MIN_OPS))
    (loop,) = _vector_loops(k)
    loop.lazy = ir.LazyPlan()
    assert "hf_any_v" not in KernelPrinter(k, VecLib()).print()


def test_lane_forms_narrow_the_index_and_blend_on_the_mask() -> None:
    kernels = _kernels(PEEP)
    forms = [loop.forms for k in kernels for loop in _vector_loops(k)]
    assert all(f is not None for f in forms)
    assert sum(len(f.narrow) for f in forms if f) >= 1
    assert sum(len(f.blend) for f in forms if f) >= 2  # the select and the convert
    src = "".join(KernelPrinter(k, VecLib()).print() for k in kernels)
    assert "hf_iota32_v8" in src and "hf_blend_v8_" in src
    for k in kernels:  # without the forms: no 32-bit index lanes, no mask blends
        for loop in _vector_loops(k):
            loop.forms = ir.LaneForms()
    src = "".join(KernelPrinter(k, VecLib()).print() for k in kernels)
    assert "hf_iota32_v8" not in src and "hf_blend_v8_" not in src


def _two_locals() -> tuple[ir.Kernel, ir.Buffer, ir.Buffer]:
    """A loop using a small local (declared inside it) and a large one used around it."""
    g = ir.Graph()
    out = ir.Buffer("out0", F32, 8, "out", 0)
    small = ir.Buffer("acc", F32, 1, "local")
    big = ir.Buffer("big", F32, 8192, "local")
    i = ir.Var("i0", 0, 8)
    inner = [ir.Store(small, ir.ZERO, g.load(big, ir.affine(i))),
             ir.Store(out, ir.affine(i), g.alu(ADD, g.load(small, ir.ZERO),
                                               g.const(1.0, F32)))]
    j = ir.Var("j0", 0, 8192)
    body: list[ir.Stmt] = [
        ir.Loop(j, 0, 8192, [ir.Store(big, ir.affine(j), g.const(2.0, F32))]),
        ir.Loop(i, 0, 8, inner)]
    k = ir.Kernel("locals", [], [out], body, g, locals=[small, big])
    return k, small, big


def test_placement_declares_innermost_and_heaps_what_is_over_the_limit() -> None:
    k, small, big = _two_locals()
    place(k, stack_bytes=16384)
    pl = k.placement
    assert pl is not None and pl.heap == {big}
    assert pl.blocks[id(k.body)] == [big] and pl.blocks[id(k.body[1].body)] == [small]
    verify(k, "place")
    src = KernelPrinter(k, VecLib()).print()
    assert "hf_alloc(0, 32768)" in src and "free(big);" in src and "float acc[1];" in src
    place(k, stack_bytes=1 << 20)  # a target with a larger stack limit: all on the stack
    assert k.placement is not None and not k.placement.heap
    assert "hf_alloc" not in KernelPrinter(k, VecLib()).print()


def test_plan_runs_for_a_kernel_that_skipped_optimize() -> None:
    k, _small, big = _two_locals()
    assert k.placement is None
    KernelPrinter(k, VecLib()).print()
    assert k.placement is not None and k.placement.heap == {big}


@pytest.mark.parametrize("breakage,message", [
    ("stack", "on the stack, over its limit"),
    ("heap", "placed on the heap"),
    ("inner", "used outside the block that declares it"),
    ("missing", "is used but never declared"),
    ("twice", "declared twice"),
])
def test_the_verifier_rejects_a_broken_placement(breakage: str, message: str) -> None:
    k, small, big = _two_locals()
    plan(k)
    pl = k.placement
    assert pl is not None
    if breakage == "stack":
        pl.heap.clear()
    elif breakage == "heap":
        pl.heap.add(small)
    elif breakage == "inner":
        pl.blocks[id(k.body)].remove(big)
        pl.blocks[id(k.body[1].body)].append(big)
    elif breakage == "missing":
        pl.blocks[id(k.body[1].body)].clear()
    else:
        pl.blocks[id(k.body)].append(small)
    with pytest.raises(KernelIRError, match=message):
        verify(k, "test")


def test_the_verifier_rejects_a_broken_lazy_plan() -> None:
    (k,) = _kernels(_lazy_module(3 * LAZY_SELECT_MIN_OPS))
    (loop,) = _vector_loops(k)
    assert loop.lazy is not None
    ((uid, side),) = loop.lazy.sides.items()
    loop.lazy.sides[uid] = 3 - side  # the other side: x, which the compare also uses
    with pytest.raises(KernelIRError, match="groups"):
        verify(k, "test")
    loop.lazy.sides[uid] = side
    loop.lazy.groups.clear()
    with pytest.raises(KernelIRError, match="groups"):
        verify(k, "test")
    loop.lazy.sides[-1] = 1
    with pytest.raises(KernelIRError, match="is not a lane-varying select"):
        verify(k, "test")


def test_the_verifier_rejects_a_lazy_side_a_statement_uses() -> None:
    """A value the lazy side owns, also stored by the loop, would be used outside the branch
    that computes it."""
    (k,) = _kernels(_lazy_module(3 * LAZY_SELECT_MIN_OPS))
    (loop,) = _vector_loops(k)
    verify(k, "test")
    assert loop.lazy is not None
    ((uid, side),) = loop.lazy.sides.items()
    select = next(v for v in ir.postorder([v for st in ir.walk(loop.body)
                                           for v in ir.stmt_vals(st)]) if v.uid == uid)
    store = next(st for st in loop.body if isinstance(st, ir.Store))
    loop.body.append(ir.Store(store.buf, store.index, select.args[side]))
    with pytest.raises(KernelIRError, match="is used by a statement"):
        verify(k, "test")


def test_the_verifier_rejects_a_lane_form_that_does_not_qualify() -> None:
    (k,) = _kernels(_lazy_module(6))
    (loop,) = _vector_loops(k)
    assert loop.forms is not None
    loop.forms.narrow.add(-1)  # no value of the loop
    with pytest.raises(KernelIRError, match="narrowed in loop"):
        verify(k, "test")


def test_the_readable_form_shows_the_decisions() -> None:
    from hlofuse.backends.kernel_ir.printer import format_kernel

    (k,) = _kernels(_lazy_module(3 * LAZY_SELECT_MIN_OPS))
    assert "\n    lazy %" in format_kernel(k)
    k, _small, _big = _two_locals()
    plan(k)
    text = format_kernel(k)
    assert "  decl big: f32[8192] heap\n" in text and "    decl acc: f32[1] stack\n" in text
