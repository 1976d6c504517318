"""The gpu backend end to end (backends/gpu/driver.py): whole modules compiled with
backend="gpu" and run under Triton's interpreter on the CPU (TRITON_INTERPRET=1, torch
tensors), checked against the HLO interpreter, with the launches each call makes counted.
Needs the optional `gpu` extra (torch, triton): skipped without it. Never needs a GPU."""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # (before triton is imported: triton.language's own jitted
    os.environ.setdefault("TRITON_INTERPRET", "1")  # helpers are made interpreted then)
pytest.importorskip("triton")

import hlofuse  # noqa: E402
from cpu_lower_harness import compare  # noqa: E402
from hlofuse.backends import interpreter  # noqa: E402
from hlofuse.backends.kernel_ir.passes.grid import grid  # noqa: E402
from hlofuse.errors import InputError, UnsupportedOpError  # noqa: E402
from hlofuse.text import parse  # noqa: E402
from test_kernel_ir_pyprint import EXAMPLES  # noqa: E402

if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)


def _leaves(x: object) -> list[np.ndarray]:
    if isinstance(x, list | tuple):
        return [y for v in x for y in _leaves(v)]
    return [np.asarray(x)]


def _inputs(text: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in parse(text).entry.parameters:
        s = p.shape
        if s.dtype.is_float:
            out.append(rng.standard_normal(s.dims).astype(s.dtype.np))
        elif s.dtype.is_pred:
            out.append(rng.random(s.dims) < 0.5)
        else:
            out.append(rng.integers(0, 3, s.dims).astype(s.dtype.np))
    return out


def run_both(text: str, pipeline: str, args: list[np.ndarray] | None = None
             ) -> hlofuse.Executable:
    """Compile for the gpu backend, run, and compare every output with the interpreter."""
    args = _inputs(text) if args is None else args
    exe = hlofuse.compile(text, pipeline, backend="gpu")
    got = exe(*args)
    want = _leaves(interpreter.run(parse(text), *args, subnormals="keep"))
    assert len(got) == len(want)
    for j, (g, w) in enumerate(zip(got, want, strict=True)):
        assert isinstance(g, torch.Tensor)
        compare(g.cpu().numpy().astype(w.dtype), w, 1e-5, 1e-5, f"output {j}")
    return exe


# example, pipeline -> launches per call (kernels and library calls)
LAUNCHES = {
    ("softmax", "xla"): 3, ("softmax", "hlofuse"): 7,
    ("layernorm", "xla"): 2, ("adam_update", "xla"): 7,
    ("attention", "xla"): 4, ("mlp_train_step", "xla"): 13,
    ("cartpole_separate", "hlofuse"): 3, ("cartpole_precomputed", "hlofuse"): 5,
}


@pytest.mark.parametrize("name,pipeline", list(LAUNCHES), ids=[f"{n}-{p}" for n, p in LAUNCHES])
def test_examples_match_the_interpreter(name: str, pipeline: str) -> None:
    exe = run_both((EXAMPLES / f"{name}.hlo").read_text(), pipeline)
    assert exe._runner.launches == LAUNCHES[(name, pipeline)]


def test_whole_loop_is_one_kernel_per_block_with_the_time_loop_inside() -> None:
    """CartPole (separate state), 2048 environments x 100 steps: under `hlofuse` the scan is
    one launch (plus two broadcasts); under `xla` three launches per step."""
    text = (EXAMPLES / "cartpole_separate.hlo").read_text()
    exe = hlofuse.compile(text, "hlofuse", backend="gpu")
    exe(*_inputs(text))
    assert exe._runner.launches == 3
    runner = exe._runner
    loops = [k for k in runner.sched.kernels if "while" in k.name]
    assert len(loops) == 1 and "for x" in loops[0].source  # (the time loop, in the kernel)
    xla = hlofuse.compile(text, "xla", backend="gpu")
    xla(*_inputs(text))
    assert xla._runner.launches == 2 + 3 * 100


def test_paper_cartpole_with_rng_in_the_scan() -> None:
    """The paper's program as written (threefry inside the scan), small: one whole-loop
    kernel whose blocks run as programs, matching the interpreter bit for bit in its ints."""
    jax = pytest.importorskip("jax")
    from hlofuse.examples import cartpole

    fn, args = cartpole.make("baseline", num_envs=64, steps=3)
    text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
    exe = run_both(text, "hlofuse", [np.asarray(a) for a in args])
    assert exe._runner.launches <= 8


_WHILE_TEXT = """HloModule w
cond {
  p = (f32[64], s32[]) parameter(0)
  x = f32[64] get-tuple-element(p), index=0
  z = f32[] constant(0)
  s = f32[] reduce(x, z), dimensions={0}, to_apply=add
  lim = f32[] constant(1000)
  ROOT c = pred[] compare(s, lim), direction=LT
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
body {
  p = (f32[64], s32[]) parameter(0)
  x = f32[64] get-tuple-element(p), index=0
  n = s32[] get-tuple-element(p), index=1
  d = f32[64] multiply(x, x)
  y = f32[64] add(d, x)
  one = s32[] constant(1)
  m = s32[] add(n, one)
  ROOT t = (f32[64], s32[]) tuple(y, m)
}
neg {
  q = f32[64] parameter(0)
  ROOT r = f32[64] negate(q)
}
pos {
  q = f32[64] parameter(0)
  ROOT r = f32[64] exponential(q)
}
ENTRY e {
  x = f32[64] parameter(0)
  k = pred[] parameter(1)
  zero = s32[] constant(0)
  t = (f32[64], s32[]) tuple(x, zero)
  w = (f32[64], s32[]) while(t), condition=cond, body=body
  y = f32[64] get-tuple-element(w), index=0
  n = s32[] get-tuple-element(w), index=1
  b = f32[64] conditional(k, y, y), true_computation=neg, false_computation=pos
  ROOT r = (f32[64], s32[]) tuple(b, n)
}"""


def test_while_with_an_unknown_trip_count_and_a_conditional() -> None:
    text = _WHILE_TEXT
    x = np.full(64, 0.5, np.float32)
    for k in (True, False):
        run_both(text, "xla", [x, np.asarray(k)])


def test_results_are_new_tensors_every_call() -> None:
    text = (EXAMPLES / "softmax.hlo").read_text()
    exe = hlofuse.compile(text, "xla", backend="gpu")
    a, b = _inputs(text, 0), _inputs(text, 1)
    first = [t.clone() for t in exe(*a)]
    kept = exe(*a)
    exe(*b)
    for f, k in zip(first, kept, strict=True):
        assert torch.equal(f, k)


def test_bad_inputs_name_the_parameter() -> None:
    text = (EXAMPLES / "softmax.hlo").read_text()
    exe = hlofuse.compile(text, "xla", backend="gpu")
    (x,) = _inputs(text)
    with pytest.raises(InputError, match="parameter 0"):
        exe(x[:-1])
    with pytest.raises(InputError, match="parameter 0"):
        exe(x.astype(np.float64))
    got = exe(torch.from_numpy(x))  # (a torch tensor runs as it is)
    for g, w in zip(got, exe(x), strict=True):
        assert torch.equal(g, w)


def test_an_op_without_a_gpu_form_is_refused_naming_the_instruction() -> None:
    text = """HloModule s
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}
ENTRY e {
  x = f32[16] parameter(0)
  ROOT my_sort = f32[16] sort(x), dimensions={0}, to_apply=cmp
}"""
    with pytest.raises(UnsupportedOpError, match="my_sort"):
        hlofuse.compile(text, "xla", backend="gpu")


def test_flushing_subnormals_is_refused() -> None:
    text = (EXAMPLES / "softmax.hlo").read_text()
    with pytest.raises(UnsupportedOpError, match="keeps subnormals"):
        hlofuse.compile(text, "xla", backend="gpu", subnormals="flush")


def test_jit_with_backend_gpu_returns_jax_arrays() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def f(x, w):
        return jax.nn.softmax(x @ w, axis=-1), jnp.tanh(x).sum()

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16), dtype=np.float32)
    w = rng.standard_normal((16, 4), dtype=np.float32)
    g = hlofuse.jit(f, backend="gpu")
    got = g(x, w)
    want = jax.jit(f)(x, w)
    assert g.backend_for(x, w) == "gpu"
    for a, b in zip(got, want, strict=True):
        assert isinstance(a, jax.Array)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def test_column_reduction_row_is_one_block_of_registers() -> None:
    """A column reduction's accumulators (a local of 10 elements, each read at its own column)
    become one block of registers: the grid pass records it, the printer declares it once."""
    from hlofuse.backends.gpu.triton_print import print_kernel
    from hlofuse.backends.kernel_ir.lower import lower_kernel
    from hlofuse.backends.kernel_ir.passes import optimize
    from hlofuse.backends.kernel_ir.target import Target
    from hlofuse.passes.pipelines import run_pipeline
    from test_kernel_ir_pyprint import kernels

    module = parse((EXAMPLES / "softmax.hlo").read_text())
    run_pipeline(module, "hlofuse")
    column = [i for i in kernels(module) if i.name == "reduce_max.23"]
    (instr,) = column
    kernel = grid(optimize(lower_kernel(instr), Target.named("scalar"), threads=1))
    assert kernel.grid is not None and list(kernel.grid.rows.values()) == [16]
    src = print_kernel(kernel)
    assert src.count("tl.full([16], 0") == 1


