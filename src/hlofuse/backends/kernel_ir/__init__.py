"""The kernel IR every native backend shares (see ir.py): loop nests over named index variables
with explicit vector widths, affine loads and stores, scalar ops from the op table, reductions,
library calls.

    lower/     fused HLO -> ir.Kernel
    libop.py   what a library call computes, as plain data (LibCall.op: no HLO)
    passes/    split, jam, collapse, fission, narrow, vectorize, parallelize, hoist
    target.py  the vector width and -march of the machine the code is for
    rewrite.py substitution with folding (what the passes are built on)
    naming.py  kernel names from what they compute

Backends print it: `backends/cpu/cprint.py` prints C, `backends/gpu/triton_print.py` Triton.
"""
