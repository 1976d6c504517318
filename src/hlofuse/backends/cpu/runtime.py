"""The process-wide native runtime every compiled module uses: Ctrl-C, and the thread pool.

    counter_address()   the address of the process's SIGINT counter (an `int`), or None
    arm()               make sure the counting handler sits in front of Python's (per call)
    check_signals()     after a run stopped by SIGINT: raise the pending KeyboardInterrupt
    parallel_address()  the address of `hf_rt_parallel_for`, the pool's entry point, or None
    default_threads()   threads a module uses: HLOFUSE_THREADS, else the CPUs this process may
                        run on

**The pool.** A parallel loop of a kernel is outlined into a function of a range (`cprint.py`)
and run by `hf_rt_parallel_for(fn, args, lo, hi, step, threads)`: the calling thread and up to
threads - 1 pool workers claim chunks of [lo, hi) from an atomic counter (about 4 chunks per
thread, multiples of `step`), so a thread that gets less CPU (another process busy on its core)
simply runs fewer chunks. A worker runs a job's chunks under the floating-point control
register of the thread that started it (`fpenv.py`: subnormals flushed or kept as the calling
module's `hf_entry` set them), so every thread of one call computes the same values. Nobody
spins for long: a worker waits for the next job by spinning `HF_SPIN` pauses (about 0.1 ms: a
pause is ~65 cycles on AMD Zen, ~140 on recent Intel), every 64th a `sched_yield` (a spinner
that shares its core with a thread that has work gives the core up), then sleeps on a
condition variable;
the caller, once no chunk is left, waits the same way for workers still inside a chunk. A
worker that wakes after
the caller closed the job does not join it, so nobody ever waits for a thread the OS has
descheduled before it started. One job runs at a time; a second caller (another Python thread)
runs its loop serially instead of waiting. Modules start with a serial `hf_parallel_ptr` and the
executable points it here, like `hf_stop_ptr` (tests that compile kernels alone run serially).

**Ctrl-C.**
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
import os
import signal
import threading

from hlofuse.backends.cpu import fpenv

RUNTIME_SOURCE = r"""
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <stdint.h>
#include <pthread.h>
""" + fpenv.C + r"""
#if defined(__x86_64__) || defined(__i386__)
#define HF_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define HF_PAUSE() __asm__ __volatile__("yield")
#else
#define HF_PAUSE() ((void)0)
#endif

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

/* ---- the thread pool ---- */
typedef void (*hf_task_fn)(void *const *args, int64_t lo, int64_t hi);
#define HF_MAX_THREADS 256
#define HF_SPIN 4096 /* pause instructions before sleeping: ~0.1 ms (256: slower, quiet or busy) */
/* One step of a spin: a pause, and every 64th a sched_yield. A spinning thread that shares its
   core with a thread that has work (the caller, when the OS put both on one core because
   another process is busy on the other) gives the core up instead of holding it for the whole
   spin: a tanh over 128K floats with one core busy, 96 -> 71 us a call (one thread: 70 us);
   quiet, unchanged. */
#define HF_RELAX(spin) do { if (((spin) & 63) == 63) sched_yield(); else HF_PAUSE(); } while (0)

static pthread_mutex_t hf_job_lock = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static pthread_mutex_t hf_mu = PTHREAD_MUTEX_INITIALIZER;       /* joins, sleeps, wakeups */
static pthread_cond_t hf_wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t hf_done = PTHREAD_COND_INITIALIZER;
static int hf_nworkers;
static uint64_t hf_gen;     /* job generation (atomic) */
static int hf_closed = 1;   /* no new workers may join (under hf_mu) */
static int hf_active;       /* workers inside the job (atomic; changed under hf_mu) */
static int hf_wanted;       /* workers that may join the current job */
static hf_task_fn hf_fn;
static void *const *hf_args;
static hf_fpcr_t hf_job_fpcr; /* the caller's floating-point control register (subnormals) */
static int64_t hf_next, hf_hi, hf_chunk; /* hf_next: atomic */

static void hf_chunks(void) {
  hf_task_fn fn = hf_fn;
  void *const *args = hf_args;
  int64_t hi = hf_hi, chunk = hf_chunk;
  for (;;) {
    int64_t i = __atomic_fetch_add(&hf_next, chunk, __ATOMIC_RELAXED);
    if (i >= hi) return;
    fn(args, i, i + chunk < hi ? i + chunk : hi);
  }
}

