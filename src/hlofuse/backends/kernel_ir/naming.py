"""C names for kernels and their locals, derived from what they compute.

    kernel names   fused_multiply_add_select, reduce_add, dot, dot_2 (unique per Program)
    local names    mul_56 (from HLO mul.56), i0, acc_sum ...     (unique per kernel)

Conditions enforced: every name is a valid C identifier that is not a C keyword, not a libc/libm
function (a kernel named `abs` or `select` would clash with a declaration in the prelude's
headers), does not start with `hf_` (the prelude's namespace) and is unique in its name space
(`used` sets record what is taken).
"""

from __future__ import annotations

import re
from collections import Counter

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


def identifier(text: str) -> str:
    """`text` as a C identifier (non-alphanumerics become `_`; never starts with a digit)."""
    out = re.sub(r"[^0-9A-Za-z_]", "_", text).strip("_")
    out = re.sub(r"_+", "_", out)
    if not out:
        out = "v"
    if out[0].isdigit():
        out = "v_" + out
    return out


def fresh(base: str, used: set[str], clash_suffix: str = "") -> str:
    """A unique identifier for `base`, recorded in `used` (`base`, then `base_2`, ...). A name
    that clashes with C/libc gets `clash_suffix` (or a `v_` prefix without one)."""
    name = identifier(base)
    if name in _C_RESERVED or name.startswith("hf_") or re.fullmatch(r"(in|out)\d+", name):
        name = name + clash_suffix if clash_suffix else "v_" + name
    candidate = name
    n = 2
    while candidate in used:
        candidate = f"{name}_{n}"
        n += 1
    used.add(candidate)
    return candidate


def op_word(opcode: Opcode) -> str:
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


def kernel_name(instr: Instruction, used: set[str]) -> str:
    return fresh(kernel_base_name(instr), used, clash_suffix="_op")
