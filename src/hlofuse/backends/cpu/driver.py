"""The native driver: a whole (optimised) module as one C file whose `hf_entry` runs the entry
computation, while loops, conditionals and calls included, with no Python between kernels.

    schedule (schedule.py) -> buffer assignment (assign.py) -> print (here)

    prelude (cexpr)  |  one C function per kernel (kernels.py)  |  static const arrays
    |  profiling counters  |  int hf_entry(void *const *args, void *const *results)

What each instruction becomes (decided by schedule.py, printed here):

* a kernel (`is_kernel`): one line, `HF_CALL(k, NAME(in..., out...));` (timed under HF_PROFILE),
  or, in a straight run of TABLE_RUN calls or more, a row of a table that one loop runs
  (sites.py: the C compiler takes much longer over a thousand calls than over their table);
* parameter, constant, tuple, get-tuple-element, bitcast, reshape, copy, opt-barrier,
  add-dependency, identity custom calls: nothing at run time; they name existing buffers
  (`buffers.is_alias`); partition-id / replica-id: a static zero;
* a host callback (a custom call `backends/host_callbacks.py` recognises: jax's pure_callback,
  io_callback, debug.print): `hf_host_call(...)` through the pointer in the `args` slot after the
  parameters (contract.py), in the caller's floating-point mode; a non-zero return (the
  Python function raised) stops the run;
* while: `for (;;) { condition; if (!pred) break; body; swap }` over loop-carried leaf pointers,
  no copy per iteration (`buffers.LoopPlan`); conditional: `if` / `switch` (an out-of-range index
  runs the last branch, as XLA) with the branches inlined, writing the conditional's buffers;
  call: the callee inlined.

`hf_entry` allocates the arena and calls `hf_run` (the entry computation) under a
`sigsetjmp` that catches a kernel's failed scratch allocation, with the calling thread's
floating-point control register set to the file's subnormal mode and restored afterwards
(`fpenv.py`; `#define HF_FLUSH_SUBNORMALS` heads the file); every while-loop iteration
polls the process's SIGINT counter (`runtime.py`) with one relaxed load. Statuses: 0 done,
1 no arena, 2 stopped by SIGINT, 3 a kernel's scratch allocation failed (`hf_failure`), 4 a
host callback failed (the executable raises what it raised).
Nothing from the input is printed as code: comments go through `ctext.comment`, names are
`hf_*` counters and the kernels' code-derived names, and every integer literal is checked
(`ctext.check_integers`) after `limits.check_module` bounded the module.

Conditions enforced: kernels never write `args` or constants (in place only on owned, dead
buffers, see buffers.py); every root leaf ends up in `results[j]`: written there directly by
its producer when that runs in the entry computation (a kernel, a conditional's branches, an
inlined call; a while loop uses `results[j]` as one of the leaf's two buffers, then copies at
most once), else copied at the end. `results` must not overlap `args` (they are written before
the end, and kernels assume no aliasing: the executable allocates them fresh). All internal
buffers come from one 64-byte aligned arena (no allocation inside loops), allocated by a call
and kept for the next (`hf_arena_kept`; `hf_release` frees it).
Ops the backend cannot run (infeed, outfeed, send/recv, collectives, rng state, opaque custom
calls, bitcasts of non-default layouts) raise `UnsupportedOpError` naming the instruction; so
does a host callback built without a callback table (executable.py). jax's LAPACK custom calls
are library calls (`library/lapack_calls.py`).
"""

from __future__ import annotations

from collections.abc import Callable

from hlofuse.backends.cpu import cexpr, fpenv, limits, sites, units
from hlofuse.backends.cpu.cexpr import UnsupportedOpError
from hlofuse.backends.cpu.contract import ENTRY_SYMBOL, Kernel, Program
from hlofuse.backends.cpu.ctext import check_integers, comment
from hlofuse.backends.driver_ir.assign import assign
from hlofuse.backends.driver_ir.buffers import is_alias
from hlofuse.backends.driver_ir.schedule import (
    Arg,
    Branch,
    Buf,
    Call,
    Carried,
    Const,
    HostCall,
    KernelLowering,
    Loc,
    MemCopy,
    Note,
    Result,
    Schedule,
    Spare,
    Stmt,
    View,
    While,
    schedule,
)
from hlofuse.backends.host_callbacks import is_host_callback
from hlofuse.backends.subnormals import DEFAULT as DEFAULT_SUBNORMALS
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import CONTROL_FLOW_OPS, Opcode
from hlofuse.ir.shape import ArrayShape

