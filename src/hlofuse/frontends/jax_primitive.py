"""The `hlofuse_call` primitive: a flat JAX function that hlofuse compiles, as one equation of
a jax program that every JAX transformation can take (`jax_function.py` is its user side).

    Program(flat, name, options)   a function of array leaves -> a list of array leaves, with
                                   the compile options; derived programs (jvp, transpose, vmap)
                                   and compiled entries are cached on it
    call(program, *arrays)         bind the primitive: the program's outputs (traced)

Rules, each producing more `hlofuse_call`s (so a derivative or a batched program is compiled by
hlofuse too, from what JAX traces for it):

- abstract eval: `jax.eval_shape` of the program (cached per input signature).
- lowering (CPU): the program is traced by jax.jit, optimised and compiled by hlofuse for the
  operands' shapes (once per signature), registered with the XLA FFI handler (`jax_ffi.py`),
  and emitted as one custom call that runs it on XLA's buffers, without copies. Where hlofuse
  cannot (an op the cpu backend refuses, no C compiler, a sub-byte type, ordered effects) the
  program is lowered by jax itself, and a RuntimeWarning says why, once per program. On other
  platforms the program is lowered by jax itself (the gpu backend has no FFI handler yet).
- jvp: the primal outputs are one call; the tangents of the inexact outputs another, of the
  program `t -> jax.jvp(flat, x, t)[1]` on the primals and the non-zero tangents. That second
  call is linear in its tangent operands.
- transpose (of a call linear in its undefined operands, as the jvp emits): one call of
  `jax.linear_transpose(u -> flat(defined, u))` on the cotangents: the cotangents of the
  undefined operands (jax transposes the linear program it traces, so a `custom_vjp` inside
  the function keeps its own backward rule, never differentiated twice). Under `jax.grad`
  the forward therefore runs once in the forward pass and once more inside the fused backward
  program (as under `jax.checkpoint`).
- batching: one call of `jax.vmap(flat)` with the operands' batch axes (unbatched: None) and
  the same axis name: a new program, not a loop of calls. Outputs that depend on a batched
  operand are batched on axis 0, the others stay unbatched (`_batched_outputs`).

A program holds no jax tracer: derived programs close over the parent program and the masks
that define them, so they are cached by (kind, masks) and a transformation applied twice
compiles once.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Literal, Primitive
from jax.interpreters import ad, batching, mlir

try:
    from jax.core import ShapedArray
except ImportError:  # pragma: no cover - other jax versions
    from jax._src.core import ShapedArray

from hlofuse.errors import HloError, InputError

try:  # jax.debug.print/callback: unordered, allowed (the call is treated as pure)
    from jax._src.debugging import DebugEffect as _DebugEffect
except ImportError:  # pragma: no cover - other jax versions: every effect refused
    class _DebugEffect:  # type: ignore[no-redef]
        pass

hlofuse_call_p = Primitive("hlofuse_call")
hlofuse_call_p.multiple_results = True

Flat = Callable[..., Sequence[Any]]


def signature(avals: Sequence[Any]) -> tuple[tuple[tuple[int, ...], Any, bool], ...]:
    """(shape, dtype, weak type) per aval: what a program is traced and compiled for."""
    return tuple((tuple(a.shape), a.dtype, bool(getattr(a, "weak_type", False)))
                 for a in avals)


def _structs(sig: Sequence[tuple[tuple[int, ...], Any, bool]]) -> list[Any]:
    return [jax.ShapeDtypeStruct(s, d, weak_type=w) for s, d, w in sig]


def _inexact(aval: Any) -> bool:
    return bool(jnp.issubdtype(aval.dtype, jnp.inexact))


class Program:
    """A flat function hlofuse compiles: leaves in, a list of leaves out."""

    def __init__(self, flat: Flat, name: str, options: dict[str, Any]) -> None:
        self.flat = flat
        self.name = name
        self.options = options
        self._lock = threading.Lock()
        self._derived: dict[Any, Program] = {}
        self._jaxprs: dict[Any, Any] = {}  # signature -> the program traced there
        self._entries: dict[Any, Any] = {}  # signature -> jax_ffi.NativeEntry | None
        self.warned: str | None = None  # why the program runs as jax's own lowering
        self.compiles = 0  # hlofuse compiles of this program (one per signature)
        self.jitted = jax.jit(partial(hlofuse_call_p.bind, program=self))

    def __repr__(self) -> str:
        return self.name

    def family(self) -> list[Program]:
        """This program and every program derived from it so far (jvp, transpose, vmap)."""
        with self._lock:
            kids = list(self._derived.values())
        return [self, *(p for k in kids for p in k.family())]

    def derived(self, key: Any, make: Callable[[], tuple[Flat, str]]) -> Program:
        """The program derived from this one by `key` (made once by `make`: flat, name)."""
        with self._lock:
            p = self._derived.get(key)
            if p is None:
                flat, name = make()
                p = self._derived[key] = Program(flat, name, self.options)
        return p

    def jaxpr(self, avals: Sequence[Any]) -> Any:
        """The program traced at `avals` (a ClosedJaxpr, once per signature); a function with
        side effects other than jax.debug's is refused here."""
        sig = signature(avals)
        closed = self._jaxprs.get(sig)
        if closed is None:
            closed = jax.make_jaxpr(lambda *a: list(self.flat(*a)))(*_structs(sig))
            effects = [e for e in closed.effects if not isinstance(e, _DebugEffect)]
            if effects:
                raise InputError(
                    f"hlofuse.jax_function({self.name}): the function has side effects "
                    f"({', '.join(sorted({type(e).__name__ for e in effects}))}: an "
                    "io_callback or ordered callback), which a custom call cannot order; "
                    "use jax.pure_callback, or hlofuse.jit around the whole program")
            self._jaxprs[sig] = closed
        return closed

    def out_avals(self, avals: Sequence[Any]) -> list[Any]:
        return [ShapedArray(o.shape, o.dtype, weak_type=o.weak_type)
                for o in self.jaxpr(avals).out_avals]

    def entry(self, avals: Sequence[Any]) -> Any:
        """The program compiled by hlofuse for `avals` and registered with the XLA FFI
        handler, or None where hlofuse cannot run it (warned once per program)."""
        sig = signature(avals)
        with self._lock:
            if sig not in self._entries:
                self._entries[sig] = self._compile(sig)
            return self._entries[sig]

    def _compile(self, sig: Any) -> Any:
        from hlofuse.frontends import jax_ffi
        from hlofuse.frontends.jax import compile_flat

        if not jax_ffi.available():
            return self._inline("the XLA FFI handler could not be built here")
        try:
            exe = compile_flat(self.flat, _structs(sig), self.name, self.options)
        except HloError as exc:
            return self._inline(str(exc))
        if not jax_ffi.eligible(exe):
            return self._inline("the compiled program takes or returns sub-byte arrays")
        self.compiles += 1
        return jax_ffi.NativeEntry(exe)

    def _inline(self, reason: str) -> None:
        if self.warned is None:
            self.warned = reason
            warnings.warn(f"hlofuse.jax_function({self.name}): hlofuse cannot compile this "
                          f"program ({reason}); jax compiles it instead", RuntimeWarning,
                          stacklevel=2)
        return None


