"""A large program as translation units, and compiling them while the program is generated.

    units(program)          kernel units (the prelude, then kernels in groups of about
                            UNIT_BYTES of C, in the order they were lowered, cut where the
                            kernels' content says: `_Groups`), then the driver's unit (the
                            prelude, the kernels' prototypes, hf_entry, constants)
    Stream(head, early)     the same kernel groups, handed to `early` (build.compile_early)
                            one by one during `driver.generate`: each as it fills up, the
                            last when the schedule is done (before the driver is printed)

Why: the C compiler's time is most of a large program's cold compile (gpt-8: 84 kernel functions,
about 1.4 s of compiler CPU), and the kernels are lowered one by one (about 0.3 s of Python
for gpt-8). A group whose kernels are all lowered compiles on another core while Python
lowers the next ones; `build.load_units` then finds its object cached, or waits for it.

Conditions enforced:
- The grouping is a function of the kernels' sources and order alone, so `Stream` and `units`
  cut the same groups into the same texts (the same object keys), and a group's object is
  reused wherever the same kernels meet.
- A program whose kernels print to at most UNIT_BYTES of C is one file (`units` is None); a
  group is handed to `early` only when the next kernel arrives and the group ends there
  (`_Groups`: never while the kernels so far fit in UNIT_BYTES), or when all of them together
  exceed UNIT_BYTES, so only for a program that `units` cuts. A kernel not printed
  by cprint (no `HF_KERNEL [attributes] void NAME(` line) makes the program one file, and stops the
  stream.
- Kernel functions are hidden globals in kernel units (`HF_KERNEL`), static in the single file;
  the prelude's state (scratch failures, the pool pointer, the BLAS and LAPACK pointers) is
  defined by the driver's unit alone (`HF_EXTERN_STATE` in kernel units).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable

from hlofuse.backends.cpu.contract import Kernel, Program

# A program whose kernels print to more C than this is built as several translation units,
# compiled in parallel and each cached on its own (`build.load_units`); below it one file
# compiles faster than several (each unit parses the prelude again and starts a compiler).
UNIT_BYTES = 64 * 1024
# One kernel in this many (by a hash of its C) ends a unit, once the unit holds UNIT_BYTES / 2
# (`_Groups`): units hold UNIT_BYTES / 2 to 2 * UNIT_BYTES of kernels (gpt-8: 4 kernel units).
CUT_ONE_IN = 4

# The driver's unit (hf_entry: a call per kernel site, loops over them, the constants) is
# compiled at -O1: its time is in the kernels it calls, and -O3's instruction scheduling of a
# function of a thousand calls is most of its compile (gpt-16: 0.71 s at -O3, 0.34 s at -O1;
# gpt-8: 0.30 vs 0.14 s), on the critical path after the last kernel is printed.
DRIVER_FLAGS: tuple[str, ...] = ("-O1",)

# The kernels compile at -O2 with -O3's vectorizer cost model: their loops are explicit vector
# code already (kernel_ir/passes/vectorize.py), and what -O3 adds beyond that is a third of
# their compile time (gpt-8's kernel units: 1.03 -> 0.71 s of compiler CPU) for no measured
# run time (benchmarks/README.md, "Compile time"). Runtime, GEMM and other library code keep
# the build's level (-O3).
KERNEL_FLAGS: tuple[str, ...] = ("-O2", "-fvect-cost-model=dynamic")

# GCC 12.2's loop vectorizer miscompiles a guarded load that tree if-conversion turns into a
# masked load (`vpmaskmovd`) when the loop is vectorized with -fvect-cost-model=dynamic on
# AVX2: the masked load of a reduce-window tap `if (i1 + w0 - 1 >= 0) in0[... + 4*w0 - 4]`
# read the unshifted address, so cumsum over a padded window added x[1] twice (fuzz 20k run,
# seed 2812 module 010: `-O2 -fvect-cost-model=dynamic -march=haswell` wrong, without the
# cost model, -O3, -mno-avx2 or -fno-tree-loop-if-convert right). Only the kernels that load
# under a condition (`kernel_ir.query.guarded_load`) are compiled without tree if-conversion,
# by the function attribute `HF_NO_IFCONV` (cprelude.py): with the flag on every kernel,
# evosax's Open-ES ran 1.7x slower (24.6 vs 13.7 ms under `xla`, measured A/B in one run).
KERNEL_WORKAROUNDS: tuple[str, ...] = ()


def kernel_flags() -> tuple[str, ...]:
    """KERNEL_FLAGS (only KERNEL_WORKAROUNDS where HLOFUSE_CC_OPT sets the level of all
    generated code)."""
    from hlofuse import env

    return KERNEL_WORKAROUNDS if env.cc_opt() else (*KERNEL_FLAGS, *KERNEL_WORKAROUNDS)

_SIGNATURE = re.compile(r"^HF_KERNEL (?:HF_\w+ )*void (\w+)\(.*$", re.MULTILINE)
_LIBRARY_GUARD = re.compile(r"^#ifndef (HFLIB_\w+)$", re.MULTILINE)
_UNIT_DEFINES = "#define HF_KERNEL HF_HIDDEN\n"
_KERNEL_UNIT_DEFINES = "#define HF_EXTERN_STATE\n"  # the driver's unit defines the state


class _Groups:
    """Kernel sources in order, cut into groups of about `limit` bytes. A kernel's size is its
    own code, plus the include-guarded library code it carries (`HFLIB_*` blocks) when its
    group does not have that yet. `full(group)` is called for each group as the next kernel
    arrives and the group ends.

    Where a group ends is chosen by content, as in content-defined chunking (rsync, backup
    tools): after a kernel whose text hashes to a cut point (`CUT_ONE_IN`), once the group
    holds half of `limit`; at twice `limit` in any case; never while the program's kernels so
    far fit in `limit` (a program that small stays one file). Kernels print the same C in
    every program (named by their kernel IR's identity: `naming.kernel_name`), so two
    programs that share a run of kernels, in another order or among other kernels, cut it
    into the same units from the first cut point in it on, and the second finds the first
    one's objects in the cache."""

    def __init__(self, limit: int, full: Callable[[list[str]], None] | None = None) -> None:
        self.limit = limit
        self.full = full
        self.groups: list[list[str]] = [[]]
        self._size = 0
        self.total = 0  # bytes of every kernel added
        self._cut_after = False  # the last kernel is a cut point
        self._seen: set[tuple[str, ...]] = set()

    def add(self, source: str) -> None:
        libs = (tuple(sorted(set(_LIBRARY_GUARD.findall(source))))
                if "#ifndef HFLIB_" in source else ())
        own = len(source) - source.rfind("#endif\n")
        cost = own if libs in self._seen else len(source)
        self.total += len(source)
        if self._size and (self._size + cost > 2 * self.limit or (
                self._cut_after and self._size >= self.limit // 2
                and self.total > self.limit)):
            if self.full is not None:
                self.full(self.groups[-1])
            self.groups.append([])
            self._size = 0
            self._seen = set()
            cost = len(source)
        self.groups[-1].append(source)
        self._seen.add(libs)
        self._size += cost
        self._cut_after = zlib.crc32(source.encode()) % CUT_ONE_IN == 0


def _kernel_unit(head: str, group: list[str]) -> str:
    return (_KERNEL_UNIT_DEFINES + _UNIT_DEFINES + head
            + "".join(src.strip("\n") + "\n\n" for src in group))


def _prototype(k: Kernel) -> str | None:
    """`HF_KERNEL [HF_ attribute macros] void NAME(...);` (the kernel's signature line, its
    attributes such as `HF_NO_IFCONV` included), or None for a kernel cprint did not print."""
    for found in _SIGNATURE.finditer(k.source):
        if found.group(1) == k.name:
            return found.group(0) + ";"
    return None


def units(program: Program, unit_bytes: int | None = None) -> list[str] | None:
    """The program as translation units to compile separately and link into one library:
    the kernel units, then the driver's. None: one file (`program.source`) it is (a small
    program, one with a kernel cprint did not print, or one not made by `driver.generate`)."""
    limit = UNIT_BYTES if unit_bytes is None else unit_bytes
    head_end, tail_start = program.split
    if not 0 < head_end <= tail_start <= len(program.source):
        return None
    printed = [k for k in program.kernels if k.source]
    if sum(len(k.source) for k in printed) <= limit:
        return None
    protos = [_prototype(k) for k in printed]
    if None in protos:
        return None  # not a kernel printed by cprint: keep the single file
    head = program.source[:head_end]
    groups = _Groups(limit)
    for k in printed:
        groups.add(k.source)
    out = [_kernel_unit(head, g) for g in groups.groups]
    declarations = ""
    if any("HFLIB_BLAS_DECLS" in k.source for k in printed):
        from hlofuse.backends.cpu.library.blas import DECLARATIONS as declarations
    if any("HFLIB_LAPACK_USED" in k.source for k in printed):
        from hlofuse.backends.cpu.library import lapack

        declarations += lapack.declarations()
    out.append(_UNIT_DEFINES + head + declarations
               + "\n".join(p for p in protos if p) + "\n\n" + program.source[tail_start:])
    return out


class Stream:
    """Kernel units handed to `early(unit)` while the program is still being generated: `add`
    each printed kernel in order; a group is handed over once the next kernel overflows it,
    the last one by `finish` (when every kernel is printed, before the driver is). `head` is
    the program's `source[:split[0]]`."""

    def __init__(self, head: str, early: Callable[[str], None]) -> None:
        self._head = head
        self._early: Callable[[str], None] | None = early
        self._groups = _Groups(UNIT_BYTES, self._hand_over)

    def add(self, k: Kernel) -> None:
        if self._early is None or not k.source:
            return
        if _prototype(k) is None:
            self._early = None  # this program stays one file: nothing to compile early
            return
        self._groups.add(k.source)

    def finish(self) -> None:
        if self._groups.total > self._groups.limit and self._groups.groups[-1]:  # `units` cuts it
            self._hand_over(self._groups.groups[-1])

    def _hand_over(self, group: list[str]) -> None:
        if self._early is not None:
            self._early(_kernel_unit(self._head, group))