static void *hf_worker(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = __atomic_load_n(&hf_gen, __ATOMIC_ACQUIRE);
    for (int spin = 0; g == seen && spin < HF_SPIN; ++spin) {
      HF_RELAX(spin);
      g = __atomic_load_n(&hf_gen, __ATOMIC_ACQUIRE);
    }
    pthread_mutex_lock(&hf_mu);
    while ((g = __atomic_load_n(&hf_gen, __ATOMIC_ACQUIRE)) == seen)
      pthread_cond_wait(&hf_wake, &hf_mu);
    seen = g;
    int join = !hf_closed && id <= hf_wanted;
    if (join) __atomic_add_fetch(&hf_active, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&hf_mu);
    if (!join) continue;
    if (hf_fpcr_get() != hf_job_fpcr) hf_fpcr_set(hf_job_fpcr); /* the caller's mode */
    hf_chunks();
    pthread_mutex_lock(&hf_mu);
    if (__atomic_sub_fetch(&hf_active, 1, __ATOMIC_ACQ_REL) == 0) pthread_cond_signal(&hf_done);
    pthread_mutex_unlock(&hf_mu);
  }
  return NULL;
}

static void hf_serial(hf_task_fn fn, void *const *args, int64_t lo, int64_t hi) {
  if (lo < hi) fn(args, lo, hi);
}

/* Run fn over [lo, hi) in chunks of multiples of `step` on up to `threads` threads. */
void hf_rt_parallel_for(hf_task_fn fn, void *const *args, int64_t lo, int64_t hi, int64_t step,
                        int threads) {
  int64_t n = hi - lo;
  if (threads > HF_MAX_THREADS) threads = HF_MAX_THREADS;
  if (threads <= 1 || n <= step || pthread_mutex_trylock(&hf_job_lock) != 0) {
    hf_serial(fn, args, lo, hi);
    return;
  }
  while (hf_nworkers < threads - 1) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int ok = pthread_create(&t, &attr, hf_worker, (void *)(intptr_t)(hf_nworkers + 1)) == 0;
    pthread_attr_destroy(&attr);
    if (!ok) break;
    ++hf_nworkers;
  }
  int helpers = threads - 1 < hf_nworkers ? threads - 1 : hf_nworkers;
  int64_t chunk = (n + (int64_t)(helpers + 1) * 4 - 1) / ((int64_t)(helpers + 1) * 4);
  chunk = (chunk + step - 1) / step * step;
  pthread_mutex_lock(&hf_mu);
  hf_fn = fn;
  hf_args = args;
  hf_job_fpcr = hf_fpcr_get();
  hf_hi = hi;
  hf_chunk = chunk;
  __atomic_store_n(&hf_next, lo, __ATOMIC_RELAXED);
  hf_wanted = helpers;
  hf_closed = 0;
  __atomic_add_fetch(&hf_gen, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&hf_wake);
  pthread_mutex_unlock(&hf_mu);
  hf_chunks();
  pthread_mutex_lock(&hf_mu);
  hf_closed = 1; /* workers that have not joined yet stay out */
  pthread_mutex_unlock(&hf_mu);
  for (int spin = 0; __atomic_load_n(&hf_active, __ATOMIC_ACQUIRE) && spin < HF_SPIN; ++spin)
    HF_RELAX(spin);
  pthread_mutex_lock(&hf_mu);
  while (__atomic_load_n(&hf_active, __ATOMIC_ACQUIRE)) pthread_cond_wait(&hf_done, &hf_mu);
  pthread_mutex_unlock(&hf_mu);
  pthread_mutex_unlock(&hf_job_lock);
}

void *hf_rt_parallel_address(void) { return (void *)&hf_rt_parallel_for; }
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
            lib.hf_rt_parallel_address.restype = ctypes.c_void_p
        except (HloError, OSError, AttributeError):
            _failed = True
            return None
        _lib = lib
    return _lib


def counter_address() -> int | None:
    """The address of the SIGINT counter (the runtime is built on first use), or None."""
    lib = _runtime()
    return None if lib is None else int(lib.hf_rt_counter())


def parallel_address() -> int | None:
    """The address of the pool's `hf_rt_parallel_for` (the runtime is built on first use), or
    None: then modules run their parallel loops serially."""
    lib = _runtime()
    return None if lib is None else int(lib.hf_rt_parallel_address())


def default_threads() -> int:
    """HLOFUSE_THREADS when set (a positive integer), else the CPUs this process may run on."""
    from hlofuse import env

    n = env.threads()  # (ConfigError unless ASCII digits within bounds)
    if n is not None:
        return n
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


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
