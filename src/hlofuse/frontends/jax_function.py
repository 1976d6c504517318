"""`hlofuse.jax_function(f)`: a JAX function hlofuse compiles, usable inside the user's own
`jax.jit`, `jax.grad`, `jax.vmap` and `shard_map`.

    g = hlofuse.jax_function(step)        # or @hlofuse.jax_function(static_argnames="n")
    jax.jit(g)(params, batch)             # one XLA custom call runs hlofuse's compiled step
    jax.grad(lambda p: g(p, batch)[0])    # the backward program is compiled by hlofuse too

The function's dynamic arguments are flattened to array leaves (typed PRNG keys as their key
data) and bound as one `hlofuse_call` (`jax_primitive.py`) of a `Program` made once per
(pytree structure, static arguments, key implementations); jax's transformations apply the
primitive's rules, and jax.jit lowers it to the custom call, compiled once per shape signature.
Called outside a trace, `g` is jax.jit of that binding: jax arrays in, jax arrays out.

Conditions: static arguments are hashable (as for jax.jit); outputs are a pytree of arrays
(typed PRNG keys included). What hlofuse cannot compile runs as jax's own lowering, with a
RuntimeWarning naming the reason (`Program.entry`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np

from hlofuse.backends.subnormals import check as check_subnormals
from hlofuse.errors import InputError
from hlofuse.frontends import jax_primitive
from hlofuse.frontends.jax_values import ArgSpec


def _merge(dyn: tuple[Any, ...], dkw: dict[str, Any], static: tuple[Any, ...]
           ) -> tuple[list[Any], dict[str, Any]]:
    """The call's arguments again from `ArgSpec.split`'s parts."""
    args, kwargs = list(dyn), dict(dkw)
    for where, _, value in sorted((s for s in static if isinstance(s[0], int)),
                                  key=lambda s: s[0]):
        args.insert(where, value)
    for where, _, value in static:
        if isinstance(where, str):
            kwargs[where] = value
    return args, kwargs


def _key_impl(leaf: Any) -> Any:
    dt = jax.typeof(leaf).dtype
    return None if isinstance(dt, np.dtype) else jax.random.key_impl(leaf)


class JaxFunction:
    """What `hlofuse.jax_function(fn)` returns: call it like `fn`, inside or outside a jax
    trace. `programs` lists the programs made so far (for inspection and tests)."""

    def __init__(self, fn: Callable[..., Any], *,
                 static_argnums: int | Sequence[int] | None = None,
                 static_argnames: str | Iterable[str] | None = None,
                 pipeline: str | None = "hlofuse", threads: int | None = None,
                 subnormals: str | None = None) -> None:
        if not callable(fn):
            raise InputError(f"hlofuse.jax_function expects a callable, got {type(fn).__name__}")
        if subnormals is not None:
            check_subnormals(subnormals)
        self.fn = fn
        self.spec = ArgSpec(fn, static_argnums, static_argnames)
        self.options = {"pipeline": pipeline, "threads": threads, "subnormals": subnormals}
        self.name = getattr(fn, "__name__", "fn")
        self._programs: dict[Any, tuple[jax_primitive.Program, dict[Any, Any]]] = {}
        self._jit = jax.jit(self._body, **self.spec.jax_options())
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"hlofuse.jax_function({self.name})"

    @property
    def programs(self) -> list[jax_primitive.Program]:
        return [p for p, _ in self._programs.values()]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._jit(*args, **kwargs)

    def _body(self, *args: Any, **kwargs: Any) -> Any:
        dyn, dkw, static = self.spec.split(args, kwargs)
        leaves, tree = jax.tree_util.tree_flatten((dyn, dkw))
        impls = tuple(_key_impl(leaf) for leaf in leaves)
        program, outs = self._program(tree, static, impls)
        data = [leaf if impl is None else jax.random.key_data(leaf)
                for leaf, impl in zip(leaves, impls, strict=True)]
        values = jax_primitive.call(program, *data)
        out_tree, out_impls = outs[jax_primitive.signature([jax.typeof(d) for d in data])]
        return out_tree.unflatten([
            v if impl is None else jax.random.wrap_key_data(v, impl=impl)
            for v, impl in zip(values, out_impls, strict=True)])

    def _program(self, tree: Any, static: tuple[Any, ...], impls: tuple[Any, ...]
                 ) -> tuple[jax_primitive.Program, dict[Any, Any]]:
        key = (tree, static, impls)
        made = self._programs.get(key)
        if made is None:
            outs: dict[Any, Any] = {}  # input signature -> (output tree, key impls)
            fn = self.fn

            def flat(*data: Any) -> list[Any]:
                leaves = [d if impl is None else jax.random.wrap_key_data(d, impl=impl)
                          for d, impl in zip(data, impls, strict=True)]
                dyn, dkw = tree.unflatten(leaves)
                args, kwargs = _merge(dyn, dkw, static)
                out_leaves, out_tree = jax.tree_util.tree_flatten(fn(*args, **kwargs))
                out_impls = tuple(_key_impl(v) for v in out_leaves)
                outs[jax_primitive.signature([jax.typeof(d) for d in data])] = (out_tree, out_impls)
                return [v if impl is None else jax.random.key_data(v)
                        for v, impl in zip(out_leaves, out_impls, strict=True)]

            made = (jax_primitive.Program(flat, self.name, self.options), outs)
            self._programs[key] = made
        return made


def jax_function(
    fn: Callable[..., Any] | None = None, *,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Iterable[str] | None = None,
    pipeline: str | None = "hlofuse", threads: int | None = None,
    subnormals: str | None = None,
) -> Any:
    """A JAX-traceable function whose body hlofuse compiles (`@jax_function` or
    `@jax_function(static_argnames=...)`): inside jax.jit it is one XLA custom call of the
    program hlofuse compiled; jax.grad, jax.vjp, jax.jvp, jax.vmap and shard_map get programs
    hlofuse compiles from what JAX traces for them. `pipeline`, `threads` and `subnormals` as
    for `hlofuse.jit` (the cpu backend always)."""

    def wrap(f: Callable[..., Any]) -> JaxFunction:
        return JaxFunction(f, static_argnums=static_argnums, static_argnames=static_argnames,
                           pipeline=pipeline, threads=threads, subnormals=subnormals)

    return wrap(fn) if fn is not None else wrap
