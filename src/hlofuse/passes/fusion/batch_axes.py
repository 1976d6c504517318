"""Which axis of each value in a loop body is the batch, or why some op mixes batch elements:
the analysis behind whole-loop fusion (`loop_fusion.py`), in the spirit of `jax.vmap`'s batch
dimensions run backwards.

    infer(body, leaf_axes, n)  ->  {instruction: axis per leaf}  or a FusionDecision refusal

A value's batch axis is the dimension of size `n` along which it depends on the loop's batch
state: element `e` of the batch only ever reads and writes coordinate `e` of that axis. A value
that depends on no batch state has axis None ("uniform": constants, the counter, tables the loop
reads, the random key it splits): it may be read at any index. Rules, per op (operand axes a):

    elementwise, select, clamp, convert   batch operands share one axis a -> a
    broadcast                             a -> dimensions[a]
    reshape, bitcast                      a -> the result dim of size n with the same row-major
                                          position (refused when the reshape merges the batch)
    transpose                             a -> its position in the permutation
    slice, pad, reverse                   allowed when they leave axis a whole and in place
    concatenate                           along another axis
    dynamic-slice, dynamic-update-slice   axis a sliced whole from start 0; starts uniform
    gather                                indices batched along a dim other than the index
                                          vector's -> that dim's place in the result; a batched
                                          operand only along a batching dim paired with the
                                          indices' batch, or along a dim it keeps whole
    scatter                               a few points per result position
                                          (`analysis/scatter.select_form`), each batched input
                                          along a dim that maps to the same operand dim
                                          (a batching dim, or a window dim spanning it)
    reduce                                over other axes (a shifts down); over a: refused
    dot                                   one batch operand, a free dimension -> its position
    anything else                         only on uniform operands

Conditions enforced: a refusal names the instruction, its computation and the rule
(`whole_loop.op`); fusions are analysed instruction by instruction; other called computations
(a while, a conditional, a call) inside the body are refused (unroll RNG loops first).
"""

from __future__ import annotations

import math

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, leaf_start, leaves
from hlofuse.passes.fusion.decision import FusionDecision

Axis = int | None
# ops a backend computes whole (library routines), which a whole loop cannot run per element
_WHOLE = frozenset({Opcode.SORT, Opcode.TOPK, Opcode.SELECT_AND_SCATTER,
                    Opcode.CONVOLUTION, Opcode.FFT, Opcode.CHOLESKY, Opcode.TRIANGULAR_SOLVE,
                    Opcode.RNG, Opcode.RNG_BIT_GENERATOR, Opcode.CUSTOM_CALL})
Axes = dict[int, list[Axis]]  # id(instruction) -> axis per result leaf
# ops that, run per batch element, loop over that element's other coordinates
_REDUCING = frozenset({Opcode.DOT, Opcode.REDUCE, Opcode.REDUCE_WINDOW})


# a reduce over at most this many of an element's coordinates runs unrolled inside a whole
# loop: straight-line code, so the element loop stays a vector loop (MinAtar's brick count
# over a 10 x 10 grid)
UNROLLED_REDUCE_MAX = 128


def unrolled_reduce(instr: Instruction) -> bool:
    """Is `instr` a reduce small enough to run unrolled per element (`UNROLLED_REDUCE_MAX`)?"""
    if instr.opcode is not Opcode.REDUCE:
        return False
    dims = _dims(instr.operand(0))
    return math.prod(dims[int(d)] for d in instr.dimensions) <= UNROLLED_REDUCE_MAX


def loops_per_element(instr: Instruction) -> bool:
    """Does computing `instr` for one batch element run a loop (a dot or a reduce over the
    element's other coordinates, also inside a fusion; not a small reduce, which runs
    unrolled)? Such a body keeps a whole-loop kernel's element loop from being a vector
    loop."""
    if instr.opcode is Opcode.FUSION:
        return any(loops_per_element(i) for i in instr.fused_computation.instructions)
    return instr.opcode in _REDUCING and not unrolled_reduce(instr)


class Refused(Exception):
    def __init__(self, decision: FusionDecision) -> None:
        super().__init__(str(decision))
        self.decision = decision


def _refuse(instr: Instruction, why: str) -> Refused:
    """The refusal naming `instr`, its computation and, when the module knows it, its line."""
    comp = instr.parent
    figures: dict[str, str] = {"instruction": instr.name, "opcode": instr.opcode.value}
    module = comp.parent if comp is not None else None
    loc = module.source_location(instr) if module is not None else None
    if loc is not None:
        figures["instruction_source"] = f"{loc.file}:{loc.line}"
    where = comp.name if comp is not None else "?"
    return Refused(FusionDecision.no(f"{instr.name} ({instr.opcode.value}) in {where}: {why}",
                                     "whole_loop.op", **figures))


