"""The one compile route (api.py, docs/layout.md "The compile route"): api parses and runs the
pipeline, once, and hands backends the optimised module (or, for a backend's cache, the
function that makes it); with no backend named, a refusal the default backend declares
(`Backend.refuses`) binds the same module to its `fallback`, and anything else is raised."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hlofuse import api
from hlofuse.backends import registry
from hlofuse.errors import CompileError, HloError
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.text import parse

TEXT = """HloModule m
ENTRY e {
  a = f32[8] parameter(0)
  b = f32[8] parameter(1)
  s = f32[8] add(a, b)
  ROOT m = f32[8] multiply(s, a)
}
"""


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """A preferred backend "fake" that refuses what `seen` says (CompileError: a refusal;
    else a failure) and falls back on the interpreter."""
    seen: list[Any] = []

    def compile(module: Module, **options: Any) -> Any:
        seen.append(module)
        raise seen[0](f"fake cannot run {module.entry.root.name}")

    backend = registry.Backend("fake", "a test backend", lambda: None, compile,
                               fallback="interpreter",
                               refuses=lambda exc: type(exc) is CompileError)
    monkeypatch.setitem(registry._BACKENDS, "fake", backend)
    monkeypatch.setattr(registry, "PREFERENCE", ["fake", *registry.PREFERENCE])
    return seen


def _count_pipelines(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    runs: list[str] = []
    real = api.optimise

    def counted(module_or_text: Any, pipeline: str | None, **kw: Any) -> Any:
        runs.append(str(pipeline))
        return real(module_or_text, pipeline, **kw)

    monkeypatch.setattr(api, "optimise", counted)
    return runs


def test_a_refusal_binds_the_same_optimised_module_to_the_fallback(
        fake: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    fake.append(CompileError)
    runs = _count_pipelines(monkeypatch)
    told: list[tuple[str, str, str]] = []
    module, run, backend = api.bind(parse(TEXT), "xla", None,
                                    refused=lambda a, b, e: told.append((a, b, str(e))))
    assert backend == "interpreter" and runs == ["xla"]  # (optimised once)
    assert fake[1] is module and module.entry.root.opcode is Opcode.FUSION
    assert told == [("fake", "interpreter", f"fake cannot run {module.entry.root.name}")]
    a, b = np.arange(8, dtype=np.float32), np.full(8, 2, np.float32)
    np.testing.assert_array_equal(run(a, b)[0], (a + b) * a)


def test_a_failure_that_is_no_refusal_is_raised(fake: list[Any]) -> None:
    fake.append(HloError)
    with pytest.raises(HloError, match="fake cannot run"):
        api.bind(parse(TEXT), "xla", None, refused=lambda *a: pytest.fail("no fallback"))


def test_a_named_backend_never_falls_back(fake: list[Any]) -> None:
    fake.append(CompileError)
    with pytest.raises(CompileError, match="fake cannot run"):
        api.bind(parse(TEXT), "xla", "fake")


def test_a_backend_cache_gets_the_route_not_the_pipeline(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """compile_text is handed `prepare`: api's parse + pipeline of the text, made only when
    the backend asks (a cache miss)."""
    asked: list[Module] = []

    def compile_text(text: str, pipeline: str | None, threads: Any, subnormals: str,
                     host_callbacks: Any, prepare: Any) -> Any:
        module = prepare()
        asked.append(module)
        return module, registry.get("interpreter").compile(module)

    backend = registry.Backend("cached", "a test backend", lambda: None,
                               registry.get("interpreter").compile, compile_text)
    monkeypatch.setitem(registry._BACKENDS, "cached", backend)
    exe = api.compile(TEXT, pipeline="xla", backend="cached")
    assert asked == [exe.module] and exe.module.entry.root.opcode is Opcode.FUSION
    a, b = np.arange(8, dtype=np.float32), np.full(8, 2, np.float32)
    np.testing.assert_array_equal(exe(a, b)[0], (a + b) * a)


def test_pipelines_run_by_api_carry_the_backends_timer() -> None:
    from hlofuse.backends import measure
    from hlofuse.passes.base import Context

    assert api.pipeline_context().timer is measure.time_candidates

    def mine(key: str, candidates: dict[int, Module]) -> None:
        return None

    assert api.pipeline_context(Context(timer=mine)).timer is mine
