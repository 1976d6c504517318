"""Small dots fused into the kernels that read them (beyond XLA): a dot that contracts at most
`small_dot_k` elements is computed per output element inside each consumer fusion.

    d = dot(x f32[65536,4], w f32[4,64])              a GEMM kernel writing 16.8 MB
    h = fusion(d, b): tanh(d + broadcast(b))           a loop kernel reading them back
 -> h = fusion(x, w, b): tanh(dot(x, w) + broadcast(b))  one kernel, 4 multiply-adds an element

XLA keeps every dot a kernel of its own (on CPU a library GEMM; its kOutput fusion takes a
bias add at most). A dot over a handful of elements is not a GEMM's work: a policy's first
layer over a 4-number observation, a value head's input gradient (`dv[N, 1] x w[64, 1]^T`, an
outer product), a policy head's (`dlogits[N, 2] x w[64, 2]^T`). Its result is as large as its
consumer's input and costs more to write and read back than to recompute: inside the consumer
each element is its own sum over the contraction (`kernel_ir.lower.reduce.dot_value`, in the
accumulator type the GEMM uses), so nothing changes in the module's values, only where the
dot's elements are computed.

Conditions (each refusal names its rule; dots over the contraction limit are not recorded):

- `small_dot_k`: the dot contracts at most this many elements (0 switches the pass off; at
  most PER_ELEMENT_DOT_K, the kernel IR's bound);
- `small_dot.type`: the kernel IR computes it per element (`per_element_dot`:
  float operands with a float result, or integers throughout; complex, pred and mixed
  float/integer dots stay library calls, whose conversions the GEMM's emitter models);
- `small_dot.users` (legality): every user is a loop or input fusion, so no kernel needs the
  dot's result in memory, and no user is the computation's root;
- `small_dot.reuse` (profitability): every consumer reads the dot only at the element its own
  loop is at (`read_in_place`: through same-shaped elementwise ops, into the root or a reduce's
  input), so each element is computed once; a broadcast, slice or window of the dot would
  compute elements again per read.

Every consumer gets its own copy of the dot (fusion.fuse_instruction); the dot itself is
removed once its last user has taken it.
"""

from __future__ import annotations

import math
from typing import ClassVar

from hlofuse.ir.fusion import fuse_instruction, fused_parameter_for, is_fusion
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.module import Module
from hlofuse.ir.opcodes import FusionKind, Opcode
from hlofuse.ir.shape import ArrayShape
from hlofuse.passes.fusion.config import FusionConfig
from hlofuse.passes.fusion.decision import FusionDecision
from hlofuse.passes.fusion.options import FusionPass
from hlofuse.passes.fusion.trace import trace_of
from hlofuse.passes.registry import register
from hlofuse.passes.utils import reachable_computations

PASS = "small-dot-fusion"
PER_ELEMENT_DOT_K = 16  # a dot in a plain fusion contracting at most this many runs per element


def per_element_dot(dot: Instruction) -> bool:
    """Does the kernel IR compute this dot per element inside a plain fusion
    (`lower.reduce.dot_value`) rather than whole by the library GEMM: it contracts at most
    PER_ELEMENT_DOT_K elements, with float operands and a float result or integers throughout
    (the GEMM's emitter models the other conversions: an integral result of float operands,
    pred sums, complex)."""
    return contraction(dot) <= PER_ELEMENT_DOT_K and _per_element_types(dot)


def _per_element_types(dot: Instruction) -> bool:
    if not all(isinstance(x.shape, ArrayShape) for x in (dot, dot.operand(0), dot.operand(1))):
        return False
    types = [x.shape.dtype for x in (dot, dot.operand(0), dot.operand(1))]  # type: ignore[union-attr]
    return all(t.is_float for t in types) or all(t.is_integral and not t.is_pred for t in types)


def contraction(dot: Instruction) -> int:
    """The number of elements the dot sums per output element."""
    lhs = dot.operand(0).shape
    assert isinstance(lhs, ArrayShape)
    return math.prod(lhs.dims[int(d)] for d in dot.attrs.get("lhs_contracting_dims", ()))


