"""The JAX frontend: JAX functions in, hlofuse modules out. The only core-adjacent module that
imports jax.

    from_jax(fn, *args)      lower with jax.jit(fn, keep_unused=True) and parse the HLO text
    jit(fn)                  a decorator like jax.jit: pytree inputs/outputs, static arguments;
                             each new signature is lowered once, optimised (pipeline "hlofuse" by
                             default) and compiled, then run by hlofuse

Backend choice for `jit`: backend=None (the default) means "cpu" when a C compiler exists and
"interpreter" otherwise; if the cpu backend refuses an op of the module (a CompileError from the
lowering), the call falls back to the interpreter with a warning naming the op. An explicit
backend="cpu" never falls back: the error is raised.

Lowering uses `lowered.as_text(dialect="hlo", debug_info=True)`, so every instruction keeps its
stack frame and `Module.source_location` can point back at the user's Python line.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hlofuse.backends.subnormals import DEFAULT as DEFAULT_SUBNORMALS
from hlofuse.backends.subnormals import check as check_subnormals
from hlofuse.errors import CompileError, HloError, InputError
from hlofuse.ir.module import Module
from hlofuse.text import parse

try:
    import jax
except ImportError as exc:  # pragma: no cover - exercised only without jax
    raise ImportError(
        "hlofuse.frontends.jax needs JAX: pip install 'hlofuse[jax]'"
    ) from exc


def _normalize_static(static_argnums: int | Sequence[int] | None) -> tuple[int, ...]:
    if static_argnums is None:
        return ()
    if isinstance(static_argnums, int):
        return (static_argnums,)
    return tuple(static_argnums)


def hlo_text(fn: Callable[..., Any], *args: Any,
             static_argnums: int | Sequence[int] | None = None, **kwargs: Any) -> str:
    """The HLO text (short form, with stack-frame tables) that jax.jit produces for `fn`."""
    jitted = jax.jit(fn, keep_unused=True, static_argnums=_normalize_static(static_argnums))
    lowered = jitted.lower(*args, **kwargs)
    return str(lowered.as_text(dialect="hlo", debug_info=True))


def from_jax(fn: Callable[..., Any], *args: Any,
             static_argnums: int | Sequence[int] | None = None, **kwargs: Any) -> Module:
    """Lower `fn` at `args` with JAX and parse the result into a verified hlofuse Module."""
    name = getattr(fn, "__name__", "fn")
    text = hlo_text(fn, *args, static_argnums=static_argnums, **kwargs)
    return parse(text, source_name=f"<jax:{name}>")


def _leaf_to_numpy(leaf: Any) -> np.ndarray:
    if type(leaf) is np.ndarray:  # (the common case, and never a PRNG key)
        return leaf
    if hasattr(leaf, "dtype") and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        raise InputError(
            "typed PRNG keys cannot cross into hlofuse: pass jax.random.key_data(key) "
            "(a uint32 array) and wrap it inside the function"
        )
    return np.asarray(leaf)


@dataclass
class _Compiled:
    module: Module
    run: Callable[..., list[np.ndarray]]
    backend: str
    out_tree: Any


def default_backend() -> str:
    """The first available backend (`backends.registry`: cpu when a C compiler exists)."""
    from hlofuse.backends import registry

    return registry.default()


def _build(
    module: Module, pipeline: str | None, backend: str | None, name: str,
    threads: int | None = None, subnormals: str = DEFAULT_SUBNORMALS,
) -> tuple[Module, Callable[..., list[np.ndarray]], str]:
    """Optimise and bind `module`; with backend None, pick one and fall back to the interpreter
    (with a warning) when the cpu backend does not support an op of the module."""
    from hlofuse.api import build_runner, check_backend

    if backend is not None:
        check_backend(backend)
        module, run = build_runner(module, pipeline=pipeline, backend=backend, threads=threads,
                                   subnormals=subnormals)
        return module, run, backend
    backend = default_backend()
    if backend == "interpreter":
        module, run = build_runner(module, pipeline=pipeline, backend=backend,
                                   subnormals=subnormals)
        return module, run, backend
    from hlofuse.backends.cpu import build

    if pipeline is not None:
        from hlofuse.passes.pipelines import run_pipeline

        run_pipeline(module, pipeline)
    try:
        module, run = build_runner(module, pipeline=None, backend="cpu", threads=threads,
                                   subnormals=subnormals)
        return module, run, "cpu"
    except (build.CCompileError, build.CompilerNotFoundError):
        raise
    except CompileError as exc:
        warnings.warn(
            f"hlofuse.jit({name}): the cpu backend cannot compile this function ({exc}); "
            "running it on the interpreter instead",
            RuntimeWarning,
            stacklevel=5,
        )
    module, run = build_runner(module, pipeline=None, backend="interpreter",
                               subnormals=subnormals)
    return module, run, "interpreter"


@dataclass
class JittedFunction:
    """What `hlofuse.jit(fn)` returns. Call it like the function; inspect `.lower(...)`."""

    fn: Callable[..., Any]
    static_argnums: tuple[int, ...] = ()
    pipeline: str | None = "hlofuse"
    backend: str | None = None
    threads: int | None = None
    subnormals: str = DEFAULT_SUBNORMALS
    _cache: dict[Any, _Compiled] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        functools.update_wrapper(self, self.fn)  # type: ignore[arg-type]

    def _split(self, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        n = len(args)
        static_idx = {i if i >= 0 else n + i for i in self.static_argnums}
        for i in static_idx:
            if not 0 <= i < n:
                raise InputError(f"static_argnums index {i} is out of range for {n} arguments")
        dynamic = tuple(a for i, a in enumerate(args) if i not in static_idx)
        static = tuple(args[i] for i in sorted(static_idx))
        return dynamic, static

    def lower(self, *args: Any, **kwargs: Any) -> Module:
        """The hlofuse module for this call signature (after the pipeline, if one is set)."""
        return self._compiled(args, kwargs)[0].module

    def backend_for(self, *args: Any, **kwargs: Any) -> str:
        """The backend this call signature runs on ("cpu" or "interpreter")."""
        return self._compiled(args, kwargs)[0].backend

    def _compiled(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[_Compiled, list[np.ndarray]]:
        """The compiled entry for this signature, and the call's flattened input arrays."""
        dynamic, static = self._split(args)
        leaves, treedef = jax.tree_util.tree_flatten((dynamic, kwargs))
        arrays = [_leaf_to_numpy(leaf) for leaf in leaves]
        try:
            key = (treedef, tuple((a.shape, a.dtype) for a in arrays), static)
            hash(key)
        except TypeError as exc:
            raise InputError(f"static arguments must be hashable: {exc}") from None
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = self._compile(args, kwargs)
            self._cache[key] = compiled
        return compiled, arrays

    def _compile(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Compiled:
        static = self.static_argnums
        module = from_jax(self.fn, *args, static_argnums=static, **kwargs)
        jitted = jax.jit(self.fn, static_argnums=static)
        out_shape = jax.eval_shape(jitted, *args, **kwargs)
        out_tree = jax.tree_util.tree_structure(out_shape)
        return _Compiled(*_build(module, self.pipeline, self.backend,
                                 getattr(self.fn, "__name__", "fn"), self.threads,
                                 self.subnormals), out_tree)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        compiled, arrays = self._compiled(args, kwargs)
        outputs = compiled.run(*arrays)
        if compiled.out_tree.num_leaves != len(outputs):
            raise HloError(
                f"{getattr(self.fn, '__name__', 'fn')}: the module returned {len(outputs)} "
                f"arrays but the function has {compiled.out_tree.num_leaves} outputs"
            )
        return jax.tree_util.tree_unflatten(compiled.out_tree, outputs)


def jit(
    fn: Callable[..., Any] | None = None,
    *,
    static_argnums: int | Sequence[int] | None = None,
    pipeline: str | None = "hlofuse",
    backend: str | None = None,
    threads: int | None = None,
    autotune: bool = False,
    subnormals: str = DEFAULT_SUBNORMALS,
) -> Any:
    """Like `jax.jit`, but hlofuse compiles and runs the function.

    Usable as `@jit` or `@jit(static_argnums=1, pipeline="simplify")`. `pipeline` is a pipeline
    name or pass spec (None: run the module as lowered); `backend` is "cpu", "interpreter" or
    None (cpu if a C compiler exists, with an interpreter fallback for unsupported ops);
    `threads`, `autotune` and `subnormals` ("flush", as jax.jit on CPU, or "keep") as for
    `hlofuse.compile`.
    """
    check_subnormals(subnormals)
    if autotune:
        from hlofuse.passes.pipelines import with_settings

        pipeline = with_settings(pipeline or "hlofuse", autotune=True)

    def wrap(f: Callable[..., Any]) -> JittedFunction:
        return JittedFunction(f, _normalize_static(static_argnums), pipeline, backend, threads,
                              subnormals)

    return wrap(fn) if fn is not None else wrap
