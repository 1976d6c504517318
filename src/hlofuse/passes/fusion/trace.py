"""The fusion trace: one record per fusion decision, fused or refused, with its reason.

    instruction-fusion  consumer=add.3  producer=exp.1  refused  "the producer is expensive,
                        and the consumer reuses inputs"  rule=instruction_fusion.expensive_reuse
    fusion-merger       consumer=*      producer=fusion.2  fused  figures={ratio: 0.8, ...}

A refusal's `rule` is its code in `rules.RULES` (a `FusionConfig` setting name, or a dotted
fixed rule).

Passes find the trace on `module.annotations["fusion_trace"]` (created on first use, so it
travels with the module and needs no global state); `explain` and `viz` read it back. Written
and read as JSON lines.

The trace also keeps the resolved settings each fusion pass ran with (`settings`, pass name ->
`FusionConfig` of its last run, recorded by `FusionOptions.run_config`), so `explain` asks
instruction fusion again with the rules the run used, whatever the pipeline or its
`{setting=value}` overrides. Written as one `{"settings": ...}` line per pass (the values that
differ from `FusionConfig`'s defaults).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hlofuse.ir.module import Module
from hlofuse.passes.fusion.config import FusionConfig, setting_text
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.rules import setting_of

TRACE_KEY = "fusion_trace"


@dataclass(frozen=True)
class TraceEvent:
    pass_name: str
    consumer: str
    producer: str
    verdict: str  # "fused" | "refused"
    reason: str = ""
    rule: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    computation: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=str, sort_keys=True)

    @staticmethod
    def from_json(line: str) -> TraceEvent:
        return TraceEvent(**json.loads(line))

    def __str__(self) -> str:
        text = f"{self.pass_name}: {self.verdict} {self.producer} -> {self.consumer}"
        if self.reason:
            text += f": {self.reason}"
        if self.rule:  # a setting code says which setting; a fixed rule's code says the rule
            setting = setting_of(self.rule)
            text += f" [setting: {setting}]" if setting else f" [rule: {self.rule}]"
        return text


# What `record` keeps until the trace is read: TraceEvent's fields, in order.
_Fields = tuple[str, str, str, str, str, str, dict[str, Any], str]


class FusionTrace:
    """The events in decision order. `record` appends one event; `defer` appends a batch that
    is made into events only when the trace is read (`events`, iteration, `len`), for passes
    that refuse many pairs in a row (sibling multi-output fusion's K^2/2 connected pairs):
    the run then allocates nothing per refused pair, and a trace nobody reads costs nothing.
    `record` too keeps only the event's fields (a frozen dataclass costs a setattr per field
    to build, and a pass records one event per edge it looks at); events are made from them,
    in order, when the trace is read."""

    def __init__(self, events: list[TraceEvent] | None = None,
                 settings: dict[str, FusionConfig] | None = None) -> None:
        self._entries: list[TraceEvent | _Fields | Callable[[], list[TraceEvent]]] = (
            list(events) if events is not None else [])
        self._made = len(self._entries)  # the entries before this one are all events
        self.settings: dict[str, FusionConfig] = dict(settings or {})

    def note_settings(self, pass_name: str, config: FusionConfig) -> None:
        """Record the settings `pass_name` runs with (its last run's win)."""
        self.settings[pass_name] = config

    @property
    def events(self) -> list[TraceEvent]:
        entries = self._entries
        if self._made < len(entries):
            made: list[TraceEvent] = []
            for entry in entries[self._made:]:
                if isinstance(entry, TraceEvent):
                    made.append(entry)
                elif isinstance(entry, tuple):
                    made.append(TraceEvent(*entry))
                else:
                    made.extend(entry())
            del entries[self._made:]
            entries.extend(made)
            self._made = len(entries)
        return entries  # type: ignore[return-value]

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, FusionTrace) and self.events == other.events
                and self.settings == other.settings)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FusionTrace(events={self.events!r})"

    def record(self, pass_name: str, consumer: str, producer: str, decision: FusionDecision,
               computation: str = "", fused: bool | None = None) -> None:
        did_fuse = decision.reason is None if fused is None else fused
        self._entries.append((pass_name, consumer, producer,
                              "fused" if did_fuse else "refused", decision.reason or "",
                              decision.rule, dict(decision.figures), computation))

    def defer(self, expand: Callable[[], list[TraceEvent]]) -> None:
        """Append the events `expand()` returns, in their place, when the trace is next read.
        `expand` must depend only on what it captured (names, decisions), not on the module,
        which later passes keep changing."""
        self._entries.append(expand)

    def __iter__(self) -> Iterator[TraceEvent]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def fused(self) -> list[TraceEvent]:
        return [e for e in self.events if e.verdict == "fused"]

    def refused(self) -> list[TraceEvent]:
        return [e for e in self.events if e.verdict == "refused"]

    def about(self, name: str) -> list[TraceEvent]:
        """Events whose producer or consumer is `name`."""
        return [e for e in self.events if name in (e.producer, e.consumer)]

    def to_jsonl(self) -> str:
        settings = "".join(json.dumps({"settings": _changed(c), "pass_name": name},
                                      default=setting_text, sort_keys=True) + "\n"
                           for name, c in self.settings.items())
        return settings + "".join(e.to_json() + "\n" for e in self.events)

    def write(self, path: str | Path) -> None:
        Path(path).write_text(self.to_jsonl())

    @staticmethod
    def read(path: str | Path) -> FusionTrace:
        events: list[TraceEvent] = []
        settings: dict[str, FusionConfig] = {}
        for line in Path(path).read_text().splitlines():
            if not line.strip():
                continue
            obj = json.loads(line)
            if "settings" in obj:
                settings[obj["pass_name"]] = FusionConfig.from_options(obj["settings"])
            else:
                events.append(TraceEvent(**obj))
        return FusionTrace(events, settings)


def _changed(config: FusionConfig) -> dict[str, Any]:
    """The settings of `config` that differ from the defaults."""
    default = FusionConfig()
    return {k: getattr(config, k) for k in FusionConfig.field_names()
            if getattr(config, k) != getattr(default, k)}


def source_figure(module: Module, instr: Any) -> dict[str, str]:
    """`{"source": "file:line"}` of `instr` when the module knows it (for a decision's
    figures, so tools read the location the pass saw instead of looking the name up again)."""
    loc = module.source_location(instr)
    return {"source": f"{loc.file}:{loc.line}"} if loc is not None else {}


def trace_of(module: Module) -> FusionTrace:
    """The module's fusion trace, created on first use."""
    trace = module.annotations.get(TRACE_KEY)
    if not isinstance(trace, FusionTrace):
        trace = FusionTrace()
        module.annotations[TRACE_KEY] = trace
    return trace
