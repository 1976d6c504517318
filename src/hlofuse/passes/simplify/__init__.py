"""Simplification passes (XLA's "simplification" fixpoint): each module registers one pass."""

from hlofuse.passes.simplify import (  # noqa: F401  (imported to register the passes)
    algebraic,
    constant_fold,
    cse,
    dce,
    inline,
    noops,
    scan_rewriter,
    tree_reduction,
    tuples,
    unroll,
    while_loops,
)
