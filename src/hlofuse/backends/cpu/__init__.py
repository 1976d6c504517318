"""The CPU backend: an optimised HLO module becomes one C file, compiled once and run natively.

    from hlofuse.backends import cpu
    exe = cpu.compile_module(module)   # module already through its pipeline
    outs = exe(x, y)                   # list of numpy arrays, like interpreter.run
    print(exe.profile(x, y))           # per-kernel times

The pieces, in the order a module flows through them:

    kernels.py     one kernel (a kLoop/kInput/kOutput fusion, or an unfused op that does work,
                   seen as a fusion of one op) -> kernel IR (backends/kernel_ir: lowering and
                   passes) -> a C function with a fixed signature (`contract.Kernel`), printed by
    cprint.py      the C printer of the kernel IR, explicit SIMD through
    cvec.py        vector types and helpers (GCC/Clang vector extensions)
    cexpr.py       scalar semantics: storage/compute C types per dtype, every elementwise opcode
                   as a C expression with the interpreter's exact semantics, literals
    mathlib.py     branch-free polynomial sin/cos/exp/log/tanh/... that compile to packed code,
                   with their documented ulp error
    daz_math.py    atan2 and complex power as XLA's CPU computes them under DAZ
    library/       routines kernels call: GEMM, convolution, sort, RNG, select-and-scatter
    buffers.py     aliasing: which values share memory, what is updated in place, how while
                   loops carry their state
    schedule.py    the driver IR: what hf_entry runs, in order, over logical locations
    assign.py      buffer assignment: liveness on the driver IR, arena offsets
    driver.py      prints the whole file (`contract.Program`): prelude, kernels, constants and
                   the native driver `hf_entry`, while/conditional/call included, so no Python
                   runs between kernels; each distinct kernel function once; a large program
                   also as several translation units (`units`)
    build.py       find the C compiler, compile with fixed flags (never -ffast-math, never -w),
                   cache the .so by content hash (atomic writes, safe across processes), load
                   with ctypes; translation units compiled in parallel, each object cached
    shake.py       what a unit is compiled with: the prelude cut to the helpers it names
    executable.py  `CpuExecutable`: argument checks like the interpreter, the ctypes call, and
                   `profile()` from the -DHF_PROFILE build
    fpenv.py       the floating-point control register: subnormals flushed (XLA's CPU runtime)
                   or kept for the duration of `hf_entry`, in the caller and in pool workers

Input is hostile (docs/security.md): `limits.py` bounds sizes, integers and nesting before any C
is written; `ctext.py` is the only way input text (comments) and integers reach the C;
`cachefs.py` trusts a cache directory and its entries only after checks; `artifacts.py` keeps
compiled programs as JSON; `runtime.py` lets Ctrl-C stop native loops.

The interpreter is the specification: every result matches it (exact for integers and bools,
floats within the tolerances documented in tests/test_cpu_programs.py). An op the backend does
not support raises a CompileError subclass naming the instruction; without a C compiler,
`available()` is False and compiling raises `build.CompilerNotFoundError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from hlofuse.backends.subnormals import DEFAULT as DEFAULT_SUBNORMALS
from hlofuse.backends.subnormals import check as check_subnormals

if TYPE_CHECKING:
    from collections.abc import Callable

    from hlofuse.backends.cpu.contract import Program
    from hlofuse.backends.cpu.executable import CpuExecutable
    from hlofuse.backends.host_callbacks import HostCallbacks
    from hlofuse.ir.module import Module

__all__ = ["available", "beside_build", "compile_module", "generate", "prebuild", "warm"]

T = TypeVar("T")


def available() -> bool:
    """Whether a C compiler exists (the backend can build modules)."""
    from hlofuse.backends.cpu import build

    try:
        build.find_compiler()
    except build.CompilerNotFoundError:
        return False
    return True


def warm(module: Module) -> None:
    """Start compiling the prebuilt GEMM units (`library/prebuilt.py`) the module's dots and
    convolutions will call, in the background (`build.compile_early`), so that a cold compile
    of a program with a dot does not wait for them after its kernels (PPO: 1.3 s of -O3 that
    began only once the program was printed). Nothing happens where they are cached, where no
    compiler is found, or for a module without such ops; a unit compiled for an op the
    pipeline then removes is only cached early."""
    from hlofuse.backends.cpu import build
    from hlofuse.backends.cpu.library import prebuilt

    suffixes = prebuilt.suffixes_of(module)
    if not suffixes:
        return
    try:
        build.find_compiler()
    except build.CompilerNotFoundError:
        return
    for s in suffixes:
        build.compile_early(prebuilt.unit(s), "hlofuse_gemm", ())


def prebuild(suffixes: Sequence[str] | None = None) -> dict[str, str]:
    """Compile the prebuilt library units (the GEMM of each element type,
    `library/prebuilt.py`) and the runtime (`runtime.py`: the thread pool, Ctrl-C) into the
    cache now, and wait for them: what a machine's first program (with a dot) would otherwise
    compile (about 1 s of -O3 per GEMM type, 0.1 s for the runtime) before it runs.
    `hlofuse prebuild` calls this once per machine (and compiler, flags and cache directory),
    as an install step; the GEMM units compile `build.jobs()` at once. Returns each unit's
    outcome by name: "built" or "cached". Raises `CompilerNotFoundError` without a compiler
    and the compile's error if one fails."""
    from concurrent.futures import ThreadPoolExecutor

    from hlofuse.backends.cpu import build, runtime
    from hlofuse.backends.cpu.library import prebuilt

    build.find_compiler()
    todo = list(suffixes or prebuilt.SUFFIXES)
    with ThreadPoolExecutor(max_workers=build.jobs()) as pool:
        built = list(pool.map(lambda s: build.compile_object(prebuilt.unit(s), "hlofuse_gemm"),
                              todo))
    out = {f"hflib_gemm_{s}": "built" if b else "cached"
           for s, b in zip(todo, built, strict=True)}
    out["hlofuse_runtime"] = build.prebuild_library(runtime.RUNTIME_SOURCE,
                                                    name="hlofuse_runtime")
    return out