def test_which_calls_replay_a_cuda_graph() -> None:
    """A call replays one CUDA graph on a GPU (graphs.py) unless it reads a value back, launches
    one kernel, or moves too many bytes; the decision is made from the schedule here, without a
    GPU (where calls stay eager)."""
    from hlofuse.backends.gpu import graphs

    softmax = hlofuse.compile((EXAMPLES / "softmax.hlo").read_text(), "xla", backend="gpu")
    runner = softmax._runner
    assert graphs.refusal(runner.sched, 3, 1000) is None
    assert "nothing to save" in graphs.refusal(runner.sched, 1, 1000)
    assert "bytes" in graphs.refusal(runner.sched, 3, graphs.MAX_IO_BYTES + 1)
    text = (EXAMPLES / "cartpole_separate.hlo").read_text()
    scan = hlofuse.compile(text, "xla", backend="gpu")._runner  # (a scan: a known trip count)
    assert graphs.refusal(scan.sched, 302, 1000) is None
    unknown = hlofuse.compile(_WHILE_TEXT, "xla", backend="gpu")._runner
    assert "trip count is unknown" in graphs.refusal(unknown.sched, 5, 1000)
    if not torch.cuda.is_available():
        runner(*_inputs((EXAMPLES / "softmax.hlo").read_text()))
        assert runner._graph is None and runner.graph_why.startswith("not decided")


