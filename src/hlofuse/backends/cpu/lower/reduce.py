"""Reductions: reduce (also variadic, e.g. argmax) and reduce-window, as C loops.

Two forms:

* `reduce_value` — one output element at a time: accumulators start at the init values and an
  inner loop over the reduced dimensions folds the (fused) input in, in row-major order of the
  reduced elements. Used for a reduce that some other value reads, and inside `reduction_nest`.
* `reduction_nest` — the kernel-level loop nest for root reduces (kInput fusions, unfused
  reduce). Roots reducing the same input shape over the same dimensions share one nest; roots
  shaped like the reduce input (multi-output siblings) are written in it, once per input element.
  Row reduction (reduced dims minor): one scalar accumulator per output element, inner loop over
  the reduced elements. Column reduction (kept dims after the last reduced one): a row of
  accumulators, the innermost loop runs over that row (unit stride, vectorizable). Either way each
  output element folds its inputs in the same sequential order.

Combiners: `scalar.scalar_expression` inline when the reducer is one commutative op on its two
parameters, else a call of `scalar.scalar_function`. A float add/multiply row reduction is marked
`#pragma omp simd reduction(...)`, which lets the compiler vectorize it by summing in a few
interleaved partial sums: results differ from strictly sequential float sums by rounding only.
reduce-window pads (and fills base-dilation holes) with the init value, as the interpreter does.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from hlofuse.backends.cpu import cexpr
from hlofuse.backends.cpu.lower import index as ix
from hlofuse.backends.cpu.lower import scalar
from hlofuse.backends.cpu.lower.emitter import Emitter, LoweringError, dims_of, where
from hlofuse.backends.cpu.lower.index import Index
from hlofuse.backends.cpu.lower.naming import word
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape

PARALLEL_MIN = 1 << 16  # elements of work below which OpenMP's fork/join costs more than it saves
_SIMD_OPS = {Opcode.ADD: "+", Opcode.MULTIPLY: "*"}


def combine(em: Emitter, comp: Computation, accs: list[str], xs: list[str]) -> None:
    """Emit `accs = comp(accs..., xs...)` (accs are lvalues)."""
    if len(accs) == 1:
        expr = scalar.scalar_expression(comp, [accs[0], xs[0]])
        if expr is not None and _narrow_sum(comp):
            # f16/bf16 sums and products accumulate in float and round once at the store,
            # as the interpreter does (rounding every step would drift by many ulp)
            expr = f"{accs[0]} {_SIMD_OPS[comp.root.opcode]} {xs[0]}"
        if expr is not None:
            em.line(f"{accs[0]} = {expr};")
            return
    fn = em.helper(("scalar", id(comp)), lambda n: scalar.scalar_function(comp, n), "apply")
    em.line(f"{fn}({', '.join([*accs, *xs, *('&' + a for a in accs)])});")


def _narrow_sum(comp: Computation) -> bool:
    shape = comp.root.shape
    return (comp.root.opcode in _SIMD_OPS and isinstance(shape, ArrayShape)
            and shape.dtype.name in ("f16", "bf16"))


def _reducer(instr: Instruction) -> Computation:
    comp = instr.attrs.get("to_apply")
    if comp is None:
        raise LoweringError(f"{where(instr)}: missing to_apply= reducer")
    return comp


def _simd_clause(comp: Computation, instr: Instruction, accs: list[str], extent: int) -> str:
    """`#pragma omp simd reduction(+:acc)` for a float add/multiply reducer, else ''."""
    root = comp.root
    if len(accs) != 1 or extent < 16 or root.opcode not in _SIMD_OPS:
        return ""
    if scalar.scalar_expression(comp, ["a", "b"]) is None:
        return ""
    dtype = instr.operand(0).array_shape.dtype
    if not dtype.is_float:  # integer reductions vectorize without it (and wrap exactly)
        return ""
    return f"#pragma omp simd reduction({_SIMD_OPS[root.opcode]}:{accs[0]})"


def _split(instr: Instruction) -> tuple[list[Instruction], list[Instruction], tuple[int, ...],
                                        list[int]]:
    n = instr.operand_count // 2
    inputs, inits = list(instr.operands[:n]), list(instr.operands[n:])
    in_dims = dims_of(inputs[0])
    red = sorted(int(d) for d in instr.dimensions)
    return inputs, inits, in_dims, red


def _init_values(em: Emitter, inits: list[Instruction]) -> list[str]:
    return [em.value(i, ix.zero(dims_of(i))) for i in inits]


def reduce_value(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    """The reduce's result leaves at output index `idx` (an inner accumulation loop)."""
    comp = _reducer(instr)
    inputs, inits, in_dims, red = _split(instr)
    out = em.multi(idx)
    kept = [d for d in range(len(in_dims)) if d not in red]
    init = _init_values(em, inits)
    accs = [em.local(f"{word(instr)}_acc", cexpr.compute_type(x.array_shape.dtype), v, const=False)
            for x, v in zip(inputs, init, strict=True)]
    full = [""] * len(in_dims)
    for k, d in enumerate(kept):
        full[d] = out[k]
    loops = [d for d in red if in_dims[d] != 1]
    for d in red:
        full[d] = "0"
    if any(in_dims[d] == 0 for d in red):
        return accs
    for j, d in enumerate(loops):
        r = em.fresh(f"r{d}")
        full[d] = r
        if j == len(loops) - 1:
            clause = _simd_clause(comp, instr, accs, in_dims[d])
            if clause:
                em.line(clause)
        em.open(f"for (int64_t {r} = 0; {r} < {in_dims[d]}; ++{r})")
    xs = [em.value(x, ix.of_multi(in_dims, full)) for x in inputs]
    combine(em, comp, accs, xs)
    for _ in loops:
        em.close()
    return accs


