"""The native driver: a whole (optimised) module as one C file whose `hf_entry` runs the entry
computation, while loops, conditionals and calls included, with no Python between kernels.

    prelude (cexpr)  |  one C function per kernel (lower)  |  static const arrays (constants)
    |  profiling counters  |  int hf_entry(void *const *args, void *const *results)

What each instruction becomes:

* a kernel (`is_kernel`): one line, `HF_CALL(k, NAME(in..., out...));` (timed under HF_PROFILE);
* parameter, constant, tuple, get-tuple-element, bitcast, reshape, copy, opt-barrier,
  add-dependency, identity custom calls: nothing at run time; they name existing buffers
  (`buffers.is_alias`); partition-id / replica-id: a static zero;
* while: `for (;;) { condition; if (!pred) break; body; swap }` over loop-carried leaf pointers,
  no copy per iteration (`buffers.LoopPlan`); conditional: `if` / `switch` (an out-of-range index
  runs the last branch, as XLA) with the branches inlined, writing the conditional's buffers;
  call: the callee inlined.

`hf_entry` allocates the arena and calls `hf_run` (the entry computation) under a
`sigsetjmp` that catches a kernel's failed scratch allocation; every while-loop iteration
polls the process's SIGINT counter (`runtime.py`) with one relaxed load. Statuses: 0 done,
1 no arena, 2 stopped by SIGINT, 3 a kernel's scratch allocation failed (`hf_failure`).
Nothing from the input is printed as code: comments go through `ctext.comment`, names are
`hf_*` counters and the kernels' code-derived names, and every integer literal is checked
(`ctext.check_integers`) after `limits.check_module` bounded the module.

Conditions enforced: kernels never write `args` or constants (in place only on owned, dead
buffers, see buffers.py); every root leaf ends up in `results[j]`: written there directly by
its producer when that runs in the entry computation (a kernel, a conditional's branches, an
inlined call; a while loop uses `results[j]` as one of the leaf's two buffers, then copies at
most once), else copied at the end. `results` must not overlap `args` (they are written before
the end, and kernels assume no aliasing: the executable allocates them fresh). All internal
buffers come from one 64-byte aligned arena allocated per call (no allocation inside loops).
Ops the backend cannot run (infeed, outfeed, send/recv, collectives, rng state, opaque custom
calls, bitcasts of non-default layouts) raise `UnsupportedOpError` naming the instruction.
"""

from __future__ import annotations

from collections.abc import Callable

from hlofuse.backends.cpu import cexpr, limits
from hlofuse.backends.cpu.buffers import Analyzer, Arena, CompAnalysis, Ref, Src, is_alias
from hlofuse.backends.cpu.cexpr import UnsupportedOpError
from hlofuse.backends.cpu.contract import ENTRY_SYMBOL, Kernel, Program
from hlofuse.backends.cpu.ctext import check_integers, comment
from hlofuse.ir.computation import Computation
from hlofuse.ir.dtypes import DType
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape, leaves
from hlofuse.passes.fusion.kernels import is_kernel

KernelLowering = Callable[[Instruction, set[str]], Kernel]

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

_RESERVED = frozenset({ENTRY_SYMBOL, "args", "results", "hf_arena", "hf_prof_ns", "hf_prof_calls",
                       "hf_now_ns", "HF_CALL", "main", "hf_run", "hf_at", "hf_stop",
                       "hf_stop0", "hf_stop_ptr", "hf_failure"})

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
# (cprelude's hf_alloc). hf_run is not inlined: setjmp would pessimise its loops. Statuses:
# 0 done, 1 no arena, 2 stopped by SIGINT, 3 a kernel could not allocate scratch (hf_failure
# says which kernel and how many bytes).
_ENTRY = """
int {entry}(void *const *args, void *const *results) {{
  char *hf_arena = NULL;
  if ({size}) {{
    hf_arena = (char *)aligned_alloc(64, {size});
    if (!hf_arena) return 1;
  }}
  volatile int64_t hf_kernel = -1;
  sigjmp_buf hf_jb;
  sigjmp_buf *const hf_prev = hf_oom_jmp;
  int status;
  if (sigsetjmp(hf_jb, 0)) {{
    hf_oom_kernel = hf_kernel;
    status = 3;
  }} else {{
    hf_oom_jmp = &hf_jb;
    status = hf_run(args, results, hf_arena, &hf_kernel);
  }}
  hf_oom_jmp = hf_prev;
  free(hf_arena);
  return status;
}}

int hf_failure(int64_t *info) {{
  info[0] = hf_oom_kernel;
  info[1] = hf_oom_bytes;
  return 0;
}}
"""

