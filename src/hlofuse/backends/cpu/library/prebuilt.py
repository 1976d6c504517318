"""Library code compiled once per machine: the GEMMs as objects of their own, linked into
every program that has a dot.

    kernel C:   declarations(suffix)   the entry points' prototypes (guarded: HFLIB_PREBUILT_<S>)
    objects:    unit(suffix)           the GEMM (and, for f32/f64, the BLAS task driver) as a
                                       translation unit whose entry points are hidden globals
    build.py:   units_for(source)      the units a source needs, by the guards it contains
    cpu.warm:   suffixes_of(module)    the units a module's dots will need, compiled early

The GEMM is the largest code in a program with a dot: about 0.55 s of `-O3` per element type,
which every program paid again (a 2-layer GPT step's dots were 1.0 of its 1.8 s of C
compilation). As a unit of its own, its object is a cache entry keyed by its text, the
compiler, the flags and the CPU (`build.object_key`) like any unit of a split build: compiled
by the first program that needs it, linked from the cache by every later one.

Conditions enforced:
- A unit's text depends on nothing but the element type (and the compile flags through the
  preprocessor: the vector width is `__AVX512F__`'s): every program shares it.
- It is compiled as a kernel unit (`HF_EXTERN_STATE`): the prelude's state (the pool pointer,
  the scratch-failure record, the BLAS pointers) is the program's, so the GEMM runs on the
  program's pool and its failed allocations reach the program's `hf_entry`.
- A kernel that declares an f32/f64 GEMM also includes `blas.DECLARATIONS`, so the BLAS
  pointers the unit refers to are always defined by the program.
"""

from __future__ import annotations

import functools
import re

from hlofuse.backends.cpu.library import blas, gemm, gemm_outer
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape

SUFFIXES = ("f32", "f64", "u32", "u64")
_GUARD = re.compile(r"^#ifndef HFLIB_PREBUILT_(\w+)$", re.MULTILINE)
_CTYPE = {"f32": "float", "f64": "double", "u32": "uint32_t", "u64": "uint64_t"}


def declarations(suffix: str) -> str:
    """File-scope C a kernel includes to call `hflib_gemm_<suffix>` (and, for f32/f64,
    `hflib_blas_<suffix>` and the BLAS pointers) from the prebuilt unit."""
    t = _CTYPE[suffix]
    out = [f"\n#ifndef HFLIB_PREBUILT_{suffix}\n#define HFLIB_PREBUILT_{suffix}\n",
           f"HF_HIDDEN void hflib_gemm_{suffix}(int64_t batch, int64_t M, int64_t N, int64_t K, "
           f"const {t} *a, int64_t sab, int64_t sam, int64_t sak, const {t} *b, int64_t sbb, "
           f"int64_t sbk, int64_t sbn, {t} *c, int threads);\n",
           f"HF_HIDDEN int64_t hflib_gemm_scratch_{suffix}(int64_t n, int64_t K);\n",
           f"HF_HIDDEN void hflib_gemm_one_{suffix}(int64_t m, int64_t n, int64_t K, "
           f"const {t} *a, int64_t sam, int64_t sak, const {t} *b, int64_t sbk, int64_t sbn, "
           f"{t} *c, int64_t ldc, int accumulate, {t} *scratch);\n"]
    if suffix in ("f32", "f64"):
        out.append(f"HF_HIDDEN void hflib_blas_{suffix}(int ta, int tb, int64_t batch, "
                   f"int64_t M, int64_t N, int64_t K, const {t} *a, int64_t sab, int64_t sam, "
                   f"int lda, const {t} *b, int64_t sbb, int64_t sbn, int ldb, {t} *c, "
                   "int threads);\n")
        for form in ("outer", "rows"):
            out.append(f"HF_HIDDEN void hflib_gemm_{form}_{suffix}(int64_t M, int64_t N, "
                       f"int64_t K, const {t} *a, int64_t sam, int64_t sak, const {t} *b, "
                       f"int64_t sbk, int64_t sbn, {t} *c, int threads);\n")
    out.append("#endif\n")
    text = "".join(out)
    return text + blas.DECLARATIONS if suffix in ("f32", "f64") else text


@functools.lru_cache(maxsize=len(SUFFIXES))
def unit(suffix: str) -> str:
    """The translation unit defining `hflib_gemm_<suffix>` (and `hflib_blas_<suffix>`); made
    once per process (every load of a program with a dot asks for it)."""
    from hlofuse.backends.cpu import cexpr

    parts = ["#define HF_EXTERN_STATE\n#define HF_KERNEL HF_HIDDEN\n", cexpr.prelude(),
             "#define HFLIB_ENTRY HF_HIDDEN\n", gemm.gemm_helper(suffix)]
    if suffix in ("f32", "f64"):
        parts.append(blas.declarations(suffix, gemm.PARALLEL_WORK))
        parts.append(gemm_outer.helper(suffix, gemm.PARALLEL_WORK))
    return "".join(parts)


def suffixes_of(module: Module) -> list[str]:
    """The prebuilt units a module's dots and float convolutions (in any computation) will
    call, by the accumulator the GEMM emitters choose (`gemm._accumulator`): f64 where a float
    result or operand is 64-bit, else f32; integer dots u64 or u32 by their result's width.
    Complex ones call none."""
    found: set[str] = set()
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.opcode not in (Opcode.DOT, Opcode.CONVOLUTION):
                continue
            out = instr.shape
            if not isinstance(out, ArrayShape):
                continue
            kinds = [out.dtype, *(o.shape.dtype for o in instr.operands
                                  if isinstance(o.shape, ArrayShape))]
            if any(d.is_complex for d in kinds):
                continue
            floats = [d for d in kinds if d.is_float]
            if floats:
                found.add("f64" if any(d.bits == 64 for d in floats) else "f32")
            elif instr.opcode is Opcode.DOT:
                found.add("u64" if out.dtype.bits == 64 else "u32")
    return sorted(found)


def units_for(source: str) -> list[str]:
    """The prebuilt units `source` calls into (by the guards of its declarations)."""
    if "HFLIB_PREBUILT_" not in source:
        return []
    return [unit(s) for s in sorted(set(_GUARD.findall(source))) if s in _CTYPE]
