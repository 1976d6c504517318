"""`hlofuse.jit`'s call path through XLA: a compiled module runs as an XLA FFI custom call.

    available()            whether the path works here (jax.ffi, a C compiler): built once
    NativeEntry(exe)       an executable registered with the handler; `.call(arrays, results)`
                           inside a jax trace emits the custom call that runs it
    failure(exc)           the hlofuse error behind a JaxRuntimeError our handler caused

Why: a Python call that flattens dozens of leaves, reads their buffers and wraps every output
in a `jax.Array` costs 5-10 us per leaf (a jax.Array made from numpy memory alone costs 6-8 us),
while jax.jit's C++ dispatch does the same for all leaves in a few. So `hlofuse.jit` hands the
call to jax.jit itself: a thin wrapper, traced once per signature, whose body is one custom call
(`jax.ffi.ffi_call`) of the target `hlofuse_entry`. jax's C++ fast path then takes the
arguments and makes the outputs exactly as for jax.jit; XLA passes the argument buffers and
fresh result buffers to our handler, which runs the module's `hf_entry` on them: no copy either
way, no Python per call beyond jax's own. XLA runs such a call inline on the caller's thread (it
rates a custom call "cheap"), so loading the handler also sets glibc's malloc to keep freed
memory (`backends/cpu/heap.py`; HLOFUSE_MALLOC=default opts out).

The handler is a small C library (compiled and cached like any module, against the XLA FFI
header jaxlib ships: `jax.ffi.include_dir()`, whose digest is part of the source, so a new
jaxlib builds a new one). It keeps a table of registered executables; the custom call names one
by its handle (an `s64` attribute), never by an address, so a program that names a stale or
unknown handle gets an error instead of a jump. Conditions enforced on every call: the handle is
live, the call has exactly the executable's inputs and results, and each buffer's byte size
(element size by XLA type times its dimensions) is the one the executable was compiled for.
Pred arguments reach the handler as u8 `min(byte, 1)`, computed by XLA (canonical 0 and 1
whatever bytes the caller's bool array holds: XLA copies them as they are). A non-zero status
of `hf_entry` becomes an FFI error whose message carries the status and the
handle; `failure` turns it back into the executable's own error (AllocationError,
KeyboardInterrupt, the host callback's exception) when it surfaces at the call.

Conditions for this path (`eligible`): the cpu backend ran the module, it has at least one output
array (a custom call without results would be dead code to XLA), and every input and output
element type is a whole number of bytes (XLA may pack the sub-byte integers hlofuse keeps one
per byte).
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import secrets
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from hlofuse.backends.cpu import heap
from hlofuse.backends.cpu.executable import CpuExecutable

TARGET = "hlofuse_entry"

SOURCE = r"""
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "xla/ffi/api/c_api.h"

typedef int (*hf_xla_entry)(void *const *args, void *const *results);

typedef struct {
  hf_xla_entry entry;
  void *host;               /* the host-callback slot after the inputs, or NULL */
  int64_t key;              /* what the code is (see jax_ffi.py) */
  int64_t n_in, n_out;
  int64_t nbytes[];         /* n_in + n_out byte sizes */
} hf_xla_record;

static pthread_mutex_t hf_xla_mu = PTHREAD_MUTEX_INITIALIZER;
static hf_xla_record **hf_xla_table; /* by handle; a handle is never reused */
static int64_t hf_xla_len, hf_xla_cap;

/* Register an executable: its handle, or -1 when out of memory. */
int64_t hf_xla_add(void *entry, void *host, int64_t key, int64_t n_in, int64_t n_out,
                   const int64_t *nbytes) {
  hf_xla_record *r = malloc(sizeof *r + sizeof(int64_t) * (size_t)(n_in + n_out));
  if (!r) return -1;
  r->entry = (hf_xla_entry)entry;
  r->host = host;
  r->key = key;
  r->n_in = n_in;
  r->n_out = n_out;
  memcpy(r->nbytes, nbytes, sizeof(int64_t) * (size_t)(n_in + n_out));
  pthread_mutex_lock(&hf_xla_mu);
  if (hf_xla_len == hf_xla_cap) {
    int64_t cap = hf_xla_cap ? 2 * hf_xla_cap : 64;
    hf_xla_record **t = realloc(hf_xla_table, sizeof *t * (size_t)cap);
    if (!t) {
      pthread_mutex_unlock(&hf_xla_mu);
      free(r);
      return -1;
    }
    hf_xla_table = t;
    hf_xla_cap = cap;
  }
  int64_t h = hf_xla_len++;
  hf_xla_table[h] = r;
  pthread_mutex_unlock(&hf_xla_mu);
  return h;
}

