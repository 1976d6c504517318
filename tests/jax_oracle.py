"""jax.jit as the oracle for the interpreter and the cpu backend: a program lowered by jax.jit
run on either hlofuse backend, under 64-bit jax types (test modules import `x64`, an autouse
fixture, so the switch holds for their tests only and never leaks into later ones)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np
import pytest

from hlofuse.api import compile as hf_compile
from hlofuse.backends import interpreter
from hlofuse.text import parse

BACKENDS = ("interpreter", "cpu")


@pytest.fixture(autouse=True)
def x64() -> Iterator[None]:
    with jax.enable_x64(True):
        yield


def run_on(backend: str, f: Callable[..., Any], args: Sequence[np.ndarray], *,
           pipeline: str = "xla", subnormals: str = "flush") -> list[np.ndarray]:
    """`f` lowered by jax.jit for `args`, run on `backend` ("interpreter" or "cpu"; the
    interpreter runs the module as lowered), its outputs as numpy arrays."""
    text = jax.jit(f).lower(*args).as_text(dialect="hlo")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if backend == "interpreter":
            out = interpreter.run(parse(text), *args, subnormals=subnormals)
        else:
            out = hf_compile(text, pipeline=pipeline, backend="cpu",
                             subnormals=subnormals)(*args)
    return [np.asarray(o) for o in out]
