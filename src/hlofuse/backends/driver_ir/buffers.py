"""Aliasing for the native driver: which array values share storage, which kernels may write in
place, and how while loops carry their state (where each buffer then lives in the arena is
`assign.py`'s business, on the driver IR `schedule.py` builds from this analysis).

`Analyzer` / `CompAnalysis` (static, per computation): every array leaf value is traced to its
  *source* `(instruction, leaf)`, the instruction that really produces it; tuple,
  get-tuple-element, bitcast, reshape, copy, opt-barrier, add-dependency and identity custom
  calls only rename a source (they alias, never copy). Each source records its last reader (the
  position of the last instruction that reads it; the root's sources are live out). A while
  loop's result leaf may be its init's buffer (a loop that runs no iteration leaves the
  pointer at the init it was given), so a read of the result counts as a read of the init too
  (`CompAnalysis.read_via`): no kernel or other loop may take that init's buffer over while
  the result is still to be read (the loop itself may: then its result is that buffer). A kernel's
  `inplace` pair (output o, input i) is accepted only when input i's source is *owned* (a buffer
  this program allocated, or a loop-carried leaf the loop made writable: never `args`, results of
  another owner, or a constant), is read by no later instruction, is not live out, and appears
  once among the kernel's inputs. While loops get a `LoopPlan`: each carried leaf is
  pass-through (body root leaf k is parameter leaf k: no buffer, no work), in place (the body
  updates the leaf's buffer in place: one buffer, no swap), or swapped (two buffers; the body's
  producer writes the spare directly, then the pointers swap). A dead, owned init buffer becomes
  one of the two; an init buffer the loop may not write is copied once before the loop when the
  body updates that leaf in place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import IDENTITY_CUSTOM_CALLS, Opcode
from hlofuse.ir.shape import leaf_start, leaves

Src = tuple[Instruction, int]  # (defining instruction, leaf index of its result)

# Ops whose result leaves are their operand leaves (renamed, not copied).
_FORWARD_ALL = frozenset({Opcode.TUPLE, Opcode.OPTIMIZATION_BARRIER})
_FORWARD_FIRST = frozenset({Opcode.BITCAST, Opcode.RESHAPE, Opcode.COPY, Opcode.ADD_DEPENDENCY})


def is_alias(instr: Instruction) -> bool:
    """Does `instr` only rename its operands' leaves (no buffer, no work)?"""
    op = instr.opcode
    if op in _FORWARD_ALL or op in _FORWARD_FIRST:
        return True
    if op in (Opcode.GET_TUPLE_ELEMENT, Opcode.AFTER_ALL):
        return True
    return (
        op is Opcode.CUSTOM_CALL
        and instr.attrs.get("custom_call_target") in IDENTITY_CUSTOM_CALLS
        and instr.operand_count == 1
    )


def nleaves(instr: Instruction) -> int:
    return len(leaves(instr.shape))


@dataclass
class LoopPlan:
    """How one while loop carries its state (see the module docstring)."""

    kinds: list[str]  # per carried leaf: "pass", "inplace" or "swap"
    reuse_init: list[bool]  # the init buffer is owned and dead: it becomes buffer A
    copy_init: list[bool]  # the init buffer is copied into buffer A once, before the loop
    body: CompAnalysis
    cond: CompAnalysis


