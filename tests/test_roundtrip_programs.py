"""Round trip on the HLO of every JAX test program, in both printed forms.

For each program in tests/programs.py: parse JAX's text, print it (short and long form), parse
that again, and require a structurally equal module and a stable second printing.
"""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

from hlofuse.ir.equality import module_diff
from hlofuse.text import parse, print_module
from programs import PROGRAMS, Program, lower_to_hlo


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_program_round_trips(program: Program) -> None:
    module = parse(lower_to_hlo(program))
    for long in (False, True):
        text = print_module(module, long=long)
        again = parse(text)
        assert module_diff(module, again) is None, module_diff(module, again)
        assert print_module(again, long=long) == text
        # Source locations survive the trip (the tables are printed back).
        locs = [module.source_location(i) for i in module.all_instructions()]
        locs2 = [again.source_location(i) for i in again.all_instructions()]
        assert locs == locs2
    assert any(loc is not None and loc.file.endswith(".py") and loc.line > 0 for loc in locs)
