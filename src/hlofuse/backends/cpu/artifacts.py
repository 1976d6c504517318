"""The compile cache above the library cache: HLO text + pipeline -> optimised module + Program.

    compile(text, pipeline, threads, subnormals)
        ──sha256(text, pipeline, threads, subnormals, hlofuse code)──▶ <cache>/programs/<key>.json
                                  holds: the Program as JSON (C source, kernel table, shapes as
                                  HLO shape text) and the entry's signature
                                                                     <cache>/programs/<key>.hlo
                                  holds: the optimised module as HLO text

A warm `hlofuse.compile(text)` then skips the pipeline, the C generation and parsing: it
rebuilds the `Program` and the entry's signature (parameter shapes) from plain data and loads
the library from `build`'s cache; the optimised module is read and parsed only if
`Executable.module` is asked for (or a call's arguments are wrong, for the message). It is an
entry of its own because most warm compiles never ask for it, and it is half of a large
program's bytes (scan-1024: 3.1 of 5.7 MB, which a new process read, verified and decoded as
JSON on every warm compile). Conditions enforced:
- The key covers hlofuse's own source files, so editing the compiler invalidates every entry,
  and everything else the generated C depends on (`generation_context`: the target, whether
  named by HLOFUSE_TARGET or detected, the compiler's identity, every flag, this CPU), so a
  program generated for one target or compiler is never reused for another.
- Nothing executable is stored or read: no pickle, no marshal. An entry is a `cachefs` entry
  (owner and mode checked, sha256 of the content verified) holding JSON; the module is parsed
  with the ordinary HLO parser and every field is type-checked. An entry that is missing,
  damaged, of another format or inconsistent is ignored and rebuilt, never trusted half-way.
  A module entry that is missing or damaged when the module is asked for is made again from
  the text by the same pipeline (the key covers the code, so the pipeline is the same one),
  through the function `api` hands `lookup` (`remake`): this module parses only its own
  entries and runs no pipeline.
- Entries are written atomically (temporary file + `os.replace`); a cache that cannot be written
  falls back to a private temporary directory (`cachefs.unwritable`, one warning).
- Only text input is cached this way (a Module given by the caller may be edited later).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hlofuse.backends.cpu import cachefs
from hlofuse.backends.cpu.contract import HostSite, Kernel, Program
from hlofuse.backends.cpu.executable import Signature
from hlofuse.backends.subnormals import DEFAULT as DEFAULT_SUBNORMALS
from hlofuse.errors import HloError
from hlofuse.ir.module import Module
from hlofuse.ir.shape import ArrayShape, Shape, format_shape

FORMAT = 5
KIND = "program"
MODULE_KIND = "program-module"
LIBRARY_KIND = "program-library"


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A digest of hlofuse's Python sources (the compiler that produced an entry): each file's
    path, size and modification time, as Python's own bytecode cache tells a changed source
    (reading every file's bytes was 9 ms of each new process's first compile)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256(str(FORMAT).encode())
    for path in sorted(root.rglob("*.py")):
        st = path.stat()
        h.update(f"{path.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def key(text: str, pipeline: str | None, threads: int | None = None,
        subnormals: str = DEFAULT_SUBNORMALS) -> str:
    """The entry's name: hlofuse's code, the pipeline, the threads (default: the runtime's
    default), the subnormals setting, everything else code generation depends on
    (`generation_context`) and the text."""
    if threads is None:
        from hlofuse.backends.cpu import runtime

        threads = runtime.default_threads()
    h = hashlib.sha256()
    for part in (code_version(), repr(pipeline), f"threads={threads}",
                 f"subnormals={subnormals}", generation_context(), text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def generation_context() -> str:
    """What the generated C depends on besides the module and the settings above: the target
    it is generated for (`host_target.detect()`: HLOFUSE_TARGET, else the host as the compiler sees
    it; the vector width of every kernel, the largest local kept on the stack), the kernels'
    flags (HLOFUSE_CC_OPT) and the build context (the compiler's command and identity, every
    flag, this CPU: `build.build_context`).
    A program generated for AVX-512 is never reused for an SSE2 build, nor one generated under
    one compiler for another."""
    from hlofuse.backends.cpu import build, host_target
    from hlofuse.backends.cpu.units import kernel_flags

    target = host_target.detect()
    return (f"target={target.name}/{target.vector_bytes}/{target.march}/"
            f"stack={target.stack_local_bytes}\0"
            f"kernel_flags={' '.join(kernel_flags())}\0{build.build_context()}")


def _path(k: str) -> Path:
    return cachefs.directory("programs") / f"{k}.json"


def _module_path(k: str) -> Path:
    return cachefs.directory("programs") / f"{k}.hlo"


def _library_path(k: str) -> Path:
    return cachefs.directory("programs") / f"{k}.lib"


def library(text: str, pipeline: str | None, threads: int | None = None,
            subnormals: str = DEFAULT_SUBNORMALS) -> str | None:
    """The library key recorded for this text's program under the current build context
    (`build.build_context`), or None: the caller finds the key from the program's C."""
    return _recorded_library(key(text, pipeline, threads, subnormals))