_UNSUPPORTED = {
    Opcode.INFEED: "infeed reads from a host queue",
    Opcode.OUTFEED: "outfeed writes to a host queue",
    Opcode.SEND: "send is a cross-device transfer",
    Opcode.SEND_DONE: "send-done is a cross-device transfer",
    Opcode.RECV: "recv is a cross-device transfer",
    Opcode.RECV_DONE: "recv-done is a cross-device transfer",
    Opcode.ALL_REDUCE: "all-reduce is a collective",
    Opcode.ALL_GATHER: "all-gather is a collective",
    Opcode.RNG_GET_AND_UPDATE_STATE: "rng-get-and-update-state needs a runtime RNG state",
    Opcode.SCAN: "scan is not supported (lower it to a while loop)",
}

_RESERVED = frozenset({ENTRY_SYMBOL, "args", "results", "hf_arena", "hf_arena_kept",
                       "hf_release", "hf_none", "hf_prof_ns", "hf_prof_calls",
                       "hf_now_ns", "HF_CALL", "main", "hf_run", "hf_at", "hf_stop",
                       "hf_stop0", "hf_stop_ptr", "hf_failure", "hf_host", "hf_host_fn",
                       "hf_host_call", "hf_caller", "hf_hin", "hf_hout"})

# Profiling counters, the kernel-call macro, and the SIGINT counter the executable points
# `hf_stop_ptr` at (runtime.py). HF_CALL records which kernel runs, for hf_failure.
_RUNTIME = """
#include <time.h>
static const int hf_never_stop = 0;
const int *hf_stop_ptr = &hf_never_stop;
#ifdef HF_PROFILE
uint64_t hf_prof_ns[{n}];
uint64_t hf_prof_calls[{n}];
static inline uint64_t hf_now_ns(void) {{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}}
#define HF_CALL(k, call) do {{ *hf_at = (k); uint64_t hf_t0_ = hf_now_ns(); call; \\
    hf_prof_ns[k] += hf_now_ns() - hf_t0_; hf_prof_calls[k] += 1; }} while (0)
#else
#define HF_CALL(k, call) do {{ *hf_at = (k); call; }} while (0)
#endif
"""

# hf_entry: the arena, then hf_run under a setjmp that catches a kernel's failed allocation
# (cprelude's hf_alloc), in the file's subnormal mode (fpenv.py: the caller's control register
# is restored on every way out). hf_run is not inlined: setjmp would pessimise its loops. Statuses:
# 0 done, 1 no arena, 2 stopped by SIGINT, 3 a kernel could not allocate scratch (hf_failure
# says which kernel and how many bytes).
_ENTRY = """
static char *hf_arena_kept;  /* the last call's arena: the next call reuses it (hf_release) */

int {entry}(void *const *args, void *const *results) {{
  char *hf_arena = NULL;
  if ({size}) {{
    hf_arena = __atomic_exchange_n(&hf_arena_kept, NULL, __ATOMIC_ACQUIRE);
    if (!hf_arena) hf_arena = (char *)aligned_alloc(64, {size});
    if (!hf_arena) return 1;
  }}
  volatile int64_t hf_kernel = -1;
  sigjmp_buf hf_jb;
  sigjmp_buf *const hf_prev = hf_oom_jmp;
  const hf_fpcr_t hf_fpcr = hf_fpcr_enter(); /* this file's subnormal mode, until we return */
  int status;
  if (sigsetjmp(hf_jb, 0)) {{
    hf_oom_kernel = hf_kernel;
    status = 3;
  }} else {{
    hf_oom_jmp = &hf_jb;
    status = hf_run(args, results, hf_arena, &hf_kernel{host});
  }}
  hf_fpcr_leave(hf_fpcr);
  hf_oom_jmp = hf_prev;
  char *hf_none = NULL;  /* keep the arena unless another call's is kept already */
  if (hf_arena && !__atomic_compare_exchange_n(&hf_arena_kept, &hf_none, hf_arena, 0,
                                               __ATOMIC_RELEASE, __ATOMIC_RELAXED))
    free(hf_arena);
  return status;
}}

void hf_release(void) {{
  free(__atomic_exchange_n(&hf_arena_kept, NULL, __ATOMIC_ACQUIRE));
}}

int hf_failure(int64_t *info) {{
  info[0] = hf_oom_kernel;
  info[1] = hf_oom_bytes;
  return 0;
}}
"""