void hf_xla_remove(int64_t h) {
  pthread_mutex_lock(&hf_xla_mu);
  hf_xla_record *r = NULL;
  if (h >= 0 && h < hf_xla_len) {
    r = hf_xla_table[h];
    hf_xla_table[h] = NULL;
  }
  pthread_mutex_unlock(&hf_xla_mu);
  free(r);
}

static int64_t hf_xla_itemsize(XLA_FFI_DataType t) {
  switch (t) {
  case XLA_FFI_DataType_PRED: case XLA_FFI_DataType_S8: case XLA_FFI_DataType_U8:
  case XLA_FFI_DataType_F8E5M2: case XLA_FFI_DataType_F8E4M3FN:
  case XLA_FFI_DataType_F8E4M3B11FNUZ: case XLA_FFI_DataType_F8E5M2FNUZ:
  case XLA_FFI_DataType_F8E4M3FNUZ: case XLA_FFI_DataType_F8E4M3:
  case XLA_FFI_DataType_F8E3M4: case XLA_FFI_DataType_F8E8M0FNU:
    return 1;
  case XLA_FFI_DataType_S16: case XLA_FFI_DataType_U16: case XLA_FFI_DataType_F16:
  case XLA_FFI_DataType_BF16:
    return 2;
  case XLA_FFI_DataType_S32: case XLA_FFI_DataType_U32: case XLA_FFI_DataType_F32:
    return 4;
  case XLA_FFI_DataType_S64: case XLA_FFI_DataType_U64: case XLA_FFI_DataType_F64:
  case XLA_FFI_DataType_C64:
    return 8;
  case XLA_FFI_DataType_C128:
    return 16;
  default:
    return -1; /* sub-byte and unknown types: never registered */
  }
}

static int64_t hf_xla_bytes(const XLA_FFI_Buffer *b) {
  int64_t n = hf_xla_itemsize(b->dtype);
  for (int64_t d = 0; n >= 0 && d < b->rank; ++d) {
    if (b->dims[d] < 0 || (b->dims[d] && n > INT64_MAX / b->dims[d])) return -1;
    n *= b->dims[d];
  }
  return n;
}

static XLA_FFI_Error *hf_xla_error(const XLA_FFI_Api *api, const char *message) {
  XLA_FFI_Error_Create_Args a;
  memset(&a, 0, sizeof a);
  a.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  a.message = message;
  a.errc = XLA_FFI_Error_Code_INTERNAL;
  return api->XLA_FFI_Error_Create(&a);
}

/* The s64 attribute `name` (-1 if there is none). */
static int64_t hf_xla_attr(const XLA_FFI_Attrs *attrs, const char *name) {
  const size_t len = strlen(name);
  for (int64_t i = 0; i < attrs->size; ++i) {
    const XLA_FFI_ByteSpan *n = attrs->names[i];
    if (attrs->types[i] != XLA_FFI_AttrType_SCALAR || n->len != len ||
        memcmp(n->ptr, name, len) != 0)
      continue;
    const XLA_FFI_Scalar *s = (const XLA_FFI_Scalar *)attrs->attrs[i];
    if (s->dtype == XLA_FFI_DataType_S64) return *(const int64_t *)s->value;
  }
  return -1;
}

/* The record the call names (under hf_xla_mu): by its handle, if that record has the call's
   key; else (an executable XLA kept from another registration, e.g. in jax's persistent
   cache) any live record with that key: the same code. */
static const hf_xla_record *hf_xla_find(int64_t h, int64_t key) {
  if (h >= 0 && h < hf_xla_len && hf_xla_table[h] && hf_xla_table[h]->key == key)
    return hf_xla_table[h];
  for (int64_t i = 0; key >= 0 && i < hf_xla_len; ++i)
    if (hf_xla_table[i] && hf_xla_table[i]->key == key) return hf_xla_table[i];
  return NULL;
}

#define HF_XLA_SMALL 128

