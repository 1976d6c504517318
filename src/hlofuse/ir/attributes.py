"""The schema of instruction attributes (`dimensions={0}`, `slice={[0:2]}`, `to_apply=%add`, ...).

Parser and printer both read this table: the parser to know how to read a value, the printer
to write attributes in one canonical order (the order of `ATTRIBUTES`). Values are plain Python
data:

    INT          3                          index=3
    INTS         (0, 1)                     dimensions={0,1}
    BOOL         True                       is_stable=true
    ENUM         "LT"                       direction=LT
    STRING       "foo"                      custom_call_target="foo"
    SLICE        ((0, 2, 1), (1, 3, 1))     slice={[0:2], [1:3]}
    PADDING      ((0, 1, 0), (2, 2, 1))     padding=0_1x2_2_1
    WINDOW       (WindowDim, ...)           window={size=3 stride=2 pad=1_1}
    FLOAT        0.001                      epsilon=0.001 (kept as written: no rounding)
    COMPUTATION  Computation                to_apply=%add
    COMPUTATIONS (Computation, ...)         branch_computations={%a, %b}
    SHAPES       (Shape, ...)               operand_layout_constraints={f32[2]{0}, s32[]}
    LITERAL      "s32[2]{0} {1, 2}"         custom-call literal=: verbatim, spaces included
    RAW          "{...}"                    kept verbatim (frontend_attributes, sharding, ...)

A few names mean different things on different opcodes (`slice_sizes` is one list of sizes on
gather and a list of lists on collective-permute): `attr_kind(opcode_text, name)` applies
`KIND_BY_OPCODE` first.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from hlofuse.ir.fastenum import plain_member_reads


@plain_member_reads
class AttrKind(Enum):
    INT = "int"
    INTS = "ints"
    BOOL = "bool"
    ENUM = "enum"
    STRING = "string"
    SLICE = "slice"
    PADDING = "padding"
    WINDOW = "window"
    FLOAT = "float"
    COMPUTATION = "computation"
    COMPUTATIONS = "computations"
    SHAPES = "shapes"
    LITERAL = "literal"
    RAW = "raw"


K = AttrKind

# Canonical print order. Names are XLA's text names.
ATTRIBUTES: dict[str, AttrKind] = {
    "kind": K.ENUM,  # fusion kind
    "index": K.INT,
    "iota_dimension": K.INT,
    "direction": K.ENUM,
    "type": K.ENUM,
    "dimensions": K.INTS,
    "slice": K.SLICE,
    "padding": K.PADDING,
    "dynamic_slice_sizes": K.INTS,
    "window": K.WINDOW,
    "dim_labels": K.RAW,
    "feature_group_count": K.INT,
    "batch_group_count": K.INT,
    "lhs_batch_dims": K.INTS,
    "lhs_contracting_dims": K.INTS,
    "rhs_batch_dims": K.INTS,
    "rhs_contracting_dims": K.INTS,
    "offset_dims": K.INTS,
    "collapsed_slice_dims": K.INTS,
    "start_index_map": K.INTS,
    "operand_batching_dims": K.INTS,
    "start_indices_batching_dims": K.INTS,
    "update_window_dims": K.INTS,
    "inserted_window_dims": K.INTS,
    "scatter_dims_to_operand_dims": K.INTS,
    "input_batching_dims": K.INTS,
    "scatter_indices_batching_dims": K.INTS,
    "index_vector_dim": K.INT,
    "slice_sizes": K.INTS,
    "indices_are_sorted": K.BOOL,
    "unique_indices": K.BOOL,
    "is_stable": K.BOOL,
    "k": K.INT,
    "largest": K.BOOL,
    "algorithm": K.ENUM,
    "distribution": K.ENUM,
    "exponent_bits": K.INT,
    "mantissa_bits": K.INT,
    "fft_type": K.ENUM,
    "fft_length": K.INTS,
    "left_side": K.BOOL,
    "lower": K.BOOL,
    "unit_diagonal": K.BOOL,
    "transpose_a": K.ENUM,
    "custom_call_target": K.STRING,
    "custom_call_has_side_effect": K.BOOL,
    "api_version": K.ENUM,
    "custom_call_schedule": K.ENUM,
    "operand_layout_constraints": K.SHAPES,
    "literal": K.LITERAL,
    "output_to_operand_aliasing": K.RAW,
    "channel_id": K.INT,
    "replica_groups": K.RAW,
    "source_target_pairs": K.RAW,
    "mode": K.ENUM,
    "use_global_device_ids": K.BOOL,
    "constrain_layout": K.BOOL,
    "precision_config": K.RAW,
    "operand_precision": K.RAW,
    "algorithm_config": K.RAW,
    "result_accuracy": K.RAW,
    "calls": K.COMPUTATIONS,
    "to_apply": K.COMPUTATION,
    "condition": K.COMPUTATION,
    "body": K.COMPUTATION,
    "true_computation": K.COMPUTATION,
    "false_computation": K.COMPUTATION,
    "branch_computations": K.COMPUTATIONS,
    "select": K.COMPUTATION,
    "scatter": K.COMPUTATION,
    "sharding": K.RAW,
    "frontend_attributes": K.RAW,
    "backend_config": K.RAW,
    "statistics": K.RAW,
    "statistics_viz": K.RAW,
    "origin": K.RAW,
    "schedule": K.RAW,
    "is_host_transfer": K.BOOL,
    "num_carries": K.INT,
    "is_reverse": K.BOOL,
    "is_associative": K.BOOL,
    "delta": K.INT,
    "called_computations": K.COMPUTATIONS,
    "is_composite": K.BOOL,
    "async_execution_thread": K.STRING,
    "epsilon": K.FLOAT,
    "feature_index": K.INT,
    "cross_program_prefetch_index": K.INT,
    "conv_kind": K.ENUM,
    "domain": K.RAW,
    "lhs_ragged_dims": K.INTS,
    "rhs_group_dims": K.INTS,
    "parameter_replication": K.RAW,
    "outfeed_shape": K.RAW,
    "infeed_config": K.STRING,
    "outfeed_config": K.STRING,
}

# Attribute kinds that differ by opcode (opcode text -> name -> kind).
KIND_BY_OPCODE: dict[str, dict[str, AttrKind]] = {
    op: {"slice_sizes": K.RAW} for op in ("collective-permute", "collective-permute-start")
}


def attr_kind(opcode_text: str, name: str) -> AttrKind | None:
    """The kind of attribute `name` on an instruction of `opcode_text` (None: unknown)."""
    by_op = KIND_BY_OPCODE.get(opcode_text)
    if by_op is not None and name in by_op:
        return by_op[name]
    return ATTRIBUTES.get(name)


# Attributes that name called computations, in the order `called_computations()` lists them.
COMPUTATION_ATTRS = (
    "calls",
    "to_apply",
    "condition",
    "body",
    "true_computation",
    "false_computation",
    "branch_computations",
    "select",
    "scatter",
    "called_computations",
)


@dataclass(frozen=True)
class WindowDim:
    """One dimension of a `window={...}` attribute (reduce-window, convolution)."""

    size: int
    stride: int = 1
    pad_lo: int = 0
    pad_hi: int = 0
    window_dilation: int = 1
    base_dilation: int = 1
    reversal: bool = False


def format_window(window: tuple[WindowDim, ...]) -> str:
    """XLA's `{size=3x3 stride=2x2 pad=0_1x0_1}` form; fields at their defaults are left out."""
    if not window:
        return "{}"
    parts = ["size=" + "x".join(str(d.size) for d in window)]
    if any(d.stride != 1 for d in window):
        parts.append("stride=" + "x".join(str(d.stride) for d in window))
    if any(d.pad_lo or d.pad_hi for d in window):
        parts.append("pad=" + "x".join(f"{d.pad_lo}_{d.pad_hi}" for d in window))
    if any(d.base_dilation != 1 for d in window):
        parts.append("lhs_dilate=" + "x".join(str(d.base_dilation) for d in window))
    if any(d.window_dilation != 1 for d in window):
        parts.append("rhs_dilate=" + "x".join(str(d.window_dilation) for d in window))
    if any(d.reversal for d in window):
        parts.append("rhs_reversal=" + "x".join("1" if d.reversal else "0" for d in window))
    return "{" + " ".join(parts) + "}"


def format_slice(ranges: tuple[tuple[int, int, int], ...]) -> str:
    items = []
    for start, limit, stride in ranges:
        items.append(f"[{start}:{limit}]" if stride == 1 else f"[{start}:{limit}:{stride}]")
    return "{" + ", ".join(items) + "}"


def format_padding(padding: tuple[tuple[int, int, int], ...]) -> str:
    dims = []
    for lo, hi, interior in padding:
        dims.append(f"{lo}_{hi}" if interior == 0 else f"{lo}_{hi}_{interior}")
    return "x".join(dims)
