"""Structural equality of modules: `modules_equal(a, b)` and `module_diff(a, b)`.

Two modules are structurally equal when they agree, in order, on: the module name, the header
attributes, the debug-info tables, the computations (by name, in module order, and which one is
the entry), and per computation the instructions in order with the same name, opcode, shape
(layout included), operand names, attributes (computations compared by name), literal (bitwise,
so nan equals the same nan: `literal.literals_equal`), parameter number, metadata, control
predecessors (by name) and root. Fusion back-links are compared too (which instruction, by name).

`module_diff` names the first difference in words ("computation main, instruction add.1: shape
f32[4]{0} != f32[4]"), or returns None; the round-trip tests print it on failure.
"""

from __future__ import annotations

from typing import Any

from hlofuse.ir.attributes import ATTRIBUTES, AttrKind
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.literal import Literal, literals_equal
from hlofuse.ir.module import Module
from hlofuse.ir.shape import format_shape


def modules_equal(a: Module, b: Module) -> bool:
    return module_diff(a, b) is None


def module_diff(a: Module, b: Module) -> str | None:
    """The first structural difference between two modules, or None if they are equal."""
    if a.name != b.name:
        return f"module name {a.name!r} != {b.name!r}"
    if list(a.header_attrs.items()) != list(b.header_attrs.items()):
        return f"header attributes {a.header_attrs} != {b.header_attrs}"
    diff = _debug_diff(a, b)
    if diff:
        return diff
    names_a = [c.name for c in a.computations]
    names_b = [c.name for c in b.computations]
    if names_a != names_b:
        return f"computations {names_a} != {names_b}"
    entry_a, entry_b = _entry_name(a), _entry_name(b)
    if entry_a != entry_b:
        return f"entry computation {entry_a} != {entry_b}"
    for ca, cb in zip(a.computations, b.computations, strict=True):
        diff = computation_diff(ca, cb)
        if diff:
            return f"computation {ca.name}: {diff}"
    return None


def _entry_name(m: Module) -> str | None:
    try:
        return m.entry.name
    except ValueError:
        return None


def _debug_diff(a: Module, b: Module) -> str | None:
    da, db = a.debug_info, b.debug_info
    for field in ("file_names", "function_names", "file_locations", "stack_frames"):
        ta, tb = getattr(da, field), getattr(db, field)
        if list(ta.items()) != list(tb.items()):
            for key in sorted(set(ta) | set(tb)):
                if ta.get(key) != tb.get(key):
                    return f"debug table {field}[{key}]: {ta.get(key)} != {tb.get(key)}"
            return f"debug table {field}: order differs"
    return None


def computation_diff(a: Computation, b: Computation) -> str | None:
    """The first difference between two computations (compared by structure, names included)."""
    if len(a.instructions) != len(b.instructions):
        return (f"{len(a.instructions)} != {len(b.instructions)} instructions "
                f"({[i.name for i in a.instructions]} vs {[i.name for i in b.instructions]})")
    for ia, ib in zip(a.instructions, b.instructions, strict=True):
        diff = instruction_diff(ia, ib)
        if diff:
            return f"instruction {ia.name}: {diff}"
    root_a = a.root.name if a.has_root else None
    root_b = b.root.name if b.has_root else None
    if root_a != root_b:
        return f"root {root_a} != {root_b}"
    fa, fb = a.fusion_instruction, b.fusion_instruction
    if (fa.name if fa else None) != (fb.name if fb else None):
        return f"fusion instruction {fa and fa.name} != {fb and fb.name}"
    return None


def instruction_diff(a: Instruction, b: Instruction) -> str | None:
    if a.name != b.name:
        return f"name {a.name} != {b.name}"
    if a.opcode is not b.opcode:
        return f"opcode {a.opcode} != {b.opcode}"
    if a.shape != b.shape:
        return f"shape {format_shape(a.shape)} != {format_shape(b.shape)}"
    ops_a = [o.name for o in a.operands]
    ops_b = [o.name for o in b.operands]
    if ops_a != ops_b:
        return f"operands {ops_a} != {ops_b}"
    if a.parameter_number != b.parameter_number:
        return f"parameter number {a.parameter_number} != {b.parameter_number}"
    if not _literal_equal(a.literal, b.literal):
        return "literal differs"
    if set(a.attrs) != set(b.attrs):
        return f"attribute names {sorted(a.attrs)} != {sorted(b.attrs)}"
    for key, va in a.attrs.items():
        vb = b.attrs[key]
        if not _attr_equal(key, va, vb):
            return f"attribute {key}: {_attr_text(key, va)} != {_attr_text(key, vb)}"
    if a.metadata != b.metadata:
        return f"metadata {a.metadata.fields} != {b.metadata.fields}"
    preds_a = [p.name for p in a.control_predecessors]
    preds_b = [p.name for p in b.control_predecessors]
    if preds_a != preds_b:
        return f"control predecessors {preds_a} != {preds_b}"
    return None


def _literal_equal(a: Literal | None, b: Literal | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return literals_equal(a, b)


def _attr_equal(key: str, a: Any, b: Any) -> bool:
    kind = ATTRIBUTES.get(key)
    if kind is AttrKind.COMPUTATION:
        return bool(_comp_name(a) == _comp_name(b))
    if kind is AttrKind.COMPUTATIONS:
        return [_comp_name(c) for c in a] == [_comp_name(c) for c in b]
    if kind is AttrKind.INTS or kind is AttrKind.SLICE or kind is AttrKind.PADDING:
        return tuple(map(_tuplify, a)) == tuple(map(_tuplify, b))
    if kind is AttrKind.WINDOW:
        return tuple(a) == tuple(b)
    try:
        return bool(a == b)
    except ValueError:  # e.g. numpy arrays of different shapes
        return False


def _tuplify(v: Any) -> Any:
    return tuple(v) if isinstance(v, list | tuple) else v


def _comp_name(c: Any) -> Any:
    return c.name if isinstance(c, Computation) else c


def _attr_text(key: str, v: Any) -> str:
    kind = ATTRIBUTES.get(key)
    if kind is AttrKind.COMPUTATION:
        return str(_comp_name(v))
    if kind is AttrKind.COMPUTATIONS:
        return str([_comp_name(c) for c in v])
    return repr(v)