def _varying(a: Any) -> frozenset[Any]:
    return frozenset(getattr(getattr(jax.typeof(a), "mat", None), "varying", ()) or ())


def call(program: Program, *arrays: Any) -> list[Any]:
    """Bind the primitive. Inside shard_map (check_vma), operands that vary over fewer manual
    axes than the others are cast to varying first (`jax.lax.pcast`), as jax does for its own
    primitives: the transpose of that cast sums an invariant operand's cotangent over the
    devices, so a gradient has jax's type and value."""
    vmas = [_varying(a) for a in arrays]
    union = frozenset().union(*vmas)
    if union:
        arrays = tuple(a if v == union else jax.lax.pcast(a, tuple(sorted(union - v)),
                                                          to="varying")
                       for a, v in zip(arrays, vmas, strict=True))
    return list(hlofuse_call_p.bind(*arrays, program=program))


# ----- rules -------------------------------------------------------------------------------------


def _abstract_eval(*avals: Any, program: Program) -> list[Any]:
    outs = program.out_avals(avals)
    varying = [a for a in avals if getattr(getattr(a, "mat", None), "varying", None)]
    if not varying:
        return outs
    # Inside shard_map (check_vma): `call` made every operand vary over the same manual axes,
    # and every output varies over them too, as jax's standard rule has it for one primitive
    like = varying[0]
    mat = like.mat
    mesh = like.sharding.mesh
    return [ShapedArray(o.shape, o.dtype, o.weak_type,
                        sharding=jax.sharding.NamedSharding(mesh, jax.P(*[None] * o.ndim)),
                        manual_axis_type=mat) for o in outs]


def _lower_cpu(*arrays: Any, program: Program) -> Sequence[Any]:
    avals = [jax.typeof(a) for a in arrays]
    entry = program.entry(avals)
    if entry is None:
        return program.flat(*arrays)
    weak = [bool(o.weak_type) for o in program.out_avals(avals)]
    return entry.call(arrays, weak)


def _lower_other(*arrays: Any, program: Program) -> Sequence[Any]:
    return program.flat(*arrays)


def _zero_tangent(value: Any) -> Any:
    return ad.Zero(jax.typeof(value).to_tangent_aval())


def _zeros(aval: Any) -> Any:
    if _inexact(aval):
        return jnp.zeros(aval.shape, aval.dtype)
    return np.zeros(aval.shape, jax.dtypes.float0)


