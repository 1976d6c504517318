"""Checks of attribute values whose grammar or domain XLA's parser enforces beyond their kind.

`check_attribute(opcode, name, value)` returns '' when the value is fine, else the message the
parser raises (at the attribute). Conditions enforced:

* `result_accuracy` only on the ops of `ir.opcodes.RESULT_ACCURACY_OPS`, and of the form
  `{mode=default|highest}` or `{tolerance={rtol=<num>, atol=<num>, ulps=<int>}}` (each tolerance
  field at most once, any subset);
* a custom-call's `api_version` is one of `ir.opcodes.CUSTOM_CALL_API_VERSIONS`
  (`API_VERSION_UNSPECIFIED` is refused as invalid, any other name as unknown);
* `custom_call_schedule` / `schedule` is SCHEDULE_NONE, SCHEDULE_LATEST or SCHEDULE_EARLIEST.
"""

from __future__ import annotations

import re
from typing import Any

from hlofuse.ir.opcodes import CUSTOM_CALL_API_VERSIONS, RESULT_ACCURACY_OPS, Opcode

_ACCURACY_MODES = ("default", "highest")
_TOLERANCE_FIELDS = ("rtol", "atol", "ulps")
_SCHEDULES = ("SCHEDULE_NONE", "SCHEDULE_LATEST", "SCHEDULE_EARLIEST")
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_MODE = re.compile(r"\{\s*mode\s*=\s*([\w-]+)\s*\}")
_TOLERANCE = re.compile(r"\{\s*tolerance\s*=\s*\{(.*)\}\s*\}", re.S)
_FIELD = re.compile(rf"\s*(\w+)\s*=\s*({_NUMBER})\s*")


def check_attribute(opcode: Opcode, name: str, value: Any) -> str:
    if name == "result_accuracy":
        if opcode not in RESULT_ACCURACY_OPS:
            return f'unexpected attribute "result_accuracy" for {opcode.value}'
        return _result_accuracy_problem(str(value))
    if name == "api_version":
        if value == "API_VERSION_UNSPECIFIED":
            return "Invalid API version API_VERSION_UNSPECIFIED for a custom call"
        if value not in CUSTOM_CALL_API_VERSIONS:
            return (f"Unknown API version {value} (expected one of "
                    f"{', '.join(CUSTOM_CALL_API_VERSIONS)})")
    if name in ("custom_call_schedule", "schedule") and opcode is Opcode.CUSTOM_CALL \
            and value not in _SCHEDULES:
        return f"unknown custom-call schedule {value} (expected one of {', '.join(_SCHEDULES)})"
    return ""


def _result_accuracy_problem(text: str) -> str:
    m = _MODE.fullmatch(text.strip())
    if m is not None:
        if m.group(1) not in _ACCURACY_MODES:
            return (f"result_accuracy expects ResultAccuracy type but sees: {m.group(1)} "
                    f"(expected {' or '.join(_ACCURACY_MODES)})")
        return ""
    m = _TOLERANCE.fullmatch(text.strip())
    if m is None:
        first = re.match(r"\{\s*(\w+)\s*=", text.strip())
        if first is None:
            return ("result_accuracy expects attribute name, e.g. {mode=highest} or "
                    "{tolerance={rtol=0.5, atol=1.0, ulps=2}}")
        return (f"result_accuracy has an invalid attribute name {first.group(1)} (expected "
                "mode or tolerance)")
    seen: set[str] = set()
    body = m.group(1).strip()
    for part in body.split(",") if body else []:
        f = _FIELD.fullmatch(part)
        if f is None or f.group(1) not in _TOLERANCE_FIELDS or f.group(1) in seen:
            return (f"result_accuracy tolerance has an invalid attribute name or value "
                    f"'{part.strip()[:40]}' (expected rtol, atol and ulps, each once)")
        if f.group(1) == "ulps" and not re.fullmatch(r"\d+", f.group(2)):
            return "result_accuracy tolerance ulps must be a non-negative integer"
        seen.add(f.group(1))
    return ""
