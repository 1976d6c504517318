"""Library calls carry plain data (`backends/kernel_ir/libop.py`): after lowering and the
passes, no HLO instruction, computation or module is reachable from a `LibCall`'s op (dot,
sort with a comparator, select-and-scatter, convolution); the comparator, select and scatter
computations are kernel-IR functions; and the op's structural key has no name in it, so two
sorts that differ only in their instructions' and comparators' names have equal keys.
"""

from __future__ import annotations

from enum import Enum

import numpy as np
import pytest

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.libop import LibOp, func_key
from hlofuse.backends.kernel_ir.lower import lower_kernel
from hlofuse.backends.kernel_ir.lower.library import library_op
from hlofuse.backends.kernel_ir.passes import optimize
from hlofuse.backends.kernel_ir.target import Target
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import Opcode
from hlofuse.text import parse

MODULE = """
less_a {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT root_of_less_a = pred[] compare(a, b), direction=LT
}

order_b {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT root_of_order_b = pred[] compare(x, y), direction=LT
}

greater {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT gt = pred[] compare(a, b), direction=GT
}

ge {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT r = pred[] compare(p, q), direction=GE
}

add {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT s = f32[] add(p, q)
}

ENTRY e {
  x = f32[4,8] parameter(0)
  w = f32[8,3] parameter(1)
  d = f32[4,3] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  first_sort = f32[4,8] sort(x), dimensions={1}, to_apply=less_a
  other_sort = f32[4,8] sort(x), dimensions={1}, to_apply=order_b
  descending = f32[4,8] sort(x), dimensions={1}, to_apply=greater
  src = f32[2,4] parameter(2)
  z = f32[] constant(0)
  ss = f32[4,8] select-and-scatter(x, src, z), window={size=2x2 stride=2x2}, select=ge,
    scatter=add
  img = f32[1,6,6,2] parameter(3)
  k = f32[3,3,2,4] parameter(4)
  c = f32[1,4,4,4] convolution(img, k), window={size=3x3}, dim_labels=b01f_01io->b01f
  ROOT t = (f32[4,3], f32[4,8], f32[4,8], f32[4,8], f32[4,8], f32[1,4,4,4]) tuple(d,
    first_sort, other_sort, descending, ss, c)
}"""

HLO_TYPES = (Instruction, Computation, Module)


def _hlo_reachable(root: object) -> list[str]:
    """Paths to every HLO object reachable from `root` through attributes, slots and
    containers (a walk of the op's fields, iterative)."""
    found: list[str] = []
    seen: set[int] = set()
    stack: list[tuple[object, str]] = [(root, "op")]
    while stack:
        x, path = stack.pop()
        if id(x) in seen or x is None or isinstance(x, str | bytes | int | float | bool):
            continue
        seen.add(id(x))
        if isinstance(x, HLO_TYPES):
            found.append(f"{path}: {type(x).__name__}")
            continue
        if isinstance(x, type | Enum | np.ndarray | np.generic):
            continue
        if isinstance(x, dict):
            stack += [(v, f"{path}[{k!r}]") for k, v in x.items()]
            stack += [(k, f"{path} key") for k in x]
            continue
        if isinstance(x, tuple | list | set | frozenset):
            stack += [(v, f"{path}[{i}]") for i, v in enumerate(x)]
            continue
        names: list[str] = list(getattr(x, "__dict__", {}))
        for cls in type(x).__mro__:
            slots = cls.__dict__.get("__slots__", ())
            names += [slots] if isinstance(slots, str) else list(slots)
        for name in names:
            if hasattr(x, name):
                stack.append((getattr(x, name), f"{path}.{name}"))
    return found


@pytest.fixture(scope="module")
def ops() -> dict[str, LibOp]:
    """Each library instruction's LibCall op, lowered and optimized as the C backend gets it."""
    module = parse(MODULE)
    out: dict[str, LibOp] = {}
    for instr in module.entry.instructions:
        if instr.opcode in (Opcode.DOT, Opcode.SORT, Opcode.SELECT_AND_SCATTER,
                            Opcode.CONVOLUTION):
            kernel = optimize(lower_kernel(instr), Target.named("avx2"), threads=2,
                              check=True)
            (call,) = [s for s in ir.walk(kernel.body) if isinstance(s, ir.LibCall)]
            out[instr.name] = call.op
    return out


def test_libcall_op_is_plain_data(ops: dict[str, LibOp]) -> None:
    assert set(ops) == {"d", "first_sort", "other_sort", "descending", "ss", "c"}
    for name, op in ops.items():
        assert isinstance(op, LibOp)
        assert op.label == name and op.where == "e"
        assert _hlo_reachable(op) == [], name
        hash(op.key())
    assert [role for role, _ in ops["first_sort"].funcs] == ["compare"]
    assert [role for role, _ in ops["ss"].funcs] == ["select", "scatter"]
    assert ops["d"].funcs == () and ops["c"].funcs == ()
    assert ops["c"].attr("in_entry") is True
    assert ops["c"].attr("dim_labels") == "b01f_01io->b01f"
    with pytest.raises(KeyError):
        ops["d"].attr("precision_config")  # not carried: a routine may not read it


def test_the_walk_finds_hlo_where_there_is_some() -> None:
    """(The check above is not vacuous: an instruction, or a computation in an attribute, is
    found through slots, tuples and nested objects.)"""
    module = parse(MODULE)
    sort = next(i for i in module.entry.instructions if i.name == "first_sort")
    assert _hlo_reachable(ir.LibCall(sort, [], [])) == ["op.op: Instruction"]  # type: ignore[arg-type]
    op = library_op(sort)
    bad = LibOp(op.opcode, op.shape, op.operands, (("dimensions", (1,)),
                                                   ("to_apply", sort.attrs["to_apply"])))
    assert _hlo_reachable(bad) == ["op.attrs[1][1]: Computation"]


def test_key_has_no_names(ops: dict[str, LibOp]) -> None:
    a, b, desc = ops["first_sort"], ops["other_sort"], ops["descending"]
    assert a.key() == b.key() and hash(a.key()) == hash(b.key())
    assert repr(a.key()) == repr(b.key())  # built of plain values: a stable text to digest
    assert a.label != b.label
    assert desc.key() != a.key()  # GT is another comparator
    for op in ops.values():
        text = repr(op.key())
        assert not any(n in text for n in ("first_sort", "other_sort", "less_a", "order_b"))


def test_library_op_equal_comparators_lower_to_equal_functions() -> None:
    module = parse(MODULE)
    by_name = {i.name: i for i in module.entry.instructions}
    f = library_op(by_name["first_sort"]).func("compare")
    g = library_op(by_name["other_sort"]).func("compare")
    assert f is not None and g is not None and f is not g
    assert func_key(f) == func_key(g)
    assert all(v.op in ("param", "const", "alu") for v in ir.postorder(f.results))


def test_key_refuses_a_function_reading_memory() -> None:
    g = ir.Graph()
    buf = ir.Buffer("b", ir.S64, 4, "local")
    f = ir.Func("f", [g.param(0, ir.S64)], [g.load(buf, ir.affine(0))])
    with pytest.raises(ValueError):
        func_key(f)
