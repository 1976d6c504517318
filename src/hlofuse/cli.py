"""The `hlofuse` command line: parse | opt | passes | run | emit | prebuild | demo.

    hlofuse run FILE [--backend cpu|interpreter] [--pipeline xla] [--profile]
                     [--subnormals flush|keep]
    hlofuse emit FILE [--pipeline xla] [-o out.c]      the C the cpu backend generates
    hlofuse emit FILE --kernel-ir [--target avx2]      each kernel's kernel IR instead
    hlofuse passes [NAME ...]                           the passes and their options

Every error a user can cause (bad HLO, missing files, bad inputs, unknown passes) is printed as
one clear message on stderr with a non-zero exit status, never as a traceback. `report_error`
is the one place that prints it, through `escape.terminal` (messages quote input text: names,
metadata, file paths). An exception that is not an `HloError` is a bug in hlofuse: it gets one
line too, saying so, and exit status 3.

Inputs from `--inputs FILE.npz` are untrusted: `read_npz` reads each member's header first and
accepts only a plain array of exactly the parameter's element type and shape (no pickles, no
object or structured dtypes), so what it allocates is bounded by the module's own parameter
sizes, whatever the archive's sizes or compression claim. `--random-inputs` checks each input
against `ir.limits.allocation_limit()` before generating it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time
import tokenize
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hlofuse.errors import HloError, InputError, PassError
from hlofuse.escape import terminal
from hlofuse.ir import limits
from hlofuse.ir.module import Module
from hlofuse.ir.shape import ArrayShape, format_shape

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
# Largest .npy header accepted (numpy's own default for untrusted files is 10000 bytes).
NPY_MAX_HEADER = 10000


class CliError(HloError):
    """A user error detected by the CLI itself (bad file, bad arguments)."""


def _read_module(path: str) -> Module:
    from hlofuse.text import parse

    p = Path(path)
    if not p.exists():
        raise CliError(f"{path}: no such file")
    if p.is_dir():
        raise CliError(f"{path}: is a directory, expected an HLO text file")
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise CliError(f"{path}: not a text file (expected HLO text)") from None
    except MemoryError:
        raise CliError(f"{path}: too large to read into memory "
                       f"({limits.format_bytes(p.stat().st_size)})") from None
    return parse(text, source_name=path)


def _load_inputs(module: Module, path: str | None, seed: int | None) -> list[np.ndarray]:
    params = module.entry.parameters
    if path is None:
        if seed is not None:
            return [_random_array(p.shape, seed + i, f"random input in_{i} ({p.name})")
                    for i, p in enumerate(params)]
        if params:
            names = ", ".join(f"in_{i}: {format_shape(p.shape, False)}" for i, p in
                              enumerate(params))
            raise CliError(
                f"the entry computation takes {len(params)} inputs ({names}); "
                "pass them with --inputs FILE.npz or use --random-inputs SEED"
            )
        return []
    p = Path(path)
    if not p.exists():
        raise CliError(f"{path}: no such file")
    return read_npz(p, params)


def read_npz(path: Path, params: Sequence[object]) -> list[np.ndarray]:
    """The arrays `in_0, in_1, ...` of the .npz at `path`, one per entry parameter, each
    checked (header first) to be exactly the parameter's element type and shape."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            members = {n[:-4]: n for n in names if n.endswith(".npy")}
            if len(members) != len(names):
                raise InputError(f"{path}: expected an .npz archive of .npy arrays in_0, "
                                 "in_1, ...")
            expected = [f"in_{i}" for i in range(len(params))]
            missing = [k for k in expected if k not in members]
            extra = sorted(set(members) - set(expected))
            if missing or extra:
                parts = []
                if missing:
                    parts.append("missing " + ", ".join(missing))
                if extra:
                    parts.append("unexpected " + ", ".join(extra[:10])
                                 + (", ..." if len(extra) > 10 else ""))
                raise InputError(
                    f"{path}: {'; '.join(parts)} (the entry takes {len(params)} inputs named "
                    f"in_0..in_{len(params) - 1} in parameter order)")
            return [_read_member(path, zf, members[k], i, param)
                    for i, (k, param) in enumerate(zip(expected, params, strict=True))]
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError,
            NotImplementedError, RuntimeError, ValueError) as exc:
        # RuntimeError: an encrypted member; NotImplementedError: an unknown compression.
        raise InputError(f"{path}: not a readable .npz file ({type(exc).__name__}: "
                         f"{str(exc)[:200]})") from None


