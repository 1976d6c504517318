"""The fusion rules as data (passes/fusion/rules.py): every refusal under `passes/` carries a
literal rule code from the registry, the registry is well formed, the codes reach the trace and
`explain`, and `explain` finds readings and fixes by code, never by a reason's text."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from hlofuse import examples
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.rules import ADVICE_KINDS, RELAX_KINDS, RULES, setting_of
from hlofuse.passes.fusion.trace import TraceEvent, trace_of
from hlofuse.text import parse
from hlofuse.tools import explain as ex
from hlofuse.tools.explain import fixes as fx
from hlofuse.tools.explain.model import Refusal

SRC = Path(__file__).resolve().parents[1] / "src" / "hlofuse"
PASSES = SRC / "passes"
EXPLAIN = SRC / "tools" / "explain"

# ----- static: every refusal names a registered code ----------------------------------------


def _refusal_calls(tree: ast.AST) -> Iterator[tuple[ast.Call, int]]:
    """`FusionDecision.no(reason, rule, ...)` / `.check(cond, reason, rule, ...)` calls, with
    the position of the rule argument."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "FusionDecision" and node.func.attr in ("no", "check")):
            yield node, 1 if node.func.attr == "no" else 2


def _argument(call: ast.Call, position: int, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return call.args[position] if len(call.args) > position else None


def _literal_codes(expr: ast.expr) -> set[str] | None:
    """The codes a literal (or a conditional between literals) names; None if not literal."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {expr.value}
    if isinstance(expr, ast.IfExp):
        a, b = _literal_codes(expr.body), _literal_codes(expr.orelse)
        return a | b if a is not None and b is not None else None
    return None


def _enclosing_functions(tree: ast.AST) -> dict[ast.AST, ast.FunctionDef]:
    """node -> the innermost function holding it (ast.walk meets outer functions first)."""
    out: dict[ast.AST, ast.FunctionDef] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef):
            for node in ast.walk(fn):
                if node is not fn:
                    out[node] = fn
    return out


def _codes_at(tree: ast.AST, where: str, call: ast.Call, expr: ast.expr | None,
              owner: dict[ast.AST, ast.FunctionDef], problems: list[str]) -> set[str]:
    """The codes the rule argument `expr` of `call` can take, or a problem recorded.
    Allowed besides literals: forwarding another decision's code (`d.rule`), and a parameter
    of the enclosing function when every call of that function passes a literal code."""
    line = f"{where}:{call.lineno}"
    if expr is None:
        problems.append(f"{line}: refusal without a rule code")
        return set()
    codes = _literal_codes(expr)
    if codes is not None:
        return codes
    if isinstance(expr, ast.Attribute) and expr.attr == "rule":
        return set()  # another decision's code, checked where that decision was made
    fn = owner.get(call)
    if isinstance(expr, ast.Name) and fn is not None:
        params = [a.arg for a in fn.args.args]
        if expr.id in params:
            position = params.index(expr.id)
            found: set[str] = set()
            callers = [c for c in ast.walk(tree) if isinstance(c, ast.Call)
                       and isinstance(c.func, ast.Name) and c.func.id == fn.name]
            if not callers:
                problems.append(f"{line}: {fn.name}'s rule parameter is never passed")
            for c in callers:
                got = _literal_codes(a) if (a := _argument(c, position, expr.id)) else None
                if got is None:
                    problems.append(f"{where}:{c.lineno}: {fn.name}() without a literal code")
                else:
                    found |= got
            return found
    problems.append(f"{line}: rule code {ast.unparse(expr)!r} is not a literal")
    return set()


def _scan_passes() -> tuple[set[str], list[str], int]:
    codes: set[str] = set()
    problems: list[str] = []
    calls = 0
    for path in sorted(PASSES.rglob("*.py")):
        if path.name == "decision.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        owner = _enclosing_functions(tree)
        where = str(path.relative_to(SRC))
        for call, position in _refusal_calls(tree):
            calls += 1
            expr = _argument(call, position, "rule")
            for code in _codes_at(tree, where, call, expr, owner, problems):
                if code not in RULES:
                    problems.append(f"{where}:{call.lineno}: code {code!r} is not in RULES")
                codes.add(code)
    return codes, problems, calls


def test_every_refusal_in_the_passes_carries_a_registered_code() -> None:
    codes, problems, calls = _scan_passes()
    assert calls > 80  # the scan sees the passes' refusals
    assert not problems, "\n".join(problems)
    assert set(RULES) == codes, f"registered but never used: {sorted(set(RULES) - codes)}"


def test_the_scan_catches_a_refusal_without_a_code() -> None:
    tree = ast.parse("def f(x):\n    return FusionDecision.no('why')\n"
                     "def g(x):\n    return FusionDecision.check(x, 'why', name)\n"
                     "def h(r):\n    return FusionDecision.no('why', r)\n"
                     "def k():\n    return h(compute())\n")
    owner = _enclosing_functions(tree)
    problems: list[str] = []
    for call, position in _refusal_calls(tree):
        _codes_at(tree, "t.py", call, _argument(call, position, "rule"), owner, problems)
    assert len(problems) == 3, problems
    assert "without a rule code" in problems[0] and "not a literal" in problems[1]
    assert "h() without a literal code" in problems[2]


# ----- the registry ---------------------------------------------------------------------


def test_registry_is_well_formed() -> None:
    fields = {f.name: f for f in dataclasses.fields(FusionConfig)}
    defaults = FusionConfig()
    for code, r in RULES.items():
        assert r.code == code and r.reading, code
        assert r.relax in RELAX_KINDS and r.advice in ADVICE_KINDS, code
        if "." in code:  # a fixed rule: family.rule
            family, _, name = code.partition(".")
            assert family.isidentifier() and name.isidentifier() and code == code.lower(), code
            assert r.setting == "" and r.relax == "" and r.value is None, code
        else:  # the FusionConfig setting that relaxes it
            assert code in fields, f"{code} is neither dotted nor a FusionConfig setting"
            assert r.setting == code
        if r.relax == "switch":  # (the value a pipeline's config does not already have)
            assert type(r.value) is type(getattr(defaults, code)), code
        if r.relax in ("limit", "above", "sum"):
            assert r.figures, code
        if r.relax in ("sum", "above"):  # (no usual text for these)
            assert r.fix, code
    assert setting_of("merger_bytes_ratio") == "merger_bytes_ratio"
    assert setting_of("mof_fusible.loop_shapes") == "" and setting_of("nope") == ""


def test_docs_list_every_code() -> None:
    text = (SRC.parents[1] / "docs" / "fusion.md").read_text()
    section = text[text.index("## Rule codes"):]
    section = section[:section.index("\n## ", 1)]
    missing = [code for code in RULES if f"`{code}`" not in section]
    assert not missing, f"docs/fusion.md's Rule codes table lacks {missing}"


def test_trace_event_says_setting_or_rule() -> None:
    d = FusionDecision.no("different loop shapes", "mof_fusible.loop_shapes")
    e = TraceEvent("multi-output-fusion", "a", "b", "refused", d.reason or "", d.rule)
    assert str(e).endswith("[rule: mof_fusible.loop_shapes]")
    e = TraceEvent("fusion-merger", "a", "b", "refused", "x", "merger_bytes_ratio")
    assert str(e).endswith("[setting: merger_bytes_ratio]")


# ----- explain reads codes, not reasons ------------------------------------------------------


def _mentions_reason(node: ast.AST) -> bool:
    return any((isinstance(n, ast.Name) and "reason" in n.id)
               or (isinstance(n, ast.Attribute) and "reason" in n.attr) for n in ast.walk(node))


_TEXT_METHODS = {"startswith", "endswith", "find", "rfind", "index", "count", "split",
                 "partition", "search", "match", "fullmatch", "findall"}


def _reason_matching(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn))
                                                 for op in node.ops):
            if _mentions_reason(node):
                lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in _TEXT_METHODS
              and (_mentions_reason(node.func.value)
                   or any(_mentions_reason(a) for a in node.args))):
            lines.append(node.lineno)
    return lines


def test_explain_never_matches_on_reason_text() -> None:
    for path in sorted(EXPLAIN.glob("*.py")):
        lines = _reason_matching(ast.parse(path.read_text(), str(path)))
        assert not lines, f"{path.name} reads meaning from a reason's text at lines {lines}"
    assert not hasattr(fx, "READINGS")
    # (the check itself sees the old style)
    old = "def reading(reason):\n    for key, text in READINGS:\n        if key in reason:\n" \
          "            return text\n    return 'x' if reason.startswith('y') else ''\n"
    assert len(_reason_matching(ast.parse(old))) == 2


def test_fixes_by_code_whatever_the_reason_says() -> None:
    r = Refusal("multi-output-fusion", "some other words", "", rule="mof_fusible.loop_shapes")
    assert fx.reading(r.rule).startswith("the two kernels iterate over different shapes")
    fix = fx.rewrite_fix(r, {"producer_shape": "f32[4]", "consumer_shape": "f32[8]"})
    assert fix is not None and "f32[4] vs f32[8]" in fix.text
    assert fx.setting_fix(r) is None  # a fixed rule
    # the reason reads like a different rule: the code decides
    r = Refusal("fusion-merger", "different loop shapes", "merger_bytes_ratio",
                {"ratio": 1.1429}, rule="merger_bytes_ratio")
    assert fx.rewrite_fix(r, {"producer_shape": "a", "consumer_shape": "b"}) is None
    fix = fx.setting_fix(r)
    assert fix is not None and (fix.setting, fix.value) == ("merger_bytes_ratio", 1.15)
    r = Refusal("instruction-fusion", "x", "", rule="instruction_fusion.not_duplicable")
    assert fx.rewrite_fix(r, {"rng_user": True}) is not None
    assert fx.rewrite_fix(r, {"rng_user": False}) is None
    r = Refusal("instruction-fusion", "x", "max_operands_and_outputs",
                {"operands": 60, "outputs": 6}, rule="max_operands_and_outputs")
    fix = fx.setting_fix(r)
    assert fix is not None and fix.value == 66 and fix.text.startswith("allows 66 operands")
    assert fx.reading("no.such_rule") == ""


# ----- end to end -------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", ["xla", "hlofuse"])
def test_every_recorded_refusal_has_a_registered_code(pipeline: str) -> None:
    expl = ex.explain(parse(examples.text("cartpole_baseline")), pipeline=pipeline)
    refused = trace_of(expl.fused_module).refused()
    assert refused
    unknown = {(e.pass_name, e.rule, e.reason) for e in refused if e.rule not in RULES}
    assert not unknown, unknown


def test_explain_carries_the_code_and_the_setting() -> None:
    expl = ex.explain(examples.text("cartpole_baseline"), pipeline="xla")
    refusals = [r for b in expl.boundaries if b.rule is not None for r in (b.rule, *b.earlier)]
    assert refusals and all(r.rule in RULES for r in refusals)
    assert all(r.setting == setting_of(r.rule) for r in refusals)
    shapes = [b for b in expl.boundaries
              if b.rule is not None and b.rule.rule == "mof_fusible.loop_shapes"]
    assert shapes and all(b.why == RULES["mof_fusible.loop_shapes"].reading for b in shapes)
    assert any(r.rule == r.setting == "merger_bytes_ratio" for r in refusals)
    js = expl.to_json()
    sample = next(b["rule"] for s in js["sections"] for b in s["boundaries"] if b["rule"])
    assert sample["rule"] in RULES and "setting" in sample
