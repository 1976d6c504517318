"""Benchmark: compile time vs module size (issue 13), hlofuse beside jax.jit.

Programs, each a JAX function lowered once (so hlofuse and jax.jit compile the same program):

    chain-N   N elementwise ops in a row on f32[1024] (add, multiply, tanh, subtract, exp, negate)
    wide-K    K independent slice -> tanh -> multiply -> add branches of one f32[K,256] input
    gpt-L     a GPT-style training step: flax decoder (d=128, 4 heads, L layers, vocab 256),
              cross-entropy on 8 sequences of 64 tokens, optax AdamW update
    scan-T    an RNN rollout of T steps, jax.lax.scan(..., unroll=True)

For each: the instruction count; `hlofuse opt --pipeline xla` in process (CPU seconds, best of
--repeat, with each pass's share); a cold `hlofuse.compile(text)` on the cpu backend into an
empty HLOFUSE_CACHE_DIR, split into pipeline (parse + xla), C generation and the C compiler,
with the garbage collector's first run after it counted in, then a warm compile from that
cache; and jax.jit's lower and compile of the same function, in a fresh process too
(`jax_in_subprocess`).
With --baseline REF each text also goes through the pipeline of hlofuse at git commit REF,
right after the current code (a subprocess on a `git archive` of it; a program that takes
longer than --max-seconds there is cut off and recorded as such, and the larger ones of its
family are skipped).

    python benchmarks/compile_time.py                 # full sweep (tens of minutes)
    python benchmarks/compile_time.py --quick         # small sizes, about a minute
    python benchmarks/compile_time.py --baseline 1b25949 --no-cc --no-jax
    python benchmarks/compile_time.py --report benchmarks/results/compile_time.json

Writes results/compile_time.json (or --out NAME) and results/compile_time.png (time vs
instructions, log-log). Times drift on a shared machine: compare within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

FULL = {"chain": [500, 1000, 2000, 5000, 10000], "wide": [100, 250, 500, 1000, 2000],
        "gpt": [1, 2, 4, 8, 16], "scan": [32, 128, 512, 1024]}
QUICK = {"chain": [500, 1000, 2000], "wide": [100, 250], "gpt": [1, 2], "scan": [32, 128]}

# ----- the programs (JAX) --------------------------------------------------------------------


def chain_program(n: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    import jax.numpy as jnp
    from jax import lax

    ops = [lax.add, lax.mul, None, lax.sub, lax.exp, None]

    def chain(x: Any, y: Any) -> Any:
        for i in range(n):
            k = i % len(ops)
            if k == 2:
                x = lax.tanh(x)
            elif k == 5:
                x = lax.neg(x)
            elif k == 4:
                x = lax.exp(x)
            else:
                x = ops[k](x, y)  # type: ignore[misc]
        return x

    return chain, (jnp.ones(1024, jnp.float32), jnp.ones(1024, jnp.float32))


def wide_program(k: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    import jax.numpy as jnp
    from jax import lax

    def wide(p0: Any, p1: Any) -> tuple[Any, ...]:
        outs = []
        for i in range(k):
            r = lax.squeeze(lax.slice_in_dim(p0, i, i + 1, axis=0), (0,))
            outs.append(lax.tanh(r) * p1 + r)
        return tuple(outs)

    return wide, (jnp.ones((k, 256), jnp.float32), jnp.ones(256, jnp.float32))


def gpt_program(layers: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax

    d, heads, seq, batch, vocab = 128, 4, 64, 8, 256

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x: Any) -> Any:
            h = nn.LayerNorm()(x)
            mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
            h = nn.SelfAttention(num_heads=heads, qkv_features=d, deterministic=True)(h, mask=mask)
            x = x + h
            h = nn.Dense(d)(nn.gelu(nn.Dense(4 * d)(nn.LayerNorm()(x))))
            return x + h

    class GPT(nn.Module):
        @nn.compact
        def __call__(self, tokens: Any) -> Any:
            pos = self.param("pos", nn.initializers.normal(0.02), (seq, d))
            x = nn.Embed(vocab, d)(tokens) + pos
            for _ in range(layers):
                x = Block()(x)
            return nn.Dense(vocab)(nn.LayerNorm()(x))

    model = GPT()
    tokens = jnp.zeros((batch, seq), jnp.int32)
    params = model.init(jax.random.PRNGKey(0), tokens)
    tx = optax.adamw(1e-3)
    opt_state = tx.init(params)

    def train_step(params: Any, opt_state: Any, tokens: Any, targets: Any) -> Any:
        def loss_fn(p: Any) -> Any:
            logits = model.apply(p, tokens)
            return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step, (params, opt_state, tokens, tokens)


def scan_program(steps: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    import jax
    import jax.numpy as jnp

    def rollout(h0: Any, xs: Any, w: Any, u: Any) -> Any:
        def cell(h: Any, x: Any) -> Any:
            z = jax.nn.sigmoid(h @ u + x)
            h = (1 - z) * h + z * jnp.tanh(h @ w + x)
            return h, jnp.sum(h * h, axis=-1)

        return jax.lax.scan(cell, h0, xs, unroll=True)

    b, d = 64, 64
    return rollout, (jnp.zeros((b, d)), jnp.zeros((steps, b, d)), jnp.zeros((d, d)),
                     jnp.zeros((d, d)))


PROGRAMS: dict[str, Callable[[int], tuple[Callable[..., Any], tuple[Any, ...]]]] = {
    "chain": chain_program, "wide": wide_program, "gpt": gpt_program, "scan": scan_program}

# ----- measuring hlofuse ---------------------------------------------------------------------


def instruction_count(text: str) -> int:
    from hlofuse.text import parse

    module = parse(text)
    return sum(len(c.instructions) for c in module.computations)


def time_pipeline(text: str, repeat: int, pipeline: str = "xla") -> dict[str, Any]:
    """CPU seconds of parse + `pipeline` (best of `repeat`), and each pass's share in the best
    run (passes that ran several times are summed)."""
    from hlofuse.passes.base import Context
    from hlofuse.passes.pipelines import build
    from hlofuse.text import parse

    best: dict[str, Any] | None = None
    for _ in range(repeat):
        t0 = time.process_time()
        module = parse(text)
        t_parse = time.process_time() - t0
        per_pass: dict[str, float] = {}
        w0, c0 = time.perf_counter(), time.process_time()
        build(pipeline).execute(module, Context(observers=[_pass_timer(per_pass)]))
        run = {"parse_s": t_parse, "pipeline_s": time.process_time() - c0,
               "pipeline_wall_s": time.perf_counter() - w0,
               "per_pass_s": dict(sorted(per_pass.items(), key=lambda kv: -kv[1])),
               "instructions_after": sum(len(c.instructions) for c in module.computations)}
        if best is None or run["pipeline_s"] < best["pipeline_s"]:
            best = run
    assert best is not None
    return best


def _pass_timer(per_pass: dict[str, float]) -> Callable[[Any], None]:
    """An observer adding each pass's CPU seconds into `per_pass` (by pass name)."""
    started: dict[str, float] = {}

    def observe(event: Any) -> None:
        now = time.process_time()
        if event.phase == "start":
            started[event.path] = now
        else:
            per_pass[event.pass_name] = (per_pass.get(event.pass_name, 0.0)
                                         + now - started.pop(event.path))

    return observe