XLA_FFI_Error *hlofuse_xla_call(XLA_FFI_CallFrame *cf) {
  if (cf->extension_start && cf->extension_start->type == XLA_FFI_Extension_Metadata) {
    XLA_FFI_Metadata_Extension *ext = (XLA_FFI_Metadata_Extension *)cf->extension_start;
    ext->metadata->api_version.major_version = XLA_FFI_API_MAJOR;
    ext->metadata->api_version.minor_version = XLA_FFI_API_MINOR;
    ext->metadata->traits = 0;
    return NULL;
  }
  if (cf->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  const int64_t h = hf_xla_attr(&cf->attrs, "handle");
  const int64_t key = hf_xla_attr(&cf->attrs, "key");
  const int64_t n_in = cf->args.size, n_out = cf->rets.size, n = n_in + n_out + 1;
  void *small[HF_XLA_SMALL];
  void **p = n <= HF_XLA_SMALL ? small : malloc(sizeof(void *) * (size_t)n);
  if (!p) return hf_xla_error(cf->api, "hlofuse: out of memory for the buffer list");
  const char *bad = NULL;
  hf_xla_entry entry = NULL;
  pthread_mutex_lock(&hf_xla_mu);
  const hf_xla_record *r = hf_xla_find(h, key);
  if (!r) {
    bad = "hlofuse: the custom call names no live compiled function";
  } else if (r->n_in != n_in || r->n_out != n_out) {
    bad = "hlofuse: the custom call's operand or result count is not the function's";
  } else {
    int64_t k = 0;
    for (int64_t i = 0; i < n_in; ++i) {
      const XLA_FFI_Buffer *b = (const XLA_FFI_Buffer *)cf->args.args[i];
      if (cf->args.types[i] != XLA_FFI_ArgType_BUFFER || hf_xla_bytes(b) != r->nbytes[i])
        bad = "hlofuse: an operand of the custom call is not the array the function takes";
      p[k++] = b->data;
    }
    p[k++] = r->host;
    for (int64_t i = 0; i < n_out; ++i) {
      const XLA_FFI_Buffer *b = (const XLA_FFI_Buffer *)cf->rets.rets[i];
      if (cf->rets.types[i] != XLA_FFI_RetType_BUFFER ||
          hf_xla_bytes(b) != r->nbytes[n_in + i])
        bad = "hlofuse: a result of the custom call is not the array the function returns";
      p[k++] = b->data;
    }
    entry = r->entry;
  }
  pthread_mutex_unlock(&hf_xla_mu);
  int status = 0;
  if (!bad) {
    /* ins: the inputs, then the host slot (contract.py: read only when the module has
       host callbacks); outs: after them */
    status = entry(p, p + n_in + 1);
  }
  if (p != small) free(p);
  if (bad) return hf_xla_error(cf->api, bad);
  if (status) {
    char msg[128];
    snprintf(msg, sizeof msg, "hlofuse status %d (handle %lld): the compiled function failed",
             status, (long long)h);
    return hf_xla_error(cf->api, msg);
  }
  return NULL;
}
"""

_MESSAGE = re.compile(r"hlofuse status (\d+) \(handle (\d+)\)")

_LOCK = threading.Lock()
_state: dict[str, Any] = {}  # "lib": the loaded handler, or "failed": why not; "started"
_live: weakref.WeakValueDictionary[int, NativeEntry] = weakref.WeakValueDictionary()


def _header() -> Path | None:
    try:
        path = Path(jax.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h"
    except (AttributeError, OSError):  # pragma: no cover - jax without jax.ffi
        return None
    return path if path.is_file() else None


def _source() -> tuple[str, tuple[str, ...]] | None:
    """The handler's C (named by the digest of the FFI header it includes) and its flags;
    None without jax.ffi's header."""
    header = _header()
    if header is None:  # pragma: no cover - jax without jax.ffi
        return None
    digest = hashlib.sha256(header.read_bytes()).hexdigest()
    return f"/* XLA FFI header {digest} */\n{SOURCE}", (f"-I{header.parents[3]}",)


def prebuild() -> str:
    """Build (or find cached) the handler library now, as `hlofuse prebuild` does once per
    machine: "built", "cached", or why it cannot be built."""
    from hlofuse.backends.cpu import build
    from hlofuse.errors import HloError

    found = _source()
    if found is None:  # pragma: no cover - jax without jax.ffi
        return "not built: jax.ffi and its C header are not available"
    source, extra_flags = found
    try:  # (into this cache, even where this process loaded the handler from another)
        return build.prebuild_library(source, name="hlofuse_xla_ffi", extra_flags=extra_flags)
    except (HloError, OSError) as exc:
        return f"not built: {type(exc).__name__}: {exc}"


def _load() -> ctypes.CDLL | None:
    from hlofuse.backends.cpu import build
    from hlofuse.errors import HloError

    found = _source()
    if found is None:  # pragma: no cover - jax without jax.ffi
        _state["failed"] = "jax.ffi and its C header are not available"
        return None
    source, extra_flags = found
    try:
        lib = build.load_library(source, name="hlofuse_xla_ffi", extra_flags=extra_flags)
        lib.hf_xla_add.restype = ctypes.c_int64
        lib.hf_xla_add.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                   ctypes.c_int64, ctypes.c_int64,
                                   ctypes.POINTER(ctypes.c_int64)]
        lib.hf_xla_remove.restype = None
        lib.hf_xla_remove.argtypes = [ctypes.c_int64]
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.hlofuse_xla_call),
                                    platform="cpu")
    except (HloError, OSError, AttributeError, TypeError, ValueError) as exc:
        _state["failed"] = f"{type(exc).__name__}: {exc}"
        return None
    heap.keep_freed_memory()  # XLA runs our calls inline: keep their buffers' pages
    return lib


