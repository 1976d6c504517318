"""The JAX frontend: JAX functions in, hlofuse modules out. With `jax_values.py`, the only
modules that import jax.

    from_jax(fn, *args)      lower with jax.jit(fn, keep_unused=True) and parse the HLO text
    jit(fn)                  a decorator like jax.jit: takes what jax.jit takes and returns what
                             it returns (`jax_values.py`: pytrees, Python scalars as weak types,
                             static and keyword arguments, typed PRNG keys; jax.Array outputs);
                             each new signature is traced and lowered once by jax, optimised
                             (pipeline "hlofuse" by default) and compiled, then run by hlofuse:
                             on the cpu backend as one XLA custom call inside jax.jit of a thin
                             wrapper, so jax's C++ dispatch takes the arguments and makes the
                             outputs (`jax_ffi.py`); else, and for signatures the custom call
                             cannot run, directly (leaves to numpy, the runner, jax.Arrays)

Backend choice for `jit`: backend=None (the default) means "cpu" when a C compiler exists and
"interpreter" otherwise; if the cpu backend refuses an op of the module (a CompileError from the
lowering), the function runs on the interpreter, and a RuntimeWarning says so once per reason:
the instruction, why, and that the interpreter is typically 100-1000x slower. An explicit
backend="cpu" never falls back: the error is raised.

Host callbacks (jax.pure_callback, io_callback, jax.debug.print/callback) run on both backends:
jax's callables (`Lowered._lowering.compile_args["host_callbacks"]`, indexed by the custom
calls' backend_config) become the executable's callback table (`backends/host_callbacks.py`),
adapted to take and return arrays only (an ordered effect's token is added and dropped here).

A call whose arguments are jax tracers (hlofuse.jit inside jax.grad, vmap or another jit) is
traced inline, as jax.jit's own is under a transformation: hlofuse compiles concrete calls.

Lowering uses `lowered.as_text(dialect="hlo", debug_info=True)`, so every instruction keeps its
stack frame and `Module.source_location` can point back at the user's Python line.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hlofuse.api import load, with_autotune
from hlofuse.backends import host_callbacks
from hlofuse.backends.cpu.runtime import arm
from hlofuse.backends.host_callbacks import HostCallbacks
from hlofuse.backends.subnormals import check as check_subnormals
from hlofuse.errors import HloError, InputError
from hlofuse.ir.module import Module
from hlofuse.ir.shape import ArrayShape, TokenShape, leaves

try:
    import jax
except ImportError as exc:  # pragma: no cover - exercised only without jax
    raise ImportError(
        "hlofuse.frontends.jax needs JAX: pip install 'hlofuse[jax]'"
    ) from exc

from hlofuse.frontends import jax_ffi
from hlofuse.frontends.jax_values import (
    ArgSpec,
    Outputs,
    abstract_inputs,
    flatten_inputs,
    release_dropped,
)

try:  # (0.2 us) False under a jax transformation or trace: hlofuse.jit is then traced inline
    from jax._src.core import trace_ctx as _trace_ctx

    _top_level: Callable[[], bool] = _trace_ctx.is_top_level
except (ImportError, AttributeError):  # pragma: no cover - other jax versions: never through XLA
    def _top_level() -> bool:
        return False


def _normalize_static(static_argnums: int | Sequence[int] | None) -> tuple[int, ...]:
    if static_argnums is None:
        return ()
    if isinstance(static_argnums, int):
        return (static_argnums,)
    return tuple(static_argnums)


def hlo_text(fn: Callable[..., Any], *args: Any,
             static_argnums: int | Sequence[int] | None = None,
             static_argnames: str | Iterable[str] | None = None, **kwargs: Any) -> str:
    """The HLO text (short form, with stack-frame tables) that jax.jit produces for `fn`."""
    jitted = jax.jit(fn, keep_unused=True, static_argnums=_normalize_static(static_argnums),
                     static_argnames=static_argnames)
    lowered = jitted.lower(*args, **kwargs)
    return str(lowered.as_text(dialect="hlo", debug_info=True))


def from_jax(fn: Callable[..., Any], *args: Any,
             static_argnums: int | Sequence[int] | None = None,
             static_argnames: str | Iterable[str] | None = None, **kwargs: Any) -> Module:
    """Lower `fn` at `args` with JAX and parse the result into a verified hlofuse Module."""
    name = getattr(fn, "__name__", "fn")
    text = hlo_text(fn, *args, static_argnums=static_argnums, static_argnames=static_argnames,
                    **kwargs)
    return load(text, source_name=f"<jax:{name}>")


@dataclass
class _Compiled:
    module: Module
    run: Callable[..., list[np.ndarray]]
    backend: str
    outputs: Outputs  # the module's output arrays -> the function's outputs
    params: list[int | None] | None  # entry parameter -> input array (None: a token)
    native: jax_ffi.NativeEntry | None = None  # its custom call (None: the direct path)


class _UseDirect(Exception):
    """Raised in the trace of the path through XLA: this signature runs on the direct path."""


def _build(
    module: Module, pipeline: str | None, backend: str | None, name: str,
    threads: int | None = None, subnormals: str | None = None,
    host_callbacks: HostCallbacks | None = None, warned: set[str] | None = None,
) -> tuple[Module, Callable[..., list[np.ndarray]], str]:
    """Optimise and bind `module` (`api.bind`); with backend None, the default backend, which
    falls back (to the interpreter) when it cannot run an op of the module, with a warning
    (once per reason when `warned` collects them)."""
    from hlofuse.api import bind

    def refused(tried: str, instead: str, exc: HloError) -> None:
        reason = str(exc)
        if warned is None or reason not in warned:
            if warned is not None:
                warned.add(reason)
            warnings.warn(
                f"hlofuse.jit({name}): the {tried} backend cannot run this function ({reason}); "
                f"it runs on the numpy {instead} instead, typically 100-1000x slower. Pass "
                f"backend='{tried}' to make this an error, or backend='{instead}' to choose it",
                RuntimeWarning,
                stacklevel=7,  # (the caller of hlofuse.jit's function, as before api.bind)
            )

    return bind(module, pipeline, backend, threads=threads, subnormals=subnormals,
                host_callbacks=host_callbacks, refused=refused)


def _native_entry(backend: str | None) -> bool:
    """Whether the backend (None: the default) makes runners that can run as one XLA custom
    call (`Backend.native_entry`). A name no backend has is left to the call to refuse."""
    from hlofuse.backends import registry

    name = backend if backend is not None else registry.default()
    return name not in registry.names() or registry.get(name).native_entry


def _host_table(lowered: Any, module: Module, name: str) -> list[Callable[..., Any]] | None:
    """The table of jax's host callbacks the module's custom calls index (None without any),
    each taking and returning arrays only: a callback of an ordered effect gets jax's token
    argument and loses the token it returns (`jax/_src/callback.py`, emit_python_callback)."""
    sites = host_callbacks.sites(module)
    if not sites:
        return None
    try:
        raw = list(lowered._lowering.compile_args["host_callbacks"])
    except (AttributeError, KeyError, TypeError):
        raise HloError(f"{name}: the module has host callbacks, but this jax version does not "
                       "expose them (Lowered._lowering.compile_args['host_callbacks'])") from None
    takes_token: dict[int, bool] = {}
    for instr in sites:
        token = any(isinstance(o.shape, TokenShape) for o in instr.operands)
        if takes_token.setdefault(host_callbacks.callback_index(instr), token) != token:
            raise HloError(f"{name}: host callback {host_callbacks.callback_index(instr)} is "
                           "called both with and without a token")
    return [_without_token(cb) if takes_token.get(i) else cb for i, cb in enumerate(raw)]


def _without_token(callback: Callable[..., Any]) -> Callable[..., Any]:
    def call(*arrays: np.ndarray) -> tuple[Any, ...]:
        return tuple(callback(None, *arrays))[1:]

    return call


class JittedFunction:
    """What `hlofuse.jit(fn)` returns. Call it like the function; inspect `.lower(...)` and
    `.backend_for(...)`. Takes and returns what jax.jit takes and returns (`jax_values.py`)."""

    def __init__(
        self, fn: Callable[..., Any], *,
        static_argnums: int | Sequence[int] | None = None,
        static_argnames: str | Iterable[str] | None = None,
        donate_argnums: int | Sequence[int] | None = None,
        donate_argnames: str | Iterable[str] | None = None,
        pipeline: str | None = "hlofuse", backend: str | None = None,
        threads: int | None = None, subnormals: str | None = None,
    ) -> None:
        if not callable(fn):
            raise InputError(f"hlofuse.jit expects a callable, got {type(fn).__name__}")
        self.fn = fn
        self.spec = ArgSpec(fn, static_argnums, static_argnames, donate_argnums,
                            donate_argnames)
        self.pipeline = pipeline
        self.backend = backend
        self.threads = threads
        self.subnormals = subnormals
        self._cache: dict[Any, _Compiled] = {}
        self._warned: set[str] = set()  # the interpreter fallbacks already reported
        # The path through XLA (jax.jit of `_traced`), made on the first call; False: not here
        self._xla: Callable[..., Any] | bool | None = None
        self._direct: set[Any] | None = None  # signatures on the direct path, once there are any
        functools.update_wrapper(self, fn)

    @property
    def static_argnums(self) -> tuple[int, ...]:
        return self.spec.static_argnums

    @property
    def static_argnames(self) -> tuple[str, ...]:
        return self.spec.static_argnames

    def __repr__(self) -> str:
        return f"hlofuse.jit({getattr(self.fn, '__name__', self.fn)!s})"

    def lower(self, *args: Any, **kwargs: Any) -> Module:
        """The hlofuse module for this call signature (after the pipeline, if one is set)."""
        return self._traced_check(self._compiled(args, kwargs)[0]).module

    def backend_for(self, *args: Any, **kwargs: Any) -> str:
        """The backend this call signature runs on ("cpu" or "interpreter")."""
        return self._traced_check(self._compiled(args, kwargs)[0]).backend

    @staticmethod
    def _traced_check(compiled: _Compiled | None) -> _Compiled:
        if compiled is None:
            raise InputError("the arguments are jax tracers: hlofuse compiles concrete calls "
                             "only (under a jax transformation the function is traced by jax)")
        return compiled

    def _compiled(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[_Compiled | None, list[np.ndarray]]:
        """The compiled entry for this signature and the call's input arrays; (None, []) when
        a jax transformation traces the call."""
        dyn, dkw, static = self.spec.split(args, kwargs)
        arrays, key, traced = flatten_inputs((dyn, dkw))
        if traced:
            return None, []
        key = (key, static)
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = self._compile(args, kwargs, [(a.dtype, a.shape) for a in arrays])
            self._cache[key] = compiled
        return compiled, arrays

    def _compile(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                 specs: list[tuple[np.dtype, tuple[int, ...]]]) -> _Compiled:
        """Trace, lower and build `fn` at these arguments (concrete or traced), whose array
        leaves have `specs` (dtype, shape)."""
        name = getattr(self.fn, "__name__", "fn")
        traced = jax.jit(self.fn, keep_unused=True, **self.spec.jax_options()).trace(
            *args, **kwargs)
        lowered = traced.lower()
        module = _module_of(lowered, name)
        params = _param_plan(module, specs, name)
        table = _host_table(lowered, module, name)
        module, run, backend = _build(module, self.pipeline, self.backend, name, self.threads,
                                      self.subnormals, table, self._warned)
        outs = [(s.dtype.np, tuple(s.dims)) for s in leaves(module.entry.root.shape)]
        native = (jax_ffi.NativeEntry(run)  # type: ignore[arg-type]
                  if self._xla is not False and jax_ffi.eligible(run)
                  and jax_ffi.available() else None)
        return _Compiled(module, run, backend, Outputs(traced.out_info, outs, name), params,
                         native)

    def _traced(self, *args: Any, **kwargs: Any) -> Any:
        """What jax.jit traces for the path through XLA: the module of this signature (compiled
        now if it is new) as one custom call of its array leaves (`jax_ffi.py`)."""
        dyn, dkw, static = self.spec.split(args, kwargs)
        arrays, key = abstract_inputs((dyn, dkw))
        key = (key, static)
        compiled = self._cache.get(key)
        if compiled is None:
            specs = [(np.dtype(a.dtype), tuple(a.shape)) for a in arrays]
            compiled = self._compile(args, kwargs, specs)
            self._cache[key] = compiled
        if compiled.native is None:
            raise _UseDirect
        return compiled.outputs.traced(compiled.native.call(arrays, compiled.outputs.weak))

    def _through_xla(self) -> Callable[..., Any] | bool:
        """jax.jit of `_traced` (the wrapper has `fn`'s signature, for jax's static argument
        checks), or False where the custom-call handler cannot be built."""
        if self._xla is None:
            if not _native_entry(self.backend):
                self._xla = False
            else:
                jax_ffi.prepare()
                body = self._traced

                @functools.wraps(self.fn)
                def traced(*args: Any, **kwargs: Any) -> Any:
                    return body(*args, **kwargs)

                self._xla = jax.jit(traced, **self.spec.jax_options())
        return self._xla

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        xla = self._xla if self._xla is not None else self._through_xla()
        if xla is not False and _top_level() and (
                self._direct is None or self._signature(args, kwargs) not in self._direct):
            arm()
            try:
                return xla(*args, **kwargs)  # type: ignore[operator]
            except _UseDirect:
                if not jax_ffi.available():
                    self._xla = False  # (every signature: no need to tell them apart)
                else:
                    self._direct = {*(self._direct or ()), self._signature(args, kwargs)}
            except Exception as exc:
                err = jax_ffi.failure(exc)  # (jax raises a failed status as a ValueError)
                if err is not None:
                    err.__suppress_context__ = True  # (its own __cause__ stays)
                    raise err  # noqa: B904
                if isinstance(exc, (TypeError, ValueError)):  # hlofuse's InputError, if any
                    self._signature(args, kwargs)
                raise
        return self._call_direct(args, kwargs)

    def _signature(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        dyn, dkw, static = self.spec.split(args, kwargs)
        return (flatten_inputs((dyn, dkw))[1], static)

    def _call_direct(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call without XLA: leaves to numpy, the runner, outputs to jax.Arrays (the
        interpreter, and signatures the custom call cannot run)."""
        compiled, arrays = self._compiled(args, kwargs)
        if compiled is None:  # under a jax transformation: traced inline, as jax.jit's is
            return jax.jit(self.fn, **self.spec.jax_options())(*args, **kwargs)
        if compiled.params is not None:
            arrays = [() if i is None else arrays[i] for i in compiled.params]  # type: ignore
        release_dropped()  # (the last call's outputs, if the caller dropped them: reusable)
        return compiled.outputs(compiled.run(*arrays))


