"""The backends hlofuse can run a module on, by name: what `hlofuse.compile(..., backend=)`,
`hlofuse.jit`, `hlofuse run --backend` and `hlofuse emit` dispatch through.

    get("cpu").compile(module)      an optimised module -> a runner (callable on numpy arrays)
    default()                       the first available backend in preference order

A `Backend` says whether it can run here (`require` raises the error that says why not, e.g. no
C compiler), turns an optimised module into a runner, and optionally: compiles HLO text through
a cache (`compile_text`: (module, or a function making it on first use; runner) or None to
compile normally), prints the code it
generates (`generate`), and profiles (`profiles`: runners have `.profile(*arrays)`). Adding a
backend (Triton, say) is one `register` call; nothing else dispatches on backend names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hlofuse.backends import measure as _measure
from hlofuse.backends.host_callbacks import HostCallbacks
from hlofuse.backends.subnormals import DEFAULT as DEFAULT_SUBNORMALS
from hlofuse.errors import HloError
from hlofuse.ir.module import Module
from hlofuse.passes import evaluator as _pass_evaluator
from hlofuse.passes import measure as _pass_measure


@dataclass(frozen=True)
class Backend:
    name: str
    description: str
    require: Callable[[], None]  # raises an HloError saying why this backend cannot run here
    # optimised module, options -> runner: runner(*arrays) -> [arrays]. Options every backend
    # accepts: threads (int | None; may be ignored), subnormals ("flush" | "keep": must be
    # honoured, `backends/subnormals.py`), host_callbacks (the table the module's host
    # callbacks index, or None: `backends/host_callbacks.py`; a module with host callbacks and
    # no table is refused, naming the instruction)
    compile: Callable[..., Any]
    # (text, pipeline, threads, subnormals, host_callbacks) -> (the module, or a function
    # making it on first use; runner)
    compile_text: Callable[..., tuple[Module | Callable[[], Module], Any] | None] | None = None
    generate: Callable[..., str] | None = None  # (module, subnormals=) -> the source
    profiles: bool = False  # runners have .profile(*arrays, repeat=)

    def available(self) -> bool:
        try:
            self.require()
        except HloError:
            return False
        return True


_BACKENDS: dict[str, Backend] = {}
PREFERENCE: list[str] = []  # default() picks the first available


def register(backend: Backend, *, preferred: bool = False) -> None:
    _BACKENDS[backend.name] = backend
    if preferred:
        PREFERENCE.insert(0, backend.name)
    else:
        PREFERENCE.append(backend.name)


def names() -> list[str]:
    return list(_BACKENDS)


def get(name: str) -> Backend:
    try:
        return _BACKENDS[name]
    except KeyError:
        raise HloError(f"unknown backend {name!r}; available: {', '.join(_BACKENDS)}") from None


def default() -> str:
    for name in PREFERENCE:
        if _BACKENDS[name].available():
            return name
    raise HloError("no backend can run here")


# ----- the built-in backends -------------------------------------------------------------------


def _interpreter_compile(module: Module, threads: int | None = None,
                         subnormals: str = DEFAULT_SUBNORMALS,
                         host_callbacks: HostCallbacks | None = None) -> Any:
    from hlofuse.backends import interpreter
    from hlofuse.backends.host_callbacks import check_table
    from hlofuse.errors import InterpreterError

    check_table(module, host_callbacks, InterpreterError)

    def run(*args: Any) -> list[Any]:
        return interpreter.run(module, *args, subnormals=subnormals,
                               host_callbacks=host_callbacks)

    return run


def _cpu_require() -> None:
    from hlofuse.backends.cpu import build

    try:
        build.find_compiler()
    except build.CompilerNotFoundError as exc:
        if "interpreter" in str(exc):
            raise
        raise build.CompilerNotFoundError(
            f"{exc} (the 'interpreter' backend needs no compiler: pass backend='interpreter', "
            "or --backend interpreter on the command line)") from None


def _cpu_compile(module: Module, threads: int | None = None,
                 subnormals: str = DEFAULT_SUBNORMALS,
                 host_callbacks: HostCallbacks | None = None) -> Any:
    from hlofuse.backends import cpu

    return cpu.compile_module(module, threads, subnormals, host_callbacks=host_callbacks)


def _cpu_compile_text(text: str, pipeline: str | None, threads: int | None = None,
                      subnormals: str = DEFAULT_SUBNORMALS,
                      host_callbacks: HostCallbacks | None = None
                      ) -> tuple[Module, Any] | None:
    """HLO text through the compile cache (`backends.cpu.artifacts`): a warm compile skips the
    pipeline and the C generation; a cold one compiles and stores."""
    from hlofuse.backends.cpu import artifacts, runtime
    from hlofuse.backends.cpu.executable import CpuExecutable

    threads = threads or runtime.default_threads()
    hit = artifacts.lookup(text, pipeline, threads, subnormals)
    if hit is not None:
        make_module, program, signature, library = hit
        exe = CpuExecutable(make_module, program, signature, library, host_callbacks)
        return (lambda: exe.module), exe  # parsed only if asked for
    from hlofuse.backends import cpu
    from hlofuse.backends.static_shapes import require_static
    from hlofuse.passes.pipelines import run_pipeline
    from hlofuse.text import parse

    module = parse(text)
    require_static(module)
    if pipeline is not None:
        run_pipeline(module, pipeline)
    made: list[artifacts.Entry] = []  # the cache entry, made while the library builds

    def entry(program: Any) -> None:
        made.append(artifacts.entry(text, pipeline, module, program, threads, subnormals))

    exe = cpu.compile_module(module, threads, subnormals, alongside=entry,
                             host_callbacks=host_callbacks)
    artifacts.write(made[0], exe.library_key)  # (only for a program that compiled and loaded)
    return module, exe


def _cpu_generate(module: Module, subnormals: str = DEFAULT_SUBNORMALS) -> str:
    from hlofuse.backends import cpu

    return cpu.generate(module, subnormals=subnormals).source


register(Backend("cpu", "generated C with explicit SIMD and a native driver (needs a C compiler)",
                 _cpu_require, _cpu_compile, _cpu_compile_text, _cpu_generate, profiles=True))
register(Backend("interpreter", "the numpy reference (always available)", lambda: None,
                 _interpreter_compile))


# Passes that measure (auto-unroll's autotune) time with this package's backends unless their
# caller chose otherwise (passes/measure.py); the passes themselves import no backend.
_pass_measure.register_default(_measure.time_candidates)


def _interpret(instr: Any, operands: list[Any]) -> Any:
    """The interpreter's value of `instr` on `operands` (constant folding's evaluator: passes/
    evaluator.py); None when it has no handler for the opcode."""
    from hlofuse.backends import interpreter  # noqa: F401  (registers every handler)
    from hlofuse.backends.interpreter.core import HANDLERS, Interpreter

    handler = HANDLERS.get(instr.opcode)
    return None if handler is None else handler(Interpreter(), instr, operands)


_pass_evaluator.register_default(_interpret)