def reduce_window_value(em: Emitter, instr: Instruction, idx: Index) -> list[str]:
    """reduce-window at output index `idx`: a loop over the window; positions in the padding
    or in base-dilation holes contribute the init value."""
    comp = _reducer(instr)
    n = instr.operand_count // 2
    inputs, inits = list(instr.operands[:n]), list(instr.operands[n:])
    in_dims = dims_of(inputs[0])
    window = instr.attrs.get("window")
    if window is None or len(window) != len(in_dims):
        raise LoweringError(f"{where(instr)}: needs a window= with one entry per dimension")
    if any(w.reversal for w in window):
        raise LoweringError(f"{where(instr)}: window reversal is not defined for reduce-window")
    out = em.multi(idx)
    init = _init_values(em, inits)
    accs = [em.local(f"{word(instr)}_acc", cexpr.compute_type(x.array_shape.dtype), v, const=False)
            for x, v in zip(inputs, init, strict=True)]
    src: list[str] = []
    conds: list[str] = []
    opened = 0
    for d, w in enumerate(window):
        if w.size == 1:
            pos = "0"
        else:
            pos = em.fresh(f"w{d}")
            em.open(f"for (int64_t {pos} = 0; {pos} < {w.size}; ++{pos})")
            opened += 1
        p = ix.sub(ix.add(ix.mul(out[d], w.stride), ix.mul(pos, w.window_dilation)),
                   str(w.pad_lo))
        if not ix.is_const(p):
            p = em.local(f"p{d}", "int64_t", p)
        hi = (in_dims[d] - 1) * w.base_dilation
        if ix.is_const(p):
            ok = 0 <= int(p) <= hi and int(p) % w.base_dilation == 0
            conds.append("1" if ok else "0")
        else:
            if w.pad_lo > 0:
                conds.append(f"{p} >= 0")
            conds.append(f"{p} <= {hi}")
            if w.base_dilation > 1:
                conds.append(f"{p} % {w.base_dilation} == 0")
        src.append(ix.div(p, w.base_dilation))
    if "0" in conds:
        cond = "0"
    else:
        live = [c for c in conds if c != "1"]
        cond = " && ".join(f"({c})" for c in live) if live else "1"
    xs = []
    for x, v in zip(inputs, init, strict=True):
        def read(x: Instruction = x) -> str:
            return em.value(x, ix.of_multi(in_dims, src))

        xs.append(em.cases(f"{word(x)}_win", cexpr.compute_type(x.array_shape.dtype),
                           [(cond, read), (None, lambda v=v: v)]))
    combine(em, comp, accs, xs)
    for _ in range(opened):
        em.close()
    return accs


# ----- kernel-level nests --------------------------------------------------------------------

Store = tuple[Instruction, int, str, str]  # (root, leaf index, output pointer, storage ctype)


