"""Random HLO graphs through the XLA vertical fusion passes: the result verifies, prints and
re-parses, and computes what the original computes (interpreter, random inputs)."""

from __future__ import annotations

import random

import pytest

from fusion_helpers import run_and_check
from hlofuse.passes.base import Pipeline
from hlofuse.passes.fusion.core_passes import InstructionFusion
from hlofuse.passes.fusion.fusion_merger import FusionMerger

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def random_module(seed: int, size: int = 30) -> str:
    """A DAG over f32[8,16] values with elementwise ops, broadcasts of row reductions,
    transposes back and forth, slices + concatenates, and several outputs."""
    rng = random.Random(seed)
    lines = ["  p0 = f32[8,16] parameter(0)", "  p1 = f32[8,16] parameter(1)",
             "  z = f32[] constant(0)", "  c1 = f32[] constant(1.5)"]
    vals = ["p0", "p1"]
    for k in range(size):
        kind = rng.choice(["bin", "bin", "un", "un", "bcast", "reduce", "transpose", "concat"])
        a, b = rng.choice(vals[-6:]), rng.choice(vals)
        v = f"v{k}"
        if kind == "bin":
            op = rng.choice(["add", "multiply", "subtract", "maximum", "divide"])
            lines.append(f"  {v} = f32[8,16] {op}({a}, {b})")
        elif kind == "un":
            op = rng.choice(["negate", "exponential", "abs", "log", "sqrt", "tanh"])
            src = a if op not in ("log", "sqrt") else f"{v}_abs"
            if op in ("log", "sqrt"):
                lines.append(f"  {v}_abs = f32[8,16] abs({a})")
            lines.append(f"  {v} = f32[8,16] {op}({src})")
        elif kind == "bcast":
            lines.append(f"  {v}_s = f32[8,16] broadcast(c1), dimensions={{}}")
            lines.append(f"  {v} = f32[8,16] multiply({a}, {v}_s)")
        elif kind == "reduce":
            lines.append(f"  {v}_r = f32[8] reduce({a}, z), dimensions={{1}}, to_apply=add")
            lines.append(f"  {v} = f32[8,16] broadcast({v}_r), dimensions={{0}}")
        elif kind == "transpose":
            lines.append(f"  {v}_t = f32[16,8] transpose({a}), dimensions={{1,0}}")
            lines.append(f"  {v}_n = f32[16,8] negate({v}_t)")
            lines.append(f"  {v} = f32[8,16] transpose({v}_n), dimensions={{1,0}}")
        else:
            lines.append(f"  {v}_a = f32[8,8] slice({a}), slice={{[0:8], [0:8]}}")
            lines.append(f"  {v}_b = f32[8,8] slice({b}), slice={{[0:8], [8:16]}}")
            lines.append(f"  {v} = f32[8,16] concatenate({v}_b, {v}_a), dimensions={{1}}")
        vals.append(v)
    outs = rng.sample(vals[2:], 3)
    lines.append(f"  ROOT out = (f32[8,16], f32[8,16], f32[8,16]) tuple({', '.join(outs)})")
    return "HloModule r\n" + ADD + "ENTRY e {\n" + "\n".join(lines) + "\n}\n"


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("variant", ["gpu", "generic"])
def test_random_graph_fusion_keeps_semantics(seed: int, variant: str) -> None:
    text = random_module(seed)
    pipe = Pipeline("fusion", [InstructionFusion(variant=variant, may_duplicate=False),
                               InstructionFusion(variant=variant, may_duplicate=True),
                               FusionMerger()])
    _, changed = run_and_check(text, pipe, seeds=1)
    assert changed


@pytest.mark.parametrize("seed", range(8))
def test_random_multi_output_mechanics(seed: int) -> None:
    """Wrap every op into a fusion, then randomly apply producer-consumer multi-output fusion
    and sibling merges where they create no cycle: values must not change."""
    from fusion_helpers import random_args
    from hlofuse.backends import interpreter
    from hlofuse.ir import fusion as F
    from hlofuse.ir.opcodes import Opcode
    from hlofuse.ir.verifier import verify
    from hlofuse.passes.fusion.graph import ReachabilityMap
    from hlofuse.text import parse, print_module

    text = random_module(seed, size=12)
    before, m = parse(text), parse(text)
    skip = {Opcode.PARAMETER, Opcode.TUPLE, Opcode.CONSTANT}
    for instr in list(m.entry.instructions):
        if instr.opcode not in skip:
            F.create_fusion(instr)
    rng = random.Random(seed)
    for _ in range(10):
        fusions = [i for i in m.entry.instructions if i.opcode is Opcode.FUSION]
        if len(fusions) < 2:
            break
        a, b = rng.sample(fusions, 2)
        reach = ReachabilityMap(m.entry)
        if any(o is a for o in b.operands):
            a, b = b, a  # a consumes b: b is the producer
        if any(o is b for o in a.operands):
            # producer b into consumer a: no other path b -> a
            if any(o is not b and reach.is_reachable(b, o) for o in a.operands):
                continue
            F.fuse_into_multi_output(a, b)
        elif not reach.is_connected(a, b):
            F.merge_fusions_multi_output(a, b)
        verify(m)
    parse(print_module(m))
    args = random_args(before, seed)
    for w, g in zip(interpreter.run(before, *args), interpreter.run(m, *args)):
        assert (abs(w - g) <= 1e-5 * (1 + abs(w))).all()
