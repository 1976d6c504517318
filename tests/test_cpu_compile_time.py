"""What keeps the cpu backend's compile time down (issue 13), each checked against the
interpreter: kernels that print to the same C (up to their own names and comments) are emitted
once and called from every site; a concatenate of many operands bisects instead of nesting one
branch per operand.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import hlofuse
from hlofuse.backends import interpreter
from hlofuse.backends.cpu import build, driver
from hlofuse.backends.cpu import units as cpu_units
from hlofuse.ir.instruction import Instruction
from hlofuse.text import parse

pytestmark = pytest.mark.usefixtures("private_cpu_cache")  # (conftest.py)


# Layers of the same block (tanh(x * w) * k + x, minus its row means), the last with k = 2 (its
# kernel must stay a function of its own).
def _layers(n: int) -> str:
    lines = ["HloModule layers", "", "add_f32 {", "  a = f32[] parameter(0)",
             "  b = f32[] parameter(1)", "  ROOT s = f32[] add(a, b)", "}", "",
             "ENTRY e {", "  x0 = f32[16,64] parameter(0)", "  w = f32[16,64] parameter(1)",
             "  zero = f32[] constant(0)", "  n = f32[] constant(0.015625)",
             "  inv = f32[16,64] broadcast(n), dimensions={}"]
    for i in range(n):
        c = "2" if i == n - 1 else "1"
        lines += [
            f"  m{i} = f32[16,64] multiply(x{i}, w)",
            f"  t{i} = f32[16,64] tanh(m{i})",
            f"  k{i} = f32[] constant({c})",
            f"  kb{i} = f32[16,64] broadcast(k{i}), dimensions={{}}",
            f"  s{i} = f32[16,64] multiply(t{i}, kb{i})",
            f"  y{i} = f32[16,64] add(s{i}, x{i})",
            f"  r{i} = f32[16] reduce(y{i}, zero), dimensions={{1}}, to_apply=add_f32",
            f"  rb{i} = f32[16,64] broadcast(r{i}), dimensions={{0}}",
            f"  q{i} = f32[16,64] multiply(rb{i}, inv)",
            f"  x{i + 1} = f32[16,64] subtract(y{i}, q{i})",
        ]
    lines += [f"  ROOT out = f32[16,64] copy(x{n})", "}", ""]
    return "\n".join(lines)


def test_identical_kernels_are_printed_once_and_called_from_every_site() -> None:
    text = _layers(8)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((16, 64)).astype(np.float32) for _ in range(2)]
    exe = hlofuse.compile(text)
    program = exe._runner.program
    names = [k.name for k in program.kernels]
    printed = [k for k in program.kernels if k.source]
    assert len(printed) < len(program.kernels)  # the four equal layers share functions
    for k in program.kernels:  # every site calls a function that is printed exactly once
        assert sum(p.name == k.name for p in printed) == 1
        assert program.source.count(f"HF_KERNEL void {k.name}(") == 1
    assert len(set(names)) == len(printed)
    # eight layers of tanh (a few ulp each) and float sums in another order
    np.testing.assert_allclose(exe(*args)[0], interpreter.run(parse(text), *args)[0],
                               rtol=1e-4, atol=1e-4)
    prof = exe.profile(*args)  # one row per call site, each called once
    assert len(prof.rows) == len(program.kernels)
    assert all(r.calls == 1 for r in prof.rows)


def test_equal_kernels_are_lowered_once() -> None:
    """The structural key finds the repeated layers before lowering: the lowering runs once per
    distinct kernel; the last layer (another constant) and an add of one operand twice (one
    buffer read twice) are kernels of their own."""
    from hlofuse.backends.cpu.kernels import Lowered, lower
    from hlofuse.backends.driver_ir.kernel_key import structural_key
    from hlofuse.passes.pipelines import run_pipeline

    module = parse(_layers(8))
    run_pipeline(module, "xla")
    lowered: list[str] = []

    def counting(instr: Instruction) -> Lowered:
        lowered.append(instr.name)
        return lower(instr)

    program = driver.generate(module, kernel_lowering=counting)
    assert len(lowered) == len({k.name for k in program.kernels}) < len(program.kernels)
    twice = parse("""HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  a = f32[4] add(x, y)
  b = f32[4] add(x, x)
  ROOT r = (f32[4], f32[4]) tuple(a, b)
}
""")
    a, b = (next(i for i in twice.entry.instructions if i.name == n) for n in ("a", "b"))
    assert structural_key(a) != structural_key(b)


_SAME_IR = """HloModule m

double_a {
  p = f32[8,4] parameter(0)
  k = f32[] constant(2)
  bk = f32[8,4] broadcast(k), dimensions={}
  ROOT m = f32[8,4] multiply(p, bk)
}

