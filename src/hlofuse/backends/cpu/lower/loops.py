"""Loop nests over an output shape, and the plan of a whole kernel.

`loop_nest(em, dims, body)` runs `body(index)` for every element of `dims`: as one flat loop
`for (i = 0; i < n; ++i)` (the emitter's first try: elementwise chains need no multi-index), or,
when an index map had to delinearise the flat variable, as a nest with the innermost loop over the
last dimension (the kernel is then emitted again in that mode). Loops over at least
`PARALLEL_MIN` elements get `#pragma omp parallel for` on the outermost loop (iterations write
disjoint outputs); smaller ones never do: fork/join costs microseconds. Innermost loops carry
`#pragma GCC ivdep` (or `omp parallel for simd`), so they vectorize however many pointers the
kernel takes.

`emit_roots` plans a kernel's outputs:
  * roots computed by `lower.library` (dot, sort, ...) write the outputs directly;
  * a dynamic-update-slice root whose operand 0 is a kernel input used by nothing else is done in
    place (`inplace.py`): copy if the buffers differ, then write only the update region;
  * scatter roots (`scatter.py`);
  * reduce roots sharing input shape and reduced dimensions share one nest (`reduce.py`), with
    roots shaped like their input written in it;
  * every other root is grouped by shape: one loop nest per shape writes all of that shape's
    outputs (a multi-output loop fusion is one loop; roots of different shapes get one nest each,
    recomputing shared producers).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

from hlofuse.backends.cpu import cexpr
from hlofuse.backends.cpu.ctext import comment
from hlofuse.backends.cpu.lower import index as ix
from hlofuse.backends.cpu.lower.emitter import Emitter, dims_of
from hlofuse.backends.cpu.lower.index import Index
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, leaves

PARALLEL_MIN = 1 << 16
# Iterations of our loops never depend on each other (outputs alias no input the loop reads), but
# with more than ~10 pointers GCC gives up proving it from `restrict` (it would need too many
# run-time alias checks) and leaves the loop scalar: say it.
IVDEP = "#pragma GCC ivdep"


def _intervals(em: Emitter, dims: tuple[int, ...], d: int) -> list[tuple[int, int]]:
    points = sorted(p for p in em.splits.get((dims, d), ()) if 0 < p < dims[d])
    bounds = [0, *points, dims[d]]
    return list(itertools.pairwise(bounds))


def loop_nest(em: Emitter, dims: tuple[int, ...], body: Callable[[Index], None],
              parallel: bool = True) -> None:
    size = math.prod(dims)
    if size == 0:
        return
    if size == 1:
        body(ix.zero(dims))  # every value of a one-element array is hoisted anyway
        return
    omp = parallel and size >= PARALLEL_MIN
    big = [d for d, n in enumerate(dims) if n != 1]
    if em.flat_loops and len(big) > 1:
        i = em.fresh("i")
        em.loop_vars.add(i)
        if omp:
            em.line("#pragma omp parallel for simd")
            em.uses_omp = True
        else:
            em.line(IVDEP)
        em.open(f"for (int64_t {i} = 0; {i} < {size}; ++{i})")
        body(ix.of_linear(dims, i))
        em.close()
        return
    # a nest; a dimension with split points (conditions of concatenate / pad on its index) is
    # emitted once per interval, so each copy's conditions fold and its loops stay branch-free
    per_dim = [_intervals(em, dims, d) for d in big]
    copies = list(itertools.product(*per_dim))
    if len(copies) > 16:
        per_dim = [[(0, dims[d])] for d in big]
        copies = list(itertools.product(*per_dim))
    for copy in copies:
        multi = ["0"] * len(dims)
        loops = [(d, lo, hi) for d, (lo, hi) in zip(big, copy, strict=True)]
        opened = [(d, lo, hi) for d, lo, hi in loops if hi - lo > 1]
        for d, lo, hi in loops:
            if hi - lo == 1:
                multi[d] = str(lo)
        if not opened:
            em.open("")
        for j, (d, lo, hi) in enumerate(opened):
            v = em.fresh(f"i{d}" if len(big) > 1 else "i")
            multi[d] = v
            em.ranges[v] = (lo, hi)
            em.var_dim[v] = (dims, d)
            if j == 0 and omp and (hi - lo) * size // dims[d] >= PARALLEL_MIN:
                em.line("#pragma omp parallel for" + (" simd" if len(opened) == 1 else ""))
                em.uses_omp = True
            elif j == len(opened) - 1:
                em.line(IVDEP)
            em.open(f"for (int64_t {v} = {lo}; {v} < {hi}; ++{v})")
        lin = ix.linearize(tuple(multi), dims)
        if not (lin in em.ranges or ix.is_const(lin)):
            lin = em.local("i", "int64_t", lin)
        body(Index(dims, tuple(multi), lin))
        for _ in opened or [None]:
            em.close()


def store(em: Emitter, ptr: str, instr: Instruction, k: int, lin: str, idx: Index) -> None:
    """`ptr[lin] = <leaf k of instr at idx>`."""
    value = em.values(instr, idx)[k]
    dtype = leaves(instr.shape)[k].dtype
    em.line(f"{ptr}[{lin}] = {cexpr.store(dtype, value)};")


def emit_roots(em: Emitter, roots: list[tuple[Instruction, list[tuple[int, str]]]],
               inplace_of: dict[int, dict[int, str]]) -> None:
    """Emit code computing every root leaf into its output pointer. `roots` lists each root
    instruction once with its (leaf index, output pointer) pairs; `inplace_of` maps a root
    dynamic-update-slice/scatter (by id) to {result leaf: input pointer it may update in place}."""
    from hlofuse.backends.cpu.lower import inplace, materialize, reduce

    reduce_groups: dict[tuple, list[tuple[Instruction, list[tuple[int, str]]]]] = {}
    loop_groups: dict[tuple[int, ...], list[tuple[Instruction, int, str]]] = {}
    for r, outs in roots:
        if r.opcode is Opcode.REDUCE and id(r) not in em.params:
            n = r.operand_count // 2
            key = (dims_of(r.operand(0)), tuple(sorted(r.dimensions)), n)
            reduce_groups.setdefault(key, []).append((r, outs))
        elif r.opcode is Opcode.DYNAMIC_UPDATE_SLICE and id(r) in inplace_of:
            ((_k, ptr),) = outs
            inplace.emit(em, r, ptr, inplace_of[id(r)][0])
        elif r.opcode is Opcode.SCATTER and id(r) not in em.params:
            from hlofuse.backends.cpu.lower import scatter

            by_leaf = dict(reversed(outs))
            if len(by_leaf) == len(leaves(r.shape)):
                ptrs = [by_leaf[k] for k in range(len(by_leaf))]
                scatter.emit(em, r, ptrs, inplace_of.get(id(r)))
            else:  # only some leaves are outputs: scatter into scratch, copy those out
                bufs = materialize.buffers(em, r)
                for k, p in outs:
                    em.line(f"memcpy({p}, {bufs[k]}, {max(leaves(r.shape)[k].nbytes, 1)});")
        elif id(r) not in em.params and materialize.supported(r):
            ptrs = [p for _k, p in sorted(outs)]
            if len(ptrs) != len(leaves(r.shape)):  # some leaves unused: compute all anyway
                ptrs = materialize.buffers(em, r)
                for k, p in outs:
                    em.line(f"memcpy({p}, {ptrs[k]}, {max(leaves(r.shape)[k].nbytes, 1)});")
            else:
                em.line(comment(r.name))
                materialize.call(em, r, [p for _k, p in outs])
        else:
            for k, ptr in outs:
                dims = tuple(leaves(r.shape)[k].dims)
                loop_groups.setdefault(dims, []).append((r, k, ptr))
    for key, group in reduce_groups.items():
        siblings = loop_groups.pop(key[0], []) if key[0] else []
        em.line(comment(", ".join(r.name for r, _ in group),
                        f" (and {', '.join(s.name for s, _, _ in siblings)})" if siblings else ""))
        reduce.reduction_nest(em, group, siblings,
                              lambda ptr, s, k, lin, idx: store(em, ptr, s, k, lin, idx))
    for dims, group in loop_groups.items():
        def body(idx: Index, group: list[tuple[Instruction, int, str]] = group) -> None:
            for r, k, ptr in group:
                store(em, ptr, r, k, idx.lin(), idx)

        loop_nest(em, dims, body)


def shape_of(instr: Instruction, k: int) -> ArrayShape:
    return leaves(instr.shape)[k]