def _read_member(path: Path, zf: zipfile.ZipFile, member: str, i: int,
                 param: object) -> np.ndarray:
    shape = getattr(param, "shape", None)
    what = f"{path}: in_{i} (parameter {i}, {getattr(param, 'name', '?')})"
    if not isinstance(shape, ArrayShape):
        raise InputError(f"{what}: tuple- and token-shaped parameters cannot be read from "
                         f".npz (it is {format_shape(shape, False)})" if shape is not None
                         else f"{what}: not an array parameter")
    with zf.open(member) as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                dims, fortran, dtype = np.lib.format.read_array_header_1_0(
                    f, max_header_size=NPY_MAX_HEADER)
            elif version == (2, 0):
                dims, fortran, dtype = np.lib.format.read_array_header_2_0(
                    f, max_header_size=NPY_MAX_HEADER)
            else:
                raise InputError(f"{what}: unsupported .npy format version {version}")
        except (ValueError, SyntaxError, TypeError, tokenize.TokenError) as exc:
            # numpy parses the header with tokenize and ast.literal_eval
            raise InputError(f"{what}: not a readable .npy array (malformed header: "
                             f"{type(exc).__name__}: {str(exc)[:200]})") from None
        expected = f"expected {format_shape(shape, False)}"
        if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
            raise InputError(f"{what}: {expected}, the file holds an array of {dtype} "
                             "(object and structured arrays are not accepted)")
        if dtype != shape.dtype.np or tuple(dims) != shape.dims:
            raise InputError(f"{what}: {expected} (numpy {shape.dtype.np.str}"
                             f"{list(shape.dims)}), the file holds numpy {dtype.str}"
                             f"{list(dims)[:8]}")
        nbytes = shape.size * dtype.itemsize
        with limits.allocation_guard(what, nbytes):
            data = f.read(nbytes)
            if len(data) != nbytes:
                raise InputError(f"{what}: the array data is truncated ({len(data)} of "
                                 f"{nbytes} bytes)")
            array = np.frombuffer(data, dtype=dtype, count=shape.size)
            return array.reshape(shape.dims, order="F" if fortran else "C").copy(order="C")


def _random_array(shape: object, seed: int, what: str = "a random input") -> np.ndarray:
    if not isinstance(shape, ArrayShape):
        raise CliError("--random-inputs supports only array-shaped parameters")
    # The generators make 8-byte elements first (float64, int64), then convert.
    with limits.allocation_guard(what, shape.nbytes + 8 * shape.size):
        rng = np.random.default_rng(seed)
        dt = shape.dtype
        if dt.is_pred:
            return rng.integers(0, 2, shape.dims).astype(np.bool_)
        if dt.is_integral:
            return rng.integers(0, 16, shape.dims).astype(dt.np)
        return rng.standard_normal(shape.dims).astype(dt.np)


def cmd_parse(args: argparse.Namespace) -> int:
    from hlofuse.text import print_module

    module = _read_module(args.file)
    sys.stdout.write(print_module(module, long=args.long))
    return 0


def cmd_passes(args: argparse.Namespace) -> int:
    """Every registered pass (or those named) with its options: type, default and, for a
    fusion setting, its kind (switch, limit, choice, set) and the figures its rule compares."""
    from hlofuse.passes.fusion.config import setting_text
    from hlofuse.passes.fusion.options import ALL_SETTINGS, option_info
    from hlofuse.passes.registry import available_passes, pass_class, pass_options

    for name in args.names or available_passes():
        cls = pass_class(name)
        options = pass_options(cls)
        print(name if options else f"{name} (no options)")
        for key, t in options.items():
            text = f"  {key}: {getattr(t, '__name__', str(t))}"
            if key in ALL_SETTINGS and hasattr(cls, "OPTIONS"):
                info = option_info(key)
                text += f" = {setting_text(info.default)} [{info.kind}"
                text += f", compares {', '.join(info.figures)}]" if info.figures else "]"
            print(text)
    return 0


def cmd_opt(args: argparse.Namespace) -> int:
    from hlofuse.api import optimise
    from hlofuse.passes.pipelines import PIPELINES
    from hlofuse.text import print_module

    if args.passes is None and args.pipeline not in PIPELINES:
        raise PassError(
            f"unknown pipeline {args.pipeline!r}; valid pipelines: {', '.join(sorted(PIPELINES))}"
            " (or give a pass list with --passes)"
        )
    module = _read_module(args.file)
    spec = args.passes if args.passes is not None else args.pipeline
    t0 = time.perf_counter()
    _, report = optimise(module, spec, verify=args.verify, dump_dir=args.dump_dir)
    elapsed = time.perf_counter() - t0
    if args.trace:
        trace = module.annotations.get("fusion_trace")
        Path(args.trace).write_text(trace.to_jsonl() if trace is not None else "")
    if not args.quiet:
        sys.stdout.write(print_module(module))
    if args.stats:
        print(f"# {spec}: {elapsed * 1e3:.1f} ms", file=sys.stderr)
        print(str(report), file=sys.stderr)
    if args.kernels:
        from hlofuse.analysis.kernels import count_kernels

        print(count_kernels(module).summary(), file=sys.stderr)
    return 0