double_b {
  q = f32[32] parameter(0)
  two = f32[] constant(2)
  bt = f32[32] broadcast(two), dimensions={}
  ROOT n = f32[32] multiply(q, bt)
}

triple {
  q = f32[32] parameter(0)
  three = f32[] constant(3)
  b3 = f32[32] broadcast(three), dimensions={}
  ROOT n = f32[32] multiply(q, b3)
}

ENTRY e {
  x = f32[8,4] parameter(0)
  y = f32[32] parameter(1)
  a = f32[8,4] fusion(x), kind=kLoop, calls=double_a
  b = f32[32] fusion(y), kind=kLoop, calls=double_b
  c = f32[32] fusion(y), kind=kLoop, calls=triple
  ROOT t = (f32[8,4], f32[32], f32[32]) tuple(a, b, c)
}
"""


def test_kernel_identity_is_a_digest_of_its_ir() -> None:
    """Two instructions whose optimised kernel IR is the same (another HLO shape of the same
    elements, other names) have one identity, so the program prints one function for both and
    names it from the digest; another constant is another kernel."""
    from hlofuse.backends.cpu.kernels import lower

    module = parse(_SAME_IR)
    ops = {i.name: i for i in module.entry.instructions}
    a, b, c = (lower(ops[n]) for n in ("a", "b", "c"))  # (for the host, as generate)
    assert a.digest == b.digest != c.digest
    assert a.inputs != b.inputs  # (f32[8,4] and f32[32]: the IR is flat)
    assert a.emit("f").source == b.emit("f").source
    program = driver.generate(module)
    calls = {k.instruction: k.name for k in program.kernels}
    assert calls["a"] == calls["b"] != calls["c"]
    assert calls["a"] == f"fused_multiply_{a.digest[:8]}"
    assert program.source.count(f"void {calls['a']}(") == 1


@pytest.mark.parametrize("pieces", [3, 17, 40])
def test_concatenate_of_many_operands_matches_the_interpreter(pieces: int) -> None:
    params = "\n".join(f"  p{i} = f32[{1 + i % 3},8] parameter({i})" for i in range(pieces))
    total = sum(1 + i % 3 for i in range(pieces))
    ops = ", ".join(f"p{i}" for i in range(pieces))
    text = (f"HloModule cat\n\nENTRY e {{\n{params}\n  c = f32[{total},8] concatenate({ops}), "
            f"dimensions={{0}}\n  ROOT t = f32[{total},8] tanh(c)\n}}\n")
    rng = np.random.default_rng(pieces)
    args = [rng.standard_normal((1 + i % 3, 8)).astype(np.float32) for i in range(pieces)]
    exe = hlofuse.compile(text)
    np.testing.assert_allclose(exe(*args)[0], interpreter.run(parse(text), *args)[0],
                               rtol=2e-6, atol=2e-6)
    if pieces > 16:  # bisection: no chain of `pieces` nested branches
        depth = max(len(line) - len(line.lstrip()) for line in exe.source.splitlines())
        assert depth < 4 * 40


# ----- a program built as several translation units ------------------------------------------

_SPLIT = """HloModule split