def _recorded_library(k: str) -> str | None:
    from hlofuse.backends.cpu import build

    payload = cachefs.read_entry(_library_path(k), LIBRARY_KIND)
    if payload is None:
        return None
    try:
        data = json.loads(payload)
        context, lib = _get(data, "context", str), _get(data, "library", str)
    except (ValueError, RecursionError, _Bad):
        return None
    return lib if context == build.build_context() else None


# ----- Program <-> plain data -----------------------------------------------------------------


def _shapes(shapes: tuple[ArrayShape, ...]) -> list[str]:
    return [format_shape(s) for s in shapes]


def program_to_data(program: Program) -> dict[str, Any]:
    """The program as plain data. The kernel table is its distinct kernels (`kernels`: every
    field but the instruction) and one [kernel, instruction] pair per site (`sites`): a scan's
    program has thousands of sites of a handful of kernels, and a new process's warm compile
    decodes them all."""
    rows: dict[tuple[Any, ...], int] = {}
    sites = []
    for k in program.kernels:
        row = (k.name, k.source, k.inputs, k.outputs, k.kind, tuple(sorted(k.inplace.items())))
        sites.append([rows.setdefault(row, len(rows)), k.instruction])
    return {
        "source": program.source,
        "entry_symbol": program.entry_symbol,
        "arena_bytes": program.arena_bytes,
        "arena_largest": program.arena_largest,
        "split": list(program.split),
        "inputs": _shapes(program.inputs),
        "outputs": _shapes(program.outputs),
        "kernels": [
            {"name": name, "source": source, "inputs": _shapes(ins), "outputs": _shapes(outs),
             "kind": kind, "inplace": [list(p) for p in inplace]}
            for name, source, ins, outs, kind, inplace in rows
        ],
        "sites": sites,
        "host_sites": [
            {"index": h.index, "instruction": h.instruction, "inputs": _shapes(h.inputs),
             "outputs": _shapes(h.outputs)}
            for h in program.host_sites
        ],
    }


class _Bad(Exception):
    """The entry's data is not a program (treated like a missing entry)."""


def _get(data: Any, field: str, kind: type) -> Any:
    value = data.get(field) if isinstance(data, dict) else None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _Bad(field)
    return value


@functools.lru_cache(maxsize=4096)
def _any_shape(text: str) -> Shape:
    """A shape from its HLO text (shapes are immutable values: one parse per distinct text)."""
    from hlofuse.text.attrs import AttrParser

    parser = AttrParser(text, "<cache>")
    shape = parser.parse_shape()
    if parser.lexer.peek().kind != "eof":
        raise _Bad("shape")
    return shape


