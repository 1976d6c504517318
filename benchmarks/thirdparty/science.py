"""Scientific computing: diffrax's adaptive ODE solve, evosax's evolution strategies, jumanji's
environments.

diffrax, as its "getting started" page writes an adaptive solve: `diffeqsolve(ODETerm(f),
Tsit5(), t0, t1, dt0, y0, saveat=SaveAt(ts=...), stepsize_controller=PIDController(rtol, atol))`
on the Lotka-Volterra equations, `jax.vmap`ped over initial conditions. `throw=True` (the
default) keeps equinox's runtime error check, which jax lowers to a host callback.

Its step counts (`num_steps`, accepted + rejected steps) are rounding noise, not a property
hlofuse can match: in f32 with rtol = atol = 1e-5 the local error estimate (a sum of 7
nearly-cancelling terms) is accurate to 0.3% (median; 4% at the 90th percentile, measured per
step against f64), so any last-bit difference flips accept/reject decisions. Measured on the
benchmark size (1024 solves, about 21 steps each): jax.jit against itself with every initial
condition moved by one ulp gives other counts in 31% of the solves (steps -5..+4), jax.jit on
this host without FMA (`--xla_cpu_max_isa=AVX`) 31% (-4..+4), f32 against f64 71% (hlofuse
72%); hlofuse against jax.jit 28.5% (-5..+4). Emulating XLA's last bits in the interpreter
(its small dots summed in f32, `x / c` as `x * (1/c)`, glibc's powf) gives jax.jit's counts,
and `ys`, bit for bit when XLA runs without FMA; with the FMA contraction XLA's LLVM makes,
28% still differ. So the check: `ys` within 1e-3, all but 1% of the counts within 5 steps
(`int_atol`, `int_mismatch`).

evosax 0.3, as its README writes an optimisation loop: `es.init`, then `es.ask` / fitness /
`es.tell` each generation, here inside `lax.scan`: CMA-ES (a symmetric eigendecomposition per
generation) and OpenAI-ES on the Rastrigin function.

jumanji, as its README batches an environment: `jax.vmap(env.reset)` over keys, then
`jax.vmap(run_n_steps)` with `run_n_steps` a `lax.scan` of `env.step` over random actions.
"""

from __future__ import annotations

from typing import Any

from .common import Case, Program


def make_diffrax(batch: int, saves: int) -> tuple[Any, tuple[Any, ...]]:
    import diffrax
    import jax
    import jax.numpy as jnp

    def vector_field(t: Any, y: Any, args: Any) -> Any:
        prey, predator = y
        α, β, γ, δ = args
        d_prey = α * prey - β * prey * predator
        d_predator = -γ * predator + δ * prey * predator
        return jnp.stack([d_prey, d_predator])

    term = diffrax.ODETerm(vector_field)
    solver = diffrax.Tsit5()
    saveat = diffrax.SaveAt(ts=jnp.linspace(0, 30, saves))
    controller = diffrax.PIDController(rtol=1e-5, atol=1e-5)

    def solve(y0: Any, args: Any) -> Any:
        sol = diffrax.diffeqsolve(term, solver, t0=0, t1=30, dt0=0.1, y0=y0, args=args,
                                  saveat=saveat, stepsize_controller=controller,
                                  max_steps=4096)
        return sol.ys, sol.stats["num_steps"]

    def batched(y0s: Any, args: Any) -> Any:
        return jax.vmap(solve, in_axes=(0, None))(y0s, args)

    y0s = jax.random.uniform(jax.random.PRNGKey(5), (batch, 2), minval=5.0, maxval=15.0)
    args = jnp.array([0.1, 0.02, 0.4, 0.02])
    return batched, (y0s, args)


def _diffrax(small: bool) -> Case:
    b, s = (4, 5) if small else (1024, 50)
    fn, args = make_diffrax(b, s)
    return Case(fn, args, f"{b} solves, {s} saved times")


def rastrigin(x: Any) -> Any:
    import jax.numpy as jnp

    return 10.0 * x.shape[-1] + jnp.sum(x**2 - 10.0 * jnp.cos(2 * jnp.pi * x), axis=-1)