# At the top of every while-loop iteration: stop when a SIGINT arrived since hf_run began.
POLL = "if (__atomic_load_n(hf_stop, __ATOMIC_RELAXED) != hf_stop0) return 2;"


def _default_lowering() -> KernelLowering:
    from hlofuse.backends.cpu.kernels import lower_kernel

    return lower_kernel


def generate(module: Module, *, kernel_lowering: KernelLowering | None = None) -> Program:
    """The C program for `module` (already through its pipeline; no passes run here)."""
    limits.check_module(module)
    _check_supported(module)
    gen = _Generator(kernel_lowering or _default_lowering())
    return gen.program(module)


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
            if instr.opcode in (Opcode.WHILE, Opcode.CONDITIONAL, Opcode.CALL):
                stack.extend(instr.called_computations())
    return list(seen.values())


def _check_supported(module: Module) -> None:
    for comp in _reachable(module):
        for instr in comp.instructions:
            why = _UNSUPPORTED.get(instr.opcode)
            if why is None and instr.opcode is Opcode.CUSTOM_CALL and not is_alias(instr):
                target = instr.attrs.get("custom_call_target", "?")
                why = f"custom-call target {target!r} is opaque code"
            if why is None and instr.opcode is Opcode.BITCAST:
                why = _bitcast_problem(instr)
            if why is not None:
                raise UnsupportedOpError(
                    f"instruction {instr.name} in computation {comp.name}: the cpu backend "
                    f"cannot run {instr.opcode.value}: {why}"
                )


def _default_layout(shape: ArrayShape) -> bool:
    return not shape.layout_extra and (
        shape.layout is None or shape.layout == tuple(range(shape.rank - 1, -1, -1)))


def _bitcast_problem(instr: Instruction) -> str | None:
    out, src = instr.shape, instr.operand(0).shape
    if not (isinstance(out, ArrayShape) and isinstance(src, ArrayShape)):
        return "bitcast of a non-array"
    if not (_default_layout(out) and _default_layout(src)):
        return f"bitcast from {src} to {out} reinterprets a non-default physical layout"
    if out.nbytes != src.nbytes or out.dtype.is_pred != src.dtype.is_pred:
        return f"bitcast from {src} to {out} changes the byte size"
    return None


