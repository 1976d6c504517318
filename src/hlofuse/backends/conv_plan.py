"""How XLA's CPU runs a convolution, as far as it shows in the values: which padding and
base-dilation holes it multiplies by the kernel (0 x inf = NaN) or skips, and which zeros its
rewrites add to the sum. Both backends read the answer (`plan`); it differs from the plain
definition only when an input or kernel value is an inf or a NaN.

XLA's pipeline (cpu_compiler.cc, read for jaxlib 0.10.2 and measured against jax.jit):

1. Batch groups are always expanded (ConvolutionGroupConverter). With input batch = output
   features = batch_group_count (G) the convolution runs over every (batch, output feature)
   pair and a `select` keeps the matching ones (the rest, NaN or not, are dropped). Otherwise a
   spatial dimension of size G is appended: input batch groups become its positions, dilated by
   G (holes between them), kernel output-feature groups its G taps, stride G - 1. Output group
   p reads group p's input at tap p and a hole at every other tap j: when that convolution
   multiplies holes (4. below), a non-finite kernel value of group j makes all of group p's
   results for the same output feature NaN (`kernel_cross`).
2. Feature groups are expanded for result types other than f16 and f32 (bf16 and the 8-bit
   floats are computed in f32 or f16 by then; f64, complex and integers are expanded). With one
   input feature per group (depthwise) the kernel is broadcast to every input feature and
   zeroed outside the group: every output feature sums all input features, so a non-finite
   input value of another group, at a position the window reads, makes it NaN
   (`input_cross`). With more, group g becomes a spatial dimension as in 1., whose holes the
   elemental convolution skips: no visible change.
3. ConvCanonicalization transposes convolutions of the entry computation to (batch, spatial,
   feature) input, (spatial, in, out) kernel, (batch, spatial, feature) result; it does not
   look into other computations (while bodies, conditional branches). Calls are inlined into
   the entry computation before it (FlattenCallGraph, CallInliner), so a convolution reached
   from the entry through `call`s only counts as in the entry.
4. The algebraic simplifier swaps input and kernel of a convolution without groups when the
   kernel has more taps than the input positions (ConvOperandSwapper: the product over spatial
   dimensions of kernel sizes against input sizes, leaving out full-width contractions and
   group dimensions); the swapped one reverses its window.
5. Emission (PotentiallyImplementedAsEigenConvolution): the runtime (Eigen) convolution takes
   f16 and f32 inputs (bf16 and 8-bit floats converted) in canonical layout, 1 to 3 spatial
   dimensions, no window reversal, and input, kernel and result each of at least 16 bytes as
   f32 (smaller buffers are allocated less than 16-byte aligned). It multiplies padding and
   holes (image patches padded with zeros), except the 2-D (or 1-D) transposed convolution:
   base dilation, unit strides, no window dilation, one feature group, which multiplies the
   input's real elements only. Everything else runs the elemental convolution, which skips
   padding and holes (`skips`).

Measured on random small 1-, 2- and 3-D convolutions (f16, bf16, f32, f64, c64, c128; feature
and batch groups of 2-3; strides 1-2, padding -1..2, both dilations; NCHW and NHWC labels; in
the entry computation and in a while body) with inf/NaN in the kernel and the input: every
case agrees with jax.jit (benchmarks/results/fuzz_findings.md). Not modeled: a while loop XLA
finds small (under 1024 bytes accessed per iteration, after its fusion: SmallWhileLoopHoisting
compiles it into one kernel, whose convolutions are all elemental; here an NHWC one in it
counts as Eigen's), and a complex convolution written in HLO (jax lowers complex ones to
three real ones) that XLA turns into a dot (1x1, no padding, stride or dilation), whose
result Eigen's gemm scales by 1 + 0i (a non-finite part makes the other NaN).
"""

from __future__ import annotations

from dataclasses import dataclass

from hlofuse.ir.attributes import WindowDim
from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape

EIGEN_ALIGNMENT = 16   # bytes: TargetMachineFeatures::kEigenExpectedTensorAlignment
EIGEN_UNIT = 4         # bytes an element: Eigen convolves f16 (and bf16, f8) in f32


def buffer_alignment(size_bytes: int) -> int:
    """TargetMachineFeatures::minimum_alignment_for_allocation: small buffers are aligned to
    their size rounded up to a power of two (at most 16 matters here)."""
    return 1 if size_bytes <= 0 else min(1 << (size_bytes - 1).bit_length(), EIGEN_ALIGNMENT)


