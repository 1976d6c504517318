"""What the cpu backend refuses before it generates any C, and how it runs deep recursions.

    check_module(module)        ResourceLimitError naming the instruction, the value, the limit
    check_arena(size, slots)    the driver's work arena, after buffer assignment
    expression_depth(instr)     the longest operand chain inside one kernel
    deep_call(fn, depth)        fn() with enough Python stack for `depth` nested levels

The generated C does its index arithmetic in `int64_t`, and the integers it prints (dimensions,
loop bounds, strides, byte counts, offsets) are derived from the module's dimensions and integer
attributes. Bounding those bounds everything derived from them, far below 2^63:

- every array leaf: each dimension, its element count and its byte size at most `MAX_BYTES`
  (2^48 = 256 TiB, more than any machine this runs on can allocate);
- every integer attribute (dimensions, slices, paddings, windows, indices) at most `MAX_BYTES`
  in magnitude;
- tuple shapes at most `MAX_NESTING` deep;
- control flow (while, conditional, call, fusion, to_apply, ... from the entry) at most
  `MAX_NESTING` levels deep, and acyclic; the driver and the analyses recurse per level, and C
  compilers limit brace nesting (clang: 256);
- the work arena (all of a call's internal buffers, after reuse) at most `MAX_BYTES`;
- one kernel's expression (its longest operand chain) at most `MAX_EXPRESSION_DEPTH`: the kernel
  emitter recurses per level, so `lower_kernel` runs deep kernels through `deep_call`, on a
  thread with a large stack and a raised recursion limit.

`ctext.check_integers` re-checks the finished C text, and the compiler's `-Werror=overflow`
catches a constant truncated into a narrower type.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from hlofuse.errors import ResourceLimitError
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.shape import ArrayShape, TupleShape

MAX_BYTES = 1 << 48
MAX_NESTING = 64
MAX_EXPRESSION_DEPTH = 20_000

# Python frames the kernel emitter uses per expression level (value -> values -> _compute ->
# handler -> value, with room for index maps), and the stack a thread gets per level.
_FRAMES_PER_LEVEL = 8
_STACK_PER_LEVEL = 16 << 10
_DEEP_LOCK = threading.Lock()

T = TypeVar("T")


def _where(instr: Instruction) -> str:
    comp = instr.parent.name if instr.parent is not None else "?"
    return f"instruction {instr.name} in computation {comp}"


def _check_shape(instr: Instruction) -> None:
    stack: list[tuple[object, int]] = [(instr.shape, 0)]
    while stack:
        shape, depth = stack.pop()
        if isinstance(shape, TupleShape):
            if depth >= MAX_NESTING:
                raise ResourceLimitError(
                    f"{_where(instr)}: its tuple shape is nested more than {MAX_NESTING} "
                    "levels deep, the cpu backend's limit"
                )
            stack.extend((e, depth + 1) for e in shape.elements)
        elif isinstance(shape, ArrayShape):
            elements = 1
            for d in shape.dims:
                if not 0 <= d <= MAX_BYTES:
                    raise ResourceLimitError(
                        f"{_where(instr)}: dimension {d} of {shape.dtype.name}"
                        f"{list(shape.dims)} is outside [0, {MAX_BYTES}], the cpu backend's limit"
                    )
                elements *= max(d, 1)
            nbytes = elements * shape.dtype.itemsize
            if nbytes > MAX_BYTES:
                raise ResourceLimitError(
                    f"{_where(instr)}: the array {shape.dtype.name}{list(shape.dims)} needs "
                    f"{nbytes} bytes, more than the cpu backend's limit of {MAX_BYTES} bytes "
                    "(2^48) per array"
                )


def _check_ints(instr: Instruction) -> None:
    for key, value in instr.attrs.items():
        stack: list[object] = [value]
        while stack:
            v = stack.pop()
            if isinstance(v, bool):
                continue
            if isinstance(v, int):
                if abs(v) > MAX_BYTES:
                    raise ResourceLimitError(
                        f"{_where(instr)}: attribute {key} holds the integer {v}, outside "
                        f"[-{MAX_BYTES}, {MAX_BYTES}], the cpu backend's limit"
                    )
            elif isinstance(v, tuple | list):
                stack.extend(v)
            elif dataclasses.is_dataclass(v) and not isinstance(v, type | Instruction):
                stack.extend(getattr(v, f.name) for f in dataclasses.fields(v))


def _calls(comp: Computation) -> list[tuple[Instruction, Computation]]:
    return [(i, c) for i in comp.instructions for c in i.called_computations()]


def _nesting(module: Module) -> list[Computation]:
    """The computations reachable from the entry, callees first (an iterative depth-first
    walk); raises if control flow nests too deep or a computation calls itself."""
    entry = module.entry
    state: dict[int, int] = {id(entry): 1}  # 1: on the current path, 2: done
    height: dict[int, int] = {}
    order: list[Computation] = []
    frames = [(entry, iter(_calls(entry)))]
    while frames:
        comp, todo = frames[-1]
        step = next(todo, None)
        if step is None:
            frames.pop()
            h, site = 0, None
            for instr, callee in _calls(comp):
                if height[id(callee)] + 1 > h:
                    h, site = height[id(callee)] + 1, instr
            if h > MAX_NESTING and site is not None:
                raise ResourceLimitError(
                    f"{_where(site)}: control flow (while, conditional, call, fusion, "
                    f"to_apply) is nested {h} levels deep here, more than the cpu backend's "
                    f"limit of {MAX_NESTING}"
                )
            height[id(comp)] = h
            state[id(comp)] = 2
            order.append(comp)
            continue
        instr, callee = step
        seen = state.get(id(callee))
        if seen == 1:
            raise ResourceLimitError(
                f"{_where(instr)}: computation {callee.name} calls itself (directly or through "
                "others); the cpu backend needs an acyclic call graph"
            )
        if seen is None:
            state[id(callee)] = 1
            frames.append((callee, iter(_calls(callee))))
    return order


def check_module(module: Module) -> None:
    """Raise `ResourceLimitError` if `module` is beyond a limit of the module docstring."""
    passed: set[object] = set()  # shapes already checked (a large module has a few hundred)
    for comp in _nesting(module):
        for instr in comp.instructions:
            if instr.shape not in passed:
                _check_shape(instr)
                passed.add(instr.shape)
            if instr.attrs:
                _check_ints(instr)


def check_arena(size: int, labels: list[tuple[int, str]]) -> None:
    """The arena of `size` bytes holding buffers (bytes, label) must fit `MAX_BYTES`."""
    if size > MAX_BYTES:
        biggest = ", ".join(f"{label} ({n} bytes)" for n, label in sorted(labels)[::-1][:3])
        raise ResourceLimitError(
            f"the work arena needs {size} bytes, more than the cpu backend's limit of "
            f"{MAX_BYTES} bytes (2^48); the largest buffers: {biggest}"
        )


def expression_depth(instr: Instruction) -> int:
    """The longest operand chain of the computation a kernel evaluates (1 for a single op)."""
    comp = instr.fused_computation if instr.opcode.value == "fusion" else None
    if comp is None:
        return 1
    depth: dict[int, int] = {}
    for i in comp.post_order():
        depth[id(i)] = 1 + max((depth.get(id(o), 0) for o in i.operands), default=0)
    deepest = max(depth.values(), default=1)
    if deepest > MAX_EXPRESSION_DEPTH:
        raise ResourceLimitError(
            f"{_where(instr)}: the kernel's expression is {deepest} operations deep, more than "
            f"the cpu backend's limit of {MAX_EXPRESSION_DEPTH}"
        )
    return deepest


def _stack_depth() -> int:
    """Python frames below this one (the driver calls lowering from nested computations)."""
    n = 0
    frame = sys._getframe()
    while frame is not None:
        n += 1
        frame = frame.f_back  # type: ignore[assignment]
    return n


def deep_call(fn: Callable[[], T], depth: int) -> T:
    """`fn()`, run where `depth` levels of `_FRAMES_PER_LEVEL` Python frames fit: directly when
    the recursion limit leaves room above the current stack, else on a new thread (an empty
    stack, and a large one) with a raised limit."""
    need = depth * _FRAMES_PER_LEVEL
    if _stack_depth() + need + 200 < sys.getrecursionlimit():
        return fn()
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # re-raised in the caller's thread
            error.append(exc)

    with _DEEP_LOCK:
        old_limit = sys.getrecursionlimit()
        old_stack = threading.stack_size()
        sys.setrecursionlimit(max(old_limit, need + 1000))
        try:
            threading.stack_size(min(1 << 30, (64 << 20) + depth * _STACK_PER_LEVEL))
            worker = threading.Thread(target=run, name="hlofuse-deep-lowering")
            worker.start()
        finally:
            threading.stack_size(old_stack)
        worker.join()
        sys.setrecursionlimit(old_limit)
    if error:
        raise error[0]
    return result[0]
