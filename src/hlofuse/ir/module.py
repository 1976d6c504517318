"""`Module`: computations, the entry, module-unique names, and source-location tables.

Source locations come in two forms, and `source_location(instr)` resolves both to
file:line:function:

* old style: `metadata={source_file="f.py" source_line=12}`;
* new style (what `lowered.as_text(dialect="hlo", debug_info=True)` emits): `FileNames`,
  `FunctionNames`, `FileLocations` and `StackFrames` tables at the top of the module, and
  `stack_frame_id=N` in each instruction's metadata.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction, Metadata


@dataclass(frozen=True)
class FileLocation:
    file_name_id: int
    function_name_id: int
    line: int
    end_line: int = 0
    column: int = 0
    end_column: int = 0


@dataclass(frozen=True)
class StackFrame:
    file_location_id: int
    parent_frame_id: int = 0


@dataclass
class DebugInfo:
    """The four stack-frame tables of a module's header, by id."""

    file_names: dict[int, str] = field(default_factory=dict)
    function_names: dict[int, str] = field(default_factory=dict)
    file_locations: dict[int, FileLocation] = field(default_factory=dict)
    stack_frames: dict[int, StackFrame] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.file_names or self.function_names or self.file_locations
                    or self.stack_frames)


@dataclass(frozen=True)
class SourceLocation:
    file: str
    line: int
    function: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" + (f" ({self.function})" if self.function else "")


class Module:
    def __init__(self, name: str) -> None:
        self.name = name
        self.computations: list[Computation] = []
        self._entry: Computation | None = None
        # Header attributes after the name (`entry_computation_layout={...}`, `is_scheduled=true`),
        # kept verbatim in their order.
        self.header_attrs: dict[str, str] = {}
        self.debug_info = DebugInfo()
        self._names: set[str] = set()
        self._next_suffix: dict[str, int] = {}
        # Free-form per-module facts passes may attach (e.g. the fusion trace).
        self.annotations: dict[str, Any] = {}
        # Facts passes keep between their runs within one top-level pipeline run, each valid
        # by the `Computation.version`s it recorded; None outside a pipeline run, and emptied
        # when a pass that does not keep versions exact changes the module (passes/base.py).
        self.caches: dict[Any, Any] | None = None

    # ----- computations -------------------------------------------------------------------

    @property
    def entry(self) -> Computation:
        if self._entry is None:
            raise ValueError(f"module {self.name} has no entry computation")
        return self._entry

    @entry.setter
    def entry(self, comp: Computation) -> None:
        self._entry = comp

    def add_computation(self, comp: Computation, *, entry: bool = False) -> Computation:
        comp.parent = self
        comp.name = self.unique_name(comp.name)
        for instr in comp.instructions:
            instr.name = self.unique_name(instr.name or instr.opcode.value)
        self.computations.append(comp)
        if entry:
            self._entry = comp
        return comp

    def computation(self, name: str) -> Computation:
        for c in self.computations:
            if c.name == name:
                return c
        raise KeyError(f"module {self.name} has no computation named {name}")

    def remove_computation(self, comp: Computation) -> None:
        self.computations.remove(comp)
        self.release_name(comp.name)
        for instr in comp.instructions:
            self.release_name(instr.name)
        comp.parent = None

    def computations_post_order(self) -> list[Computation]:
        """Callees before callers; computations nothing calls (other than the entry) included.
        Iterative (a call graph may be deep); a call cycle, which the verifier rejects, does
        not loop: each computation is listed once."""
        order: list[Computation] = []
        seen: set[int] = set()
        roots = [c for c in self.computations if c is not self._entry]
        if self._entry is not None:
            roots.append(self._entry)
        for root in roots:
            if id(root) in seen:
                continue
            seen.add(id(root))
            stack = [(root, iter(_callees(root)))]
            while stack:
                comp, pending = stack[-1]
                for callee in pending:
                    if id(callee) not in seen:
                        seen.add(id(callee))
                        stack.append((callee, iter(_callees(callee))))
                        break
                else:
                    order.append(comp)
                    stack.pop()
        return order

    def non_fusion_computations(self) -> list[Computation]:
        return [c for c in self.computations_post_order() if not c.is_fusion_computation]

    def all_instructions(self) -> Iterator[Instruction]:
        for c in self.computations:
            yield from c.instructions

    def instruction(self, name: str) -> Instruction:
        for i in self.all_instructions():
            if i.name == name:
                return i
        raise KeyError(f"module {self.name} has no instruction named {name}")

    # ----- names --------------------------------------------------------------------------

    def unique_name(self, base: str) -> str:
        """`base` if free, else `base.N` with the smallest unused N (XLA's NameUniquer style)."""
        names = self._names
        if base not in names:
            names.add(base)
            return base
        head, dot, tail = base.rpartition(".")  # `stem.N`: count on from stem's suffix
        stem = head if dot and tail.isdecimal() else base
        n = self._next_suffix.get(stem, 1)
        name = f"{stem}.{n}"
        while name in names:
            n += 1
            name = f"{stem}.{n}"
        self._next_suffix[stem] = n + 1
        names.add(name)
        return name

    def reserve_name(self, name: str) -> bool:
        """Claim an exact name (the parser's use); False if it is taken."""
        if name in self._names:
            return False
        self._names.add(name)
        return True

    def release_name(self, name: str) -> None:
        self._names.discard(name)

    # ----- source locations ---------------------------------------------------------------

    def source_location(self, instr: Instruction) -> SourceLocation | None:
        return resolve_location(instr.metadata, self.debug_info)

    def clone(self) -> Module:
        """An independent deep copy, structurally equal to this module."""
        from hlofuse.ir.clone import clone_module

        return clone_module(self)

    def __repr__(self) -> str:
        return f"<Module {self.name}: {len(self.computations)} computations>"


def _callees(comp: Computation) -> Iterator[Computation]:
    for instr in comp.instructions:
        if instr.attrs:
            yield from instr.called_computations()


def resolve_location(metadata: Metadata, debug: DebugInfo) -> SourceLocation | None:
    frame_id = metadata.stack_frame_id
    if frame_id is not None and frame_id in debug.stack_frames:
        frame = debug.stack_frames[frame_id]
        loc = debug.file_locations.get(frame.file_location_id)
        if loc is not None:
            return SourceLocation(
                debug.file_names.get(loc.file_name_id, "?"),
                loc.line,
                debug.function_names.get(loc.function_name_id, ""),
            )
    if metadata.source_file is not None and metadata.source_line is not None:
        return SourceLocation(metadata.source_file, metadata.source_line)
    return None

