"""The driver IR: what `hf_entry` does, in order, before any buffer has an address.

    schedule(module, lowering) -> Schedule
        kernels: the Kernel of every kernel instruction, in call order of first use; a kernel
                 whose optimised kernel IR is an earlier one's (the same identity,
                 `kernel_ir.identity.digest`; or, before lowering, the same HLO structure,
                 `kernel_key.structural_key`) is not printed again: its entry names the
                 earlier function (`Kernel.source` empty) and keeps its own instruction, so
                 profiles still count every call site. A printed kernel is named from its
                 identity (`naming.kernel_name`: `fused_add_multiply_1f0c9a2e`), not from
                 the order of the program, so it prints the same C in any program
        body:    [Call | MemCopy | While | Branch | Note]
        buffers: every internal buffer (`Buf`), to be placed by `assign.py`

A value at run time is a `Loc`: an entry argument (`Arg`), an entry result (`Result`), a static
constant (`Const`), an internal buffer (`Buf`), a while loop's carried pointer (`Carried`,
which points at one of two buffers and swaps each iteration), or a kernel input read in place
at a byte offset into another location (`View`: a contiguous slice, `views.py`). What each
instruction becomes:

* a kernel (`is_kernel`): `Call(k, ins, outs)`; outputs go to a fresh `Buf`, to the input the
  kernel updates in place (`buffers.Analyzer` accepted the pair), or straight to a destination the
  caller chose (a result of the entry computation, a loop's spare buffer, a branch's output);
* parameter, constant, tuple, get-tuple-element, bitcast, reshape, copy, opt-barrier,
  add-dependency, identity custom calls: nothing; they name existing locations
  (`buffers.is_alias`); partition-id / replica-id: a static zero;
* a host callback (`backends/host_callbacks.py`: jax's pure_callback, io_callback,
  debug.print): `HostCall(site, ins, outs)`, the caller's Python function called from the driver;
  never a kernel, never in place, kept in program order;
* while: `While(vars, cond, pred, body, swaps, trips)` over carried leaves
  (`buffers.LoopPlan`: pass,
  in place, or swapped between two buffers, no copy per iteration), then at most one copy per
  leaf to its destination; conditional: `Branch` (if/else for a pred, a switch for an index,
  whose out-of-range values run the last branch, as XLA) writing the conditional's locations;
  call: the callee's statements inline.

Conditions enforced: kernels never write `Arg`s or `Const`s (in place only on owned, dead
buffers, see buffers.py); every root leaf of the entry computation ends up in its `Result`. This
module decides what runs and which value lives where; `assign.py` decides where each `Buf` lives
in the arena; `driver.py` prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from hlofuse.analysis.kernels import is_kernel
from hlofuse.analysis.loops import trip_count
from hlofuse.backends.driver_ir.buffers import Analyzer, CompAnalysis, Src, is_alias
from hlofuse.backends.driver_ir.kernel import HostSite, Kernel, Lowered
from hlofuse.backends.driver_ir.kernel_key import structural_key
from hlofuse.backends.driver_ir.views import view_plan
from hlofuse.backends.host_callbacks import array_results, callback_index, is_host_callback
from hlofuse.backends.kernel_ir.naming import kernel_name
from hlofuse.errors import UnsupportedOpError
from hlofuse.ir.dtypes import DType
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import CONTROL_FLOW_OPS, Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape, leaves

# instruction -> its kernel lowered and optimised (`kernels.lower`, for this program's target
# and threads)
KernelLowering = Callable[[Instruction], Lowered]


def call_note(instr: Instruction, in_place: bool = False) -> str:
    """The comment at a kernel's call site (input text, printed through ctext.comment): the
    instruction's name and, from its metadata, the op and source line it came from. The
    kernel's own C names none of these: one function serves every instruction it computes."""
    note = instr.name + (" (in place)" if in_place else "")
    md = instr.metadata
    if md and (md.op_name or md.source_file):
        note += f": {md.op_name or ''}"
        if md.source_file:
            note += (f" at {md.source_file}:{md.source_line}" if md.source_line
                     else f" at {md.source_file}")
    return note


class Loc:
    """Where an array value is at run time."""

    def buffers(self) -> tuple[Buf, ...]:
        """The internal buffers this location may be (for liveness)."""
        return ()