def generate(module: Module, threads: int | None = None,
             subnormals: str = DEFAULT_SUBNORMALS,
             early: Callable[[str], None] | None = None) -> Program:
    """The C program for an (optimised) module, without compiling it. `threads`: how many
    threads parallel loops may use (default `runtime.default_threads()`: HLOFUSE_THREADS, else
    the CPUs this process may run on). `subnormals`: "flush" (XLA's CPU runtime: FTZ and DAZ
    while `hf_entry` runs) or "keep" (`backends/subnormals.py`, `fpenv.py`). Collectives, async
    wrappers and batch norm are first lowered to plain HLO with their one-device values (on a
    copy: `one_device.py`). `early`: given each kernel unit of a large program as soon as it
    is printed (`units.Stream`)."""
    from hlofuse import gcpause
    from hlofuse.backends.cpu import driver, one_device, runtime

    with gcpause.paused():
        return driver.generate(one_device.prepare(module),
                               threads=threads or runtime.default_threads(),
                               subnormals=check_subnormals(subnormals), early=early)


def compile_module(module: Module, threads: int | None = None,
                   subnormals: str = DEFAULT_SUBNORMALS,
                   alongside: Callable[[Program], object] | None = None,
                   host_callbacks: HostCallbacks | None = None) -> CpuExecutable:
    """Generate, compile (through the cache) and load an already optimised module
    (`host_callbacks`: the table its host callbacks index, `backends/host_callbacks.py`;
    without one, a module that has some raises `UnsupportedOpError`). A large
    program's kernel units compile while the rest is generated (`build.compile_early`).
    `alongside(program)`, then the garbage collector's run over what the compile allocated,
    run on another thread while the library builds (`beside_build`: this thread mostly waits
    for the compiler then), and are finished before this returns."""
    from concurrent.futures import ThreadPoolExecutor

    from hlofuse.backends.cpu import build
    from hlofuse.backends.cpu.cexpr import UnsupportedOpError
    from hlofuse.backends.cpu.executable import CpuExecutable
    from hlofuse.backends.cpu.units import kernel_flags
    from hlofuse.backends.host_callbacks import check_table
    from hlofuse.backends.static_shapes import require_static

    require_static(module)
    check_table(module, host_callbacks, UnsupportedOpError)  # (before any C is generated)
    flags = kernel_flags()
    program = generate(module, threads, subnormals,
                       early=lambda unit: build.compile_early(unit, module.name, flags))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hlofuse-alongside") as pool:
        side = pool.submit(beside_build, alongside, program)
        exe = CpuExecutable(module, program, host_callbacks=host_callbacks)
        side.result()
    return exe


def beside_build(work: Callable[[Program], T] | None, program: Program) -> T | None:
    """What runs on another thread while `program`'s library builds: `work(program)` (its
    result is returned), then the garbage collector's run over what the compile allocated
    (`gcpause.collect_young`), which the caller would otherwise wait for once the compile
    returns."""
    from hlofuse import gcpause

    made = work(program) if work is not None else None
    gcpause.collect_young()
    return made