def _backend(args: argparse.Namespace) -> str:
    if args.backend is not None:
        return str(args.backend)
    from hlofuse.backends import registry

    return registry.default()


def _pipeline(name: str) -> str | None:
    return None if name == "" else name


def cmd_run(args: argparse.Namespace) -> int:
    from hlofuse.api import compile
    from hlofuse.backends import registry

    backend = _backend(args)
    if args.profile and not registry.get(backend).profiles:
        raise CliError(f"--profile needs a backend that profiles, such as cpu (this run uses "
                       f"{backend!r})")
    module = _read_module(args.file)
    inputs = _load_inputs(module, args.inputs, args.random_inputs)
    exe = compile(module, pipeline=_pipeline(args.pipeline), backend=backend,
                  subnormals=args.subnormals)
    t0 = time.perf_counter()
    outputs = exe(*inputs)
    elapsed = time.perf_counter() - t0
    if args.output:
        named: dict[str, Any] = {f"out_{i}": o for i, o in enumerate(outputs)}
        np.savez(args.output, **named)
    for i, o in enumerate(outputs):
        preview = np.array2string(np.asarray(o).reshape(-1)[:6], precision=5, separator=", ")
        print(f"out_{i}: {o.dtype}{list(o.shape)} {preview}{' ...' if o.size > 6 else ''}")
    print(f"# ran on {backend} in {elapsed * 1e3:.1f} ms", file=sys.stderr)
    if args.profile:
        print(str(exe.profile(*inputs)))
    return 0


def cmd_emit(args: argparse.Namespace) -> int:
    from hlofuse.api import optimise
    from hlofuse.backends import registry

    module, _ = optimise(_read_module(args.file), _pipeline(args.pipeline))
    if args.kernel_ir:
        from hlofuse.backends.cpu import host_target, one_device
        from hlofuse.backends.kernel_ir.dump import module_text
        from hlofuse.backends.kernel_ir.target import Target

        target = Target.named(args.target) if args.target else host_target.detect()
        source = module_text(one_device.prepare(module), target)
    else:
        generate = registry.get("cpu").generate
        assert generate is not None
        source = generate(module, subnormals=args.subnormals or registry.get("cpu")
                          .default_subnormals)
    if args.output:
        Path(args.output).write_text(source)
        what = "kernel IR" if args.kernel_ir else "C"
        print(f"# wrote {len(source.splitlines())} lines of {what} to {args.output}",
              file=sys.stderr)
    else:
        sys.stdout.write(source)
    return 0


def cmd_prebuild(args: argparse.Namespace) -> int:
    """Compile the prebuilt libraries (the GEMM of each element type, the runtime and, with
    jax installed, the handler `hlofuse.jit` calls through XLA) into the cache now: the first
    program on this machine would otherwise compile them (`cpu.prebuild`)."""
    from hlofuse.backends import cpu
    from hlofuse.backends.cpu import cachefs

    t0 = time.perf_counter()
    done = cpu.prebuild()
    if importlib.util.find_spec("jax") is not None:  # the frontend's handler for jax.jit
        from hlofuse.frontends import jax_ffi

        done["hlofuse_xla_ffi"] = jax_ffi.prebuild()
    for name, outcome in done.items():
        print(terminal(f"{name}: {outcome}"))
    print(terminal(f"in {time.perf_counter() - t0:.1f} s, cache {cachefs.root()}"))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from hlofuse.tools.demo import run_demo

    return run_demo(quick=args.quick)


# Subcommands implemented by a tool module with `add_arguments(parser)` and `main(args) -> int`.
TOOLS: tuple[tuple[str, str, str], ...] = (
    ("explain", "hlofuse.tools.explain",
     "kernels per loop iteration, and the rule behind every fusion boundary"),
    ("lint", "hlofuse.tools.lint",
     "frontend patterns that cost kernels, with source line, fix and measured cost"),
    ("viz", "hlofuse.tools.viz",
     "one self-contained HTML page of the graph before and after fusion (-o out.html)"),
    ("bench", "hlofuse.tools.bench",
     "run a benchmark from benchmarks/ (cartpole, programs, loop-overhead); results as JSON"),
)


