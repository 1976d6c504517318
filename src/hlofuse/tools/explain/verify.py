"""Measure the setting fixes `explain` suggests: re-run the pipeline with the setting changed
and check whether the boundary's value and its reader now share a kernel.

Each distinct (setting, value) is run once, on a fresh copy of the module as it was before the
pipeline, with the pipeline `explain` ran (any fusing pipeline, `{setting=value}` overrides
kept) plus that setting (`pipelines.with_settings`). A pass list, which takes no settings, gets
"not measured" with the reason. The verdict goes into `Fix.verified`: "measured: removes it
(while.7 body: 5 -> 4 kernels per iteration)" or "measured: not enough, the boundary stays
(...)".
"""

from __future__ import annotations

from hlofuse.analysis.kernels import is_kernel, kernels_per_run
from hlofuse.errors import PassError
from hlofuse.ir.computation import Computation
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.passes.fusion.config import setting_text
from hlofuse.passes.pipelines import with_settings
from hlofuse.tools.explain.model import Explanation
from hlofuse.tools.explain.origins import origins, tag_origins


def _rerun(original: Module, spec: str) -> Module:
    from hlofuse.api import optimise  # the one compile route, as `analyse` runs its pipeline

    module = original.clone()
    tag_origins(module)
    optimise(module, spec)
    return module


def _kernel_map(comp: Computation) -> dict[str, set[str]]:
    """original name -> names of the kernels of `comp` that hold a copy of it."""
    out: dict[str, set[str]] = {}
    for k in comp.instructions:
        if is_kernel(k):
            for o in origins(k):
                out.setdefault(o, set()).add(k.name)
    return out


def _per_run(module: Module, title: str) -> int | None:
    if title == "entry":
        return kernels_per_run(module.entry)
    loop = title.removesuffix(" body")
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.name == loop and instr.opcode is Opcode.WHILE:
                return kernels_per_run(instr.attrs["body"], instr.attrs["condition"])
    return None


def verify_setting_fixes(expl: Explanation, original: Module, pipeline: str) -> None:
    """Fill in `Fix.verified` for every setting fix of `expl` (see the module docstring)."""
    runs: dict[tuple[str, str], Module] = {}
    for section in expl.sections:
        before = section.kernels_per_run
        for b in section.boundaries:
            for fix in b.fixes:
                if fix.kind != "setting" or fix.value is None:
                    continue
                key = (fix.setting, repr(fix.value))
                if key not in runs:
                    try:
                        spec = with_settings(pipeline, **{fix.setting: setting_text(fix.value)})
                        runs[key] = _rerun(original, spec)
                    except PassError as e:
                        fix.verified = f"not measured: {e}"
                        continue
                module = runs[key]
                comp = next((c for c in module.computations if c.name == section.computation),
                            None)
                after = _per_run(module, section.title)
                counts = (f"{section.title}: {before} -> {after} kernels per run"
                          if before != after else
                          f"{section.title} stays at {before} kernels per run")
                if comp is None:
                    fix.verified = f"measured: {counts}"
                    continue
                kernels = _kernel_map(comp)
                together = kernels.get(b.value_origin, set()) & kernels.get(b.reader_origin,
                                                                             set())
                if b.category == "fusion" and together:
                    fix.verified = f"measured: removes this boundary; {counts}"
                elif not kernels.get(b.value_origin) and comp.root.opcode is not Opcode.PARAMETER:
                    fix.verified = f"measured: the value is no longer a kernel output ({counts})"
                else:
                    fix.verified = f"measured: not enough, the boundary stays ({counts})"
