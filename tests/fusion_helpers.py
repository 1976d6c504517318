"""Helpers for the fusion tests: parse, run a pass, compare the interpreter before/after."""

from __future__ import annotations

import numpy as np

from hlofuse.backends import interpreter
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.ir.verifier import verify
from hlofuse.text import parse, print_module


def random_args(module: Module, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    args = []
    for p in module.entry.parameters:
        shape = p.shape
        assert isinstance(shape, ArrayShape), "tests use array parameters"
        dt = shape.dtype
        if dt.is_float:
            a = rng.uniform(0.5, 2.0, size=shape.dims).astype(dt.np)
        elif dt.is_pred:
            a = rng.integers(0, 2, size=shape.dims).astype(bool)
        else:
            a = rng.integers(1, 5, size=shape.dims).astype(dt.np)
        args.append(np.asarray(a, dtype=dt.np))
    return args


def run_and_check(text: str, p: object, seeds: int = 2) -> tuple[Module, bool]:
    """Parse `text`, run pass `p` on it, verify, and check that the interpreter gives the same
    outputs before and after on random inputs. Returns (module after, changed)."""
    before = parse(text)
    after = parse(text)
    changed = p.run(after)  # type: ignore[attr-defined]
    verify(after)
    parse(print_module(after))  # the result prints and reads back
    for seed in range(seeds):
        args = random_args(before, seed)
        want = interpreter.run(before, *args)
        got = interpreter.run(after, *args)
        assert len(want) == len(got)
        for w, g in zip(want, got):
            np.testing.assert_allclose(np.asarray(g, dtype=np.float64),
                                       np.asarray(w, dtype=np.float64), rtol=1e-5, atol=1e-6)
    return after, changed


def fusions(module: Module) -> list[Instruction]:
    return [i for i in module.all_instructions() if i.opcode is Opcode.FUSION]


def fused_opcodes(fusion: Instruction) -> list[str]:
    return sorted(i.opcode.value for i in fusion.fused_computation.instructions
                  if i.opcode is not Opcode.PARAMETER)