@dataclass(frozen=True)
class Arg(Loc):
    index: int


@dataclass(frozen=True)
class Result(Loc):
    index: int


@dataclass(frozen=True)
class Const(Loc):
    index: int  # into Schedule.consts


@dataclass(eq=False)
class Buf(Loc):
    """An internal buffer; `assign.py` sets `offset` (bytes into the arena)."""

    id: int
    nbytes: int
    label: str  # input text (instruction names): printed only through ctext.comment
    offset: int = -1

    def buffers(self) -> tuple[Buf, ...]:
        return (self,)


@dataclass(eq=False)
class Carried(Loc):
    """A while loop's pointer to one carried leaf: it starts at `first`, and after each
    iteration swaps with `spare` (both loop variables)."""

    id: int  # the loop's number
    leaf: int
    first: Loc
    a: Loc  # the two buffers the leaf alternates between
    b: Loc
    owned: bool  # `first` is one of a, b (else the caller's init, read once)

    def buffers(self) -> tuple[Buf, ...]:
        out = self.a.buffers() + self.b.buffers()
        return out if self.owned else out + self.first.buffers()


@dataclass(eq=False)
class Spare(Loc):
    """The other pointer of a `Carried` leaf: where the body writes the next state."""

    of: Carried

    def buffers(self) -> tuple[Buf, ...]:
        return self.of.a.buffers() + self.of.b.buffers()


@dataclass(frozen=True)
class View(Loc):
    """`nbytes` bytes into `base`: a contiguous slice a kernel reads in place (views.py)."""

    base: Loc
    nbytes: int

    def buffers(self) -> tuple[Buf, ...]:
        return self.base.buffers()


@dataclass(frozen=True)
class ConstData:
    dtype: DType
    value: Any  # numpy array or scalar
    size: int
    label: str  # input text: comment only


@dataclass(eq=False)
class Call:
    kernel: int  # index into Schedule.kernels
    ins: list[Loc]
    outs: list[Loc]
    note: str


@dataclass(eq=False)
class HostCall:
    """Host callback `site` (`Schedule.host_sites`) reading `ins`, writing `outs`."""

    site: int
    ins: list[Loc]
    outs: list[Loc]
    note: str


@dataclass(eq=False)
class MemCopy:
    dst: Loc
    src: Loc
    nbytes: int
    if_distinct: bool
    note: str


@dataclass(eq=False)
class While:
    name: str  # the while instruction (input text: comments only)
    note: str
    carried: list[Carried]
    cond: list[Stmt]
    pred: Loc
    body: list[Stmt]
    trips: int | None = None  # the body's run count where it is known (`analysis.loops`)


@dataclass(eq=False)
class Branch:
    """`if (sel) then else` (`count` None: a pred) or a switch over `count` branches."""

    note: str
    selector: Loc
    selector_dtype: DType
    branches: list[list[Stmt]]
    count: int | None


@dataclass(eq=False)
class Note:
    text: str


Stmt = Call | HostCall | MemCopy | While | Branch | Note


@dataclass
class Schedule:
    inputs: list[ArrayShape]
    outputs: list[ArrayShape]
    kernels: list[Kernel] = field(default_factory=list)
    body: list[Stmt] = field(default_factory=list)
    buffers: list[Buf] = field(default_factory=list)
    consts: list[ConstData] = field(default_factory=list)
    host_sites: list[HostSite] = field(default_factory=list)


