"""The backends hlofuse can run a module on, by name: what `hlofuse.compile(..., backend=)`,
`hlofuse.jit`, `hlofuse run --backend` and `hlofuse emit` dispatch through.

    get("cpu").compile(module)      an optimised module -> a runner (callable on numpy arrays)
    default()                       the first available backend in preference order

A `Backend` says whether it can run here (`require` raises the error that says why not, e.g. no
C compiler), turns an optimised module into a runner, and optionally: compiles HLO text through
a cache (`compile_text`: (module, or a function making it on first use; runner)), prints the
code it generates (`generate`), profiles (`profiles`: runners have `.profile(*arrays)`), makes
runners a host framework can call natively (`native_entry`: jax's custom call), and names the
backend a module it refuses runs on instead (`fallback`, for the errors `refuses` accepts).
Adding a backend (Triton, say) is one `register` call; nothing else dispatches on backend names.

Backends never parse HLO nor run a pipeline: `api` does both and hands them the optimised
module, or, for `compile_text`, the function that makes it from the text when the cache
misses (`docs/layout.md`, "The compile route").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hlofuse.backends.host_callbacks import HostCallbacks
from hlofuse.backends.subnormals import DEFAULT as DEFAULT_SUBNORMALS
from hlofuse.errors import HloError
from hlofuse.ir.module import Module
from hlofuse.passes import evaluator as _pass_evaluator


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
    # (text, pipeline, threads, subnormals, host_callbacks, prepare) -> (the module, or a
    # function making it on first use; runner). `prepare()` makes the optimised module from
    # the text (api's route: parse, check, run the pipeline) where the cache cannot answer.
    compile_text: Callable[..., tuple[Module | Callable[[], Module], Any]] | None = None
    generate: Callable[..., str] | None = None  # (module, subnormals=) -> the source
    profiles: bool = False  # runners have .profile(*arrays, repeat=)
    native_entry: bool = False  # runners may run as one native call (jax's custom call)
    # where a module this backend refuses runs instead when no backend was asked for
    # (`hlofuse.jit`), and which errors are refusals (an op it cannot run), not failures
    fallback: str | None = None
    refuses: Callable[[Exception], bool] = lambda exc: False
    # (parsed module) -> None: start, in the background, work the backend will surely need for
    # the module (the cpu backend: compiling the prebuilt GEMM its dots call), while the
    # pipeline runs; never required, never raises (api calls it before the pipeline)
    warm: Callable[[Module], None] | None = None
    # the subnormal mode where the caller names none (the cpu backend and the interpreter:
    # "flush", as jax.jit on CPU; the gpu backend: "keep", as XLA GPU)
    default_subnormals: str = DEFAULT_SUBNORMALS

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


def _cpu_compile_text(text: str, pipeline: str | None, threads: int | None,
                      subnormals: str, host_callbacks: HostCallbacks | None,
                      prepare: Callable[[], Module]) -> tuple[Module | Callable[[], Module], Any]:
    """HLO text through the compile cache (`backends.cpu.artifacts`), keyed by the text, the
    pipeline and the settings: a warm compile skips `prepare` (the parse and the pipeline) and
    the C generation; a cold one compiles `prepare()`'s module and stores it."""
    from hlofuse.backends import cpu
    from hlofuse.backends.cpu import artifacts, runtime
    from hlofuse.backends.cpu.executable import CpuExecutable

    threads = threads or runtime.default_threads()
    hit = artifacts.lookup(text, pipeline, threads, subnormals, remake=prepare)
    if hit is not None:
        make_module, program, signature, library = hit
        exe = CpuExecutable(make_module, program, signature, library, host_callbacks)
        return (lambda: exe.module), exe  # parsed only if asked for
    module = prepare()
    made: list[artifacts.Entry] = []  # the cache entry, made while the library builds

    def entry(program: Any) -> None:
        made.append(artifacts.entry(text, pipeline, module, program, threads, subnormals))

    exe = cpu.compile_module(module, threads, subnormals, alongside=entry,
                             host_callbacks=host_callbacks)
    artifacts.write(made[0], exe.library_key)  # (only for a program that compiled and loaded)
    return module, exe


def _cpu_warm(module: Module) -> None:
    from hlofuse.backends import cpu

    cpu.warm(module)


def _cpu_refuses(exc: Exception) -> bool:
    """An op (or type, or shape) the generated C cannot handle: the module runs on the
    interpreter instead. A C compiler that fails or is missing is a failure, not a refusal."""
    from hlofuse.backends.cpu import build
    from hlofuse.errors import CompileError

    return isinstance(exc, CompileError) and not isinstance(
        exc, (build.CCompileError, build.CompilerNotFoundError))


def _cpu_generate(module: Module, subnormals: str = DEFAULT_SUBNORMALS) -> str:
    from hlofuse.backends import cpu

    return cpu.generate(module, subnormals=subnormals).source


register(Backend("cpu", "generated C with explicit SIMD and a native driver (needs a C compiler)",
                 _cpu_require, _cpu_compile, _cpu_compile_text, _cpu_generate, profiles=True,
                 native_entry=True, fallback="interpreter", refuses=_cpu_refuses,
                 warm=_cpu_warm))
register(Backend("interpreter", "the numpy reference (always available)", lambda: None,
                 _interpreter_compile))


def _gpu_require() -> None:
    from hlofuse.backends import gpu

    gpu.require()


def _gpu_compile(module: Module, threads: int | None = None,
                 subnormals: str = DEFAULT_SUBNORMALS,
                 host_callbacks: HostCallbacks | None = None) -> Any:
    """The module on the GPU (`backends/gpu/driver.py`). `threads` does not apply; subnormals
    are kept (IEEE 754, as XLA GPU keeps them), so "flush" is refused."""
    from hlofuse.backends.gpu import driver
    from hlofuse.errors import UnsupportedOpError

    if subnormals != "keep":
        raise UnsupportedOpError(f"subnormals={subnormals!r}: the gpu backend keeps subnormals "
                                 "(IEEE 754, as XLA GPU does); pass subnormals='keep' or none")
    return driver.compile_module(module)


register(Backend("gpu", "Triton kernels and torch library calls on one GPU (the optional gpu "
                 "extra; TRITON_INTERPRET=1 runs them on the CPU)", _gpu_require, _gpu_compile,
                 default_subnormals="keep"))


def _interpret(instr: Any, operands: list[Any]) -> Any:
    """The interpreter's value of `instr` on `operands` (constant folding's evaluator: passes/
    evaluator.py); None when it has no handler for the opcode."""
    from hlofuse.backends import interpreter  # noqa: F401  (registers every handler)
    from hlofuse.backends.interpreter.core import HANDLERS, Interpreter

    handler = HANDLERS.get(instr.opcode)
    return None if handler is None else handler(Interpreter(), instr, operands)


_pass_evaluator.register_default(_interpret)
