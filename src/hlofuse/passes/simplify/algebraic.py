"""`algebraic-simplifier`: local rewrites that make the graph smaller (a subset of XLA's
AlgebraicSimplifier). The rules are data: `RULES` is an ordered list of `Rule(name, opcode,
fn)`, where `fn(instr)` returns the instruction that should replace `instr` (an existing one,
or a new detached one) or None. Each rule names the test that motivates it.

    add(x, broadcast(-0.0))                 ==>  x
    transpose(transpose(x, {1,0}), {1,0})   ==>  transpose(x, {0,1})  (noop-removal: x)
    transpose(dot(a, b), {1,0})              ==>  dot(b, a)  (contracting dims swapped)
    dot(transpose(a, {1,0}), b), lhs_contracting_dims={0}  ==>  dot(a, b), ...={1}
    dynamic-slice(x, 3, 0), sizes={2,4}     ==>  slice(x), slice={[2:4], [0:4]}  (clamped)

Conditions every rule keeps:

* IEEE semantics: `x + 0.0` is not `x` when x is -0.0, so for floats only `x + (-0.0)` and
  `x - (+0.0)` fold; `x * 0` is never folded for floats (NaN, inf and -0.0 would change);
* a replacement has the replaced instruction's shape (layout included); a rule that would
  change the shape does not fire;
* rules read constants through `uniform_value` (a constant, or a broadcast/reshape of one,
  whose elements are all bitwise equal);
* the pass applies the first matching rule per instruction, over every computation in post
  order, and repeats up to `max_iterations` times until no rule fires.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.registry import register
from hlofuse.passes.utils import (
    Rewriter,
    is_uniform,
    layouts_match,
    ordered,
    scalar_int,
    uniform_value,
)

RuleFn = Callable[[Instruction], Instruction | None]


@dataclass(frozen=True)
class Rule:
    name: str
    opcode: Opcode
    fn: RuleFn


def _is_float(instr: Instruction) -> bool:
    return isinstance(instr.shape, ArrayShape) and instr.shape.dtype.is_float


def _is_int(instr: Instruction) -> bool:
    return isinstance(instr.shape, ArrayShape) and instr.shape.dtype.is_integral


def _is_pred(instr: Instruction) -> bool:
    return isinstance(instr.shape, ArrayShape) and instr.shape.dtype.is_pred


def _fits(instr: Instruction, candidate: Instruction) -> Instruction | None:
    return candidate if layouts_match(candidate.shape, instr.shape) else None


def _new(opcode: Opcode, like: Instruction, operands: list[Instruction],
         **attrs: object) -> Instruction:
    return Instruction.create(opcode, like.shape, operands, name=opcode.value, attrs=attrs,
                              metadata=like.metadata)


# ----- arithmetic identities --------------------------------------------------------------


def _add_zero(instr: Instruction) -> Instruction | None:
    a, b = instr.operands
    for x, z in ((a, b), (b, a)):
        if _is_int(instr) and is_uniform(z, 0):
            return _fits(instr, x)
        if _is_float(instr) and is_uniform(z, 0, negative_zero=True):  # -0 + x == x, always
            return _fits(instr, x)
    return None


def _sub_zero(instr: Instruction) -> Instruction | None:
    x, z = instr.operands
    if _is_int(instr) and is_uniform(z, 0):
        return _fits(instr, x)
    if _is_float(instr) and is_uniform(z, 0, negative_zero=False):  # x - (+0) == x, always
        return _fits(instr, x)
    return None


def _mul_one(instr: Instruction) -> Instruction | None:
    a, b = instr.operands
    if _is_pred(instr):
        return None
    for x, one in ((a, b), (b, a)):
        if is_uniform(one, 1):
            return _fits(instr, x)
    return None


def _mul_zero_int(instr: Instruction) -> Instruction | None:
    if not _is_int(instr):
        return None  # floats: x * 0 is NaN for inf/NaN and -0 for negative x
    for z in instr.operands:
        if is_uniform(z, 0):
            return _fits(instr, z)
    return None


def _div_one(instr: Instruction) -> Instruction | None:
    x, one = instr.operands
    return _fits(instr, x) if not _is_pred(instr) and is_uniform(one, 1) else None


def _involution(instr: Instruction) -> Instruction | None:
    inner = instr.operand(0)
    return _fits(instr, inner.operand(0)) if inner.opcode is instr.opcode else None


# ----- predicates and selects -------------------------------------------------------------


def _select_constant_pred(instr: Instruction) -> Instruction | None:
    pred, on_true, on_false = instr.operands
    v = uniform_value(pred)
    if v is None:
        return None
    return _fits(instr, on_true if bool(v) else on_false)


def _select_same(instr: Instruction) -> Instruction | None:
    _, on_true, on_false = instr.operands
    return _fits(instr, on_true) if on_true is on_false else None


def _and_constant(instr: Instruction) -> Instruction | None:
    if not _is_pred(instr):
        return None
    a, b = instr.operands
    for x, c in ((a, b), (b, a)):
        if is_uniform(c, True):
            return _fits(instr, x)
        if is_uniform(c, False):
            return _fits(instr, c)
    return None


def _or_constant(instr: Instruction) -> Instruction | None:
    if not _is_pred(instr):
        return None
    a, b = instr.operands
    for x, c in ((a, b), (b, a)):
        if is_uniform(c, False):
            return _fits(instr, x)
        if is_uniform(c, True):
            return _fits(instr, c)
    return None


# ----- shape-changing ops -----------------------------------------------------------------


def _broadcast_broadcast(instr: Instruction) -> Instruction | None:
    inner = instr.operand(0)
    if inner.opcode is not Opcode.BROADCAST:
        return None
    outer_dims, inner_dims = instr.dimensions, inner.dimensions
    dims = tuple(outer_dims[d] for d in inner_dims)
    return _new(Opcode.BROADCAST, instr, [inner.operand(0)], dimensions=dims)


def _reshape_of_scalar(instr: Instruction) -> Instruction | None:
    src = instr.operand(0)
    if src.opcode is Opcode.BROADCAST and src.operand(0).array_shape.rank == 0:
        return _new(Opcode.BROADCAST, instr, [src.operand(0)], dimensions=())
    if src.array_shape.rank == 0 and instr.array_shape.rank > 0:
        return _new(Opcode.BROADCAST, instr, [src], dimensions=())
    return None


def _reshape_reshape(instr: Instruction) -> Instruction | None:
    inner = instr.operand(0)
    if inner.opcode is not Opcode.RESHAPE:
        return None
    src = inner.operand(0)
    if layouts_match(src.shape, instr.shape):
        return src
    return _new(Opcode.RESHAPE, instr, [src])


def _slice_slice(instr: Instruction) -> Instruction | None:
    inner = instr.operand(0)
    if inner.opcode is not Opcode.SLICE:
        return None
    ranges = []
    for (s1, _l1, st1), (s2, _l2, st2), n in zip(
        inner.attrs["slice"], instr.attrs["slice"], instr.array_shape.dims, strict=True
    ):
        start, stride = s1 + s2 * st1, st1 * st2
        limit = start + (n - 1) * stride + 1 if n > 0 else start
        ranges.append((start, limit, stride))
    return _new(Opcode.SLICE, instr, [inner.operand(0)], slice=tuple(ranges))


def _concatenate_single(instr: Instruction) -> Instruction | None:
    return _fits(instr, instr.operand(0)) if instr.operand_count == 1 else None


def _dynamic_slice_constant(instr: Instruction) -> Instruction | None:
    src = instr.operand(0)
    dims = src.array_shape.dims
    sizes = tuple(instr.attrs.get("dynamic_slice_sizes", ()))
    index_ops = instr.operands[1:]
    starts: list[int] = []
    if len(index_ops) == 1 and index_ops[0].array_shape.rank == 1:  # old form: one vector
        lit = index_ops[0].literal
        if index_ops[0].opcode is not Opcode.CONSTANT or lit is None or isinstance(lit, tuple):
            return None
        starts = [int(v) for v in lit.reshape(-1)]
    else:
        for op in index_ops:
            v = scalar_int(op)
            if v is None:
                return None
            starts.append(v)
    if len(starts) != len(dims) or len(sizes) != len(dims):
        return None
    ranges = []
    for start, size, dim in zip(starts, sizes, dims, strict=True):
        s = min(max(start, 0), dim - size)  # XLA clamps so the slice stays in bounds
        ranges.append((s, s + size, 1))
    return _new(Opcode.SLICE, instr, [src], slice=tuple(ranges))


def _transpose_transpose(instr: Instruction) -> Instruction | None:
    inner = instr.operand(0)
    if inner.opcode is not Opcode.TRANSPOSE:
        return None
    p1, p2 = inner.dimensions, instr.dimensions
    perm = tuple(p1[p] for p in p2)
    src = inner.operand(0)
    if perm == tuple(range(len(perm))) and layouts_match(src.shape, instr.shape):
        return src
    return _new(Opcode.TRANSPOSE, instr, [src], dimensions=perm)


def _swap_pair(raw: object) -> object:
    """`{a,b}` (a dot's `operand_precision`) with the two entries swapped."""
    text = str(raw).strip()
    parts = text[1:-1].split(",") if text.startswith("{") and text.endswith("}") else []
    return "{" + ",".join(reversed(parts)) + "}" if len(parts) == 2 else raw


def _transpose_dot(instr: Instruction) -> Instruction | None:
    """transpose(dot(a, b)) ==> dot(b, a) where the transpose keeps the batch dimensions in
    place and swaps the two groups of free dimensions, and the dot has no other user (XLA's
    HandleTranspose does the same): the product is computed in the order its users read it,
    where the transpose would be a strided copy (jax writes `x @ W.T` as dot(W, x) then a
    transpose)."""
    dot = instr.operand(0)
    if dot.opcode is not Opcode.DOT or len(dot.users) != 1:
        return None
    a, b = dot.operands
    attrs = dot.attrs
    lb, rb = (tuple(attrs.get(f"{s}_batch_dims", ())) for s in ("lhs", "rhs"))
    lc, rc = (tuple(attrs.get(f"{s}_contracting_dims", ())) for s in ("lhs", "rhs"))
    if not (isinstance(a.shape, ArrayShape) and isinstance(b.shape, ArrayShape)):
        return None
    nb = len(lb)
    nl = a.shape.rank - nb - len(lc)
    nr = b.shape.rank - nb - len(rc)
    want = (tuple(range(nb)) + tuple(range(nb + nl, nb + nl + nr))
            + tuple(range(nb, nb + nl)))
    if tuple(instr.dimensions) != want or nl + nr == 0:
        return None
    new_attrs = dict(attrs)
    new_attrs.update(lhs_batch_dims=rb, rhs_batch_dims=lb,
                     lhs_contracting_dims=rc, rhs_contracting_dims=lc)
    if "operand_precision" in new_attrs:
        new_attrs["operand_precision"] = _swap_pair(new_attrs["operand_precision"])
    return Instruction.create(Opcode.DOT, instr.shape, [b, a], name=dot.name,
                              attrs=new_attrs, metadata=dot.metadata)


def _dot_of_transpose(instr: Instruction) -> Instruction | None:
    """dot(transpose(x), y) ==> dot(x, y) with the dimension numbers read through the
    permutation (XLA's TransposeFolding), where the transpose keeps the order of the operand's
    free dimensions (so the result's dimensions are unchanged); either operand, or both. The
    GEMM reads an operand through strides, so the transposed copy is never written."""
    attrs = dict(instr.attrs)
    operands = list(instr.operands)
    for k, side in ((0, "lhs"), (1, "rhs")):
        t = operands[k]
        if t.opcode is not Opcode.TRANSPOSE or not isinstance(t.shape, ArrayShape):
            continue
        perm = tuple(t.dimensions)
        batch = tuple(attrs.get(f"{side}_batch_dims", ()))
        contracting = tuple(attrs.get(f"{side}_contracting_dims", ()))
        free = [d for d in range(t.shape.rank) if d not in batch and d not in contracting]
        mapped = [perm[d] for d in free]
        if mapped != sorted(mapped):
            continue
        attrs[f"{side}_batch_dims"] = tuple(perm[d] for d in batch)
        attrs[f"{side}_contracting_dims"] = tuple(perm[d] for d in contracting)
        operands[k] = t.operand(0)
    if operands == list(instr.operands):
        return None
    return Instruction.create(Opcode.DOT, instr.shape, operands, name=instr.name, attrs=attrs,
                              metadata=instr.metadata)


# ----- the rule table ---------------------------------------------------------------------

RULES: list[Rule] = [
    # test_passes_algebraic.py::test_add_zero_int / test_add_zero_float_ieee
    Rule("add-zero", Opcode.ADD, _add_zero),
    # test_passes_algebraic.py::test_sub_zero
    Rule("subtract-zero", Opcode.SUBTRACT, _sub_zero),
    # test_passes_algebraic.py::test_mul_one
    Rule("multiply-one", Opcode.MULTIPLY, _mul_one),
    # test_passes_algebraic.py::test_mul_zero_int_folds_float_stays
    Rule("multiply-zero-int", Opcode.MULTIPLY, _mul_zero_int),
    # test_passes_algebraic.py::test_div_one
    Rule("divide-one", Opcode.DIVIDE, _div_one),
    # test_passes_algebraic.py::test_negate_negate
    Rule("negate-negate", Opcode.NEGATE, _involution),
    # test_passes_algebraic.py::test_not_not
    Rule("not-not", Opcode.NOT, _involution),
    # test_passes_algebraic.py::test_select_constant_pred
    Rule("select-constant-pred", Opcode.SELECT, _select_constant_pred),
    # test_passes_algebraic.py::test_select_same_branches
    Rule("select-same", Opcode.SELECT, _select_same),
    # test_passes_algebraic.py::test_and_or_constants
    Rule("and-constant", Opcode.AND, _and_constant),
    # test_passes_algebraic.py::test_and_or_constants
    Rule("or-constant", Opcode.OR, _or_constant),
    # test_passes_algebraic.py::test_broadcast_broadcast
    Rule("broadcast-broadcast", Opcode.BROADCAST, _broadcast_broadcast),
    # test_passes_algebraic.py::test_reshape_of_scalar_broadcast
    Rule("reshape-of-scalar", Opcode.RESHAPE, _reshape_of_scalar),
    # test_passes_algebraic.py::test_reshape_reshape
    Rule("reshape-reshape", Opcode.RESHAPE, _reshape_reshape),
    # test_passes_algebraic.py::test_slice_slice
    Rule("slice-slice", Opcode.SLICE, _slice_slice),
    # test_passes_algebraic.py::test_concatenate_single
    Rule("concatenate-single", Opcode.CONCATENATE, _concatenate_single),
    # test_passes_algebraic.py::test_dynamic_slice_constant_indices_clamped
    Rule("dynamic-slice-constant", Opcode.DYNAMIC_SLICE, _dynamic_slice_constant),
    # test_passes_algebraic.py::test_transpose_transpose
    Rule("transpose-transpose", Opcode.TRANSPOSE, _transpose_transpose),
    # test_passes_algebraic.py::test_transpose_of_dot_swaps_operands
    Rule("transpose-dot", Opcode.TRANSPOSE, _transpose_dot),
    # test_passes_algebraic.py::test_dot_of_transpose_folds
    Rule("dot-of-transpose", Opcode.DOT, _dot_of_transpose),
]


def _by_opcode(rules: list[Rule]) -> dict[Opcode, list[Rule]]:
    out: dict[Opcode, list[Rule]] = {}
    for r in rules:
        out.setdefault(r.opcode, []).append(r)
    return out


_BY_OPCODE = _by_opcode(RULES)


def simplify_computation(comp: Computation, fired: dict[str, int] | None = None) -> bool:
    edit = Rewriter(comp)
    for instr in ordered(comp):
        for rule in _BY_OPCODE.get(instr.opcode, ()):
            new = rule.fn(instr)
            if new is None or new is instr or not layouts_match(new.shape, instr.shape):
                continue
            edit.replace(instr, new)
            if fired is not None:
                fired[rule.name] = fired.get(rule.name, 0) + 1
            break
    return edit.finish()


@register("algebraic-simplifier")
@dataclass(frozen=True)
class AlgebraicSimplifier:
    """Apply `RULES` until none fires (at most `max_iterations` sweeps)."""

    max_iterations: int = 8

    name: ClassVar[str] = "algebraic-simplifier"

    def run(self, module: Module) -> bool:
        changed_any = False
        for _ in range(max(1, self.max_iterations)):
            changed = False
            for comp in list(module.computations):  # unreachable ones too: DCE drops them
                changed |= simplify_computation(comp)
            changed_any |= changed
            if not changed:
                break
        return changed_any
