"""Shape inference for the indexing-heavy and control-flow HLO ops: reduce, reduce-window,
select-and-scatter, dot, convolution, gather, scatter, sort, map, cholesky, triangular-solve,
while, conditional, call, fusion, infeed and outfeed.

Follows XLA's `ShapeInference` (window arithmetic, gather/scatter dimension numbers, dot
dimension numbers, convolution `dim_labels`) and its `VerifyReducerShape`. Conditions enforced:
dimension lists in range, unique and (where XLA requires it) sorted; matching operand dimensions
and element types for variadic ops; reducers take 2N scalar parameters (accumulators, then
inputs) and return N scalars matching the init values; sort comparators take 2N scalars and
return pred[]; map functions take one scalar per operand; window sizes, strides and dilations
positive; dot/convolution contracted and batch sizes equal; a preferred result element type
(taken from the declared shape) is not narrower than an integral input; while condition/body
take one parameter of the loop shape and return pred[] / the loop shape; conditional selectors
are pred[] (2 branches, named true_computation and false_computation) or s32[] (N
branch_computations) and each branch takes its operand and returns the
common result; call and fusion operands match the callee's parameters; fusion kinds are
known. The `_shape_util`
helpers raise `HloVerifyError` with what was expected and what was found.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hlofuse.ir._shape_util import (
    attr_int,
    attr_ints,
    callee,
    check_dim_list,
    expect_array,
    expect_arrays,
    expect_scalar,
    fail,
    fmt,
    fmt_list,
    ints_text,
    same_ignoring_fp,
    same_shape,
    signature,
    strip_layout,
    tuple_or_single,
)
from hlofuse.ir.attributes import WindowDim
from hlofuse.ir.dtypes import PRED, S32, DType
from hlofuse.ir.opcodes import FUSION_KINDS, FusionKind
from hlofuse.ir.shape import ArrayShape, Shape, TokenShape, TupleShape

if TYPE_CHECKING:
    from hlofuse.ir.computation import Computation

_Called = Sequence["Computation"]


# ----- reducers ---------------------------------------------------------------------------


def check_reducer(op: str, comp: Computation, inits: Sequence[ArrayShape],
                  input_dtypes: Sequence[DType]) -> list[ArrayShape]:
    """XLA's VerifyReducerShape: (acc..., in...) -> acc or (acc...); returns the accumulators."""
    params, root = signature(comp)
    k = len(inits)
    if len(params) != 2 * k:
        fail(f"{op} to_apply {comp.name} must take {2 * k} parameters, takes {len(params)}")
    if isinstance(root, TupleShape):
        if len(root.elements) != k:
            fail(f"{op} to_apply {comp.name} must return {k} values, returns {fmt(root)}")
        accs_raw: Sequence[Shape] = root.elements
    else:
        if k != 1:
            fail(f"{op} to_apply {comp.name} must return a tuple of {k} scalars, "
                 f"returns {fmt(root)}")
        accs_raw = (root,)
    accs: list[ArrayShape] = []
    for acc in accs_raw:
        if not isinstance(acc, ArrayShape) or acc.dims:
            fail(f"{op} to_apply {comp.name} must return scalars, returns {fmt(root)}")
        accs.append(acc)
    for i in range(k):
        acc, p_acc, p_in = accs[i], params[i], params[k + i]
        if not same_shape(acc, p_acc):
            fail(f"{op} to_apply {comp.name} parameter {i} {fmt(p_acc)} differs from its "
                 f"result {fmt(acc)}")
        if not same_ignoring_fp(acc, inits[i]):
            fail(f"{op} to_apply {comp.name} accumulator {fmt(acc)} differs from init value "
                 f"{i} {fmt(inits[i])}")
        elem = ArrayShape(input_dtypes[i], ())
        if not same_ignoring_fp(elem, p_in):
            fail(f"{op} to_apply {comp.name} parameter {k + i} {fmt(p_in)} differs from the "
                 f"input element type {fmt(elem)}")
    return accs


