"""hlofuse: XLA's operator-fusion compiler re-implemented in Python.

    import hlofuse
    m = hlofuse.parse(text)                       # HLO text -> Module
    exe = hlofuse.compile(m)                       # pipeline "xla", backend "cpu" (generated C)
    outs = exe(*arrays)                            # tuple of numpy arrays
    print(exe.profile(*arrays))                    # per-kernel times (cpu backend)
    exe = hlofuse.compile(m, pipeline="simplify", backend="interpreter")  # the numpy reference
    f = hlofuse.jit(fn)                            # like jax.jit (needs the jax extra)
    g = hlofuse.jax_function(fn)                   # inside jax.jit / grad / vmap / shard_map
    m = hlofuse.from_jax(fn, *args)                # lower a JAX function (needs jax)
    print(hlofuse.explain(m).to_text())            # kernels per iteration, why each boundary
    print(hlofuse.lint(m))                         # frontend patterns that cost kernels
"""

from __future__ import annotations

from typing import Any

from hlofuse import native

native.install()  # the compiled pass core, before any module of it is imported (native.py)

from hlofuse.api import Executable, compile  # noqa: E402
from hlofuse.errors import (  # noqa: E402
    AllocationError,
    CacheDirError,
    CompileError,
    HloError,
    HloParseError,
    HloVerifyError,
    InputError,
    InterpreterError,
    LimitError,
    PassError,
)

__version__ = "0.1.0"

__all__ = [
    "AllocationError",
    "CacheDirError",
    "CompileError",
    "Executable",
    "HloError",
    "HloParseError",
    "HloVerifyError",
    "InputError",
    "InterpreterError",
    "LimitError",
    "PassError",
    "compile",
    "explain",
    "from_jax",
    "jax_function",
    "jit",
    "lint",
    "parse",
    "print_module",
]


def parse(text: str, **kwargs: Any) -> Any:
    """Parse HLO text (long or short form) into a verified Module."""
    from hlofuse.text import parse as _parse

    return _parse(text, **kwargs)


def print_module(module: Any, **kwargs: Any) -> str:
    from hlofuse.text import print_module as _print

    return _print(module, **kwargs)


def __getattr__(name: str) -> Any:
    # The JAX frontend is imported lazily so the core never needs jax.
    if name in ("jit", "from_jax"):
        from hlofuse.frontends import jax as _jax

        return getattr(_jax, name)
    if name == "jax_function":
        from hlofuse.frontends.jax_function import jax_function

        return jax_function
    if name == "explain":
        from hlofuse.tools.explain import explain

        return explain
    if name == "lint":
        from hlofuse.tools.lint import lint

        return lint
    raise AttributeError(f"module 'hlofuse' has no attribute {name!r}")
