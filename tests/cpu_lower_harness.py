"""Test harness for the CPU kernel emitter: lower kernels, compile them into ONE C file with a
`void run_<n>(void **ins, void **outs)` wrapper each, and compare against the interpreter.

    h = Harness()
    ids = h.add_module(text, pipeline="xla")   # every kernel of the entry computation
    lib = h.build()
    h.check(lib, kid, seed=0)                  # random inputs, C vs interpreter

Used by tests/test_cpu_lower.py and tests/test_cpu_random_graphs.py.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from hlofuse.analysis.kernels import is_kernel
from hlofuse.backends import interpreter
from hlofuse.backends.cpu import build, cexpr
from hlofuse.backends.cpu.contract import Kernel
from hlofuse.backends.cpu.kernels import lower_kernel
from hlofuse.backends.interpreter.core import HANDLERS, Interpreter
from hlofuse.backends.kernel_ir.target import Target
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, leaves
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse


@dataclass
class Entry:
    instr: Instruction
    kernel: Kernel
    wrapper: str
    int_range: tuple[int, int] = (-6, 6)
    modules: list[object] = field(default_factory=list)


def random_array(shape: ArrayShape, rng: np.random.Generator,
                 int_range: tuple[int, int] = (-6, 6)) -> np.ndarray:
    dt = shape.dtype
    dims = tuple(shape.dims)
    if dt.is_pred:
        return rng.integers(0, 2, size=dims).astype(bool)
    if dt.is_float:
        return rng.normal(0, 1.5, size=dims).astype(dt.np)
    info = np.iinfo(dt.np)
    lo, hi = max(info.min, int_range[0]), min(info.max, int_range[1])
    if dt.name in ("u64", "s64") and int_range == (-6, 6):
        return rng.integers(info.min if dt.name == "s64" else 0, info.max, size=dims,
                            dtype=dt.np, endpoint=True)
    return rng.integers(lo, hi + 1, size=dims).astype(dt.np)


def reference(instr: Instruction, args: list[object]) -> list[np.ndarray]:
    """The interpreter's value of one kernel instruction on `args` (one per operand)."""
    if instr.opcode is Opcode.FUSION:
        value = interpreter.evaluate_computation(instr.fused_computation, args)
    else:
        with np.errstate(all="ignore"):
            value = HANDLERS[instr.opcode](Interpreter(), instr, args)
    from hlofuse.ir.literal import flatten

    return [np.asarray(v) for v in flatten(value)]


class Harness:
    """`target`: the kernel IR target the kernels are generated for (vector width); any target
    compiles and runs on any host (vector extensions wider than the machine's registers are
    split by the compiler), so tests check every width everywhere."""

    def __init__(self, target: str | None = None, threads: int = 1) -> None:
        self.entries: list[Entry] = []
        self.target = Target.named(target) if target else None
        self.threads = threads  # > 1: big loops become parallel (run serially here)

    def add_module(self, text: str, pipeline: str = "xla",
                   int_range: tuple[int, int] = (-6, 6)) -> list[int]:
        module = parse(text)
        run_pipeline(module, pipeline)
        ids = []
        for instr in module.entry.instructions:
            if is_kernel(instr):
                ids.append(self.add(instr, int_range, module))
        return ids

    def add(self, instr: Instruction, int_range: tuple[int, int] = (-6, 6),
            module: object = None) -> int:
        kernel = lower_kernel(instr, self.target, self.threads)
        n = len(self.entries)
        args = [f"(const {cexpr.ctype(s.dtype)} *)ins[{i}]" for i, s in enumerate(kernel.inputs)]
        args += [f"({cexpr.ctype(s.dtype)} *)outs[{i}]" for i, s in enumerate(kernel.outputs)]
        wrapper = (f"void run_{n}(void **ins, void **outs) {{ {kernel.name}({', '.join(args)}); "
                   "}\n")
        self.entries.append(Entry(instr, kernel, wrapper, int_range, [module]))
        return n

    def source(self) -> str:
        # (a kernel added twice is one function: its name is its identity)
        sources = {e.kernel.name: e.kernel.source for e in self.entries}
        return (cexpr.prelude() + "\n".join(sources.values())
                + "".join(e.wrapper for e in self.entries))

    def build(self) -> ctypes.CDLL:
        return build.load_library(self.source(), name="test_cpu_lower")

    def kernel_ir(self, kid: int, target: str = "avx2"):
        """The optimised kernel IR of entry `kid` for `target` (for structure tests)."""
        from hlofuse.backends.kernel_ir import lower
        from hlofuse.backends.kernel_ir.passes import optimize

        return optimize(lower.lower_kernel(self.entries[kid].instr), Target.named(target),
                        threads=2)

    def run(self, lib: ctypes.CDLL, kid: int, args: list[np.ndarray],
            alias: bool = False) -> list[np.ndarray]:
        e = self.entries[kid]
        flat_in = []
        for a in args:
            flat_in += [np.ascontiguousarray(x) for x in (a if isinstance(a, tuple) else [a])]
        outs = [np.zeros(tuple(s.dims), dtype=s.dtype.np) for s in e.kernel.outputs]
        if alias:
            for o, i in e.kernel.inplace.items():
                flat_in[i] = flat_in[i].copy()
                outs[o] = flat_in[i]
        ins_arr = (ctypes.c_void_p * max(len(flat_in), 1))(
            *[x.ctypes.data for x in flat_in])
        outs_arr = (ctypes.c_void_p * max(len(outs), 1))(*[o.ctypes.data for o in outs])
        getattr(lib, f"run_{kid}")(ins_arr, outs_arr)
        return outs

    def inputs(self, kid: int, seed: int) -> list[object]:
        e = self.entries[kid]
        rng = np.random.default_rng(seed)
        args: list[object] = []
        seen: dict[int, object] = {}  # an operand used twice is one buffer
        for op in e.instr.operands:
            if id(op) not in seen:
                ls = [random_array(s, rng, e.int_range) for s in leaves(op.shape)]
                seen[id(op)] = (tuple(ls) if len(ls) > 1 or not isinstance(op.shape, ArrayShape)
                                else ls[0])
            args.append(seen[id(op)])
        return args

    def check(self, lib: ctypes.CDLL, kid: int, seed: int = 0, rtol: float = 2e-5,
              atol: float = 2e-5, args: list[object] | None = None) -> None:
        e = self.entries[kid]
        args = self.inputs(kid, seed) if args is None else args
        want = reference(e.instr, args)
        for alias in ([False, True] if e.kernel.inplace else [False]):
            got = self.run(lib, kid, [a for a in args], alias)  # type: ignore[misc]
            assert len(got) == len(want)
            for j, (g, w) in enumerate(zip(got, want, strict=True)):
                what = f"kernel {e.kernel.name} output {j} (alias={alias})\n{e.kernel.source}"
                assert g.shape == w.shape and g.dtype == w.dtype, what
                compare(g, w, rtol, atol, what)


def compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, what: str) -> None:
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    if want.dtype == np.float16:
        rtol, atol = max(rtol, 2e-3), max(atol, 2e-3)
    if want.dtype == ml_dtypes.bfloat16:
        rtol, atol = max(rtol, 1.6e-2), max(atol, 1.6e-2)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