def _shape(text: Any) -> ArrayShape:
    if not isinstance(text, str):
        raise _Bad("shape")
    shape = _any_shape(text)
    if not isinstance(shape, ArrayShape):
        raise _Bad("shape")
    return shape


def _shape_list(data: Any, field: str) -> tuple[ArrayShape, ...]:
    texts = _get(data, field, list)
    if not all(isinstance(t, str) for t in texts):
        raise _Bad("shape")
    return _shape_tuple(tuple(texts))


@functools.lru_cache(maxsize=4096)
def _shape_tuple(texts: tuple[str, ...]) -> tuple[ArrayShape, ...]:
    return tuple(_shape(t) for t in texts)  # kernels repeat their signatures: one parse each


def signature_to_data(sig: Signature) -> dict[str, Any]:
    return {"name": sig.name, "params": [format_shape(s) for s in sig.params], "root": sig.root}


def signature_from_data(data: Any) -> Signature:
    params = []
    for text in _get(data, "params", list):
        if not isinstance(text, str):
            raise _Bad("params")
        params.append(_any_shape(text))
    return Signature(_get(data, "name", str), tuple(params), _get(data, "root", str))


_KERNEL_FIELDS = {"name": str, "source": str, "inputs": list, "outputs": list, "kind": str,
                  "inplace": list}


def _kernel_row(kd: Any) -> dict[str, Any]:
    """A `kernels` row of `program_to_data`, checked, with its shapes parsed and its in-place
    pairs as a dict (each site copies it)."""
    if type(kd) is not dict or any(type(kd.get(f)) is not t for f, t in _KERNEL_FIELDS.items()):
        raise _Bad("kernel")
    pairs = kd["inplace"]
    if not all(type(p) is list and len(p) == 2 and type(p[0]) is int and type(p[1]) is int
               for p in pairs):
        raise _Bad("inplace")
    row = dict(kd)
    row["inputs"], row["outputs"] = _shape_list(kd, "inputs"), _shape_list(kd, "outputs")
    row["inplace"] = {o: i for o, i in pairs}
    return row


def program_from_data(data: Any) -> Program:
    """The Program `program_to_data` described; `_Bad` (or an HloError) if it is not one.
    (The per-site checks are written out: a scan's program has thousands of kernel sites, and
    a new process's warm compile reads them all.)"""
    rows = [_kernel_row(kd) for kd in _get(data, "kernels", list)]
    kernels = []
    for site in _get(data, "sites", list):
        if type(site) is not list or len(site) != 2 or type(site[0]) is not int or not (
                0 <= site[0] < len(rows)) or type(site[1]) is not str:
            raise _Bad("site")
        row = rows[site[0]]
        kernels.append(Kernel(
            name=row["name"], source=row["source"], inputs=row["inputs"],
            outputs=row["outputs"], instruction=site[1], kind=row["kind"],
            inplace=dict(row["inplace"]),
        ))
    source = _get(data, "source", str)
    return Program(
        source=source,
        inputs=_shape_list(data, "inputs"),
        outputs=_shape_list(data, "outputs"),
        kernels=tuple(kernels),
        entry_symbol=_get(data, "entry_symbol", str),
        arena_bytes=_get(data, "arena_bytes", int),
        arena_largest=_get(data, "arena_largest", str),
        split=_split(_get(data, "split", list), len(source)),
        host_sites=_host_sites(data),
    )


def _host_sites(data: dict[str, Any]) -> tuple[HostSite, ...]:
    out = []
    for h in data.get("host_sites", []) if isinstance(data, dict) else ():
        index = _get(h, "index", int)
        if index < 0:
            raise _Bad("host_sites")
        out.append(HostSite(index, _get(h, "instruction", str), _shape_list(h, "inputs"),
                            _shape_list(h, "outputs")))
    return tuple(out)


def _split(value: list[Any], size: int) -> tuple[int, int]:
    if len(value) != 2 or not all(type(v) is int for v in value) or not (
            0 <= value[0] <= value[1] <= size):
        raise _Bad("split")
    return value[0], value[1]