def _inputs_and_inits(op: str, ss: Sequence[Shape]) -> tuple[list[ArrayShape],
                                                             list[ArrayShape]]:
    if len(ss) % 2:
        fail(f"{op} expects inputs then as many init values (an even operand count), "
             f"found {len(ss)} operands")
    k = len(ss) // 2
    inputs = expect_arrays(ss[:k], f"{op} input")
    inits = [expect_scalar(s, f"{op} init value {i}") for i, s in enumerate(ss[k:])]
    for a in inputs[1:]:
        if a.dims != inputs[0].dims:
            fail(f"{op} inputs must have the same dimensions: {fmt(inputs[0])} vs {fmt(a)}")
    return inputs, inits


def reduce(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
           declared: Any) -> Shape:
    inputs, inits = _inputs_and_inits("reduce", ss)
    first = inputs[0]
    dims = attr_ints(attrs, "dimensions", "reduce")
    check_dim_list(dims, first.rank, "reduce", "dimensions")
    reduced = set(dims)
    keep = tuple(d for i, d in enumerate(first.dims) if i not in reduced)
    comp = callee(attrs, "to_apply", called, 0, "reduce")
    accs = check_reducer("reduce", comp, inits, [a.dtype for a in inputs])
    return tuple_or_single([ArrayShape(acc.dtype, keep) for acc in accs])


