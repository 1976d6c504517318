"""The data the CPU backend's pieces hand each other.

    lower (one HLO kernel) ──Kernel──▶ driver (entry computation) ──Program──▶ build, executable

A `Kernel` is one C function computing one kernel (a fusion, or an unfused op that does work).
Its C signature is fixed so the driver can call any kernel without knowing what it does:

    HF_KERNEL void NAME(const T0 *in0, ..., const Tn *inN, U0 *out0, ..., Um *outM)

(`HF_KERNEL`: `static` in the single file, a hidden global when the program is built as
several translation units, `units.units`). Inputs first (the operands' array leaves, tuple
operands flattened depth-first), then outputs (the result's array leaves); `T`/`U` are the
storage types of `cexpr.ctype`. Rank-0 arrays are pointers
to one element. Buffers never alias, except an output and the input that `inplace` pairs it with:
the kernel must be correct both when they are the same buffer and when they are not.

A `Program` is one complete C file: every kernel, then the native driver

    int hf_entry(void *const *args, void *const *results);   /* 0 on success */

(1: the work arena could not be allocated, 2: stopped by SIGINT, 3: a kernel could not allocate
scratch memory, `int hf_failure(int64_t info[2])` then gives the kernel index and the bytes),
which runs the entry computation, while loops, conditionals and calls included, with no Python
between kernels. `args` are the entry parameters' array leaves, `results` the root's array leaves,
both caller-allocated, C-contiguous, row-major. Compiled with `-DHF_PROFILE`, the file also defines
`uint64_t hf_prof_ns[]` and `uint64_t hf_prof_calls[]`, indexed like `Program.kernels`. The
exported `const int *hf_stop_ptr` is pointed by the executable at the process's SIGINT counter
(`runtime.py`); `hf_entry` stops at the next while-loop iteration after it changes.

A program with host callbacks (`Program.host_sites`, `backends/host_callbacks.py`) takes one
more `args` slot after the parameter leaves: the address of

    int host(int64_t site, void *const *ins, void *const *outs);   /* 0 on success */

which the driver calls at each callback site with the site's number (an index into
`host_sites`), its array operands and the buffers its array results go to; a non-zero return
stops the run with status 4. The pointer comes with every call (the executable's ctypes
trampoline), never compiled in: the library stays shareable and cacheable.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlofuse.backends.driver_ir.kernel import HostSite, Kernel
from hlofuse.ir.shape import ArrayShape

__all__ = ["ENTRY_SYMBOL", "HostSite", "Kernel", "Program"]

ENTRY_SYMBOL = "hf_entry"


@dataclass(frozen=True)
class Program:
    """A whole module as one C file with the native driver `hf_entry`."""

    source: str
    inputs: tuple[ArrayShape, ...]  # entry parameter leaves, in order
    outputs: tuple[ArrayShape, ...]  # entry root leaves, in order
    kernels: tuple[Kernel, ...]  # indexed like hf_prof_ns / hf_prof_calls
    entry_symbol: str = ENTRY_SYMBOL
    arena_bytes: int = 0  # the work arena hf_entry allocates per call (for error messages)
    arena_largest: str = ""  # its largest buffer: shape, instruction, bytes (for error messages)
    # (end of the prelude, start of the driver) in `source`, the kernels between: how
    # `units.units` cuts a large program into translation units; (0, 0): never cut
    split: tuple[int, int] = (0, 0)
    # host callbacks, by site number: `args` has one more slot, the callback (see above)
    host_sites: tuple[HostSite, ...] = ()
