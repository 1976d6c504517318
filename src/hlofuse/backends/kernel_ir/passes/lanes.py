"""Lane forms: in a vector loop, the values a printer computes in a cheaper form than their op's
generic vector form (`ir.LaneForms`, stored as `Loop.forms`). Printers read the forms; they
decide nothing about them.

    lanes(kernel)        Loop.forms of every vector loop

- `narrow`: a 32-bit convert of a 64-bit index (an s32 iota, a position compared with another)
  whose terms other than the loop variable do not vary across lanes: the index computed in
  32-bit lanes, not in 64-bit ones converted. Exact: sums and products modulo 2^32 are the low
  bits of the 64-bit ones, and the arithmetic is unsigned (no overflow); half the vector work,
  no conversion.
- `blend`: a select on a lane-varying comparison of a type whose compute lane is as wide as
  the select's (`target.compute_lane_bytes`), or such a comparison converted to a number type
  (`(x < 0).astype(f32)`: exact, convert(pred) is 1 or 0): a blend on the comparison's mask,
  not on pred lanes (bytes) narrowed from the mask and widened back. A comparison in the
  total order of a float narrower than f32 has no mask form (its keys are its own bits).
- `compare32`: a lane-varying comparison of a 64-bit index (whose terms other than the loop
  variable do not vary) with a value that does not vary, where both lie within 32 bits over
  the loop's ranges (`Affine.bounds`, `ir.value_bounds`): compared in 32-bit lanes, exact
  there, where 64-bit lanes are twice the registers and their mask narrows to pred bytes lane
  by lane (GCC 12; a padded window's tap positions, `i + w - 15 >= 0`).
- `index32`: lane-varying index values (`index`, and the `idiv`/`imod` of delinearised
  coordinates: a reshape, a concatenate piece or a broadcast read inside a transposed loop)
  that lie in [0, 2^31) over the loop's ranges (`ir.value_bounds`), whose lane-varying index
  terms and operands are `index32` too (other terms, a clamped gathered position, must lie in
  [0, 2^31) and are narrowed where read), and which are used only as such terms and operands
  or as terms of load, store and tile indices: computed in unsigned 32-bit lanes (exact: the
  sums and products are the 64-bit ones modulo 2^32, the quotients those of non-negative
  values), where
  64-bit lanes have no vector division (GCC 12 divided lane by lane: MJX's humanoid, five
  64-bit divisions or remainders per vector step in its largest kernels).
- `gather`: every gather of a vector loop that holds more than GATHERS_AS_LANES of them (a
  load whose address is computed from lane-varying values; strided loads are not counted). A
  printer assembles a gather from its lanes' loads, or uses the target's gather instruction
  for these. Per lane is faster where it is few (AVX-512 on AMD Zen 4: jumanji's Snake ran
  11.0 ms a step that way, 15.1 ms with hardware gathers; MJX's humanoid, whose largest loop
  holds 64, 2.74 against 2.93 ms),
  but GCC 12's RTL combiner takes time far beyond the code's size on many lane-by-lane gathers
  in one loop: SpaceInvaders-MinAtar's kernel of two loops of 110 16-lane gathers was 23 s of
  -O2 (the program's compile 28 s against jax.jit's 1.4), 0.7 s with hardware gathers; the
  program compiles in 3.9 s and runs as fast (5.4 ms a rollout). Strided loads do not count:
  brax's ant (positional), loops of up to 144 of them, ran 22% slower with hardware gathers.
A select the lazy plan computes lazily (`passes/lazy.py`) is printed lazily, not blended.
"""

from __future__ import annotations

from hlofuse.backends.kernel_ir import ir
from hlofuse.backends.kernel_ir.ir import Val, Var
from hlofuse.backends.kernel_ir.query import varies
from hlofuse.backends.kernel_ir.target import compute_lane_bytes
from hlofuse.ir.dtypes import DType
from hlofuse.ir.opcodes import Opcode

GATHERS_AS_LANES = 64  # gathers a vector loop assembles from lane loads (module docstring)
INT32 = (-(1 << 31), (1 << 31) - 1)


def lanes(kernel: ir.Kernel) -> ir.Kernel:
    """Set `Loop.forms` on every vector loop of `kernel`."""
    for s in ir.walk(kernel.body):
        if isinstance(s, ir.Loop) and s.vector:
            s.forms = forms(s)
    return kernel


def forms(loop: ir.Loop) -> ir.LaneForms:
    """The lane forms of the vector loop `loop`'s values (see the module docstring)."""
    out = ir.LaneForms()
    var = loop.var
    gathers = []
    for v in ir.body_values(loop.body):
        if v.op == "load" and is_gather(v, var):
            gathers.append(v.uid)
        if v.op != "alu":
            continue
        if narrow_index(v, var):
            out.narrow.add(v.uid)
        elif compare32(v, var):
            out.compare32.add(v.uid)
        elif blend_on_compare(v, var):
            out.blend.add(v.uid)
    if len(gathers) > GATHERS_AS_LANES:
        out.gather.update(gathers)
    out.index32 = index32(loop)
    return out