ENTRY e {
  a = f32[64,96] parameter(0)
  b = f32[96,48] parameter(1)
  x = f32[256,1024] parameter(2)
  d = f32[64,48] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[64,48] tanh(d)
  e = f32[256,1024] exponential(x)
  s = f32[256,1024] multiply(e, x)
  ROOT r = (f32[64,48], f32[256,1024]) tuple(t, s)
}
"""


def _split_args() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.standard_normal(s).astype(np.float32) for s in ((64, 96), (96, 48), (256, 1024))]


def _compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The compiles and links `load_units` runs from now on (what each was)."""
    seen: list[str] = []
    real = build._run_compiler

    def spy(cmd: list[str], what: str, *rest: object) -> None:
        if not what.startswith("hlofuse_runtime"):  # (the pool, once per process)
            seen.append(what)
        real(cmd, what, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(build, "_run_compiler", spy)
    return seen


def _compile_flags(monkeypatch: pytest.MonkeyPatch, prefixes: tuple[str, ...]
                   ) -> list[tuple[str, list[str]]]:
    """(what, its flags starting with `prefixes`) for each compile and link from now on."""
    opts: list[tuple[str, list[str]]] = []
    real = build._run_compiler

    def spy(cmd: list[str], what: str, *rest: object) -> None:
        opts.append((what, [f for f in cmd if f.startswith(prefixes)]))
        real(cmd, what, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(build, "_run_compiler", spy)
    return opts


def _split_unit_flags(exe: hlofuse.Executable, name: str, opts: list[tuple[str, list[str]]]
                     ) -> tuple[list[list[str]], list[list[str]]]:
    """The flags the driver's unit of program `name` compiled with, and those of each of its
    kernel units (all compiled early: as many as `units` cuts)."""
    units = cpu_units.units(exe._runner.program)
    assert units is not None
    driver_unit = f"{name} (unit {len(units) + 1} of {len(units) + 1})"
    kernel_units = [v for k, v in opts if k == f"{name} (unit, early)"]
    assert len(kernel_units) == len(units) - 1
    return [v for k, v in opts if k == driver_unit], kernel_units


def _check_split(exe: hlofuse.Executable, args: list[np.ndarray]) -> None:
    want = interpreter.run(parse(_SPLIT), *args)
    for got, w in zip(exe(*args), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5)


def test_kernels_are_reused_by_another_program_with_other_names_and_sources(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel's C names nothing from its instruction (name, op_name, source line: those are
    comments at its call sites), so another program computing the same kernels, with other
    instruction names and metadata, finds every kernel unit's object in the cache and
    compiles only its driver's unit."""
    monkeypatch.setattr(cpu_units, "UNIT_BYTES", 1)  # every kernel a unit of its own
    first = hlofuse.compile(_SPLIT.replace("HloModule split", "HloModule split_names_a"))
    renamed = (_SPLIT.replace("HloModule split", "HloModule split_names_b")
               .replace(" d = ", " dot.7 = ").replace("(d)", "(dot.7)")
               .replace(" e = ", " exp.3 = ").replace("(e, x)", "(exp.3, x)")
               .replace("tanh(dot.7)", 'tanh(dot.7), metadata={op_name="jit(f)/tanh" '
                                       'source_file="model.py" source_line=12}'))
    assert renamed.count("dot.7") == 2 and renamed.count("exp.3") == 2
    seen = _compiles(monkeypatch)
    second = hlofuse.compile(renamed)
    units = cpu_units.units(second._runner.program)
    assert units is not None and len(units) >= 3  # kernels of their own, and the driver
    # the driver's unit alone (the last: after the prebuilt GEMM's and the kernels' units)
    assert len(seen) == 2 and seen[1] == "split_names_b (link)"
    assert re.fullmatch(r"split_names_b \(unit (\d+) of \1\)", seen[0]), seen
    assert "model.py:12" in second.source and "model.py" not in "".join(units[:-1])
    kernels = [k.source for k in first._runner.program.kernels if k.source]
    assert kernels == [k.source for k in second._runner.program.kernels if k.source]
    _check_split(second, _split_args())


def test_a_kernel_is_named_after_what_it_computes_wherever_it_is() -> None:
    """The same kernel, lowered first in one program and after others in another, gets the
    same name and prints the same C (`schedule.content_named`): no program-order counter."""
    alone = """HloModule a

ENTRY e {
  x = f32[300] parameter(0)
  ROOT t = f32[300] tanh(x)
}
"""
    among = """HloModule b

ENTRY e {
  x = f32[300] parameter(0)
  y = f32[300] parameter(1)
  s = f32[300] sine(y)
  u = f32[300] tanh(s)
  t = f32[300] tanh(x)
  ROOT r = (f32[300], f32[300]) tuple(u, t)
}
"""
    def kernels(text: str) -> dict[str, str]:
        program = driver.generate(parse(text))
        return {k.name: k.source for k in program.kernels if k.source}

    first, second = kernels(alone), kernels(among)
    ((name, source),) = first.items()
    assert re.fullmatch(r"tanh_op_[0-9a-f]{8}", name), name  # (tanh is libm's: _op)
    assert second.get(name) == source  # the same function, named the same
    assert len(second) == 2 and all(re.fullmatch(r"[a-z_]+_[0-9a-f]{8}", n) for n in second)


def test_the_same_module_prints_the_same_c_every_time() -> None:
    """Code generation does not depend on where objects happen to live in memory: the
    vectorizer's reductions and privatised locals were sets of buffers (hashed by identity),
    so a kernel with several reductions numbered its partial accumulators differently from one
    run to the next (6 texts in 12 runs), and its compiled unit was not found again."""
    text = """HloModule two_sums

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  x = f32[64,256] parameter(0)
  y = f32[64,256] parameter(1)
  z = f32[] constant(0)
  xy = f32[64,256] multiply(x, y)
  sx = f32[64] reduce(x, z), dimensions={1}, to_apply=add
  sxy = f32[64] reduce(xy, z), dimensions={1}, to_apply=add
  syy = f32[64] reduce(y, z), dimensions={1}, to_apply=add
  ROOT t = (f32[64], f32[64], f32[64]) tuple(sx, sxy, syy)
}
"""
    from hlofuse.passes.pipelines import run_pipeline

    texts, junk = set(), []
    for i in range(12):
        junk.append([object() for _ in range(997 * i)])  # other addresses each time
        module = parse(text)
        run_pipeline(module, "xla")
        texts.add(driver.generate(module).source)
    assert len(texts) == 1


def test_units_are_cut_by_content_so_shared_runs_of_kernels_make_the_same_units() -> None:
    """Content-defined cuts (`units._Groups`): inserting kernels early in the sequence changes
    the units around the insertion only; a program-position rule would shift every later
    boundary."""
    def source(i: int) -> str:
        return f"/* kernel {i} */\nHF_KERNEL void k{i}(void)\n{{\n" + "    ;\n" * (1000 + 37 * i)

    def groups(order: list[int]) -> list[tuple[str, ...]]:
        g = cpu_units._Groups(cpu_units.UNIT_BYTES)
        for i in order:
            g.add(source(i))
        return [tuple(x) for x in g.groups]

    base = list(range(120))
    inserted = [*base[:10], 1000, 1001, 1002, *base[10:]]
    a, b = groups(base), groups(inserted)
    assert len(a) >= 6
    shared = set(a) & set(b)
    assert len(shared) >= len(a) - 2  # the unit with the insertion, and perhaps its neighbour
    assert all(sum(map(len, u)) >= cpu_units.UNIT_BYTES // 2 for u in a[:-1])


def test_split_program_matches_the_interpreter_and_profiles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_units, "UNIT_BYTES", 1)  # every kernel a unit of its own
    seen = _compiles(monkeypatch)
    started: list[str] = []
    real_early = build.compile_early

    def spy_early(unit: str, name: str, flags: tuple[str, ...]) -> None:
        started.append(name)
        real_early(unit, name, flags)

    monkeypatch.setattr(build, "compile_early", spy_early)
    exe = hlofuse.compile(_SPLIT, threads=2)
    program = exe._runner.program
    units = cpu_units.units(program)
    assert units is not None
    assert len(units) == len([k for k in program.kernels if k.source]) + 1
    n = len(units) + 1  # and the prebuilt f32 GEMM's unit, first
    # every kernel unit compiled while the program was generated (each once: the stream cut
    # the same texts as `units`), the GEMM's before the pipeline ran (`cpu.warm`), the
    # driver's by the link
    # (early compiles run on a pool of `jobs()` threads: the order in which they reach the
    # compiler is not the order they were started in, so the start order is spied on apart)
    early = [s for s in seen if s == "split (unit, early)"]
    assert len(early) == len(units) - 1 > 1
    assert seen.count("hlofuse_gemm (unit, early)") == 1
    assert started[0] == "hlofuse_gemm" and set(started[1:]) == {"split"}
    assert sorted(s for s in seen[:-1] if s not in early and s != "hlofuse_gemm (unit, early)"
                  ) == [f"split (unit {n} of {n})"]
    assert seen[-1] == "split (link)"
    assert "hf_parallel_ptr(" in program.source  # a parallel loop runs in a kernel unit
    _check_split(exe, _split_args())
    del seen[:]
    prof = exe.profile(*_split_args())  # -DHF_PROFILE changes the driver's unit alone
    assert [s for s in seen if "link" not in s] == [f"split (unit {n} of {n})"]
    assert len(prof.rows) == len(program.kernels) and all(r.calls == 1 for r in prof.rows)


_GUARDED = """HloModule guarded

ENTRY e {
  x = f32[6,5] parameter(0)
  z = f32[] constant(-7)
  p = f32[12,8] pad(x, z), padding=2_-1_1x-1_4
  n = f32[12,8] negate(p)
  y = f32[256,1024] parameter(1)
  e = f32[256,1024] exponential(y)
  ROOT r = (f32[12,8], f32[256,1024]) tuple(n, e)
}
"""


def test_a_kernel_with_attributes_still_splits_the_program(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel compiled without if-conversion (`HF_KERNEL HF_NO_IFCONV void ...`, a guarded
    load) is a kernel cprint printed like any other: its program is still cut into units and
    compiled early (the prototype search once wanted `HF_KERNEL void` exactly, so one such
    kernel made every program that had it a single file)."""
    monkeypatch.setattr(cpu_units, "UNIT_BYTES", 1)
    seen = _compiles(monkeypatch)
    exe = hlofuse.compile(_GUARDED, pipeline="xla")
    program = exe._runner.program
    printed = [k for k in program.kernels if k.source]
    assert any("HF_KERNEL HF_NO_IFCONV void" in k.source for k in printed)
    units = cpu_units.units(program)
    assert units is not None and len(units) == len(printed) + 1
    assert all(f" void {k.name}(" in units[-1] for k in printed)  # the driver's prototypes
    assert len([s for s in seen if s == "guarded (unit, early)"]) == len(printed)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((6, 5)).astype(np.float32),
            rng.standard_normal((256, 1024)).astype(np.float32)]
    want = interpreter.run(parse(_GUARDED), *args)
    for g, w in zip(exe(*args), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_damaged_unit_object_is_compiled_again(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(cpu_units, "UNIT_BYTES", 1)
    exe = hlofuse.compile(_SPLIT)
    units = cpu_units.units(exe._runner.program)
    assert units is not None
    cache = tmp_path / "cache"
    for lib in cache.glob("*/*.so"):
        lib.unlink()  # the library must be linked again, from the objects
    victim = build.object_key(units[0], cpu_units.kernel_flags())  # a kernel unit's flags
    obj = cache / victim[:2] / f"{victim}.o"
    obj.write_bytes(b"\x7fELF not an object")
    build._LOADED.clear()
    (cache / "programs").rename(tmp_path / "programs-moved")  # no warm compile either
    seen = _compiles(monkeypatch)
    exe = hlofuse.compile(_SPLIT)
    assert seen == [f"split (unit 2 of {len(units) + 1})", "split (link)"]  # after the GEMM
    _check_split(exe, _split_args())
    digest = build.cachefs.read_entry(obj.with_name(obj.name + ".digest"), "object-digest")
    assert digest is not None and build.cachefs.digest(obj.read_bytes()) == digest.decode()


def _dot_program(m: int, dtype: str) -> str:
    return f"""HloModule dots{m}{dtype}
ENTRY e {{
  a = {dtype}[{m},32] parameter(0)
  b = {dtype}[32,16] parameter(1)
  ROOT d = {dtype}[{m},16] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""


def test_the_gemm_is_compiled_once_for_every_program(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GEMM is a prebuilt unit (library/prebuilt.py): the first program with an f32 dot
    compiles it (before its pipeline runs: `cpu.warm`), a later one with another f32 dot links
    it from the cache, one with an f64 dot compiles the f64 GEMM alone; every one computes the
    dot."""
    seen = _compiles(monkeypatch)
    rng = np.random.default_rng(5)
    for m, dtype, gemm in ((8, "f32", True), (24, "f32", False), (8, "f64", True)):
        del seen[:]
        text = _dot_program(m, dtype)
        exe = hlofuse.compile(text)
        # (the early GEMM compile runs on a pool thread: it may finish after the kernels')
        assert sorted(s for s in seen if "link" not in s) == sorted(
            (["hlofuse_gemm (unit, early)"] if gemm else []) + [f"dots{m}{dtype} (unit 2 of 2)"])
        np_t = np.float32 if dtype == "f32" else np.float64
        a, b = (rng.standard_normal(s).astype(np_t) for s in ((m, 32), (32, 16)))
        np.testing.assert_allclose(exe(a, b)[0], a @ b, rtol=1e-5, atol=1e-5)
        assert "hflib_gemm_block" not in exe.source  # the kernel only declares the GEMM


def test_units_cut_only_programs_made_by_the_driver() -> None:
    program = driver.generate(parse(_SPLIT))
    assert cpu_units.units(program) is None  # small: one file
    assert cpu_units.units(program, unit_bytes=1) is not None
    hand = type(program)(source=program.source, inputs=program.inputs,
                         outputs=program.outputs, kernels=program.kernels)
    assert cpu_units.units(hand, unit_bytes=1) is None  # no split offsets: never cut


# ----- the warm path ----------------------------------------------------------------------------


def test_warm_compile_parses_nothing_until_the_module_is_asked_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from hlofuse.errors import InputError
    from hlofuse.text import parser

    text = _layers(3)
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((16, 64)).astype(np.float32) for _ in range(2)]
    cold = hlofuse.compile(text)
    want = cold(*args)
    build._LOADED.clear()  # as in a new process: the library comes from the disk cache
    parses: list[int] = []
    real = parser.parse

    def counting(*a: object, **k: object) -> object:
        parses.append(1)
        return real(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(parser, "parse", counting)
    monkeypatch.setattr("hlofuse.text.parse", counting)
    warm = hlofuse.compile(text)
    for got, w in zip(warm(*args), want, strict=True):
        np.testing.assert_array_equal(got, w)
    assert parses == []  # neither the text nor the optimised module
    with pytest.raises(InputError, match="x0"):  # the message needs the module: parsed now
        warm(args[0])
    assert len(parses) == 1
    assert warm.module.entry.root.opcode is cold.module.entry.root.opcode
    assert hlofuse.print_module(warm.module) == hlofuse.print_module(cold.module)
    assert len(parses) == 1


def test_a_warm_compile_in_a_new_process_imports_no_parser_and_no_code_generator(
        tmp_path) -> None:
    """What a new process loads to run a cached program: no HLO parser, no pass, no C
    generator (`library` imports its emitters when one is first used)."""
    import subprocess
    import sys

    text = _layers(2)
    hlofuse.compile(text)  # (into this test's cache, HLOFUSE_CACHE_DIR)
    path = tmp_path / "m.hlo"
    path.write_text(text)
    script = (
        "import sys, hlofuse\n"
        f"exe = hlofuse.compile(open({str(path)!r}).read())\n"
        "print(sorted(m for m in sys.modules if m.startswith(("
        "'hlofuse.text.parser', 'hlofuse.passes.fusion', 'hlofuse.backends.cpu.cprint', "
        "'hlofuse.backends.cpu.library.conv', 'hlofuse.backends.cpu.library.sort', "
        "'hlofuse.backends.cpu.driver'))))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "[]"


def test_a_warm_compile_with_a_dot_loads_the_blas_without_importing_its_package(
        tmp_path) -> None:
    """The BLAS wheel's library is found and loaded by path: importing the package would read
    its version through importlib.metadata (24 ms of a new process's first compile)."""
    import subprocess
    import sys

    pytest.importorskip("scipy_openblas32")
    text = ("HloModule warm_dot\n\nENTRY main {\n  a = f32[8,8] parameter(0)\n"
            "  b = f32[8,8] parameter(1)\n  ROOT d = f32[8,8] dot(a, b), "
            "lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n")
    hlofuse.compile(text)
    path = tmp_path / "d.hlo"
    path.write_text(text)
    script = (
        "import sys, hlofuse\n"
        "from hlofuse.backends.cpu.library import blas\n"
        f"exe = hlofuse.compile(open({str(path)!r}).read())\n"
        "print(blas.find.cache_info().currsize, blas.find() is not None or not blas.enabled(),"
        " 'scipy_openblas32' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.split() == ["1", "True", "False"]  # looked up, found, package not imported


def test_warning_errors_probe_keeps_every_flag_the_compiler_knows(tmp_path) -> None:
    """Each flag of WARNING_ERRORS is kept exactly when the compiler accepts it alone (GCC's
    "did you mean -Wno-overflow?" about clang's -Werror=integer-overflow once dropped GCC's own
    -Werror=overflow, -Werror=div-by-zero and -Werror=int-conversion)."""
    import subprocess

    argv = tuple(build.find_compiler())
    kept = build._probe_warnings(argv)
    src = tmp_path / "w.c"
    src.write_text("int hf_probe(void) { return 0; }\n")
    for flag in build.WARNING_ERRORS:
        proc = subprocess.run([*argv, "-fsyntax-only", flag, str(src)], capture_output=True,
                              text=True)
        assert (flag in kept) == (proc.returncode == 0 and not proc.stderr.strip()), flag


def test_compiler_answers_are_asked_once_per_binary(tmp_path) -> None:
    """`build.compiler_answer` keeps what the compiler said (its version, its native target)
    in the cache: a new process does not start it again; a changed binary is asked anew, and a
    damaged entry is asked again."""
    import os

    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\n")
    asked: list[str] = []

    def ask() -> str:
        asked.append("v")
        return f"fake cc {len(asked)}"

    argv = (str(fake),)
    assert build.compiler_answer(argv, "version", ask) == "fake cc 1"
    assert build.compiler_answer(argv, "version", ask) == "fake cc 1"  # from the entry
    assert build.compiler_answer(argv, "other question", ask) == "fake cc 2"
    st = fake.stat()
    os.utime(fake, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a new binary
    assert build.compiler_answer(argv, "version", ask) == "fake cc 3"
    for entry in build.cachefs.root().glob("ask-*"):
        entry.write_bytes(b"damaged")
    assert build.compiler_answer(argv, "version", ask) == "fake cc 4"
    assert len(asked) == 4


def test_a_kernel_past_the_inline_budget_calls_its_lane_loops_out_of_line() -> None:
    """The outline pass (kernel IR) decides which lane loops are calls; the printer follows."""
    from hlofuse.backends.kernel_ir.passes.outline import INLINE_LANE_LOOPS

    n = INLINE_LANE_LOOPS + 20
    lines = ["HloModule chain", "", "ENTRY e {", "  x0 = f32[256] parameter(0)",
             "  y = f32[256] parameter(1)"]
    for i in range(n):  # expm1 and log1p have no vector form: one lane loop each
        op = "log-plus-one" if i % 2 else "exponential-minus-one"
        lines += [f"  t{i} = f32[256] {op}(x{i})", f"  x{i + 1} = f32[256] multiply(t{i}, y)"]
    lines += [f"  ROOT r = f32[256] copy(x{n})", "}", ""]
    text = "\n".join(lines)
    rng = np.random.default_rng(3)
    args = [(rng.standard_normal(256) * 0.1).astype(np.float32),
            rng.uniform(0.2, 0.5, 256).astype(np.float32)]
    exe = hlofuse.compile(text)
    src = exe.source
    calls = src.count("= hf_lanes_")
    assert calls == n - INLINE_LANE_LOOPS
    assert src.count("static __attribute__((noinline)) hf_v") == 2  # one per (op, types)
    np.testing.assert_allclose(exe(*args)[0], interpreter.run(parse(text), *args)[0],
                               rtol=1e-5, atol=1e-6)


def test_heavy_lane_loops_count_their_weight_against_the_inline_budget() -> None:
    """power's inlined lane loop counts as `mathlib.INLINE_WEIGHT["power"]` small ones: a
    kernel of 20 inlines INLINE_LANE_LOOPS // 8 of them and calls the rest; values are the
    interpreter's."""
    from hlofuse.backends.cpu import mathlib
    from hlofuse.backends.kernel_ir.passes.outline import INLINE_LANE_LOOPS

    n, weight = 20, mathlib.INLINE_WEIGHT["power"]
    assert weight > 1 and n * weight > INLINE_LANE_LOOPS
    lines = ["HloModule chain", "", "ENTRY e {", "  x0 = f32[256] parameter(0)",
             "  y = f32[256] parameter(1)"]
    for i in range(n):
        lines += [f"  t{i} = f32[256] power(x{i}, y)", f"  x{i + 1} = f32[256] add(t{i}, y)"]
    lines += [f"  ROOT r = f32[256] copy(x{n})", "}", ""]
    text = "\n".join(lines)
    rng = np.random.default_rng(4)
    args = [rng.uniform(0.5, 1.5, 256).astype(np.float32),
            rng.uniform(0.2, 0.5, 256).astype(np.float32)]
    exe = hlofuse.compile(text)
    assert exe.source.count("= hf_lanes_") == n - INLINE_LANE_LOOPS // weight
    np.testing.assert_allclose(exe(*args)[0], interpreter.run(parse(text), *args)[0],
                               rtol=1e-5, atol=1e-6)


def test_a_kernel_past_the_vector_math_budget_calls_the_same_functions_out_of_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from hlofuse.backends.cpu import cvec

    n = cvec.INLINE_VMATH_CALLS + 12

    def chain(name: str) -> str:
        lines = [f"HloModule {name}", "", "ENTRY e {", "  x0 = f32[1024] parameter(0)",
                 "  y = f32[1024] parameter(1)"]
        for i in range(n):  # exp and tanh in turn: one vector math call each
            op = "tanh" if i % 2 else "exponential"
            lines += [f"  t{i} = f32[1024] {op}(x{i})",
                      f"  x{i + 1} = f32[1024] multiply(t{i}, y)"]
        return "\n".join([*lines, f"  ROOT r = f32[1024] copy(x{n})", "}", ""])

    rng = np.random.default_rng(5)
    args = [rng.standard_normal(1024).astype(np.float32),
            rng.uniform(0.5, 1.5, 1024).astype(np.float32)]
    exe = hlofuse.compile(chain("budget"))
    src = exe.source
    assert src.count("_f32_call((") == n - cvec.INLINE_VMATH_CALLS
    assert src.count("static __attribute__((noinline, unused)) hf_v") == 2  # exp, tanh
    monkeypatch.setattr(cvec, "INLINE_VMATH_CALLS", 10**6)
    inline = hlofuse.compile(chain("all_inline"))
    assert "_f32_call(" not in inline.source
    got, want = exe(*args)[0], inline(*args)[0]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_allclose(got, interpreter.run(parse(chain("budget")), *args)[0],
                               rtol=2e-5, atol=1e-6)


def test_the_drivers_unit_alone_compiles_at_driver_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_units, "UNIT_BYTES", 1)
    monkeypatch.setenv("HLOFUSE_CC_OPT", "-O2")  # every unit's level (as -O1 in the tests)
    opts = _compile_flags(monkeypatch, ("-O",))
    exe = hlofuse.compile(_SPLIT.replace("HloModule split", "HloModule split_o2"))
    driver, kernel_units = _split_unit_flags(exe, "split_o2", opts)
    assert driver == [["-O2", *cpu_units.DRIVER_FLAGS]]
    assert all(v == ["-O2"] for v in kernel_units)
    _check_split(exe, _split_args())


def test_kernels_compile_at_kernel_flags_unless_the_level_is_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside the tests (no HLOFUSE_CC_OPT) kernel code compiles at units.KERNEL_FLAGS: the
    early kernel units, and a small program's single file; the driver's unit at DRIVER_FLAGS,
    library code (the prebuilt GEMM) at the build's level."""
    monkeypatch.delenv("HLOFUSE_CC_OPT", raising=False)
    opts = _compile_flags(monkeypatch, ("-O", "-fvect-cost-model"))
    whole = hlofuse.compile(_SPLIT.replace("HloModule split", "HloModule split_one_file"))
    assert cpu_units.units(whole._runner.program) is None
    # (its dot links the prebuilt GEMM, library code at the build's level: its unit comes first)
    assert sorted(v for k, v in opts if k.startswith("split_one_file (unit")) in (
        sorted([["-O3"], ["-O3", *cpu_units.KERNEL_FLAGS]]), [["-O3", *cpu_units.KERNEL_FLAGS]])
    monkeypatch.setattr(cpu_units, "UNIT_BYTES", 1)
    exe = hlofuse.compile(_SPLIT.replace("HloModule split", "HloModule split_kernel_flags"))
    driver, kernel_units = _split_unit_flags(exe, "split_kernel_flags", opts)
    assert driver == [["-O3", *cpu_units.DRIVER_FLAGS]]
    assert all(v == ["-O3", *cpu_units.KERNEL_FLAGS] for v in kernel_units)
    _check_split(exe, _split_args())
    _check_split(whole, _split_args())


def test_a_failed_early_compile_is_compiled_again_by_the_link(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_units, "UNIT_BYTES", 1)
    real = build._run_compiler
    seen: list[str] = []

    def flaky(cmd: list[str], what: str, *rest: object) -> None:
        seen.append(what)
        if "early" in what:  # as if the compiler had been killed in the background
            raise build.CCompileError(f"{what}: killed (test)", build.cachefs.root())
        real(cmd, what, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(build, "_run_compiler", flaky)
    exe = hlofuse.compile(_SPLIT.replace("HloModule split", "HloModule split_flaky"))
    units = cpu_units.units(exe._runner.program)
    assert units is not None
    n = len(units) + 1  # with the prebuilt GEMM's unit
    assert seen.count("split_flaky (unit, early)") == len(units) - 1
    assert sorted(s for s in seen if "early" not in s and "link" not in s) == [
        f"split_flaky (unit {i} of {n})" for i in range(1, n + 1)]
    _check_split(exe, _split_args())


def test_a_forked_child_compiles_early_units_in_a_pool_of_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    monkeypatch.setattr(cpu_units, "UNIT_BYTES", 1)
    hlofuse.compile(_SPLIT.replace("HloModule split", "HloModule split_parent"))  # the pool
    assert build._EARLY_POOL and build._EARLY_POOL[0][0] == os.getpid()
    ctx = multiprocessing.get_context("fork")
    text = _SPLIT.replace("HloModule split", "HloModule split_child").replace(
        "tanh(d)", "logistic(d)")  # kernels the parent did not compile
    with ctx.Pool(1) as pool:  # (before the fix, its early units never ran: a hang)
        got = pool.apply_async(_compile_and_run, (text,)).get(timeout=120)
    np.testing.assert_allclose(got, interpreter.run(parse(text), *_split_args())[0],
                               rtol=1e-5, atol=1e-5)


def _compile_and_run(text: str) -> np.ndarray:
    return np.asarray(hlofuse.compile(text)(*_split_args())[0])


def test_warm_knows_which_gemm_a_module_will_call() -> None:
    """`cpu.warm` compiles the prebuilt GEMMs the module's dots and float convolutions will
    call, by the accumulator the emitters pick: f32, f64 (a 64-bit float operand), u32/u64
    (integer dots by result width); complex dots call none."""
    from hlofuse.backends.cpu.library import prebuilt

    def dots(lhs: str, rhs: str, out: str) -> list[str]:
        return prebuilt.suffixes_of(parse(f"""HloModule d
ENTRY e {{
  a = {lhs}[4,8] parameter(0)
  b = {rhs}[8,2] parameter(1)
  ROOT d = {out}[4,2] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}"""))

    assert dots("f32", "f32", "f32") == ["f32"]
    assert dots("f64", "f64", "f64") == ["f64"]
    assert dots("bf16", "bf16", "f32") == ["f32"]
    assert dots("s32", "s32", "s32") == ["u32"]
    assert dots("s64", "s64", "s64") == ["u64"]
    assert dots("c64", "c64", "c64") == []
