"""C names for kernels and their locals, derived by the code from what they compute.

    kernel names   a stem from what the kernel computes (fused_multiply_add_select,
                   reduce_add, dot: `kernel_stem`) and 8 hex digits of its identity, the digest
                   of its optimised IR (`identity.digest`): fused_multiply_add_select_1f0c9a2e
                   (`kernel_name`), so the same kernel has the same name in every program
    file names     what a kernel's printing adds at file scope (constant tables, library
                   helpers): `Namespace(kernel name)` prefixes each, `NAME_c0`, `NAME_sort_rows`
    local names    acc0, i0, acc0p (the IR's, hints) -> C names unique per kernel function
                   (`KernelNames`: acc0p, acc0p_2 for a second buffer the passes named alike)

No name is made from input text: HLO instruction, computation and module names are hostile
input (docs/security.md), and even a sanitised one could be a macro of the prelude's headers
(`unix`, `linux`, `EOF`, `I`). Bases come from the opcode table (`op_word`), fixed prefixes and
counters. Conditions enforced: `fresh` accepts only a base that already is a plain identifier
(an HLO name such as `mul.3` is refused loudly, so a call site that passes one is found by any
test); every name is not a C keyword, not a libc/libm function (a kernel named `abs` or
`select` would clash with a declaration in the prelude's headers), does not start with `hf_`
(the prelude's namespace) and is unique in its name space (`used` sets record what is taken).
"""

from __future__ import annotations

import re
from collections import Counter

from hlofuse.backends.kernel_ir.ir import Buffer, Var
from hlofuse.errors import CompileError
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode

_RESERVED_TEXT = (
    "auto break case char const continue default do double else enum extern float for goto if "
    "inline int long register restrict return short signed sizeof static struct switch "
    "typedef union unsigned void volatile while _Bool _Complex bool true false NULL abs labs "
    "fabs fabsf sqrt sqrtf exp expf log logf sin sinf cos cosf tan tanf tanh tanhf pow powf "
    "floor floorf ceil ceilf round roundf rint rintf trunc fmod fmodf remainder cbrt erf erff "
    "log1p expm1 atan2 atan2f fmax fmin fmaxf fminf copysign nan isnan isinf isfinite signbit "
    "select sort qsort memcpy memset memmove malloc calloc free realloc exit abort printf div "
    "ldiv gamma j0 j1 y0 y1 index rand random time clock main errno int8_t int16_t int32_t "
    "int64_t uint8_t uint16_t uint32_t uint64_t size_t "
)
_C_RESERVED = frozenset(_RESERVED_TEXT.split())

_OPCODE_SHORT = {
    "exponential": "exp",
    "exponential-minus-one": "expm1",
    "log-plus-one": "log1p",
    "sine": "sin",
    "cosine": "cos",
    "dynamic-slice": "dynamic_slice",
    "dynamic-update-slice": "dynamic_update_slice",
}
# Ops that say little about what a fusion computes (left out of fusion names).
_PLUMBING = frozenset(
    {
        Opcode.PARAMETER,
        Opcode.CONSTANT,
        Opcode.TUPLE,
        Opcode.GET_TUPLE_ELEMENT,
        Opcode.BROADCAST,
        Opcode.RESHAPE,
        Opcode.BITCAST,
        Opcode.COPY,
    }
)


_BASE = re.compile(r"[a-z][a-z0-9_]{0,63}")


