"""Adapters for the `fusible_predicate` conformance cases: each XLA helper predicate named in
a case's `expect.predicate` is mapped to our function and checked on the named instructions.

`check_predicate_case(case)` returns a list of problems ([] = pass), like
`conformance.check_expect`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.passes.fusion import gpu_fusible as g
from hlofuse.passes.fusion import mof_fusible as mof
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.instruction_fusion import fusible_computations
from hlofuse.passes.fusion.predicates import is_expensive, should_fuse_in_place_op

GPU = FusionConfig()


def resolve(module: Module, ref: str) -> Instruction:
    """An instruction by name, or by a path like `root.operand(0).operand(1)`."""
    ref = ref.strip()
    m = re.search(r"\((root(?:\.operand\(\d+\))*)\)", ref)
    if m:
        ref = m.group(1)
    if ref.startswith("root"):
        cur = module.entry.root
        for idx in re.findall(r"operand\((\d+)\)", ref):
            cur = cur.operand(int(idx))
        return cur
    name = ref.split(" ")[0]
    hint = re.search(r"\(([\w-]+)\)", ref)
    for instr in module.entry.instructions:  # prefer the entry computation's instruction
        if instr.name == name:
            return instr
    if hint:  # names are module-unique here: the parser may have renamed `name` to `name.N`
        for instr in module.entry.instructions:
            if instr.name.startswith(name + ".") and instr.opcode.value == hint.group(1):
                return instr
    return module.instruction(name)


def _bool(decision: Any) -> bool:
    return bool(decision)


def _names_results(fn: Callable[[Instruction], Any]) -> Callable[[Module, dict[str, Any],
                                                                     str], dict[str, Any]]:
    def run(module: Module, want: dict[str, Any], predicate: str) -> dict[str, Any]:
        return {k: fn(resolve(module, k)) for k in want}

    return run


def _pair_results(fn: Callable[[Instruction, Instruction], Any]
                  ) -> Callable[[Module, dict[str, Any], str], dict[str, Any]]:
    def run(module: Module, want: dict[str, Any], predicate: str) -> dict[str, Any]:
        out = {}
        for k in want:
            a, b = _split_pair(k)
            out[k] = fn(resolve(module, a), resolve(module, b))
        return out

    return run


def _split_pair(key: str) -> tuple[str, str]:
    depth = 0
    for i, ch in enumerate(key):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            return key[:i], key[i + 1:]
    raise ValueError(key)


def _in_place(module: Module, want: dict[str, Any], predicate: str) -> dict[str, Any]:
    m = re.search(r"producer=([\w.\-]+), consumer=([\w.\-]+)", predicate)
    assert m
    d = should_fuse_in_place_op(module.instruction(m.group(1)), module.instruction(m.group(2)))
    return {k: "allowed" if d else "forbidden" for k in want}


def _reduce_input(module: Module, want: dict[str, Any], predicate: str) -> dict[str, Any]:
    root = module.entry.root
    return {"IsReduceInputFusion(entry root)": g.is_reduce_input_fusion(root),
            "IsInputFusibleReduction(entry root)": g.is_input_fusible_reduction(root)}


def _heroes_both_orders(module: Module, want: dict[str, Any], predicate: str
                        ) -> dict[str, Any]:
    r1 = module.instruction("fusion.1").fused_computation.root
    r2 = module.instruction("fusion.2").fused_computation.root
    return {"both_orders": bool(mof.fusion_heroes_are_compatible(r1, r2))
            and bool(mof.fusion_heroes_are_compatible(r2, r1))}


def _sibling_transposes(module: Module, want: dict[str, Any], predicate: str
                        ) -> dict[str, Any]:
    a, b = module.instruction("fusion"), module.instruction("fusion.1")
    h1 = g.find_non_trivial_hero(a.fused_computation.root)
    h2 = g.find_non_trivial_hero(b.fused_computation.root)
    return {"FusionHeroesAreCompatible": bool(mof.fusion_heroes_are_compatible(h1, h2)),
            "ShapesCompatibleForMultiOutputFusion":
                bool(mof.shapes_compatible_for_multi_output_fusion(a, b))}


def _producer_consumer(module: Module, want: dict[str, Any], predicate: str
                       ) -> dict[str, Any]:
    m = re.search(r"producer = (.*), consumer = (.*)$", predicate)
    assert m
    producer, consumer = resolve(module, m.group(1)), resolve(module, m.group(2))
    out = {}
    for k in want:
        if k.startswith("IsProducerMultiOutputFusible"):
            out[k] = bool(mof.is_producer_multi_output_fusible(producer))
        elif k.startswith("IsFusibleAsMultiOutputFusionRoot"):
            out[k] = mof.is_fusible_as_multi_output_fusion_root(consumer)
        else:
            out[k] = bool(mof.shapes_compatible_for_multi_output_fusion(producer, consumer))
    return out


def _fusion_roots(module: Module, want: dict[str, Any], predicate: str) -> dict[str, Any]:
    fusion = module.entry.root
    return {"roots": [r.name for r in g.fusion_roots(fusion)]}


def _fusible_computations(module: Module, want: dict[str, Any], predicate: str
                          ) -> dict[str, Any]:
    names = [c.name + (" (entry)" if c is module.entry else "")
             for c in fusible_computations(module)]
    return {"unordered_set": sorted(names)}


def _shared_memory(module: Module, want: dict[str, Any], predicate: str) -> dict[str, Any]:
    return {k: g.shared_memory_usage(module.entry.root) for k in want}


def _only_non_root_user(module: Module, want: dict[str, Any], predicate: str
                        ) -> dict[str, Any]:
    m = re.search(r"producer=([\w.\-]+), consumer=([\w.\-]+)", predicate)
    assert m
    return {k: mof.is_consumer_the_only_non_root_user(module.instruction(m.group(1)),
                                                    module.instruction(m.group(2)))
            for k in want}


# predicate text prefix -> adapter
HANDLERS: list[tuple[str, Callable[[Module, dict[str, Any], str], dict[str, Any]]]] = [
    ("GpuInstructionFusion::IsExpensive", _names_results(lambda i: is_expensive(i, GPU))),
    ("InstructionFusion::ShouldFuseInPlaceOp", _in_place),
    ("IsPhysicallyTransposing", _names_results(g.is_physically_transposing)),
    ("TransposesMinorDimension", _names_results(g.transposes_minor_dimension)),
    ("IsReduceInputFusion", _reduce_input),
    ("IsFusibleAsMultiOutputFusionRoot",
     _names_results(mof.is_fusible_as_multi_output_fusion_root)),
    ("FusionHeroesAreCompatible(fused roots", _heroes_both_orders),
    ("FusionHeroesAreCompatible(transpose heroes)", _sibling_transposes),
    ("ShapesCompatibleForMultiOutputFusion",
     _pair_results(lambda a, b: bool(mof.shapes_compatible_for_multi_output_fusion(a, b)))),
    ("producer = ", _producer_consumer),
    ("IsProducerMultiOutputFusible",
     _names_results(lambda i: bool(mof.is_producer_multi_output_fusible(i)))),
    ("GetFusionRoots", _fusion_roots),
    ("GetFusibleComputations", _fusible_computations),
    ("FusionInfoCache::GetSharedMemoryUsage", _shared_memory),
    ("IsConsumerTheOnlyNonRootUser", _only_non_root_user),
]


def check_predicate_case(case: dict[str, Any]) -> list[str]:
    from hlofuse.text import parse

    expect = case["expect"]
    predicate: str = expect["predicate"]
    want: dict[str, Any] = expect["results"]
    module = parse(case["hlo"])
    for prefix, handler in HANDLERS:
        if predicate.startswith(prefix):
            got = handler(module, want, predicate)
            if "unordered_set" in want:
                want = {"unordered_set": sorted(want["unordered_set"])}
            problems = [f"{k}: expected {v!r}, got {got.get(k)!r}"
                        for k, v in want.items() if got.get(k) != v]
            return problems
    return [f"no adapter for predicate {predicate!r}"]
