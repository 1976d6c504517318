"""Fuzzing the front end: mutated copies of the bundled example modules go through parse, the
`simplify` and `xla` pipelines and the interpreter; only hlofuse errors may come out, and
nothing may hang.

Mutations (applied one to three at a time, at positions hypothesis picks): a character replaced
by a hostile one (brackets, quotes, `%`, NUL, ESC, CSI, bidi override, U+2028, ...); a token
deleted or doubled; a number replaced by a hostile one (0, -1, 2^31, 2^63, 2^64, 30 and 5000
digits); a shape wrapped in 2 to 3000 tuple parentheses or replaced by a rank 63 to 200 shape;
thousands of `{` inserted; two lines swapped (use before definition, cycles); hostile text
appended inside a string (`*/`, `</script>`, escapes).

Reproducible: hypothesis runs derandomized (its seed is derived from the test) with no example
database, and every stage runs under a wall-clock alarm (`_deadline`). Parse and the pipelines
must finish within their alarm (a hang is a failure); the interpreter may legitimately run long
(a mutated trip count), so there a timeout only ends that example.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlofuse.backends import interpreter
from hlofuse.errors import HloError
from hlofuse.ir.module import Module
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse

EXAMPLES = {p.name: p.read_text() for p in resources.files("hlofuse.examples").iterdir()
            if p.name.endswith(".hlo")}
# The small examples most of the time (fast); the CartPole loops now and then.
SMALL = sorted(n for n, t in EXAMPLES.items() if len(t) < 17000)

TOKEN = re.compile(r"%?[A-Za-z_$][\w.\-$]*|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
                   r"|\"(?:[^\"\\\n]|\\.)*\"|\S")
NUMBER = re.compile(r"(?<![\w.])-?\d+(?![\w.])")
SHAPE = re.compile(r"\b[a-z]+\d*\[[0-9,]*\](?:\{[0-9,]*\})?")
STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
HOSTILE_CHARS = [*"{}()[],=:%\"\\*/<>?#-.0x", "\n", "\x00", "\x1b", "\x9b", "\u202e", "\u2028",
                 "é", "\t"]
HOSTILE_NUMBERS = ["0", "-1", "1", "2", "3", "7", "16", "65536", "2147483648",
                   "9223372036854775807", "9223372036854775808", "-9223372036854775808",
                   "18446744073709551616", "1" * 30, "1" * 5000]
HOSTILE_STRINGS = ["*/", "\\\\", "<!--", "</script>", "\\x1b[2J", "\\u202e", "\\\"", "%00"]
KINDS = ("flip", "delete", "duplicate", "number", "nest", "rank", "braces", "swap", "string")

# Seconds each stage may take on a loaded 2-core machine (they take milliseconds).
DEADLINE = {"parse": 20.0, "simplify": 30.0, "xla": 60.0}
INTERPRETER_SECONDS = 1.0
MAX_INTERPRETED_ELEMENTS = 1 << 20


def mutate(text: str, kind: str, a: int, b: int) -> str:
    """One mutation of `kind`; `a` picks the place and `b` the payload."""
    def pick(pattern: re.Pattern[str]) -> tuple[int, int] | None:
        spans = [m.span() for m in pattern.finditer(text)]
        return spans[a % len(spans)] if spans else None

    if kind == "flip":
        i = a % len(text)
        return text[:i] + HOSTILE_CHARS[b % len(HOSTILE_CHARS)] + text[i + 1:]
    if kind == "braces":
        i = a % len(text)
        return text[:i] + "{" * (10, 600, 5000)[b % 3] + text[i:]
    if kind == "swap":
        lines = text.split("\n")
        i, j = a % len(lines), b % len(lines)
        lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)
    pattern = {"delete": TOKEN, "duplicate": TOKEN, "number": NUMBER, "nest": SHAPE,
               "rank": SHAPE, "string": STRING}[kind]
    span = pick(pattern)
    if span is None:
        return text
    s, e = span
    if kind == "delete":
        return text[:s] + text[e:]
    if kind == "duplicate":
        return text[:s] + text[s:e] * 2 + text[e:]
    if kind == "number":
        return text[:s] + HOSTILE_NUMBERS[b % len(HOSTILE_NUMBERS)] + text[e:]
    if kind == "nest":
        depth = (2, 63, 64, 65, 300, 3000)[b % 6]
        return text[:s] + "(" * depth + text[s:e] + ")" * depth + text[e:]
    if kind == "rank":
        return text[:s] + "f32[" + ",".join(["1"] * (63, 64, 65, 200)[b % 4]) + "]" + text[e:]
    return text[:e - 1] + HOSTILE_STRINGS[b % len(HOSTILE_STRINGS)] + text[e - 1:]


class _Alarm(BaseException):
    """Raised by SIGALRM; a BaseException, so no `except Exception` in hlofuse swallows it."""


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    def ring(signum: int, frame: object) -> None:
        raise _Alarm

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _stage(name: str, text: str, fn) -> object:  # type: ignore[no-untyped-def]
    """Run one stage: its value, or None when it raised an hlofuse error. Anything else, or
    running past its deadline, fails the test with the stage and the input."""
    try:
        with _deadline(DEADLINE[name]):
            return fn()
    except HloError:
        return None
    except _Alarm:
        pytest.fail(f"{name} hung (more than {DEADLINE[name]} s) on:\n{text[:3000]}")
    except BaseException as exc:
        pytest.fail(f"{name} raised {type(exc).__name__}: {exc} on:\n{text[:3000]}")


def _interpret(module: Module, text: str) -> None:
    params = module.entry.parameters
    if not all(isinstance(p.shape, ArrayShape) for p in params):
        return
    if sum(p.shape.size for p in params) > MAX_INTERPRETED_ELEMENTS:  # type: ignore[union-attr]
        return
    args = [np.ones(p.shape.dims, p.shape.dtype.np) for p in params]  # type: ignore[union-attr]
    try:
        with _deadline(INTERPRETER_SECONDS):
            interpreter.run(module, *args)
    except (HloError, _Alarm):
        pass
    except BaseException as exc:
        pytest.fail(f"the interpreter raised {type(exc).__name__}: {exc} on:\n{text[:3000]}")


def check_text(text: str, *, interpret: bool = True) -> None:
    """The fuzz property for one input text."""
    module = _stage("parse", text, lambda: parse(text))
    if not isinstance(module, Module):
        return
    for pipeline in ("simplify", "xla"):
        copy = _stage("parse", text, lambda: parse(text))
        assert isinstance(copy, Module)
        _stage(pipeline, text, lambda c=copy, p=pipeline: run_pipeline(c, p))  # type: ignore[misc]
    if interpret:
        _interpret(module, text)


mutation = st.tuples(st.sampled_from(KINDS), st.integers(0, 2**31), st.integers(0, 2**31))


@settings(derandomize=True, database=None, deadline=None, max_examples=120,
          suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(SMALL), mutations=st.lists(mutation, min_size=1, max_size=3))
def test_mutated_small_examples(name: str, mutations: list[tuple[str, int, int]]) -> None:
    text = EXAMPLES[name]
    for kind, a, b in mutations:
        text = mutate(text, kind, a, b)
    check_text(text)


# Most of the mutations above break the syntax (about 1 in 10 still parses); these keep it more
# often, so the pipelines and the interpreter see many valid but odd modules.
semantic = st.tuples(st.sampled_from(("number", "string", "swap", "duplicate")),
                     st.integers(0, 2**31), st.integers(0, 2**31))


@settings(derandomize=True, database=None, deadline=None, max_examples=60,
          suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(SMALL), mutations=st.lists(semantic, min_size=1, max_size=2))
def test_mutated_values_of_small_examples(name: str,
                                          mutations: list[tuple[str, int, int]]) -> None:
    text = EXAMPLES[name]
    for kind, a, b in mutations:
        text = mutate(text, kind, a, b)
    check_text(text)


@settings(derandomize=True, database=None, deadline=None, max_examples=12,
          suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(set(EXAMPLES) - set(SMALL))), mutation=mutation)
def test_mutated_cartpole_examples(name: str, mutation: tuple[str, int, int]) -> None:
    check_text(mutate(EXAMPLES[name], *mutation), interpret=False)


def test_the_examples_themselves_pass_every_stage() -> None:
    for text in EXAMPLES.values():
        module = parse(text)
        check_text(text, interpret=False)
        assert module.entry.parameters


def test_every_mutation_kind_changes_the_text() -> None:
    text = EXAMPLES["softmax.hlo"]
    for kind in KINDS:
        assert any(mutate(text, kind, a, 3) != text for a in range(5)), kind


def test_the_deadline_catches_a_hang() -> None:
    def spin() -> None:
        while True:
            pass

    with pytest.raises(_Alarm), _deadline(0.05):
        spin()
