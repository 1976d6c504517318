"""Dropping the prelude helpers a translation unit does not use, before it is compiled.

Every generated file starts with the whole prelude (`cexpr.prelude()`: about 110 KB of
`static inline` helpers for every element type, the sub-byte, complex and 8-bit float types,
and mathlib's scalar functions). GCC parses all of it for every unit, about 12 ms of compiler
CPU each, though a unit calls a few dozen of the helpers. `unit(text)` returns `text` with the
prelude cut down to what the rest of the file reaches.

How: the prelude is split once into top-level blocks (`_blocks`): a function definition, a
`#define`, a declaration, or a whole `#if ... #endif` group (an include guard, `#ifndef X` /
`#define X` ... `#endif`, is opened up: its inside is split too). A block is droppable when it
defines one name starting `hf_` or `HF_` (a `static` function, or a macro); every other block
(declarations, types, state, conditional groups, includes) is kept. Droppable blocks are kept
when a kept block or the rest of the file names them, transitively; kept blocks stay in their
order, so every definition still comes before its uses.

Conditions enforced:
- A text without the prelude, verbatim, is returned unchanged.
- Nothing is added or reordered, and only definitions the file never names are removed (any
  mention counts: in code, in a macro, in a comment, in an `#if`), so the file means what it
  meant; a helper it needed and lost would fail to compile, never compile differently.
- The result is a function of the text alone (object keys and unit cuts stay deterministic).
"""

from __future__ import annotations

import functools
import re

from hlofuse.backends.cpu import cexpr

_NAME = re.compile(r"\b(?:hf|HF)_\w+")
_FUNCTION = re.compile(r"\b((?:hf|HF)_\w+)\s*\(")
_DEFINE = re.compile(r"#\s*define\s+((?:hf|HF)_\w+)")
_TABLE = re.compile(r"[^=]*?\b((?:hf|HF)_\w+)\s*\[[^\]=]*\]\s*=\s*\{[^;]*\}\s*;", re.DOTALL)
# what a definition's head starts with where it is file-local (the prelude's macros for
# `static inline` included: fpenv's HF_FPENV_FN, mathlib's HF_INLINE)
_STATIC = frozenset({"static", "HF_FPENV_FN", "HF_INLINE"})
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
_LITERAL = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')


class _Block:
    __slots__ = ("defines", "names", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.defines = _defines(text)  # the one name a droppable block defines, or None
        self.names = set(_NAME.findall(text))


def _code(text: str) -> str:
    """`text` without comments and string or character literals."""
    return _LITERAL.sub('""', _COMMENT.sub(" ", text))


def _defines(text: str) -> str | None:
    """The name `text` defines if it is a droppable block: a `static` function definition
    (signature then a braced body), a `static const` array of an hf_ name with its
    initializer, or one `#define` of an hf_ name."""
    code = _code(text).strip()
    if code.startswith("#"):
        lines = code.split("\n")
        m = _DEFINE.match(code)
        if m and all(x.rstrip().endswith("\\") for x in lines[:-1]):
            return m.group(1)
        return None
    brace = code.find("{")
    if brace < 0 or "#" in code[:brace] or ";" in code[:brace]:
        return None
    head = code[:brace]
    if not _STATIC.intersection(head.split()):
        return None
    table = _TABLE.fullmatch(code)
    if table is not None:
        return table.group(1)
    if not code.endswith("}"):
        return None
    names = _FUNCTION.findall(head)
    return names[0] if len(names) == 1 else None


def _split(lines: list[str]) -> list[str]:
    """Top-level blocks of C lines: each ends where braces and `#if` groups are closed, no
    `\\` continues the line, and the line ends a statement, a body or a directive."""
    blocks: list[str] = []
    cur: list[str] = []
    braces = groups = 0
    for line in lines:
        cur.append(line)
        code = _code(line)
        stripped = code.strip()
        if stripped.startswith("#"):
            word = stripped[1:].lstrip().split(" ", 1)[0]
            if word in ("if", "ifdef", "ifndef"):
                groups += 1
            elif word == "endif":
                groups -= 1
        else:
            braces += code.count("{") - code.count("}")
        if (braces == 0 and groups == 0 and not line.rstrip("\n").endswith("\\")
                and (not stripped or stripped.startswith("#") or stripped[-1] in ";}")):
            blocks.append("".join(cur))
            cur = []
    if cur:
        blocks.append("".join(cur))
    return blocks


def _open_guards(blocks: list[str]) -> list[str]:
    """Blocks with each include guard (`#ifndef X`, `#define X`, ..., `#endif`) opened up:
    the guard's lines become blocks of their own around its inside's blocks."""
    out: list[str] = []
    for block in blocks:
        lines = block.splitlines(keepends=True)
        first = lines[0].split()
        if (len(lines) > 3 and first[:1] == ["#ifndef"] and len(first) == 2
                and lines[1].split() == ["#define", first[1]]
                and lines[-1].startswith("#endif")):
            out.append(lines[0] + lines[1])
            out.extend(_open_guards(_split(lines[2:-1])))
            out.append(lines[-1])
        else:
            out.append(block)
    return out


@functools.cache
def _blocks(prelude: str) -> tuple[_Block, ...]:
    return tuple(_Block(b) for b in _open_guards(_split(prelude.splitlines(keepends=True))))


@functools.cache
def _index(prelude: str) -> tuple[dict[str, int], frozenset[str]]:
    """The block defining each droppable name, and the names the always-kept blocks mention
    (the same for every unit: worked out once per prelude)."""
    blocks = _blocks(prelude)
    by_name = {b.defines: i for i, b in enumerate(blocks) if b.defines is not None}
    return by_name, frozenset(n for b in blocks if b.defines is None for n in b.names)


def keep(prelude: str, rest: str) -> str:
    """The blocks of `prelude` that `rest` (the remainder of the file) reaches, in order."""
    blocks = _blocks(prelude)
    by_name, always = _index(prelude)
    kept = [b.defines is None for b in blocks]
    todo = set(_NAME.findall(rest)) | always
    while todo:
        i = by_name.get(todo.pop())
        if i is not None and not kept[i]:
            kept[i] = True
            todo |= blocks[i].names
    return "".join(b.text for b, k in zip(blocks, kept, strict=True) if k)


def unit(text: str) -> str:
    """`text` (a translation unit) with the prelude's unused helpers dropped (module
    docstring); unchanged if it does not hold the prelude."""
    prelude = cexpr.prelude()
    at = text.find(prelude)
    if at < 0:
        return text
    end = at + len(prelude)
    return text[:at] + keep(prelude, text[:at] + text[end:]) + text[end:]