@contextlib.contextmanager
def fresh_cache() -> Iterator[Path]:
    """An empty HLOFUSE_CACHE_DIR, and no library loaded in this process from before."""
    from hlofuse.backends.cpu import build

    old = os.environ.get("HLOFUSE_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="hlofuse-bench-") as tmp:
        os.environ["HLOFUSE_CACHE_DIR"] = tmp
        build._LOADED.clear()
        try:
            yield Path(tmp)
        finally:
            build._LOADED.clear()
            if old is None:
                os.environ.pop("HLOFUSE_CACHE_DIR", None)
            else:
                os.environ["HLOFUSE_CACHE_DIR"] = old


_PRIME = """HloModule prime
ENTRY e {
  a = f32[4,4] parameter(0)
  b = f64[4,4] parameter(1)
  c = f32[4,4] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d = f64[4,4] dot(b, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[4,4], f64[4,4]) tuple(c, d)
}
"""


def time_cold_compile(text: str) -> dict[str, Any]:
    """`hlofuse.compile(text)` on the cpu backend into an empty cache, step by step (the steps
    of api._compile_cpu_text) and the garbage collector's first run after it (`gc_s`: the
    caller of hlofuse.compile meets it once the collector is on again), then a warm compile
    from that cache (wall seconds). The GEMMs,
    compiled once per machine (`library/prebuilt.py`), are built first, by a tiny program with
    an f32 and an f64 dot, and timed apart (`prebuilt_s`)."""
    import gc
    from concurrent.futures import ThreadPoolExecutor

    import hlofuse
    from hlofuse import gcpause
    from hlofuse.backends import cpu
    from hlofuse.backends.cpu import artifacts, build, units
    from hlofuse.backends.cpu.executable import CpuExecutable
    from hlofuse.passes.pipelines import run_pipeline
    from hlofuse.text import parse

    with fresh_cache():
        p0 = time.perf_counter()
        hlofuse.compile(_PRIME)
        prebuilt = time.perf_counter() - p0
        build._LOADED.clear()
        with gcpause.paused():  # as hlofuse.compile
            t0 = time.perf_counter()
            module = parse(text)
            run_pipeline(module, "xla")
            t1 = time.perf_counter()
            name = module.name  # as cpu.compile_module: kernel units compile while generated
            flags = units.kernel_flags()
            program = cpu.generate(module,
                                   early=lambda unit: build.compile_early(unit, name, flags))
            t2 = time.perf_counter()
            entry = functools.partial(artifacts.entry, text, "xla", module)
            with ThreadPoolExecutor(max_workers=1) as pool:  # as cpu.compile_module: the cache
                side = pool.submit(cpu.beside_build, entry, program)  # entry, then the
                exe = CpuExecutable(module, program)  # collector's run, while the library
                made = side.result()  # builds
            t3 = time.perf_counter()
            artifacts.write(made, exe.library_key)
            t4 = time.perf_counter()
        # the collector is on again, as when hlofuse.compile returns: its first run walks what
        # the compile allocated (run here if no allocation has triggered it yet)
        gc.collect(0)
        t5 = time.perf_counter()
        build._LOADED.clear()  # a new process: the library comes from the disk cache
        c_bytes, kernels = len(program.source), len(program.kernels)
        del module, program, exe, entry
        gc.collect()  # (the cold compile's garbage is not the warm compile's to collect)
        w0 = time.perf_counter()
        hlofuse.compile(text, pipeline="xla")
        warm = time.perf_counter() - w0
        fresh = warm_in_new_process(text)
    return {"pipeline_s": t1 - t0, "codegen_s": t2 - t1, "cc_s": t3 - t2,
            "store_s": t4 - t3, "gc_s": t5 - t4, "cold_total_s": t5 - t0, "warm_s": warm,
            "warm_new_process_s": fresh["compile_s"], "import_s": fresh["import_s"],
            "prebuilt_s": prebuilt, "c_bytes": c_bytes, "kernels": kernels}


def warm_in_new_process(text: str) -> dict[str, float]:
    """`import hlofuse`, then a warm `hlofuse.compile(text, pipeline="xla")` from the current
    HLOFUSE_CACHE_DIR, in a new Python process, timed apart (seconds; the second of two runs,
    so Python's bytecode is cached, as for an installed package)."""
    with tempfile.NamedTemporaryFile("w", suffix=".hlo", delete=False) as f:
        f.write(text)
    code = ("import time\nt0 = time.perf_counter()\nimport hlofuse\nt1 = time.perf_counter()\n"
            f"hlofuse.compile(open({f.name!r}).read(), pipeline='xla')\n"
            "print(t1 - t0, time.perf_counter() - t1)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    try:
        for _ in range(2):
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 env=env, timeout=600, check=True).stdout
    finally:
        os.unlink(f.name)
    imported, compiled = map(float, out.split())
    return {"import_s": imported, "compile_s": compiled}


def time_after_previous(text: str, previous: str) -> dict[str, Any]:
    """A compile of `text` into a cache that holds only `previous` (the next smaller program
    of its family, compiled first): what a user changing the model's size meets. Kernel
    units whose C is the same are found in the cache (docs/cpu-backend.md, "Compile time of
    the generated C"); counted here are the units compiled and those the program has."""
    import gc

    import hlofuse
    from hlofuse.backends.cpu import build

    compiled: list[str] = []
    real = build._run_compiler

    def spy(cmd: list[str], what: str, *rest: Any) -> None:
        compiled.append(what)
        real(cmd, what, *rest)

    with fresh_cache():
        hlofuse.compile(previous, pipeline="xla")
        build._LOADED.clear()
        gc.collect()
        build._run_compiler = spy  # type: ignore[assignment]
        try:
            t0 = time.perf_counter()
            hlofuse.compile(text, pipeline="xla")
            seconds = time.perf_counter() - t0
        finally:
            build._run_compiler = real  # type: ignore[assignment]
    units = [w for w in compiled if "(unit" in w]
    total = max((int(w.rsplit(" of ", 1)[1].rstrip(")")) for w in units if " of " in w),
                default=None)
    return {"after_previous_s": seconds, "units_compiled": len(units), "units_total": total}


def cold_compile_in_subprocess(text: str, timeout_s: float,
                               previous: str | None = None) -> dict[str, Any]:
    """`time_cold_compile` in a fresh process (a crash or a hang there does not end the
    sweep; the warm compile then also starts from a cold process's state), then, given the
    `previous` program of the family, `time_after_previous`. Today's C backend recurses once
    per fused instruction, so the child raises Python's recursion limit and runs on a thread
    with a large stack."""
    paths = []
    for t in (text, previous):
        if t is None:
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".hlo", delete=False) as f:
            f.write(t)
        paths.append(f.name)
    try:
        return _worker_json(["--cc-worker", *paths], timeout_s)
    finally:
        for path in paths:
            os.unlink(path)


