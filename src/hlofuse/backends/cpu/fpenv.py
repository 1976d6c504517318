"""The floating-point environment of generated code: subnormals flushed to zero or kept.

    C          the helpers every generated file and the runtime include (below)
    define(s)  the line that selects a mode for one generated file: HF_FLUSH_SUBNORMALS 1 or 0

XLA's CPU runtime flushes f32/f64 subnormals (`backends/subnormals.py`). The cpu backend gets
the same values from the hardware: `hf_entry` (driver.py) saves the calling thread's control
register, sets the mode (`hf_fpcr_enter`), runs, and restores the caller's register on every
way out, so a Python caller's numpy never runs in flush mode; each pool worker runs a job under
the control register of the thread that started it (runtime.py), so library routines and
parallel loops on other threads (GEMM tasks, OpenBLAS calls, sort rows) flush too.

    x86 (SSE)   MXCSR: FTZ (bit 15, results) and DAZ (bit 6, operands)
    aarch64     FPCR: FZ (bit 24, operands and results of single and double precision)
    elsewhere   no control: `HF_FPCR_FLUSH` is 0, the mode cannot be set, subnormals are kept

The hardware flushes what it computes; C code that returns one of its operands unchanged
(max/min as a comparison and a select, sign of a zero) would pass a subnormal through where XLA
returns zero. Those results go through `hf_ftz_f32`/`hf_ftz_f64` (cprelude's max/min/sign,
cvec's vector max/min): integer bit operations that zero a subnormal, or nothing at all when
the file keeps subnormals.
"""

from __future__ import annotations

from hlofuse.backends.subnormals import FLUSH

C = r"""
#ifndef HF_FPENV
#define HF_FPENV
#ifndef HF_FLUSH_SUBNORMALS
#define HF_FLUSH_SUBNORMALS 0
#endif
#define HF_FPENV_FN __attribute__((unused)) static inline
#if defined(__SSE__) || defined(__x86_64__)
typedef unsigned int hf_fpcr_t;
#define HF_FPCR_FLUSH 0x8040u /* MXCSR FTZ | DAZ */
HF_FPENV_FN hf_fpcr_t hf_fpcr_get(void) { return __builtin_ia32_stmxcsr(); }
HF_FPENV_FN void hf_fpcr_set(hf_fpcr_t c) { __builtin_ia32_ldmxcsr(c); }
#elif defined(__aarch64__)
typedef unsigned long long hf_fpcr_t;
#define HF_FPCR_FLUSH (1ull << 24) /* FPCR FZ */
HF_FPENV_FN hf_fpcr_t hf_fpcr_get(void) {
  hf_fpcr_t c;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(c));
  return c;
}
HF_FPENV_FN void hf_fpcr_set(hf_fpcr_t c) {
  __asm__ __volatile__("msr fpcr, %0" : : "r"(c));
}
#else
typedef unsigned int hf_fpcr_t;
#define HF_FPCR_FLUSH 0u /* no control register we know: subnormals are kept */
HF_FPENV_FN hf_fpcr_t hf_fpcr_get(void) { return 0u; }
HF_FPENV_FN void hf_fpcr_set(hf_fpcr_t c) { (void)c; }
#endif
/* Set this file's mode in the calling thread; returns the register to restore. */
HF_FPENV_FN hf_fpcr_t hf_fpcr_enter(void) {
  const hf_fpcr_t saved = hf_fpcr_get();
  const hf_fpcr_t want = HF_FLUSH_SUBNORMALS ? (saved | HF_FPCR_FLUSH)
                                             : (saved & ~(hf_fpcr_t)HF_FPCR_FLUSH);
  if (want != saved) hf_fpcr_set(want);
  return saved;
}
HF_FPENV_FN void hf_fpcr_leave(hf_fpcr_t saved) {
  if (hf_fpcr_get() != saved) hf_fpcr_set(saved);
}
/* A zero of its sign for a subnormal (bit operations: no mode, no microcode assist), when this
   file flushes; the value itself otherwise. */
HF_FPENV_FN float hf_ftz_f32(float x) {
#if HF_FLUSH_SUBNORMALS
  uint32_t u;
  memcpy(&u, &x, 4);
  u &= (u & 0x7f800000u) ? 0xffffffffu : 0x80000000u;
  memcpy(&x, &u, 4);
#endif
  return x;
}
HF_FPENV_FN double hf_ftz_f64(double x) {
#if HF_FLUSH_SUBNORMALS
  uint64_t u;
  memcpy(&u, &x, 8);
  u &= (u & 0x7ff0000000000000ull) ? 0xffffffffffffffffull : 0x8000000000000000ull;
  memcpy(&x, &u, 8);
#endif
  return x;
}
#endif
"""


def define(subnormals: str) -> str:
    """The line that puts one generated file in `subnormals` mode (before the prelude)."""
    return f"#define HF_FLUSH_SUBNORMALS {1 if subnormals == FLUSH else 0}\n"