class _Scheduler:
    def __init__(self, lowering: KernelLowering, used: set[str],
                 printed: Callable[[Kernel], None] | None = None) -> None:
        self._lowering = lowering
        self._used = used
        self._printed = printed
        self._kernel_of: dict[Instruction, int] = {}
        self._function_of: dict[str, Kernel] = {}  # identity (digest) -> printed kernel
        self._by_structure: dict[tuple[Any, ...], Kernel] = {}  # structural_key -> kernel
        self._views: dict[Instruction, dict[int, int]] = {}  # kernel -> leaf -> byte offset
        self.sched = Schedule([], [])
        self.analyzer = Analyzer(
            lambda instr: {} if is_host_callback(instr) else self.kernel(instr)[1].inplace)
        self._consts: dict[tuple[Instruction, int], Const] = {}
        self._zeros: dict[str, Const] = {}
        self._block: list[Stmt] = self.sched.body
        self._n = 0

    def kernel(self, instr: Instruction) -> tuple[int, Kernel]:
        if instr not in self._kernel_of:
            plan = view_plan(instr)
            lowered = instr if plan is None else plan.kernel
            shape_key = structural_key(lowered)
            same = self._by_structure.get(shape_key) if shape_key is not None else None
            if same is not None:  # a kernel equal to an earlier one: call its function
                k = replace(same, source="", instruction=instr.name)
            else:
                low = self._lowering(lowered)
                first = self._function_of.get(low.digest)
                if first is not None:  # the same kernel IR again: call the first function
                    k = low.call(first.name)
                else:
                    name = kernel_name(low.stem, low.digest, self._used)
                    k = self._function_of[low.digest] = low.emit(name)
                if plan is not None:  # never written through a view
                    k = replace(k, inplace={o: i for o, i in k.inplace.items()
                                            if i not in plan.offsets})
                if shape_key is not None:
                    self._by_structure[shape_key] = k
            if plan is not None:
                self._views[instr] = plan.offsets
            self._kernel_of[instr] = len(self.sched.kernels)
            self.sched.kernels.append(k)
            if self._printed is not None and k.source:
                self._printed(k)
        i = self._kernel_of[instr]
        return i, self.sched.kernels[i]

    def emit(self, stmt: Stmt) -> None:
        self._block.append(stmt)

    def buf(self, shape: ArrayShape, label: str) -> Buf:
        b = Buf(len(self.sched.buffers), shape.nbytes, f"{shape} {label}")
        self.sched.buffers.append(b)
        return b

    def constant(self, instr: Instruction, k: int) -> Const:
        key = (instr, k)
        if key not in self._consts:
            shape = leaves(instr.shape)[k]
            value: Any = instr.literal
            if isinstance(instr.shape, TupleShape):
                value = _flat_literal(value)[k]
            label = f"{instr.name}{'' if k == 0 else f' leaf {k}'}: {shape}"
            self.sched.consts.append(ConstData(shape.dtype, value, max(1, shape.size), label))
            self._consts[key] = Const(len(self.sched.consts) - 1)
        return self._consts[key]

    def zero(self, dtype: DType) -> Const:
        if dtype.name not in self._zeros:
            self.sched.consts.append(ConstData(dtype, 0, 1, f"zero {dtype}"))
            self._zeros[dtype.name] = Const(len(self.sched.consts) - 1)
        return self._zeros[dtype.name]

    def copy(self, dst: Loc, src: Loc, shape: ArrayShape, why: str) -> None:
        if dst is not src and dst != src and shape.nbytes:
            self.emit(MemCopy(dst, src, shape.nbytes, False, why))

    # -- computations ---------------------------------------------------------------------------

    def computation(self, an: CompAnalysis, params: list[Loc],
                    dests: list[Loc | None] | None = None) -> list[Loc]:
        """Schedule `an.comp` inline with its parameter leaves at `params`; returns where its
        root leaves are. A root leaf with a destination ends up there (written by its producer
        when it can be, else copied at the end)."""
        env: dict[Src, Loc] = {}
        comp = an.comp
        root_srcs = an.root_srcs
        direct: dict[Src, Loc] = {}  # producers that write a destination directly
        if dests is not None:
            for j, d in enumerate(dests):
                if d is None:
                    continue
                h = an.head(root_srcs[j])
                if h not in direct and h[0].parent is comp and _can_write_dest(h[0]):
                    direct[h] = d
        for instr in comp.instructions:
            op = instr.opcode
            if op is Opcode.PARAMETER:
                base = an.param_offset[instr]
                for k in range(len(leaves(instr.shape))):
                    env[(instr, k)] = params[base + k]
            elif op is Opcode.CONSTANT:
                for k in range(len(leaves(instr.shape))):
                    env[(instr, k)] = self.constant(instr, k)
            elif op in (Opcode.PARTITION_ID, Opcode.REPLICA_ID):
                env[(instr, 0)] = self.zero(instr.shape.dtype)  # type: ignore[union-attr]
            elif is_alias(instr):
                continue
            elif op is Opcode.WHILE:
                self.loop(an, instr, env, direct)
            elif op is Opcode.CONDITIONAL:
                self.conditional(an, instr, env, direct)
            elif op is Opcode.CALL:
                self.call(an, instr, env, direct)
            elif is_host_callback(instr):
                self.host_call(an, instr, env, direct)
            elif is_kernel(instr):
                self.kernel_call(an, instr, env, direct)
            else:
                raise UnsupportedOpError(
                    f"instruction {instr.name}: the cpu driver cannot run {op.value}")
        out = [env[s] for s in root_srcs]
        if dests is not None:
            shapes = leaves(comp.root.shape)
            for j, d in enumerate(dests):
                if d is not None and out[j] is not d:
                    self.copy(d, out[j], shapes[j], f"{comp.name} root leaf {j}")
                    out[j] = d
        return out

    def kernel_call(self, an: CompAnalysis, instr: Instruction, env: dict[Src, Loc],
                    direct: dict[Src, Loc]) -> None:
        idx, kernel = self.kernel(instr)
        ins = [env[s] for s in an.operand_srcs(instr)]
        for leaf, nbytes in self._views.get(instr, {}).items():
            if nbytes:
                ins[leaf] = View(ins[leaf], nbytes)
        if len(ins) != len(kernel.inputs):
            raise UnsupportedOpError(
                f"instruction {instr.name}: kernel {kernel.name} takes {len(kernel.inputs)} "
                f"inputs, the instruction has {len(ins)} operand leaves")
        pairs = an.inplace.get(instr, {})
        outs: list[Loc] = []
        for o, shape in enumerate(leaves(instr.shape)):
            if o in pairs:
                loc = ins[pairs[o]]
            elif (instr, o) in direct:
                loc = direct[(instr, o)]
            else:
                loc = self.buf(shape, instr.name)
            env[(instr, o)] = loc
            outs.append(loc)
        self.emit(Call(idx, ins, outs, call_note(instr, bool(pairs))))

    def host_call(self, an: CompAnalysis, instr: Instruction, env: dict[Src, Loc],
                  direct: dict[Src, Loc]) -> None:
        ins = [env[s] for s in an.operand_srcs(instr)]
        outs: list[Loc] = []
        for o, shape in enumerate(array_results(instr)):
            loc = direct.get((instr, o)) or self.buf(shape, instr.name)
            env[(instr, o)] = loc
            outs.append(loc)
        site = len(self.sched.host_sites)
        self.sched.host_sites.append(HostSite(
            callback_index(instr), instr.name,
            tuple(x for o in instr.operands for x in leaves(o.shape)),
            tuple(array_results(instr))))
        self.emit(HostCall(site, ins, outs, call_note(instr)))

    def call(self, an: CompAnalysis, instr: Instruction, env: dict[Src, Loc],
             direct: dict[Src, Loc]) -> None:
        callee = an.calls[instr]
        params = [env[s] for s in an.operand_srcs(instr)]
        mine = [s[0] is instr for s in an.srcs[instr]]
        dests = [direct.get((instr, k)) if m else None for k, m in enumerate(mine)]
        self.emit(Note(f"{instr.name}: call {callee.comp.name}"))
        roots = self.computation(callee, params, dests)
        for k, m in enumerate(mine):
            if m:
                env[(instr, k)] = roots[k]

    def conditional(self, an: CompAnalysis, instr: Instruction, env: dict[Src, Loc],
                    direct: dict[Src, Loc]) -> None:
        outs: list[Loc] = []
        for k, shape in enumerate(leaves(instr.shape)):
            loc = direct.get((instr, k)) or self.buf(shape, instr.name)
            env[(instr, k)] = loc
            outs.append(loc)
        sel_shape = instr.operand(0).shape
        assert isinstance(sel_shape, ArrayShape)
        sel = env[an.srcs[instr.operand(0)][0]]
        blocks: list[list[Stmt]] = []
        for i, b in enumerate(an.branches[instr]):
            params = [env[s] for s in an.srcs[instr.operand(1 + i)]]
            block: list[Stmt] = []
            saved, self._block = self._block, block
            try:
                self.computation(b, params, list(outs))
            finally:
                self._block = saved
            blocks.append(block)
        count = len(blocks) if "branch_computations" in instr.attrs else None
        self.emit(Branch(instr.name, sel, sel_shape.dtype, blocks, count))

    def loop(self, an: CompAnalysis, instr: Instruction, env: dict[Src, Loc],
             direct: dict[Src, Loc]) -> None:
        """The loop over carried leaf pointers (see buffers.LoopPlan). A leaf with a destination
        (e.g. a result of the entry computation) uses it as one of its two buffers, so at the end
        it is either already there or copied once."""
        plan = an.loops[instr]
        init = [env[s] for s in an.operand_srcs(instr)]
        shapes = leaves(instr.shape)
        cur: list[Loc] = []
        carried: list[Carried] = []
        self._n += 1
        for k, kind in enumerate(plan.kinds):
            if kind == "pass":
                cur.append(init[k])
                continue
            dest = direct.get((instr, k))
            label = f"{instr.name} leaf {k}"
            if plan.reuse_init[k]:
                a: Loc = init[k]
            else:
                a = dest or self.buf(shapes[k], label)
                dest = None if a is dest else dest
            if plan.copy_init[k]:
                self.copy(a, init[k], shapes[k], f"{label}: owned copy of init")
            if kind == "inplace":
                cur.append(a)
                continue
            b: Loc = dest or self.buf(shapes[k], f"{label} (second)")
            owned = plan.reuse_init[k] or plan.copy_init[k]
            c = Carried(self._n, k, a if owned else init[k], a, b, owned)
            carried.append(c)
            cur.append(c)
        cond: list[Stmt] = []
        saved, self._block = self._block, cond
        try:
            pred = self.computation(plan.cond, cur)[0]
            body: list[Stmt] = []
            self._block = body
            mine = {id(c) for c in carried}
            dests: list[Loc | None] = [Spare(x) if id(x) in mine else None  # type: ignore[arg-type]
                                       for x in cur]
            roots = self.computation(plan.body, cur, dests)
        finally:
            self._block = saved
        for k, kind in enumerate(plan.kinds):
            if kind != "swap" and roots[k] is not cur[k]:
                raise AssertionError(f"{instr.name} leaf {k} ({kind}) left its buffer")
        note = (f"{instr.name}: while {plan.cond.comp.name} do {plan.body.comp.name}; "
                f"carried leaves: {', '.join(plan.kinds) or 'none'}")
        self.emit(While(instr.name, note, carried, cond, pred, body, trip_count(instr)))
        out: dict[int, Loc] = dict(enumerate(cur))
        for k, x in enumerate(cur):
            if id(x) not in mine:
                continue
            dest = direct.get((instr, k))
            if dest is not None:  # the final state is in `dest` or in the other buffer
                self.emit(MemCopy(dest, x, shapes[k].nbytes, True, f"{instr.name} leaf {k}"))
                out[k] = dest
        for k, s in enumerate(an.srcs[instr]):
            if s[0] is instr:
                env[s] = out[k]


