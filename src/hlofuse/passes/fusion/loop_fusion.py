"""Whole-loop fusion (beyond XLA): a while loop whose body is a per-element map over a batch
becomes one kernel that runs the time loop inside.

    while (i < S) { x = f(x, xs[i]); ys[i] = g(x); i += 1 }          S kernels' worth of calls
 -> fusion(kind=kCustom) { while ... }                               one kernel: for each block of
                                                                     the batch, every iteration,
                                                                     state in L1 / registers

XLA runs a scan's body as one or more kernels per iteration, with the loop on the host (the
study's limit: "loop control runs on the host, loop bodies stay several kernels"). When every
element of the batch evolves independently, the iterations can run element by element instead:
`backends/kernel_ir/lower/whole_loop.py` lowers the fused loop as

    for each block of B elements:            (parallel)
        for t in [0, S):
            for n in the block:              (vector)
                state[n] = body(state[n], xs[t, n], t);  ys[t, n] = ...

Legality (`whole_loop_legal`, each refusal names its rule):

- `whole_loop.trip_count`: the trip count is known (an induction variable i += c, i < S).
- `whole_loop.leaf`: the batch size N is the largest dimension of the leaves the loop changes;
  every carried leaf is the induction variable, passed through unchanged (read any way: a
  table, a parameter), a batch leaf with exactly one dimension of size N (the state; or an
  output whose only update is a `dynamic-update-slice` of a slice of N elements per
  iteration), or a leaf without that dimension whose new value depends on no batch value (a
  random key split every step: computed once per iteration, not per element; or a scan
  output of such values, `urow`, written once after the blocks). A per-step reduction over
  the batch is moved out of the loop first (`loop_reductions.py`).
- `whole_loop.op`: every instruction of the body, and of the fusions it calls, keeps batch
  elements apart (`batch_axes.infer`: elementwise ops, broadcasts, reshapes and transposes that
  keep the batch dimension, slices and concatenates along other dimensions, reductions over
  other dimensions, gathers at positions each element chooses in its own values or in a
  uniform table, scatters of a few points per element, ...). No reduction over the batch, no
  gather or scatter that reaches another element.
- `whole_loop.uniform`: the leaves without the batch dimension hold fewer elements than the
  batch (every block computes them again).
- `whole_loop.side_effect`: no instruction with a side effect.

Profitability (`whole_loop_profitable`): at least `whole_loop_min_trips` iterations (one
iteration gains nothing over a kernel call), and one kernel must be modelled faster than the
body's kernels (`whole_loop.cost`): per iteration, the body as kernels costs

    kernels * host_kernel_overhead_ns + bytes / host_bandwidth_gbs + ops * host_ns_per_op

(`analysis.kernels`, `analysis.cost`: its fused kernels, the bytes they move, their ops); as one
kernel the same ops run with the state in L1 (no bytes but the per-iteration outputs), except
that a dot runs per element as matrix-vector products, `whole_loop_dot_slowdown` times slower
per op than the body's batched GEMM, and a body that loops per element (a reduce or a dot over
the element's own coordinates) runs as scalar code, `whole_loop_scalar_slowdown` times slower
per op than vectorized kernels, and a scatter runs as selects at every position of its
operand (`analysis.scatter.select_ops`). A per-element map (an environment step) wins on bytes and
kernel calls; a policy network's dense layers inside the loop lose (PureJaxRL's PPO rollout:
0.01x jax.jit fused whole, 1.9x as the body's kernels).

Per-step reductions over the batch (`loop_reductions.py` moved them after the loop, as rows
`H[S, N]` and one reduce) are summed per block inside the kernel when the lowering's block
divides the batch and the reduce is an add, max, min, or, and (f32/f64, integers, pred) with its
identity as init (`partial_reductions`): the fusion returns `[N / block, S]` partials (each
block's row its own, so threads share no cache line) and the reduce after it combines them in
block order; `H` is neither written nor read (CartPole's per-step reward: 82 MB each way at 2048
x 10,000). The sum's grouping is the block's (results within rounding; the same on any thread
count).

The rewrite wraps the while into a kCustom fusion whose fused computation is
`params -> tuple -> while -> tuple(changed leaves)` (leaves the loop passes through are read
from its init by their users): the interpreter runs it unchanged (results identical by
construction), kernel accounting counts one kernel, and the cpu backend lowers it as above.
Every decision is recorded in the fusion trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.analysis.cost import dot_ops, ops_per_run
from hlofuse.analysis.kernels import bytes_per_run, kernels_per_run, per_run
from hlofuse.analysis.loops import (
    body_of,
    condition_of,
    induction_variable,
    trip_count,
)
from hlofuse.analysis.scatter import select_ops
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import REASSOCIATIVE_REDUCERS, FusionKind, Opcode
from hlofuse.ir.reducers import identity, simple_reducer
from hlofuse.ir.shape import ArrayShape, TupleShape
from hlofuse.passes.fusion import batch_axes
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.options import HOST_MODEL, FusionPass
from hlofuse.passes.fusion.trace import source_figure, trace_of
from hlofuse.passes.registry import register

PASS = "whole-loop-fusion"


@dataclass(frozen=True)
class LoopPlan:
    """How a whole-fusible loop's carried leaves behave (for the lowering)."""

    batch: int  # N
    counter: int  # leaf index of the induction variable
    kinds: tuple[str, ...]  # per leaf: counter | state | uniform | invariant | output | urow
    axes: tuple[int | None, ...]  # per leaf: its batch axis (None: no batch dimension)