def make_evosax(algo: str, popsize: int, dim: int, generations: int) -> tuple[Any, tuple]:
    import jax
    import jax.numpy as jnp
    from evosax.algorithms import CMA_ES, Open_ES

    solution = jnp.zeros(dim)
    es = CMA_ES(population_size=popsize, solution=solution) if algo == "CMA_ES" else \
        Open_ES(population_size=popsize, solution=solution)
    params = es.default_params

    def run(key: Any, mean: Any) -> Any:
        key, key_init = jax.random.split(key)
        state = es.init(key_init, mean, params)

        def generation(carry: Any, _: Any) -> Any:
            key, state = carry
            key, key_ask, key_tell = jax.random.split(key, 3)
            population, state = es.ask(key_ask, state, params)
            fitness = jax.vmap(rastrigin)(population)
            state, metrics = es.tell(key_tell, population, fitness, state, params)
            return (key, state), metrics["best_fitness"]

        (_, state), best = jax.lax.scan(generation, (key, state), None, length=generations)
        return state.mean, best

    mean = jax.random.uniform(jax.random.PRNGKey(8), (dim,), minval=-3.0, maxval=3.0)
    return run, (jax.random.key(0), mean)


def _evosax(algo: str, popsize: int, dim: int, generations: int) -> Any:
    def build(small: bool) -> Case:
        p, d, g = (8, 4, 3) if small else (popsize, dim, generations)
        fn, args = make_evosax(algo, p, d, g)
        return Case(fn, args, f"population {p}, dimension {d}, {g} generations")
    return build


def make_jumanji(name: str, batch: int, steps: int) -> tuple[Any, tuple[Any, ...]]:
    import jax
    import jax.numpy as jnp
    import jumanji

    env = jumanji.make(name)

    num_values = jnp.asarray(env.action_spec.num_values)  # a vector for MultiDiscrete

    def step_fn(state: Any, key: Any) -> Any:
        action = jax.random.randint(key=key, minval=0, maxval=num_values,
                                    shape=num_values.shape)
        new_state, timestep = env.step(state, action)
        return new_state, timestep

    def run_n_steps(state: Any, key: Any, n: int) -> Any:
        random_keys = jax.random.split(key, n)
        state, rollout = jax.lax.scan(step_fn, state, random_keys)
        return rollout

    def run(key: Any) -> Any:
        key1, key2 = jax.random.split(key)
        state, _timestep = jax.vmap(env.reset)(jax.random.split(key1, batch))
        rollout = jax.vmap(run_n_steps, in_axes=(0, 0, None))(
            state, jax.random.split(key2, batch), steps)
        return rollout.reward.sum(-1), rollout.step_type, rollout.observation

    return run, (jax.random.PRNGKey(11),)


def _jumanji(name: str, batch: int, steps: int) -> Any:
    def build(small: bool) -> Case:
        b, s = (4, 8) if small else (batch, steps)
        fn, args = make_jumanji(name, b, s)
        return Case(fn, args, f"{b} envs x {s} steps")
    return build


_JUMANJI = "jumanji README: vmap(run_n_steps) of a lax.scan of env.step"
PROGRAMS = [
    Program("diffrax-tsit5-pid", "diffrax+equinox", "diffrax getting started: Tsit5 + "
            "PIDController, vmapped", _diffrax, rtol=1e-3, atol=1e-3, int_atol=5,
            int_mismatch=0.01),
    Program("evosax-cma-es", "evosax", "evosax README: ask/tell loop", _evosax("CMA_ES", 32, 16,
            50), rtol=1e-3, atol=1e-4, chaotic=True),
    Program("evosax-open-es", "evosax+optax", "evosax README: ask/tell loop",
            _evosax("Open_ES", 256, 64, 50), rtol=1e-3, atol=1e-4, chaotic=True),
    Program("jumanji-snake", "jumanji", _JUMANJI, _jumanji("Snake-v1", 256, 50)),
    Program("jumanji-game2048", "jumanji", _JUMANJI, _jumanji("Game2048-v1", 256, 50)),
    Program("jumanji-sudoku", "jumanji", _JUMANJI, _jumanji("Sudoku-v0", 256, 50)),
    Program("jumanji-minesweeper", "jumanji", _JUMANJI, _jumanji("Minesweeper-v0", 256, 50)),
]