def test_whole_loop_with_per_step_outputs() -> None:
    """A scan emitting a sum over the batch (moved after the loop) and the counter (a `urow`
    leaf, written by the replay after the blocks) is still one whole-loop kernel on the gpu
    backend, matching the interpreter."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def run(x: object, table: object) -> object:
        def body(carry: object, row: object) -> object:
            x, t = carry
            x = jnp.where(jnp.abs(x) > 2.0, row, x * 1.1 + 0.1)
            return (x, t + 1), (jnp.sum(x), t * 2)

        return jax.lax.scan(body, (x, jnp.int32(0)), table)

    rng = np.random.default_rng(3)
    args = [rng.uniform(-2, 2, 64).astype(np.float32),
            rng.uniform(-1, 1, (80, 64)).astype(np.float32)]
    text = jax.jit(run).lower(*args).as_text(dialect="hlo")
    exe = run_both(text, "hlofuse", args)
    from hlofuse.passes.fusion.loop_fusion import is_whole_loop

    assert sum(is_whole_loop(i) for i in exe.module.entry.instructions) == 1
    # the rows' and ys's initial values, the loop, the reduce after it, the counter's double
    assert exe._runner.launches <= 5


def test_large_column_reduction_is_not_cut_into_cpu_blocks() -> None:
    """The cpu lowering cuts a large column reduction into blocks of rows for its threads
    (`reduce.column_blocks`); the gpu lowering keeps the one nest its grid maps."""
    from hlofuse.api import optimise
    from hlofuse.backends.gpu.kernels import lower

    text = """
region {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[16384,16] parameter(0)
  e = f32[16384,16] exponential(x)
  z = f32[] constant(0)
  r = f32[16] reduce(e, z), dimensions={0}, to_apply=region
  ROOT t = (f32[16], f32[16384,16]) tuple(r, e)
}"""
    module, _ = optimise(parse(text), pipeline="xla")
    fusion = next(i for i in module.entry.instructions if i.opcode.name == "FUSION")
    assert not any(b.name.startswith("part") for b in lower(fusion).kernel.locals)
    x = np.random.default_rng(2).uniform(-1, 1, (16384, 16)).astype(np.float32)
    got = hlofuse.compile(parse(text), backend="gpu")(x)
    want = interpreter.run(parse(text), x)
    for g, w in zip(_leaves(got), want, strict=True):
        compare(g, np.asarray(w), 1e-5, 1e-3, "column reduction")