def _shape(instr: Instruction) -> ArrayShape | None:
    s = instr.shape
    return s if isinstance(s, ArrayShape) else None


def _gte_of(instr: Instruction, param: Instruction) -> int | None:
    if instr.opcode is Opcode.GET_TUPLE_ELEMENT and instr.operand(0) is param:
        return int(instr.attrs["index"])
    return None


def row_write(new: Instruction, param: Instruction, k: int
              ) -> tuple[Instruction, list[Instruction]] | None:
    """(the dynamic-update-slice, the fusions it sits in, outermost first) when carried leaf
    `k`'s new value `new` is that leaf with one slice written in place (`ys[i] = y` of a scan,
    as such or fused into a kLoop fusion rooted at the update), and nothing else reads the
    leaf; else None."""
    fusions: list[Instruction] = []
    x = new
    while x.opcode is Opcode.FUSION:
        fusions.append(x)
        x = x.fused_computation.root
    if x.opcode is not Opcode.DYNAMIC_UPDATE_SLICE:
        return None
    base = x.operand(0)
    for f in reversed(fusions):
        if base.opcode is not Opcode.PARAMETER or len(base.users) != 1 or \
                base.parent is not f.fused_computation:
            return None
        base = f.operand(base.parameter_number or 0)
    if _gte_of(base, param) != k or len(base.users) != 1:
        return None
    return x, fusions


def _no(why: str, rule: str) -> tuple[None, FusionDecision]:
    return None, FusionDecision.no(why, rule)


def whole_loop_legal(w: Instruction) -> tuple[LoopPlan | None, FusionDecision]:
    """The leaf plan of while `w`, or why it is not a per-element loop (module docstring).
    The batch is the first dimension size of the state, largest first, under which every
    instruction keeps elements apart (a state [4 envs, 8 features] is batched over the 4)."""
    iv = induction_variable(w)
    if iv is None:
        return _no("the trip count is not known (no induction variable i += c compared with a "
                   "bound)", "whole_loop.trip_count")
    shape = w.shape
    assert isinstance(shape, TupleShape)
    body = body_of(w)
    p = body.parameter(0)
    root = body.root
    if root.opcode is not Opcode.TUPLE:
        return _no("the body's root is not a tuple", "whole_loop.leaf")
    elems = list(shape.elements)
    if any(not isinstance(e, ArrayShape) for e in elems):
        return _no("a carried leaf is itself a tuple", "whole_loop.leaf")
    arrays: list[ArrayShape] = [e for e in elems if isinstance(e, ArrayShape)]
    changing = [k for k in range(len(arrays)) if k != iv.index
                and _gte_of(root.operand(k), p) != k]
    # leaves written one slice per iteration have a dimension per iteration, not the batch
    rows = {k for k in changing if row_write(root.operand(k), p, k) is not None}
    sizes = sorted({d for k in changing if k not in rows for d in arrays[k].dims if d > 1},
                   reverse=True)
    if not sizes:
        return _no("no carried leaf that changes has a batch dimension", "whole_loop.leaf")
    first: tuple[None, FusionDecision] | None = None
    for n in sizes:
        plan, decision = _plan_for(w, n, iv.index, arrays, changing)
        if plan is not None:
            cond = condition_of(w)
            if any(i.has_side_effect for i in cond.instructions):
                return _no("the condition has a side effect", "whole_loop.side_effect")
            return plan, decision
        if first is None:
            first = (None, decision)
    assert first is not None
    return first