def small_dot_legal(dot: Instruction, config: FusionConfig) -> FusionDecision:
    k = contraction(dot)
    limit = min(config.small_dot_k, PER_ELEMENT_DOT_K)  # the kernel IR's per-element bound
    if k > limit:
        return FusionDecision.no(f"contracts {k} elements, more than small_dot_k={limit}",
                                 "small_dot_k", contraction=k, limit=limit)
    if not _per_element_types(dot):
        return FusionDecision.no("a complex, pred or mixed float/integer dot stays a library "
                                 "call", "small_dot.type")
    comp = dot.parent
    if comp is not None and comp.root is dot:
        return FusionDecision.no("the dot is its computation's result", "small_dot.users")
    for u in dot.users:
        if not is_fusion(u) or u.fusion_kind not in (FusionKind.LOOP, FusionKind.INPUT):
            return FusionDecision.no(f"{u.name} ({u.opcode.value}) is not a loop or input "
                                     "fusion", "small_dot.users", user=u.name)
    out = dot.shape
    assert isinstance(out, ArrayShape)
    users = len(set(map(id, dot.users)))
    # what the consumers stop reading and the GEMM stops writing
    return FusionDecision.ok(contraction=k, consumers=users,
                             saved_bytes=out.size * out.dtype.itemsize * (1 + users))


def read_in_place(fusion: Instruction, operand: Instruction) -> bool:
    """Does `fusion` read `operand` only at the element its own loop is at: every path from
    the parameter bound to it goes through same-shaped elementwise ops into the root (or a
    root tuple), or into a reduce's input? The kernel then computes each element once (values
    are shared by index), however many ops use it."""
    param = fused_parameter_for(fusion, operand)
    if param is None:
        return False
    root = fusion.fused_computation.root
    todo, seen = [param], {id(param)}
    while todo:
        x = todo.pop()
        for u in x.users:
            if id(u) in seen:
                continue
            seen.add(id(u))
            same = (isinstance(u.shape, ArrayShape) and isinstance(x.shape, ArrayShape)
                    and u.shape.dims == x.shape.dims)
            if u.opcode is Opcode.TUPLE and u is root:
                continue
            if u.opcode is Opcode.REDUCE and all(
                    o is not x for o in u.operands[u.operand_count // 2:]):
                continue
            if not (u.is_elementwise and same):
                return False
            todo.append(u)
    return True


def small_dot_profitable(dot: Instruction) -> FusionDecision:
    for u in dot.users:
        if not read_in_place(u, dot):
            return FusionDecision.no(f"{u.name} reads the dot's elements at other positions "
                                     "than its own (each read would compute them again)",
                                     "small_dot.reuse", user=u.name)
    return FusionDecision.ok()


@register(PASS)
class SmallDotFusion(FusionPass):
    """Fuse each dot of at most `small_dot_k` contracted elements into every fusion that
    reads it (module docstring)."""

    OPTIONS: ClassVar[tuple[str, ...]] = ("small_dot_k",)
    name: ClassVar[str] = PASS

    def run(self, module: Module) -> bool:
        config: FusionConfig = self.run_config(module)
        if config.small_dot_k <= 0:
            return False
        trace = trace_of(module)
        changed = False
        for comp in reachable_computations(module):
            for dot in [i for i in comp.instructions if i.opcode is Opcode.DOT]:
                decision = small_dot_legal(dot, config)
                if decision:
                    cost = small_dot_profitable(dot)
                    decision = decision if cost else cost
                if decision or decision.rule in ("small_dot.type", "small_dot.users",
                                                 "small_dot.reuse"):
                    trace.record(PASS, dot.name, dot.name, decision, comp.name)
                if not decision:
                    continue
                for u in list(dict.fromkeys(dot.users)):
                    fuse_instruction(u, dot)
                changed = True
        return changed
