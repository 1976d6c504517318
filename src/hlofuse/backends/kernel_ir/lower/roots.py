"""The plan of a kernel's outputs, and the loop nests that compute them.

`nest(b, dims, body)` runs `body(index)` for every element of `dims`: one loop per dimension of
size > 1, outermost first (the `collapse` pass later flattens nests whose accesses allow it).

`emit_roots` plans a kernel's outputs:
  * roots computed by a library routine (dot, sort, ...) write the outputs directly;
  * a dynamic-update-slice root whose operand 0 is a kernel input used by nothing else is done in
    place (`inplace.py`);
  * scatter roots (`scatter.py`);
  * reduce roots sharing input shape and reduced dimensions share one nest (`reduce.py`), with
    roots shaped like their input written in it;
  * every other root is grouped by shape: one loop nest per shape writes all of that shape's
    outputs (a multi-output loop fusion is one loop; roots of different shapes get one nest each,
    recomputing shared producers).
"""

from __future__ import annotations

from collections.abc import Callable

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Affine, Buffer
from hlofuse.backends.kernel_ir.lower import index as ix
from hlofuse.backends.kernel_ir.lower import inplace, library, reduce, scatter
from hlofuse.backends.kernel_ir.lower.builder import Builder, dims_of
from hlofuse.backends.kernel_ir.lower.index import Index
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import leaves


def nest(b: Builder, dims: tuple[int, ...], body: Callable[[Index], None]) -> None:
    """A loop nest over `dims` (size-1 dimensions get no loop)."""
    if any(n == 0 for n in dims):
        return
    coords: list[Affine] = [ir.ZERO] * len(dims)
    big = [d for d, n in enumerate(dims) if n != 1]
    _nest(b, dims, big, coords, body)


def _nest(b: Builder, dims: tuple[int, ...], big: list[int], coords: list[Affine],
          body: Callable[[Index], None]) -> None:
    if not big:
        body(ix.of_vars(dims, coords))
        return
    d = big[0]
    with b.loop(dims[d], "i") as v:
        coords = list(coords)
        coords[d] = ir.affine(v)
        _nest(b, dims, big[1:], coords, body)


Outs = list[tuple[int, Buffer]]  # (result leaf, output buffer)


def emit_roots(b: Builder, roots: list[tuple[Instruction, Outs]],
               inplace_of: dict[int, dict[int, Buffer]]) -> None:
    """Compute every root leaf into its output buffer. `roots` lists each root instruction once
    with its (leaf, buffer) pairs; `inplace_of` maps a root dynamic-update-slice/scatter (by id)
    to {result leaf: the input buffer it may update in place}."""
    reduce_groups: dict[tuple[tuple[int, ...], tuple[int, ...], int],
                        list[tuple[Instruction, Outs]]] = {}
    loop_groups: dict[tuple[int, ...], list[tuple[Instruction, int, Buffer]]] = {}
    for r, outs in roots:
        param = id(r) in b.params
        if r.opcode is Opcode.REDUCE and not param:
            key = (dims_of(r.operand(0)), tuple(sorted(r.dimensions)), r.operand_count // 2)
            reduce_groups.setdefault(key, []).append((r, outs))
        elif r.opcode is Opcode.DYNAMIC_UPDATE_SLICE and id(r) in inplace_of:
            ((_k, buf),) = outs
            inplace.emit(b, r, buf, inplace_of[id(r)][0])
        elif r.opcode is Opcode.SCATTER and not param:
            by_leaf = dict(reversed(outs))
            if len(by_leaf) == len(leaves(r.shape)):
                scatter.emit(b, r, [by_leaf[k] for k in range(len(by_leaf))], inplace_of.get(id(r)))
            else:  # only some leaves are outputs: scatter into scratch, copy those out
                bufs = library.buffers(b, r)
                for k, buf in outs:
                    b.emit(ir.Copy(buf, bufs[k]))
        elif not param and library.supported(r):
            bufs = [buf for _k, buf in sorted(outs)]
            if len(bufs) != len(leaves(r.shape)):  # some leaves unused: compute all anyway
                scratch = library.buffers(b, r)
                for k, buf in outs:
                    b.emit(ir.Copy(buf, scratch[k]))
            else:
                library.call(b, r, bufs)
        else:
            for k, buf in outs:
                dims = tuple(leaves(r.shape)[k].dims)
                loop_groups.setdefault(dims, []).append((r, k, buf))
    for (in_dims, reduced, _n), rgroup in reduce_groups.items():
        siblings = loop_groups.pop(in_dims, []) if reduced else []
        b.comment(f"{len(rgroup)} reduce(s) over dimensions {list(reduced)}"
                  + (f", and {len(siblings)} root(s) of the input's shape" if siblings else ""))
        reduce.reduction_nest(b, rgroup, siblings)
    for dims, group in loop_groups.items():
        def body(idx: Index, group: list[tuple[Instruction, int, Buffer]] = group) -> None:
            for r, k, buf in group:
                b.emit(ir.Store(buf, idx.lin(), b.values(r, idx)[k]))

        nest(b, dims, body)