def _plan_for(w: Instruction, n: int, counter: int, arrays: list[ArrayShape],
              changing: list[int]) -> tuple[LoopPlan | None, FusionDecision]:
    body = body_of(w)
    p = body.parameter(0)
    root = body.root
    kinds: list[str] = []
    axes: list[int | None] = []
    for k, s in enumerate(arrays):
        dims = tuple(s.dims)
        if k == counter:
            kinds.append("counter")
            axes.append(None)
        elif k not in changing:
            kinds.append("invariant")
            axes.append(None)
        elif dims.count(n) > 1:
            return _no(f"carried leaf {k} ({s}) has more than one dimension of the batch size "
                       f"{n}", "whole_loop.leaf")
        elif n not in dims:
            # a scan output that depends on no batch value (a constant, the counter, a random
            # key's bits): written by the replay after the blocks, not per block
            row = row_write(root.operand(k), p, k) is not None
            kinds.append("urow" if row else "uniform")
            axes.append(None)
        else:
            row = row_write(root.operand(k), p, k) is not None and dims.index(n) > 0
            kinds.append("output" if row else "state")
            axes.append(dims.index(n))
    uniform = sum(s.size for s, kind in zip(arrays, kinds, strict=True) if kind == "uniform")
    if uniform >= n:
        return _no(f"batched over {n} elements, {uniform} elements of the state would not depend "
                   "on the batch (computed again in every block)", "whole_loop.uniform")
    try:
        found = batch_axes.infer(body, axes, n)
    except batch_axes.Refused as exc:
        return None, exc.decision
    out = found[id(root)]
    for k, kind in enumerate(kinds):
        if kind in ("uniform", "urow") and out[k] is not None:
            return _no(f"carried leaf {k} ({arrays[k]}) has no batch dimension, but its new value "
                       "depends on the batch (a reduction over the elements?)", "whole_loop.op")
        if kind in ("state", "output") and out[k] not in (None, axes[k]):
            return _no(f"carried leaf {k} ({arrays[k]}) comes back with its batch along another "
                       "dimension", "whole_loop.op")
    return LoopPlan(n, counter, tuple(kinds), tuple(axes)), FusionDecision.ok(batch=n)


def whole_loop_profitable(w: Instruction, plan: LoopPlan, config: FusionConfig
                          ) -> FusionDecision:
    """Enough iterations to gain over a kernel call, and a uniform part small beside the batch
    (each block recomputes it every iteration)."""
    trips = trip_count(w)
    if trips is None or trips < config.whole_loop_min_trips:
        return FusionDecision.no(f"only {trips} iteration(s): nothing to gain",
                                 "whole_loop_min_trips", trips=trips)
    shape = w.shape
    assert isinstance(shape, TupleShape)
    uniform = sum(e.size for k, e in enumerate(shape.elements) if plan.kinds[k] == "uniform"
                  and isinstance(e, ArrayShape))
    limit = config.whole_loop_max_uniform_elements
    if uniform > limit:
        return FusionDecision.no(
            f"{uniform} elements of the state do not depend on the batch: every block would "
            f"compute them again each iteration (more than {limit})",
            "whole_loop_max_uniform_elements", batch=plan.batch, uniform=uniform, limit=limit)
    return whole_loop_cost(w, plan, config, trips)


