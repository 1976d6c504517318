"""Third-party JAX programs, written as their libraries document them (see `common.py`).

`PROGRAMS` lists every program of the suite; `by_name(name)` finds one. The modules import
their libraries only when a program is built, so listing the suite needs none of them.
"""

from __future__ import annotations

from .common import Program
from .gymnax_envs import PROGRAMS as _GYMNAX
from .nn import PROGRAMS as _NN
from .physics import PROGRAMS as _PHYSICS
from .purejaxrl import PROGRAMS as _PUREJAXRL
from .science import PROGRAMS as _SCIENCE

PROGRAMS: list[Program] = [*_PUREJAXRL, *_GYMNAX, *_PHYSICS, *_SCIENCE, *_NN]


def by_name(name: str) -> Program:
    for p in PROGRAMS:
        if p.name == name:
            return p
    raise KeyError(f"no program {name!r}; known: {', '.join(p.name for p in PROGRAMS)}")
