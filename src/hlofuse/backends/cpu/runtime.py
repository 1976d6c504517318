"""Ctrl-C for native runs: a SIGINT counter that every compiled module polls.

    counter_address()   the address of the process's SIGINT counter (an `int`), or None
    arm()               make sure the counting handler sits in front of Python's (per call)
    check_signals()     after a run stopped by SIGINT: raise the pending KeyboardInterrupt

Python handles a signal only between bytecodes, so while `hf_entry` runs an endless while loop,
Ctrl-C would do nothing. A tiny runtime library (compiled and cached like any module) installs
a SIGINT handler that increments a counter and then calls the handler it replaced (Python's,
which schedules the KeyboardInterrupt). Each loaded module's `hf_stop_ptr` points at the
counter; `hf_entry` reads it once at the start and then, at every while-loop iteration, does
one relaxed load and compare (`driver.py`); when it changed, `hf_entry` returns status 2 with
its arena freed, and the executable raises the pending KeyboardInterrupt. No thread, no system
call per run; the cost per loop iteration is a load from a cache line nobody writes.

Conditions enforced: the handler is installed only while Python's own SIGINT handler is
`signal.default_int_handler` (Ctrl-C means KeyboardInterrupt); a program that installed its
own handler, or ignores SIGINT, keeps exactly its behaviour. If Python's handler is replaced
(`signal.signal`), the next run notices and puts the counter in front of the new default
handler again. Without a compiler for the runtime, runs work but are not interruptible.
"""

from __future__ import annotations

import _signal  # signal.getsignal wraps the answer in an enum: 15x slower, and this is per call
import ctypes
import signal
import threading

RUNTIME_SOURCE = r"""
#include <signal.h>
#include <string.h>

static int hf_rt_count;
static struct sigaction hf_rt_prev;

static void hf_rt_handler(int sig, siginfo_t *info, void *ctx) {
  __atomic_add_fetch(&hf_rt_count, 1, __ATOMIC_RELAXED);
  if (hf_rt_prev.sa_flags & SA_SIGINFO) {
    if (hf_rt_prev.sa_sigaction) hf_rt_prev.sa_sigaction(sig, info, ctx);
  } else if (hf_rt_prev.sa_handler == SIG_DFL) {
    signal(sig, SIG_DFL);
    raise(sig);
  } else if (hf_rt_prev.sa_handler != SIG_IGN) {
    hf_rt_prev.sa_handler(sig);
  }
}

int *hf_rt_counter(void) { return &hf_rt_count; }

/* Put hf_rt_handler in front of the current SIGINT handler: 1 if done now, 0 if it already is,
   -1 on failure. */
int hf_rt_install(void) {
  struct sigaction cur, sa;
  if (sigaction(SIGINT, NULL, &cur) != 0) return -1;
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == hf_rt_handler) return 0;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = hf_rt_handler;
  sa.sa_flags = SA_SIGINFO | (cur.sa_flags & (SA_ONSTACK | SA_RESTART));
  sigemptyset(&sa.sa_mask);
  hf_rt_prev = cur;
  return sigaction(SIGINT, &sa, NULL) == 0 ? 1 : -1;
}
"""

_LOCK = threading.Lock()
_lib: ctypes.CDLL | None = None
_failed = False
_armed_for: object = None  # Python's SIGINT handler when we last (re)installed ours


def _runtime() -> ctypes.CDLL | None:
    global _lib, _failed
    if _lib is None and not _failed:
        from hlofuse.backends.cpu import build
        from hlofuse.errors import HloError

        try:
            lib = build.load_library(RUNTIME_SOURCE, name="hlofuse_runtime")
            lib.hf_rt_counter.restype = ctypes.c_void_p
            lib.hf_rt_install.restype = ctypes.c_int
        except (HloError, OSError, AttributeError):
            _failed = True
            return None
        _lib = lib
    return _lib


def counter_address() -> int | None:
    """The address of the SIGINT counter (the runtime is built on first use), or None."""
    lib = _runtime()
    return None if lib is None else int(lib.hf_rt_counter())


def arm() -> None:
    """(Re)install the counting handler if Python's SIGINT handler is the default one and we
    have not done so in front of it yet. A dictionary lookup when nothing changed."""
    global _armed_for
    handler = _signal.getsignal(signal.SIGINT)
    if handler is _armed_for:
        return
    with _LOCK:
        lib = _runtime()
        if lib is not None and handler is signal.default_int_handler:
            lib.hf_rt_install()
        _armed_for = handler


def check_signals() -> None:
    """Run Python's pending signal handlers now (raising the KeyboardInterrupt a SIGINT
    scheduled); if none raised, raise KeyboardInterrupt: the run was stopped."""
    ctypes.pythonapi.PyErr_CheckSignals()
    raise KeyboardInterrupt
