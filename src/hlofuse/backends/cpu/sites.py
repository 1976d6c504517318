"""Long straight runs of kernel calls printed as a table the driver loops over.

    HF_CALL(3, dot_cd46b221(hf_b4, args[15], hf_b5));        one C call per site: the C
    HF_CALL(4, fused_add_751de73c(hf_b5, args[14], hf_b6));  compiler expands, schedules and
    ...                                                       allocates registers for each

    hf_sites_run(hf_sites + 0, 636, args, results, hf_arena, hf_at);
        static const hf_site hf_sites[] = {{0, 3, 0, 3}, {1, 4, 3, 3}, ...};  (function, k, ...)
        static const hf_place hf_places[] = {{0, 0, 2048}, {1, 15, 0}, ...};

Why: a training step's driver is one call per kernel site (gpt-8: 636 sites), and the C
compiler spends about 0.2 ms on each (gpt-8's driver unit: 0.15 s of compiler CPU, of which
0.11 s is the calls), at the end of a cold compile. A table of constant data compiles in a
fraction of that. At run time a site costs a few more loads and a jump through a switch,
nanoseconds beside a kernel's microseconds.

Conditions enforced:
- Only runs of at least TABLE_RUN consecutive calls (comments between them allowed) are
  tabled, and only when every operand is at a fixed place: an argument, a result, a constant,
  an arena buffer, or a fixed byte offset into one of those. A while loop's carried pointers
  change at run time, so calls reading them stay direct calls. Short runs (small programs,
  loop bodies) stay direct calls too, so their drivers do not change.
- A site runs exactly as `HF_CALL(k, NAME(p0, ..., pn))` would: `*hf_at = k` first (the kernel
  `hf_failure` names), timed under HF_PROFILE, the same pointers in the same order.
- Each kernel function called from a table has one case in `hf_sites_run`'s switch, which
  calls it with `p[0..n)`: the C conversion from `void *` to the kernel's parameter types is
  implicit, so no function pointer is ever cast. (Rows name functions by number: a function
  address in each row, or a thunk function per kernel, costs the compiler about as much as
  the calls did: GCC spends about half a millisecond on even a one-line function.)
- Nothing from the input is printed: table rows hold integers the backend computed (checked
  with the rest of the driver by `ctext.check_integers`), and each row's comment goes
  through `ctext.comment`.
"""

from __future__ import annotations

from hlofuse.backends.cpu.contract import Kernel
from hlofuse.backends.cpu.ctext import comment
from hlofuse.backends.driver_ir.schedule import Arg, Buf, Call, Const, Loc, Note, Result, Stmt, View

# Shorter runs of calls are printed as calls (what a table saves grows with the run; a short
# run is a small program or a loop body, compiled fast either way).
TABLE_RUN = 16

# Place kinds: what a table operand's byte offset is counted from.
_ARENA, _ARG, _RESULT, _CONST = 0, 1, 2, 3

_TYPES = """typedef struct { int32_t fn, k, first, n; } hf_site;
typedef struct { int32_t kind, index; int64_t offset; } hf_place;"""

_RUNNER = """
/* Function `fn` of the tables, called with p[0..its arity). */
static void hf_site_call(int32_t fn, void *const *p) {{
  switch (fn) {{
{cases}
  }}
}}

/* The sites s[0..n) in order, each as HF_CALL(k, its function(its places as pointers)). */
static void hf_sites_run(const hf_site *s, int32_t n, void *const *args,
                         void *const *results, char *hf_arena, volatile int64_t *hf_at) {{
  void *p[{width}];
  for (int32_t i = 0; i < n; i++, s++) {{
    const hf_place *q = hf_places + s->first;
    for (int32_t j = 0; j < s->n; j++, q++) {{
      char *base = q->kind == {arena} ? hf_arena
                 : q->kind == {arg} ? (char *)args[q->index]
                 : q->kind == {result} ? (char *)results[q->index]
                 : (char *)hf_const_ptrs[q->index];
      p[j] = base + q->offset;
    }}
    HF_CALL(s->k, hf_site_call(s->fn, p));
  }}
}}
"""


def place(loc: Loc) -> tuple[int, int, int] | None:
    """(kind, index, byte offset) of a fixed operand place; None for one that moves at run
    time (a while loop's carried pointers)."""
    if isinstance(loc, Buf):
        return (_ARENA, 0, loc.offset)
    if isinstance(loc, Arg):
        return (_ARG, loc.index, 0)
    if isinstance(loc, Result):
        return (_RESULT, loc.index, 0)
    if isinstance(loc, Const):
        return (_CONST, loc.index, 0)
    if isinstance(loc, View):
        base = place(loc.base)
        return None if base is None else (base[0], base[1], base[2] + loc.nbytes)
    return None


def runs(body: list[Stmt]) -> list[tuple[int, int]]:
    """[start, stop) ranges of `body` to table: at least TABLE_RUN calls with fixed places,
    possibly with comments between them, starting and ending with a call."""
    out: list[tuple[int, int]] = []
    start, calls, last = -1, 0, -1
    for i, s in enumerate([*body, None]):
        if isinstance(s, Call) and all(place(x) is not None for x in (*s.ins, *s.outs)):
            if start < 0:
                start = i
            calls, last = calls + 1, i
        elif isinstance(s, Note) and start >= 0:
            continue
        else:
            if calls >= TABLE_RUN:
                out.append((start, last + 1))
            start, calls = -1, 0
    return out


class Tables:
    """The sites of every tabled run of one driver, and the C that runs them."""

    def __init__(self, kernels: list[Kernel]) -> None:
        self._kernels = kernels
        self._rows: list[str] = []
        self._places: list[str] = []
        self._functions: dict[str, tuple[int, int]] = {}  # name -> (number, arity)

    def run(self, body: list[Stmt]) -> str:
        """The C statement running the calls of `body` (a range `runs` chose) from the table."""
        first = len(self._rows)
        for s in body:
            if not isinstance(s, Call):
                continue
            name = self._kernels[s.kernel].name
            locs = (*s.ins, *s.outs)
            number, arity = self._functions.setdefault(name, (len(self._functions), len(locs)))
            assert arity == len(locs), f"{name} called with {len(locs)} operands, not {arity}"
            self._rows.append(f"  {{{number}, {s.kernel}, {len(self._places)}, {arity}}},  "
                              + comment(s.note))
            for loc in locs:
                fixed = place(loc)
                assert fixed is not None, "a call `runs` did not choose"
                kind, index, offset = fixed
                self._places.append(f"  {{{kind}, {index}, {offset}}},")
        n = len(self._rows) - first
        return f"hf_sites_run(hf_sites + {first}, {n}, args, results, hf_arena, hf_at);"

    def source(self, consts: int) -> str:
        """The tables and `hf_sites_run` (empty when nothing was tabled); `consts`: how many
        `hf_constN` arrays the driver defines."""
        if not self._rows:
            return ""
        cases = "\n".join(f"    case {number}: {name}("
                          + ", ".join(f"p[{j}]" for j in range(arity)) + "); break;"
                          for name, (number, arity) in self._functions.items())
        width = max(arity for _, arity in self._functions.values())
        const_ptrs = ", ".join(f"(const void *)hf_const{i}" for i in range(consts)) or "0"
        return "\n".join([
            _TYPES,
            f"static const void *const hf_const_ptrs[] = {{{const_ptrs}}};",
            "static const hf_place hf_places[] = {", *self._places, "};",
            _RUNNER.format(width=max(1, width), arena=_ARENA, arg=_ARG, result=_RESULT,
                           cases=cases),
            "static const hf_site hf_sites[] = {", *self._rows, "};",
        ])