def whole_loop_cost(w: Instruction, plan: LoopPlan, config: FusionConfig, trips: int
                    ) -> FusionDecision:
    """One kernel against the body's kernels, per iteration (module docstring)."""
    body, cond = body_of(w), condition_of(w)
    kernels = kernels_per_run(body, cond)
    moved = bytes_per_run(body, cond)
    ops = ops_per_run(body, cond)
    dots = per_run(body, cond, dot_ops)
    selects = per_run(body, cond, select_ops)
    if None in (kernels, moved, ops, dots, selects):
        return FusionDecision.no("the body's cost is not known (a loop inside it has an "
                                 "unknown trip count)", "whole_loop.cost")
    assert kernels is not None and moved is not None and ops is not None and dots is not None
    assert selects is not None
    shape = w.shape
    assert isinstance(shape, TupleShape)
    rows = sum(e.size * e.dtype.itemsize for k, e in enumerate(shape.elements)
               if plan.kinds[k] in ("output", "urow") and isinstance(e, ArrayShape)
               ) // max(trips, 1)
    ns_op = config.host_ns_per_op
    separate = kernels * config.host_kernel_overhead_ns + moved / config.host_bandwidth_gbs \
        + ops * ns_op
    scalar = any(batch_axes.loops_per_element(i) for i in body.instructions)
    ns_element_op = ns_op * (config.whole_loop_scalar_slowdown if scalar else 1.0)
    whole = rows / config.host_bandwidth_gbs + (ops - dots + selects) * ns_element_op \
        + dots * ns_op * config.whole_loop_dot_slowdown
    figures = {"separate_ns": round(separate), "whole_ns": round(whole), "dot_ops": dots,
               "ops": ops, "scatter_select_ops": selects, "kernels_per_iteration": kernels,
               "scalar": scalar}
    if whole >= separate:
        return FusionDecision.no(
            f"one kernel is modelled slower than the body's {kernels} kernel(s) per iteration "
            f"({whole / 1e3:.1f} us against {separate / 1e3:.1f} us; {dots} of its {ops} ops "
            "are dots, which run per element"
            + ("; the body loops per element, so the element loop is scalar" if scalar else "")
            + ")", "whole_loop.cost", **figures)
    return FusionDecision.ok(trips=trips, batch=plan.batch, **figures)


BLOCK = 256  # the smallest block: a block's state stays in L1 across the iterations
BLOCKS = (1024, 512, BLOCK)  # tried largest first (`block_size`)
MIN_BLOCKS = 4  # at least this many blocks, so threads share the batch evenly
L1_STATE_BYTES = 32 * 1024  # a block's carried state must fit a 32 KiB L1 data cache


def block_size(batch: int, state_bytes_per_element: int) -> int:
    """Elements per block of the lowering (`backends/kernel_ir/lower/whole_loop.py`): the
    largest of `BLOCKS` that leaves at least `MIN_BLOCKS` blocks and whose carried state fits
    `L1_STATE_BYTES`, else `BLOCK`. Larger blocks share each iteration's per-block work (the
    uniform part, loop control, row addressing) among more elements: CartPole `separate`,
    2048 x 2000, ran 7.2e8 env-steps/s at 256, 9.7e8 at 512 and 1.08e9 at 1024 (2 blocks)
    here; the paper's program as written 2.54e8 / 2.66e8 / 2.67e8. Here because the fusion's
    per-block partials (`partial_reductions`) are sized by it."""
    for size in BLOCKS:
        if batch >= MIN_BLOCKS * size and size * state_bytes_per_element <= L1_STATE_BYTES:
            return size
    return BLOCK


# reducers whose per-block partials combine to the same result up to rounding (XOR and
# MULTIPLY of `REASSOCIATIVE_REDUCERS` left out: no per-step product or parity seen in RL code)
_PARTIAL_OPS = REASSOCIATIVE_REDUCERS - {Opcode.MULTIPLY, Opcode.XOR}