def window_output(op: str, dims: Sequence[int], window: Sequence[WindowDim]) -> tuple[int, ...]:
    """XLA's InferWindowOutputShape: dilate, pad, then count strided window positions."""
    if len(window) != len(dims):
        fail(f"{op} window has {len(window)} dimensions but the operand has {len(dims)}")
    out = []
    for i, (d, w) in enumerate(zip(dims, window, strict=True)):
        if w.size <= 0 or w.stride <= 0:
            fail(f"{op} window dimension {i} needs a positive size and stride, found "
                 f"size={w.size} stride={w.stride}")
        if w.base_dilation < 1 or w.window_dilation < 1:
            fail(f"{op} window dimension {i} needs dilations >= 1, found "
                 f"lhs_dilate={w.base_dilation} rhs_dilate={w.window_dilation}")
        dilated_base = 0 if d == 0 else (d - 1) * w.base_dilation + 1
        padded = w.pad_lo + dilated_base + w.pad_hi
        dilated_window = (w.size - 1) * w.window_dilation + 1
        out.append(0 if dilated_window > padded else (padded - dilated_window) // w.stride + 1)
    return tuple(out)


def _window(op: str, attrs: Mapping[str, Any], rank: int) -> Sequence[WindowDim]:
    window = attrs.get("window")
    if window is None and rank:  # a scalar operand takes the empty window (XLA's parser)
        fail(f"{op} requires attribute window")
    return window or ()


def reduce_window(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                  declared: Any) -> Shape:
    inputs, inits = _inputs_and_inits("reduce-window", ss)
    window = _window("reduce-window", attrs, inputs[0].rank)
    out_dims = window_output("reduce-window", inputs[0].dims, window)
    comp = callee(attrs, "to_apply", called, 0, "reduce-window")
    accs = check_reducer("reduce-window", comp, inits, [a.dtype for a in inputs])
    return tuple_or_single([ArrayShape(acc.dtype, out_dims) for acc in accs])


def select_and_scatter(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                       declared: Any) -> Shape:
    operand = expect_array(ss[0], "select-and-scatter operand")
    source = expect_array(ss[1], "select-and-scatter source")
    init = expect_scalar(ss[2], "select-and-scatter init value")
    select = callee(attrs, "select", called, 0, "select-and-scatter")
    params, root = signature(select)
    elem = ArrayShape(operand.dtype, ())
    if len(params) != 2 or not all(same_shape(p, elem) for p in params):
        fail(f"select-and-scatter select {select.name} must take ({fmt(elem)}, {fmt(elem)}), "
             f"takes ({fmt_list(params)})")
    if not same_shape(root, ArrayShape(PRED, ())):
        fail(f"select-and-scatter select {select.name} must return pred[], returns {fmt(root)}")
    scatter = callee(attrs, "scatter", called, 1, "select-and-scatter")
    check_reducer("select-and-scatter", scatter, [init], [source.dtype])
    window = _window("select-and-scatter", attrs, operand.rank)
    out = window_output("select-and-scatter", operand.dims, window)
    if out != source.dims:
        fail(f"select-and-scatter source {fmt(source)} must have the windowed operand's "
             f"dimensions {ints_text(out)}")
    return ArrayShape(operand.dtype, operand.dims)


# ----- dot and convolution ----------------------------------------------------------------


def _higher_precision(a: DType, b: DType) -> DType:
    """XLA's ShapeUtil::HigherPrecisionElementType: the wider type; at equal width a float
    (or complex) type over an integral one, else the lhs's."""
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    if (b.is_float or b.is_complex) and not (a.is_float or a.is_complex):
        return b
    return a


def _result_dtype(op: str, lhs: ArrayShape, rhs: ArrayShape, declared: Shape | None) -> DType:
    """The result element type as XLA infers it: operands may differ in type (s8 x s16,
    bf16 x s4, f32 x c64: mixed-precision dots); the result is the declared type, which
    must not be narrower than the wider integral operand type (XLA's MaybeUpcast)."""
    if lhs.dtype.is_pred != rhs.dtype.is_pred:
        fail(f"{op} operands must both be pred or neither: {fmt(lhs)} vs {fmt(rhs)}")
    wider = _higher_precision(lhs.dtype, rhs.dtype)
    if not isinstance(declared, ArrayShape) or declared.dtype == wider:
        return wider
    preferred = declared.dtype
    if not (wider.is_float or wider.is_complex) and preferred.bits < wider.bits:
        fail(f"{op} result type {preferred} must not be narrower than the operand type "
             f"{wider}")
    return preferred


def dot(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
        declared: Shape | None) -> Shape:
    lhs = expect_array(ss[0], "dot lhs")
    rhs = expect_array(ss[1], "dot rhs")
    lb = attr_ints(attrs, "lhs_batch_dims", "dot", ())
    rb = attr_ints(attrs, "rhs_batch_dims", "dot", ())
    lc = attr_ints(attrs, "lhs_contracting_dims", "dot", ())
    rc = attr_ints(attrs, "rhs_contracting_dims", "dot", ())
    check_dim_list(lb + lc, lhs.rank, "dot", "lhs batch+contracting dims")
    check_dim_list(rb + rc, rhs.rank, "dot", "rhs batch+contracting dims")
    if len(lc) != len(rc):
        fail(f"dot must contract as many dimensions on each side: lhs_contracting_dims="
             f"{ints_text(lc)} vs rhs_contracting_dims={ints_text(rc)}")
    if len(lb) != len(rb):
        fail(f"dot must have as many batch dimensions on each side: lhs_batch_dims="
             f"{ints_text(lb)} vs rhs_batch_dims={ints_text(rb)}")
    for kind, ld, rd in (("contracting", lc, rc), ("batch", lb, rb)):
        for a, b in zip(ld, rd, strict=True):
            if lhs.dims[a] != rhs.dims[b]:
                fail(f"dot {kind} dimension sizes differ: lhs dimension {a} of {fmt(lhs)} is "
                     f"{lhs.dims[a]}, rhs dimension {b} of {fmt(rhs)} is {rhs.dims[b]}")
    dtype = _result_dtype("dot", lhs, rhs, declared)
    lused, rused = set(lb) | set(lc), set(rb) | set(rc)
    dims = ([lhs.dims[d] for d in lb]
            + [s for i, s in enumerate(lhs.dims) if i not in lused]
            + [s for i, s in enumerate(rhs.dims) if i not in rused])
    return ArrayShape(dtype, tuple(dims))


_LABELS = re.compile(r"([0-9bf]+)_([0-9io]+)->([0-9bf]+)")


def _label_positions(labels: str, rank: int, specials: str, what: str) -> tuple[
        list[int], list[int]]:
    """Positions of the two special labels (e.g. 'b','f') and of spatial dims 0, 1, ..."""
    if len(labels) != rank:
        fail(f"convolution dim_labels {what} part {labels!r} does not match rank {rank}")
    if sorted(labels) != sorted(specials + "".join(str(i) for i in range(rank - 2))):
        fail(f"convolution dim_labels {what} part {labels!r} must name {specials!r} and "
             f"spatial dimensions 0..{rank - 3} once each")
    return [labels.index(c) for c in specials], [labels.index(str(i)) for i in range(rank - 2)]


def convolution(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                declared: Shape | None) -> Shape:
    lhs = expect_array(ss[0], "convolution lhs")
    rhs = expect_array(ss[1], "convolution rhs")
    raw = str(attrs.get("dim_labels", "")).strip("{}\"' ")
    m = _LABELS.fullmatch(raw)
    if m is None:
        fail(f"convolution requires dim_labels like b01f_01io->b01f, found {raw!r}")
    if not lhs.rank == rhs.rank >= 2:
        fail(f"convolution operands must have the same rank >= 2: {fmt(lhs)} vs {fmt(rhs)}")
    (lb, lf), lsp = _label_positions(m.group(1), lhs.rank, "bf", "lhs")
    (ki, ko), ksp = _label_positions(m.group(2), rhs.rank, "io", "kernel")
    (ob, of), osp = _label_positions(m.group(3), lhs.rank, "bf", "output")
    nsp = lhs.rank - 2
    window = attrs.get("window")
    if window is None:
        window = tuple(WindowDim(size=rhs.dims[k]) for k in ksp)
    if len(window) != nsp:
        fail(f"convolution window has {len(window)} dimensions, expected {nsp}")
    for j, w in enumerate(window):
        if w.size != rhs.dims[ksp[j]]:
            fail(f"convolution window size {w.size} differs from kernel spatial dimension "
                 f"{j} ({rhs.dims[ksp[j]]}) of {fmt(rhs)}")
    fgc = attr_int(attrs, "feature_group_count", "convolution", 1)
    bgc = attr_int(attrs, "batch_group_count", "convolution", 1)
    if fgc < 1 or bgc < 1 or (fgc > 1 and bgc > 1):
        fail(f"convolution feature_group_count={fgc} and batch_group_count={bgc} must be "
             f">= 1 and not both > 1")
    batch, in_feat = lhs.dims[lb], lhs.dims[lf]
    k_in, k_out = rhs.dims[ki], rhs.dims[ko]
    if in_feat != k_in * fgc:
        fail(f"convolution input features ({in_feat}) must equal kernel input features "
             f"({k_in}) times feature_group_count ({fgc})")
    if k_out % fgc or k_out % bgc or batch % bgc:
        fail(f"convolution kernel output features ({k_out}) and batch ({batch}) must divide "
             f"by the group counts ({fgc}, {bgc})")
    spatial = window_output("convolution", [lhs.dims[p] for p in lsp], window)
    out = [0] * lhs.rank
    out[ob], out[of] = batch // bgc, k_out
    for j, p in enumerate(osp):
        out[p] = spatial[j]
    return ArrayShape(_result_dtype("convolution", lhs, rhs, declared), tuple(out))


# ----- gather and scatter -----------------------------------------------------------------


def _expanded_indices(op: str, indices: ArrayShape, ivd: int) -> tuple[int, ...]:
    if not indices.dtype.is_integral:
        fail(f"{op} indices must be integral, found {fmt(indices)}")
    if not 0 <= ivd <= indices.rank:
        fail(f"{op} index_vector_dim {ivd} out of range for indices {fmt(indices)}")
    return (*indices.dims, 1) if ivd == indices.rank else indices.dims


def _disjoint(op: str, a: Sequence[int], an: str, b: Sequence[int], bn: str) -> None:
    common = set(a) & set(b)
    if common:
        fail(f"{op} {an}={ints_text(a)} and {bn}={ints_text(b)} share dimension {min(common)}")


def gather(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
           declared: Any) -> Shape:
    operand = expect_array(ss[0], "gather operand")
    indices = expect_array(ss[1], "gather start indices")
    ivd = attr_int(attrs, "index_vector_dim", "gather")
    exp = _expanded_indices("gather", indices, ivd)
    offset = attr_ints(attrs, "offset_dims", "gather")
    collapsed = attr_ints(attrs, "collapsed_slice_dims", "gather", ())
    sim = attr_ints(attrs, "start_index_map", "gather")
    obd = attr_ints(attrs, "operand_batching_dims", "gather", ())
    sibd = attr_ints(attrs, "start_indices_batching_dims", "gather", ())
    sizes = attr_ints(attrs, "slice_sizes", "gather")
    r = operand.rank
    out_rank = len(offset) + len(exp) - 1
    check_dim_list(offset, out_rank, "gather", "offset_dims", sorted_=True)
    check_dim_list(collapsed, r, "gather", "collapsed_slice_dims", sorted_=True)
    check_dim_list(obd, r, "gather", "operand_batching_dims", sorted_=True)
    _disjoint("gather", collapsed, "collapsed_slice_dims", obd, "operand_batching_dims")
    if len(sim) != exp[ivd]:
        fail(f"gather start_index_map={ints_text(sim)} must have {exp[ivd]} entries (the "
             f"index vector size of {fmt(indices)})")
    check_dim_list(sim, r, "gather", "start_index_map")
    _disjoint("gather", sim, "start_index_map", obd, "operand_batching_dims")
    check_dim_list(sibd, len(exp), "gather", "start_indices_batching_dims")
    if ivd in sibd or len(sibd) != len(obd):
        fail(f"gather start_indices_batching_dims={ints_text(sibd)} must pair with "
             f"operand_batching_dims={ints_text(obd)} and exclude index_vector_dim {ivd}")
    if len(sizes) != r:
        fail(f"gather slice_sizes={ints_text(sizes)} must have one entry per dimension of "
             f"{fmt(operand)}")
    for i, s in enumerate(sizes):
        if not 0 <= s <= operand.dims[i]:
            fail(f"gather slice_sizes={ints_text(sizes)} out of bounds in dimension {i} of "
                 f"{fmt(operand)}")
    for d in collapsed + obd:
        if sizes[d] > 1:
            fail(f"gather can only collapse dimensions of slice size 0 or 1, but slice_sizes["
                 f"{d}] is {sizes[d]}")
    if len(offset) + len(collapsed) + len(obd) != r:
        fail(f"gather offset_dims={ints_text(offset)}, collapsed_slice_dims="
             f"{ints_text(collapsed)} and operand_batching_dims={ints_text(obd)} must "
             f"account for all {r} dimensions of {fmt(operand)}")
    removed = set(collapsed) | set(obd)
    offset_sizes = iter([s for i, s in enumerate(sizes) if i not in removed])
    batch_sizes = iter([s for i, s in enumerate(exp) if i != ivd])
    offset_set = set(offset)
    out = [next(offset_sizes) if i in offset_set else next(batch_sizes) for i in range(out_rank)]
    return ArrayShape(operand.dtype, tuple(out))


def scatter(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
            declared: Any) -> Shape:
    if len(ss) % 2 == 0:
        fail(f"scatter expects N operands, indices and N updates (an odd count), found "
             f"{len(ss)}")
    k = (len(ss) - 1) // 2
    operands = expect_arrays(ss[:k], "scatter operand")
    indices = expect_array(ss[k], "scatter indices")
    updates = expect_arrays(ss[k + 1:], "scatter update")
    op0, up0 = operands[0], updates[0]
    for o, u in zip(operands, updates, strict=True):
        if o.dims != op0.dims or u.dims != up0.dims:
            fail(f"scatter operands (and updates) must share dimensions: {fmt_list(ss)}")
        if o.dtype != u.dtype:
            fail(f"scatter update {fmt(u)} must have its operand's element type {fmt(o)}")
    ivd = attr_int(attrs, "index_vector_dim", "scatter")
    exp = _expanded_indices("scatter", indices, ivd)
    uwd = attr_ints(attrs, "update_window_dims", "scatter")
    iwd = attr_ints(attrs, "inserted_window_dims", "scatter", ())
    sdod = attr_ints(attrs, "scatter_dims_to_operand_dims", "scatter")
    ibd = attr_ints(attrs, "input_batching_dims", "scatter", ())
    sibd = attr_ints(attrs, "scatter_indices_batching_dims", "scatter", ())
    r = op0.rank
    check_dim_list(uwd, up0.rank, "scatter", "update_window_dims", sorted_=True)
    check_dim_list(iwd, r, "scatter", "inserted_window_dims", sorted_=True)
    check_dim_list(ibd, r, "scatter", "input_batching_dims", sorted_=True)
    _disjoint("scatter", iwd, "inserted_window_dims", ibd, "input_batching_dims")
    if len(uwd) + len(iwd) + len(ibd) != r:
        fail(f"scatter update_window_dims={ints_text(uwd)}, inserted_window_dims="
             f"{ints_text(iwd)} and input_batching_dims={ints_text(ibd)} must account for "
             f"all {r} dimensions of {fmt(op0)}")
    if len(sdod) != exp[ivd]:
        fail(f"scatter scatter_dims_to_operand_dims={ints_text(sdod)} must have {exp[ivd]} "
             f"entries (the index vector size of {fmt(indices)})")
    check_dim_list(sdod, r, "scatter", "scatter_dims_to_operand_dims")
    check_dim_list(sibd, len(exp), "scatter", "scatter_indices_batching_dims")
    if ivd in sibd or len(sibd) != len(ibd):
        fail(f"scatter scatter_indices_batching_dims={ints_text(sibd)} must pair with "
             f"input_batching_dims={ints_text(ibd)} and exclude index_vector_dim {ivd}")
    if up0.rank != len(uwd) + len(exp) - 1:
        fail(f"scatter updates {fmt(up0)} must have rank {len(uwd) + len(exp) - 1} "
             f"(update_window_dims plus the index batch dimensions)")
    removed = set(iwd) | set(ibd)
    window_operand_dims = [i for i in range(r) if i not in removed]
    for i, d in enumerate(uwd):
        if up0.dims[d] > op0.dims[window_operand_dims[i]]:
            fail(f"scatter update window dimension {d} of {fmt(up0)} is larger than operand "
                 f"dimension {window_operand_dims[i]} of {fmt(op0)}")
    scatter_sizes = [s for i, s in enumerate(up0.dims) if i not in set(uwd)]
    index_sizes = [s for i, s in enumerate(exp) if i != ivd]
    if scatter_sizes != index_sizes:
        fail(f"scatter update scatter dimensions {ints_text(scatter_sizes)} of {fmt(up0)} must "
             f"match the index batch dimensions {ints_text(index_sizes)} of {fmt(indices)}")
    comp = callee(attrs, "to_apply", called, 0, "scatter")
    check_reducer("scatter", comp, [ArrayShape(o.dtype, ()) for o in operands],
                  [u.dtype for u in updates])
    return tuple_or_single([ArrayShape(o.dtype, o.dims) for o in operands])


# ----- sort, map, linear algebra, collectives ---------------------------------------------


def sort(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
         declared: Any) -> Shape:
    arrays = expect_arrays(ss, "sort operand")
    for a in arrays[1:]:
        if a.dims != arrays[0].dims:
            fail(f"sort operands must have the same dimensions: {fmt(arrays[0])} vs {fmt(a)}")
    dims = attr_ints(attrs, "dimensions", "sort")
    if len(dims) != 1:
        fail(f"sort needs exactly one dimension, found dimensions={ints_text(dims)}")
    check_dim_list(dims, arrays[0].rank, "sort", "dimensions")
    comp = callee(attrs, "to_apply", called, 0, "sort")
    params, root = signature(comp)
    want = [ArrayShape(a.dtype, ()) for a in arrays for _ in (0, 1)]
    if len(params) != len(want) or not all(
            same_shape(p, w) for p, w in zip(params, want, strict=True)):
        fail(f"sort comparator {comp.name} must take ({fmt_list(want)}), takes "
             f"({fmt_list(params)})")
    if not same_shape(root, ArrayShape(PRED, ())):
        fail(f"sort comparator {comp.name} must return pred[], returns {fmt(root)}")
    return tuple_or_single([ArrayShape(a.dtype, a.dims) for a in arrays])


def topk(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
         declared: Any) -> Shape:
    """XLA's TopK: the k largest (or smallest) along the last dimension, values and s32 indices."""
    (operand,) = expect_arrays(ss, "topk operand")
    k = attrs.get("k")
    if not isinstance(k, int):
        fail("topk needs an integer attribute k")
    if operand.rank == 0:
        fail("topk needs an operand of rank >= 1, got a scalar")
    if not 0 <= k <= operand.dims[-1]:
        fail(f"topk k={k} must be in [0, {operand.dims[-1]}] for {fmt(operand)}")
    dims = (*operand.dims[:-1], k)
    return tuple_or_single([ArrayShape(operand.dtype, dims), ArrayShape(S32, dims)])


def map_(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
         declared: Any) -> Shape:
    arrays = expect_arrays(ss, "map operand")
    first = arrays[0]
    for a in arrays[1:]:
        if a.dims != first.dims:
            fail(f"map operands must have the same dimensions: {fmt(first)} vs {fmt(a)}")
    dims = attrs.get("dimensions")
    if dims is not None and tuple(dims) != tuple(range(first.rank)):
        fail(f"map dimensions={ints_text(dims)} must be all dimensions of {fmt(first)} in "
             f"order")
    comp = callee(attrs, "to_apply", called, 0, "map")
    params, root = signature(comp)
    want = [ArrayShape(a.dtype, ()) for a in arrays]
    if len(params) != len(want) or not all(
            same_shape(p, w) for p, w in zip(params, want, strict=True)):
        fail(f"map function {comp.name} must take ({fmt_list(want)}), takes "
             f"({fmt_list(params)})")
    if not isinstance(root, ArrayShape) or root.dims:
        fail(f"map function {comp.name} must return a scalar, returns {fmt(root)}")
    return ArrayShape(root.dtype, first.dims)


def _square_matrix(op: str, a: ArrayShape) -> None:
    if a.rank < 2 or a.dims[-1] != a.dims[-2]:
        fail(f"{op} needs square matrices in the two minor dimensions, found {fmt(a)}")
    if not a.dtype.is_inexact:  # XLA: "floating or complex"
        fail(f"{op} needs floating-point or complex operands, found {fmt(a)}")


def cholesky(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
             declared: Any) -> Shape:
    a = expect_array(ss[0], "cholesky operand")
    _square_matrix("cholesky", a)
    return ArrayShape(a.dtype, a.dims)


def triangular_solve(ss: Sequence[Shape], attrs: Mapping[str, Any], called: _Called,
                     declared: Any) -> Shape:
    a = expect_array(ss[0], "triangular-solve a")
    b = expect_array(ss[1], "triangular-solve b")
    _square_matrix("triangular-solve", a)
    if a.dtype != b.dtype or a.rank != b.rank or a.dims[:-2] != b.dims[:-2]:
        fail(f"triangular-solve operands must share element type and batch dimensions: "
             f"{fmt(a)} vs {fmt(b)}")
    left = bool(attrs.get("left_side", False))
    solved = b.dims[-2] if left else b.dims[-1]
    if solved != a.dims[-1]:
        fail(f"triangular-solve b {fmt(b)} does not fit a {fmt(a)} "
             f"(left_side={str(left).lower()})")
    return ArrayShape(b.dtype, b.dims)


# ----- control flow -----------------------------------------------------------------------


def while_(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Sequence[Computation],
           declared: Any) -> Shape:
    init = ss[0]
    cond = callee(attrs, "condition", called, 0, "while")
    body = callee(attrs, "body", called, 1, "while")
    for comp, what in ((cond, "condition"), (body, "body")):
        params, _ = signature(comp)
        if len(params) != 1:
            fail(f"while {what} {comp.name} must take 1 parameter, takes {len(params)}")
        if not same_shape(params[0], init):
            fail(f"while {what} {comp.name} parameter must have the loop shape: "
                 f"{fmt(params[0])} vs {fmt(init)}")
    cond_root = cond.root.shape
    if not (isinstance(cond_root, ArrayShape) and cond_root.dtype == PRED and not cond_root.dims):
        fail(f"while condition {cond.name} must return pred[], returns {fmt(cond_root)}")
    body_root = body.root.shape
    if not same_shape(body_root, init):
        fail(f"while body {body.name} must return the loop shape {fmt(init)}, "
             f"returns {fmt(body_root)}")
    return strip_layout(init)


def conditional(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Sequence[Computation],
                 declared: Any) -> Shape:
    selector = expect_scalar(ss[0], "conditional selector")
    branches = attrs.get("branch_computations")
    if branches is not None and selector.dtype == PRED:
        fail('a conditional with a pred selector takes true_computation and false_computation '
             '(unexpected attribute "branch_computations")')
    if branches is None and attrs.get("true_computation") is not None:
        branches = (attrs["true_computation"], attrs.get("false_computation"))
    if branches is None:
        branches = tuple(called)
    if not branches or any(b is None or not hasattr(b, "instructions") for b in branches):
        fail("conditional requires branch_computations (or true_computation and "
             "false_computation)")
    if selector.dtype != PRED and selector.dtype.name != "s32":
        fail(f"conditional selector must be pred[] or s32[], found {fmt(selector)}")
    if len(ss) - 1 != len(branches):
        fail(f"conditional has {len(branches)} branches but {len(ss) - 1} branch operands")
    result: Shape | None = None
    for i, comp in enumerate(branches):
        params, root = signature(comp)
        if len(params) != 1:
            fail(f"conditional branch {comp.name} must take 1 parameter, takes {len(params)}")
        if not same_shape(params[0], ss[i + 1]):
            fail(f"conditional branch {comp.name} parameter {fmt(params[0])} does not match "
                 f"operand {i + 1} {fmt(ss[i + 1])}")
        if result is None:
            result = root
        elif not same_shape(root, result):
            fail(f"conditional branches must return the same shape: {fmt(result)} vs "
                 f"{fmt(root)} ({comp.name})")
    assert result is not None
    return strip_layout(result)


def _check_params(op: str, comp: Computation, ss: Sequence[Shape]) -> Shape:
    params, root = signature(comp)
    if len(params) != len(ss):
        fail(f"{op} passes {len(ss)} operands to {comp.name}, which takes {len(params)} "
             f"parameters")
    for i, (p, s) in enumerate(zip(params, ss, strict=True)):
        if not same_shape(p, s):
            fail(f"{op} operand {i} {fmt(s)} does not match parameter {i} {fmt(p)} of "
                 f"{comp.name}")
    return strip_layout(root)


def call(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Sequence[Computation],
          declared: Any) -> Shape:
    return _check_params("call", callee(attrs, "to_apply", called, 0, "call"), ss)


def fusion(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Sequence[Computation],
            declared: Any) -> Shape:
    kind = attrs.get("kind", FusionKind.LOOP)
    if kind not in FUSION_KINDS:
        fail(f"fusion kind must be one of {', '.join(FUSION_KINDS)}, found {kind!r}")
    return _check_params("fusion", callee(attrs, "calls", called, 0, "fusion"), ss)


def infeed(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
            declared: Any) -> Shape:
    if not isinstance(ss[0], TokenShape):
        fail(f"infeed operand must be a token, found {fmt(ss[0])}")
    if declared is None:
        fail("infeed needs its result shape written; it cannot be inferred from the operands")
    out = declared
    if not (isinstance(out, TupleShape) and len(out.elements) == 2
            and isinstance(out.elements[1], TokenShape)):
        fail(f"infeed result must be a (data, token[]) tuple, found {fmt(out)}")
    return strip_layout(out)


def outfeed(ss: Sequence[Shape], attrs: Mapping[str, Any], called: Any,
             declared: Any) -> Shape:
    if not isinstance(ss[1], TokenShape):
        fail(f"outfeed operand 1 must be a token, found {fmt(ss[1])}")
    return TokenShape()