def _param_plan(module: Module, arrays: list[tuple[np.dtype, tuple[int, ...]]],
                name: str) -> list[int | None] | None:
    """What each entry parameter gets: an input array's index, or None for a token (jax's
    ordered effects thread one through the entry); None when the parameters are the arrays in
    order. Checks that jax lowered every leaf (`arrays`: dtype, shape) as the array hlofuse
    passes for it."""
    params = module.entry.parameters
    plan: list[int | None] = []
    for p in params:
        if isinstance(p.shape, TokenShape):
            plan.append(None)
            continue
        i = len(plan) - plan.count(None)
        if not isinstance(p.shape, ArrayShape) or i >= len(arrays) or (
                arrays[i][0] != p.shape.dtype.np or arrays[i][1] != tuple(p.shape.dims)):
            got = (f"{arrays[i][0]}{list(arrays[i][1])}" if i < len(arrays)
                   else "no argument")
            raise HloError(f"{name}: jax lowered parameter {p.name} as {p.shape}, but the "
                           f"argument leaf {i} converts to {got} (a bug in hlofuse's "
                           "conversion of jax.jit's arguments)")
        plan.append(i)
    if len(plan) - plan.count(None) != len(arrays):
        raise HloError(f"{name}: the module takes {len(plan) - plan.count(None)} arrays but the "
                       f"call has {len(arrays)} array leaves")
    return None if None not in plan else plan

