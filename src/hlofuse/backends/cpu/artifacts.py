"""The compile cache above the library cache: HLO text + pipeline -> optimised module + Program.

    compile(text, pipeline, threads, subnormals)
        ──sha256(text, pipeline, threads, subnormals, hlofuse code)──▶ <cache>/programs/<key>.json
                                  holds: the optimised module as HLO text, the Program as JSON
                                  (C source, kernel table, shapes as HLO shape text)

A warm `hlofuse.compile(text)` then skips the pipeline, the C generation and parsing: it
rebuilds the `Program` and the entry's signature (parameter shapes) from plain data and loads
the library from `build`'s cache; the optimised module is parsed only if `Executable.module`
is asked for (or a call's arguments are wrong, for the message). Conditions enforced:
- The key covers hlofuse's own source files, so editing the compiler invalidates every entry.
- Nothing executable is stored or read: no pickle, no marshal. An entry is a `cachefs` entry
  (owner and mode checked, sha256 of the content verified) holding JSON; the module is parsed
  with the ordinary HLO parser and every field is type-checked. An entry that is missing,
  damaged, of another format or inconsistent is ignored and rebuilt, never trusted half-way.
- Entries are written atomically (temporary file + `os.replace`); a cache that cannot be written
  falls back to a private temporary directory (`cachefs.unwritable`, one warning).
- Only text input is cached this way (a Module given by the caller may be edited later).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hlofuse.backends.cpu import cachefs
from hlofuse.backends.cpu.contract import Kernel, Program
from hlofuse.backends.cpu.executable import Signature
from hlofuse.backends.subnormals import DEFAULT as DEFAULT_SUBNORMALS
from hlofuse.errors import HloError
from hlofuse.ir.module import Module
from hlofuse.ir.shape import ArrayShape, Shape, format_shape

FORMAT = 3
KIND = "program"
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
    default), the subnormals setting and the text."""
    if threads is None:
        from hlofuse.backends.cpu import runtime

        threads = runtime.default_threads()
    h = hashlib.sha256()
    for part in (code_version(), repr(pipeline), f"threads={threads}",
                 f"subnormals={subnormals}", text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _path(k: str) -> Path:
    return cachefs.directory("programs") / f"{k}.json"


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
    return {
        "source": program.source,
        "entry_symbol": program.entry_symbol,
        "arena_bytes": program.arena_bytes,
        "arena_largest": program.arena_largest,
        "split": list(program.split),
        "inputs": _shapes(program.inputs),
        "outputs": _shapes(program.outputs),
        "kernels": [
            {
                "name": k.name,
                "source": k.source,
                "inputs": _shapes(k.inputs),
                "outputs": _shapes(k.outputs),
                "instruction": k.instruction,
                "kind": k.kind,
                "inplace": sorted(k.inplace.items()),
            }
            for k in program.kernels
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


_KERNEL_FIELDS = {"name": str, "source": str, "inputs": list, "outputs": list,
                  "instruction": str, "kind": str, "inplace": list}


def program_from_data(data: Any) -> Program:
    """The Program `program_to_data` described; `_Bad` (or an HloError) if it is not one.
    (The per-kernel checks are written out: a scan's program has thousands of kernel sites,
    and a new process's warm compile reads them all.)"""
    kernels = []
    fields = _KERNEL_FIELDS.items()
    for kd in _get(data, "kernels", list):
        if type(kd) is not dict or any(type(kd.get(f)) is not t for f, t in fields):
            raise _Bad("kernel")
        pairs = kd["inplace"]
        if pairs and not all(type(p) is list and len(p) == 2 and type(p[0]) is int
                             and type(p[1]) is int for p in pairs):
            raise _Bad("inplace")
        ins, outs = kd["inputs"], kd["outputs"]
        if not all(type(t) is str for t in ins) or not all(type(t) is str for t in outs):
            raise _Bad("shape")
        kernels.append(Kernel(
            name=kd["name"], source=kd["source"], inputs=_shape_tuple(tuple(ins)),
            outputs=_shape_tuple(tuple(outs)), instruction=kd["instruction"], kind=kd["kind"],
            inplace={o: i for o, i in pairs},
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
    )


def _split(value: list[Any], size: int) -> tuple[int, int]:
    if len(value) != 2 or not all(type(v) is int for v in value) or not (
            0 <= value[0] <= value[1] <= size):
        raise _Bad("split")
    return value[0], value[1]


# ----- the cache --------------------------------------------------------------------------------


def lookup(text: str, pipeline: str | None, threads: int | None = None,
           subnormals: str = DEFAULT_SUBNORMALS
           ) -> tuple[Callable[[], Module], Program, Signature, str | None] | None:
    """What was compiled earlier from this text, or None: a function that parses the
    optimised module (called only when the module itself is asked for: a call needs only the
    signature), the program, the entry's signature, and the key of the program's library when
    one is recorded under this build context (`library`)."""
    k = key(text, pipeline, threads, subnormals)
    payload = cachefs.read_entry(_path(k), KIND)
    if payload is None:
        return None
    try:
        data = json.loads(payload)
        if _get(data, "format", int) != FORMAT:
            return None
        module_text = _get(data, "module", str)
        program = program_from_data(_get(data, "program", dict))
        signature = signature_from_data(_get(data, "signature", dict))
    except (ValueError, RecursionError, _Bad, HloError):
        return None

    def make_module() -> Module:
        from hlofuse.text import parse  # (imported only when the module is asked for)

        return parse(module_text)

    return make_module, program, signature, _recorded_library(k)


def entry(text: str, pipeline: str | None, module: Module, program: Program,
          threads: int | None = None, subnormals: str = DEFAULT_SUBNORMALS) -> tuple[str, bytes]:
    """The compile-cache entry for this text (its key and payload), not written yet: made
    while the library builds (`registry`), written (`write`) once it loaded."""
    from hlofuse.text import print_module

    data = {"format": FORMAT, "module": print_module(module),
            "signature": signature_to_data(Signature.of(module)),
            "program": program_to_data(program)}
    payload = json.dumps(data, separators=(",", ":")).encode()
    return key(text, pipeline, threads, subnormals), payload


def write(made: tuple[str, bytes], library: str | None = None) -> None:
    """Write an `entry`, and beside it the key of the library its program loaded
    (`build.library_key`) with the build context it was loaded under; best effort."""
    from hlofuse.backends.cpu import build

    records = [(_path(made[0]), KIND, made[1])]
    if library is not None:
        records.append((_library_path(made[0]), LIBRARY_KIND, json.dumps(
            {"context": build.build_context(), "library": library}).encode()))
    for path, kind, payload in records:
        try:
            cachefs.write_entry(path, kind, payload)
        except OSError as exc:
            cachefs.unwritable(f"{path.parent}: {exc.strerror or exc}")
            return