def _dims(instr: Instruction) -> tuple[int, ...]:
    s = instr.shape
    return tuple(s.dims) if isinstance(s, ArrayShape) else ()


def _const_zero(instr: Instruction) -> bool:
    lit = instr.literal
    return instr.opcode is Opcode.CONSTANT and lit is not None and \
        int(lit.reshape(-1)[0]) == 0  # type: ignore[union-attr]


def infer(body: Computation, leaf_axes: list[Axis], n: int) -> Axes:
    """Batch axes of every instruction of `body` (whose parameter's leaves have `leaf_axes`);
    raises `Refused` for an op that mixes elements."""
    axes: Axes = {}
    _computation(body, [leaf_axes], n, axes)
    return axes


def _computation(comp: Computation, param_axes: list[list[Axis]], n: int, axes: Axes) -> None:
    params = sorted(comp.parameters, key=lambda p: p.parameter_number or 0)
    for p, a in zip(params, param_axes, strict=True):
        axes[id(p)] = list(a)
    for instr in comp.post_order():
        if instr.opcode is Opcode.PARAMETER:
            continue
        axes[id(instr)] = _rule(instr, n, axes)


def _rule(instr: Instruction, n: int, axes: Axes) -> list[Axis]:
    op = instr.opcode
    ops = [axes[id(o)] for o in instr.operands]
    if instr.has_side_effect:
        raise _refuse(instr, "has a side effect")
    if op is Opcode.TUPLE:
        return [a for leaf in ops for a in leaf]
    if op is Opcode.GET_TUPLE_ELEMENT:
        start = leaf_start(instr.operand(0).shape, int(instr.attrs["index"]))
        return ops[0][start:start + len(leaves(instr.shape))]
    if op is Opcode.FUSION:
        comp = instr.fused_computation
        _computation(comp, ops, n, axes)
        return axes[id(comp.root)]
    if op in _WHOLE:
        raise _refuse(instr, "is computed whole by a library routine, not element by element")
    if instr.called_computations() and op not in (Opcode.REDUCE, Opcode.MAP,
                                                  Opcode.REDUCE_WINDOW, Opcode.SCATTER):
        raise _refuse(instr, "calls another computation (a loop or branch inside the body)")
    flat = [a for leaf in ops for a in leaf]
    batched = [a for a in flat if a is not None]
    if not batched:
        return [None] * len(leaves(instr.shape))  # uniform in, uniform out
    return [_array_rule(instr, n, [leaf[0] if leaf else None for leaf in ops])]


