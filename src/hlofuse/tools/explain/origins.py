"""Which original (pre-fusion) instructions each kernel holds, and what a trace name stood for.

Fusion renames things: `exp.1` is cloned into `fusion.2`, which the merger later folds into
`fusion.8`. The fusion trace records names as they were *when the decision was taken*, so to
map a refusal to the final kernels two things are kept:

* every instruction's metadata is stamped with its own name (`hlofuse_origin`) before the
  pipeline runs; fusion clones keep their metadata, so a final kernel's origins are the stamps
  of the instructions inside it;
* `NameHistory`, a pass observer, snapshots before and after every pass which originals each
  (non-fused-computation) name stood for, together with the trace length at that moment. A
  trace event recorded during a pass is resolved with the snapshots taken around that pass.

`strip_origins` removes the stamps afterwards so the module prints as before.
"""

from __future__ import annotations

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction, Metadata
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import CONTROL_FLOW_OPS, Opcode
from hlofuse.passes.base import PassEvent
from hlofuse.passes.fusion.trace import trace_of

ORIGIN = "hlofuse_origin"


def tag_origins(module: Module) -> None:
    """Stamp every instruction's metadata with its own name (clones made by fusion keep it)."""
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.metadata.get(ORIGIN) is None:
                instr.metadata = Metadata((*instr.metadata.fields, (ORIGIN, instr.name)))


def strip_origins(module: Module) -> None:
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.metadata.get(ORIGIN) is not None:
                instr.metadata = Metadata(tuple(f for f in instr.metadata.fields
                                                if f[0] != ORIGIN))


def origin(instr: Instruction) -> str:
    value = instr.metadata.get(ORIGIN)
    return str(value) if value is not None else instr.name


def origins(instr: Instruction) -> set[str]:
    """The original names `instr` stands for: itself, and for a fusion everything inside,
    including the loops, branches and calls inside it (a whole-loop kernel's loop body and
    condition)."""
    out = {origin(instr)}
    if instr.opcode is Opcode.FUSION:
        out |= origins_inside(instr.fused_computation)
    return out


def origins_inside(comp: Computation) -> set[str]:
    """The original names of everything `comp` (and what it calls) computes."""
    out: set[str] = set()
    for inner in comp.instructions:
        if inner.opcode is not Opcode.PARAMETER:
            out |= origins(inner)
            if inner.opcode in CONTROL_FLOW_OPS:
                for called in inner.called_computations():
                    out |= origins_inside(called)
    return out


class NameHistory:
    """Pass observer: snapshots `name -> originals` around every pass (see the module doc)."""

    def __init__(self) -> None:
        # (trace length when taken, phase, name -> originals)
        self.snapshots: list[tuple[int, str, dict[str, frozenset[str]]]] = []

    def __call__(self, event: PassEvent) -> None:
        module = event.module
        names: dict[str, frozenset[str]] = {}
        for comp in module.computations:
            if comp.is_fusion_computation:
                continue
            for instr in comp.instructions:
                names[instr.name] = frozenset(origins(instr))
        self.snapshots.append((len(trace_of(module)), event.phase, names))

    def resolve(self, index: int, name: str) -> set[str]:
        """Originals `name` stood for around trace event number `index`."""
        out: set[str] = set()
        snaps = self.snapshots
        for k, (length, _phase, names) in enumerate(snaps):
            nxt = snaps[k + 1][0] if k + 1 < len(snaps) else None
            before = length <= index and (nxt is None or nxt > index)
            after = length > index and (k == 0 or snaps[k - 1][0] <= index)
            if before or after:
                out |= names.get(name, frozenset())
        return out or {name}