@dataclass
class CompAnalysis:
    comp: Computation
    writable: frozenset[int]  # flat parameter-leaf indices the caller lets us overwrite
    srcs: dict[Instruction, list[Src]] = field(default_factory=dict)
    last_read: dict[Src, int] = field(default_factory=dict)
    live_out: set[Src] = field(default_factory=set)
    owned: dict[Src, bool] = field(default_factory=dict)
    inplace: dict[Instruction, dict[int, int]] = field(default_factory=dict)  # out -> in leaf
    # in-place result -> the value whose buffer it took over (a kernel's in-place output, or a
    # while loop's leaf updated in place inside its init's buffer)
    overwrites: dict[Src, Src] = field(default_factory=dict)
    loops: dict[Instruction, LoopPlan] = field(default_factory=dict)
    branches: dict[Instruction, list[CompAnalysis]] = field(default_factory=dict)
    # a while loop's result leaf -> the values whose buffers it may be, each with the loops
    # that hand it on (a loop that runs no iteration returns its init's buffer)
    may_be: dict[Src, list[tuple[Src, frozenset[Instruction]]]] = field(default_factory=dict)
    # value -> (those loops, position) of each read of a result that may be its buffer
    read_via: dict[Src, list[tuple[frozenset[Instruction], int]]] = field(
        default_factory=dict)
    calls: dict[Instruction, CompAnalysis] = field(default_factory=dict)
    param_offset: dict[Instruction, int] = field(default_factory=dict)

    @property
    def root_srcs(self) -> list[Src]:
        return self.srcs[self.comp.root]

    def operand_srcs(self, instr: Instruction) -> list[Src]:
        out: list[Src] = []
        for op in instr.operands:
            out.extend(self.srcs[op])
        return out

    def read(self, src: Src, pos: int) -> None:
        """`src` is read at `pos` (past the end: live out): and so may be every value whose
        buffer `src` may be (`may_be`), through the loops that may hand it on."""
        if pos < len(self.comp.instructions):
            self.last_read[src] = pos
        for x, loops in self.may_be.get(src, ()):
            self.read_via.setdefault(x, []).append((loops, pos))

    def head(self, src: Src) -> Src:
        """The start of the in-place chain ending at `src` (the value whose buffer it uses)."""
        while src in self.overwrites:
            src = self.overwrites[src]
        return src

    def inplace_params(self) -> set[int]:
        """Flat parameter leaves this computation overwrites in place (a kernel, or a nested
        loop that updates them in place)."""
        out: set[int] = set()
        for s in self.overwrites.values():
            if s[0].opcode is Opcode.PARAMETER:
                out.add(self.param_offset[s[0]] + s[1])
        return out


