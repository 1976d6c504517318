"""The HLO text printer: canonical, stable text in XLA's short (test) or long (dump) form.

    short:  name = f32[4]{0} add(a, b), metadata={op_name="add" stack_frame_id=1}
    long:   %name = f32[4]{0} add(f32[4]{0} %a, f32[4]{0} %b), metadata={...}

A module prints as `HloModule name` plus its header attributes (verbatim), the debug tables
(`FileNames`, `FunctionNames`, `FileLocations`, `StackFrames`, as JAX prints them), then the
computations in module order separated by blank lines, `ENTRY` on the entry and `ROOT` on each
root. The long form also prints computation signatures `%c (p: f32[4]) -> f32[4] {`.

Per instruction, in this fixed order: the shape (always, with its layout if it has one), the
opcode, the operands (the parameter number, or the constant's literal), the attributes in
`ir.attributes.ATTRIBUTES` order, `metadata={...}`, then `control-predecessors={...}`.

Guarantees (tested): printing a parsed module and parsing it back gives a structurally equal
module (`ir.equality`), and printing is a fixpoint: `print(parse(print(m))) == print(m)`.
"""

from __future__ import annotations

from typing import Any

from hlofuse.ir.attributes import (
    ATTRIBUTES,
    AttrKind,
    attr_kind,
    format_padding,
    format_slice,
    format_window,
)
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.literal import Literal, format_literal
from hlofuse.ir.metadata import Metadata, Verbatim
from hlofuse.ir.module import DebugInfo, Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import Shape, format_shape
from hlofuse.text.lexer import encode_string

_ORDER = {name: i for i, name in enumerate(ATTRIBUTES)}


def print_module(module: Module, *, long: bool = False) -> str:
    """The whole module as text (ends with a newline)."""
    header = f"HloModule {module.name}"
    for key, value in module.header_attrs.items():
        header += f", {key}={value}"
    parts = [header + "\n"]
    if module.debug_info:
        parts.append(format_debug_info(module.debug_info))
    entry = _entry_of(module)
    for comp in module.computations:
        parts.append(format_computation(comp, long=long, entry=comp is entry))
    return "\n".join(parts)


def _entry_of(module: Module) -> Computation | None:
    try:
        return module.entry
    except ValueError:
        return None


def format_debug_info(debug: DebugInfo) -> str:
    """The four tables, each followed by a blank line (JAX's layout)."""
    out: list[str] = []
    if debug.file_names:
        out.append("FileNames")
        out.extend(f"{k} {encode_string(v)}" for k, v in debug.file_names.items())
        out.append("")
    if debug.function_names:
        out.append("FunctionNames")
        out.extend(f"{k} {encode_string(v)}" for k, v in debug.function_names.items())
        out.append("")
    if debug.file_locations:
        out.append("FileLocations")
        for k, loc in debug.file_locations.items():
            out.append(
                f"{k} {{file_name_id={loc.file_name_id} function_name_id={loc.function_name_id}"
                f" line={loc.line} end_line={loc.end_line} column={loc.column}"
                f" end_column={loc.end_column}}}")
        out.append("")
    if debug.stack_frames:
        out.append("StackFrames")
        for k, frame in debug.stack_frames.items():
            out.append(f"{k} {{file_location_id={frame.file_location_id} "
                       f"parent_frame_id={frame.parent_frame_id}}}")
        out.append("")
    return "\n".join(out)


def format_computation(comp: Computation, *, long: bool = False, entry: bool | None = None) -> str:
    """One computation, `name {` ... `}` (plus a trailing newline)."""
    if entry is None:
        entry = comp.parent is not None and _entry_of(comp.parent) is comp
    head = ("ENTRY " if entry else "") + ("%" if long else "") + comp.name
    if long:
        params = ", ".join(f"{p.name}: {format_shape(p.shape, with_layout=False)}"
                           for p in comp.parameters)
        result = format_shape(comp.root.shape, with_layout=False) if comp.has_root else "()"
        head += f" ({params}) -> {result}"
    lines = [head + " {"]
    root = comp.root if comp.has_root else None
    for instr in comp.instructions:
        lines.append("  " + format_instruction(instr, long=long, root=instr is root))
    lines.append("}\n")
    return "\n".join(lines)


