#!/usr/bin/env python3
"""Regenerates the built-in example HLO modules in src/hlofuse/examples/.

    python scripts/gen_examples.py            # write all examples
    python scripts/gen_examples.py --check    # exit 1 if a file on disk is out of date
    python scripts/gen_examples.py --list     # print the example names

Each module is ``jax.jit(fn, keep_unused=True).lower(*args).as_text(dialect="hlo",
debug_info=True)``.  To keep regeneration free of noise diffs, the ``FileNames`` table of the
debug info is rewritten: paths inside this repository become repository-relative
(``src/hlofuse/examples/cartpole.py``), paths inside an installed package become relative to its
``site-packages`` directory (``jax/_src/...``), anything else keeps only its base name.  Frames of
this script itself (the caller of ``lower``) are kept; they are deterministic for a given script.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "src" / "hlofuse" / "examples"
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))

CARTPOLE_ENVS = 2048
CARTPOLE_STEPS = 100

# Programs from tests/programs.py that are shipped as examples too.
PROGRAM_EXAMPLES: dict[str, str] = {
    "mlp_train_step": "mlp_train_step_grad",
    "adam_update": "adam_update_pytree",
    "attention": "attention_softmax",
    "layernorm": "layernorm",
    "softmax": "softmax",
}


@dataclass(frozen=True)
class Example:
    name: str
    build: Callable[[], tuple[Callable[..., Any], tuple]]


def _cartpole(variant: str) -> Callable[[], tuple[Callable[..., Any], tuple]]:
    def build() -> tuple[Callable[..., Any], tuple]:
        from hlofuse.examples import cartpole

        return cartpole.make(variant, CARTPOLE_ENVS, CARTPOLE_STEPS)

    return build


def _program(program_name: str) -> Callable[[], tuple[Callable[..., Any], tuple]]:
    def build() -> tuple[Callable[..., Any], tuple]:
        import programs

        p = programs.by_name(program_name)
        return p.fn, p.make_args()

    return build


def examples() -> list[Example]:
    out = [
        Example(f"cartpole_{v}", _cartpole(v))
        for v in ("baseline", "precomputed", "separate", "unrolled")
    ]
    out += [Example(name, _program(prog)) for name, prog in PROGRAM_EXAMPLES.items()]
    return out


_FILENAME_LINE = re.compile(r'^(\d+) "(.*)"$')


def _relative_source_path(path: str) -> str:
    if path.startswith("<"):  # "<string>", "<stdin>", ...
        return path
    p = Path(path)
    try:
        return p.resolve().relative_to(REPO).as_posix()
    except ValueError:
        pass
    parts = p.parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return Path(*parts[parts.index(marker) + 1 :]).as_posix()
    return p.name


def normalize_debug_paths(text: str) -> str:
    """Rewrites the FileNames table of HLO debug info to stable, relative paths."""
    lines = text.split("\n")
    out: list[str] = []
    in_table = False
    for line in lines:
        if line == "FileNames":
            in_table = True
        elif in_table and not line.strip():
            in_table = False
        elif in_table:
            m = _FILENAME_LINE.match(line)
            if m:
                line = f'{m.group(1)} "{_relative_source_path(m.group(2))}"'
        out.append(line)
    return "\n".join(out)


def lower(example: Example) -> str:
    import jax

    fn, args = example.build()
    text = jax.jit(fn, keep_unused=True).lower(*args).as_text(dialect="hlo", debug_info=True)
    text = normalize_debug_paths(text)
    return text if text.endswith("\n") else text + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--check", action="store_true", help="fail if a file is out of date")
    ap.add_argument("--list", action="store_true", help="print example names and exit")
    ap.add_argument("names", nargs="*", help="only these examples (default: all)")
    ns = ap.parse_args(argv)

    todo = examples()
    if ns.list:
        print("\n".join(e.name for e in todo))
        return 0
    if ns.names:
        known = {e.name for e in todo}
        unknown = sorted(set(ns.names) - known)
        if unknown:
            ap.error(f"unknown example(s) {unknown}; valid: {sorted(known)}")
        todo = [e for e in todo if e.name in ns.names]

    stale = []
    for e in todo:
        text = lower(e)
        dest = OUT_DIR / f"{e.name}.hlo"
        old = dest.read_text(encoding="utf-8") if dest.exists() else None
        if ns.check:
            if old != text:
                stale.append(dest)
            continue
        if old != text:
            dest.write_text(text, encoding="utf-8")
            print(f"wrote {dest.relative_to(REPO)} ({len(text)} chars)")
        else:
            print(f"unchanged {dest.relative_to(REPO)}")
    if stale:
        for dest in stale:
            print(f"out of date: {dest.relative_to(REPO)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