def _jvp(primals: Sequence[Any], tangents: Sequence[Any], *, program: Program
         ) -> tuple[list[Any], list[Any]]:
    out = call(program, *primals)
    nz = tuple(type(t) is not ad.Zero for t in tangents)
    out_avals = [jax.typeof(o) for o in out]
    if not any(nz):
        return out, [_zero_tangent(o) for o in out]
    keep = tuple(_inexact(a) for a in out_avals)
    n = len(primals)

    def make() -> tuple[Flat, str]:
        def tangent(*xt: Any) -> list[Any]:
            x, ts = list(xt[:n]), iter(xt[n:])
            t = [next(ts) if m else _zeros(jax.typeof(xi)) for xi, m in zip(x, nz, strict=True)]
            _, to = jax.jvp(lambda *a: list(program.flat(*a)), x, t)
            return [v for v, k in zip(to, keep, strict=True) if k]
        return tangent, f"jvp({program.name})"

    lin = program.derived(("jvp", nz, keep), make)
    touts = iter(call(lin, *primals, *[t for t in tangents if type(t) is not ad.Zero]))
    return out, [next(touts) if k else _zero_tangent(o)
                 for o, k in zip(out, keep, strict=True)]


def _transpose(cts: Sequence[Any], *args: Any, program: Program) -> list[Any]:
    und = tuple(ad.is_undefined_primal(a) for a in args)
    defined = [a for a, u in zip(args, und, strict=True) if not u]
    avals = [a.aval if u else jax.typeof(a) for a, u in zip(args, und, strict=True)]
    out_avals = program.out_avals(avals)
    nzct = tuple(type(c) is not ad.Zero for c in cts)
    if not any(nzct):
        return [ad.Zero(a.aval.to_tangent_aval()) if u else None
                for a, u in zip(args, und, strict=True)]
    u_avals = [a for a, u in zip(avals, und, strict=True) if u]
    nd = len(defined)

    def make() -> tuple[Flat, str]:
        def transposed(*dc: Any) -> list[Any]:
            d, cs = dc[:nd], iter(dc[nd:])
            ct = [next(cs) if m else _zeros(o) for o, m in zip(out_avals, nzct, strict=True)]

            def at(*u: Any) -> list[Any]:
                di, ui = iter(d), iter(u)
                return list(program.flat(*[next(ui) if x else next(di) for x in und]))
            structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in u_avals]
            return list(jax.linear_transpose(at, *structs)(ct))
        return transposed, f"transpose({program.name})"

    tp = program.derived(("transpose", und, nzct), make)
    res = iter(call(tp, *defined, *[c for c in cts if type(c) is not ad.Zero]))
    return [next(res) if u else None for u in und]


def _batched_outputs(program: Program, avals: Sequence[Any], batched: Sequence[bool]
                     ) -> tuple[bool, ...]:
    """Which outputs depend on a batched operand (conservatively: an equation with any such
    operand batches all its results): those the batched program returns on axis 0; the rest
    stay unbatched, as jax's own rules leave them (`jax.jacfwd` wants its primal unbatched)."""
    jaxpr = program.jaxpr(avals).jaxpr
    dep = {v for v, b in zip(jaxpr.invars, batched, strict=True) if b}
    for eqn in jaxpr.eqns:
        if any(not isinstance(v, Literal) and v in dep for v in eqn.invars):
            dep.update(eqn.outvars)
    return tuple(not isinstance(v, Literal) and v in dep
                 for v in jaxpr.outvars)


def _batch(size: int, name: Any, _trace: Any, args: Sequence[Any], dims: Sequence[Any], *,
           program: Program) -> tuple[list[Any], list[int | None]]:
    axes = tuple(dims)
    if all(d is None for d in axes):
        out = call(program, *args)
        return out, [None] * len(out)
    avals = [jax.typeof(a) if d is None else
             ShapedArray(tuple(s for i, s in enumerate(jax.typeof(a).shape) if i != d),
                         jax.typeof(a).dtype, weak_type=jax.typeof(a).weak_type)
             for a, d in zip(args, axes, strict=True)]
    outs = _batched_outputs(program, avals, [d is not None for d in axes])

    def make() -> tuple[Flat, str]:
        mapped = jax.vmap(lambda *a: list(program.flat(*a)), in_axes=axes,
                          out_axes=[0 if b else None for b in outs], axis_name=name,
                          axis_size=size)
        return mapped, f"vmap({program.name})"

    batched = program.derived(("vmap", axes, name, size, outs), make)
    return call(batched, *args), [0 if b else None for b in outs]


hlofuse_call_p.def_impl(lambda *arrays, program: program.jitted(*arrays))
hlofuse_call_p.def_abstract_eval(_abstract_eval)
mlir.register_lowering(hlofuse_call_p, mlir.lower_fun(_lower_cpu, multiple_results=True),
                       platform="cpu")
mlir.register_lowering(hlofuse_call_p, mlir.lower_fun(_lower_other, multiple_results=True))
ad.primitive_jvps[hlofuse_call_p] = _jvp
ad.primitive_transposes[hlofuse_call_p] = _transpose
batching.axis_primitive_batchers[hlofuse_call_p] = _batch
