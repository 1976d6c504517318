"""Loop fission (kernel_ir/passes/fission.py): a loop that streams more than MAX_STREAMS
buffers becomes loops of independent statements, and nothing else changes: the kernel's values
match the interpreter, statements sharing a value or a buffer stay in one loop, small loops
stay whole."""

from __future__ import annotations

import numpy as np

import hlofuse
from hlofuse.analysis.kernels import is_kernel
from hlofuse.backends import interpreter
from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir import lower as kir_lower
from hlofuse.backends.kernel_ir.passes import fission, optimize
from hlofuse.backends.kernel_ir.passes.fission import MAX_STREAMS
from hlofuse.backends.kernel_ir.target import Target
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse


def _update_module(layers: int, n: int, shared: bool = False) -> str:
    """An optimizer-like update of `layers` independent leaves (m' = 0.9m + 0.1g,
    p' = p - 0.01*sign(m')), as one multi-output fusion of 2 * layers outputs; `shared`: every
    layer also adds the first layer's gradient (so all statements share that load)."""
    params = []
    body = []
    outs = []
    types = []
    k = 0
    for i in range(layers):
        params += [f"m{i} = f32[{n}] parameter({k})", f"g{i} = f32[{n}] parameter({k + 1})",
                   f"p{i} = f32[{n}] parameter({k + 2})"]
        k += 3
        g = f"gg{i}" if shared else f"g{i}"
        if shared:
            body.append(f"gg{i} = f32[{n}] add(g{i}, g0)")
        body += [
            f"a{i} = f32[{n}] multiply(m{i}, c9)", f"b{i} = f32[{n}] multiply({g}, c1)",
            f"mn{i} = f32[{n}] add(a{i}, b{i})", f"s{i} = f32[{n}] sign(mn{i})",
            f"d{i} = f32[{n}] multiply(s{i}, c01)", f"pn{i} = f32[{n}] subtract(p{i}, d{i})",
        ]
        outs += [f"mn{i}", f"pn{i}"]
        types += [f"f32[{n}]", f"f32[{n}]"]
    consts = [f"c9 = f32[{n}] broadcast(f32[] constant(0.9)), dimensions={{}}",
              f"c1 = f32[{n}] broadcast(f32[] constant(0.1)), dimensions={{}}",
              f"c01 = f32[{n}] broadcast(f32[] constant(0.01)), dimensions={{}}"]
    lines = "\n  ".join(params + consts + body)
    return (f"HloModule update\n\nENTRY e {{\n  {lines}\n"
            f"  ROOT t = ({', '.join(types)}) tuple({', '.join(outs)})\n}}\n")


def _kernels(text: str) -> list[ir.Kernel]:
    module = parse(text)
    run_pipeline(module, "xla")
    return [kir_lower.lower_kernel(i) for i in module.entry.instructions if is_kernel(i)]


def _top_loops(k: ir.Kernel) -> list[ir.Loop]:
    return [s for s in k.body if isinstance(s, ir.Loop)]


def _streams(loop: ir.Loop) -> set[ir.Buffer]:
    bufs = set(ir.written(loop.body))
    for s in ir.walk(loop.body):
        for v in ir.postorder(ir.stmt_vals(s)):
            if v.op in ("load", "tile"):
                bufs.add(v.buffer)
    return {b for b in bufs if b.kind not in ("local", "lanes")}


def test_a_loop_of_many_independent_streams_is_split_by_layer() -> None:
    (k,) = _kernels(_update_module(layers=6, n=65536))
    assert len(_top_loops(k)) == 1 and len(_streams(_top_loops(k)[0])) == 30
    fission(k)
    loops = _top_loops(k)
    assert len(loops) == 6  # 5 buffers per layer: one layer per loop
    assert all(len(_streams(lp)) <= MAX_STREAMS for lp in loops)
    assert len({lp.var for lp in loops}) == 6  # each loop binds its own variable
    outs = sorted(b.index for lp in loops for b in ir.written(lp.body) if b.kind == "out")
    assert outs == list(range(12))


def test_statements_sharing_a_value_stay_in_one_loop() -> None:
    (k,) = _kernels(_update_module(layers=6, n=65536, shared=True))
    fission(k)
    assert len(_top_loops(k)) == 1  # every layer reads g0: one group, nothing to split


def test_small_loops_are_left_whole() -> None:
    (k,) = _kernels(_update_module(layers=6, n=256))
    fission(k)
    assert len(_top_loops(k)) == 1


def test_the_split_kernel_matches_the_interpreter() -> None:
    text = _update_module(layers=4, n=65536 + 3)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(65536 + 3).astype(np.float32) for _ in range(12)]
    want = interpreter.run(parse(text), *args)
    exe = hlofuse.compile(text, pipeline="xla", backend="cpu")
    got = exe(*args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), w)
    (k,) = _kernels(text)
    optimize(k, Target.named("avx2"), threads=2)
    # the layers' loops, each vectorized and parallel (and each with its scalar tail)
    assert len([lp for lp in _top_loops(k) if lp.vector and lp.parallel]) == 4