class Analyzer:
    """Builds (and caches) `CompAnalysis` objects. `inplace_of(instr)` gives a kernel
    instruction's accepted-if-safe in-place pairs (`Kernel.inplace`)."""

    def __init__(self, inplace_of: Callable[[Instruction], dict[int, int]]) -> None:
        self._inplace_of = inplace_of
        self._cache: dict[tuple[int, frozenset[int]], CompAnalysis] = {}

    def analyze(self, comp: Computation, writable: frozenset[int] = frozenset()) -> CompAnalysis:
        key = (id(comp), writable)
        if key not in self._cache:
            self._cache[key] = self._analyze(comp, writable)
        return self._cache[key]

    # -- pass 1: sources and readers; pass 2: ownership, in-place, loop plans ----------------

    def _analyze(self, comp: Computation, writable: frozenset[int]) -> CompAnalysis:
        an = CompAnalysis(comp, writable)
        offset = 0
        for p in comp.parameters:
            an.param_offset[p] = offset
            offset += nleaves(p)
        order = list(comp.instructions)
        for pos, instr in enumerate(order):
            an.srcs[instr] = self._sources(an, instr)
            if not is_alias(instr):
                for s in an.operand_srcs(instr):
                    an.read(s, pos)
            if instr.opcode is Opcode.WHILE:
                init = an.srcs[instr.operand(0)]
                for k, s in enumerate(an.srcs[instr]):
                    if s[0] is instr:  # (a loop that runs no iteration returns its init)
                        an.may_be[s] = [(init[k], frozenset({instr})), *(
                            (x, loops | {instr}) for x, loops in an.may_be.get(init[k], ()))]
        an.live_out = set(an.root_srcs)
        for s in an.root_srcs:
            an.read(s, len(order))
        for pos, instr in enumerate(order):
            self._plan(an, instr, pos)
        return an

    def _sources(self, an: CompAnalysis, instr: Instruction) -> list[Src]:
        op = instr.opcode
        if op is Opcode.GET_TUPLE_ELEMENT:
            tup = instr.operand(0)
            start = leaf_start(tup.shape, int(instr.attrs["index"]))
            return an.srcs[tup][start:start + nleaves(instr)]
        if op in _FORWARD_ALL:
            return an.operand_srcs(instr)
        if op is Opcode.AFTER_ALL:
            return []
        if is_alias(instr):
            return list(an.srcs[instr.operand(0)])
        if op is Opcode.WHILE:
            body = self.analyze(instr.attrs["body"])
            param = instr.attrs["body"].parameters[0]
            init = an.srcs[instr.operand(0)]
            return [init[k] if s == (param, k) else (instr, k)
                    for k, s in enumerate(body.root_srcs)]
        if op is Opcode.CALL:
            callee = self.analyze(instr.attrs["to_apply"])
            an.calls[instr] = callee
            out: list[Src] = []
            for k, s in enumerate(callee.root_srcs):
                if s[0].opcode is Opcode.PARAMETER:
                    operand = instr.operand(s[0].parameter_number or 0)
                    out.append(an.srcs[operand][s[1]])
                else:
                    out.append((instr, k))
            return out
        return [(instr, k) for k in range(nleaves(instr))]

    def _plan(self, an: CompAnalysis, instr: Instruction, pos: int) -> None:
        op = instr.opcode
        if op is Opcode.PARAMETER:
            base = an.param_offset[instr]
            for k in range(nleaves(instr)):
                an.owned[(instr, k)] = base + k in an.writable
        elif op in (Opcode.CONSTANT, Opcode.PARTITION_ID, Opcode.REPLICA_ID) or is_alias(instr):
            for s in an.srcs[instr]:
                an.owned.setdefault(s, False)
        elif op is Opcode.CONDITIONAL:
            an.branches[instr] = [self.analyze(b) for b in instr.branches]
            for s in an.srcs[instr]:
                an.owned[s] = True
        elif op is Opcode.CALL:
            callee = an.calls[instr]
            for k, s in enumerate(an.srcs[instr]):
                if s[0] is instr:
                    an.owned[s] = callee.owned[callee.root_srcs[k]]
        elif op is Opcode.WHILE:
            self._plan_loop(an, instr, pos)
        else:  # a kernel
            for s in an.srcs[instr]:
                an.owned[s] = True
            self._plan_inplace(an, instr, pos)

    def _dead_owned(self, an: CompAnalysis, src: Src, pos: int, ins: list[Src],
                    loop: Instruction | None = None) -> bool:
        """May the instruction at `pos` (with flat inputs `ins`) destroy `src`'s buffer? A
        later read of a loop result that may be `src`'s buffer forbids it, unless it comes
        through `loop` itself (the loop deciding to carry that leaf in `src`'s buffer: its
        result then is that buffer by design)."""
        return (
            an.owned.get(src, False)
            and src not in an.live_out
            and an.last_read.get(src, -1) <= pos
            and ins.count(src) == 1
            and all(at <= pos or (loop is not None and loop in loops)
                    for loops, at in an.read_via.get(src, ()))
        )

    def _plan_inplace(self, an: CompAnalysis, instr: Instruction, pos: int) -> None:
        pairs = self._inplace_of(instr)
        if not pairs:
            return
        ins = an.operand_srcs(instr)
        in_shapes = [s for o in instr.operands for s in leaves(o.shape)]
        out_shapes = leaves(instr.shape)
        accepted: dict[int, int] = {}
        for o, i in sorted(pairs.items()):
            if i in accepted.values() or not 0 <= i < len(ins) or not 0 <= o < len(out_shapes):
                continue
            if in_shapes[i].nbytes != out_shapes[o].nbytes:
                continue
            if self._dead_owned(an, ins[i], pos, ins):
                accepted[o] = i
                an.overwrites[(instr, o)] = ins[i]
        if accepted:
            an.inplace[instr] = accepted

    def _plan_loop(self, an: CompAnalysis, instr: Instruction, pos: int) -> None:
        body_c: Computation = instr.attrs["body"]
        param = body_c.parameters[0]
        n = nleaves(instr)
        init = an.srcs[instr.operand(0)]
        full = self.analyze(body_c, frozenset(range(n)))
        passthrough = [s == (param, k) for k, s in enumerate(full.root_srcs)]
        targets = full.inplace_params()
        dead = [not passthrough[k] and self._dead_owned(an, init[k], pos, init, instr)
                for k in range(n)]
        writable = frozenset(
            k for k in range(n) if not passthrough[k] and (dead[k] or k in targets))
        body = self.analyze(body_c, writable)
        kinds: list[str] = []
        for k in range(n):
            if passthrough[k]:
                kinds.append("pass")
            elif body.head(body.root_srcs[k]) == (param, k):
                kinds.append("inplace")
            else:
                kinds.append("swap")
        for k in range(n):
            if kinds[k] == "inplace" and dead[k]:  # the loop updates its init's buffer
                an.overwrites[(instr, k)] = init[k]
        an.loops[instr] = LoopPlan(
            kinds=kinds,
            reuse_init=dead,
            copy_init=[k in writable and not dead[k] for k in range(n)],
            body=body,
            cond=self.analyze(instr.attrs["condition"]),
        )
        for k, s in enumerate(an.srcs[instr]):
            if s[0] is instr:
                an.owned[s] = k in writable