def _identity_reduce(red: Instruction) -> bool:
    """A reduce of one operand whose reducer is add, max, min, or, and of its two parameters
    (`ir.reducers.simple_reducer`) on an f32/f64 (not a narrow float, whose sums round in
    XLA's order), integer or pred type, and whose init is that op's identity (so applying it
    once more changes nothing)."""
    comp = red.attrs.get("to_apply")
    shape = _shape(red)
    if red.operand_count != 2 or comp is None or shape is None:
        return False
    op, dtype = simple_reducer(comp), shape.dtype
    if op not in _PARTIAL_OPS or dtype.is_complex or (dtype.is_float and dtype.bits < 32):
        return False
    init = red.operand(1)
    lit = init.literal
    return init.opcode is Opcode.CONSTANT and lit is not None and \
        lit.reshape(-1)[0] == identity(op, dtype)  # type: ignore[union-attr]


def partial_block(w: Instruction, plan: LoopPlan) -> int | None:
    """The block a loop's per-block partials sum over: the lowering's (`block_size`, from the
    state's bytes per element), when it divides the batch; else None (no partials)."""
    n = plan.batch
    size = block_size(n, state_bytes_per_element(w, plan))
    return size if n % size == 0 else None


def state_bytes_per_element(w: Instruction, plan: LoopPlan) -> int:
    """The bytes of carried state one batch element of while `w` holds (what `block_size`
    fits into L1)."""
    shape = w.shape
    assert isinstance(shape, TupleShape)
    return sum(e.size * e.dtype.itemsize for e, kind in zip(shape.elements, plan.kinds,
                                                            strict=True)
               if kind == "state" and isinstance(e, ArrayShape)) // plan.batch


def partial_reductions(w: Instruction, plan: LoopPlan) -> dict[int, Instruction]:
    """{leaf: reduce} for each scan output `[S, N]` (`hoist-loop-reductions`' rows of a
    per-step reduction over the batch) that nothing reads after the loop but one reduce over
    the batch, and that start as a broadcast constant: the fused loop returns per-block
    partials `[N / block, S]` instead (`partial_block`), so the kernel never writes the rows
    nor reads their start (CartPole's per-step reward sum: 82 MB each at 2048 x 10,000), and
    the reduce after it combines the partials in block order. (Only when `partial_block`
    gives a block: `fuse_whole_loop` asks.)"""
    shape = w.shape
    assert isinstance(shape, TupleShape)
    out: dict[int, Instruction] = {}
    for k, kind in enumerate(plan.kinds):
        leaf = shape.elements[k]
        if kind != "output" or plan.axes[k] != 1 or not isinstance(leaf, ArrayShape) or \
                leaf.rank != 2:
            continue
        gtes = [u for u in w.users if _gte_of(u, w) == k]
        if len(gtes) != 1 or len(gtes[0].users) != 1:
            continue
        red = gtes[0].users[0]
        start = w.operand(0).operand(k)
        if red.opcode is Opcode.REDUCE and tuple(red.dimensions) == (1,) and \
                _identity_reduce(red) and start.opcode is Opcode.BROADCAST and \
                start.operand(0).opcode is Opcode.CONSTANT:
            out[k] = red
    return out


