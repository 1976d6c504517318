"""Base-dilated convolutions (the input gradients of strided convolutions) as one convolution
per output phase, so no multiply-add reads a hole of the dilated input.

With base (lhs) dilation B, window stride 1 and no window dilation along a spatial dimension
(how jax writes the transpose of a convolution of stride B), output position s reads input
position x = (s + k - pad_lo) / B at tap k only where B divides s + k - pad_lo. Taking the
output positions of one phase r = s mod B, s = B j + r, only the taps k = k0 + B m with
k0 = (pad_lo - r) mod B contribute, and

    x = j + m - pad',  pad' = (pad_lo - r - k0) / B   (an exact division)

a convolution without dilation over j and m: the result's positions of phase r (stride B
times the result's, offset r) by the taps of class k0 (stride B times the kernel's, offset
k0; reversed windows count taps from the other end, stride -B). For several base-dilated
dimensions the phases are the products. Each phase is a `ConvSpec` with those strides, sizes
and windows, computed at pointers offset into the kernel and result (`conv.py` emits each).
A phase with no tap writes zeros (the direct loop nest over an empty window); a phase with no
output position is left out. Without dilated dimensions of this form there is nothing to split:
`split` returns None and the convolution runs whole, reading zeros at the holes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from hlofuse.backends.cpu.library.conv_spec import ConvSpec
from hlofuse.ir.attributes import WindowDim


@dataclass(frozen=True)
class Phase:
    spec: ConvSpec
    rhs_offset: int  # kernel elements before its first tap
    out_offset: int  # result elements before its first position


def split(spec: ConvSpec) -> list[Phase] | None:
    """The phases of `spec`, or None when no spatial dimension is base-dilated with unit
    window stride and window dilation."""
    dims = [d for d, w in enumerate(spec.window) if w.base_dilation > 1
            and w.stride == 1 and w.window_dilation == 1]
    if not dims:
        return None
    # per dimension: (phase r, first tap, taps, tap stride, positions, pad')
    options: list[list[tuple[int, int, int, int, int]]] = []
    for d in dims:
        w, b, k, s = spec.window[d], spec.window[d].base_dilation, spec.ksizes[d], \
            spec.out_sizes[d]
        opts = []
        for r in range(min(b, s)):
            k0 = (w.pad_lo - r) % b
            taps = len(range(k0, k, b))
            first, step = (k - 1 - k0, -b) if w.reversal else (k0, b)
            opts.append((r, first, taps, step, (w.pad_lo - r - k0) // b))
        options.append(opts)
    out: list[Phase] = []
    for combo in itertools.product(*options):
        window, ksizes, out_sizes = list(spec.window), list(spec.ksizes), list(spec.out_sizes)
        rs, os_ = list(spec.rs), list(spec.os)
        rhs_off = out_off = 0
        for d, (r, first, taps, step, pad) in zip(dims, combo, strict=True):
            b = spec.window[d].base_dilation
            window[d] = WindowDim(size=taps, pad_lo=pad)
            ksizes[d] = taps
            out_sizes[d] = len(range(r, spec.out_sizes[d], b))
            rhs_off += first * spec.rs[2 + d]
            out_off += r * spec.os[2 + d]
            rs[2 + d] = step * spec.rs[2 + d]
            os_[2 + d] = b * spec.os[2 + d]
        sub = replace(spec, window=tuple(window), ksizes=tuple(ksizes),
                      out_sizes=tuple(out_sizes), rs=tuple(rs), os=tuple(os_))
        out.append(Phase(sub, rhs_off, out_off))
    return out
