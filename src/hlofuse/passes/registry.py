"""Pass names -> pass factories, and the `name{key=value,...}` spec language.

    parse_pass_spec("inline,dce,algebraic-simplifier{max_iterations=3},unroll-while{factor=4}")
        -> [CallInliner(), Dce(), AlgebraicSimplifier(max_iterations=3),
            WhileLoopUnroller(factor=4)]

A pass registers itself with the `register(name, *aliases)` class decorator. Its options are
its dataclass fields, or those it declares (`option_types()`: the fusion passes' settings);
option text is converted to the option's type (int, float, bool as `true`/`false`, str; `none`
for optional fields). Unknown passes and unknown or malformed options raise `PassError` with
the list of valid names, so the CLI's message says what to type.

Conditions enforced:

* names are kebab-case and unique (aliases included);
* every option is a field of the pass's dataclass (or one it declares); each appears at most
  once;
* braces balance; commas inside `{...}` separate options, commas outside separate passes.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from hlofuse.errors import PassError
from hlofuse.passes.base import Pass

T = TypeVar("T")

_PASSES: dict[str, type] = {}
_ALIASES: dict[str, str] = {}
_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")

# Packages whose modules register passes when imported (loaded on first lookup).
_PASS_PACKAGES = ("hlofuse.passes.simplify", "hlofuse.passes.fusion.registered",
                  "hlofuse.passes.single_device")


def register(name: str, *aliases: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: make a pass dataclass available as `name` (and its aliases)."""

    def wrap(cls: type[T]) -> type[T]:
        for n in (name, *aliases):
            if not _NAME.match(n):
                raise ValueError(f"pass name {n!r} is not kebab-case")
            owner = _PASSES.get(n) or _PASSES.get(_ALIASES.get(n, ""))
            if owner is not None and owner is not cls:
                raise ValueError(f"pass name {n!r} is already registered")
        _PASSES[name] = cls
        for a in aliases:
            _ALIASES[a] = name
        return cls

    return wrap


def _load() -> None:
    for pkg in _PASS_PACKAGES:
        importlib.import_module(pkg)


def available_passes() -> list[str]:
    """Registered pass names (aliases not included), sorted."""
    _load()
    return sorted(_PASSES)


def pass_class(name: str) -> type:
    _load()
    canonical = _ALIASES.get(name, name)
    cls = _PASSES.get(canonical)
    if cls is None:
        valid = ", ".join(sorted(_PASSES))
        aliases = ", ".join(f"{a} (= {n})" for a, n in sorted(_ALIASES.items()))
        raise PassError(f"unknown pass {name!r}; valid passes: {valid}; aliases: {aliases}")
    return cls


def pass_options(cls: type) -> dict[str, Any]:
    """Option name -> resolved type, for a registered pass class: a class that declares its
    options (`option_types()`, the fusion passes) or a dataclass's init fields."""
    declared = getattr(cls, "option_types", None)
    if declared is not None:
        return dict(declared())
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, str) for f in dataclasses.fields(cls) if f.init}


def create_pass(name: str, options: dict[str, str] | None = None) -> Pass:
    """Instantiate pass `name` with options given as text."""
    cls = pass_class(name)
    fields = pass_options(cls)
    kwargs: dict[str, Any] = {}
    for key, text in (options or {}).items():
        if key not in fields:
            valid = ", ".join(f"{k}: {_type_name(t)}" for k, t in fields.items()) or "none"
            raise PassError(f"pass {name!r} has no option {key!r}; its options: {valid}")
        kwargs[key] = _convert(name, key, text, fields[key])
    instance: Pass = cls(**kwargs)
    return instance


def parse_pass_spec(spec: str) -> list[Pass]:
    """Parse `a,b{k=v,k2=v2},c` into pass instances, in order."""
    passes: list[Pass] = []
    for item in _split_top(spec, ",", spec):
        item = item.strip()
        if not item:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_-]+)\s*(?:\{(.*)\})?", item, re.S)
        if m is None:
            raise PassError(f"malformed pass spec item {item!r} in {spec!r}; expected "
                            "name or name{key=value,...}")
        name, body = m.group(1), m.group(2)
        options: dict[str, str] = {}
        if body:
            for opt in _split_top(body, ",", spec):
                opt = opt.strip()
                if not opt:
                    continue
                key, eq, value = opt.partition("=")
                if not eq:
                    raise PassError(f"option {opt!r} of pass {name!r} needs the form key=value")
                key = key.strip()
                if key in options:
                    raise PassError(f"option {key!r} given twice for pass {name!r}")
                options[key] = value.strip()
        passes.append(create_pass(name, options))
    if not passes:
        raise PassError(f"empty pass spec {spec!r}")
    return passes


def _split_top(text: str, sep: str, spec: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                raise PassError(f"unbalanced '}}' in pass spec {spec!r}")
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise PassError(f"unbalanced '{{' in pass spec {spec!r}")
    parts.append(text[start:])
    return parts


def _type_name(t: Any) -> str:
    return getattr(t, "__name__", None) or str(t)


def _convert(pass_name: str, key: str, text: str, t: Any) -> Any:
    optional = False
    if isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union:
        args = [a for a in typing.get_args(t) if a is not type(None)]
        optional = len(args) < len(typing.get_args(t))
        t = args[0] if len(args) == 1 else str
    if optional and text.lower() == "none":
        return None
    where = f"option {key} of pass {pass_name!r}"
    if t is bool:
        low = text.lower()
        if low in ("true", "1"):
            return True
        if low in ("false", "0"):
            return False
        raise PassError(f"{where} must be true or false, got {text!r}")
    if t is int:
        try:
            return int(text, 0)
        except ValueError:
            raise PassError(f"{where} must be an integer, got {text!r}") from None
    if t is float:
        try:
            return float(text)
        except ValueError:
            raise PassError(f"{where} must be a number, got {text!r}") from None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text
