"""The layers import downwards only (docs/layout.md): passes never import a backend (they get
timers and the constant evaluator through `passes/measure.py` and `passes/evaluator.py`), the
analysis layer never imports a pass, and the core (ir, text, passes, backends) never imports
jax. Checked on the source (every import statement, at module level or inside a function)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "hlofuse"


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module)]
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
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
])
def test_layers_import_downwards(package: str, forbidden: tuple[str, ...]) -> None:
    assert _violations(package, forbidden) == []


def test_the_check_sees_imports_inside_functions(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from hlofuse.backends import registry\n    import jax.numpy\n")
    assert [n for _, n in _imports(f)] == ["hlofuse.backends", "hlofuse.backends.registry",
                                           "jax.numpy"]
