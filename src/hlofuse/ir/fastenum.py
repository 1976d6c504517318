"""Enum classes whose members read as plain class attributes on Python 3.11.

Python 3.11's `EnumType` defines `__getattr__`, a fallback for members kept out of the class
dict (a member named like a property, such as `name`). Its mere presence sends every read of a
class attribute through CPython's slow `__getattr__` hook: `Opcode.FUSION` takes ~50 ns instead
of the ~14 ns of a plain class attribute. 3.12 dropped the method. The passes read opcode
members millions of times per compile: this cost 12% of the `xla` pipeline's time on a
16-layer GPT training step.

`plain_member_reads(cls)` gives an enum class, once EnumType has made it, a metaclass without
that method. Conditions enforced: only on Python < 3.12, and only for an enum whose every
member is in its class dict (the fallback's only use); the class keeps what code asks of an
enum class (call by value, iteration, length, `in`, indexing by name, `__members__`, repr) and
stays an `Enum`. Not kept: EnumType's guard against assigning to a member's name.
"""

from __future__ import annotations

import sys
from enum import Enum, EnumType
from typing import TypeVar

E = TypeVar("E", bound=type[Enum])


class _PlainReadsEnumType(type):
    """EnumType's class-level behaviour, without `__getattr__`."""

    __call__ = EnumType.__call__
    __iter__ = EnumType.__iter__
    __reversed__ = EnumType.__reversed__
    __len__ = EnumType.__len__
    __bool__ = EnumType.__bool__
    __contains__ = EnumType.__contains__
    __getitem__ = EnumType.__getitem__
    __members__ = EnumType.__members__
    __repr__ = EnumType.__repr__


def plain_member_reads(cls: E) -> E:
    """`cls`, its members now read without EnumType's `__getattr__` hook (see above)."""
    if sys.version_info >= (3, 12) or not hasattr(EnumType, "__getattr__"):
        return cls
    if any(vars(cls).get(name) is not member for name, member in cls.__members__.items()):
        return cls  # a member the fallback finds: keep EnumType
    cls.__class__ = _PlainReadsEnumType  # type: ignore[method-assign,assignment]
    return cls
