"""The result of `explain`: kernels per computation (per loop iteration), the fusion boundaries
between them with the rule that made each and what would remove it, and its text/JSON forms.

    while.7 body: 5 kernels per iteration (4 in the body + 1 in the condition), 136.0 KiB moved
      kernels
        fusion.1   kLoop  f32[4,2048]  select, multiply x14, ...  read 72.0 KiB, wrote 32.0 KiB
                   from cartpole.py:69-80, 96-100
      boundaries
        fusion.8 -> fusion.1   refused by multi-output-fusion: different loop shapes
                   ...

Nothing here runs passes; `analyse.py` fills these records in.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


@dataclass
class Refusal:
    """One refusal from the fusion trace (or re-asked on the final graph)."""

    pass_name: str
    reason: str
    setting: str = ""  # the FusionConfig field that relaxes its rule ("" = a fixed rule)
    figures: dict[str, Any] = field(default_factory=dict)
    producer: str = ""  # names as recorded when the decision was taken
    consumer: str = ""
    rule: str = ""  # the rule code (passes/fusion/rules.py): readings and fixes are looked up by it

    def __str__(self) -> str:
        text = f"{self.pass_name}: {self.reason}"
        if self.setting:
            text += f" [setting {self.setting}]"
        if self.figures:
            text += " (" + ", ".join(f"{k}={v}" for k, v in self.figures.items()) + ")"
        return text


@dataclass
class Fix:
    """What would remove a boundary: a setting (`setting=value`) or a frontend rewrite."""

    kind: str  # "setting" | "rewrite"
    text: str
    setting: str = ""
    value: Any = None
    verified: str = ""  # measured effect when checked ("" = not checked)

    def __str__(self) -> str:
        head = f"set {self.setting}={_fmt(self.value)}: " if self.kind == "setting" else ""
        tail = f" [{self.verified}]" if self.verified else ""
        return head + self.text + tail


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass
class KernelInfo:
    name: str
    kind: str  # kLoop / kInput / kOutput, or the op for an unfused instruction
    shape: str
    ops: dict[str, int]
    sources: list[str]  # "file:line", deduplicated, in line order
    bytes_read: int
    bytes_written: int
    outputs: int = 1

    def ops_text(self, limit: int = 6) -> str:
        items = sorted(self.ops.items(), key=lambda kv: (-kv[1], kv[0]))
        text = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in items[:limit])
        if len(items) > limit:
            text += f", ... ({sum(self.ops.values())} ops)"
        return text


@dataclass
class Boundary:
    """A value that leaves one kernel (or loop, or iteration) and is read by another."""

    producer: str
    consumer: str
    category: str  # "fusion" | "control-flow" | "loop-state" | "custom-call"
    value: str  # the instruction whose result crosses (inside the producer kernel)
    bytes: int
    source: str  # file:line of the value, "" when the module carries no locations
    consumer_source: str = ""
    rule: Refusal | None = None  # the last refusal between the two kernels
    earlier: list[Refusal] = field(default_factory=list)
    origin: str = "trace"  # "trace" | "re-asked" | "structure"
    why: str = ""  # a plain-language reading of the rule or the structure
    fixes: list[Fix] = field(default_factory=list)
    # original (pre-pipeline) names of the crossing value and of the op that reads it
    value_origin: str = ""
    reader_origin: str = ""

    @property
    def reason(self) -> str:
        return self.rule.reason if self.rule is not None else self.why


@dataclass
class Section:
    """A computation that launches kernels: the entry (per execution), a while body (per
    iteration, condition included), a conditional branch or a called computation."""

    title: str
    computation: str
    per: str  # "execution" | "iteration" | "branch execution" | "call"
    kernels: list[KernelInfo]
    condition_kernels: list[KernelInfo] = field(default_factory=list)
    nested: list[tuple[str, int, int | None]] = field(default_factory=list)  # loop, k, trips
    boundaries: list[Boundary] = field(default_factory=list)
    trip_count: int | None = None

    @property
    def kernels_per_run(self) -> int | None:
        total = len(self.kernels) + len(self.condition_kernels)
        for _name, k, trips in self.nested:
            if trips is None:
                return None
            total += k * trips
        return total

    def own_bytes(self) -> int:
        return sum(k.bytes_read + k.bytes_written
                   for k in (*self.kernels, *self.condition_kernels))


@dataclass
class Transformation:
    """One decision of a beyond-XLA pass (the `hlofuse` pipeline) about one loop."""

    pass_name: str
    subject: str  # the loop, as named when the decision was taken
    fired: bool
    reason: str = ""  # why not, when refused
    rule: str = ""  # the setting or rule that decided it
    figures: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # file:line of the loop
    text: str = ""  # what it did and saved, or why not (one sentence)

    def __str__(self) -> str:
        where = f" ({self.source})" if self.source else ""
        return f"{self.pass_name}: {self.subject}{where}: {self.text}"


@dataclass
class PriorityStep:
    """One step of priority fusion's queue: a producer fused into all its users."""

    step: int
    producer: str
    computation: str
    consumers: list[str]  # "consumer (the fusion it is in now)"
    saving_us: float | None  # the performance model's estimate (inf: a bitcast)
    unfused_us: float | None = None
    fused_us: float | None = None
    run: int = 1  # which run of the pass over its computation (a fixpoint runs it again)