# Host callbacks (contract.py): the caller's function, run in the caller's floating-point mode
# (the one hf_entry found), this file's mode restored after it.
_HOST = """
typedef int (*hf_host_fn)(int64_t site, void *const *ins, void *const *outs);
static int hf_host_call(void *fn, int64_t site, void *const *ins, void *const *outs,
                        hf_fpcr_t caller) {
  if (!fn) return 1;
  const hf_fpcr_t mine = hf_fpcr_get();
  if (mine != caller) hf_fpcr_set(caller);
  const int r = ((hf_host_fn)fn)(site, ins, outs);
  if (hf_fpcr_get() != mine) hf_fpcr_set(mine);
  return r;
}
"""

# At the top of every while-loop iteration: stop when a SIGINT arrived since hf_run began.
POLL = "if (__atomic_load_n(hf_stop, __ATOMIC_RELAXED) != hf_stop0) return 2;"


def _join(parts: list[str]) -> str:
    return "".join(p.strip("\n") + "\n\n" for p in parts if p)


def _default_lowering(threads: int) -> KernelLowering:
    from hlofuse.backends.cpu.kernels import lower

    return lambda instr: lower(instr, threads=threads)


def generate(module: Module, *, kernel_lowering: KernelLowering | None = None,
             threads: int = 1, subnormals: str = DEFAULT_SUBNORMALS,
             early: Callable[[str], None] | None = None) -> Program:
    """The C program for `module` (already through its pipeline; no passes run here). Its
    parallel loops may use `threads` threads of the runtime's pool (1: none); `hf_entry` runs
    with subnormals flushed or kept (`subnormals`, fpenv.py). `early`: given each kernel
    unit of a large program (`units.Stream`) as soon as its kernels are printed, to compile
    while the rest is generated (`build.compile_early`)."""
    limits.check_module(module)
    _check_supported(module)
    stream = units.Stream(_head(subnormals), early) if early is not None else None

    def printed(k: Kernel) -> None:
        check_integers(k.source, f"kernel {k.name} (instruction {k.instruction})")
        if stream is not None:
            stream.add(k)

    sched = schedule(module, kernel_lowering or _default_lowering(threads), set(_RESERVED),
                     printed)
    if stream is not None:
        stream.finish()
    return _Printer(sched, subnormals).program(module)


def _head(subnormals: str) -> str:
    """What the program's C starts with (`Program.split[0]` bytes): the subnormal mode, the
    prelude, the includes."""
    return _join([fpenv.define(subnormals) + cexpr.prelude(),
                  "#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n"])


def _reachable(module: Module) -> list[Computation]:
    """The entry and every computation it runs through while/conditional/call."""
    seen: dict[int, Computation] = {}
    stack = [module.entry]
    while stack:
        comp = stack.pop()
        if id(comp) in seen:
            continue
        seen[id(comp)] = comp
        for instr in comp.instructions:
            if instr.opcode in CONTROL_FLOW_OPS:
                stack.extend(instr.called_computations())
    return list(seen.values())


def _check_supported(module: Module) -> None:
    for comp in _reachable(module):
        for instr in comp.instructions:
            why = _UNSUPPORTED.get(instr.opcode)
            if (why is None and instr.opcode is Opcode.CUSTOM_CALL and not is_alias(instr)
                    and not is_host_callback(instr)):
                why = _custom_call_problem(instr)
            if why is None and instr.opcode is Opcode.BITCAST:
                why = _bitcast_problem(instr)
            if why is not None:
                raise UnsupportedOpError(
                    f"instruction {instr.name} in computation {comp.name}: the cpu backend "
                    f"cannot run {instr.opcode.value}: {why}"
                )
            if instr.opcode is Opcode.FUSION:
                _check_fused_bitcasts(instr.fused_computation)


def _check_fused_bitcasts(comp: Computation) -> None:
    """A bitcast inside a fusion is lowered as a reshape (row-major); one whose layouts make
    it a reinterpretation of the bytes (`f32[4,3]{0,1}` -> `f32[3,4]{1,0}` is a transpose) is
    refused as at the top level, never run as a reshape."""
    for instr in comp.instructions:
        if instr.opcode is Opcode.FUSION:
            _check_fused_bitcasts(instr.fused_computation)
        elif instr.opcode is Opcode.BITCAST:
            why = _bitcast_problem(instr)
            if why is not None:
                raise UnsupportedOpError(
                    f"instruction {instr.name} in computation {comp.name}: the cpu backend "
                    f"cannot run bitcast: {why}"
                )


def _custom_call_problem(instr: Instruction) -> str | None:
    """Why the backend cannot run custom call `instr`, or None: jax's LAPACK calls run as
    library calls (library/lapack_calls.py), when well formed and LAPACK is there for them."""
    from hlofuse.backends import lapack_targets

    target = instr.attrs.get("custom_call_target", "?")
    try:
        call = lapack_targets.parse(instr)
    except lapack_targets.TargetError as exc:
        return f"custom-call target {target!r}: {exc}"
    if call is None:
        return f"custom-call target {target!r} is opaque code"
    from hlofuse.backends.cpu.library.lapack_calls import code_generation_check

    where = instr.parent.name if instr.parent is not None else "?"
    code_generation_check(f"instruction {instr.name} in {where}", call)
    return None