def parse_dim_labels(text: str) -> tuple[list[int], list[int], list[int]]:
    """`b01f_01io->b01f` -> (lhs, rhs, out) permutations to (b|o, f|i, spatial...) order."""
    text = text.strip().strip("{}").strip()
    try:
        lhs, rest = text.split("_", 1)
        rhs, out = rest.split("->", 1)
    except ValueError:
        raise ValueError(f"malformed dim_labels {text!r}") from None
    n = len(lhs) - 2
    spatial = [str(i) for i in range(n)]

    def perm(labels: str, first: str, second: str) -> list[int]:
        wanted = [first, second, *spatial]
        if sorted(labels) != sorted(wanted):
            raise ValueError(f"malformed dim_labels {text!r}")
        return [labels.index(c) for c in wanted]

    return perm(lhs, "b", "f"), perm(rhs, "o", "i"), perm(out, "b", "f")


@dataclass(frozen=True)
class ConvPlan:
    skips: bool = True           # padding and holes skipped (else multiplied by the kernel)
    input_cross: bool = False    # 2.: other feature groups' non-finite inputs make NaN
    kernel_cross: bool = False   # 1.: other batch groups' non-finite kernel values make NaN


@dataclass(frozen=True)
class ConvFacts:
    """What `plan` reads of a convolution (logical order: batch, feature, spatial...)."""

    inexact: bool                # float or complex values (integers show nothing)
    eigen_type: bool             # input f16, bf16, f32 or an 8-/4-bit float (Eigen's types)
    groups_kept: bool            # result of those types: feature groups not expanded
    window: tuple[WindowDim, ...]
    fgc: int
    bgc: int
    n: int                       # input batch
    o: int                       # output features
    ci: int                      # kernel input features (per group)
    in_sizes: tuple[int, ...]
    k_sizes: tuple[int, ...]
    sizes: tuple[int, int, int]  # elements of input, kernel and result
    canonical: bool              # dim_labels b0..f_0..io->b0..f
    in_entry: bool               # reached from the entry computation through calls only


def _swaps(window: tuple[WindowDim, ...], in_sizes: tuple[int, ...],
           k_sizes: tuple[int, ...]) -> bool:
    """ConvOperandSwapper's test (a convolution without groups): more kernel taps than the
    swapped kernel (the input) would have."""
    kernel = swapped = 1
    for w, size, ks in zip(window, in_sizes, k_sizes, strict=True):
        plain = w.pad_lo == 0 and w.pad_hi == 0 and w.window_dilation == 1 and not w.reversal
        group = plain and w.base_dilation == ks and w.stride == ks - 1
        contraction = plain and ks == size and w.base_dilation == 1 and w.stride == 1
        if group or contraction:
            continue
        kernel *= ks
        full = (size == 1 and w.stride == 1 and w.window_dilation == 1
                and w.pad_lo == ks - 1 and w.pad_hi == ks - 1)
        swapped *= ks if full else size
    return kernel > swapped


def _transposed(window: tuple[WindowDim, ...], fgc: int) -> bool:
    """Eigen's custom transposed convolution (CanUseCustomTransposedConv; 2-D, 1-D as 2-D):
    it multiplies only the input's real elements."""
    return (len(window) <= 2 and fgc == 1 and any(w.base_dilation > 1 for w in window)
            and all(w.stride == 1 and w.window_dilation == 1 for w in window))


def _eigen(f: ConvFacts, window: tuple[WindowDim, ...], out_elems: int, laid_out: bool) -> bool:
    """PotentiallyImplementedAsEigenConvolution on the convolution XLA emits."""
    return (f.eigen_type and laid_out and 1 <= len(window) <= 3
            and not any(w.reversal for w in window)
            and all(buffer_alignment(e * EIGEN_UNIT) >= EIGEN_ALIGNMENT
                    for e in (f.sizes[0], f.sizes[1], out_elems)))


