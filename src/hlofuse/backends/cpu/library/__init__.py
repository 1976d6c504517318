"""Library ops of the CPU backend: ops that are not index maps or reductions, lowered to C
helper functions and a call.

    emit(op, ins, outs, names, threads) -> (definitions, statements)

`op` is the library call's `kernel_ir.libop.LibOp` (plain data: no HLO; its comparators and
select/scatter functions already lowered to `ir.Func`s, printed here by `scalar.py`). `ins` /
`outs` are C pointer expressions (storage types of `cexpr.ctype`) for the operand leaves
and result leaves, row-major and contiguous. `definitions` are file-scope C (helper functions;
shared ones such as the GEMM kernels are wrapped in include guards, so they may appear more than
once in a file; per-instruction ones are named uniquely through `names`); `statements` compute the
op and may be placed in any block of a kernel body that is not inside a parallel loop. Large dots,
convolutions and sorts cut themselves into tasks run on up to `threads` threads of the runtime's
pool (`hf_parallel_ptr`; scratch is allocated before the tasks start, one slot per running task,
`hf_slot_claim`). Each op matches the interpreter's handler:

    dot                 gemm.py      blocked GEMM, canonical [batch, M, K] x [batch, K, N]
    convolution         conv.py      floats: im2col + GEMM (conv_gemm), grouped (conv_grouped),
                                     per output phase (conv_phases), float accumulation;
                                     integers: direct loop nest
    sort, topk          sort.py      stable merge sort of offsets, then a gather
    rng-bit-generator   rng.py       Threefry-2x32 / Philox-4x32, bit for bit
    select-and-scatter  windows.py   sequential select, then scatter in source order
    cholesky,           lapack_calls.py  LAPACK (lapack.py: the scipy-openblas32 wheel's, through
    triangular-solve,   (+ lapack_eigen) function pointers), each matrix of the batch transposed
    jax's LAPACK                     to column-major scratch and back; a C fallback for
    custom calls                     potrf/trsm when LAPACK is missing

Anything else raises `LibraryOpError` (a CompileError) naming the instruction (`LibOp.label`,
`where`: input text, for messages only); a library op on complex, sub-byte integer or 8-/4-bit
float values raises `UnsupportedOpError`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from hlofuse.backends.cpu.library.errors import LibraryOpError
from hlofuse.backends.kernel_ir.libop import LibOp
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import leaves

Emitter = Callable[[LibOp, list[str], list[str], set[str]], tuple[str, str]]
ThreadedEmitter = Callable[[LibOp, list[str], list[str], set[str], int], tuple[str, str]]

# opcode -> (module of this package, its emitter, whether it takes `threads`); a module is
# imported when its op is first emitted, so loading a cached program (which only needs
# `blas`, `lapack` and `prebuilt` from this package) does not import the code generators
_EMITTERS: dict[Opcode, tuple[str, str, bool]] = {
    Opcode.DOT: ("gemm", "emit_dot", True),
    Opcode.CONVOLUTION: ("conv", "emit_convolution", True),
    Opcode.SORT: ("sort", "emit_sort", True),
    Opcode.TOPK: ("sort", "emit_topk", True),
    Opcode.RNG_BIT_GENERATOR: ("rng", "emit_rng_bit_generator", False),
    Opcode.SELECT_AND_SCATTER: ("windows", "emit_select_and_scatter", False),
    Opcode.CHOLESKY: ("lapack_calls", "emit_cholesky", True),
    Opcode.TRIANGULAR_SOLVE: ("lapack_calls", "emit_triangular_solve", True),
    Opcode.CUSTOM_CALL: ("lapack_calls", "emit_custom_call", True),
}

SUPPORTED: frozenset[Opcode] = frozenset(_EMITTERS)

__all__ = ["SUPPORTED", "LibraryOpError", "emit"]


def emit(
    op: LibOp, ins: list[str], outs: list[str], names: set[str], threads: int = 1
) -> tuple[str, str]:
    """(C definitions, C statements) computing the library op `op` from `ins` into `outs`,
    on up to `threads` threads of the runtime's pool where the op has a parallel form."""
    from hlofuse.backends.cpu.cexpr import UnsupportedOpError

    entry = _EMITTERS.get(op.opcode)
    if entry is None:
        raise LibraryOpError(op, "not a library op the cpu backend implements")
    module, function, takes_threads = entry
    emitter = getattr(importlib.import_module(f"{__name__}.{module}"), function)
    if takes_threads:
        return emitter(op, ins, outs, names, max(1, threads))
    for shape in [*leaves(op.shape), *(s for o in op.operands for s in leaves(o))]:
        dt = getattr(shape, "dtype", None)
        if dt is not None and (dt.is_complex or dt.is_narrow_int or dt.is_small_float):
            raise UnsupportedOpError(
                f"{op.site}: the cpu backend's {op.opcode.value} "
                f"does not support element type {dt} (complex, sub-byte and 8-/4-bit float "
                "library ops are not implemented); the interpreter backend runs it")
    return emitter(op, ins, outs, names)