_INDEX_OPS = ("index", "idiv", "imod")


def index32(loop: ir.Loop) -> set[int]:
    """The `index32` values of the vector loop `loop` (see the module docstring)."""
    var = loop.var
    vals = ir.body_values(loop.body)
    cand = {v.uid for v in vals
            if v.op in _INDEX_OPS and v.dtype.name == "s64" and varies(v, var) and _fits32(v)}
    # uses: as a term of another index value's or an access's index, as an idiv/imod operand,
    # or anything else (which needs the 64-bit value)
    other: set[int] = set()
    needs: dict[int, list[int]] = {}  # uid -> candidates it needs in 32 bits too
    for v in vals:
        if v.op in _INDEX_OPS:
            used = _varying(v.arg, var) if v.op == "index" else list(v.args)
            # a term computed otherwise (a clamped gathered position) is narrowed where read,
            # if its value fits
            if v.op == "index" and not all(t.op in _INDEX_OPS or _fits32(t) for t in used):
                other.add(v.uid)
            needs[v.uid] = [t.uid for t in used if t.op in _INDEX_OPS or v.op != "index"]
            continue
        for c in v.args:  # (not index terms of accesses: printed per lane, either width)
            other.add(c.uid)
    for st in ir.walk(loop.body):
        if isinstance(st, ir.Let | ir.Store):
            other.add(st.value.uid)
        elif isinstance(st, ir.StoreTile):
            other.update(x.uid for x in st.values)
    out = {uid for uid in cand if uid not in other}
    changed = True
    while changed:  # an index value computed in 32 bits needs its varying parts in 32 bits
        changed = False
        for uid in list(out):
            if any(n not in out for n in needs.get(uid, ())):
                out.discard(uid)
                changed = True
        for uid, parts in needs.items():  # a 64-bit index value reads its parts at 64 bits
            if uid not in out and any(n in out for n in parts):
                out.difference_update(parts)
                changed = True
    return out


def _fits32(v: Val) -> bool:
    """Whether the integer value `v` lies in [0, 2^31) wherever it is computed."""
    r = ir.value_bounds(v)
    return r is not None and r[0] >= 0 and r[1] <= INT32[1]


def _varying(a: ir.Affine, var: Var) -> list[Val]:
    """The value terms of `a` that vary across the lanes of the loop over `var`."""
    return [t for t, _c in a.terms if isinstance(t, Val) and varies(t, var)]


def is_gather(v: Val, var: Var) -> bool:
    """Whether the load `v` reads addresses computed from lane-varying values (a gather by
    data, not a strided load)."""
    if v.buffer.kind == "lanes":
        return False
    return bool(_varying(v.index, var))


def narrow_index(v: Val, var: Var) -> bool:
    """Whether `v` is a 32-bit convert of a 64-bit index whose other terms do not vary."""
    if v.arg.opcode is not Opcode.CONVERT or v.dtype.name not in ("s32", "u32"):
        return False
    (src,) = v.args
    if src.op != "index" or src.dtype.name not in ("s64", "u64"):
        return False
    return not _varying(src.arg, var)


def compare32(v: Val, var: Var) -> bool:
    """Whether `v` compares a 64-bit index that varies only through `var` with a value that
    does not vary, both within 32 bits (see the module docstring)."""
    if v.arg.opcode is not Opcode.COMPARE or not varies(v, var) or len(v.args) != 2:
        return False
    a, b = v.args
    if a.op != "index" or a.dtype.name != "s64" or b.dtype.name != "s64" or varies(b, var):
        return False
    if _varying(a.arg, var):
        return False
    ra, rb = a.arg.bounds(), ir.value_bounds(b)
    return ra is not None and rb is not None and all(
        INT32[0] <= r[0] and r[1] <= INT32[1] for r in (ra, rb))


def blend_on_compare(v: Val, var: Var) -> bool:
    """Whether `v` (a select, or a convert to a number type) blends on its comparison's mask."""
    if v.arg.opcode is Opcode.SELECT:
        return _compare_mask(v.args[0], v.dtype, var)
    if v.arg.opcode is Opcode.CONVERT and not v.dtype.is_pred:
        return _compare_mask(v.args[0], v.dtype, var)
    return False


def _compare_mask(p: Val, dtype: DType, var: Var) -> bool:
    """Whether `p` is a lane-varying comparison with a mask as wide as `dtype`'s lanes."""
    if not (p.op == "alu" and p.arg.opcode is Opcode.COMPARE and varies(p, var)):
        return False
    src = p.args[0].dtype
    width = compute_lane_bytes(src)
    if src.is_pred or width is None or width != compute_lane_bytes(dtype):
        return False
    total = p.arg.attr("type")
    return not (src.is_float and total is not None and str(total) == "TOTALORDER"
                and src.name not in ("f32", "f64"))
