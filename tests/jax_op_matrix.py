"""JAX's own op matrix (`jax._src.internal_test_util.lax_test_util`), run through hlofuse's two
backends and compared with jax.jit.

The cases are exactly those of `lax_test.py`'s `testOp` / `testOpAgainstNumpy`: for every
record of `lax_test_util.lax_ops()` (op, arity, dtypes, input generator, tolerance), every
combination with replacement of `rec.nargs` shapes from each group of `compatible_shapes`, and
every dtype of the record (3182 cases with x64 on); `testReduce`'s matrix (every record of
`lax_reduce_ops()` and its dtypes, `lax.reduce` of a (3, 4, 5) operand over dimensions (0,),
(1, 2), (0, 2) and (0, 1, 2) with the record's init value: 236 cases); and
`testBitcastConvertTypeAgainstNumpy`'s (int4, uint4, int8, uint8, int32, f16, f32 to each other
at shapes (4,), (2, 4), (2, 3, 4), a minor dimension added for the narrower input: 147 cases).
Inputs come from the test's own generators (`jtu.rand_*`), seeded per case.

A case *matches* on a backend when every output has jax's shape and dtype and equals jax.jit's
value: integers and bools exactly, floats and complex numbers within `tolerance(case)` (the
tolerance `testOpAgainstNumpy` uses: `jtu.tolerance(dtype, rec.tol or default)`, as both an
absolute and a relative bound, NaNs in the same places). Statuses per backend:

    match         the outputs match
    mismatch      it ran, but an output differs (detail: the first difference)
    unsupported   hlofuse refused it with an HloError (detail: the message)
    crash         any other exception (always a bug)

Cases of one (op, dtype) run as one jitted function returning every case's result (one module,
one C compile); when such a batch fails as a whole, its cases run one by one so each failure is
attributed. Shared by `tests/test_jax_op_matrix.py` (a sample) and
`scripts/jax_op_matrix_report.py` (everything, with figures).
"""

from __future__ import annotations

import importlib
import itertools
import traceback
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from jax import lax
from jax._src import test_util as jtu
from jax._src.internal_test_util import lax_test_util

from hlofuse.errors import HloError

BACKENDS = ("interpreter", "cpu")
REDUCE_SHAPE = (3, 4, 5)
REDUCE_DIMS = ((0,), (1, 2), (0, 2), (0, 1, 2))
BITCAST_TYPES = ("int4", "uint4", "int8", "uint8", "int32", "float16", "float32")
BITCAST_SHAPES = ((4,), (2, 4), (2, 3, 4))


@dataclass(frozen=True)
class Case:
    """One (op, shapes, dtype) of the matrix."""

    op: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: np.dtype
    rng_factory: Callable[..., Any] = field(compare=False, repr=False)
    tol: Any = field(default=None, compare=False, repr=False)
    # reduce: (reducer name, init value, dimensions); bitcast_convert_type: (target dtype,)
    params: tuple[Any, ...] = ()

    @property
    def name(self) -> str:
        shapes = ",".join("x".join(map(str, s)) or "()" for s in self.shapes)
        extra = f"{list(self.params)}" if self.params else ""
        return f"{self.op}[{self.dtype.name}]({shapes}){extra}"

    @property
    def fn(self) -> Callable[..., Any]:
        if self.op == "reduce":
            name, init, dims = self.params
            reducer, init_val = getattr(lax, name), np.asarray(init).astype(self.dtype)
            return lambda x: lax.reduce(x, init_val, reducer, dims)
        if self.op == "bitcast_convert_type":
            to = self.params[0]
            return lambda x: lax.bitcast_convert_type(x, to)
        return getattr(lax, self.op)

    def args(self) -> list[np.ndarray]:
        seed = zlib.crc32(self.name.encode())
        rng = self.rng_factory(np.random.RandomState(seed))
        return [np.asarray(rng(s, self.dtype)) for s in self.shapes]


def lax_op_cases() -> list[Case]:
    """Every case of lax_test.py's testOp matrix (with x64 on when called in `jax_x64()`)."""
    cases = []
    for rec in lax_test_util.lax_ops():
        for group in lax_test_util.compatible_shapes:
            for shapes in itertools.combinations_with_replacement(group, rec.nargs):
                for dt in rec.dtypes:
                    cases.append(Case(rec.op, tuple(shapes), np.dtype(dt), rec.rng_factory,
                                      rec.tol))
    return cases


def reduce_cases() -> list[Case]:
    """testReduce's matrix (concrete init values)."""
    cases = []
    for rec in lax_test_util.lax_reduce_ops():
        for dt in rec.dtypes:
            dtype = np.dtype(dt)
            rng = jtu.rand_default if np.issubdtype(dtype, np.integer) else jtu.rand_small
            for dims in REDUCE_DIMS:
                cases.append(Case("reduce", (REDUCE_SHAPE,), dtype, rng, None,
                                  (rec.op.__name__, rec.init_val, dims)))
    return cases