# ----- the cache --------------------------------------------------------------------------------


def lookup(text: str, pipeline: str | None, threads: int | None = None,
           subnormals: str = DEFAULT_SUBNORMALS, *, remake: Callable[[], Module] | None = None
           ) -> tuple[Callable[[], Module], Program, Signature, str | None] | None:
    """What was compiled earlier from this text, or None: a function that makes the
    optimised module (called only when the module itself is asked for: a call needs only the
    signature), the program, the entry's signature, and the key of the program's library when
    one is recorded under this build context (`library`). `remake()` makes the optimised
    module from the text again (api's route: parse and run `pipeline`) where its entry is
    missing or damaged; this module never parses the text nor runs a pipeline itself."""
    k = key(text, pipeline, threads, subnormals)
    payload = cachefs.read_entry(_path(k), KIND)
    if payload is None:
        return None
    try:
        data = json.loads(payload)
        if _get(data, "format", int) != FORMAT:
            return None
        program = program_from_data(_get(data, "program", dict))
        signature = signature_from_data(_get(data, "signature", dict))
    except (ValueError, RecursionError, _Bad, HloError):
        return None
    return functools.partial(_module, k, remake), program, signature, _recorded_library(k)


def _module(k: str, remake: Callable[[], Module] | None) -> Module:
    """The optimised module of entry `k`: parsed from its module entry, or, where that is
    missing or damaged, made again by `remake` (the key covers the code, so the pipeline is
    the same one) and its entry written again."""
    from hlofuse.text import parse, print_module  # (imported only when the module is asked for)

    payload = cachefs.read_entry(_module_path(k), MODULE_KIND)
    if payload is not None:
        try:
            return parse(payload.decode())
        except (UnicodeDecodeError, RecursionError, HloError):
            pass
    if remake is None:
        raise HloError(f"compile cache entry {k}: the optimised module is missing or damaged "
                       "(compile the text again: hlofuse.compile)")
    module = remake()
    _store(_module_path(k), MODULE_KIND, print_module(module).encode())
    return module


@dataclass(frozen=True)
class Entry:
    """A compile-cache entry not written yet: its key, the program's JSON and the optimised
    module's text."""

    key: str
    program: bytes
    module: bytes


def entry(text: str, pipeline: str | None, module: Module, program: Program,
          threads: int | None = None, subnormals: str = DEFAULT_SUBNORMALS) -> Entry:
    """The compile-cache entry for this text, not written yet: made while the library builds
    (`registry`), written (`write`) once it loaded."""
    from hlofuse.text import print_module

    data = {"format": FORMAT, "signature": signature_to_data(Signature.of(module)),
            "program": program_to_data(program)}
    return Entry(key(text, pipeline, threads, subnormals),
                 json.dumps(data, separators=(",", ":")).encode(),
                 print_module(module).encode())


def write(made: Entry, library: str | None = None) -> None:
    """Write an `entry` (the module first, so that a program entry found has its module unless
    that was damaged since), and beside it the key of the library its program loaded
    (`build.library_key`) with the build context it was loaded under; best effort."""
    from hlofuse.backends.cpu import build

    records = [(_module_path(made.key), MODULE_KIND, made.module),
               (_path(made.key), KIND, made.program)]
    if library is not None:
        records.append((_library_path(made.key), LIBRARY_KIND, json.dumps(
            {"context": build.build_context(), "library": library}).encode()))
    for path, kind, payload in records:
        if not _store(path, kind, payload):
            return


def _store(path: Path, kind: str, payload: bytes) -> bool:
    """Write one entry; False (after `cachefs.unwritable`'s one warning) if it cannot be."""
    try:
        cachefs.write_entry(path, kind, payload)
    except OSError as exc:
        cachefs.unwritable(f"{path.parent}: {exc.strerror or exc}")
        return False
    return True
