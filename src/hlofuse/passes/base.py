"""The pass interface and its composition: `Pass`, `Pipeline`, `Fixpoint`, `Context`.

A pass is a small frozen dataclass whose fields are its options; it has a kebab-case `name`
and one method, `run(module) -> bool`, that rewrites the module in place and says whether it
changed anything (XLA's `HloPassInterface::Run`). Pipelines and fixpoints are composition, not
code inside passes:

    Fixpoint(Pipeline("simplify", [call-inliner, ..., cse, dce]), max_iterations=25)

        iteration 1:  call-inliner* tuple-simplifier* ... cse dce*      (* = changed)
        iteration 2:  call-inliner  tuple-simplifier* ... cse dce
        iteration 3:  nothing changed  -> converged

What a run guarantees:

* passes run in order; after each one `verify(module)` runs when debug checking is on
  (`Pipeline(verify=True)`, `Context(verify=True)` or the environment variable
  `HLOFUSE_VERIFY=1`); a module the verifier rejects raises `PassError` naming the pass;
* each pass's wall time and changed flag are recorded in a `PipelineReport`;
* with a dump directory, the module is written before the first pass (`000-before.hlo`) and
  after every pass that changed it (`001-<pass-name>.hlo`, ...), in the text format our parser
  reads back;
* observers registered on the `Context` are told when each pass starts and ends (the fusion
  trace hooks in here); nothing is global: the context travels with the run;
* a pass that measures (auto-unroll's autotune) asks the context of the run in progress for
  its timer (`passes/measure.py`: `Context.timer`, installed by whoever runs the pipeline:
  `api` installs the backends' one); a pipeline run inside a pass without a context of its
  own keeps the outer run's timer;
* a `Fixpoint` that hits its iteration limit still returns normally, with a warning in the
  report and on the `hlofuse.passes` logger;
* a `Fixpoint` equal (by value) to one that converged earlier in the same run, with no pass
  having changed the module since, is skipped: its passes would change nothing (each is a
  function of the module and its options). The `hlofuse` pipeline reruns simplification
  after each of its transformations, which on most programs change nothing;
* passes may keep facts between their runs in `module.caches`, which lives for one top-level
  run: each fact is valid by the `Computation.version`s it recorded, and a pass that changes
  the module without declaring `exact_versions = True` (all its edits go through the IR's
  mutators, or `touch()` the computation) empties the caches;
* the cyclic garbage collector is held off while a top-level pipeline runs (`gcpause`):
  passes allocate many linked objects that outlive young collections, and each full
  collection then walks every object of the process (the module, and in a JAX session all of
  JAX), 0.3 s each there; what the run leaves as garbage is collected afterwards.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from hlofuse import env, gcpause
from hlofuse.errors import HloVerifyError, KeptFactError, PassError
from hlofuse.ir.module import Module

if TYPE_CHECKING:
    from hlofuse.passes.measure import Timer

logger = logging.getLogger("hlofuse.passes")

VERIFY_ENV = "HLOFUSE_VERIFY"
# Debug checking of facts kept between pass runs (`module.caches`): each kept fact is
# recomputed where it is reused, and a difference fails (the test suite passes with it).
CHECK_KEPT_ENV = "HLOFUSE_CHECK_KEPT"


def checking_kept() -> bool:
    return env.flag(CHECK_KEPT_ENV)


def check_kept(same: bool, what: str) -> None:
    """Under HLOFUSE_CHECK_KEPT: raise `KeptFactError` naming `what` unless `same`."""
    if not same:
        raise KeptFactError(f"{CHECK_KEPT_ENV}: {what} differs from a fresh computation")


@runtime_checkable
class Pass(Protocol):
    """A module-to-module rewrite. `run` returns whether it changed the module."""

    @property
    def name(self) -> str: ...

    def run(self, module: Module) -> bool: ...


# ----- observation ------------------------------------------------------------------------


@dataclass(frozen=True)
class PassEvent:
    """What observers hear: `phase` is "start" or "end"; `changed`/`seconds` are set at the end.

    `path` names the pass inside its pipelines (`simplify/dce`); `iteration` is the fixpoint
    iteration (1-based) or 0 outside a fixpoint.
    """

    phase: str
    pass_name: str
    path: str
    module: Module
    iteration: int = 0
    changed: bool = False
    seconds: float = 0.0


Observer = Callable[[PassEvent], None]


@dataclass
class Context:
    """Per-run settings and observers. Created by the caller; nothing here is global."""

    verify: bool = False
    dump_dir: Path | str | None = None
    observers: list[Observer] = field(default_factory=list)
    # what passes that measure time candidates with (`passes/measure.py`); None: nothing times
    # here, and they decide by their cost model
    timer: Timer | None = None

    def notify(self, event: PassEvent) -> None:
        for observer in self.observers:
            observer(event)

    @property
    def verify_enabled(self) -> bool:
        return self.verify or env.flag(VERIFY_ENV)


_ACTIVE: ContextVar[Context | None] = ContextVar("hlofuse_pass_context", default=None)


def active_context() -> Context | None:
    """The context of the pipeline run in progress (in this thread or task), None outside one:
    how a pass reaches what its run was given (`passes/measure.py`)."""
    return _ACTIVE.get()


# ----- reports ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PassRecord:
    """One pass execution."""

    name: str
    path: str
    changed: bool
    seconds: float
    iteration: int = 0


@dataclass
class PipelineReport:
    """Per-pass timing and changed flags of one pipeline run, plus warnings and dump files."""

    name: str
    records: list[PassRecord] = field(default_factory=list)
    seconds: float = 0.0
    iterations: int = 0
    converged: bool = True
    warnings: list[str] = field(default_factory=list)
    dumps: list[Path] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(r.changed for r in self.records)

    def totals(self) -> dict[str, tuple[int, int, float]]:
        """pass name -> (runs, runs that changed, total seconds), in first-run order."""
        out: dict[str, tuple[int, int, float]] = {}
        for r in self.records:
            runs, changed, secs = out.get(r.name, (0, 0, 0.0))
            out[r.name] = (runs + 1, changed + int(r.changed), secs + r.seconds)
        return out

    def __str__(self) -> str:
        lines = [f"pipeline {self.name}: {self.seconds * 1e3:.1f} ms"
                 + (f", {self.iterations} iteration(s)" if self.iterations else "")
                 + ("" if self.converged else " (did not converge)")]
        lines.append(f"  {'pass':<28} {'runs':>5} {'changed':>8} {'ms':>9}")
        for name, (runs, changed, secs) in self.totals().items():
            lines.append(f"  {name:<28} {runs:>5} {changed:>8} {secs * 1e3:>9.2f}")
        lines.extend(f"  warning: {w}" for w in self.warnings)
        return "\n".join(lines)


# ----- running ----------------------------------------------------------------------------


@dataclass
class _Run:
    """State of one top-level run: the context, the report being filled, the dump counter."""

    context: Context
    report: PipelineReport
    dump_dir: Path | None
    dump_index: int = 0
    iteration: int = 0
    # fixpoints (by value) that converged with no change to the module since: run again, they
    # would change nothing (passes are functions of the module and their options)
    settled: set[Fixpoint] = field(default_factory=set)

    def dump(self, module: Module, label: str) -> None:
        if self.dump_dir is None:
            return
        from hlofuse.text import print_module

        path = self.dump_dir / f"{self.dump_index:03d}-{label}.hlo"
        self.dump_index += 1
        path.write_text(print_module(module))
        self.report.dumps.append(path)


def _run_one(p: Pass, module: Module, run: _Run, prefix: str) -> bool:
    """Run one pass (or nested pipeline) with timing, observers, verification and dumps."""
    if isinstance(p, (Pipeline, Fixpoint)):
        return p._execute(module, run, prefix)
    path = f"{prefix}/{p.name}" if prefix else p.name
    run.context.notify(PassEvent("start", p.name, path, module, run.iteration))
    t0 = time.perf_counter()
    try:
        changed = bool(p.run(module))
    except PassError:
        raise
    except HloVerifyError as exc:
        raise PassError(f"pass {p.name} failed: {exc}") from exc
    seconds = time.perf_counter() - t0
    run.report.records.append(PassRecord(p.name, path, changed, seconds, run.iteration))
    run.context.notify(PassEvent("end", p.name, path, module, run.iteration, changed, seconds))
    logger.debug("%s: changed=%s %.2f ms", path, changed, seconds * 1e3)
    if changed:
        run.settled.clear()
        if module.caches and not getattr(p, "exact_versions", False):
            module.caches.clear()  # it may have changed what no version counts
        if run.context.verify_enabled:
            verify_after(module, p.name)
        run.dump(module, p.name)
    return changed


def verify_after(module: Module, pass_name: str) -> None:
    """Run the verifier; turn its complaint into a `PassError` that names the pass."""
    from hlofuse.ir.verifier import verify

    try:
        verify(module)
    except HloVerifyError as exc:
        raise PassError(f"module is invalid after pass {pass_name}: {exc}") from exc


@dataclass(frozen=True)
class Pipeline:
    """Passes run in order. Itself a pass, so pipelines nest."""

    name: str
    passes: Sequence[Pass]
    verify: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "passes", tuple(self.passes))

    def run(self, module: Module) -> bool:
        return self.execute(module).changed

    def execute(
        self,
        module: Module,
        context: Context | None = None,
        *,
        dump_dir: Path | str | None = None,
    ) -> PipelineReport:
        """Run on `module` and return the report (the top-level entry point)."""
        return _execute_top(self, self.name, self.verify, module, context, dump_dir)

    def _execute(self, module: Module, run: _Run, prefix: str) -> bool:
        path = f"{prefix}/{self.name}" if prefix else self.name
        outer_verify = run.context.verify
        run.context.verify = outer_verify or self.verify
        try:
            changed = False
            for p in self.passes:
                changed |= _run_one(p, module, run, path)
            return changed
        finally:
            run.context.verify = outer_verify


@dataclass(frozen=True)
class Fixpoint:
    """Rerun `pipeline` until no pass changes anything, at most `max_iterations` times
    (XLA's `HloPassFix`, limit 25)."""

    pipeline: Pipeline
    max_iterations: int = 25

    @property
    def name(self) -> str:
        return self.pipeline.name

    def run(self, module: Module) -> bool:
        return self.execute(module).changed

    def execute(
        self,
        module: Module,
        context: Context | None = None,
        *,
        dump_dir: Path | str | None = None,
    ) -> PipelineReport:
        return _execute_top(self, self.name, self.pipeline.verify, module, context,
                            dump_dir)

    def _execute(self, module: Module, run: _Run, prefix: str) -> bool:
        settled = _hashable(self)
        if settled and self in run.settled:
            logger.debug("%s: skipped (converged, module unchanged since)", self.name)
            return False
        changed_any = False
        outer = run.iteration
        for i in range(1, self.max_iterations + 1):
            run.iteration = i
            changed = self.pipeline._execute(module, run, prefix)
            run.report.iterations = max(run.report.iterations, i)
            changed_any |= changed
            if not changed:
                if settled:
                    run.settled.add(self)
                break
        else:
            message = (
                f"fixpoint {self.name} hit its limit of {self.max_iterations} "
                "iterations and was still changing the module"
            )
            run.report.warnings.append(message)
            run.report.converged = False
            logger.warning(message)
        run.iteration = outer
        return changed_any


def leaf_passes(p: Pass) -> list[Pass]:
    """The passes `p` runs, in order, nested pipelines and fixpoints flattened."""
    if isinstance(p, Pipeline):
        return [leaf for q in p.passes for leaf in leaf_passes(q)]
    if isinstance(p, Fixpoint):
        return leaf_passes(p.pipeline)
    return [p]


def _hashable(p: object) -> bool:
    try:
        hash(p)
    except TypeError:
        return False
    return True


def _execute_top(
    p: Pipeline | Fixpoint,
    name: str,
    verify: bool,
    module: Module,
    context: Context | None,
    dump_dir: Path | str | None,
) -> PipelineReport:
    outer_ctx = _ACTIVE.get()
    if context is None:  # (a run inside a pass keeps the outer run's timer, nothing else)
        context = Context(timer=outer_ctx.timer if outer_ctx is not None else None)
    # a private copy: nested pipelines toggle `verify` on it while they run
    ctx = Context(verify=context.verify or verify, dump_dir=context.dump_dir,
                  observers=context.observers, timer=context.timer)
    directory = dump_dir if dump_dir is not None else ctx.dump_dir
    report = PipelineReport(name)
    run = _Run(ctx, report, Path(directory) if directory is not None else None)
    if ctx.verify_enabled:
        verify_after(module, "(none: the input)")
    if run.dump_dir is not None:
        run.dump_dir.mkdir(parents=True, exist_ok=True)
        run.dump(module, "before")
    t0 = time.perf_counter()
    outer = module.caches  # (a pipeline run inside a pass shares the outer run's caches)
    if outer is None:
        module.caches = {}
    token = _ACTIVE.set(ctx)
    try:
        with gcpause.paused():
            _run_one(p, module, run, "")
    finally:
        _ACTIVE.reset(token)
        if outer is None:
            module.caches = None
    report.seconds = time.perf_counter() - t0
    return report
