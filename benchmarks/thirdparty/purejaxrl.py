"""PPO and DQN as PureJaxRL writes them (github.com/luchris429/purejaxrl, `ppo.py` and
`dqn.py`): the whole training run is one function `train(rng)` that jax.jit compiles, with the
gymnax environment, the flax network, the optax optimiser, distrax's categorical policy and
(DQN) flashbax's replay buffer inside it. The code below follows those files line for line
(comments dropped); only the config sizes differ, and `env.step`'s result is unpacked as
gymnax 1.0's (obs, state, reward, terminated, truncated, info), `done` their `or`.

    ppo   256 envs x 128 steps per update, GAE, 4 epochs x 4 minibatches, 2 updates
    dqn   16 envs, flashbax buffer of 10,000, batch 128, a target network; 200 updates
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .common import Case, Program


def _ppo_modules() -> Any:
    import distrax
    import flax.linen as nn
    import jax.numpy as jnp
    from flax.linen.initializers import constant, orthogonal

    class ActorCritic(nn.Module):
        action_dim: Sequence[int]
        activation: str = "tanh"

        @nn.compact
        def __call__(self, x: Any) -> Any:
            activation = nn.relu if self.activation == "relu" else nn.tanh
            actor_mean = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)),
                                  bias_init=constant(0.0))(x)
            actor_mean = activation(actor_mean)
            actor_mean = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)),
                                  bias_init=constant(0.0))(actor_mean)
            actor_mean = activation(actor_mean)
            actor_mean = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01),
                                  bias_init=constant(0.0))(actor_mean)
            pi = distrax.Categorical(logits=actor_mean)
            critic = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)),
                              bias_init=constant(0.0))(x)
            critic = activation(critic)
            critic = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)),
                              bias_init=constant(0.0))(critic)
            critic = activation(critic)
            critic = nn.Dense(1, kernel_init=orthogonal(1.0), bias_init=constant(0.0))(critic)
            return pi, jnp.squeeze(critic, axis=-1)

    return ActorCritic


class Transition(NamedTuple):
    done: Any
    action: Any
    value: Any
    reward: Any
    log_prob: Any
    obs: Any
    info: Any


def make_ppo_train(config: dict[str, Any]) -> Any:
    import gymnax
    import jax
    import jax.numpy as jnp
    import optax
    from flax.training.train_state import TrainState
    from gymnax.wrappers.purerl import FlattenObservationWrapper, LogWrapper

    ActorCritic = _ppo_modules()
    config["NUM_UPDATES"] = (
        config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    )
    config["MINIBATCH_SIZE"] = (
        config["NUM_ENVS"] * config["NUM_STEPS"] // config["NUM_MINIBATCHES"]
    )
    env, env_params = gymnax.make(config["ENV_NAME"])
    env = FlattenObservationWrapper(env)
    env = LogWrapper(env)

    def linear_schedule(count: Any) -> Any:
        frac = (
            1.0
            - (count // (config["NUM_MINIBATCHES"] * config["UPDATE_EPOCHS"]))
            / config["NUM_UPDATES"]
        )
        return config["LR"] * frac

    def train(rng: Any) -> Any:
        network = ActorCritic(env.action_space(env_params).n, activation=config["ACTIVATION"])
        rng, _rng = jax.random.split(rng)
        init_x = jnp.zeros(env.observation_space(env_params).shape)
        network_params = network.init(_rng, init_x)
        if config["ANNEAL_LR"]:
            tx = optax.chain(
                optax.clip_by_global_norm(config["MAX_GRAD_NORM"]),
                optax.adam(learning_rate=linear_schedule, eps=1e-5),
            )
        else:
            tx = optax.chain(
                optax.clip_by_global_norm(config["MAX_GRAD_NORM"]),
                optax.adam(config["LR"], eps=1e-5),
            )
        train_state = TrainState.create(apply_fn=network.apply, params=network_params, tx=tx)

        rng, _rng = jax.random.split(rng)
        reset_rng = jax.random.split(_rng, config["NUM_ENVS"])
        obsv, env_state = jax.vmap(env.reset, in_axes=(0, None))(reset_rng, env_params)

        def _update_step(runner_state: Any, unused: Any) -> Any:
            def _env_step(runner_state: Any, unused: Any) -> Any:
                train_state, env_state, last_obs, rng = runner_state
                rng, _rng = jax.random.split(rng)
                pi, value = network.apply(train_state.params, last_obs)
                action = pi.sample(seed=_rng)
                log_prob = pi.log_prob(action)
                rng, _rng = jax.random.split(rng)
                rng_step = jax.random.split(_rng, config["NUM_ENVS"])
                obsv, env_state, reward, terminated, truncated, info = jax.vmap(
                    env.step, in_axes=(0, 0, 0, None))(rng_step, env_state, action, env_params)
                done = jnp.logical_or(terminated, truncated)  # gymnax 1.0's 6-tuple
                transition = Transition(done, action, value, reward, log_prob, last_obs, info)
                runner_state = (train_state, env_state, obsv, rng)
                return runner_state, transition

            runner_state, traj_batch = jax.lax.scan(
                _env_step, runner_state, None, config["NUM_STEPS"])
            train_state, env_state, last_obs, rng = runner_state
            _, last_val = network.apply(train_state.params, last_obs)

            def _calculate_gae(traj_batch: Any, last_val: Any) -> Any:
                def _get_advantages(gae_and_next_value: Any, transition: Any) -> Any:
                    gae, next_value = gae_and_next_value
                    done, value, reward = transition.done, transition.value, transition.reward
                    delta = reward + config["GAMMA"] * next_value * (1 - done) - value
                    gae = delta + config["GAMMA"] * config["GAE_LAMBDA"] * (1 - done) * gae
                    return (gae, value), gae

                _, advantages = jax.lax.scan(
                    _get_advantages, (jnp.zeros_like(last_val), last_val), traj_batch,
                    reverse=True, unroll=16)
                return advantages, advantages + traj_batch.value

            advantages, targets = _calculate_gae(traj_batch, last_val)

            def _update_epoch(update_state: Any, unused: Any) -> Any:
                def _update_minbatch(train_state: Any, batch_info: Any) -> Any:
                    traj_batch, advantages, targets = batch_info

                    def _loss_fn(params: Any, traj_batch: Any, gae: Any, targets: Any) -> Any:
                        pi, value = network.apply(params, traj_batch.obs)
                        log_prob = pi.log_prob(traj_batch.action)
                        value_pred_clipped = traj_batch.value + (
                            value - traj_batch.value
                        ).clip(-config["CLIP_EPS"], config["CLIP_EPS"])
                        value_losses = jnp.square(value - targets)
                        value_losses_clipped = jnp.square(value_pred_clipped - targets)
                        value_loss = 0.5 * jnp.maximum(value_losses, value_losses_clipped).mean()
                        ratio = jnp.exp(log_prob - traj_batch.log_prob)
                        gae = (gae - gae.mean()) / (gae.std() + 1e-8)
                        loss_actor1 = ratio * gae
                        loss_actor2 = jnp.clip(
                            ratio, 1.0 - config["CLIP_EPS"], 1.0 + config["CLIP_EPS"]) * gae
                        loss_actor = -jnp.minimum(loss_actor1, loss_actor2).mean()
                        entropy = pi.entropy().mean()
                        total_loss = (loss_actor + config["VF_COEF"] * value_loss
                                      - config["ENT_COEF"] * entropy)
                        return total_loss, (value_loss, loss_actor, entropy)

                    grad_fn = jax.value_and_grad(_loss_fn, has_aux=True)
                    total_loss, grads = grad_fn(train_state.params, traj_batch, advantages,
                                                targets)
                    train_state = train_state.apply_gradients(grads=grads)
                    return train_state, total_loss

                train_state, traj_batch, advantages, targets, rng = update_state
                rng, _rng = jax.random.split(rng)
                batch_size = config["MINIBATCH_SIZE"] * config["NUM_MINIBATCHES"]
                assert batch_size == config["NUM_STEPS"] * config["NUM_ENVS"]
                permutation = jax.random.permutation(_rng, batch_size)
                batch = (traj_batch, advantages, targets)
                batch = jax.tree_util.tree_map(
                    lambda x: x.reshape((batch_size,) + x.shape[2:]), batch)  # noqa: RUF005
                shuffled_batch = jax.tree_util.tree_map(
                    lambda x: jnp.take(x, permutation, axis=0), batch)
                minibatches = jax.tree_util.tree_map(
                    lambda x: jnp.reshape(x, [config["NUM_MINIBATCHES"], -1] + list(x.shape[1:])),  # noqa: RUF005
                    shuffled_batch)
                train_state, total_loss = jax.lax.scan(_update_minbatch, train_state,
                                                       minibatches)
                update_state = (train_state, traj_batch, advantages, targets, rng)
                return update_state, total_loss

            update_state = (train_state, traj_batch, advantages, targets, rng)
            update_state, loss_info = jax.lax.scan(  # noqa: RUF059
                _update_epoch, update_state, None, config["UPDATE_EPOCHS"])
            train_state = update_state[0]
            metric = traj_batch.info
            rng = update_state[-1]
            runner_state = (train_state, env_state, last_obs, rng)
            return runner_state, metric

        rng, _rng = jax.random.split(rng)
        runner_state = (train_state, env_state, obsv, _rng)
        runner_state, metric = jax.lax.scan(_update_step, runner_state, None,
                                            config["NUM_UPDATES"])
        return {"runner_state": runner_state, "metrics": metric}

    return train


def ppo_config(envs: int, steps: int, updates: int, epochs: int, minibatches: int
               ) -> dict[str, Any]:
    return {
        "LR": 2.5e-4, "NUM_ENVS": envs, "NUM_STEPS": steps,
        "TOTAL_TIMESTEPS": envs * steps * updates, "UPDATE_EPOCHS": epochs,
        "NUM_MINIBATCHES": minibatches, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2,
        "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh",
        "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True,
    }


def _ppo(small: bool) -> Case:
    import jax

    if small:
        config, size = ppo_config(16, 16, 1, 2, 2), "16 envs x 16 steps, 2 x 2 minibatches"
    else:
        config, size = ppo_config(256, 128, 2, 4, 4), \
            "256 envs x 128 steps, 4 x 4 minibatches, 2 updates"
    return Case(make_ppo_train(config), (jax.random.PRNGKey(30),), size)


# --- DQN (purejaxrl/dqn.py) -------------------------------------------------------------------

def _dqn_modules() -> Any:
    import flax.linen as nn
    from flax.training.train_state import TrainState

    class QNetwork(nn.Module):
        action_dim: int

        @nn.compact
        def __call__(self, x: Any) -> Any:
            x = nn.Dense(120)(x)
            x = nn.relu(x)
            x = nn.Dense(84)(x)
            x = nn.relu(x)
            x = nn.Dense(self.action_dim)(x)
            return x

    class CustomTrainState(TrainState):  # type: ignore[misc]
        target_network_params: Any
        timesteps: int
        n_updates: int

    return QNetwork, CustomTrainState


class TimeStep(NamedTuple):
    obs: Any
    action: Any
    reward: Any
    done: Any


def make_dqn_train(config: dict[str, Any]) -> Any:
    import flashbax as fbx
    import gymnax
    import jax
    import jax.numpy as jnp
    import optax
    from gymnax.wrappers.purerl import FlattenObservationWrapper, LogWrapper

    QNetwork, CustomTrainState = _dqn_modules()
    config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_ENVS"]
    basic_env, env_params = gymnax.make(config["ENV_NAME"])
    env = FlattenObservationWrapper(basic_env)
    env = LogWrapper(env)
    vmap_reset = lambda n_envs: lambda rng: jax.vmap(env.reset, in_axes=(0, None))(  # noqa: E731
        jax.random.split(rng, n_envs), env_params)
    vmap_step = lambda n_envs: lambda rng, env_state, action: jax.vmap(  # noqa: E731
        env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(rng, n_envs), env_state, action, env_params)

    def train(rng: Any) -> Any:
        rng, _rng = jax.random.split(rng)
        init_obs, env_state = vmap_reset(config["NUM_ENVS"])(_rng)
        buffer = fbx.make_flat_buffer(
            max_length=config["BUFFER_SIZE"], min_length=config["BUFFER_BATCH_SIZE"],
            sample_batch_size=config["BUFFER_BATCH_SIZE"], add_sequences=False,
            add_batch_size=config["NUM_ENVS"])
        buffer = buffer.replace(
            init=jax.jit(buffer.init), add=jax.jit(buffer.add, donate_argnums=0),
            sample=jax.jit(buffer.sample), can_sample=jax.jit(buffer.can_sample))
        rng = jax.random.PRNGKey(0)
        _action = basic_env.action_space().sample(rng)
        _, _env_state = env.reset(rng, env_params)
        _obs, _, _reward, _done, _, _ = env.step(rng, _env_state, _action, env_params)
        _timestep = TimeStep(obs=_obs, action=_action, reward=_reward, done=_done)
        buffer_state = buffer.init(_timestep)

        network = QNetwork(action_dim=env.action_space(env_params).n)
        rng, _rng = jax.random.split(rng)
        init_x = jnp.zeros(env.observation_space(env_params).shape)
        network_params = network.init(_rng, init_x)

        def linear_schedule(count: Any) -> Any:
            frac = 1.0 - (count / config["NUM_UPDATES"])
            return config["LR"] * frac

        lr = linear_schedule if config.get("LR_LINEAR_DECAY", False) else config["LR"]
        tx = optax.adam(learning_rate=lr)
        train_state = CustomTrainState.create(
            apply_fn=network.apply, params=network_params,
            target_network_params=jax.tree_util.tree_map(lambda x: jnp.copy(x), network_params),
            tx=tx, timesteps=0, n_updates=0)

        def eps_greedy_exploration(rng: Any, q_vals: Any, t: Any) -> Any:
            rng_a, rng_e = jax.random.split(rng, 2)
            eps = jnp.clip(
                ((config["EPSILON_FINISH"] - config["EPSILON_START"])
                 / config["EPSILON_ANNEAL_TIME"]) * t + config["EPSILON_START"],
                config["EPSILON_FINISH"])
            greedy_actions = jnp.argmax(q_vals, axis=-1)
            chosed_actions = jnp.where(
                jax.random.uniform(rng_e, greedy_actions.shape) < eps,
                jax.random.randint(rng_a, shape=greedy_actions.shape, minval=0,
                                   maxval=q_vals.shape[-1]),
                greedy_actions)
            return chosed_actions

        def _update_step(runner_state: Any, unused: Any) -> Any:
            train_state, buffer_state, env_state, last_obs, rng = runner_state
            rng, rng_a, rng_s = jax.random.split(rng, 3)
            q_vals = network.apply(train_state.params, last_obs)
            action = eps_greedy_exploration(rng_a, q_vals, train_state.timesteps)
            obs, env_state, reward, terminated, truncated, info = vmap_step(
                config["NUM_ENVS"])(rng_s, env_state, action)
            done = jnp.logical_or(terminated, truncated)  # gymnax 1.0's 6-tuple
            train_state = train_state.replace(
                timesteps=train_state.timesteps + config["NUM_ENVS"])
            timestep = TimeStep(obs=last_obs, action=action, reward=reward, done=done)
            buffer_state = buffer.add(buffer_state, timestep)

            def _learn_phase(train_state: Any, rng: Any) -> Any:
                learn_batch = buffer.sample(buffer_state, rng).experience
                q_next_target = network.apply(train_state.target_network_params,
                                              learn_batch.second.obs)
                q_next_target = jnp.max(q_next_target, axis=-1)
                target = (learn_batch.first.reward
                          + (1 - learn_batch.first.done) * config["GAMMA"] * q_next_target)

                def _loss_fn(params: Any) -> Any:
                    q_vals = network.apply(params, learn_batch.first.obs)
                    chosen_action_qvals = jnp.take_along_axis(
                        q_vals, jnp.expand_dims(learn_batch.first.action, axis=-1), axis=-1
                    ).squeeze(axis=-1)
                    return jnp.mean((chosen_action_qvals - target) ** 2)

                loss, grads = jax.value_and_grad(_loss_fn)(train_state.params)
                train_state = train_state.apply_gradients(grads=grads)
                train_state = train_state.replace(n_updates=train_state.n_updates + 1)
                return train_state, loss

            rng, _rng = jax.random.split(rng)
            is_learn_time = (
                (buffer.can_sample(buffer_state))
                & (train_state.timesteps > config["LEARNING_STARTS"])
                & (train_state.timesteps % config["TRAINING_INTERVAL"] == 0))
            train_state, loss = jax.lax.cond(
                is_learn_time, lambda train_state, rng: _learn_phase(train_state, rng),
                lambda train_state, rng: (train_state, jnp.array(0.0)), train_state, _rng)
            train_state = jax.lax.cond(
                train_state.timesteps % config["TARGET_UPDATE_INTERVAL"] == 0,
                lambda train_state: train_state.replace(
                    target_network_params=optax.incremental_update(
                        train_state.params, train_state.target_network_params, config["TAU"])),
                lambda train_state: train_state, operand=train_state)
            metrics = {"timesteps": train_state.timesteps, "updates": train_state.n_updates,
                       "loss": loss.mean(), "returns": info["returned_episode_returns"].mean()}
            runner_state = (train_state, buffer_state, env_state, obs, rng)
            return runner_state, metrics

        rng, _rng = jax.random.split(rng)
        runner_state = (train_state, buffer_state, env_state, init_obs, _rng)
        runner_state, metrics = jax.lax.scan(_update_step, runner_state, None,
                                             config["NUM_UPDATES"])
        return {"runner_state": runner_state, "metrics": metrics}

    return train


def dqn_config(envs: int, updates: int) -> dict[str, Any]:
    return {
        "NUM_ENVS": envs, "BUFFER_SIZE": 10000, "BUFFER_BATCH_SIZE": 128,
        "TOTAL_TIMESTEPS": envs * updates, "EPSILON_START": 1.0, "EPSILON_FINISH": 0.05,
        "EPSILON_ANNEAL_TIME": 25e4, "TARGET_UPDATE_INTERVAL": 160, "LR": 2.5e-4,
        "LEARNING_STARTS": 160, "TRAINING_INTERVAL": 16, "LR_LINEAR_DECAY": False,
        "GAMMA": 0.99, "TAU": 1.0, "ENV_NAME": "CartPole-v1",
    }


def _dqn(small: bool) -> Case:
    import jax

    config, size = (dqn_config(16, 20), "16 envs, 20 updates") if small else \
        (dqn_config(16, 200), "16 envs, 200 updates, buffer 10,000, batch 128")
    return Case(make_dqn_train(config), (jax.random.PRNGKey(31),), size)


PROGRAMS = [
    Program("ppo-cartpole", "purejaxrl: gymnax+flax+optax+distrax", "purejaxrl/ppo.py",
            _ppo, rtol=2e-3, atol=2e-4, chaotic=True),
    Program("dqn-cartpole", "purejaxrl: gymnax+flax+optax+flashbax", "purejaxrl/dqn.py",
            _dqn, rtol=2e-3, atol=2e-4, chaotic=True),
]
