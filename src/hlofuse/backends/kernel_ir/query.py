"""Queries about the kernel IR that passes and printers share, so that no printer owns a rule
of the IR (issue 31: a second printer needs no analysis of its own).

    varies(v, var)      is `v` a vector in the vector loop over `var` (varies per lane)

The rule: inside a vector loop over `var`, a value varies per lane (is a vector of W lanes)
exactly when it depends on `var` (through operands or index expressions, `ir.deps`) or reads
a `lanes` buffer (`ir.reads`); every other value is one scalar, the same for every lane.
`cpu/cprint.py` and `kernel_ir/pyprint.py` print by it; the lazy-select and lane-form passes
(`passes/lazy.py`, `passes/lanes.py`) and the verifier decide by it.
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Val, Var


def varies(v: Val, var: Var) -> bool:
    """Whether `v` is a vector in the vector loop over `var` (it depends on `var` or reads a
    `lanes` buffer)."""
    return var in ir.deps(v) or any(b.kind == "lanes" for b in ir.reads(v))
