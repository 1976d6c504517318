"""The layers import downwards only (docs/layout.md): passes never import a backend (they get
the timer through the pass context, `passes/measure.py`, and the constant evaluator through
`passes/evaluator.py`), the analysis layer never imports a pass, and the core (ir, text,
passes, backends) never imports jax. One compile route: backends and frontends run no
pipeline (`api` does, and hands them the optimised module). Checked on the source (every
import statement, at module level or inside a function, relative ones resolved)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "hlofuse"


def _imports(path: Path, root: Path = SRC.parent) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in `path` (a module under `root`), relative
    imports resolved from the module's package."""
    tree = ast.parse(path.read_text(), str(path))
    package = list(path.relative_to(root).parent.parts) if path.is_relative_to(root) else []
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found += [(node.lineno, module)]
            found += [(node.lineno, f"{module}.{a.name}") for a in node.names]
    return found


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    out = []
    for path in sorted((SRC / package).rglob("*.py")):
        for line, name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                out.append(f"{path.relative_to(SRC)}:{line} imports {name}")
    return out


@pytest.mark.parametrize(("package", "forbidden"), [
    ("passes", ("hlofuse.backends", "hlofuse.frontends", "hlofuse.tools", "hlofuse.api")),
    ("analysis", ("hlofuse.passes.simplify", "hlofuse.passes.fusion", "hlofuse.backends",
                  "hlofuse.tools")),
    ("ir", ("hlofuse.passes", "hlofuse.backends", "hlofuse.tools", "jax")),
    ("text", ("hlofuse.passes", "hlofuse.backends", "hlofuse.tools", "jax")),
    ("passes", ("jax",)),
    ("backends", ("jax", "hlofuse.frontends", "hlofuse.tools")),
    # one compile route: only api parses for a compile and runs the pipeline
    ("backends", ("hlofuse.passes.pipelines", "hlofuse.api")),
    ("frontends", ("hlofuse.passes.pipelines",)),
])
def test_layers_import_downwards(package: str, forbidden: tuple[str, ...]) -> None:
    assert _violations(package, forbidden) == []


def test_the_check_sees_imports_inside_functions(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from hlofuse.backends import registry\n    import jax.numpy\n")
    assert [n for _, n in _imports(f)] == ["hlofuse.backends", "hlofuse.backends.registry",
                                           "jax.numpy"]


def test_the_check_resolves_relative_imports(tmp_path: Path) -> None:
    f = tmp_path / "hlofuse" / "passes" / "fusion" / "m.py"
    f.parent.mkdir(parents=True)
    f.write_text("from ...backends import registry\nfrom ..measure import timer\n"
                 "from . import x\n")
    assert [n for _, n in _imports(f, root=tmp_path)] == [
        "hlofuse.backends", "hlofuse.backends.registry", "hlofuse.passes.measure",
        "hlofuse.passes.measure.timer", "hlofuse.passes.fusion", "hlofuse.passes.fusion.x"]