@dataclass
class Explanation:
    module: str
    pipeline: str
    sections: list[Section]
    bytes_per_run: dict[str, int | None] = field(default_factory=dict)  # title -> bytes
    notes: list[str] = field(default_factory=list)
    fused_module: Any = None  # the Module after the pipeline (not serialised)
    transformations: list[Transformation] = field(default_factory=list)
    # with beyond-XLA passes: the same input under `xla`, {"pipeline", "kernels", "bytes"}
    baseline: dict[str, Any] = field(default_factory=dict)
    # with priority fusion: its queue's steps and the producers it left unfused
    priority_steps: list[PriorityStep] = field(default_factory=list)
    priority_refused: list[Any] = field(default_factory=list)  # TraceEvents

    @property
    def kernels_per_run(self) -> int | None:
        return self.sections[0].kernels_per_run if self.sections else 0

    def section(self, title_or_computation: str) -> Section:
        for s in self.sections:
            if title_or_computation in (s.title, s.computation) or s.title.startswith(
                    title_or_computation + " "):
                return s
        raise KeyError(f"no section {title_or_computation!r}; sections: "
                       + ", ".join(s.title for s in self.sections))

    @property
    def loops(self) -> list[Section]:
        return [s for s in self.sections if s.per == "iteration"]

    @property
    def boundaries(self) -> list[Boundary]:
        return [b for s in self.sections for b in s.boundaries]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"module": self.module, "pipeline": self.pipeline,
                               "notes": list(self.notes), "sections": [],
                               "kernels_per_run": self.kernels_per_run,
                               "bytes_per_run": self.bytes_per_run.get("entry"),
                               "transformations": [asdict(t) for t in self.transformations],
                               "baseline": dict(self.baseline),
                               "priority_steps": [asdict(p) for p in self.priority_steps],
                               "priority_refused": [asdict(e) for e in self.priority_refused]}
        for s in self.sections:
            d = asdict(s)
            d["kernels_per_run"] = s.kernels_per_run
            d["bytes_per_run"] = self.bytes_per_run.get(s.title)
            d["nested"] = [{"loop": n, "kernels_per_iteration": k, "trips": t}
                           for n, k, t in s.nested]
            out["sections"].append(d)
        return out

    def to_text(self, *, history: bool = True) -> str:
        from hlofuse.tools.explain.render import render_text

        return render_text(self, history=history)

    def __str__(self) -> str:
        return self.to_text()


@dataclass
class Comparison:
    """Kernels and bytes moved per run of each section, under each pipeline."""

    module: str
    pipelines: list[str]
    # section title -> pipeline -> (kernels per run, bytes per run)
    rows: dict[str, dict[str, tuple[int | None, int | None]]]
    explanations: dict[str, Explanation] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"module": self.module, "pipelines": self.pipelines,
                "rows": {t: {p: {"kernels": k, "bytes": b} for p, (k, b) in row.items()}
                         for t, row in self.rows.items()}}

    def to_text(self) -> str:
        from hlofuse.tools.explain.render import render_comparison

        return render_comparison(self)

    def __str__(self) -> str:
        return self.to_text()


def dumps(obj: Explanation | Comparison) -> str:
    return json.dumps(obj.to_json(), indent=2, default=str)