def plan(f: ConvFacts) -> ConvPlan:
    """XLA's CPU treatment of the convolution `f` describes (module docstring)."""
    if not f.inexact:
        return ConvPlan()  # no NaN to see
    if f.bgc > 1:
        g = f.bgc
        if f.n == g and f.o == g:  # all pairs, then a select: one convolution, its result g x
            eig = _eigen(f, f.window, f.sizes[2] * g, f.in_entry or f.canonical) \
                and not _swaps(f.window, f.in_sizes, f.k_sizes)
            return ConvPlan(skips=not eig or _transposed(f.window, 1))
        window = (*f.window, WindowDim(size=g, stride=g - 1, base_dilation=g))
        eig = _eigen(f, window, f.sizes[2], f.in_entry) \
            and not _swaps(window, (*f.in_sizes, g), (*f.k_sizes, g))
        if not eig or _transposed(window, 1):
            return ConvPlan()
        return ConvPlan(skips=False, kernel_cross=True)
    if f.fgc > 1 and not f.groups_kept:
        return ConvPlan(input_cross=f.ci == 1)
    eig = _eigen(f, f.window, f.sizes[2], f.in_entry or f.canonical) \
        and not (f.fgc == 1 and _swaps(f.window, f.in_sizes, f.k_sizes))
    return ConvPlan(skips=not eig or _transposed(f.window, f.fgc))


def _entry_like(comp: Computation | None) -> bool:
    """Whether `comp` is the entry computation or reached from it through `call`s (and the
    fusions hlofuse made of them) only: XLA inlines those before ConvCanonicalization."""
    module = comp.parent if comp is not None else None
    if module is None or comp is module.entry:
        return True
    seen = {id(module.entry)}
    todo = [module.entry]
    while todo:
        cur = todo.pop()
        for instr in cur.instructions:
            if instr.opcode is Opcode.CALL or instr.opcode is Opcode.FUSION:
                for callee in instr.called_computations():
                    if callee is comp:
                        return True
                    if id(callee) not in seen:
                        seen.add(id(callee))
                        todo.append(callee)
    return False


def in_entry(instr: Instruction) -> bool:
    """Whether XLA would see the convolution `instr` in the entry computation (3. above)."""
    return _entry_like(instr.parent)


def facts_of(lhs: ArrayShape, rhs: ArrayShape, out: ArrayShape, dim_labels: str,
             window: tuple[WindowDim, ...] | None, fgc: int, bgc: int,
             entry: bool) -> ConvFacts:
    """`ConvFacts` of a convolution of `lhs` by `rhs` into `out` whose attributes (`window`
    None: one tap per kernel position) both backends have checked; `entry`: `in_entry`."""
    lp, rp, op = parse_dim_labels(dim_labels)
    nsp = len(lp) - 2
    k_sizes = tuple(rhs.dims[rp[2 + d]] for d in range(nsp))
    if not window:
        window = tuple(WindowDim(size=s) for s in k_sizes)
    spatial = list(range(1, nsp + 1))
    canonical = (lp == [0, nsp + 1, *spatial] and op == lp
                 and rp == [nsp + 1, nsp, *range(nsp)])
    return ConvFacts(
        inexact=lhs.dtype.is_inexact and out.dtype.is_inexact,
        eigen_type=lhs.dtype.is_float and lhs.dtype.bits <= 32,
        groups_kept=out.dtype.is_float and out.dtype.bits <= 32, window=tuple(window),
        fgc=fgc, bgc=bgc, n=lhs.dims[lp[0]], o=rhs.dims[rp[0]], ci=rhs.dims[rp[1]],
        in_sizes=tuple(lhs.dims[lp[2 + d]] for d in range(nsp)), k_sizes=k_sizes,
        sizes=(lhs.size, rhs.size, out.size), canonical=canonical, in_entry=entry)


def facts(instr: Instruction, entry: bool | None = None) -> ConvFacts:
    """`ConvFacts` of a convolution instruction whose attributes both backends have checked;
    `entry` (None: `in_entry(instr)`) says whether it counts as in the entry computation."""
    lhs, rhs = (o.shape for o in instr.operands)
    out = instr.shape
    assert isinstance(lhs, ArrayShape) and isinstance(rhs, ArrayShape) \
        and isinstance(out, ArrayShape)
    return facts_of(lhs, rhs, out, str(instr.attrs.get("dim_labels")),
                    instr.attrs.get("window"), int(instr.attrs.get("feature_group_count", 1)),
                    int(instr.attrs.get("batch_group_count", 1)),
                    in_entry(instr) if entry is None else entry)


def plan_for(instr: Instruction, entry: bool | None = None) -> ConvPlan:
    """`plan(facts(instr, entry))`."""
    return plan(facts(instr, entry))
