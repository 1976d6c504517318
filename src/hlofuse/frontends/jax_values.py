"""Values across the `hlofuse.jit` boundary, taken and returned exactly as `jax.jit` does.

    ArgSpec(fn, static_argnums, static_argnames, donate_argnums, donate_argnames)
        .split(args, kwargs) -> (dynamic args, dynamic kwargs, static key)
    flatten_inputs(dynamic)  -> (arrays for the module's parameters, their signature key)
    abstract_inputs(dynamic) -> the same inside a jax trace (the path through XLA, jax_ffi.py)
    Outputs(out_info, ...)   module output arrays -> the function's output pytree of jax.Arrays
                             (.traced: the same for traced outputs)

**Arguments.** Static arguments are resolved as jax.jit resolves them: `static_argnums` give
their names and `static_argnames` their positions (parameters that are positional-or-keyword),
both are checked against the signature when the function is wrapped, a negative index counts
from the end of the call's positional arguments and an index past them is ignored; static
values must be hashable. Donation (`donate_argnums`/`donate_argnames`) is checked the same way
and then ignored: hlofuse never writes or deletes an argument.

**Leaves.** Every dynamic leaf becomes the numpy array jax.jit would hand XLA, with the avals
jax traces with: Python bool -> bool; int, float, complex -> weakly typed int32, float32,
complex64 (64-bit with x64 on; an int out of range is refused as jax refuses it); numpy arrays
and scalars -> their dtype canonicalised (float64 -> float32 with x64 off, int64 -> int32,
...); `jax.Array` -> its buffer (`np.asarray`: no copy on CPU) and its weak type; a typed PRNG
key -> its `key_data` (uint32), the module's parameter type. A value jax.jit would reject
(a string, an object array, a list of a non-pytree type) raises `InputError` naming the
argument's path. The signature key of a call is the pytree structure (static fields of
dataclass pytrees included), and per leaf its shape, dtype, weak type and key implementation.

On the path through XLA (`jax_ffi.py`) jax.jit itself takes the arguments; `abstract_inputs`
gives the traced leaves the same signature key, so both paths share one cache of compiled
signatures.

**Outputs.** Each output leaf comes back as jax.jit returns it: a `jax.Array` on the default
device with the traced dtype and weak type (a 0-d array for a scalar), built from the module's
numpy output without a copy where jax allows it (a 64-byte aligned buffer on CPU); a typed PRNG
key output is re-wrapped from its uint32 data (`jax.random.wrap_key_data`). jaxlib lets go of
the numpy memory of a freed jax.Array late (`release_dropped`, run before every call), so
outputs the caller dropped can be reused by the next call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np

from hlofuse.errors import HloError, InputError

_batched_device_put: Callable[..., Any] | None
_ShapedArray: type | None
try:  # the C++ constructor jax's own device_put uses: 5 us instead of 80 per array
    from jax._src import core as _jcore
    from jax._src.lib import xla_client as _xc

    _batched_device_put = _xc.batched_device_put
    _ShapedArray = _jcore.ShapedArray
except (ImportError, AttributeError):  # pragma: no cover - other jax versions
    _batched_device_put = None
    _ShapedArray = None

try:  # jaxlib drops the references its freed arrays held to numpy memory only when this runs
    # (or Python's cyclic collector): run before a call, the outputs of the last call that the
    # caller dropped are free again, and the cpu executable reuses them (0.07 us)
    from jax._src.lib import _jax as _jaxlib

    release_dropped: Callable[[], None] = _jaxlib.collect_garbage
except (ImportError, AttributeError):  # pragma: no cover - other jax versions
    def release_dropped() -> None:
        pass

try:  # (0.1 us; jax.config.jax_enable_x64: 0.4 us)
    from jax._src import config as _jconfig

    _X64 = _jconfig.enable_x64

    def _x64() -> bool:
        return bool(_X64.value)
except (ImportError, AttributeError):  # pragma: no cover - other jax versions
    def _x64() -> bool:
        return bool(jax.config.jax_enable_x64)  # type: ignore[attr-defined]

_ArrayImpl = type(jax.numpy.zeros(()))
_Tracer = jax.core.Tracer

# ----- static and donated arguments --------------------------------------------------------------

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _index_tuple(value: int | Iterable[int] | None, what: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    try:
        out = tuple(value)  # type: ignore[arg-type]
    except TypeError:
        raise InputError(f"{what}={value!r}: expected an int or a sequence of ints") from None
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in out):
        raise InputError(f"{what}={value!r}: expected an int or a sequence of ints")
    return out


def _name_tuple(value: str | Iterable[str] | None, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    try:
        out = tuple(value)
    except TypeError:
        raise InputError(f"{what}={value!r}: expected a str or a sequence of str") from None
    if not all(isinstance(n, str) for n in out):
        raise InputError(f"{what}={value!r}: expected a str or a sequence of str")
    return out


def _infer(sig: inspect.Signature | None, nums: tuple[int, ...] | None,
           names: tuple[str, ...] | None) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """jax.jit's completion: numbers give names and names give numbers (positional-or-keyword
    parameters only); both given are taken as they are."""
    if sig is None or (nums is not None and names is not None):
        return nums or (), names or ()
    params = list(sig.parameters.items())
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    if nums is None:
        names = names or ()
        return tuple(i for i, (k, p) in enumerate(params) if p.kind == kind and k in names), names
    return nums, tuple(k for i, (k, p) in enumerate(params) if p.kind == kind and i in nums)


def _check_nums(sig: inspect.Signature, nums: tuple[int, ...], what: str) -> None:
    n = 0
    for p in sig.parameters.values():
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            return
        n += p.kind in _POSITIONAL
    if nums and (-min(nums) > n or max(nums) >= n):
        raise InputError(f"{what}={nums}, but the function takes only {n} positional "
                         "argument(s)")


def _check_names(sig: inspect.Signature, names: tuple[str, ...], what: str) -> None:
    params = sig.parameters.values()
    bad = {p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                  inspect.Parameter.VAR_POSITIONAL)}
    if bad & set(names):
        raise InputError(f"{what} names positional-only parameter(s) {sorted(bad & set(names))}")
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    valid = {p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                  inspect.Parameter.KEYWORD_ONLY)}
    if set(names) - valid:
        raise InputError(f"{what} names {sorted(set(names) - valid)}, which the function does "
                         "not take")


class ArgSpec:
    """Which arguments of a function are static (and donated), resolved once at wrap time."""

    def __init__(self, fn: Callable[..., Any],
                 static_argnums: int | Sequence[int] | None = None,
                 static_argnames: str | Iterable[str] | None = None,
                 donate_argnums: int | Sequence[int] | None = None,
                 donate_argnames: str | Iterable[str] | None = None) -> None:
        try:
            sig: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # some builtins have none: no inference, no checks
            sig = None
        s_nums = None if static_argnums is None else _index_tuple(static_argnums,
                                                                  "static_argnums")
        s_names = None if static_argnames is None else _name_tuple(static_argnames,
                                                                   "static_argnames")
        d_nums = None if donate_argnums is None else _index_tuple(donate_argnums,
                                                                  "donate_argnums")
        d_names = None if donate_argnames is None else _name_tuple(donate_argnames,
                                                                   "donate_argnames")
        if sig is None and d_names:
            raise InputError("the function has no signature: pass donate_argnums instead of "
                             "donate_argnames")
        if s_nums is None and s_names is None:
            self.static_argnums: tuple[int, ...] = ()
            self.static_argnames: tuple[str, ...] = ()
        else:
            self.static_argnums, self.static_argnames = _infer(sig, s_nums, s_names)
        self.donate_argnums, self.donate_argnames = (
            ((), ()) if d_nums is None and d_names is None else _infer(sig, d_nums, d_names))
        if sig is not None:
            _check_nums(sig, self.static_argnums, "static_argnums")
            _check_names(sig, self.static_argnames, "static_argnames")
            _check_nums(sig, self.donate_argnums, "donate_argnums")
            _check_names(sig, self.donate_argnames, "donate_argnames")
        both = set(self.static_argnames) & set(self.donate_argnames)
        if both:
            raise InputError(f"argument(s) {sorted(both)} cannot be both static and donated")
        self._names = frozenset(self.static_argnames)

    def jax_options(self) -> dict[str, Any]:
        """The static options of the equivalent jax.jit (donation left out: it is ignored)."""
        return {"static_argnums": self.static_argnums, "static_argnames": self.static_argnames}

    def split(self, args: tuple[Any, ...], kwargs: dict[str, Any]
              ) -> tuple[tuple[Any, ...], dict[str, Any], tuple[Any, ...]]:
        """(dynamic positional args, dynamic kwargs, the static values' key)."""
        nums = self.static_argnums
        if nums:
            n = len(args)
            idx = {i % n if i < 0 else i for i in nums} if n else set()
            dyn = tuple(a for i, a in enumerate(args) if i not in idx)
            static: list[Any] = [(i, type(args[i]), args[i]) for i in sorted(idx) if i < n]
        else:
            dyn, static = args, []
        if self._names and kwargs:
            dkw = {}
            for k, v in kwargs.items():
                if k in self._names:
                    static.append((k, type(v), v))
                else:
                    dkw[k] = v
            kwargs = dkw
        key = tuple(static)
        if static:
            try:
                hash(key)
            except TypeError as exc:
                raise InputError(f"static arguments must be hashable (as for jax.jit): "
                                 f"{exc}") from None
        return dyn, kwargs, key


# ----- input leaves -----------------------------------------------------------------------------


class _LeafError(Exception):
    """Raised by a leaf conversion; the caller adds the leaf's path."""


_CANONICAL: dict[tuple[Any, np.dtype], np.dtype] = {}  # (x64, dtype) -> jax's dtype


def _canonical(dt: np.dtype, ctx: Any) -> np.dtype:
    key = (ctx, dt)
    out = _CANONICAL.get(key)
    if out is None:
        try:
            jax.typeof(np.zeros((), dt))
        except TypeError:
            raise _LeafError(f"a numpy array of dtype {dt} is not a valid JAX type") from None
        out = _CANONICAL[key] = np.dtype(jax.dtypes.canonicalize_dtype(dt))
    return out


def _python_scalar(leaf: Any, t: type) -> tuple[np.ndarray, tuple[Any, ...]]:
    if t is bool:
        return np.asarray(leaf, np.bool_), ((), np.dtype(np.bool_), False)
    dt = np.dtype(jax.dtypes.canonicalize_dtype({int: np.int64, float: np.float64,
                                                  complex: np.complex128}[t]))
    if t is int:
        info = np.iinfo(dt)
        if not info.min <= leaf <= info.max:
            raise _LeafError(f"the Python int {leaf} is too large to convert to {dt} "
                             "(jax.jit refuses it too)")
    return np.asarray(leaf, dt), ((), dt, True)


_SCALAR_TYPES = frozenset({bool, int, float, complex})


def leaf_in(leaf: Any, ctx: Any) -> tuple[np.ndarray, tuple[Any, ...]]:
    """The numpy array jax.jit gives XLA for `leaf`, and its key (shape, dtype, weak type, and
    for a typed PRNG key its dtype)."""
    t = type(leaf)
    if t is np.ndarray:
        canon = _canonical(leaf.dtype, ctx)
        if canon != leaf.dtype:
            leaf = leaf.astype(canon)
        return leaf, (leaf.shape, canon, False)
    if t is _ArrayImpl:
        dt = leaf.dtype
        if not isinstance(dt, np.dtype):  # an extended dtype: a typed PRNG key
            return _key_in(leaf)
        try:
            return np.asarray(leaf), (leaf.shape, dt, leaf.weak_type)
        except RuntimeError as exc:  # a deleted (donated) array
            raise _LeafError(f"the jax.Array cannot be read: {exc}") from None
    if t in _SCALAR_TYPES:
        return _python_scalar(leaf, t)
    if isinstance(leaf, np.generic):
        return leaf_in(np.asarray(leaf), ctx)
    return _slow_leaf(leaf, ctx)


def _key_in(leaf: Any) -> tuple[np.ndarray, tuple[Any, ...]]:
    if not jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        raise _LeafError(f"arrays of the extended dtype {leaf.dtype} cannot cross into hlofuse")
    data = np.asarray(jax.random.key_data(leaf))
    return data, (leaf.shape, leaf.dtype, "key")


def _slow_leaf(leaf: Any, ctx: Any) -> tuple[np.ndarray, tuple[Any, ...]]:
    if isinstance(leaf, _Tracer):
        raise _LeafError("a jax tracer")  # (flatten_inputs: the call is traced by jax)
    if isinstance(leaf, jax.Array):  # another Array implementation
        dt = leaf.dtype
        if not isinstance(dt, np.dtype):
            return _key_in(leaf)
        return np.asarray(leaf), (tuple(leaf.shape), dt, bool(getattr(leaf, "weak_type", 0)))
    if type(leaf) in _SCALAR_TYPES or isinstance(leaf, (bool, int, float, complex)):
        bases: tuple[type, ...] = (bool, int, float, complex)
        for t in bases:  # subclasses (IntEnum, ...): as their base
            if isinstance(leaf, t):
                return _python_scalar(t(leaf), t)
    try:
        aval = jax.typeof(leaf)
    except (TypeError, ValueError) as exc:
        raise _LeafError(f"a {type(leaf).__name__} is not a valid JAX type ({exc}); mark the "
                         "argument static (static_argnums/static_argnames) if it is not an "
                         "array") from None
    dt = np.dtype(aval.dtype)
    arr = np.asarray(leaf)
    if arr.dtype != dt:
        arr = arr.astype(dt)
    return arr, (tuple(aval.shape), dt, bool(aval.weak_type))


def flatten_inputs(dynamic: Any) -> tuple[list[np.ndarray], tuple[Any, ...], bool]:
    """The arrays of the dynamic arguments' leaves, the call's signature key, and whether a
    leaf is a jax tracer (the call is being traced by a jax transformation)."""
    leaves, treedef = jax.tree_util.tree_flatten(dynamic)
    ctx = _x64()
    arrays: list[np.ndarray] = []
    keys: list[tuple[Any, ...]] = []
    try:
        for leaf in leaves:
            arr, k = leaf_in(leaf, ctx)
            arrays.append(arr)
            keys.append(k)
    except _LeafError as exc:
        if any(isinstance(leaf, _Tracer) for leaf in leaves):
            return [], (), True
        raise InputError(f"argument {_path(dynamic, len(arrays))}: {exc}") from None
    key = (treedef, ctx, tuple(keys))
    try:
        hash(key)
    except TypeError as exc:  # a pytree node's auxiliary data (static fields)
        raise InputError(f"the arguments' pytree structure is not hashable (a static field "
                         f"of a dataclass pytree?): {exc}") from None
    return arrays, key, False


def abstract_inputs(dynamic: Any) -> tuple[list[Any], tuple[Any, ...]]:
    """Inside a jax trace of the call (`hlofuse.jit` through XLA, `jax_ffi.py`): the traced
    values the module's parameters get (a typed PRNG key's data for a key) and the signature
    key `flatten_inputs` gives the same call's concrete arguments."""
    leaves, treedef = jax.tree_util.tree_flatten(dynamic)
    arrays: list[Any] = []
    keys: list[tuple[Any, ...]] = []
    for leaf in leaves:
        aval = jax.typeof(leaf)
        dt = aval.dtype
        if isinstance(dt, np.dtype):
            arrays.append(leaf)
            keys.append((tuple(aval.shape), dt, bool(aval.weak_type)))
        else:
            arrays.append(jax.random.key_data(leaf))
            keys.append((tuple(aval.shape), dt, "key"))
    return arrays, (treedef, _x64(), tuple(keys))


def _path(dynamic: Any, index: int) -> str:
    """`args[0]['w']`, `kwargs['state'].step`: where leaf `index` of (dynamic positional args,
    dynamic kwargs) is (positions count the dynamic arguments only)."""
    try:
        path = jax.tree_util.tree_flatten_with_path(dynamic)[0][index][0]
        base = "args" if getattr(path[0], "idx", None) == 0 else "kwargs"
        return base + jax.tree_util.keystr(path[1:])
    except Exception:  # (the message is best effort)
        return f"leaf {index}"


# ----- outputs -----------------------------------------------------------------------------------


def _default_device() -> Any:
    dev = getattr(jax.config, "jax_default_device", None)
    if dev is not None and not isinstance(dev, str):
        return dev
    return jax.devices()[0]


class Outputs:
    """Turns the module's output arrays into the function's output pytree of jax.Arrays with
    the traced dtypes and weak types (`out_info`: `jax.stages.Lowered.out_info`)."""

    def __init__(self, out_info: Any, module_outputs: Sequence[tuple[np.dtype, tuple[int, ...]]],
                 name: str) -> None:
        leaves, tree = jax.tree_util.tree_flatten(out_info)
        self.tree: Any = tree
        if len(leaves) != len(module_outputs):
            raise HloError(f"{name}: the module returns {len(module_outputs)} arrays but the "
                           f"function has {len(leaves)} outputs")
        self.device = _default_device()
        self.sharding = jax.sharding.SingleDeviceSharding(self.device)
        self._put: list[Callable[[np.ndarray], Any]] = []
        self.weak: list[bool] = []  # per module output: weakly typed (the path through XLA)
        self._impls: list[Any] = []  # per module output: a typed PRNG key's implementation
        for j, (leaf, (dt, dims)) in enumerate(zip(leaves, module_outputs, strict=True)):
            want = leaf.dtype
            if not isinstance(want, np.dtype):  # a typed PRNG key: the module returns its data
                data = jax.eval_shape(jax.random.key_data, leaf)
                got = (np.dtype(data.dtype), tuple(data.shape))
                self._put.append(self._key_put(got, want))
                self.weak.append(False)
                self._impls.append(_key_impl(want))
            else:
                got = (np.dtype(want), tuple(leaf.shape))
                self._put.append(self._array_put(got[0], got[1], bool(leaf.weak_type)))
                self.weak.append(bool(leaf.weak_type))
                self._impls.append(None)
            if got != (dt, tuple(dims)):
                raise HloError(f"{name}: output {j} is {want}{list(leaf.shape)} under jax.jit "
                               f"({got[0]}{list(got[1])} in XLA), but the module returns "
                               f"{dt}{list(dims)}")

    def _array_put(self, dt: np.dtype, dims: tuple[int, ...], weak: bool
                   ) -> Callable[[np.ndarray], Any]:
        if _batched_device_put is not None and _ShapedArray is not None:
            aval = _ShapedArray(dims, dt, weak_type=weak)
            sharding, devices = self.sharding, [self.device]

            def put(a: np.ndarray) -> Any:
                if type(a) is not np.ndarray:
                    a = _from_device(a, weak)
                    if not isinstance(a, np.ndarray):
                        return a
                return _batched_device_put(aval, sharding, [a], devices, False)

            return put
        device = self.device  # pragma: no cover - other jax versions: weak types are lost

        def put_public(a: np.ndarray) -> Any:  # pragma: no cover
            return jax.device_put(a, device)

        return put_public

    def _key_put(self, data: tuple[np.dtype, tuple[int, ...]], want: Any
                 ) -> Callable[[np.ndarray], Any]:
        put_data = self._array_put(data[0], data[1], False)
        impl = _key_impl(want)

        def put(a: np.ndarray) -> Any:
            return jax.random.wrap_key_data(put_data(a), impl=impl)

        return put

    def __call__(self, arrays: Sequence[np.ndarray]) -> Any:
        return self.tree.unflatten([p(a) for p, a in zip(self._put, arrays, strict=True)])

    def traced(self, values: Sequence[Any]) -> Any:
        """Inside a jax trace: the output pytree of the module's traced outputs (already typed
        and weakly typed as `weak` says), typed PRNG keys wrapped from their data."""
        return self.tree.unflatten([
            v if impl is None else jax.random.wrap_key_data(v, impl=impl)
            for v, impl in zip(values, self._impls, strict=True)])


def _from_device(a: Any, weak: bool) -> Any:
    """A backend's device array (the gpu backend's torch tensors): a jax.Array through DLPack
    (no copy where jax shares the device), or, for a weakly typed output (DLPack carries no
    weak type), a numpy copy for `put` to make one."""
    if not hasattr(a, "__dlpack__"):
        return np.asarray(a)
    if weak:
        return np.asarray(a.cpu() if hasattr(a, "cpu") else a)
    return jax.dlpack.from_dlpack(a)


def _key_impl(dtype: Any) -> Any:
    impl = getattr(dtype, "_impl", None)
    if impl is None:
        raise HloError(f"cannot tell the PRNG implementation of the key dtype {dtype}")
    return impl