def _bitcast_problem(instr: Instruction) -> str | None:
    out, src = instr.shape, instr.operand(0).shape
    if not (isinstance(out, ArrayShape) and isinstance(src, ArrayShape)):
        return "bitcast of a non-array"
    if not (out.has_default_layout and src.has_default_layout):
        return f"bitcast from {src} to {out} reinterprets a non-default physical layout"
    if out.nbytes != src.nbytes or out.dtype.is_pred != src.dtype.is_pred:
        return f"bitcast from {src} to {out} changes the byte size"
    return None


class _Printer:
    """Prints a scheduled, assigned program as C."""

    def __init__(self, sched: Schedule, subnormals: str = DEFAULT_SUBNORMALS) -> None:
        self.s = sched
        self.subnormals = subnormals
        self.lines: list[str] = []
        self._depth = 1
        self._tables = sites.Tables(sched.kernels)
        self._bufs: set[int] = set()  # ids of the arena buffers the printed statements name

    def emit(self, line: str) -> None:
        self.lines.append("  " * self._depth + line)

    def loc(self, x: Loc) -> str:
        if isinstance(x, Arg):
            return f"args[{x.index}]"
        if isinstance(x, Result):
            return f"results[{x.index}]"
        if isinstance(x, Const):
            return f"(void *)hf_const{x.index}"
        if isinstance(x, Buf):
            self._bufs.add(x.id)
            return f"hf_b{x.id}"
        if isinstance(x, Carried):
            return f"hf_w{x.id}_{x.leaf}"
        if isinstance(x, Spare):
            return f"hf_w{x.of.id}_{x.of.leaf}s"
        if isinstance(x, View):
            return f"(void *)((char *){self.loc(x.base)} + {x.nbytes})"
        raise TypeError(x)

    def program(self, module: Module) -> Program:
        sched = self.s
        labels = [(b.nbytes, b.label) for b in sched.buffers]
        bound = sum(max(64, b.nbytes) for b in sched.buffers)
        if bound > 1 << 62:  # assign() computes in int64
            limits.check_arena(bound, labels)
        size = assign(sched)
        limits.check_arena(size, labels)
        self.block(sched.body)
        host = bool(sched.host_sites)
        head = ["static __attribute__((noinline)) int hf_run(void *const *args, "
                "void *const *results, char *hf_arena, volatile int64_t *hf_at"
                + (", hf_fpcr_t hf_caller" if host else "") + ") {",
                "  const int *const hf_stop = hf_stop_ptr;",
                "  const int hf_stop0 = __atomic_load_n(hf_stop, __ATOMIC_RELAXED);",
                "  (void)args; (void)results; (void)hf_arena; (void)hf_at; (void)hf_stop0;"]
        if host:  # the callback's slot follows the parameters' (contract.py)
            head.append(f"  void *const hf_host = args[{len(sched.inputs)}];")
        for b in sched.buffers:
            if b.id in self._bufs:
                head.append(f"  void *const hf_b{b.id} = hf_arena + {b.offset};  "
                            + comment(b.label))
        tail = ["  return 0;", "}", _ENTRY.format(entry=ENTRY_SYMBOL, size=size,
                                                  host=", hf_fpcr" if host else "")]
        consts = "\n".join([self._const(i, c) for i, c in enumerate(sched.consts)]
                           + [self._tables.source(len(sched.consts))])
        entry = "\n".join(head + self.lines + tail)
        check_integers(consts + "\n" + entry, f"the driver of module {module.name}")
        prelude = _head(self.subnormals)  # (kernels were checked as they were printed)
        kernels = _join([k.source for k in sched.kernels])
        runtime = _join([
            _RUNTIME.format(n=max(1, len(sched.kernels))),
            _HOST if host else "",
            consts,
            comment(module.name, f": {len(sched.kernels)} kernels, arena {size} bytes"),
            entry,
        ])
        big = max(sched.buffers, key=lambda b: b.nbytes, default=None)
        return Program(
            source=prelude + kernels + runtime,
            split=(len(prelude), len(prelude) + len(kernels)),
            inputs=tuple(sched.inputs),
            outputs=tuple(sched.outputs),
            kernels=tuple(sched.kernels),
            arena_bytes=size,
            arena_largest=f"{big.label} ({big.nbytes} bytes)" if big is not None else "",
            host_sites=tuple(sched.host_sites),
        )

    @staticmethod
    def _const(i: int, c: object) -> str:
        from hlofuse.backends.driver_ir.schedule import ConstData

        assert isinstance(c, ConstData)
        return (comment(c.label) + "\n" + f"static const {cexpr.ctype(c.dtype)} hf_const{i}"
                f"[{c.size}] __attribute__((aligned(64))) = "
                f"{cexpr.array_initializer(c.value, c.dtype)};")

    # -- statements -----------------------------------------------------------------------------

    def block(self, body: list[Stmt]) -> None:
        """Print `body`; long runs of calls as a loop over a table (sites.py)."""
        at = 0
        for start, stop in sites.runs(body):
            self._statements(body[at:start])
            self.emit(self._tables.run(body[start:stop]))
            at = stop
        self._statements(body[at:])

    def _statements(self, body: list[Stmt]) -> None:
        for s in body:
            if isinstance(s, Call):
                k = self.s.kernels[s.kernel]
                args = ", ".join(self.loc(x) for x in s.ins + s.outs)
                self.emit(f"HF_CALL({s.kernel}, {k.name}({args}));  {comment(s.note)}")
            elif isinstance(s, HostCall):
                self.host_call(s)
            elif isinstance(s, MemCopy):
                d, src = self.loc(s.dst), self.loc(s.src)
                guard = f"if ({src} != {d}) " if s.if_distinct else ""
                self.emit(f"{guard}memcpy({d}, {src}, {s.nbytes});  {comment(s.note)}")
            elif isinstance(s, Note):
                self.emit(comment(s.text))
            elif isinstance(s, Branch):
                self.branch(s)
            elif isinstance(s, While):
                self.loop(s)
            else:
                raise TypeError(s)

    def host_call(self, s: HostCall) -> None:
        """`hf_host_call` with the site's operand and result pointers; a failure returns 4."""
        ins = ", ".join(self.loc(x) for x in s.ins) or "0"
        outs = ", ".join(self.loc(x) for x in s.outs) or "0"
        self.emit("{  " + comment(s.note, ": host callback"))
        self.emit(f"  void *const hf_hin[{max(1, len(s.ins))}] = {{{ins}}};")
        self.emit(f"  void *const hf_hout[{max(1, len(s.outs))}] = {{{outs}}};")
        self.emit(f"  if (hf_host_call(hf_host, {s.site}, hf_hin, hf_hout, hf_caller)) return 4;")
        self.emit("}")

    def nested(self, body: list[Stmt]) -> None:
        self._depth += 1
        self.block(body)
        self._depth -= 1

    def branch(self, s: Branch) -> None:
        sel = f"*(const {cexpr.ctype(s.selector_dtype)} *){self.loc(s.selector)}"
        if s.count is None:
            self.emit(f"if ({sel}) {{  " + comment(s.note, ": true branch"))
            self.nested(s.branches[0])
            self.emit("} else {  " + comment(s.note, ": false branch"))
            self.nested(s.branches[1])
            self.emit("}")
            return
        n = s.count
        self.emit("{  " + comment(s.note, f": {n} branches"))
        self._depth += 1
        self.emit(f"int64_t hf_i = (int64_t){sel};")
        self.emit(f"switch (hf_i >= 0 && hf_i < {n} ? hf_i : {n - 1}) {{")
        for i, body in enumerate(s.branches):
            self.emit(f"case {i}: {{")
            self.nested(body)
            self.emit("  break;")
            self.emit("}")
        self.emit("}")
        self._depth -= 1
        self.emit("}")

    def loop(self, s: While) -> None:
        """`for (;;) { poll; condition; if (!pred) break; body; swap }` over carried pointers:
        each swapped leaf's body writes the spare buffer, then the two pointers swap."""
        self.emit(comment(s.note))
        for c in s.carried:
            spare = c.b if c.owned else c.a
            self.emit(f"void *{self.loc(c)} = {self.loc(c.first)}, "
                      f"*{self.loc(Spare(c))} = {self.loc(spare)};")
        self.emit("for (;;) {  " + comment(s.name))
        self._depth += 1
        self.emit(POLL)
        self.block(s.cond)
        self.emit(f"if (!*(const uint8_t *){self.loc(s.pred)}) break;")
        self.block(s.body)
        for c in s.carried:
            var, sp = self.loc(c), self.loc(Spare(c))
            self.emit(f"{var} = {sp}; {sp} = {var} == {self.loc(c.a)} ? {self.loc(c.b)} : "
                      f"{self.loc(c.a)};")
        self._depth -= 1
        self.emit("}")