def fuse_whole_loop(w: Instruction, plan: LoopPlan) -> Instruction:
    """Wrap while `w` (whose init is a tuple instruction) into a kCustom fusion; returns it.

    Scalar constants of the init are cloned into the fused computation (so the loop's
    induction variable is visible there); the fusion's results are the leaves the loop changes
    (counter, state, outputs); users of a leaf the loop passes through read the init instead
    (a table need not be copied out of the kernel)."""
    from hlofuse.ir.fusion import _place_computation  # the one place fusions get positioned

    comp = w.parent
    assert comp is not None and comp.parent is not None
    module = comp.parent
    init = w.operand(0)
    assert init.opcode is Opcode.TUPLE
    shape = w.shape
    assert isinstance(shape, TupleShape)
    fused = Computation("fused_loop")
    operands: list[Instruction] = []
    leaves: list[Instruction] = []
    block = partial_block(w, plan)
    partials = partial_reductions(w, plan) if block is not None else {}
    for k, leaf in enumerate(init.operands):
        s = _shape(leaf)
        if leaf.opcode is Opcode.CONSTANT and s is not None and s.size == 1:
            inner = Instruction.create(Opcode.CONSTANT, leaf.shape, name=leaf.name,
                                       literal=leaf.literal)
        elif k in partials:  # rows the kernel never writes start as a broadcast, made inside
            c = leaf.operand(0)
            value = Instruction.create(Opcode.CONSTANT, c.shape, name=c.name, literal=c.literal)
            value.parent = fused
            fused.instructions.append(value)
            inner = Instruction.create(Opcode.BROADCAST, leaf.shape, [value], name=leaf.name,
                                       attrs=dict(leaf.attrs))
        else:
            inner = Instruction.create(Opcode.PARAMETER, leaf.shape,
                                       name=f"param_{len(operands)}",
                                       parameter_number=len(operands))
            operands.append(leaf)
        inner.parent = fused
        fused.instructions.append(inner)
        leaves.append(inner)
    tup = fused.add(Instruction.create(Opcode.TUPLE, shape, leaves, name="init"))
    loop = fused.add(Instruction.create(Opcode.WHILE, shape, [tup], name=w.name,
                                        attrs=dict(w.attrs), metadata=w.metadata))
    kept = [k for k, kind in enumerate(plan.kinds) if kind != "invariant"]
    outs = [fused.add(Instruction.create(Opcode.GET_TUPLE_ELEMENT, shape.elements[k], [loop],
                                         name=f"{w.name}_leaf{k}", attrs={"index": k}))
            for k in kept]
    for k, red in partials.items():  # per-block partials of the rows, in the fusion
        assert block is not None
        j = kept.index(k)
        rows = outs[j].shape
        assert isinstance(rows, ArrayShape)
        steps, n = rows.dims
        split = fused.add(Instruction.create(
            Opcode.RESHAPE, ArrayShape(rows.dtype, (steps, n // block, block)),
            [outs[j]], name="rows_by_block"))
        init_c = red.operand(1)
        zero = fused.add(Instruction.create(Opcode.CONSTANT, init_c.shape, name="partial_init",
                                            literal=init_c.literal))
        sums = fused.add(Instruction.create(
            Opcode.REDUCE, ArrayShape(rows.dtype, (steps, n // block)), [split, zero],
            name="partials", attrs={**red.attrs, "dimensions": (2,)}))
        # block-major: each block's thread writes its own row (no cache line shared between
        # threads every step)
        outs[j] = fused.add(Instruction.create(
            Opcode.TRANSPOSE, ArrayShape(rows.dtype, (n // block, steps)), [sums],
            name="partials_by_block", attrs={"dimensions": (1, 0)}))
    out_shape = TupleShape(tuple(o.shape for o in outs))
    fused.root = fused.add(Instruction.create(Opcode.TUPLE, out_shape, outs, name="results"))
    fusion = Instruction.create(Opcode.FUSION, out_shape, operands, name="fusion",
                                attrs={"kind": FusionKind.CUSTOM, "calls": (fused,)},
                                metadata=w.metadata)
    comp.add(fusion, before=w)
    results = []
    for k, leaf in enumerate(init.operands):
        if k in kept and k not in partials:  # (the rows' only reader reads the partials)
            results.append(comp.add(Instruction.create(
                Opcode.GET_TUPLE_ELEMENT, shape.elements[k], [fusion], name="leaf",
                attrs={"index": kept.index(k)}), before=w))
        else:
            results.append(leaf)
    whole = comp.add(Instruction.create(Opcode.TUPLE, shape, results, name="loop_result"),
                     before=w)
    w.replace_all_uses_with(whole)
    for k, red in partials.items():  # the reduce after the loop combines the partials
        got = comp.add(Instruction.create(
            Opcode.GET_TUPLE_ELEMENT, out_shape.elements[kept.index(k)], [fusion],
            name="partials", attrs={"index": kept.index(k)}), before=red)
        combined = comp.add(Instruction.create(
            Opcode.REDUCE, red.shape, [got, red.operand(1)], name=red.name,
            attrs={**red.attrs, "dimensions": (0,)}, metadata=red.metadata), before=red)
        red.replace_all_uses_with(combined)
    comp.remove(w)
    if partials:  # the rows' reduce, what fed it, and their start (read through the tuple)
        from hlofuse.passes.simplify.dce import dce_computation

        for u in list(whole.users):
            if u.opcode is Opcode.GET_TUPLE_ELEMENT:
                u.replace_all_uses_with(results[int(u.attrs["index"])])
        dce_computation(comp)
    loop.name = w.name
    module.add_computation(fused)
    fused.fusion_instruction = fusion
    _place_computation(module, fused, comp)
    return fusion


def partial_sums(result: Instruction) -> Instruction | None:
    """The reduce of a whole-loop fusion's result that is per-block partials
    (`partial_reductions`: transpose(reduce(reshape(leaf)))), else None."""
    if result.opcode is Opcode.TRANSPOSE and result.operand(0).opcode is Opcode.REDUCE and \
            result.operand(0).operand(0).opcode is Opcode.RESHAPE:
        return result.operand(0)
    return None


def leaf_of(result: Instruction) -> Instruction:
    """The while's leaf a whole-loop fusion's result is (a get-tuple-element), also when the
    result is the per-block partials of that leaf (`partial_reductions`)."""
    sums = partial_sums(result)
    return sums.operand(0).operand(0) if sums is not None else result


def _fused_loop(fusion: Instruction) -> Instruction | None:
    """The while a whole-loop fusion runs (its root is a tuple of the while's leaves)."""
    root = fusion.fused_computation.root
    if root.opcode is Opcode.TUPLE and root.operands:
        leaves = [leaf_of(o) for o in root.operands]
        if all(x.opcode is Opcode.GET_TUPLE_ELEMENT for x in leaves):
            w = leaves[0].operand(0)
            if w.opcode is Opcode.WHILE and all(x.operand(0) is w for x in leaves):
                return w
    return None


def is_whole_loop(instr: Instruction) -> bool:
    """Is `instr` a fusion made by this pass (its fused computation runs one while)?"""
    return instr.opcode is Opcode.FUSION and instr.fusion_kind == FusionKind.CUSTOM and \
        _fused_loop(instr) is not None


def fused_loop(fusion: Instruction) -> Instruction:
    w = _fused_loop(fusion)
    assert w is not None, f"{fusion.name} is not a whole-loop fusion"
    return w


@register(PASS)
class WholeLoopFusion(FusionPass):
    """Fuse per-element while loops into one kernel each (see the module docstring); off
    unless the `whole_loop_fusion` setting is on (the `hlofuse` pipeline)."""

    OPTIONS: ClassVar[tuple[str, ...]] = (
        "whole_loop_fusion", "whole_loop_min_trips", "whole_loop_max_uniform_elements",
        "whole_loop_scalar_slowdown", "whole_loop_dot_slowdown", *HOST_MODEL)
    name: ClassVar[str] = PASS

    def run(self, module: Module) -> bool:
        config: FusionConfig = self.run_config(module)
        if not config.whole_loop_fusion:
            return False
        trace = trace_of(module)
        changed = False
        for comp in list(module.non_fusion_computations()):
            for w in [i for i in comp.instructions if i.opcode is Opcode.WHILE]:
                plan, decision = whole_loop_legal(w)
                if plan is not None:
                    decision = whole_loop_profitable(w, plan, config)
                if decision and w.operand(0).opcode is not Opcode.TUPLE:
                    decision = FusionDecision.no("the loop's init is not a tuple of arrays",
                                                 "whole_loop.leaf")
                figures = {"kernels_per_iteration": kernels_per_run(body_of(w),
                                                                    condition_of(w)),
                           "trips": trip_count(w), **source_figure(module, w)}
                if not decision:
                    trace.record(PASS, w.name, w.name, decision.with_figures(**figures),
                                 comp.name)
                    continue
                assert plan is not None
                fusion = fuse_whole_loop(w, plan)
                trace.record(PASS, fusion.name, w.name,
                             decision.with_figures(**figures, kernels_after=1), comp.name, True)
                changed = True
        return changed
