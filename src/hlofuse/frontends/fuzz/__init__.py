"""The differential fuzzer (docs/testing.md, "The differential fuzzer"): random JAX programs over
the `lax` primitives (`ops.py`), run by jax.jit, hlofuse's interpreter and the cpu backend and
compared (`compare.py`, `runner.py`), with (opcode, element type) coverage against the op table
(`coverage.py`). JAX is imported here, under frontends/, never by the core.
"""

from hlofuse.frontends.fuzz.compare import compare
from hlofuse.frontends.fuzz.ops import Program, generate, jax_x64
from hlofuse.frontends.fuzz.runner import Coverage, Outcome, run_programs, shrink_module, verdict

__all__ = ["Coverage", "Outcome", "Program", "compare", "generate", "jax_x64", "run_programs",
           "shrink_module", "verdict"]