class Namespace(set[str]):
    """The file-scope names one kernel's printing takes: `fresh` makes each `PREFIX_base` (the
    prefix is the kernel's name, unique in its file), unique among themselves."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix


def fresh(base: str, used: set[str], clash_suffix: str = "") -> str:
    """A unique identifier for `base`, recorded in `used` (`base`, then `base_2`, ...); in a
    `Namespace`, `PREFIX_base`. A name that clashes with C/libc gets `clash_suffix` (or a `v_`
    prefix without one). `base` must be made by the code (lower-case letters, digits, `_`):
    never an HLO name."""
    if not _BASE.fullmatch(base):
        raise AssertionError(f"C name base {base!r} is not made by the code (naming.fresh)")
    name = base
    if isinstance(used, Namespace):
        name = f"{used.prefix}_{base}"
    elif name in _C_RESERVED or name.startswith("hf_") or re.fullmatch(r"(in|out)\d+", name):
        name = name + clash_suffix if clash_suffix else "v_" + name
    candidate = name
    n = 2
    while candidate in used:
        candidate = f"{name}_{n}"
        n += 1
    used.add(candidate)
    return candidate


class KernelNames:
    """One kernel function's namespace of C identifiers. Parameters keep the contract's names
    (`in0`, `out1`); a local takes its IR name, made free (`_2`, `_3`, ...) and kept off the
    printer's own patterns (`v<N>` values, `p<N>` scalar-function parameters, `hf_*`, `in<N>` /
    `out<N>`) and C keywords and the library functions generated code calls (`k_` prefix); a
    loop variable likewise, except that one name serves sibling loops (`for (int64_t i0 ...)`
    twice in a row) but never a loop inside a loop of that name, and one `Var` keeps one name."""

    def __init__(self) -> None:
        self.taken: set[str] = set()
        self.vars: dict[Var, str] = {}
        self.loop_names: set[str] = set()  # given to loop variables (siblings may share one)

    def param(self, b: Buffer) -> str:
        name = f"{'in' if b.kind == 'in' else 'out'}{b.index}"
        if name in self.taken:
            raise CompileError(f"kernel parameter {name} twice")  # (a lowering bug)
        self.taken.add(name)
        return name

    def local(self, hint: str) -> str:
        return self._fresh(_local_base(hint))

    def bind(self, v: Var, enclosing: list[str]) -> str:
        name = self.vars.get(v)
        if name is not None:
            if name in enclosing:
                raise CompileError(f"loop variable {name} bound by two nested loops")
            return name
        base = _local_base(v.name)
        if base in self.loop_names and base not in enclosing:
            name = base  # a sibling loop's variable had it: free here
        else:
            name = self._fresh(base)
            self.loop_names.add(name)
        self.vars[v] = name
        return name

    def _fresh(self, base: str) -> str:
        name, n = base, 2
        while name in self.taken:
            name = f"{base}_{n}"
            n += 1
        self.taken.add(name)
        return name


# libm's Bessel functions: generated code never calls them, so a local may shadow them (the
# lowering's loop variables are j0, j1, ...).
_NEVER_CALLED = frozenset({"j0", "j1", "y0", "y1"})


def _local_base(hint: str) -> str:
    """An IR name as the base of a kernel-local C name."""
    if not _BASE.fullmatch(hint):
        return "k_" + re.sub(r"[^a-z0-9_]", "_", hint.lower())[:56]
    if (hint in _C_RESERVED and hint not in _NEVER_CALLED) or hint.startswith("hf_") or \
            re.fullmatch(r"(in|out|v|p)\d+", hint):
        return "k_" + hint
    return hint


def op_word(opcode: Opcode) -> str:
    """The base of C names for values of `opcode` (`multiply`, `exp`): never an HLO name."""
    return _OPCODE_SHORT.get(opcode.value, opcode.value).replace("-", "_")


def _reducer_word(instr: Instruction) -> str:
    comp = instr.attrs.get("to_apply")
    if comp is None:
        return ""
    root = comp.root
    if root.opcode is Opcode.TUPLE:
        return "variadic"
    return op_word(root.opcode)


def kernel_base_name(instr: Instruction) -> str:
    """A readable name for the kernel computing `instr` (not yet made unique)."""
    if instr.opcode is not Opcode.FUSION:
        word = op_word(instr.opcode)
        if instr.opcode in (Opcode.REDUCE, Opcode.REDUCE_WINDOW, Opcode.SCATTER):
            red = _reducer_word(instr)
            return f"{word}_{red}" if red else word
        return word
    comp = instr.fused_computation
    root = comp.root
    roots = list(root.operands) if root.opcode is Opcode.TUPLE else [root]
    words: list[str] = []
    for r in roots:
        if r.opcode in _PLUMBING:
            continue
        w = op_word(r.opcode)
        if r.opcode is Opcode.REDUCE:
            red = _reducer_word(r)
            w = f"reduce_{red}" if red else w
        if w not in words:
            words.append(w)
    counts = Counter(
        op_word(i.opcode) for i in comp.instructions if i.opcode not in _PLUMBING
    )
    for w, _ in counts.most_common():
        if len(words) >= 3:
            break
        if w not in words:
            words.append(w)
    return "fused_" + "_".join(words[:3]) if words else "fused_copy"


def kernel_stem(instr: Instruction) -> str:
    """The readable part of the name of the kernel computing `instr` (kept off C's names)."""
    return fresh(kernel_base_name(instr), set(), clash_suffix="_op")


def kernel_name(stem: str, digest: str, used: set[str]) -> str:
    """`STEM_DIGEST8`, the name of the kernel whose identity is `digest` (more of the digest
    where another kernel with another digest took the name), recorded in `used`."""
    n = 8
    name = f"{stem}_{digest[:n]}"
    while name in used:
        n += 1
        if n > len(digest):
            raise CompileError(f"kernel name {name} taken twice (one digest lowered twice)")
        name = f"{stem}_{digest[:n]}"
    used.add(name)
    return name
