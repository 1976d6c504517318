"""Text rendering of `Explanation` and `Comparison` (see `model.py` for the layout).

The text quotes the input (instruction names, source files and lines from metadata, function
names from the stack-frame tables), so both renderers return it through `escape.terminal`:
control characters in any of those print as `\\xNN`, never reach the terminal.
"""

from __future__ import annotations

from hlofuse.escape import terminal
from hlofuse.tools.explain.model import (
    Boundary,
    Comparison,
    Explanation,
    KernelInfo,
    Section,
    human_bytes,
)


def compress_sources(sources: list[str], limit: int = 12) -> str:
    """["a.py:3", "a.py:4", "a.py:5", "a.py:9"] -> "a.py:3-5,9"."""
    by_file: dict[str, list[int]] = {}
    for s in sources:
        file, _, line = s.rpartition(":")
        by_file.setdefault(file, []).append(int(line))
    parts = []
    for file, lines in by_file.items():
        lines = sorted(set(lines))
        runs: list[str] = []
        start = prev = lines[0]
        for n in [*lines[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            runs.append(str(start) if start == prev else f"{start}-{prev}")
            if n is not None:
                start = prev = n
        if len(runs) > limit:
            runs = [*runs[:limit], "..."]
        parts.append(f"{file}:{','.join(runs)}")
    return "; ".join(parts)


def _kernel_lines(k: KernelInfo, width: int) -> list[str]:
    kind = k.kind + (f" ({k.outputs} outputs)" if k.outputs > 1 else "")
    lines = [f"    {k.name:<{width}}  {kind:<18} {k.shape:<14} "
             f"read {human_bytes(k.bytes_read)}, wrote {human_bytes(k.bytes_written)}",
             f"    {'':<{width}}  ops: {k.ops_text()}"]
    if k.sources:
        lines.append(f"    {'':<{width}}  from {compress_sources(k.sources)}")
    return lines


def _boundary_lines(b: Boundary, history: bool) -> list[str]:
    where = f"value {b.value} ({human_bytes(b.bytes)})"
    if b.source:
        where += f" from {b.source}"
    if b.consumer_source:
        where += f", read at {b.consumer_source}"
    lines = [f"    {b.producer} -> {b.consumer}: {where}"]
    if b.rule is not None:
        tag = " (re-asked on the final graph)" if b.origin == "re-asked" else ""
        lines.append(f"      rule: {b.rule}{tag}")
        if b.why:
            lines.append(f"      why:  {b.why}")
    else:
        lines.append(f"      why:  {b.why}")
    for fix in b.fixes:
        lines.append(f"      fix:  {fix}")
    if history and b.earlier:
        lines.append("      earlier refusals, in order:")
        runs: list[tuple[str, int]] = []
        for r in b.earlier:
            text = str(r)
            if runs and runs[-1][0] == text:
                runs[-1] = (text, runs[-1][1] + 1)
            else:
                runs.append((text, 1))
        lines.extend(f"        - {t}" + (f" (x{n})" if n > 1 else "") for t, n in runs)
    return lines


def _header(s: Section, expl: Explanation) -> str:
    n = s.kernels_per_run
    count = "?" if n is None else str(n)
    moved = expl.bytes_per_run.get(s.title)
    moved_text = f", {human_bytes(moved)} moved" if moved is not None else ""
    parts = [f"{len(s.kernels)} in the body"] if s.per == "iteration" else [
        f"{len(s.kernels)} own"]
    if s.condition_kernels:
        parts.append(f"{len(s.condition_kernels)} in the condition")
    for name, k, trips in s.nested:
        parts.append(f"{name}: {k} x {trips if trips is not None else '?'} trips")
    detail = " + ".join(parts)
    unit = {"iteration": "per iteration", "execution": "per execution",
            "branch execution": "per branch execution", "call": "per call"}[s.per]
    trip_text = f", {s.trip_count} trips" if s.per == "iteration" and s.trip_count else ""
    return (f"{s.title} ({s.computation}): {count} kernels {unit} ({detail}){trip_text}"
            f"{moved_text}")


def render_text(expl: Explanation, *, history: bool = True) -> str:
    out = [f"hlofuse explain: {expl.module} under `{expl.pipeline}`"]
    out.extend(f"note: {n}" for n in expl.notes)
    for s in expl.sections:
        out.append("")
        out.append(_header(s, expl))
        width = max((len(k.name) for k in (*s.kernels, *s.condition_kernels)), default=4)
        if s.kernels:
            out.append("  kernels:")
            for k in s.kernels:
                out.extend(_kernel_lines(k, width))
        if s.condition_kernels:
            out.append("  condition:")
            for k in s.condition_kernels:
                out.extend(_kernel_lines(k, width))
        edges = [b for b in s.boundaries if b.category != "loop-state"]
        if edges:
            out.append("  boundaries:")
            for b in edges:
                out.extend(_boundary_lines(b, history))
        state = [b for b in s.boundaries if b.category == "loop-state"]
        if state:
            out.append("  loop state (written every iteration, read back by the next):")
            for b in state:
                src = f" from {b.source}" if b.source else ""
                out.append(f"    {b.producer} -> {b.consumer}: value {b.value} "
                           f"({human_bytes(b.bytes)}){src}")
    if expl.priority_steps or expl.priority_refused:
        from hlofuse.tools.explain import priority

        out.append("")
        out.extend(priority.lines(expl.priority_steps, expl.priority_refused))
    if expl.transformations or expl.baseline:
        out.append("")
        out.extend(_beyond_lines(expl))
    return terminal("\n".join(out))


def _beyond_lines(expl: Explanation) -> list[str]:
    fired = sum(t.fired for t in expl.transformations)
    refused = len(expl.transformations) - fired
    out = [f"beyond XLA: {fired} transformation(s) fired, {refused} refused"]
    width = max((len(t.pass_name) for t in expl.transformations), default=0)
    for t in expl.transformations:
        where = f" ({t.source})" if t.source else ""
        out.append(f"  {t.pass_name:<{width}}  {t.subject}{where}: {t.text}")
    b = expl.baseline
    if b:
        def fmt(k: int | None, n: int | None) -> str:
            return ("?" if k is None else str(k)) + " kernels / " + (
                "?" if n is None else human_bytes(n))
        out.append(f"  against `{b['pipeline']}`: per run {fmt(b['kernels'], b['bytes'])} -> "
                   f"{fmt(expl.kernels_per_run, expl.bytes_per_run.get('entry'))}")
    return out


def render_comparison(c: Comparison) -> str:
    head = ["section", *c.pipelines]
    rows = [head]
    for title, cells in c.rows.items():
        row = [title]
        for p in c.pipelines:
            k, b = cells.get(p, (None, None))
            ktext = "-" if k is None and b is None else ("?" if k is None else str(k))
            btext = "" if b is None else f" / {human_bytes(b)}"
            row.append(ktext + btext)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [f"hlofuse explain: {c.module}: kernels / bytes moved per run of each section"]
    for j, r in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(r, widths, strict=True))))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return terminal("\n".join(lines))