def bitcast_cases() -> list[Case]:
    """testBitcastConvertTypeAgainstNumpy's matrix."""
    cases = []
    for src, dst in itertools.product(BITCAST_TYPES, repeat=2):
        n_in, n_out = (jax.dtypes.itemsize_bits(np.dtype(t)) for t in (src, dst))
        for shape in BITCAST_SHAPES:
            if n_in < n_out:
                shape = (*shape, n_out // n_in)
            cases.append(Case("bitcast_convert_type", (shape,), np.dtype(src),
                              jtu.rand_default, None, (np.dtype(dst),)))
    return cases


def all_cases() -> list[Case]:
    """The whole matrix. lax_test_util reads its dtype lists when imported, from `jtu.dtypes`,
    which caches them at first use, with or without x64: both are renewed inside `jax_x64()`."""
    with jax_x64():
        jtu.dtypes = jtu._LazyDtypes()
        importlib.reload(lax_test_util)
        return lax_op_cases() + reduce_cases() + bitcast_cases()


def jax_x64() -> Any:
    """The context the matrix runs in: 64-bit types on (as lax_test's x64 run)."""
    return jax.enable_x64(True)


def tolerance(case: Case) -> float:
    return float(jtu.tolerance(case.dtype, case.tol or jtu.default_tolerance()))


@dataclass
class Result:
    case: Case
    backend: str
    status: str
    detail: str = ""


# ----- running ------------------------------------------------------------------------------


def _batch_fn(cases: Sequence[Case]) -> Callable[..., Any]:
    """One function computing every case (its arguments: each case's, in order)."""
    counts = [len(c.shapes) for c in cases]
    fns = [c.fn for c in cases]

    def batch(*flat: Any) -> tuple[Any, ...]:
        out, i = [], 0
        for fn, n in zip(fns, counts, strict=True):
            out.append(fn(*flat[i:i + n]))
            i += n
        return tuple(out)

    return batch


def compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray], tol: float) -> str:
    """'' when `got` matches `want`, else the first difference."""
    if len(got) != len(want):
        return f"{len(got)} outputs, jax has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {i}: {g.dtype}{list(g.shape)}, jax has {w.dtype}{list(w.shape)}"
        if w.dtype.kind in "biu":
            if not np.array_equal(g, w):
                bad = np.argwhere(g != w)[0]
                return f"output {i} at {tuple(bad)}: {g[tuple(bad)]} vs jax {w[tuple(bad)]}"
            continue
        wide = np.complex128 if w.dtype.kind == "c" else np.float64
        gw, ww = g.astype(wide), w.astype(wide)
        close = np.isclose(gw, ww, rtol=tol, atol=tol, equal_nan=True)
        if not close.all():
            bad = tuple(np.argwhere(~close)[0])
            return f"output {i} at {bad}: {gw[bad]!r} vs jax {ww[bad]!r} (tolerance {tol:g})"
    return ""


def _execute(backend: str, text: str, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    from hlofuse.api import compile as hf_compile
    from hlofuse.backends import interpreter
    from hlofuse.text import parse

    if backend == "interpreter":
        return interpreter.run(parse(text), *args)
    return list(hf_compile(text, pipeline="xla", backend="cpu")(*args))


def _run_group(cases: Sequence[Case], backends: Sequence[str]) -> dict[str, list[Result]] | None:
    """Run `cases` as one module on each backend; None when the batch fails as a whole on some
    backend (the caller then runs its cases one by one)."""
    fn = _batch_fn(cases)
    per_case = [c.args() for c in cases]
    flat = [a for args in per_case for a in args]
    jitted = jax.jit(fn)
    want_all = jitted(*flat)
    text = jitted.lower(*flat).as_text(dialect="hlo")
    wants = [[np.asarray(x) for x in jax.tree_util.tree_leaves(w)] for w in want_all]
    results: dict[str, list[Result]] = {}
    for backend in backends:
        try:
            got = _execute(backend, text, flat)
        except Exception:
            if len(cases) > 1:
                return None
            raise
        out, i = [], 0
        for case, want in zip(cases, wants, strict=True):
            detail = compare(got[i:i + len(want)], want, tolerance(case))
            out.append(Result(case, backend, "mismatch" if detail else "match", detail))
            i += len(want)
        results[backend] = out
    return results


def _run_one(case: Case, backends: Sequence[str]) -> list[Result]:
    out = []
    for backend in backends:
        try:
            res = _run_group([case], [backend])
            assert res is not None
            out.extend(res[backend])
        except HloError as exc:
            out.append(Result(case, backend, "unsupported", f"{type(exc).__name__}: {exc}"))
        except Exception as exc:
            tb = traceback.format_exception(exc)[-3:]
            out.append(Result(case, backend, "crash",
                              f"{type(exc).__name__}: {exc}\n{''.join(tb)}"))
    return out


def run_cases(cases: Iterable[Case], backends: Sequence[str] = BACKENDS,
              batch: bool = True, one_module: bool = False) -> list[Result]:
    """Run every case on every backend (inside `jax_x64()`); one Result per case and backend.
    Cases of one (op, dtype) share a module (`batch`), or all cases do (`one_module`)."""
    cases = list(cases)
    groups: dict[tuple[str, str], list[Case]] = {}
    for c in cases:
        groups.setdefault(("", "") if one_module else (c.op, c.dtype.name), []).append(c)
    results: list[Result] = []
    with jax_x64():
        for group in groups.values():
            res = _run_group(group, backends) if batch and len(group) > 1 else None
            if res is None:
                for c in group:
                    results.extend(_run_one(c, backends))
            else:
                for backend in backends:
                    results.extend(res[backend])
    return results


def sample(cases: Sequence[Case], per_op: int = 1, seed: int = 0) -> list[Case]:
    """`per_op` random cases of every op, plus one case of every dtype the picks missed
    (deterministic)."""
    by_op: dict[str, list[Case]] = {}
    for c in cases:
        by_op.setdefault(c.op, []).append(c)
    rng = np.random.default_rng(seed)
    out = []
    for op_cases in by_op.values():
        picks = rng.choice(len(op_cases), size=min(per_op, len(op_cases)), replace=False)
        out.extend(op_cases[int(i)] for i in sorted(picks))
    seen = {c.dtype for c in out}
    for c in cases:
        if c.dtype not in seen:
            seen.add(c.dtype)
            out.append(c)
    return out