def _subnormals_argument(p: argparse.ArgumentParser) -> None:
    from hlofuse.backends import subnormals

    p.add_argument("--subnormals", choices=subnormals.MODES, default=None,
                   help="flush f32/f64/bf16 subnormals to zero as jax.jit on CPU does, or "
                        "keep them (IEEE 754) (default: the backend's own: "
                        f"{subnormals.DEFAULT} on cpu and the interpreter, keep on gpu)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hlofuse",
        description="XLA's operator-fusion compiler in Python: parse, optimise and run HLO.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("parse", help="verify an HLO file and print its canonical text")
    p.add_argument("file")
    p.add_argument("--long", action="store_true", help="print XLA's long dump form")
    p.set_defaults(func=cmd_parse)

    p = sub.add_parser("passes", help="list the passes and their options")
    p.add_argument("names", nargs="*", help="passes to show (default: all)")
    p.set_defaults(func=cmd_passes)

    p = sub.add_parser("opt", help="run a pipeline or a list of passes and print the result")
    p.add_argument("file")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--pipeline", default="simplify", help="a named pipeline (default simplify)")
    group.add_argument("--passes", help="comma-separated passes, e.g. 'dce,cse,inline{k=v}'")
    p.add_argument("--dump-dir", help="write the module before and after every changing pass")
    p.add_argument("--trace", help="write every fusion decision to this JSONL file")
    p.add_argument("--kernels", action="store_true", help="print the kernel count summary")
    p.add_argument("--stats", action="store_true", help="print per-pass timing")
    p.add_argument("--verify", action="store_true", help="verify the module after every pass")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print the module")
    p.set_defaults(func=cmd_opt)

    p = sub.add_parser("run", help="run an HLO module on inputs from an .npz file")
    p.add_argument("file")
    p.add_argument("--inputs", help=".npz with arrays in_0, in_1, ... in parameter order")
    p.add_argument("--random-inputs", type=int, metavar="SEED",
                   help="run on deterministic random inputs instead of --inputs")
    p.add_argument("--output", help="write outputs out_0, out_1, ... to this .npz")
    p.add_argument("--backend", default=None,
                   help="a backend of hlofuse.backends.registry: cpu or interpreter "
                        "(default: cpu when a C compiler exists)")
    p.add_argument("--pipeline", default="hlofuse",
                   help="pipeline to run before executing (default hlofuse; '' for none)")
    p.add_argument("--profile", action="store_true",
                   help="print per-kernel times (cpu backend)")
    _subnormals_argument(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("emit", help="print the C file the cpu backend generates for a module")
    p.add_argument("file")
    p.add_argument("--pipeline", default="hlofuse",
                   help="pipeline to run before generating (default hlofuse; '' for none)")
    p.add_argument("-o", "--output", help="write the C to this file instead of stdout")
    p.add_argument("--kernel-ir", action="store_true",
                   help="print each kernel's optimised kernel IR instead of C")
    p.add_argument("--target", default="",
                   help="with --kernel-ir: the vector target (avx512, avx2, sse2, scalar; "
                        "default: this host's)")
    _subnormals_argument(p)
    p.set_defaults(func=cmd_emit)

    for name, module, help_text in TOOLS:
        tool = importlib.import_module(module)
        p = sub.add_parser(name, help=help_text)
        tool.add_arguments(p)
        p.set_defaults(func=tool.main)

    p = sub.add_parser("prebuild", help="compile the prebuilt library (GEMM) for this machine "
                       "into the cache, once, instead of in the first program that needs it")
    p.set_defaults(func=cmd_prebuild)

    p = sub.add_parser("demo", help="the built-in CartPole case study, end to end")
    p.add_argument("--quick", action="store_true", help="a smaller run")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (HloError, OSError) as exc:
        report_error(args.command, exc)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # last resort: a bug in hlofuse, not a user error
        report_error(args.command, exc, internal=True)
        return EXIT_INTERNAL


def report_error(command: str, exc: BaseException, *, internal: bool = False) -> None:
    """Print `exc` as one message on stderr (through `escape.terminal`): the CLI's only error
    printer. `internal`: an exception hlofuse should have turned into an `HloError`."""
    if internal:
        text = (f"hlofuse {command}: internal error: {type(exc).__name__}: {exc} (this is a "
                "bug in hlofuse, not in your input; please report it with the input file)")
    else:
        text = f"hlofuse {command}: error: {exc}"
    print(terminal(text), file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