def reduction_nest(em: Emitter, reduces: list[tuple[Instruction, list[tuple[int, str]]]],
                   siblings: list[tuple[Instruction, int, str]],
                   store: Callable[[str, Instruction, int, str, Index], None]) -> None:
    """One loop nest computing every reduce in `reduces` (same input dims and reduced dims; each
    with its (leaf, output pointer) list) and writing the input-shaped `siblings`."""
    first = reduces[0][0]
    _inputs, _inits, in_dims, red = _split(first)
    kept = [d for d in range(len(in_dims)) if d not in red]
    last = max(red) if red else -1
    minor = [d for d in kept if d > last and red]
    outer = [d for d in kept if d not in minor]
    row = math.prod(in_dims[d] for d in minor)
    out_dims = tuple(in_dims[d] for d in kept)
    if math.prod(out_dims) == 0:
        return

    work = math.prod(in_dims)
    full = [""] * len(in_dims)
    opened = 0
    outer_loops = [d for d in outer if in_dims[d] != 1]
    for d in outer:
        full[d] = "0"
    parallel = work >= PARALLEL_MIN and bool(outer_loops) and row <= 4096
    for j, d in enumerate(outer_loops):
        v = em.fresh(f"i{d}")
        full[d] = v
        if j == 0 and parallel:
            em.line("#pragma omp parallel for")
            em.uses_omp = True
        em.open(f"for (int64_t {v} = 0; {v} < {in_dims[d]}; ++{v})")
        opened += 1
    outer_multi = [full[d] for d in outer]
    out_base = ix.linearize(tuple(outer_multi), tuple(in_dims[d] for d in outer))

    # accumulators: scalars (row == 1) or rows
    accs: list[tuple[Instruction, list[str]]] = []
    for r, _outs in reduces:
        inputs, inits, _d, _red = _split(r)
        init = _init_values(em, inits)
        names = []
        for x, v in zip(inputs, init, strict=True):
            ct = cexpr.compute_type(x.array_shape.dtype)
            if row == 1:
                names.append(em.local(f"{word(r)}_acc", ct, v, const=False))
            else:
                a = em.fresh(f"{word(r)}_acc")
                if row <= 4096:
                    em.line(f"{ct} {a}[{row}];")
                else:
                    with em.at_preamble():
                        em.line(f"{ct} *{a} = ({ct} *)hf_alloc(0, sizeof({ct}) * {row});")
                    em.post.append(f"    free({a});")
                j = em.fresh("j")
                em.line(f"for (int64_t {j} = 0; {j} < {row}; ++{j}) {a}[{j}] = {v};")
                names.append(a)
        accs.append((r, names))

    red_loops = [d for d in red if in_dims[d] != 1]
    for d in red:
        full[d] = "0"
    inner_open = 0
    for j, d in enumerate(red_loops):
        v = em.fresh(f"r{d}")
        full[d] = v
        if j == len(red_loops) - 1 and row == 1 and len(accs) == 1 and not siblings:
            clause = _simd_clause(_reducer(accs[0][0]), accs[0][0], accs[0][1], in_dims[d])
            if clause:
                em.line(clause)
        em.open(f"for (int64_t {v} = 0; {v} < {in_dims[d]}; ++{v})")
        inner_open += 1
    minor_vars = []
    for d in minor:
        if in_dims[d] == 1:
            full[d] = "0"
            continue
        v = em.fresh(f"i{d}")
        full[d] = v
        minor_vars.append(v)
        if d == minor[-1]:
            em.line("#pragma GCC ivdep")  # accumulator row elements are independent
        em.open(f"for (int64_t {v} = 0; {v} < {in_dims[d]}; ++{v})")
        inner_open += 1
    jrow = ix.linearize(tuple(full[d] for d in minor), tuple(in_dims[d] for d in minor))
    if row > 1 and not ix.is_const(jrow) and len(minor_vars) > 1:
        jrow = em.local("j", "int64_t", jrow)
    lin = em.local("i", "int64_t", ix.linearize(tuple(full), in_dims)) if siblings else None
    at = Index(in_dims, tuple(full), lin)
    for r, names in accs:
        inputs = list(r.operands[: r.operand_count // 2])
        xs = [em.value(x, at) for x in inputs]
        lv = names if row == 1 else [f"{a}[{jrow}]" for a in names]
        combine(em, _reducer(r), lv, xs)
    for s, k, ptr in siblings:
        store(ptr, s, k, at.lin(), at)
    for _ in range(inner_open):
        em.close()

    # results
    out_idx_dims = out_dims
    if row == 1:
        o = Index(out_idx_dims, None, out_base) if out_idx_dims else ix.zero(())
        for (r, names), (_r, outs) in zip(accs, reduces, strict=True):
            for k, ptr in outs:
                _emit_store(em, ptr, r, k, o.lin(), names[k])
    else:
        j = em.fresh("j")
        em.open(f"for (int64_t {j} = 0; {j} < {row}; ++{j})")
        olin = ix.add(ix.mul(out_base, row), j)
        for (r, names), (_r, outs) in zip(accs, reduces, strict=True):
            for k, ptr in outs:
                _emit_store(em, ptr, r, k, olin, f"{names[k]}[{j}]")
        em.close()
    for _ in range(opened):
        em.close()


def _emit_store(em: Emitter, ptr: str, r: Instruction, k: int, lin: str, value: str) -> None:
    from hlofuse.ir.shape import leaves

    dtype = leaves(r.shape)[k].dtype
    em.line(f"{ptr}[{lin}] = {cexpr.store(dtype, value)};")