def _array_rule(instr: Instruction, n: int, a: list[Axis]) -> int:
    op = instr.opcode
    dims = _dims(instr)
    if instr.is_elementwise or op in (Opcode.COPY,):
        got = {x for x in a if x is not None}
        if len(got) != 1:
            raise _refuse(instr, "combines batch values along different axes")
        return got.pop()
    if op is Opcode.DOT:
        return _dot(instr, a)
    if op is Opcode.GATHER:
        return _gather(instr, a)
    if op is Opcode.SCATTER:
        return _scatter(instr, a)
    if op is Opcode.CONCATENATE:
        (d,) = instr.dimensions
        got = {v for v in a if v is not None}
        if len(got) != 1 or d in got:
            raise _refuse(instr, "concatenates along the batch dimension")
        return got.pop()
    x = a[0]
    src = _dims(instr.operand(0))
    if x is None:
        raise _refuse(instr, "reads batch values only through an operand other than the first")
    if op is Opcode.BROADCAST:
        return int(instr.dimensions[x])
    if op in (Opcode.RESHAPE, Opcode.BITCAST):
        before = math.prod(src[:x])
        acc = 1
        for b, d in enumerate(dims):
            if acc == before and d == n and math.prod(dims[b + 1:]) == math.prod(src[x + 1:]):
                return b
            acc *= d
        raise _refuse(instr, "reshapes the batch dimension together with another")
    if op is Opcode.TRANSPOSE:
        return list(instr.dimensions).index(x)
    if op is Opcode.SLICE:
        lo, hi, st = instr.attrs["slice"][x]
        if (int(lo), int(hi), int(st)) == (0, n, 1):
            return x
        raise _refuse(instr, "slices the batch dimension")
    if op is Opcode.PAD:
        if tuple(int(v) for v in instr.attrs["padding"][x]) == (0, 0, 0) and \
                all(v is None for v in a[1:]):
            return x
        raise _refuse(instr, "pads the batch dimension")
    if op is Opcode.REVERSE:
        if x in instr.dimensions:
            raise _refuse(instr, "reverses the batch dimension")
        return x
    if op is Opcode.DYNAMIC_SLICE:
        start = instr.operand(1 + x) if len(instr.operands) > 2 else None
        if dims[x] == n and start is not None and _const_zero(start) and \
                all(v is None for v in a[1:]):
            return x
        raise _refuse(instr, "slices the batch dimension at a dynamic position")
    if op is Opcode.DYNAMIC_UPDATE_SLICE:
        upd = a[1]
        start = instr.operand(2 + x) if len(instr.operands) > 3 else None
        if upd in (None, x) and _dims(instr.operand(1))[x] == n and start is not None and \
                _const_zero(start) and all(v is None for v in a[2:]):
            return x
        raise _refuse(instr, "updates the batch dimension at a dynamic position")
    if op is Opcode.REDUCE:
        red = sorted(int(d) for d in instr.dimensions)
        if x in red or any(v not in (None, x) for v in a[:len(a) // 2]):
            raise _refuse(instr, "reduces over the batch (the elements are not independent)")
        return x - sum(1 for d in red if d < x)
    raise _refuse(instr, f"{op.value} mixes elements of the batch")


def _dot(instr: Instruction, a: list[Axis]) -> int:
    attrs = instr.attrs
    lb = [int(d) for d in attrs.get("lhs_batch_dims", ())]
    lc = [int(d) for d in attrs.get("lhs_contracting_dims", ())]
    rb = [int(d) for d in attrs.get("rhs_batch_dims", ())]
    rc = [int(d) for d in attrs.get("rhs_contracting_dims", ())]
    lrank, rrank = len(_dims(instr.operand(0))), len(_dims(instr.operand(1)))
    lfree = [d for d in range(lrank) if d not in lb and d not in lc]
    rfree = [d for d in range(rrank) if d not in rb and d not in rc]
    if a[0] is not None and a[1] is None and a[0] in lfree:
        return len(lb) + lfree.index(a[0])
    if a[1] is not None and a[0] is None and a[1] in rfree:
        return len(lb) + len(lfree) + rfree.index(a[1])
    raise _refuse(instr, "contracts or batches over the batch dimension")


def _gather(instr: Instruction, a: list[Axis]) -> int:
    attrs = instr.attrs

    def ints(k: str) -> list[int]:
        return [int(v) for v in attrs.get(k, ())]

    x_o, x_i = a[0], a[1]
    od, idd = _dims(instr.operand(0)), _dims(instr.operand(1))
    offset_dims, collapsed = ints("offset_dims"), ints("collapsed_slice_dims")
    obd, sibd, sizes = ints("operand_batching_dims"), ints("start_indices_batching_dims"), \
        ints("slice_sizes")
    ivd = int(attrs.get("index_vector_dim", len(idd)))
    rank = len(_dims(instr))
    batch_out = [d for d in range(rank) if d not in offset_dims]
    batch_dims = [t for t in range(len(idd)) if t != ivd]
    if x_i is not None:
        if x_i == ivd:
            raise _refuse(instr, "reads an index vector that runs along the batch")
        if x_o is not None and (x_o not in obd or sibd[obd.index(x_o)] != x_i):
            raise _refuse(instr, "reads another element's operand (the batch is not a "
                          "batching dimension of the gather)")
        return batch_out[batch_dims.index(x_i)]
    assert x_o is not None
    window = [d for d in range(len(od)) if d not in collapsed and d not in obd]
    if x_o in window and x_o not in ints("start_index_map") and sizes[x_o] == od[x_o]:
        return offset_dims[window.index(x_o)]
    raise _refuse(instr, "gathers across the batch dimension")


def _scatter(instr: Instruction, a: list[Axis]) -> int:
    from hlofuse.analysis.scatter import select_form

    f = select_form(instr)
    if isinstance(f, str):
        raise _refuse(instr, f"is computed whole by a library routine, not element by element: "
                      f"{f}")
    n = f.operands
    found: set[int | None] = set()
    for x in a[:n]:
        if x is not None:
            found.add(x)
    x_i = a[n]
    if x_i is not None:
        found.add(f.operand_dim_of_index(x_i) if x_i != f.ivd else None)
    for x in a[n + 1:]:
        if x is not None:
            found.add(f.operand_dim_of_update(x))
    if None in found or len(found) != 1:
        raise _refuse(instr, "scatters across the batch (its batched inputs do not all run "
                      "along one operand dimension)")
    x = found.pop()
    assert x is not None
    if x in f.sdod and x not in f.ibd and f.win[x] != f.od[x]:
        raise _refuse(instr, "scatters across the batch (an index chooses the batch element)")
    return x