def _can_write_dest(instr: Instruction) -> bool:
    """Can `instr`'s output be placed in a location chosen by the caller?"""
    op = instr.opcode
    if op in CONTROL_FLOW_OPS:
        return True
    return is_kernel(instr) and not is_alias(instr)


def _flat_literal(value: Any) -> list[Any]:
    """The arrays of a tuple literal, depth-first."""
    if isinstance(value, tuple):
        out: list[Any] = []
        for v in value:
            out.extend(_flat_literal(v))
        return out
    return [value]


def schedule(module: Module, lowering: KernelLowering, used_names: set[str],
             printed: Callable[[Kernel], None] | None = None) -> Schedule:
    """The driver IR of `module`'s entry computation (see the module docstring); kernel
    functions take names not in `used_names` (recorded there). `printed(k)`
    is called for each kernel function as it is printed (in `Schedule.kernels` order; sites
    that call an earlier function are not printed again)."""
    s = _Scheduler(lowering, used_names, printed)
    entry = module.entry
    s.sched.inputs = [x for p in entry.parameters for x in leaves(p.shape)]
    s.sched.outputs = leaves(entry.root.shape)
    params: list[Loc] = [Arg(i) for i in range(len(s.sched.inputs))]
    dests: list[Loc | None] = [Result(j) for j in range(len(s.sched.outputs))]
    s.computation(s.analyzer.analyze(entry), params, dests)
    return s.sched
