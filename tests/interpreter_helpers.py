"""Helpers shared by the interpreter tests: run small HLO-text modules, build arrays."""

from __future__ import annotations

import numpy as np

from hlofuse.backends import interpreter
from hlofuse.text import parse

I32_MIN = np.iinfo(np.int32).min
I32_MAX = np.iinfo(np.int32).max


def run(text: str, *args: np.ndarray) -> list[np.ndarray]:
    return interpreter.run(parse("HloModule t\n\n" + text), *args)


def unary(op: str, src: str, dst: str, x: np.ndarray, attrs: str = "") -> np.ndarray:
    extra = f", {attrs}" if attrs else ""
    text = f"ENTRY e {{\n  p = {src} parameter(0)\n  ROOT r = {dst} {op}(p){extra}\n}}\n"
    return run(text, x)[0]


def binary(
    op: str, src: str, dst: str, a: np.ndarray, b: np.ndarray, attrs: str = ""
) -> np.ndarray:
    extra = f", {attrs}" if attrs else ""
    text = (
        f"ENTRY e {{\n  a = {src} parameter(0)\n  b = {src} parameter(1)\n"
        f"  ROOT r = {dst} {op}(a, b){extra}\n}}\n"
    )
    return run(text, a, b)[0]


def i32(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int32)


def f32(*v: float) -> np.ndarray:
    return np.array(v, dtype=np.float32)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
