"""glibc's malloc policy for the buffers XLA allocates around `hlofuse.jit`'s calls.

    keep_freed_memory()   once per process: keep freed heap memory for reuse (below)
    POLICY                the thresholds it sets; HLOFUSE_MALLOC=default leaves glibc alone
                          (HLOFUSE_MALLOC=keep, or unset: set them)

Why: `hlofuse.jit` runs a compiled module as one XLA custom call (`frontends/jax_ffi.py`). XLA's
CPU client rates a computation under 1000 flops "cheap" and runs it inline on the calling thread
(`cpu_client.cc`, `cheap_computation_`), and a custom call counts as -1 flops, so every such call
runs on the Python thread, whose result buffers come from glibc's main arena. With glibc's
default (dynamic) thresholds, an optimizer step whose outputs are a few MiB grows the heap with
`brk` when XLA allocates them and shrinks it again when they are freed (the trim threshold is
twice the largest block freed so far), so the next call writes fresh pages: 634 page faults per
call for optax's AdamW over 8 layers of 256x256 (strace: nine `brk` per call). jax.jit's own
computation of the same step is not "cheap": it runs on XLA's worker threads, whose arenas keep
their memory. `keep_freed_memory` sets M_MMAP_THRESHOLD to 32 MiB (the largest value glibc's own
dynamic rule reaches) and M_TRIM_THRESHOLD to 128 MiB: blocks below 32 MiB come from the heap and
up to 128 MiB of freed top-of-heap memory is kept. Measured: 0 faults per call for hlofuse (634
before) and 11 for jax.jit's own step (157 before) in the same process. A block of 32 MiB or
more is still a fresh `mmap` every call under that threshold (mallopt takes no larger one), and
writing it faults every page: jumanji's Snake returns a 36.9 MB observation stack, 9,000 faults
and 30 ms of system time a call, a 48 ms call whose kernels take 23. So M_MMAP_MAX is 0 too: the
main arena serves every size from the heap (threads' arenas still map what their heaps cannot
hold), and the block is reused: 0 to 900 faults and 25-35 ms a call (a 40 MB result in a
loop: 9,766 faults a call before, 0 in most runs after; `tests/test_frontend_jax_xla.py`).

Conditions enforced: it acts only on glibc (`mallopt` of another C library means something else
or nothing), once per process, only when the XLA call path is first used (importing hlofuse
changes nothing), and never with HLOFUSE_MALLOC=default. The cost is memory: a process may keep
up to 128 MiB of freed heap at its top it would otherwise return to the system, and a large
block freed below live ones stays with the process until the blocks above it go (it would have
been unmapped at once); HLOFUSE_MALLOC=default is the way out for a process that needs it back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import threading

from hlofuse import env

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4  # glibc's <malloc.h>
POLICY = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 128 << 20, M_MMAP_MAX: 0}
CHOICES = ("keep", "default")

_LOCK = threading.Lock()
_done: list[bool] = []


def keep_freed_memory() -> bool:
    """Set `POLICY` once (see the module docstring); whether it is in effect."""
    with _LOCK:
        if _done:
            return _done[0]
        ok = False
        if env.choice("HLOFUSE_MALLOC", CHOICES) != "default" \
                and platform.libc_ver()[0] == "glibc":
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                ok = all(libc.mallopt(k, v) == 1 for k, v in POLICY.items())
            except (OSError, AttributeError):
                ok = False
        _done.append(ok)
        return ok
