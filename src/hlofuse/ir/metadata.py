"""An instruction's `metadata={...}` and the values printed as written.

Kept apart from `instruction.py`, which the compiled pass core builds into native code
(`hlofuse/native.py`): a `str` subclass cannot be a native class.
"""

from __future__ import annotations

from dataclasses import dataclass


class Verbatim(str):
    """A metadata value printed as written, unquoted (`profile_type={1}`)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Metadata:
    """`metadata={op_name="..." source_file="..." source_line=12 stack_frame_id=3}`.

    Fields keep their text order so printing round-trips; integer fields are ints.
    """

    fields: tuple[tuple[str, str | int], ...] = ()

    def get(self, key: str) -> str | int | None:
        for k, v in self.fields:
            if k == key:
                return v
        return None

    @property
    def op_name(self) -> str | None:
        v = self.get("op_name")
        return v if isinstance(v, str) else None

    @property
    def op_type(self) -> str | None:
        v = self.get("op_type")
        return v if isinstance(v, str) else None

    @property
    def source_file(self) -> str | None:
        v = self.get("source_file")
        return v if isinstance(v, str) else None

    @property
    def source_line(self) -> int | None:
        v = self.get("source_line")
        return v if isinstance(v, int) else None

    @property
    def stack_frame_id(self) -> int | None:
        v = self.get("stack_frame_id")
        return v if isinstance(v, int) else None

    def __bool__(self) -> bool:
        return bool(self.fields)


