"""Benchmark: hlofuse inside the user's own jax.jit (`hlofuse.jax_function`), against jax.jit.

Three parts, each in one process, peers interleaved (`harness.interleaved`), inputs as jax
device arrays:

* overhead: the cost of one custom call. A function that adds 1 to an f32[16] runs as
  (a) `hlofuse.compile`'s executable called directly on a numpy array (ctypes), (b) jax.jit of
  the jax_function (jax's dispatch plus one custom call) next to jax.jit of the plain function
  (jax's dispatch plus XLA's kernel), and (c) 1000 calls inside one jax.jit (a fori_loop whose
  body is the custom call): per call, the handler's cost plus the kernel's (tens of ns);
* training: programs users write, compiled by hlofuse inside jax.jit, against jax.jit of the
  same code: the flax+optax GPT training step of `dl_programs.py` in a Python loop of steps
  that logs each loss (`jax.jit(hlofuse.jax_function(step))` and, closer to how a user adds
  hlofuse to a step, only the loss's value_and_grad as a jax_function inside jax.jit), and
  PureJaxRL's PPO (`purejaxrl.py`: gymnax rollouts in a scan feeding the policy update),
  `jax.jit(hlofuse.jax_function(make_train(config)))`. Losses (outputs) are compared;
* grads: `jax.grad` through `hlofuse.jax_function(f)` against `jax.grad(f)` for every program
  in `dl_programs.py`, `thirdparty/` (small size) and the differential suite
  (`tests/programs.py`) that has a gradient: the scalar is the sum of the program's inexact
  outputs, the gradient taken w.r.t. every inexact input leaf. Programs jax itself cannot
  differentiate (integer or key inputs only, while loops) are listed as such. Where the f32
  gradients differ beyond the program's tolerance, both are compared with jax's f64 gradient:
  "match (vs f64)" when hlofuse's error is at most twice jax's (an ill-conditioned gradient).

    python benchmarks/jax_function.py [--parts overhead training grads] [--repeat 10]
Writes results/jax_function.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness


def _overhead(repeat: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import hlofuse

    def add_one(x: jax.Array) -> jax.Array:
        return x + 1.0

    x = jnp.zeros(16, jnp.float32)
    xn = np.zeros(16, np.float32)
    g = hlofuse.jax_function(add_one)
    exe = hlofuse.compile(hlofuse.from_jax(add_one, x), pipeline="hlofuse")
    calls, loop = 200, 1000
    jg, jf = jax.jit(g), jax.jit(add_one)

    def batch(fn: Any, arg: Any) -> Any:
        def run() -> Any:
            out = None
            for _ in range(calls):
                out = fn(arg)
            return jax.block_until_ready(out)
        return run

    looped_g = jax.jit(lambda x: jax.lax.fori_loop(0, loop, lambda i, v: g(v), x))
    looped_f = jax.jit(lambda x: jax.lax.fori_loop(0, loop, lambda i, v: add_one(v), x))
    assert "hlofuse_entry" in looped_g.lower(x).as_text()
    np.testing.assert_allclose(np.asarray(looped_g(x)), np.asarray(looped_f(x)))
    best = harness.interleaved({
        "direct executable": batch(exe, xn),
        "jax.jit(jax_function)": batch(jg, x),
        "jax.jit": batch(jf, x),
        "custom call in a loop": lambda: jax.block_until_ready(looped_g(x)),
        "jax kernel in a loop": lambda: jax.block_until_ready(looped_f(x)),
    }, repeat)
    us = {k: v / calls * 1e6 for k, v in best.items() if "loop" not in k}
    us.update({k: v / loop * 1e6 for k, v in best.items() if "loop" in k})
    return {"us_per_call": us,
            "dispatch_over_jax_us": us["jax.jit(jax_function)"] - us["jax.jit"],
            "custom_call_in_loop_us": us["custom call in a loop"]}


def _gpt_loop(repeat: int, layers: int, steps: int) -> dict[str, Any]:
    import dl_programs as dl
    import jax
    import numpy as np
    import optax

    import hlofuse

    step = dl.make_gpt_step(layers)
    model = dl.GPT(layers)
    params, opt, tokens = jax.device_put(dl._gpt_args(layers))
    grads = hlofuse.jax_function(jax.value_and_grad(
        lambda p, t: dl._gpt_loss(model, p, t)))

    def grads_only(params: Any, opt_state: Any, tokens: Any) -> Any:
        loss, g = grads(params, tokens)
        updates, opt_state = dl._GPT_TX.update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    variants = {"jax.jit": jax.jit(step),
                "jax.jit(jax_function(step))": jax.jit(hlofuse.jax_function(step)),
                "jax.jit(step with jax_function(value_and_grad))": jax.jit(grads_only)}
    losses: dict[str, list[float]] = {}

    def loop(fn: Any, name: str) -> Any:
        def run() -> Any:
            p, o = params, opt
            ls = []
            for _ in range(steps):
                p, o, loss = fn(p, o, tokens)
                ls.append(float(loss))  # a training loop logs its loss
            losses[name] = ls
            return p
        return run

    best = harness.interleaved({k: loop(f, k) for k, f in variants.items()}, repeat)
    ref = np.array(losses["jax.jit"])
    return {"program": f"gpt{layers}_train_step x {steps} steps (flax+optax)",
            "seconds": best,
            "vs_jax": {k: best["jax.jit"] / v for k, v in best.items()},
            "losses": losses,
            "max_loss_rel_diff": {k: float(np.max(np.abs(np.array(v) - ref) / np.abs(ref)))
                                  for k, v in losses.items()}}


def _ppo(repeat: int) -> dict[str, Any]:
    import jax
    import numpy as np
    from thirdparty import common
    from thirdparty.purejaxrl import PROGRAMS

    import hlofuse

    prog = PROGRAMS[0]
    case = prog.build(False)
    ref_fn, hl_fn = jax.jit(case.fn), jax.jit(hlofuse.jax_function(case.fn))
    start = time.perf_counter()
    want = jax.block_until_ready(ref_fn(*case.args))
    jax_compile = time.perf_counter() - start
    start = time.perf_counter()
    got = jax.block_until_ready(hl_fn(*case.args))
    hl_compile = time.perf_counter() - start
    small = prog.build(True)
    ok, why = common.compare(prog, jax.jit(hlofuse.jax_function(small.fn))(*small.args),
                             jax.jit(small.fn)(*small.args))
    agree = float(np.mean([np.allclose(a, b, rtol=prog.rtol, atol=prog.atol)
                           for a, b in zip(common.leaves(got), common.leaves(want),
                                           strict=True)]))
    best = harness.interleaved({"jax.jit": lambda: jax.block_until_ready(ref_fn(*case.args)),
                                "jax.jit(jax_function(train))":
                                    lambda: jax.block_until_ready(hl_fn(*case.args))}, repeat)
    return {"program": f"ppo-cartpole ({case.size}, purejaxrl)", "seconds": best,
            "vs_jax": best["jax.jit"] / best["jax.jit(jax_function(train))"],
            "first_call_s": {"jax.jit": jax_compile, "jax_function": hl_compile},
            "small_size_matches": ok, "small_size_why": why,
            "benchmark_size_equal_leaves": agree}


def _float_leaves(tree: Any) -> list[Any]:
    import jax
    import jax.numpy as jnp

    return [x for x in jax.tree_util.tree_leaves(tree)
            if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.inexact)]


def _grad_check(name: str, fn: Any, args: tuple[Any, ...], static: tuple[int, ...],
                rtol: float, atol: float) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import hlofuse

    dyn = [i for i in range(len(args)) if i not in static]
    leaves, tree = jax.tree_util.tree_flatten([args[i] for i in dyn])
    inexact = [i for i, x in enumerate(leaves)
               if hasattr(x, "dtype") and jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)]
    if not inexact:
        return {"program": name, "status": "no inexact input"}

    def scalar(f: Any) -> Any:
        def s(*xs: Any) -> Any:
            full = list(leaves)
            for i, x in zip(inexact, xs, strict=True):
                full[i] = x
            call = list(args)
            for i, v in zip(dyn, tree.unflatten(full), strict=True):
                call[i] = v
            outs = _float_leaves(f(*call))
            return sum(jnp.sum(o.astype(jnp.float32)) for o in outs) if outs else 0.0
        return s

    xs = [leaves[i] for i in inexact]
    argnums = tuple(range(len(xs)))
    try:
        want = jax.jit(jax.grad(scalar(fn), argnums=argnums))(*xs)
    except Exception as exc:  # (jax cannot differentiate it: reported, not a failure)
        return {"program": name, "status": "jax.grad fails",
                "why": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
    g = hlofuse.jax_function(fn, static_argnums=static)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = jax.jit(jax.grad(scalar(g), argnums=argnums))(*xs)
        except Exception as exc:
            return {"program": name, "status": "error",
                    "why": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    first = time.perf_counter() - start
    fell_back = [str(w.message)[:200] for w in caught if "jax compiles it" in str(w.message)]
    bad = sum(int((~np.isclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                rtol=rtol, atol=atol, equal_nan=True)).sum())
              for a, b in zip(got, want, strict=True))
    row = {"program": name, "status": "match" if not bad else "mismatch",
           "elements_outside_tolerance": bad, "max_abs_error_over_scale": _error(got, want),
           "gradient_leaves": len(xs), "first_call_s": first, "warnings": fell_back}
    if bad:
        # An ill-conditioned gradient (an optimizer step's derivative through Adam's
        # g / (sqrt(g^2) + eps) is ~1/eps where g is small) amplifies last-bit differences of
        # the forward pass: judge both f32 gradients against jax's in f64 instead
        try:
            with jax.enable_x64(True):
                ref = jax.jit(jax.grad(scalar(fn), argnums=argnums))(
                    *[jnp.asarray(np.asarray(x), jnp.float64) for x in xs])
        except Exception as exc:  # (a library that fixes its dtypes: no f64 run)
            row["why"] = f"no f64 reference ({type(exc).__name__})"
        else:
            e_jax, e_hl = _error(want, ref), _error(got, ref)
            row.update(jax_f32_error_vs_f64=e_jax, hlofuse_f32_error_vs_f64=e_hl)
            if e_hl <= 2 * e_jax + 1e-6:
                row["status"] = "match (vs f64)"
    if fell_back:
        row["status"] = "jax lowered it"
    return row


def _error(got: Any, want: Any) -> float:
    """The largest |got - want| over the largest |want| (at least 1), over all leaves, where
    both are finite."""
    import numpy as np

    worst = 0.0
    for a, b in zip(got, want, strict=True):
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        ok = np.isfinite(a64) & np.isfinite(b64)
        if ok.any():
            scale = max(1.0, float(np.max(np.abs(b64[ok]))))
            worst = max(worst, float(np.max(np.abs(a64 - b64)[ok])) / scale)
    return worst


def _grads(only: list[str] | None) -> list[dict[str, Any]]:
    import dl_programs as dl
    import jax
    from thirdparty import PROGRAMS as THIRDPARTY

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import programs as suite  # the differential suite's JAX programs

    rows = []
    cases: list[tuple[str, Any, tuple[Any, ...], tuple[int, ...], float, float]] = []
    for p in dl.PROGRAMS:
        if p.quick:
            cases.append((p.name, p.fn, tuple(jax.device_put(p.make_args())), (), 1e-3, 1e-4))
    for p in THIRDPARTY:
        case = p.build(True)
        cases.append((p.name, case.fn, case.args, case.static_argnums, 2e-3, 1e-4))
    for t in suite.PROGRAMS:
        cases.append((t.name, t.fn, tuple(t.make_args()), (), max(t.rtol, 1e-4),
                      max(t.atol, 1e-5)))
    for name, fn, args, static, rtol, atol in cases:
        if only and name not in only:
            continue
        try:
            row = _grad_check(name, fn, args, static, rtol, atol)
        except Exception:
            row = {"program": name, "status": "error",
                   "why": traceback.format_exc().splitlines()[-1][:200]}
        print(f"  {name}: {row['status']} {row.get('max_abs_error_over_scale', '')} "
              f"{row.get('why', '')}", flush=True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="*", default=["overhead", "training", "grads"])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--only", nargs="*", default=None, help="grads: these programs only")
    ap.add_argument("--merge", action="store_true",
                    help="update results/jax_function.json: these parts (grads: these rows)")
    ns = ap.parse_args(argv)
    out: dict[str, Any] = {"benchmark": "jax_function", "machine": harness.machine(),
                           "repeat": ns.repeat}
    old: dict[str, Any] = {}
    if ns.merge and (harness.RESULTS / "jax_function.json").exists():
        old = json.loads((harness.RESULTS / "jax_function.json").read_text())
    if "overhead" in ns.parts:
        out["overhead"] = _overhead(ns.repeat)
        print("overhead (us per call):", {k: round(v, 2) for k, v in
                                           out["overhead"]["us_per_call"].items()}, flush=True)
    if "training" in ns.parts:
        out["gpt"] = _gpt_loop(ns.repeat, 2, ns.steps)
        print("gpt2 loop vs jax.jit:", {k: round(v, 3) for k, v in out["gpt"]["vs_jax"].items()},
              "max loss rel diff:", out["gpt"]["max_loss_rel_diff"], flush=True)
        out["ppo"] = _ppo(max(3, ns.repeat // 2))
        print("ppo vs jax.jit:", round(out["ppo"]["vs_jax"], 3), "small size matches:",
              out["ppo"]["small_size_matches"], flush=True)
    if "grads" in ns.parts:
        out["grads"] = _grads(ns.only)
        n = sum(r["status"].startswith("match") for r in out["grads"])
        d = sum(r["status"] not in ("jax.grad fails", "no inexact input") for r in out["grads"])
        print(f"grads: {n} of {d} differentiable programs match jax.grad", flush=True)
    if old:
        rows = {r["program"]: r for r in old.get("grads", [])}
        rows.update({r["program"]: r for r in out.get("grads", [])})
        out = {**old, **out, "grads": list(rows.values())} if rows else {**old, **out}
        out["merged"] = True  # (parts measured in more than one run)
    print(f"wrote {harness.save('jax_function', out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
