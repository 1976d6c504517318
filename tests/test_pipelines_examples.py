"""The fusion pipelines on the shipped example modules (no jax needed): same interpreter outputs
under `none`, `xla` and `xla-relaxed`, never more kernels under `xla`, and the CartPole kernel
counts per time-loop iteration that docs/fusion.md explains."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from hlofuse import examples
from hlofuse.analysis.kernels import count_kernels
from hlofuse.backends import interpreter
from hlofuse.ir.fusion import is_multi_output_fusion
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.verifier import verify
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse
from pass_testing import random_args

PIPELINES = ("none", "xla", "xla-relaxed", "hlofuse", "hlofuse{whole_loop_fusion=false}",
             "hlofuse{whole_loop_fusion=false,unstack_loop_state=false}")


@cache
def _optimised(name: str, pipeline: str) -> Module:
    module = parse(examples.text(name))
    run_pipeline(module, pipeline)
    return module


@pytest.mark.parametrize("name", examples.names())
def test_examples_keep_outputs_and_never_add_kernels(name: str) -> None:
    original = parse(examples.text(name))
    args = random_args(original)
    want = interpreter.run(original, *args)
    none_kernels = count_kernels(_optimised(name, "none"))
    for pipeline in PIPELINES:
        module = _optimised(name, pipeline)
        verify(module)
        got = interpreter.run(module, *args)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
        report = count_kernels(module)
        assert report.total_static <= none_kernels.total_static


def _time_loop(module: Module) -> str:
    return next(i.name for i in module.entry.instructions if i.opcode is Opcode.WHILE)


@pytest.mark.parametrize(("variant", "per_iteration"), [
    ("precomputed", 5), ("separate", 4), ("unrolled", 12)])
def test_cartpole_kernels_per_iteration(variant: str, per_iteration: int) -> None:
    module = _optimised(f"cartpole_{variant}", "xla")
    assert count_kernels(module).loops[_time_loop(module)] == per_iteration


def test_cartpole_separate_state_is_one_multi_output_kernel() -> None:
    module = _optimised("cartpole_separate", "xla")
    body = next(i for i in module.entry.instructions if i.opcode is Opcode.WHILE).attrs["body"]
    mofs = [i for i in body.instructions if is_multi_output_fusion(i)]
    assert len(mofs) == 1 and mofs[0].fused_computation.root.operand_count == 5


def test_cartpole_baseline_body() -> None:
    module = _optimised("cartpole_baseline", "xla")
    report = count_kernels(module)
    loop = _time_loop(module)
    assert report.loops[loop] == 14  # 13 body kernels + the condition
    # the three threefry loops nested in the body: 4 kernels per trip each
    assert sorted(n for w, n in report.loops.items() if w != loop) == [4, 4, 4]
    assert count_kernels(_optimised("cartpole_baseline", "none")).loops[
        _time_loop(_optimised("cartpole_baseline", "none"))] > 100


def _independent_module(seed: int) -> str:
    """Independent small computations of different shapes and kinds feeding one tuple: food for
    horizontal loop fusion (elementwise chains) and horizontal input fusion (reductions)."""
    import random

    rng = random.Random(seed)
    lines: list[str] = []
    outs: list[tuple[str, str]] = []
    for k in range(rng.randint(3, 9)):
        n = rng.choice([4, 7, 16, 33])
        shape = rng.choice([f"f32[{n}]", f"f32[{n},3]"])
        lines.append(f"  p{k} = {shape} parameter({k})")
        v = f"p{k}"
        for j in range(rng.randint(1, 3)):
            op = rng.choice(["negate", "abs", "exponential", "tanh"])
            lines.append(f"  e{k}_{j} = {shape} {op}({v})")
            v = f"e{k}_{j}"
        if rng.random() < 0.3:
            dims = "{0}" if shape.count(",") == 0 else "{0,1}"
            lines.append(f"  r{k} = f32[] reduce({v}, z), dimensions={dims}, to_apply=add")
            outs.append((f"r{k}", "f32[]"))
        else:
            outs.append((v, shape))
    shapes = ", ".join(s for _, s in outs)
    names = ", ".join(v for v, _ in outs)
    return ("HloModule ind\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
            "  ROOT c = f32[] add(a, b)\n}\nENTRY e {\n  z = f32[] constant(0)\n"
            + "\n".join(lines) + f"\n  ROOT t = ({shapes}) tuple({names})\n}}\n")


@pytest.mark.parametrize("seed", range(10))
def test_random_modules_through_the_xla_pipelines(seed: int) -> None:
    from test_fusion_random import random_module

    for text in (random_module(seed), _independent_module(seed)):
        original = parse(text)
        args = random_args(original, seed)
        want = interpreter.run(original, *args)
        kernels = count_kernels(original).entry
        for pipeline in ("xla", "xla-relaxed"):
            module = parse(text)
            run_pipeline(module, pipeline, verify=True)
            got = interpreter.run(module, *args)
            for w, g in zip(want, got, strict=True):
                np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
            assert count_kernels(module).entry <= kernels
