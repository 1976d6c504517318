"""Queries about the kernel IR that passes and printers share, so that no printer owns a rule
of the IR (issue 31: a second printer needs no analysis of its own).

    varies(v, var)      is `v` a vector in the vector loop over `var` (varies per lane)
    guarded_load(k)     does kernel `k` read a buffer only under a condition

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


def guarded_load(kernel: ir.Kernel) -> bool:
    """Does `kernel` read a buffer only under a condition: a `cond` value whose branch reads
    one, or an `If` whose statements do (a padded window's tap, a lazy select)? Native
    printers whose compiler miscompiles such loads in some form (GCC 12.2 if-converts them
    into masked loads of the wrong address: cpu/units.py) compile these kernels apart."""
    for v in ir.body_values(kernel.body):
        if v.op == "cond" and any(ir.reads(a) for a in v.args[1:]):
            return True
    return any(isinstance(s, ir.If) and any(ir.reads(v) for v in ir.body_values(s.then + s.orelse))
               for s in ir.walk(kernel.body))
