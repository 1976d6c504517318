"""XLA fusion conformance cases: loading, running through our passes, and checking `expect`.

The cases live in `../shared/conformance/xla_fusion_cases.jsonl` (see its README). This module
is shared by the conformance tests of every fusion pass:

    case = load_cases()["gpu/instruction_fusion_test.cc::BitcastIntoAdd"]
    module, changed = run_case(case)          # parse, run the named pass with the case's config
    problems = check_expect(case, module, changed)   # [] when every assertion holds

`check_expect` understands the README's `expect` vocabulary; keys it does not know yet are
reported as problems ("unsupported expect key ..."), so a case never passes by accident.
Patterns are opcode trees: `add(parameter, constant)` (exact operands), a bare `fusion` (any
operands), `F` (one fusion instance wherever it appears) and `_` (anything).

Run `python tests/conformance.py` for the pass rate per pass.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode

CASES_PATH = Path(__file__).resolve().parents[2] / "shared" / "conformance" / \
    "xla_fusion_cases.jsonl"
if not CASES_PATH.exists():  # a checkout beside /work/shared
    CASES_PATH = Path("/work/shared/conformance/xla_fusion_cases.jsonl")

# The operand limit the conformance modules were written against (XLA's current value).
SOURCE_MAX_OPERANDS = 96


def load_cases(pass_name: str | None = None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if not CASES_PATH.exists():
        return out
    for line in CASES_PATH.read_text().splitlines():
        if not line.strip():
            continue
        case = json.loads(line)
        if pass_name is None or case["pass"] == pass_name:
            out[case["id"]] = case
    return out


# ----- running -----------------------------------------------------------------------------


def pass_options(case: dict[str, Any]) -> dict[str, Any]:
    """FusionConfig settings for a case, from its `config`."""
    cfg = case.get("config") or {}
    opts: dict[str, Any] = {"max_operands_and_outputs": SOURCE_MAX_OPERANDS}
    if cfg.get("may_duplicate") is not None:
        opts["may_duplicate"] = bool(cfg["may_duplicate"])
    if "generic" in str(cfg.get("variant", "")):
        opts["variant"] = "generic"
    return opts


PassRunner = Callable[[Module, dict[str, Any]], bool]
RUNNERS: dict[str, PassRunner] = {}


def runner(pass_name: str) -> Callable[[PassRunner], PassRunner]:
    def wrap(fn: PassRunner) -> PassRunner:
        RUNNERS[pass_name] = fn
        return fn

    return wrap


@runner("instruction_fusion")
def _run_instruction_fusion(module: Module, opts: dict[str, Any]) -> bool:
    from hlofuse.passes.fusion.core_passes import InstructionFusion

    return InstructionFusion(**opts).run(module)


@runner("priority_fusion")
def _run_priority_fusion(module: Module, opts: dict[str, Any]) -> bool:
    from hlofuse.passes.fusion.priority_fusion import PriorityFusion

    return PriorityFusion(**opts).run(module)


@runner("fusion_merger")
def _run_fusion_merger(module: Module, opts: dict[str, Any]) -> bool:
    from hlofuse.passes.fusion.fusion_merger import FusionMerger

    return FusionMerger(**opts).run(module)


def parse_case(case: dict[str, Any]) -> Module:
    from hlofuse.text import parse

    # (XLA's tests elide large constants: their values never decide a fusion)
    return parse(case["hlo"], allow_elided_constants=True)


def run_case(case: dict[str, Any]) -> tuple[Module, bool]:
    module = parse_case(case)
    run = RUNNERS[case["pass"]]
    changed = run(module, pass_options(case))
    return module, changed


# ----- patterns ----------------------------------------------------------------------------


@dataclass
class Pattern:
    name: str
    args: list[Pattern] | None  # None: bare name, any operands


def parse_pattern(text: str) -> Pattern:
    tokens = re.findall(r"[A-Za-z_][\w.\-]*|[(),]", text)
    pos = 0

    def node() -> Pattern:
        nonlocal pos
        name = tokens[pos]
        pos += 1
        if pos < len(tokens) and tokens[pos] == "(":
            pos += 1
            args: list[Pattern] = []
            if tokens[pos] == ")":
                pos += 1
                return Pattern(name, args)
            while True:
                args.append(node())
                if tokens[pos] == ",":
                    pos += 1
                    continue
                assert tokens[pos] == ")", text
                pos += 1
                return Pattern(name, args)
        return Pattern(name, None)

    return node()


def match(pattern: Pattern | str, instr: Instruction,
          bindings: dict[str, Instruction] | None = None) -> bool:
    if isinstance(pattern, str):
        pattern = parse_pattern(pattern)
    bindings = {} if bindings is None else bindings
    if pattern.name == "_":
        ok = True
    elif pattern.name == "F":
        if "F" in bindings:
            return bindings["F"] is instr
        if instr.opcode is not Opcode.FUSION:
            return False
        bindings["F"] = instr
        ok = True
    else:
        ok = instr.opcode.value == pattern.name
    if not ok:
        return False
    if pattern.args is None:
        return True
    if len(pattern.args) != instr.operand_count:
        return False
    return all(match(p, o, bindings) for p, o in zip(pattern.args, instr.operands))


def describe(instr: Instruction, depth: int = 3) -> str:
    if depth == 0 or not instr.operands:
        return instr.opcode.value
    return f"{instr.opcode.value}({', '.join(describe(o, depth - 1) for o in instr.operands)})"


# ----- expectations ------------------------------------------------------------------------


def _fusion_computations(module: Module) -> set[int]:
    return {id(c) for c in module.computations if c.is_fusion_computation}


def _mof_target(module: Module, bindings: dict[str, Instruction]) -> Instruction | None:
    if "F" in bindings:
        return bindings["F"]
    root = module.entry.root
    try:
        cand = root.operand(0).operand(0)
    except IndexError:
        cand = root
    if cand.opcode is Opcode.FUSION:
        return cand
    return root if root.opcode is Opcode.FUSION else None


def check_expect(case: dict[str, Any], module: Module, changed: bool) -> list[str]:
    """Every failed assertion of the case, as a readable line ([] = the case passes)."""
    problems: list[str] = []
    want_changed = case.get("expect_changed")
    if want_changed is not None and want_changed != changed:
        problems.append(f"changed: expected {want_changed}, got {changed}")
    expect = case.get("expect") or {}
    entry = module.entry
    root = entry.root
    fusion_comps = _fusion_computations(module)
    bindings: dict[str, Instruction] = {}
    limit = pass_options(case).get("max_operands_and_outputs", SOURCE_MAX_OPERANDS)

    def fused_root() -> Instruction | None:
        return root.fused_computation.root if root.opcode is Opcode.FUSION else None

    for key, want in expect.items():
        got: Any
        if key == "entry_root_opcode":
            got = root.opcode.value
            ok = got == want
        elif key == "entry_root_operands":
            got = [o.opcode.value for o in root.operands]
            ok = got == want
        elif key == "entry_root_pattern":
            got = describe(root)
            ok = match(want, root, bindings)
        elif key == "entry_root_shape":
            got = str(root.shape)
            ok = got == want
        elif key == "kind":
            got = root.fusion_kind if root.opcode is Opcode.FUSION else None
            ok = got == want
        elif key in ("fused_root_opcode", "fused_root_pattern"):
            fr = fused_root()
            got = describe(fr) if fr is not None else None
            if fr is None:
                ok = False
            elif key == "fused_root_opcode":
                ok = fr.opcode.value == want
            else:
                ok = match(want, fr, bindings)
        elif key == "fusion_count":
            got = sum(1 for i in module.all_instructions() if i.opcode is Opcode.FUSION)
            ok = got == want
        elif key in ("entry_fusion_count", "entry_fusion_count_at_least"):
            got = sum(1 for i in entry.instructions if i.opcode is Opcode.FUSION)
            ok = got == want if key == "entry_fusion_count" else got >= want
        elif key == "multi_output_fusion_count":
            got = sum(1 for i in module.all_instructions() if i.opcode is Opcode.FUSION
                      and id(i.parent) not in fusion_comps
                      and i.fused_computation.root.opcode is Opcode.TUPLE)
            ok = got == want
        elif key == "opcode_count":
            got = {}
            for op in want:
                got[op] = sum(1 for i in module.all_instructions() if i.opcode.value == op)
            ok = got == want
        elif key == "not_fused":
            got = []
            for name in want:
                found = [i for i in module.all_instructions() if i.name == name]
                got.append(bool(found) and all(id(i.parent) not in fusion_comps
                                               for i in found))
            ok = all(got)
        elif key == "not_fused_opcodes":
            got = {}
            for op in want:
                instrs = [i for i in module.all_instructions() if i.opcode.value == op]
                got[op] = bool(instrs) and all(id(i.parent) not in fusion_comps
                                               for i in instrs)
            ok = all(got.values())
        elif key == "max_operand_count_any_entry_instruction":
            got = max((i.operand_count for i in entry.instructions), default=0)
            ok = got <= min(limit, expect.get("max_operand_count_value_at_source", limit))
        elif key == "max_operand_count_value_at_source":
            continue
        elif key == "no_fusion_in_computations":
            got = [c.name for c in module.computations if c.name in want
                   and any(i.opcode is Opcode.FUSION for i in c.instructions)]
            ok = not got and all(any(c.name == n for c in module.computations) for n in want)
        elif key == "fused_instruction_count_by_root_operand":
            got = [len(o.fused_computation.instructions) if o.opcode is Opcode.FUSION
                   else None for o in root.operands]
            ok = got == want
        elif key == "fused_computations_with_root_opcode":
            got = {}
            for op in want:
                got[op] = sum(1 for c in module.computations if c.is_fusion_computation
                              and c.root.opcode.value == op)
            ok = got == want
        elif key in ("multi_output", "mof_fused_root_pattern"):
            target = _mof_target(module, bindings)
            froot = target.fused_computation.root if target is not None else None
            got = describe(froot) if froot is not None else None
            if key == "multi_output":
                ok = (froot is not None and froot.opcode is Opcode.TUPLE) == want
            else:
                ok = froot is not None and match(want, froot, bindings)
        elif key in ("entry_param0_user_count", "entry_param0_user_opcode"):
            p0 = entry.parameter(0)
            if key == "entry_param0_user_count":
                got = p0.user_count
                ok = got == want
            else:
                got = [u.opcode.value for u in p0.users]
                ok = all(g == want for g in got) and bool(got)
        elif key in PRIORITY_KEYS:
            got, ok = PRIORITY_KEYS[key](module, want)
        else:
            problems.append(f"unsupported expect key {key!r}")
            continue
        if not ok:
            problems.append(f"{key}: expected {want!r}, got {got!r}")
    return problems


def evaluate(case: dict[str, Any]) -> list[str]:
    """Run a case end to end; returns its problems (exceptions become problems)."""
    try:
        if case["pass"] == "fusible_predicate":
            from predicate_cases import check_predicate_case

            return check_predicate_case(case)
        if case["pass"] not in RUNNERS:
            return [f"no runner for pass {case['pass']}"]
        module, changed = run_case(case)
        return check_expect(case, module, changed)
    except Exception as exc:  # report, do not crash the summary
        return [f"{type(exc).__name__}: {exc}"]


def summary(passes: tuple[str, ...] = ("instruction_fusion", "fusion_merger",
                                        "fusible_predicate")) -> str:
    lines = []
    total = ok_total = 0
    for p in passes:
        cases = load_cases(p)
        ok = 0
        failures = []
        for cid, case in cases.items():
            problems = evaluate(case)
            if problems:
                failures.append(f"    {cid}: {'; '.join(problems)[:300]}")
            else:
                ok += 1
        total += len(cases)
        ok_total += ok
        lines.append(f"{p}: {ok}/{len(cases)}")
        lines.extend(failures)
    lines.append(f"overall: {ok_total}/{total} = {ok_total / max(1, total):.1%}")
    return "\n".join(lines)


# ----- priority fusion's expect keys --------------------------------------------------------


def _entry_sequence(module: Module, want: list[str]) -> tuple[Any, bool]:
    """FileCheck-like: the entry's instructions, in order, each item's first word an opcode
    (`param` = parameter), `ROOT` marking the root."""
    items = []
    for text in want:
        words = re.findall(r"[a-z][a-z\-]*", text.replace("ROOT", ""))
        op = {"param": "parameter"}.get(words[0], words[0])
        items.append((op, text.lstrip().startswith("ROOT")))
    got = [(i.opcode.value, i is module.entry.root) for i in module.entry.instructions
           if i.opcode is not Opcode.CONSTANT or any(o == "constant" for o, _ in items)]
    return got, got == items


def _emitter_kinds(module: Module, want: list[str]) -> tuple[Any, bool]:
    """The multiset of the entry fusions' emitter kinds: reduction (a reduce hero), transpose
    (a tiled transpose hero), else loop."""
    from hlofuse.passes.fusion.gpu_fusible import (
        is_input_fusible_transpose,
        is_reduce_input_fusion,
    )

    got = []
    for f in module.entry.instructions:
        if f.opcode is not Opcode.FUSION:
            continue
        if is_reduce_input_fusion(f):
            got.append("kReduction")
        elif is_input_fusible_transpose(f):
            got.append("kTranspose")
        else:
            got.append("kLoop")
    return sorted(got), sorted(got) == sorted(want)


def _root_patterns_in_order(module: Module, want: list[str]) -> tuple[Any, bool]:
    roots = [f.fused_computation.root for f in module.entry.instructions
             if f.opcode is Opcode.FUSION]
    got = [describe(r, 2) for r in roots]
    pos = 0
    for pattern in want:
        while pos < len(roots) and not match(normalize_matcher_names(pattern), roots[pos]):
            pos += 1
        if pos == len(roots):
            return got, False
        pos += 1
    return got, True


def _called_root(module: Module, want: str, attr: str) -> tuple[Any, bool]:
    calls = [i for i in module.entry.instructions if i.opcode is Opcode.CALL]
    if not calls:
        return None, False
    root = calls[0].attrs["to_apply"].root
    got = root.opcode.value if attr == "opcode" else (
        root.fusion_kind if root.opcode is Opcode.FUSION else None)
    return got, got == want


PRIORITY_KEYS: dict[str, Callable[[Module, Any], tuple[Any, bool]]] = {
    "entry_instruction_sequence": _entry_sequence,
    "emitter_fusion_kinds_multiset": _emitter_kinds,
    "fused_computation_root_patterns_in_order": _root_patterns_in_order,
    "called_computation_root_opcode": lambda m, w: _called_root(m, w, "opcode"),
    "called_computation_root_kind": lambda m, w: _called_root(m, w, "kind"),
}


# ----- multi-output and horizontal fusion (added for tests/test_conformance_mof.py) ----------


@runner("multi_output_fusion")
def _run_multi_output_fusion(module: Module, opts: dict[str, Any]) -> bool:
    from hlofuse.passes.fusion.core_passes import MultiOutputFusion

    return MultiOutputFusion(**opts).run(module)


@runner("horizontal_loop_fusion")
def _run_horizontal_loop_fusion(module: Module, opts: dict[str, Any]) -> bool:
    from hlofuse.passes.fusion.horizontal import HorizontalLoopFusion

    return HorizontalLoopFusion(**opts).run(module)


@runner("horizontal_input_fusion")
def _run_horizontal_input_fusion(module: Module, opts: dict[str, Any]) -> bool:
    from hlofuse.passes.fusion.horizontal import HorizontalInputFusion

    return HorizontalInputFusion(**opts).run(module)


def run_case_with_pipeline(case: dict[str, Any]) -> tuple[Module, bool]:
    """Like `run_case`, but honours a `config.pipeline` of the form `HloPassFix[pass, hlo_dce]`
    (the pass, then DCE, repeated until nothing changes)."""
    pipeline = str((case.get("config") or {}).get("pipeline", ""))
    if not pipeline.startswith("HloPassFix"):
        return run_case(case)
    from hlofuse.passes.simplify.dce import Dce

    module = parse_case(case)
    run = RUNNERS[case["pass"]]
    changed_any = False
    for _ in range(25):
        changed = run(module, pass_options(case))
        if "hlo_dce" in pipeline:
            changed |= Dce().run(module)
        changed_any |= changed
        if not changed:
            break
    return module, changed_any


# XLA's matcher names (op::Exp) that differ from HLO opcode text.
MATCHER_OPCODE_NAMES = {"exp": "exponential", "log": "log", "sin": "sine", "cos": "cosine"}
EXTENDED_KEYS = ("fused_computation_sequence", "entry_fusion_signature", "dce_after_changes")


def normalize_matcher_names(text: str) -> str:
    """`tuple(multiply, exp)` -> `tuple(multiply, exponential)`."""
    return re.sub(r"[A-Za-z_][\w.\-]*",
                  lambda m: MATCHER_OPCODE_NAMES.get(m.group(0), m.group(0)), text)


def _sequence_opcodes(items: list[str]) -> list[tuple[str, bool]]:
    """(opcode, is_root) per FileCheck-style item: the first word that is an HLO opcode."""
    valid = {op.value for op in Opcode}
    out: list[tuple[str, bool]] = []
    for item in items:
        words = [w.split(".")[0] for w in re.findall(r"[a-z][a-z0-9\-.]*", item)]
        op = next((MATCHER_OPCODE_NAMES.get(w, w) for w in words
                   if MATCHER_OPCODE_NAMES.get(w, w) in valid), None)
        if op is not None:
            out.append((op, item.lstrip().startswith("ROOT")))
    return out


def check_extended_keys(case: dict[str, Any], module: Module, changed: bool) -> list[str]:
    """The keys `check_expect` does not know: a loose FileCheck sequence over the multi-output
    fusion's computation, the entry fusion's signature, and whether DCE still finds dead code."""
    from hlofuse.ir.shape import format_shape

    problems: list[str] = []
    expect = case.get("expect") or {}
    fusions = [i for i in module.entry.instructions if i.opcode is Opcode.FUSION]
    target = _mof_target(module, {}) or (fusions[0] if len(fusions) == 1 else None)
    if "fused_computation_sequence" in expect:
        want = _sequence_opcodes(expect["fused_computation_sequence"])
        if target is None:
            problems.append("fused_computation_sequence: no fusion found")
        else:
            comp = target.fused_computation
            got = [i.opcode.value for i in comp.instructions]
            pos = 0
            for op, is_root in want:
                if is_root:
                    ok = comp.root.opcode.value == op
                else:
                    while pos < len(got) and got[pos] != op:
                        pos += 1
                    ok = pos < len(got)
                    pos += 1
                if not ok:
                    problems.append(f"fused_computation_sequence: {op} not found in order "
                                    f"in {got}")
                    break
    if "entry_fusion_signature" in expect:
        m = re.match(r"(.*) fusion\((.*)\), kind=(\w+)", expect["entry_fusion_signature"])
        assert m is not None, expect["entry_fusion_signature"]
        shape, args, kind = m.group(1).strip(), m.group(2), m.group(3)
        n_args = len([a for a in args.split(",") if a.strip()])
        def bare(text: str) -> str:  # layouts are not part of the comparison
            return re.sub(r"\{[^}]*\}", "", text).replace(" ", "")

        found = [f for f in fusions if bare(format_shape(f.shape)) == bare(shape)
                 and f.fusion_kind == kind and f.operand_count == n_args]
        if not found:
            got = [f"{format_shape(f.shape)} {f.fusion_kind} {f.operand_count}" for f in fusions]
            problems.append(f"entry_fusion_signature: expected {expect['entry_fusion_signature']}"
                            f", got {got}")
    if "fused_root_pattern" in expect and module.entry.root.opcode is not Opcode.FUSION:
        # The XLA test reads the fusion behind the entry root's get-tuple-element.
        froot = target.fused_computation.root if target is not None else None
        if froot is None or not match(normalize_matcher_names(expect["fused_root_pattern"]),
                                      froot):
            got_root = describe(froot) if froot is not None else None
            problems.append(f"fused_root_pattern: expected {expect['fused_root_pattern']!r}, "
                            f"got {got_root!r}")
    if "dce_after_changes" in expect:
        from hlofuse.passes.simplify.dce import Dce

        got_dce = Dce().run(module)
        if got_dce != expect["dce_after_changes"]:
            problems.append(f"dce_after_changes: expected {expect['dce_after_changes']}, got "
                            f"{got_dce}")
    return problems


def evaluate_extended(case: dict[str, Any]) -> list[str]:
    """`evaluate` for the multi-output and horizontal passes: the case's pipeline, matcher
    names normalised, and the extended expect keys."""
    try:
        module, changed = run_case_with_pipeline(case)
        root_is_fusion = module.entry.root.opcode is Opcode.FUSION
        expect = {k: (normalize_matcher_names(v) if isinstance(v, str) else v)
                  for k, v in (case.get("expect") or {}).items() if k not in EXTENDED_KEYS
                  and (root_is_fusion or k != "fused_root_pattern")}
        problems = check_expect({**case, "expect": expect}, module, changed)
        return problems + check_extended_keys(case, module, changed)
    except Exception as exc:  # report, do not crash the summary
        return [f"{type(exc).__name__}: {exc}"]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    print(summary(tuple(sys.argv[1:]) or ("instruction_fusion", "fusion_merger",
                                         "fusible_predicate")))
