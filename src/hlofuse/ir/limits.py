"""The limits hlofuse enforces on its input: named settings, each with where it comes from.

HLO text is untrusted input. Every limit below is checked where the input enters (the parser,
with line:column, and the verifier, naming the instruction) so that no later traversal meets a
shape, a nesting or a size it cannot handle: those traversals may then recurse or allocate
within the limit. Exceeding a limit raises a `LimitError` subclass (`errors.py`); an allocation
beyond `allocation_limit()` raises `AllocationError` with the bytes.

    setting              value        source
    MAX_DIMENSION        2**63 - 1    XLA: dimensions are int64 and >= 0
                                      (`Shape::IsValidDimensionSize`, xla/shape.h)
    MAX_SHAPE_BYTES      2**63 - 1    XLA: elements x element bytes must fit int64
                                      (`ValidateShapeSize`, xla/shape_util.cc)
    MAX_RANK             64           numpy's NPY_MAXDIMS: the interpreter holds every array in
                                      numpy. XLA's ValidateShape sets no rank limit of its own.
    MAX_TUPLE_DEPTH      64           tuples nested in tuples. XLA's parser stops at 500 nested
                                      shapes (`HloParserOptions::kDefaultMaxRecursionDepth`,
                                      xla/hlo/parser/hlo_parser.h); hlofuse's passes and
                                      backends walk shapes recursively, so it stops earlier.
    MAX_CALL_DEPTH       64           computations calling computations (call, while, fusion,
                                      conditional, to_apply): each level costs the interpreter
                                      and the passes a few Python frames. XLA has no such limit
                                      (it has the same 500 for nested operands in the parser).
    MAX_NESTING_DEPTH    64           instructions written as operands of instructions
                                      (`add(f32[] parameter(0), ...)`) and computations written
                                      in place of their names, nested in the text. XLA's parser
                                      stops at 500 (the same kDefaultMaxRecursionDepth);
                                      hlofuse's parser recurses, a few frames per level.
    MAX_INLINED_INSTRUCTIONS      a computation after inlining its calls (`call-inliner`):
                         1,000,000    a call graph that is a DAG (each computation calling
                                      the one below twice) is linear in the text and
                                      exponential inlined. About a GB of memory; XLA has no
                                      such limit.
    allocation_limit()   physical     one array (a result, an input, a constant) may not exceed
                         memory       the machine's physical memory: with memory overcommit the
                                      allocation would succeed and the process die later.

Dynamic dimensions (`f32[<=4]`, `f32[?]`) are XLA forms hlofuse does not support; the parser
rejects them with a clear message rather than a limit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from hlofuse.errors import AllocationError

MAX_DIMENSION = 2**63 - 1
MAX_SHAPE_BYTES = 2**63 - 1
MAX_RANK = 64
MAX_TUPLE_DEPTH = 64
MAX_CALL_DEPTH = 64
MAX_NESTING_DEPTH = 64
MAX_INLINED_INSTRUCTIONS = 1_000_000

# Longest decimal integer the parser converts (int64 and uint64 need at most 20 digits; Python
# refuses to convert more than 4300 digits at all). Longer numbers are out of range for every
# HLO integer type.
MAX_INT_DIGITS = 20

# Overrides `allocation_limit()` when set (tests lower it; None means physical memory).
ALLOCATION_LIMIT_BYTES: int | None = None


def physical_memory() -> int:
    """The machine's physical memory in bytes (2**63 - 1 where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return MAX_SHAPE_BYTES


def allocation_limit() -> int:
    """The largest single array hlofuse allocates, in bytes."""
    return ALLOCATION_LIMIT_BYTES if ALLOCATION_LIMIT_BYTES is not None else physical_memory()


def format_bytes(nbytes: int) -> str:
    """`17179869184 bytes (16.0 GiB)`."""
    if nbytes < 1024:
        return f"{nbytes} bytes"
    size, unit = float(nbytes), "B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):  # noqa: B007 (used after)
        size /= 1024
        if size < 1024:
            break
    return f"{nbytes} bytes ({size:.1f} {unit})"


def check_allocation(nbytes: int, what: str) -> None:
    """Raise `AllocationError` if an array of `nbytes` for `what` exceeds the limit."""
    limit = allocation_limit()
    if nbytes > limit:
        raise AllocationError(
            f"{what} needs {format_bytes(nbytes)}, more than the allocation limit of "
            f"{format_bytes(limit)} (the machine's memory)", nbytes, what)


# numpy's messages for arrays it refuses to create (ValueError, not MemoryError).
_NUMPY_TOO_BIG = ("array is too big", "Maximum allowed dimension exceeded",
                  "Maximum allowed size exceeded")


def is_allocation_failure(exc: BaseException) -> bool:
    """A MemoryError, or numpy's ValueError for an array larger than it can index."""
    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, ValueError) and any(m in str(exc) for m in _NUMPY_TOO_BIG)


@contextmanager
def allocation_guard(what: str, nbytes: int) -> Iterator[None]:
    """Check `nbytes` against the limit, then turn an allocation failure inside the block into
    `AllocationError` naming `what` and the bytes."""
    check_allocation(nbytes, what)
    try:
        yield
    except (MemoryError, ValueError) as exc:
        if not is_allocation_failure(exc):
            raise
        raise AllocationError(f"allocating {format_bytes(nbytes)} for {what} failed "
                              f"({type(exc).__name__}: {exc})", nbytes, what) from None