def format_instruction(instr: Instruction, *, long: bool = False, root: bool = False) -> str:
    """One instruction line, without indentation: `name = shape opcode(...), attrs` (XLA's
    `HloInstruction::ToString`); `root=True` adds the `ROOT ` marker a computation prints."""
    pct = "%" if long else ""
    out = f"{'ROOT ' if root else ''}{pct}{instr.name} = {format_shape(instr.shape)} "
    out += instr.opcode.value + "("
    if instr.opcode is Opcode.PARAMETER:
        out += str(instr.parameter_number)
    elif instr.opcode is Opcode.CONSTANT and instr.literal is not None:
        out += format_constant(instr.literal, instr.shape)
    elif long:
        out += ", ".join(f"{format_shape(o.shape)} %{o.name}" for o in instr.operands)
    else:
        out += ", ".join(o.name for o in instr.operands)
    out += ")"
    if instr.attrs:
        keys = sorted(instr.attrs, key=lambda k: _ORDER.get(k, len(_ORDER)))
        for key in keys:
            out += (f", {key}="
                    f"{format_attr_value(key, instr.attrs[key], long=long, opcode=instr.opcode)}")
    if instr.metadata:
        out += ", metadata=" + format_metadata(instr.metadata)
    if instr.control_predecessors:
        out += ", control-predecessors={" + ", ".join(
            pct + p.name for p in instr.control_predecessors) + "}"
    return out


def format_constant(value: Literal, shape: Shape) -> str:
    """The text inside `constant(...)` (`ir.literal.format_literal`: a NaN with a non-default
    payload prints as `nan(0x...)`, XLA's spelling, so that it reads back bit for bit)."""
    return format_literal(value, shape)


def format_attr_value(key: str, value: Any, *, long: bool = False,
                      opcode: Opcode | None = None) -> str:
    """The text of one attribute value, by the attribute's kind in the schema (for `opcode`)."""
    kind = attr_kind(opcode.value, key) if opcode is not None else ATTRIBUTES.get(key)
    pct = "%" if long else ""
    if kind is AttrKind.INT or kind is AttrKind.ENUM:
        return str(value)
    if kind is AttrKind.INTS:
        return "{" + ",".join(str(v) for v in value) + "}"
    if kind is AttrKind.BOOL:
        return "true" if value else "false"
    if kind is AttrKind.FLOAT:
        return repr(float(value))
    if kind is AttrKind.SHAPES:
        return "{" + ", ".join(format_shape(s) for s in value) + "}"
    if kind is AttrKind.STRING:
        return encode_string(value)
    if kind is AttrKind.SLICE:
        return format_slice(value)
    if kind is AttrKind.PADDING:
        return format_padding(value)
    if kind is AttrKind.WINDOW:
        return format_window(value)
    if kind is AttrKind.COMPUTATION:
        return f"{pct}{value.name}"
    if kind is AttrKind.COMPUTATIONS:
        if key == "calls" and len(value) == 1:
            return f"{pct}{value[0].name}"
        return "{" + ", ".join(f"{pct}{c.name}" for c in value) + "}"
    return str(value)  # RAW (and anything not in the schema): verbatim


def format_metadata(metadata: Metadata) -> str:
    items = []
    for key, value in metadata.fields:
        if isinstance(value, bool):
            items.append(f"{key}={'true' if value else 'false'}")
        elif isinstance(value, int | Verbatim):  # verbatim: a braced list as written
            items.append(f"{key}={value}")
        else:
            items.append(f"{key}={encode_string(str(value))}")
    return "{" + " ".join(items) + "}"
