"""Kernel accounting: what a kernel is, and how many kernels one execution launches. The one
definition passes (fusion's profitability), backends (what to lower), and tools (explain, lint,
viz, the CLI) all use.

    is_kernel(instr)                 a fusion, or an unfused instruction that does work
    kernels_of(comp)                 the kernels of one computation, in order
    count_kernels(module)            entry: 3 kernels; while.7 body: 2 per iteration; ...
    kernels_per_run(comp, cond)      one run, nested loops times their trip counts
    bytes_per_run(comp, cond)        bytes the kernels of one run read and write (each operand
                                     and result once), nested loops times their trip counts

A kernel is a fusion or an unfused instruction that does work: ops in the op table's
`NON_KERNEL_OPS` (parameter, constant, tuple, get-tuple-element, bitcast, ...) are not kernels,
and while/conditional/call are not kernels themselves: the computations they run are counted,
a while body per iteration, each conditional branch separately, a call inline.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import Shape, leaves


@dataclass
class KernelReport:
    entry: int = 0
    # while instruction name -> kernels per iteration of its body (condition included)
    loops: dict[str, int] = field(default_factory=dict)
    # conditional instruction name -> kernels per branch
    branches: dict[str, list[int]] = field(default_factory=dict)
    # kernel names per computation, for the summary
    kernels: dict[str, list[str]] = field(default_factory=dict)
    fusion_kinds: Counter[str] = field(default_factory=Counter)

    @property
    def total_static(self) -> int:
        return self.entry + sum(self.loops.values()) + sum(sum(b) for b in
                                                          self.branches.values())

    def summary(self) -> str:
        lines = [f"entry: {self.entry} kernel(s) per execution"]
        for name, n in self.loops.items():
            lines.append(f"while {name}: {n} kernel(s) per iteration")
        for name, counts in self.branches.items():
            lines.append(f"conditional {name}: " + ", ".join(str(c) for c in counts)
                         + " kernel(s) per branch")
        if self.fusion_kinds:
            kinds = ", ".join(f"{k}={v}" for k, v in sorted(self.fusion_kinds.items()))
            lines.append(f"fusions by kind: {kinds}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def is_kernel(instr: Instruction) -> bool:
    """`Instruction.is_kernel` as a function (for filters and `per_run`'s callers)."""
    return instr.is_kernel


def kernels_of(comp: Computation) -> list[Instruction]:
    return [i for i in comp.instructions if is_kernel(i)]


def per_run(comp: Computation, cond: Computation | None, measure: Callable[[Instruction], int],
            memo: dict[tuple[int, int], int | None] | None = None) -> int | None:
    """`measure` summed over the kernels of one run of `comp` (plus `cond`'s): nested loops
    times their trip count, the largest branch of a conditional, calls inline; None if a trip
    count is unknown. Memoized per (computation, condition), so shared computations are
    measured once each."""
    from hlofuse.analysis.loops import trip_count

    memo = {} if memo is None else memo
    key = (id(comp), id(cond))
    if key in memo:
        return memo[key]
    n: int | None = sum(measure(k) for k in kernels_of(comp))
    if cond is not None:
        n = (n or 0) + sum(measure(k) for k in kernels_of(cond))
    for instr in comp.instructions:
        sub: int | None = 0
        if instr.opcode is Opcode.WHILE:
            inner = per_run(instr.attrs["body"], instr.attrs["condition"], measure, memo)
            trips = trip_count(instr)
            sub = None if inner is None or trips is None else inner * trips
        elif instr.opcode is Opcode.CONDITIONAL:
            counts = [per_run(b, None, measure, memo) for b in instr.branches]
            sub = None if None in counts else max((c or 0 for c in counts), default=0)
        elif instr.opcode is Opcode.CALL:
            sub = per_run(instr.attrs["to_apply"], None, measure, memo)
        n = None if n is None or sub is None else n + sub
    memo[key] = n
    return n


def kernels_per_run(comp: Computation, cond: Computation | None = None,
                    memo: dict[tuple[int, int], int | None] | None = None) -> int | None:
    """Kernels one run of `comp` launches (plus `cond`'s); see `per_run`."""
    return per_run(comp, cond, lambda _k: 1, memo)


_SLICING = frozenset({Opcode.SLICE, Opcode.DYNAMIC_SLICE, Opcode.GATHER})


def _leaf_bytes(shape: Shape) -> int:
    return sum(s.nbytes for s in leaves(shape))


_IN_PLACE = frozenset({Opcode.DYNAMIC_UPDATE_SLICE, Opcode.SCATTER})


def in_place_updates(k: Instruction) -> dict[int, int]:
    """Operand index -> bytes written, for the operands kernel `k` updates in place: a
    dynamic-update-slice or scatter (as such, or a root of the fusion, or a chain of them)
    whose updated array is a parameter read by nothing else. Such a kernel moves its update,
    not the whole array (a scan's `ys` row)."""
    if k.opcode in _IN_PLACE:
        return {0: _leaf_bytes(k.operand(1 if k.opcode is Opcode.DYNAMIC_UPDATE_SLICE else 2)
                              .shape)}
    if k.opcode is not Opcode.FUSION:
        return {}
    root = k.fused_computation.root
    roots = list(root.operands) if root.opcode is Opcode.TUPLE else [root]
    out: dict[int, int] = {}
    for r in roots:
        written = 0
        base = r
        while base.opcode in _IN_PLACE and base.operands and (
                base is r or len(base.users) == 1):  # a chain of updates (an unrolled scan)
            upd = base.operand(1 if base.opcode is Opcode.DYNAMIC_UPDATE_SLICE else 2)
            written += _leaf_bytes(upd.shape)
            base = base.operand(0)
        if base is not r and base.opcode is Opcode.PARAMETER and len(base.users) == 1:
            out[base.parameter_number or 0] = written
    return out


def bytes_read(k: Instruction) -> int:
    """Estimated bytes kernel `k` reads: each distinct operand once, but an operand only read
    through slices, dynamic slices or gathers counts what those read (their results), and an
    operand updated in place (`in_place_updates`) counts its update."""
    total = 0
    seen: set[int] = set()
    in_place = in_place_updates(k)
    for i, operand in enumerate(k.operands):
        if id(operand) in seen:
            continue
        seen.add(id(operand))
        full = _leaf_bytes(operand.shape)
        if i in in_place:
            total += min(full, in_place[i])
        elif k.opcode in _SLICING and i == 0:
            total += min(full, _leaf_bytes(k.shape))
        elif k.opcode is Opcode.FUSION:
            users = k.fused_computation.parameter(i).users
            if users and all(u.opcode in _SLICING and u.operand(0).opcode is Opcode.PARAMETER
                             for u in users):
                total += min(full, sum(_leaf_bytes(u.shape) for u in users))
            else:
                total += full
        else:
            total += full
    return total


def kernel_bytes(k: Instruction) -> int:
    """Bytes kernel `k` moves: `bytes_read` plus its results (an array updated in place: its
    update)."""
    in_place = in_place_updates(k)
    written = _leaf_bytes(k.shape)
    for i, update in in_place.items():
        written -= max(0, _leaf_bytes(k.operand(i).shape) - update)
    return bytes_read(k) + max(written, 0)


def bytes_per_run(comp: Computation, cond: Computation | None = None) -> int | None:
    """Bytes the kernels of one run of `comp` (and `cond`) move; see `per_run`."""
    return per_run(comp, cond, kernel_bytes)


def count_kernels(module: Module) -> KernelReport:
    report = KernelReport()
    report.entry = _count(module.entry, report)
    return report


def _count(comp: Computation, report: KernelReport) -> int:
    """Kernels one execution of `comp` launches outside while loops and conditionals (which
    are recorded separately in the report); calls are counted inline."""
    n = 0
    names: list[str] = []
    for instr in comp.instructions:
        if instr.opcode is Opcode.WHILE:
            body = instr.attrs["body"]
            cond = instr.attrs["condition"]
            report.loops[instr.name] = _count(body, report) + _count(cond, report)
        elif instr.opcode is Opcode.CONDITIONAL:
            report.branches[instr.name] = [_count(b, report) for b in instr.branches]
        elif instr.opcode is Opcode.CALL:
            n += _count(instr.attrs["to_apply"], report)
        elif is_kernel(instr):
            n += 1
            names.append(instr.name)
            if instr.opcode is Opcode.FUSION:
                report.fusion_kinds[instr.fusion_kind] += 1
    report.kernels[comp.name] = names
    return n