def _worker_json(args: list[str], timeout_s: float) -> dict[str, Any]:
    """Run this script with `args` in a fresh process; the JSON object its last stdout line
    prints, or {"error": ...} for a timeout, a crash or no output."""
    try:
        proc = subprocess.run([sys.executable, __file__, *args],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:300]}"}
    return dict(json.loads(lines[-1]))


def cc_worker(path: str, previous: str | None = None) -> None:
    import threading

    sys.setrecursionlimit(1_000_000)
    threading.stack_size(1 << 29)
    out: dict[str, Any] = {}

    def job() -> None:
        try:
            text = Path(path).read_text()
            out.update(time_cold_compile(text))
            if previous is not None:
                out.update(time_after_previous(text, Path(previous).read_text()))
        except Exception as exc:  # reported, not raised: this is a measurement
            out["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"

    t = threading.Thread(target=job)
    t.start()
    t.join()
    print(json.dumps(out), flush=True)


def time_jax(fn: Callable[..., Any], args: tuple[Any, ...]) -> dict[str, float]:
    """jax.jit's lower and compile of `fn` (wall seconds), in this process."""
    import jax

    t0 = time.perf_counter()
    lowered = jax.jit(fn).lower(*args)
    t1 = time.perf_counter()
    lowered.compile()
    t2 = time.perf_counter()
    return {"lower_s": t1 - t0, "compile_s": t2 - t1, "total_s": t2 - t0}


def jax_in_subprocess(family: str, size: int, timeout_s: float) -> dict[str, Any]:
    """`time_jax` of program `family-size` in a fresh process, as hlofuse's cold compile runs
    in one: after one tiny jit compile there (as hlofuse's compiles `_PRIME` first) and the
    program's tracing (as `hlo_text` traces it before hlofuse compiles). jax.jit in the sweep's
    own process was up to 1.5x slower after the sweep's largest programs (gpt-16: 3.47 s there,
    2.53 s fresh), which flattered hlofuse."""
    return _worker_json(["--jax-worker", family, str(size)], timeout_s)


def jax_worker(family: str, size: int) -> None:
    import jax
    import jax.numpy as jnp

    from hlofuse.frontends.jax import hlo_text

    x = jnp.ones((4, 4), jnp.float32)
    jax.jit(lambda a, b: a @ b + 1.0).lower(x, x).compile()
    fn, fargs = PROGRAMS[family](size)
    hlo_text(fn, *fargs)
    print(json.dumps(time_jax(fn, fargs)), flush=True)


# ----- the baseline (another hlofuse commit, in a subprocess) --------------------------------


class _Timeout(Exception):
    pass


def worker(files: list[str], repeat: int, max_seconds: float) -> None:
    """Time the pipeline on each file (one JSON line each); used with a baseline checkout on
    PYTHONPATH. Files are given smallest first per family; after one is cut off at
    `max_seconds`, the larger ones of its family are skipped."""
    def alarm(signum: int, frame: Any) -> None:
        raise _Timeout

    signal.signal(signal.SIGALRM, alarm)
    cut: set[str] = set()
    for path in files:
        family = Path(path).stem.split("-")[0]
        out: dict[str, Any] = {"file": path}
        if family in cut:
            out["cut_off_s"] = max_seconds
        else:
            signal.alarm(int(max_seconds))
            try:
                out.update(time_pipeline(Path(path).read_text(), repeat))
            except _Timeout:
                out["cut_off_s"] = max_seconds
                cut.add(family)
            finally:
                signal.alarm(0)
        print(json.dumps(out), flush=True)


class Baseline:
    """hlofuse at git commit `ref` (a `git archive` of its src/ in a temporary directory),
    timing the pipeline in a subprocess right after the current code timed the same program,
    so both see the same machine load. A family is skipped after one program was cut off."""

    def __init__(self, ref: str, repeat: int, max_seconds: float) -> None:
        self.ref, self.repeat, self.max_seconds = ref, repeat, max_seconds
        self._tmp = tempfile.TemporaryDirectory(prefix="hlofuse-baseline-")
        archive = subprocess.run(["git", "archive", ref, "src"], cwd=HERE.parent,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", self._tmp.name], input=archive, check=True)
        self.cut: set[str] = set()

    def time(self, name: str, family: str, text: str) -> dict[str, Any]:
        if family in self.cut:
            return {"cut_off_s": self.max_seconds}
        path = Path(self._tmp.name) / f"{name}.hlo"
        path.write_text(text)
        env = {**os.environ, "PYTHONPATH": str(Path(self._tmp.name) / "src")}
        cmd = [sys.executable, __file__, "--worker", "--repeat", str(self.repeat),
               "--max-seconds", str(self.max_seconds), str(path)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        row = dict(json.loads(proc.stdout.splitlines()[-1]))
        row.pop("file", None)
        if "cut_off_s" in row:
            self.cut.add(family)
        return row

    def close(self) -> None:
        self._tmp.cleanup()


# ----- the sweep -----------------------------------------------------------------------------


def sweep(args: argparse.Namespace) -> dict[str, Any]:
    import harness

    sizes = QUICK if args.quick else FULL
    rows: list[dict[str, Any]] = []
    baseline = (Baseline(args.baseline, args.baseline_repeat, args.max_seconds)
                if args.baseline else None)
    for family in args.families:
        previous: str | None = None
        for size in sizes[family]:
            name = f"{family}-{size}"
            fn, fargs = PROGRAMS[family](size)
            from hlofuse.frontends.jax import hlo_text

            text = hlo_text(fn, *fargs)
            row: dict[str, Any] = {"name": name, "family": family, "size": size,
                                   "instructions": instruction_count(text)}
            print(f"{name}: {row['instructions']} instructions", file=sys.stderr, flush=True)
            row["xla"] = time_pipeline(text, args.repeat)
            if baseline is not None:
                row["xla_baseline"] = baseline.time(name, family, text)
            cc = args.cc and row["instructions"] <= args.cc_max_instructions
            colds: list[dict[str, Any]] = []
            jits: list[dict[str, Any]] = []
            for k in range(args.rounds):  # the two sides alternate, each in a fresh process
                if cc:
                    colds.append(cold_compile_in_subprocess(
                        text, args.cc_timeout, previous if k == 0 else None))
                if args.jax:
                    jits.append(jax_in_subprocess(family, size, args.cc_timeout))
            if colds:
                row["cpu_compile"] = median_run(colds, "cold_total_s")
            if jits:
                row["jax"] = median_run(jits, "total_s")
            previous = text
            rows.append(row)
            print("  " + summary_line(row), file=sys.stderr, flush=True)
    if baseline is not None:
        baseline.close()
    return {"quick": args.quick, "repeat": args.repeat, "rounds": args.rounds,
            "baseline": args.baseline,
            "baseline_repeat": args.baseline_repeat if args.baseline else None, "rows": rows,
            "machine_load": os.getloadavg(), "cpu_model": harness.machine().get("cpu"),
            "pass_core": _pass_core()}


def _pass_core() -> str:
    """Whether hlofuse's pass core ran compiled (hlofuse/native.py) or from its sources."""
    from hlofuse import native

    return native.STATE.reason


def median_run(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The run whose `key` is the median of `runs` (the lower middle one of an even count),
    with every run's `key` listed under `key + "_runs"` and what only the first run measured
    (a compile after the previous program) kept. A failed run (an "error") is returned as it
    is: a failure is not averaged away."""
    for r in runs:
        if "error" in r:
            return r
    ordered = sorted(runs, key=lambda r: float(r[key]))
    out = {**runs[0], **ordered[(len(ordered) - 1) // 2]}
    out[key + "_runs"] = [float(r[key]) for r in runs]
    return out


def summary_line(row: dict[str, Any]) -> str:
    n = row["instructions"]
    xla = row["xla"]["pipeline_s"]
    parts = [f"xla {xla:.2f} s ({xla / n * 1e3:.3f} ms/instr)"]
    base = row.get("xla_baseline") or {}
    if "pipeline_s" in base:
        parts.append(f"baseline {base['pipeline_s']:.2f} s")
    elif "cut_off_s" in base:
        parts.append(f"baseline > {base['cut_off_s']:.0f} s")
    if "cpu_compile" in row and "error" in row["cpu_compile"]:
        parts.append(f"cold compile failed: {row['cpu_compile']['error'][:80]}")
    elif "cpu_compile" in row:
        c = row["cpu_compile"]
        fresh = (f", {c['warm_new_process_s'] * 1e3:.0f} ms in a new process"
                 if "warm_new_process_s" in c else "")
        parts.append(f"cold compile {c['cold_total_s']:.2f} s (cc {c['cc_s']:.2f} s), "
                     f"warm {c['warm_s'] * 1e3:.0f} ms{fresh}")
        if "after_previous_s" in c:
            parts.append(f"after the previous size {c['after_previous_s']:.2f} s "
                         f"({c['units_compiled']} of {c['units_total'] or 1} units compiled)")
    if "jax" in row:
        j = row["jax"]
        parts.append(f"jax.jit {j['total_s']:.2f} s" if "total_s" in j
                     else f"jax.jit failed: {j.get('error', '?')}")
    return "; ".join(parts)


def report(payload: dict[str, Any]) -> str:
    """The README tables (markdown) from a results file: the sweep, then per pass before and
    after for the largest program of each family that the baseline finished."""
    rows = payload["rows"]
    out = ["| program | instructions | xla pipeline s (ms/instr) | baseline s | cold compile s "
           "(pipeline / C gen / cc) | warm compile ms (new process) | "
           "jax.jit s (lower + compile) |",
           "|---|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        n, x = r["instructions"], r["xla"]["pipeline_s"]
        base = r.get("xla_baseline") or {}
        before = (f"{base['pipeline_s']:.2f}" if "pipeline_s" in base
                  else f"> {base['cut_off_s']:.0f}" if "cut_off_s" in base else "-")
        c = r.get("cpu_compile") or {}
        if "error" in c:
            cold, warm = f"failed: {c['error'][:60]}", "-"
        elif c:
            cold = (f"{c['cold_total_s']:.2f} ({c['pipeline_s']:.2f} / {c['codegen_s']:.2f} / "
                    f"{c['cc_s']:.2f})")
            warm = f"{c['warm_s'] * 1e3:.0f}"
            if "warm_new_process_s" in c:
                warm += f" ({c['warm_new_process_s'] * 1e3:.0f})"
        else:
            cold, warm = "-", "-"
        j = r.get("jax") or {}
        jax = f"{j['total_s']:.2f}" if "total_s" in j else ("failed" if j else "-")
        out.append(f"| {r['name']} | {n} | {x:.2f} ({x / n * 1e3:.2f}) | {before} | {cold} | "
                   f"{warm} | {jax} |")
    after = [r for r in rows if "after_previous_s" in (r.get("cpu_compile") or {})]
    if after:
        out += ["", "| program | compiled after | cold s | after it s | units compiled |",
                "|---|---|---:|---:|---:|"]
        for r in after:
            c = r["cpu_compile"]
            prev = rows[rows.index(r) - 1]["name"]
            out.append(f"| {r['name']} | {prev} | {c['cold_total_s']:.2f} | "
                       f"{c['after_previous_s']:.2f} | {c['units_compiled']} of "
                       f"{c['units_total'] or 1} |")
    picks: dict[str, dict[str, Any]] = {}
    for r in rows:  # the largest of each family the baseline finished, and the 8-layer step
        if "pipeline_s" in (r.get("xla_baseline") or {}):
            picks[r["family"] if r["name"] != "gpt-8" else "gpt-8"] = r
    for r in picks.values():
        before, after = r["xla_baseline"]["per_pass_s"], r["xla"]["per_pass_s"]
        out += ["", f"Per pass, {r['name']} ({r['instructions']} instructions), CPU ms:", "",
                "| pass | before | after | speedup |", "|---|---:|---:|---:|"]
        for name in sorted(before, key=lambda k: -before[k]):
            b, a = before[name] * 1e3, after.get(name, 0.0) * 1e3
            out.append(f"| {name} | {b:.1f} | {a:.1f} | {b / a if a else float('inf'):.1f}x |")
        b, a = r["xla_baseline"]["pipeline_s"], r["xla"]["pipeline_s"]
        out.append(f"| **total** | {b * 1e3:.0f} | {a * 1e3:.0f} | {b / a:.1f}x |")
    return "\n".join(out)


def plot(payload: dict[str, Any], path: Path) -> None:
    """Two log-log panels against instruction count: the xla pipeline now and at the baseline
    commit; a cold cpu compile (pipeline + C generation + cc) and jax.jit's compile."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = payload["rows"]
    markers = {"chain": "o", "wide": "s", "gpt": "^", "scan": "D"}
    panels: list[tuple[str, list[tuple[str, str, Callable[[dict[str, Any]], Any]]]]] = [
        ("passes: hlofuse opt --pipeline xla (CPU s)", [
            ("now", "C0", lambda r: r["xla"]["pipeline_s"]),
            (f"baseline {payload.get('baseline') or ''}", "C7",
             lambda r: (r.get("xla_baseline") or {}).get("pipeline_s"))]),
        ("whole compile (wall s)", [
            ("hlofuse cold compile, cpu backend", "C1",
             lambda r: (r.get("cpu_compile") or {}).get("cold_total_s")),
            ("jax.jit lower + compile", "C2", lambda r: (r.get("jax") or {}).get("total_s"))]),
    ]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), sharey=True)
    xs = sorted(r["instructions"] for r in rows)
    for ax, (title, series) in zip(axes, panels, strict=True):
        for label, color, get in series:
            for family, marker in markers.items():
                pts = [(r["instructions"], get(r)) for r in rows if r["family"] == family]
                pts = [(x, y) for x, y in pts if y is not None]
                if pts:
                    px, py = zip(*pts, strict=True)
                    ax.plot(px, py, marker=marker, color=color, alpha=0.85,
                            label=f"{label}: {family}")
        ax.plot([xs[0], xs[-1]], [xs[0] * 2e-4, xs[-1] * 2e-4], color="grey", linestyle=":",
                label="0.2 ms per instruction")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("instructions (HLO as lowered by JAX)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    axes[0].set_ylabel("seconds")
    fig.suptitle("Compile time vs module size (o chain, s wide, ^ GPT training step, D scan)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    p.add_argument("--repeat", type=int, default=None, help="best of N pipeline runs (3)")
    p.add_argument("--rounds", type=int, default=1,
                   help="cold compiles and jax.jit compiles per program, alternating, each in "
                        "a fresh process; the median of each is reported (1)")
    p.add_argument("--families", nargs="+", default=list(FULL), choices=list(FULL))
    p.add_argument("--no-cc", dest="cc", action="store_false", help="skip the cpu compile")
    p.add_argument("--cc-max-instructions", type=int, default=20000,
                   help="compile with the C compiler only modules up to this size")
    p.add_argument("--cc-timeout", type=float, default=1800.0,
                   help="give up on one cold cpu compile after this many seconds")
    p.add_argument("--no-jax", dest="jax", action="store_false", help="skip jax.jit")
    p.add_argument("--baseline", metavar="REF", help="also time the pipeline of this commit")
    p.add_argument("--baseline-repeat", type=int, default=1,
                   help="baseline: best of N pipeline runs (1)")
    p.add_argument("--max-seconds", type=float, default=120.0,
                   help="baseline: cut a program off after this long")
    p.add_argument("--out", default="compile_time", help="results/<OUT>.json and .png")
    p.add_argument("--no-plot", dest="plot", action="store_false")
    p.add_argument("--report", metavar="JSON", help="print the README tables of a results file")
    p.add_argument("--replot", metavar="JSON", help="redraw the PNG of a results file")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cc-worker", help=argparse.SUPPRESS)
    p.add_argument("--jax-worker", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("files", nargs="*", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.worker:
        worker(args.files, args.repeat, args.max_seconds)
        return 0
    if args.cc_worker:
        cc_worker(args.cc_worker, args.files[0] if args.files else None)
        return 0
    if args.jax_worker:
        jax_worker(args.jax_worker[0], int(args.jax_worker[1]))
        return 0
    if args.report:
        print(report(json.loads(Path(args.report).read_text())))
        return 0
    if args.replot:
        plot(json.loads(Path(args.replot).read_text()), Path(args.replot).with_suffix(".png"))
        return 0
    import harness

    payload = sweep(args)
    path = harness.save(args.out, payload)
    print(f"wrote {path}", file=sys.stderr)
    if args.plot:
        png = path.with_suffix(".png")
        plot(payload, png)
        print(f"wrote {png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