def _library() -> ctypes.CDLL | None:
    lib = _state.get("lib")
    if lib is None and "failed" not in _state:
        with _LOCK:
            if "lib" not in _state and "failed" not in _state:
                lib = _load()
                if lib is not None:
                    _state["lib"] = lib
            lib = _state.get("lib")
    return lib


def prepare() -> None:
    """Start building (or loading) the handler on another thread, once: a first call's
    compile overlaps it (a cold build is ~0.2 s of the C compiler)."""
    with _LOCK:
        if "started" in _state:
            return
        _state["started"] = True
    threading.Thread(target=_library, name="hlofuse-xla-ffi", daemon=True).start()


def available() -> bool:
    """Can compiled modules run as XLA custom calls here? (Builds the handler once, or waits
    for `prepare`'s build.)"""
    return _library() is not None


def eligible(run: Any) -> bool:
    """Can this runner (what the backend compiled) run through the handler?"""
    if not isinstance(run, CpuExecutable):
        return False
    specs = [*run.input_specs, *run.output_specs]
    return bool(run.output_specs) and all(dt.itemsize * 8 == _bits(dt) for dt, _ in specs)


def _bits(dt: np.dtype) -> int:
    from hlofuse.ir.dtypes import from_numpy

    try:
        return from_numpy(dt).bits
    except (KeyError, ValueError, TypeError):
        return -1


class NativeEntry:
    """An executable registered with the handler (until this object goes away)."""

    def __init__(self, exe: CpuExecutable) -> None:
        lib = _library()
        if lib is None:
            raise RuntimeError("the XLA FFI handler is not available")
        self.exe = exe
        entry, host = exe.native_entry()
        specs = [*exe.input_specs, *exe.output_specs]
        nbytes = (ctypes.c_int64 * max(1, len(specs)))(
            *[int(np.prod(dims, dtype=np.int64)) * dt.itemsize for dt, dims in specs])
        library = exe.library_key
        # The code's identity: the library's content key; with host callbacks (a callback
        # table of this executable's own) or no key, this registration's alone.
        self.key = (int(library[:15], 16) if library is not None and not host
                    else secrets.randbits(60))
        handle = int(lib.hf_xla_add(entry, host or None, self.key, len(exe.input_specs),
                                    len(exe.output_specs), nbytes))
        if handle < 0:
            raise MemoryError("cannot register the compiled function with the XLA handler")
        self.handle = handle
        self._remove = lib.hf_xla_remove
        self._results = [jax.ShapeDtypeStruct(dims, dt) for dt, dims in exe.output_specs]
        _live[handle] = self

    def __del__(self) -> None:
        remove = getattr(self, "_remove", None)
        if remove is not None:
            remove(self.handle)

    def call(self, arrays: Sequence[Any], weak: Sequence[bool]) -> list[Any]:
        """Inside a jax trace: the custom call on `arrays` (the module's input leaves), its
        results typed as the module's outputs, weakly typed where `weak` says."""
        results = [jax.ShapeDtypeStruct(r.shape, r.dtype, weak_type=w)
                   for r, w in zip(self._results, weak, strict=True)]
        # A pred argument as u8 min(byte, 1): the module's kernels assume bytes 0 and 1, XLA
        # copies a bool array's bytes as they are (and its convert to u8 too); the handler
        # checks byte sizes only.
        arrays = [jax.lax.min(jax.lax.convert_element_type(a, np.uint8), np.uint8(1))
                  if dt == np.bool_ else a
                  for a, (dt, _) in zip(arrays, self.exe.input_specs, strict=True)]
        out = jax.ffi.ffi_call(TARGET, results)(*arrays, handle=np.int64(self.handle),
                                                key=np.int64(self.key))
        return list(out)


def failure(exc: BaseException) -> BaseException | None:
    """The hlofuse error behind `exc`, a JaxRuntimeError our handler raised for a non-zero
    status of a live executable (what `CpuExecutable` raises for that status), else None."""
    m = _MESSAGE.search(str(exc))
    if m is None:
        return None
    entry = _live.get(int(m.group(2)))
    if entry is None:
        return None
    try:
        entry.exe.raise_status(int(m.group(1)))
    except BaseException as err:  # (what the status means, to be raised)
        return err
    return None  # pragma: no cover - raise_status always raises