def jit(
    fn: Callable[..., Any] | None = None,
    *,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Iterable[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Iterable[str] | None = None,
    pipeline: str | None = "hlofuse",
    backend: str | None = None,
    threads: int | None = None,
    autotune: bool = False,
    subnormals: str | None = None,
) -> Any:
    """Like `jax.jit`, but hlofuse compiles and runs the function.

    Usable as `@jit` or `@jit(static_argnames="n", pipeline="simplify")`. Takes what jax.jit
    takes (pytrees of arrays, Python scalars, jax.Arrays, typed PRNG keys; static arguments by
    number or name, keyword arguments) and returns what it returns: jax.Arrays with the same
    dtypes, weak types and pytree structure (`jax_values.py`). `donate_argnums`/
    `donate_argnames` are checked and ignored (arguments are never written). `pipeline` is a
    pipeline name or pass spec (None: run the module as lowered); `backend` is "cpu",
    "interpreter" or None (cpu if a C compiler exists; an op the cpu backend cannot run sends
    the function to the interpreter, with a warning); `threads`, `autotune` and `subnormals`
    ("flush", as jax.jit on CPU, or "keep") as for `hlofuse.compile`.
    """
    if subnormals is not None:
        check_subnormals(subnormals)
    if autotune:
        pipeline = with_autotune(pipeline)

    def wrap(f: Callable[..., Any]) -> JittedFunction:
        return JittedFunction(f, static_argnums=static_argnums,
                              static_argnames=static_argnames, donate_argnums=donate_argnums,
                              donate_argnames=donate_argnames, pipeline=pipeline,
                              backend=backend, threads=threads, subnormals=subnormals)

    return wrap(fn) if fn is not None else wrap


def _module_of(lowered: Any, name: str) -> Module:
    """The verified hlofuse Module of a `jax.stages.Lowered` (short form, stack frames kept)."""
    return load(str(lowered.as_text(dialect="hlo", debug_info=True)),
                source_name=f"<jax:{name}>")


def compile_flat(flat: Callable[..., Any], structs: Sequence[Any], name: str,
                 options: dict[str, Any]) -> Any:
    """`flat` (array leaves in, a list of array leaves out) traced by jax.jit at `structs`
    (a `jax.ShapeDtypeStruct` per leaf), optimised and compiled by the cpu backend with
    `options` (pipeline, threads, subnormals): the runner, for `jax_primitive.Program`. Raises
    an HloError where the cpu backend cannot run it, or where the program has ordered effects
    (a token parameter the custom call has no operand for)."""
    from hlofuse.api import bind

    lowered = jax.jit(flat, keep_unused=True).trace(*structs).lower()
    module = _module_of(lowered, name)
    if _param_plan(module, [(np.dtype(a.dtype), tuple(a.shape)) for a in structs],
                   name) is not None:
        raise HloError(f"{name}: the program has ordered effects (a token parameter)")
    table = _host_table(lowered, module, name)
    _, run, _ = bind(module, options.get("pipeline", "hlofuse"), "cpu",
                     threads=options.get("threads"), subnormals=options.get("subnormals"),
                     host_callbacks=table)
    return run
