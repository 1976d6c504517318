"""Runs generated programs three ways and compares: jax.jit (the oracle), hlofuse's interpreter
(the spec) and the cpu backend; records (opcode, element type) coverage; shrinks failures.

A batch of programs is lowered as one jitted function returning every program's outputs (one
module, one C compile); when anything in a batch disagrees or fails, its programs rerun one by
one so each disagreement names its program. Per program and backend the outcome is:

    match        every output has jax's shape and dtype and its value (compare.py)
    mismatch     it ran, an output differs from jax.jit's
    unsupported  hlofuse refused it with an HloError (an honest refusal, counted, not a bug)
    crash        any other exception (always a bug)
    jax-error    jax.jit itself failed to run the program (no oracle; backend "jax")

Which of the three is wrong: when the interpreter and the cpu backend agree with each other but
not with jax, hlofuse's spec is suspect (or jax's documented behaviour differs); when only one
backend differs, that backend is wrong. `shrink_module` cuts a disagreeing module down to the
smallest prefix of its entry computation whose root still makes the two backends disagree (dead
instructions removed): the minimal HLO module a bug report needs.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from hlofuse.errors import HloError
from hlofuse.frontends.fuzz.compare import compare
from hlofuse.frontends.fuzz.ops import Program
from hlofuse.frontends.fuzz.recorded import recorded

BACKENDS = ("interpreter", "cpu")


@dataclass
class Outcome:
    program: Program
    backend: str
    status: str
    detail: str = ""


@dataclass
class Coverage:
    """(opcode, element type) pairs seen in the lowered modules: every instruction's result
    type and its operands' types (each leaf of a tuple: while, conditional, sort, tuple)."""

    pairs: dict[tuple[str, str], int] = field(default_factory=dict)

    def add_text(self, text: str) -> None:
        from hlofuse.ir.shape import leaves
        from hlofuse.text import parse

        try:
            module = parse(text)
        except HloError:  # refused by the parser or verifier: an outcome of its own
            return
        for instr in module.all_instructions():
            for shape in (instr.shape, *(o.shape for o in instr.operands)):
                for s in leaves(shape):
                    key = (instr.opcode.value, s.dtype.name)
                    self.pairs[key] = self.pairs.get(key, 0) + 1


def execute(backend: str, text: str, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    from hlofuse.api import compile as hf_compile
    from hlofuse.backends import interpreter
    from hlofuse.text import parse

    if backend == "interpreter":
        return [np.asarray(a) for a in interpreter.run(parse(text), *args)]
    return [np.asarray(a) for a in hf_compile(text, backend="cpu")(*args)]


def _batch(programs: Sequence[Program]) -> tuple[Any, list[np.ndarray]]:
    counts = [len(p.args) for p in programs]

    def fn(*flat: Any) -> tuple[Any, ...]:
        out, i = [], 0
        for p, n in zip(programs, counts, strict=True):
            out.append(p.fn(*flat[i:i + n]))
            i += n
        return tuple(out)

    return fn, [a for p in programs for a in p.args]


def lower(programs: Sequence[Program]) -> tuple[str, list[np.ndarray], list[list[np.ndarray]]]:
    """The HLO text of the batch, its flat arguments and jax.jit's outputs per program."""
    fn, flat = _batch(programs)
    jitted = jax.jit(fn, keep_unused=True)
    want = jitted(*flat)
    text = jitted.lower(*flat).as_text(dialect="hlo")
    return text, flat, [[np.asarray(x) for x in jax.tree_util.tree_leaves(w)] for w in want]


def run_batch(programs: Sequence[Program], cov: Coverage | None = None,
              backends: Sequence[str] = BACKENDS) -> list[Outcome] | None:
    """Outcomes of every program on every backend, or None when the batch as a whole raised
    (the caller reruns its programs singly)."""
    text, flat, wants = lower(programs)
    if cov is not None:
        cov.add_text(text)
    out: list[Outcome] = []
    for backend in backends:
        try:
            got = execute(backend, text, flat)
        except HloError as exc:
            if len(programs) > 1:
                return None
            out.append(Outcome(programs[0], backend, "unsupported", f"{type(exc).__name__}: {exc}"))
            continue
        except Exception as exc:
            if len(programs) > 1:
                return None
            tb = "".join(traceback.format_exception(exc)[-2:])
            out.append(Outcome(programs[0], backend, "crash", f"{type(exc).__name__}: {tb}"))
            continue
        i = 0
        for p, want in zip(programs, wants, strict=True):
            mine = got[i:i + len(want)]
            detail = compare(mine, want, p.tol)
            why = recorded(p, mine, want) if detail else ""
            status = "recorded" if why else ("mismatch" if detail else "match")
            out.append(Outcome(p, backend, status, f"{why}: {detail}" if why else detail))
            i += len(want)
    return out


def run_programs(programs: Sequence[Program], cov: Coverage | None = None,
                 batch: int = 8) -> list[Outcome]:
    """Every program on both backends, `batch` per module; singly when a batch fails."""
    out: list[Outcome] = []
    for i in range(0, len(programs), batch):
        group = programs[i:i + batch]
        try:
            res = run_batch(group, cov) if len(group) > 1 else None
        except Exception:
            res = None
        if res is not None and all(o.status in ("match", "recorded") for o in res):
            out.extend(res)
            continue
        for p in group:
            try:
                single = run_batch([p], cov if res is None else None)
            except Exception as exc:  # jax.jit itself failed on it: no oracle
                out.append(Outcome(p, "jax", "jax-error", f"{type(exc).__name__}: {exc}"[:300]))
                continue
            assert single is not None
            out.extend(single)
    return out


def verdict(outcomes: Sequence[Outcome]) -> str:
    """Which of the three is wrong, from one program's outcomes."""
    bad = {o.backend for o in outcomes if o.status in ("mismatch", "crash")}
    if bad == set(BACKENDS):
        return "both backends differ from jax.jit (interpreter spec or jax suspect)"
    if bad:
        return f"{bad.pop()} wrong (the other backend matches jax.jit)"
    return ""


# ----- shrinking ----------------------------------------------------------------------------


def _disagree(text: str, args: Sequence[np.ndarray], tol: str) -> bool:
    try:
        a = execute("interpreter", text, args)
    except Exception:
        return False
    try:
        b = execute("cpu", text, args)
    except HloError:
        return False
    except Exception:
        return True
    return bool(compare(b, a, tol))


def shrink_module(text: str, args: Sequence[np.ndarray], tol: str) -> str | None:
    """The smallest module (entry prefix rooted at one instruction, dead code removed) on which
    the interpreter and the cpu backend still disagree; None when the whole module does not."""
    from hlofuse.passes.simplify.dce import dce_computation
    from hlofuse.text import parse, print_module

    if not _disagree(text, args, tol):
        return None
    names = [i.name for i in parse(text).entry.post_order() if i.opcode.value != "parameter"]
    for name in names:
        module = parse(text)
        comp = module.entry
        instr = next(i for i in comp.instructions if i.name == name)
        comp.root = instr
        dce_computation(comp)
        module.header_attrs.pop("entry_computation_layout", None)
        try:
            small = print_module(module)
        except Exception:
            continue
        if _disagree(small, args, tol):
            return small
    return text