class _Generator:
    def __init__(self, lowering: KernelLowering) -> None:
        self._lowering = lowering
        self._used: set[str] = set(_RESERVED)
        self.kernels: list[Kernel] = []
        self._kernel_of: dict[Instruction, int] = {}
        self.analyzer = Analyzer(lambda instr: self.kernel(instr)[1].inplace)
        self.arena = Arena()
        self.lines: list[str] = []
        self._depth = 1
        self._consts: dict[tuple[Instruction, int], Ref] = {}
        self._const_defs: list[str] = []
        self._zeros: dict[str, Ref] = {}
        self._n = 0

    # -- helpers --------------------------------------------------------------------------------

    def kernel(self, instr: Instruction) -> tuple[int, Kernel]:
        if instr not in self._kernel_of:
            k = self._lowering(instr, self._used)
            self._used.add(k.name)
            self._kernel_of[instr] = len(self.kernels)
            self.kernels.append(k)
        i = self._kernel_of[instr]
        return i, self.kernels[i]

    def emit(self, line: str) -> None:
        self.lines.append("  " * self._depth + line)

    def fresh(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def slot(self, shape: ArrayShape, label: str) -> Ref:
        s = self.arena.new(shape, f"{shape} {label}")
        return Ref(f"hf_b{s.id}", (s,))

    def constant(self, instr: Instruction, k: int) -> Ref:
        key = (instr, k)
        if key not in self._consts:
            shape = leaves(instr.shape)[k]
            value = instr.literal
            if isinstance(instr.shape, TupleShape):
                value = _flat_literal(value)[k]
            name = self.fresh("hf_const")
            self._const_defs.append(
                comment(instr.name, "" if k == 0 else f" leaf {k}", f": {shape}") + "\n"
                f"static const {cexpr.ctype(shape.dtype)} {name}[{max(1, shape.size)}] "
                f"__attribute__((aligned(64))) = {cexpr.array_initializer(value, shape.dtype)};")
            self._consts[key] = Ref(f"(void *){name}")
        return self._consts[key]

    def zero(self, dtype: DType) -> Ref:
        ct = cexpr.ctype(dtype)
        if ct not in self._zeros:
            name = self.fresh("hf_zero")
            self._const_defs.append(f"static const {ct} {name}[1] = {{0}};")
            self._zeros[ct] = Ref(f"(void *){name}")
        return self._zeros[ct]

    def memcpy(self, dst: Ref, src: Ref, shape: ArrayShape, why: str) -> None:
        self.arena.touch(dst, src)
        if dst.expr != src.expr and shape.nbytes:
            self.emit(f"memcpy({dst.expr}, {src.expr}, {shape.nbytes});  {comment(why)}")

    # -- the program ----------------------------------------------------------------------------

    def program(self, module: Module) -> Program:
        entry = module.entry
        in_shapes = [s for p in entry.parameters for s in leaves(p.shape)]
        out_shapes = leaves(entry.root.shape)
        params = [Ref(f"args[{i}]") for i in range(len(in_shapes))]
        dests: list[Ref | None] = [Ref(f"results[{j}]") for j in range(len(out_shapes))]
        self.emit_computation(self.analyzer.analyze(entry), params, dests)
        labels = [(s.nbytes, s.label) for s in self.arena.slots]
        bound = sum(s.size for s in self.arena.slots)
        if bound > 1 << 62:  # assign() computes in int64
            limits.check_arena(bound, labels)
        size = self.arena.assign()
        limits.check_arena(size, labels)
        size = size if self.arena.slots else 0
        head = ["static __attribute__((noinline)) int hf_run(void *const *args, "
                "void *const *results, char *hf_arena, volatile int64_t *hf_at) {",
                "  const int *const hf_stop = hf_stop_ptr;",
                "  const int hf_stop0 = __atomic_load_n(hf_stop, __ATOMIC_RELAXED);",
                "  (void)args; (void)results; (void)hf_arena; (void)hf_at; (void)hf_stop0;"]
        for s in self.arena.slots:
            head.append(f"  void *const hf_b{s.id} = hf_arena + {s.offset};  "
                        + comment(s.label))
        tail = ["  return 0;", "}", _ENTRY.format(entry=ENTRY_SYMBOL, size=size)]
        consts = "\n".join(self._const_defs)
        entry = "\n".join(head + self.lines + tail)
        for k in self.kernels:
            check_integers(k.source, f"kernel {k.name} (instruction {k.instruction})")
        check_integers(consts + "\n" + entry, f"the driver of module {module.name}")
        parts = [
            cexpr.prelude(),
            "#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n",
            _RUNTIME.format(n=max(1, len(self.kernels))),
            *(k.source for k in self.kernels),
            consts,
            comment(module.name, f": {len(self.kernels)} kernels, arena {size} bytes"),
            entry,
        ]
        big = max(self.arena.slots, key=lambda s: s.nbytes, default=None)
        return Program(
            source="\n\n".join(p.strip("\n") for p in parts if p) + "\n",
            inputs=tuple(in_shapes),
            outputs=tuple(out_shapes),
            kernels=tuple(self.kernels),
            arena_bytes=size,
            arena_largest=f"{big.label} ({big.nbytes} bytes)" if big is not None else "",
        )

    # -- computations ---------------------------------------------------------------------------

    def emit_computation(self, an: CompAnalysis, params: list[Ref],
                         dests: list[Ref | None] | None = None) -> list[Ref]:
        """Emit `an.comp` inline with its parameter leaves at `params`; returns where its root
        leaves are. A root leaf with a destination ends up there (written by its producer when
        it can be, else copied at the end)."""
        env: dict[Src, Ref] = {}
        comp = an.comp
        root_srcs = an.root_srcs
        direct: dict[Src, Ref] = {}  # producers that write a destination directly
        if dests is not None:
            for j, d in enumerate(dests):
                if d is None:
                    continue
                h = an.head(root_srcs[j])
                if h not in direct and h[0].parent is comp and _can_write_dest(h[0]):
                    direct[h] = d
        for instr in comp.instructions:
            self.arena.tick()
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
                self.emit_while(an, instr, env, direct)
            elif op is Opcode.CONDITIONAL:
                self.emit_conditional(an, instr, env, direct)
            elif op is Opcode.CALL:
                self.emit_call(an, instr, env, direct)
            elif is_kernel(instr):
                self.emit_kernel(an, instr, env, direct)
            else:
                raise UnsupportedOpError(
                    f"instruction {instr.name}: the cpu driver cannot run {op.value}")
        out = [env[s] for s in root_srcs]
        if dests is not None:
            shapes = leaves(comp.root.shape)
            for j, d in enumerate(dests):
                if d is not None and out[j].expr != d.expr:
                    self.memcpy(d, out[j], shapes[j], f"{comp.name} root leaf {j}")
                    out[j] = d
        return out

    def emit_kernel(self, an: CompAnalysis, instr: Instruction, env: dict[Src, Ref],
                    direct: dict[Src, Ref]) -> None:
        idx, kernel = self.kernel(instr)
        ins = [env[s] for s in an.operand_srcs(instr)]
        if len(ins) != len(kernel.inputs):
            raise UnsupportedOpError(
                f"instruction {instr.name}: kernel {kernel.name} takes {len(kernel.inputs)} "
                f"inputs, the instruction has {len(ins)} operand leaves")
        pairs = an.inplace.get(instr, {})
        outs: list[Ref] = []
        for o, shape in enumerate(leaves(instr.shape)):
            if o in pairs:
                ref = ins[pairs[o]]
            elif (instr, o) in direct:
                ref = direct[(instr, o)]
            else:
                ref = self.slot(shape, instr.name)
            env[(instr, o)] = ref
            outs.append(ref)
        self.arena.touch(*ins, *outs)
        call_args = ", ".join(r.expr for r in ins + outs)
        note = f"{instr.name}" + (" (in place)" if pairs else "")
        self.emit(f"HF_CALL({idx}, {kernel.name}({call_args}));  {comment(note)}")

    def emit_call(self, an: CompAnalysis, instr: Instruction, env: dict[Src, Ref],
                  direct: dict[Src, Ref]) -> None:
        callee = an.calls[instr]
        params = [env[s] for s in an.operand_srcs(instr)]
        mine = [s[0] is instr for s in an.srcs[instr]]
        dests = [direct.get((instr, k)) if m else None for k, m in enumerate(mine)]
        self.emit(comment(instr.name, ": call ", callee.comp.name))
        roots = self.emit_computation(callee, params, dests)
        for k, m in enumerate(mine):
            if m:
                env[(instr, k)] = roots[k]

    def emit_conditional(self, an: CompAnalysis, instr: Instruction, env: dict[Src, Ref],
                         direct: dict[Src, Ref]) -> None:
        outs = []
        for k, shape in enumerate(leaves(instr.shape)):
            ref = direct.get((instr, k)) or self.slot(shape, instr.name)
            env[(instr, k)] = ref
            outs.append(ref)
        branches = an.branches[instr]
        sel_shape = instr.operand(0).shape
        assert isinstance(sel_shape, ArrayShape)
        sel = env[an.srcs[instr.operand(0)][0]]
        self.arena.touch(sel, *outs)
        sel_value = f"*(const {cexpr.ctype(sel_shape.dtype)} *){sel.expr}"
        bodies = []
        for i, b in enumerate(branches):
            params = [env[s] for s in an.srcs[instr.operand(1 + i)]]
            bodies.append((b, params))
        if "branch_computations" not in instr.attrs:
            self.emit(f"if ({sel_value}) {{  " + comment(instr.name, ": true branch"))
            self._branch(*bodies[0], outs)
            self.emit("} else {  " + comment(instr.name, ": false branch"))
            self._branch(*bodies[1], outs)
            self.emit("}")
            return
        n = len(bodies)
        var = self.fresh("hf_i")
        self.emit("{  " + comment(instr.name, f": {n} branches"))
        self._depth += 1
        self.emit(f"int64_t {var} = (int64_t){sel_value};")
        self.emit(f"switch ({var} >= 0 && {var} < {n} ? {var} : {n - 1}) {{")
        for i, (b, params) in enumerate(bodies):
            self.emit(f"case {i}: {{  " + comment(b.comp.name))
            self._branch(b, params, outs)
            self.emit("  break;")
            self.emit("}")
        self.emit("}")
        self._depth -= 1
        self.emit("}")

    def _branch(self, an: CompAnalysis, params: list[Ref], outs: list[Ref]) -> None:
        self._depth += 1
        self.emit_computation(an, params, list(outs))
        self._depth -= 1

    def emit_while(self, an: CompAnalysis, instr: Instruction, env: dict[Src, Ref],
                   direct: dict[Src, Ref]) -> None:
        """The loop over carried leaf pointers (see buffers.LoopPlan). A leaf with a destination
        (e.g. `results[j]`) uses it as one of its two buffers, so at the end it is either
        already there or copied once."""
        plan = an.loops[instr]
        init = [env[s] for s in an.operand_srcs(instr)]
        shapes = leaves(instr.shape)
        w = self.fresh("hf_w")
        self.emit(comment(instr.name, ": while ", plan.cond.comp.name, " do ",
                          plan.body.comp.name, "; carried leaves: ",
                          ", ".join(plan.kinds) or "none"))
        cur: list[Ref] = []
        spare: dict[int, tuple[Ref, Ref, Ref]] = {}  # leaf -> (spare var, A, B)
        for k, kind in enumerate(plan.kinds):
            if kind == "pass":
                cur.append(init[k])
                continue
            dest = direct.get((instr, k))
            label = f"{instr.name} leaf {k}"
            if plan.reuse_init[k]:
                a = init[k]
            else:
                a = dest or self.slot(shapes[k], label)
                dest = None if a is dest else dest
            if plan.copy_init[k]:
                self.memcpy(a, init[k], shapes[k], f"{label}: owned copy of init")
            if kind == "inplace":
                cur.append(a)
                continue
            b = dest or self.slot(shapes[k], f"{label} (second)")
            owned = plan.reuse_init[k] or plan.copy_init[k]
            first, sp = (a, b) if owned else (init[k], a)
            var = f"{w}_{k}"
            self.emit(f"void *{var} = {first.expr}, *{var}s = {sp.expr};")
            slots = a.slots + b.slots + (() if owned else init[k].slots)
            cur.append(Ref(var, slots))
            spare[k] = (Ref(f"{var}s", a.slots + b.slots), a, b)
        self.arena.touch(*init, *cur)
        self.arena.open_loop()
        self.emit("for (;;) {  " + comment(instr.name))
        self._depth += 1
        self.emit(POLL)
        pred = self.emit_computation(plan.cond, cur)[0]
        self.emit(f"if (!*(const uint8_t *){pred.expr}) break;")
        self.arena.touch(pred)
        dests: list[Ref | None] = [spare[k][0] if k in spare else None
                                   for k in range(len(plan.kinds))]
        roots = self.emit_computation(plan.body, cur, dests)
        for k, kind in enumerate(plan.kinds):
            if kind != "swap" and roots[k].expr != cur[k].expr:
                raise AssertionError(f"{instr.name} leaf {k} ({kind}) left its buffer")
        for k, (sp, a, b) in spare.items():
            var = cur[k].expr
            self.emit(f"{var} = {sp.expr}; {sp.expr} = {var} == {a.expr} ? {b.expr} : {a.expr};")
        self.arena.touch(*cur, *(s[0] for s in spare.values()))
        self._depth -= 1
        self.emit("}")
        self.arena.close_loop()
        out = dict(enumerate(cur))
        for k in spare:
            dest = direct.get((instr, k))
            if dest is not None:  # the final state is in `dest` or in the other buffer
                self.arena.touch(dest, cur[k])
                self.emit(f"if ({cur[k].expr} != {dest.expr}) memcpy({dest.expr}, "
                          f"{cur[k].expr}, {shapes[k].nbytes});  "
                          + comment(instr.name, f" leaf {k}"))
                out[k] = dest
        for k, s in enumerate(an.srcs[instr]):
            if s[0] is instr:
                env[s] = out[k]


def _can_write_dest(instr: Instruction) -> bool:
    """Can `instr`'s output be placed in a buffer chosen by the caller?"""
    op = instr.opcode
    if op in (Opcode.CONDITIONAL, Opcode.CALL, Opcode.WHILE):
        return True
    return is_kernel(instr) and not is_alias(instr)


def _flat_literal(value: object) -> list[object]:
    if isinstance(value, tuple):
        out: list[object] = []
        for v in value:
            out.extend(_flat_literal(v))
        return out
    return [value]
