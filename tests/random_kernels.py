"""Random HLO modules that stress the CPU kernel emitter (kernel IR lowering, passes, C printer),
for tests/test_cpu_random_graphs.py: seeded (`random.Random(seed)`), one module per seed.

    text, tol = random_module(seed)      # HLO text; (rtol, atol) for its float outputs
    python tests/random_kernels.py FIRST COUNT [PIPELINE [TARGET [MAX_STEPS]]]   # a campaign

Each module has [A, B] values (odd extents: 1, 3, 5, 7, 9, 13, 17 x 1, 2, 3, 5, 8, 9, 15, 16,
17, 31, 33, 40, so vector loops have tails, unrolled inner loops and single lanes) of a float
type (f32, f64, f16, bf16), an integer type (s8, s32, u32) and pred, and applies 4-12 random
steps, each an HLO pattern the fusion passes then cut into kernels:

- elementwise float, integer (division and shifts by any amount, popcnt, clz) and pred ops,
  converts between all of those types, clamps, selects of compares;
- broadcasts and transposes feeding row, column and full reductions (add, max, min; and, or,
  xor, multiply on integers), several reductions of one operand (multi-output fusions),
  reductions of reductions, reductions over a concatenate or a pad (loops `split` cuts),
  variadic argmax/argmin reduces (value and index), reduce-window (strides, padding);
- dynamic-slice and dynamic-update-slice at parameter starts (clamped), gathers of rows or
  columns and scatters (add, max) at sparse indices (parameters in [-6, 6]: some out of
  bounds) or computed ones (an argmax's), slices, pads, concatenates, reverses, iotas.

Values compared exactly between backends: the outputs of ops with a discontinuity (floor,
compare, convert to an integer, sign, argmax) are only taken of values that both compute bit
for bit ("exact": parameters, integer ops, IEEE-exact float ops, max/min reductions), never of
a transcendental or a float sum (vector partial sums: another order). Magnitudes are kept
bounded (a clamp or tanh before an op that would exceed the type's limit), so no inf appears
where the other side has a large finite value.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

FLOATS = ("f32", "f32", "f64", "f16", "bf16")
INTS = ("s32", "s8", "u32", "s32")
A_DIMS = (1, 3, 5, 7, 9, 13, 17)
B_DIMS = (1, 2, 3, 5, 8, 9, 15, 16, 17, 31, 33, 40)
# (largest magnitude kept, rtol, atol) per float type of the module
LIMITS = {"f32": (1e3, 1e-4, 1e-3), "f64": (1e3, 1e-9, 1e-9), "f16": (64.0, 1e-2, 0.25),
          "bf16": (16.0, 4e-2, 0.5)}
INT_BITS = {"s8": 8, "s32": 32, "u32": 32, "s64": 64}


@dataclass
class V:
    name: str
    dt: str
    dims: tuple[int, ...]
    exact: bool
    bound: float  # |value| <= bound (inf: unknown, e.g. a wrapped integer)

    @property
    def t(self) -> str:
        return f"{self.dt}[{','.join(map(str, self.dims))}]"

    @property
    def is_float(self) -> bool:
        return self.dt[0] in "fb"


def random_module(seed: int, steps: tuple[int, int] = (4, 12)) -> tuple[str, tuple[float, float]]:
    """Module `seed`'s HLO text and its float tolerance; `steps`: how many patterns, at least
    and at most (a longer campaign may ask for larger modules)."""
    g = _Gen(seed)
    g.build(steps)
    return g.text(), (LIMITS[g.ft][1], LIMITS[g.ft][2])


class _Gen:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.a = self.r.choice(A_DIMS)
        self.b = self.r.choice(B_DIMS)
        self.ft = self.r.choice(FLOATS)
        self.it = self.r.choice(INTS)
        self.limit = LIMITS[self.ft][0]
        self.lines: list[str] = []
        self.comps: dict[str, str] = {}
        self.pool: list[V] = []  # [A, B] values
        self.extra: list[V] = []  # other shapes: output candidates
        self.n = 0
        self.params = 0

    # ----- text -----------------------------------------------------------------------------

    def text(self) -> str:
        return ("HloModule fuzz\n" + "".join(self.comps.values()) + "ENTRY e {\n"
                + "\n".join(self.lines) + "\n}\n")

    def emit(self, dt: str, dims: tuple[int, ...], rhs: str, exact: bool, bound: float) -> V:
        self.n += 1
        v = V(f"v{self.n}", dt, dims, exact, bound)
        self.lines.append(f"  {v.name} = {v.t} {rhs}")
        return v

    def param(self, dt: str, dims: tuple[int, ...]) -> V:
        v = self.emit(dt, dims, f"parameter({self.params})", True,
                      8.0 if dt[0] in "fb" else 6.0 if dt != "pred" else 1.0)
        self.params += 1
        return v

    def const(self, dt: str, value: float | int | str) -> V:
        text = str(value) if not isinstance(value, bool) else str(value).lower()
        b = abs(float(value)) if not isinstance(value, str) else float("inf")
        return self.emit(dt, (), f"constant({text})", True, b)

    def bcast(self, v: V, dims: tuple[int, ...], mapping: str) -> V:
        return self.emit(v.dt, dims, f"broadcast({v.name}), dimensions={{{mapping}}}",
                         v.exact, v.bound)

    def reducer(self, op: str, dt: str) -> str:
        name = f"r_{op}_{dt}"
        if name not in self.comps:
            self.comps[name] = (f"{name} {{\n  x = {dt}[] parameter(0)\n  y = {dt}[] "
                                f"parameter(1)\n  ROOT r = {dt}[] {op}(x, y)\n}}\n")
        return name

    def argcmp(self, dt: str, direction: str) -> str:
        name = f"arg_{direction.lower()}_{dt}"
        if name not in self.comps:
            self.comps[name] = f"""{name} {{
  a = {dt}[] parameter(0)
  ai = s32[] parameter(1)
  b = {dt}[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction={direction}
  eq = pred[] compare(a, b), direction=EQ
  lt = pred[] compare(ai, bi), direction=LT
  tie = pred[] and(eq, lt)
  keep = pred[] or(gt, tie)
  v = {dt}[] select(keep, a, b)
  i = s32[] select(keep, ai, bi)
  ROOT t = ({dt}[], s32[]) tuple(v, i)
}}
"""
        return name

    # ----- picking values ---------------------------------------------------------------------

    def pick(self, kind: str, exact: bool = False, dt: str | None = None) -> V | None:
        ok = [v for v in self.pool if (dt is None or v.dt == dt) and (not exact or v.exact) and (
            kind == "any" or (kind == "float" and v.is_float)
            or (kind == "int" and v.dt in INT_BITS) or (kind == "pred" and v.dt == "pred"))]
        if not ok:
            return None
        recent = ok[-4:]
        return self.r.choice(recent if self.r.random() < 0.6 else ok)

    def tame(self, v: V, limit: float) -> V:
        """`v`, clamped to +-limit if it may exceed it (a float: tanh scaled when inexact)."""
        if not v.is_float:
            limit = min(limit, 100)
        if v.bound <= limit or v.dt == "pred":
            return v
        if v.is_float:
            lo = self.bcast(self.const(v.dt, -limit), v.dims, "")
            hi = self.bcast(self.const(v.dt, limit), v.dims, "")
        else:
            lo = self.bcast(self.const(v.dt, 0 if v.dt == "u32" else -int(limit)), v.dims, "")
            hi = self.bcast(self.const(v.dt, int(limit)), v.dims, "")
        return self.emit(v.dt, v.dims, f"clamp({lo.name}, {v.name}, {hi.name})", v.exact,
                         limit)

    def add(self, v: V) -> V:
        if v.dims == (self.a, self.b):
            self.pool.append(v)
        else:
            self.extra.append(v)
        return v

    # ----- the module -------------------------------------------------------------------------

    def build(self, steps: tuple[int, int]) -> None:
        ab = (self.a, self.b)
        for dt in (self.ft, self.ft, self.it):
            self.add(self.param(dt, ab))
        if self.r.random() < 0.4:
            self.add(self.param("pred", ab))
        patterns = [self.unary_f, self.binary_f, self.binary_f, self.int_op, self.compare_select,
                 self.convert, self.bcast_vector, self.reduce, self.reduce, self.multi_reduce,
                 self.argmax, self.transpose_reduce, self.reduce_window, self.dynamic,
                 self.gather, self.scatter, self.split_reduce, self.reshape_ops]
        for _ in range(self.r.randint(*steps)):
            self.r.choice(patterns)()
        cands = self.pool[3:] + self.extra
        if not cands:
            cands = self.pool
        outs = self.r.sample(cands[-8:], min(len(cands[-8:]), self.r.randint(1, 4)))
        shape = ", ".join(o.t for o in outs)
        self.lines.append(f"  ROOT out = ({shape}) tuple({', '.join(o.name for o in outs)})")

    def unary_f(self) -> None:
        x = self.pick("float")
        if x is None:
            return
        ops = ["negate", "abs", "tanh", "sine", "cosine", "exp", "sqrt", "log", "floor", "ceil",
               "round-nearest-even", "sign", "atan2", "divide", "remainder"]
        op = self.r.choice(ops)
        if op in ("floor", "ceil", "round-nearest-even", "sign") and not x.exact:
            op = "tanh"
        if op in ("negate", "abs", "floor", "ceil", "round-nearest-even"):
            v = self.emit(x.dt, x.dims, f"{op}({x.name})", x.exact, x.bound + 1)
        elif op == "sign":
            v = self.emit(x.dt, x.dims, f"sign({x.name})", x.exact, 1)
        elif op in ("tanh", "sine", "cosine"):
            v = self.emit(x.dt, x.dims, f"{op}({x.name})", False, 1)
        elif op == "exp":  # exp of a value in [-1, 1]
            t = self.emit(x.dt, x.dims, f"tanh({x.name})", False, 1)
            v = self.emit(x.dt, x.dims, f"exponential({t.name})", False, 3)
        elif op in ("sqrt", "log"):  # of |x| + 1
            a = self.emit(x.dt, x.dims, f"abs({x.name})", x.exact, x.bound)
            one = self.bcast(self.const(x.dt, 1), x.dims, "")
            p = self.emit(x.dt, x.dims, f"add({a.name}, {one.name})", x.exact, x.bound + 1)
            exact = x.exact and op == "sqrt"
            v = self.emit(x.dt, x.dims, f"{op}({p.name})", exact, max(1.0, p.bound ** 0.5 + 1))
        else:  # atan2 / divide / remainder by |y| + 1
            y = self.pick("float", dt=x.dt) or x
            a = self.emit(y.dt, y.dims, f"abs({y.name})", y.exact, y.bound)
            one = self.bcast(self.const(y.dt, 1), y.dims, "")
            d = self.emit(y.dt, y.dims, f"add({a.name}, {one.name})", y.exact, y.bound + 1)
            exact = x.exact and y.exact and op != "atan2"
            bound = 4 if op == "atan2" else x.bound
            v = self.emit(x.dt, x.dims, f"{op}({x.name}, {d.name})", exact, bound)
        self.add(v)

    def binary_f(self) -> None:
        x = self.pick("float")
        if x is None:
            return
        y = self.pick("float", dt=x.dt) or x
        op = self.r.choice(["add", "subtract", "multiply", "maximum", "minimum"])
        if op == "multiply":
            x, y = self.tame(x, self.limit ** 0.5), self.tame(y, self.limit ** 0.5)
            bound = x.bound * y.bound
        elif op in ("add", "subtract"):
            x, y = self.tame(x, self.limit / 2), self.tame(y, self.limit / 2)
            bound = x.bound + y.bound
        else:
            bound = max(x.bound, y.bound)
        self.add(self.emit(x.dt, x.dims, f"{op}({x.name}, {y.name})", x.exact and y.exact,
                           bound))

    def int_op(self) -> None:
        x = self.pick("int")
        if x is None:
            return
        y = self.pick("int", dt=x.dt) or x
        op = self.r.choice(["add", "subtract", "multiply", "and", "or", "xor", "maximum",
                            "minimum", "divide", "remainder", "shift-left",
                            "shift-right-logical", "shift-right-arithmetic", "negate", "not",
                            "abs", "popcnt", "count-leading-zeros"])
        if op == "abs" and x.dt == "u32":
            op = "not"
        if op in ("negate", "not", "abs", "popcnt", "count-leading-zeros"):
            bound = 64.0 if op in ("popcnt", "count-leading-zeros") else float("inf")
            v = self.emit(x.dt, x.dims, f"{op}({x.name})", True, bound)
        else:
            bound = x.bound + y.bound if op in ("add", "subtract") else \
                x.bound * y.bound if op == "multiply" else \
                max(x.bound, y.bound) if op in ("maximum", "minimum", "divide",
                                                "remainder") else float("inf")
            if bound >= 2 ** (INT_BITS[x.dt] - 2):
                bound = float("inf")
            v = self.emit(x.dt, x.dims, f"{op}({x.name}, {y.name})", True, bound)
        self.add(v)

    def compare_select(self) -> None:
        x = self.pick("any", exact=True)
        if x is None or x.dt == "pred":
            p = self.pick("pred")
            if p is None:
                return
        else:
            y = self.pick("any", exact=True, dt=x.dt) or x
            d = self.r.choice(["LT", "LE", "GT", "GE", "EQ", "NE"])
            p = self.add(self.emit("pred", x.dims, f"compare({x.name}, {y.name}), direction={d}",
                                   True, 1))
            if self.r.random() < 0.3:
                q = self.pick("pred") or p
                op = self.r.choice(["and", "or", "xor"])
                p = self.add(self.emit("pred", x.dims, f"{op}({p.name}, {q.name})", True, 1))
            if self.r.random() < 0.2:
                p = self.add(self.emit("pred", x.dims, f"not({p.name})", True, 1))
        a = self.pick("any")
        if a is None:
            return
        b = self.pick("any", dt=a.dt) or a
        self.add(self.emit(a.dt, a.dims, f"select({p.name}, {a.name}, {b.name})",
                           a.exact and b.exact, max(a.bound, b.bound)))

    def convert(self) -> None:
        x = self.pick("any")
        if x is None:
            return
        to = self.r.choice([self.ft, self.it, "pred", "f32", "f64", "s32", "u32", "s8", "f16",
                            "bf16"])
        if to == x.dt:
            return
        to_float = to[0] in "fb"
        if not to_float and not x.exact:
            return
        if to_float:
            lim = LIMITS[to][0] if to in LIMITS and to != "f32" else self.limit
            x = self.tame(x, min(lim, self.limit))
        self.add(self.emit(to, x.dims, f"convert({x.name})", x.exact or not to_float,
                           x.bound if to_float else float("inf")))

    def bcast_vector(self) -> None:
        dt = self.r.choice([self.ft, self.it, "pred"])
        axis = self.r.randint(0, 1)
        n = (self.a, self.b)[axis]
        vec = self.param(dt, (n,))
        b = self.bcast(vec, (self.a, self.b), str(axis))
        x = self.pick("any", dt=dt)
        if x is None or dt == "pred":
            self.add(b)
            return
        op = "add" if dt != "pred" else "and"
        x = self.tame(x, self.limit / 2)
        self.add(self.emit(dt, b.dims, f"{op}({x.name}, {b.name})", x.exact, x.bound + 8))

    def reducer_for(self, v: V) -> tuple[str, str, bool]:
        """(reducer op, init constant text, exact) for a reduction of `v`."""
        if v.dt == "pred":
            op = self.r.choice(["and", "or"])
            return op, "true" if op == "and" else "false", True
        if v.is_float:
            op = self.r.choice(["add", "maximum", "minimum"])
            init = {"add": "0", "maximum": "-inf", "minimum": "inf"}[op]
            return op, init, op != "add"
        op = self.r.choice(["add", "maximum", "minimum", "and", "or", "xor", "multiply"])
        big = (1 << (INT_BITS[v.dt] - 1)) - 1 if v.dt != "u32" else (1 << 32) - 1
        small = -(1 << (INT_BITS[v.dt] - 1)) if v.dt != "u32" else 0
        init = {"add": 0, "maximum": small, "minimum": big, "and": -1 if v.dt != "u32" else big,
                "or": 0, "xor": 0, "multiply": 1}[op]
        return op, str(init), True

    def reduce_of(self, x: V, dims: tuple[int, ...]) -> V:
        op, init, exact = self.reducer_for(x)
        if op == "add" and x.is_float:
            x = self.tame(x, self.limit / max(1, _prod(x.dims[d] for d in dims)))
        c = self.const(x.dt, init)
        kept = tuple(n for d, n in enumerate(x.dims) if d not in dims)
        n = _prod(x.dims[d] for d in dims)
        bound = x.bound * n if op == "add" else x.bound if op in ("maximum", "minimum") \
            else float("inf")
        return self.emit(x.dt, kept, f"reduce({x.name}, {c.name}), dimensions="
                         f"{{{','.join(map(str, dims))}}}, to_apply={self.reducer(op, x.dt)}",
                         exact and x.exact, bound)

    def back(self, r: V, axis_kept: int | None) -> None:
        """A reduction's result broadcast back to [A, B] (or kept as an output)."""
        if self.r.random() < 0.3:
            self.add(r)
            return
        mapping = "" if axis_kept is None else str(axis_kept)
        self.add(self.bcast(r, (self.a, self.b), mapping))

    def reduce(self) -> None:
        x = self.pick("any")
        if x is None:
            return
        how = self.r.choice(["row", "col", "all", "twice"])
        if how == "row":
            self.back(self.reduce_of(x, (1,)), 0)
        elif how == "col":
            self.back(self.reduce_of(x, (0,)), 1)
        elif how == "all":
            self.back(self.reduce_of(x, (0, 1)), None)
        else:  # a reduction of a reduction
            r = self.reduce_of(x, (self.r.randint(0, 1),))
            self.back(self.reduce_of(r, (0,)), None)

    def multi_reduce(self) -> None:
        """Several reductions of one operand (and of values made of it): one multi-output
        fusion under XLA's rules, a nest with several accumulators."""
        x = self.pick("any")
        if x is None:
            return
        dim = self.r.randint(0, 1)
        outs = [self.reduce_of(x, (dim,))]
        for _ in range(self.r.randint(1, 3)):
            if x.is_float:
                t = self.emit(x.dt, x.dims, f"{self.r.choice(['tanh', 'negate', 'abs'])}"
                              f"({x.name})", False, x.bound)
            else:
                ops = ["not"] if x.dt == "pred" else ["negate", "not"] if x.dt == "u32" else \
                    ["negate", "not", "abs"]
                t = self.emit(x.dt, x.dims, f"{self.r.choice(ops)}({x.name})", x.exact,
                              1 if x.dt == "pred" else float("inf"))
            if self.r.random() < 0.5:
                self.add(t)
            outs.append(self.reduce_of(t, (dim,)))
        for r in outs:
            self.back(r, 1 - dim)

    def argmax(self) -> None:
        x = self.pick("any", exact=True)
        if x is None or x.dt == "pred":
            return
        dim = self.r.randint(0, 1)
        io = self.emit("s32", x.dims, f"iota(), iota_dimension={dim}", True, 64)
        direction = self.r.choice(["GT", "LT"])
        if x.is_float:
            init = "-inf" if direction == "GT" else "inf"
        elif x.dt == "u32":
            init = "0" if direction == "GT" else str((1 << 32) - 1)
        else:
            b = INT_BITS[x.dt] - 1
            init = str(-(1 << b)) if direction == "GT" else str((1 << b) - 1)
        c = self.const(x.dt, init)
        z = self.const("s32", 0)
        kept = (x.dims[1 - dim],)
        t = f"({x.dt}[{kept[0]}], s32[{kept[0]}])"
        self.n += 1
        name = f"v{self.n}"
        self.lines.append(f"  {name} = {t} reduce({x.name}, {io.name}, {c.name}, {z.name}), "
                          f"dimensions={{{dim}}}, to_apply={self.argcmp(x.dt, direction)}")
        val = self.emit(x.dt, kept, f"get-tuple-element({name}), index=0", True, x.bound)
        idx = self.emit("s32", kept, f"get-tuple-element({name}), index=1", True, 64)
        self.back(val, 1 - dim)
        self.extra.append(idx)
        if dim == 1 and self.r.random() < 0.5:  # gather the rows of another value at idx
            y = self.pick("any") or x
            self.gather_at(y, idx)

    def transpose_reduce(self) -> None:
        x = self.pick("any")
        if x is None:
            return
        t = self.emit(x.dt, (self.b, self.a), f"transpose({x.name}), dimensions={{1,0}}",
                      x.exact, x.bound)
        if x.is_float:
            t = self.emit(x.dt, t.dims, f"negate({t.name})", t.exact, t.bound)
        if self.r.random() < 0.5:
            dim = self.r.randint(0, 1)
            self.back(self.reduce_of(t, (dim,)), dim)  # [B, A] reduced over dim keeps 1 - dim
        else:
            self.add(self.emit(x.dt, (self.a, self.b), f"transpose({t.name}), dimensions={{1,0}}",
                               t.exact, t.bound))

    def reduce_window(self) -> None:
        x = self.pick("any")
        if x is None or x.dt == "pred":
            return
        op, init, exact = self.reducer_for(x)
        if op in ("and", "or", "xor", "multiply"):
            op, init = "maximum", str(-(1 << 7)) if x.dt == "s8" else "0"
        if op == "add" and x.is_float:
            x = self.tame(x, self.limit / 9)
        size, stride, pad, out = [], [], [], []
        for n in x.dims:
            w = self.r.randint(1, min(3, n + 1))
            s = self.r.randint(1, 2)
            lo, hi = self.r.randint(0, 1), self.r.randint(0, 1)
            if n + lo + hi < w:
                hi += w - (n + lo + hi)
            size.append(w)
            stride.append(s)
            pad.append(f"{lo}_{hi}")
            out.append((n + lo + hi - w) // s + 1)
        c = self.const(x.dt, init)
        win = (f"size={'x'.join(map(str, size))} stride={'x'.join(map(str, stride))} "
               f"pad={'x'.join(pad)}")
        bound = x.bound * 9 if op == "add" else x.bound
        v = self.emit(x.dt, tuple(out), f"reduce-window({x.name}, {c.name}), window={{{win}}}, "
                      f"to_apply={self.reducer(op, x.dt)}", exact and x.exact, bound)
        self.extra.append(v)

    def dynamic(self) -> None:
        x = self.pick("any")
        if x is None:
            return
        i = self.param("s32", ())
        j = self.param("s32", ())
        sa, sb = self.r.randint(1, self.a), self.r.randint(1, self.b)
        if self.r.random() < 0.5:
            d = self.emit(x.dt, (sa, sb), f"dynamic-slice({x.name}, {i.name}, {j.name}), "
                          f"dynamic_slice_sizes={{{sa},{sb}}}", x.exact, x.bound)
            if self.r.random() < 0.5 and d.dt != "pred":
                d = self.reduce_of(d, (1,))
            self.extra.append(d)
            return
        y = self.pick("any", dt=x.dt) or x
        u = self.emit(y.dt, (sa, sb), f"slice({y.name}), slice={{[0:{sa}], [0:{sb}]}}",
                      y.exact, y.bound)
        if u.is_float:
            u = self.emit(u.dt, u.dims, f"negate({u.name})", u.exact, u.bound)
        self.add(self.emit(x.dt, x.dims, f"dynamic-update-slice({x.name}, {u.name}, {i.name}, "
                           f"{j.name})", x.exact and y.exact, max(x.bound, y.bound)))

    def gather_at(self, x: V, idx: V) -> None:
        k = idx.dims[0]
        g = self.emit(x.dt, (k, self.b), f"gather({x.name}, {idx.name}), offset_dims={{1}}, "
                      "collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, "
                      f"slice_sizes={{1,{self.b}}}", x.exact, x.bound)
        if self.r.random() < 0.5 and g.dt != "pred":
            g = self.reduce_of(g, (self.r.randint(0, 1),))
        self.extra.append(g)

    def gather(self) -> None:
        x = self.pick("any")
        if x is None:
            return
        k = self.r.choice([1, 2, 5, 9])
        idx = self.param("s32", (k,))
        if self.r.random() < 0.5:
            self.gather_at(x, idx)
            return
        g = self.emit(x.dt, (self.a, k), f"gather({x.name}, {idx.name}), offset_dims={{0}}, "
                      "collapsed_slice_dims={1}, start_index_map={1}, index_vector_dim=1, "
                      f"slice_sizes={{{self.a},1}}", x.exact, x.bound)
        self.extra.append(g)

    def scatter(self) -> None:
        x = self.pick("any")
        if x is None or x.dt == "pred":
            return
        k = self.r.choice([1, 3, 6])
        idx = self.param("s32", (k,))
        upd = self.param(x.dt, (k, self.b))
        op = self.r.choice(["add", "maximum"])
        if op == "add":
            x = self.tame(x, self.limit / 16)
        exact = x.exact and (op == "maximum" or not x.is_float)
        bound = x.bound + 8 * k if op == "add" else max(x.bound, 8)
        if not x.is_float and op == "add":
            bound = float("inf")
        self.add(self.emit(x.dt, x.dims, f"scatter({x.name}, {idx.name}, {upd.name}), "
                           "update_window_dims={1}, inserted_window_dims={0}, "
                           "scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
                           f"to_apply={self.reducer(op, x.dt)}", exact, bound))

    def split_reduce(self) -> None:
        """A reduction over a concatenate or a pad: `split` cuts its loop where the pieces
        meet, and each piece is vectorized with partial accumulators of its own."""
        x = self.pick("any")
        if x is None:
            return
        y = self.pick("any", dt=x.dt) or x
        extra = self.r.choice([1, 3, 8, 13, 21])
        if self.r.random() < 0.5:
            z = self.param(x.dt, (self.a, extra))
            c = self.emit(x.dt, (self.a, self.b + extra), f"concatenate({y.name}, {z.name}), "
                          "dimensions={1}", y.exact, max(y.bound, 8))
        else:
            pv = self.const(x.dt, 1 if x.dt != "pred" else "true")
            c = self.emit(x.dt, (self.a, self.b + extra), f"pad({y.name}, {pv.name}), "
                          f"padding=0_0x{extra // 2}_{extra - extra // 2}", y.exact,
                          max(y.bound, 1))
        outs = [self.reduce_of(c, (1,))]
        if self.r.random() < 0.6 and x.dt != "pred":
            op = "negate" if x.is_float or x.dt != "u32" else "not"
            t = self.emit(x.dt, c.dims, f"{op}({c.name})", c.exact, c.bound)
            outs.append(self.reduce_of(t, (1,)))
        for r in outs:
            self.back(r, 0)

    def reshape_ops(self) -> None:
        x = self.pick("any")
        if x is None:
            return
        how = self.r.choice(["reverse", "iota", "slicepad", "flat"])
        if how == "reverse":
            dims = self.r.choice(["0", "1", "0,1"])
            v = self.emit(x.dt, x.dims, f"reverse({x.name}), dimensions={{{dims}}}", x.exact,
                          x.bound)
        elif how == "iota":
            dt = self.r.choice([self.ft, self.it])
            v = self.emit(dt, x.dims, f"iota(), iota_dimension={self.r.randint(0, 1)}", True,
                          max(self.a, self.b))
        elif how == "slicepad" and self.b > 1:
            s = self.emit(x.dt, (self.a, self.b - 1), f"slice({x.name}), "
                          f"slice={{[0:{self.a}], [1:{self.b}]}}", x.exact, x.bound)
            pv = self.const(x.dt, 0 if x.dt != "pred" else "false")
            v = self.emit(x.dt, x.dims, f"pad({s.name}, {pv.name}), padding=0_0x0_1", x.exact,
                          x.bound)
        else:
            f = self.emit(x.dt, (self.a * self.b,), f"reshape({x.name})", x.exact, x.bound)
            if f.dt != "pred":
                op = "negate" if f.dt != "u32" else "not"
                f = self.emit(f.dt, f.dims, f"{op}({f.name})", f.exact, f.bound)
            v = self.emit(x.dt, x.dims, f"reshape({f.name})", f.exact, f.bound)
        self.add(v)


def _prod(xs: object) -> int:
    out = 1
    for x in xs:  # type: ignore[attr-defined]
        out *= int(x)
    return out


def campaign(first: int, count: int, pipeline: str = "xla", target: str | None = None,
             max_steps: int = 12) -> int:
    """Seeds `first` .. `first + count - 1` in one C file; prints each failure (seed, kernel,
    what) and returns how many modules failed."""
    from cpu_lower_harness import Harness
    from hlofuse.backends.cpu import build

    h = Harness(target)
    modules = []
    bad = 0
    for seed in range(first, first + count):
        text, tol = random_module(seed, (4, max_steps))
        try:
            modules.append((seed, tol, h.add_module(text, pipeline)))
        except Exception as exc:  # (a campaign reports every kind of failure)
            bad += 1
            print(f"seed {seed}: {type(exc).__name__}: {exc}")
    try:
        lib = h.build()
    except build.CCompileError as exc:
        seeds = [s for s, _t, ids in modules
                 if any(h.entries[i].kernel.name in exc.functions for i in ids)]
        print(f"seeds {seeds}: {exc}")
        return bad + max(1, len(seeds))
    for seed, tol, ids in modules:
        for kid in ids:
            try:
                h.check(lib, kid, seed, rtol=tol[0], atol=tol[1])
            except AssertionError as exc:
                bad += 1
                print(f"seed {seed}: kernel {h.entries[kid].kernel.name}: {str(exc)[:400]}")
                break
    return bad


if __name__ == "__main__":
    import sys

    args = sys.argv[1:]
    n = campaign(int(args[0]), int(args[1]), *(args[2:4]),
                 *([int(args[4])] if len(args) > 4 else []))
    print(f"{n} failed")
    sys.exit(1 if n else 0)
