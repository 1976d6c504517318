"""Neural-network training steps as flax, equinox and optax document them.

    flax-cnn            flax's MNIST tutorial (linen): 2 conv, 2 avg-pool, 2 dense; the
                        `train_step(state, batch)` with a `TrainState` and optax SGD+momentum
    flax-cnn-trainstate the same, with the `TrainState` exactly as `TrainState.create` returns
                        it (`step=0`, a Python int)
    flax-resnet         flax's examples/imagenet ResNet18 (BatchNorm, `mutable=['batch_stats']`)
                        on 32x32 images, 16 filters
    flax-lstm           `nn.RNN(nn.OptimizedLSTMCell)` sequence classifier train step
    equinox-mlp         equinox's "train an MLP": `eqx.nn.MLP`, optax Adam; `eqx.partition` /
                        `eqx.combine` around the jitted step (equinox's docs for jax.jit users)
    optax-*             optax's README update step (`optimizer.update`, `apply_updates`) on the
                        parameters of an 8-layer MLP: adamw (+ clip_by_global_norm), lion,
                        adafactor
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from .common import Case, Program


def _cnn_module() -> Any:
    import flax.linen as nn

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x: Any) -> Any:
            x = nn.Conv(features=32, kernel_size=(3, 3))(x)
            x = nn.relu(x)
            x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
            x = nn.Conv(features=64, kernel_size=(3, 3))(x)
            x = nn.relu(x)
            x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
            x = x.reshape((x.shape[0], -1))
            x = nn.Dense(features=256)(x)
            x = nn.relu(x)
            x = nn.Dense(features=10)(x)
            return x

    return CNN


def _metrics(logits: Any, labels: Any) -> Any:
    import jax.numpy as jnp
    import optax

    loss = optax.softmax_cross_entropy_with_integer_labels(logits=logits, labels=labels).mean()
    accuracy = jnp.mean(jnp.argmax(logits, -1) == labels)
    return {"loss": loss, "accuracy": accuracy}


def train_step(state: Any, batch: Any) -> Any:
    """flax's MNIST tutorial `train_step`."""
    import jax
    import optax

    def loss_fn(params: Any) -> Any:
        logits = state.apply_fn({"params": params}, batch["image"])
        loss = optax.softmax_cross_entropy_with_integer_labels(
            logits=logits, labels=batch["label"]).mean()
        return loss, logits

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    (_, logits), grads = grad_fn(state.params)
    state = state.apply_gradients(grads=grads)
    return state, _metrics(logits, batch["label"])


def _cnn(as_created: bool) -> Callable[[bool], Case]:
    def build(small: bool) -> Case:
        import jax
        import jax.numpy as jnp
        import optax
        from flax.training import train_state

        batch = 4 if small else 32
        cnn = _cnn_module()()
        params = cnn.init(jax.random.PRNGKey(0), jnp.ones([1, 28, 28, 1]))["params"]
        state = train_state.TrainState.create(apply_fn=cnn.apply, params=params,
                                              tx=optax.sgd(0.01, 0.9))
        if not as_created:  # a state that came back from a jitted step: step is an array
            state = state.replace(step=jnp.asarray(state.step))
        key = jax.random.PRNGKey(1)
        images = jax.random.uniform(key, (batch, 28, 28, 1))
        labels = jax.random.randint(key, (batch,), 0, 10)
        return Case(train_step, (state, {"image": images, "label": labels}),
                    f"batch {batch} of 28x28x1")
    return build


def _resnet_module() -> Any:
    """flax examples/imagenet/models.py (ResNetBlock, ResNet), as written there."""
    import flax.linen as nn
    import jax.numpy as jnp

    ModuleDef = Any

    class ResNetBlock(nn.Module):
        filters: int
        conv: ModuleDef
        norm: ModuleDef
        act: Callable
        strides: tuple[int, int] = (1, 1)

        @nn.compact
        def __call__(self, x: Any) -> Any:
            residual = x
            y = self.conv(self.filters, (3, 3), self.strides)(x)
            y = self.norm()(y)
            y = self.act(y)
            y = self.conv(self.filters, (3, 3))(y)
            y = self.norm(scale_init=nn.initializers.zeros_init())(y)
            if residual.shape != y.shape:
                residual = self.conv(self.filters, (1, 1), self.strides, name="conv_proj")(
                    residual)
                residual = self.norm(name="norm_proj")(residual)
            return self.act(residual + y)

    class ResNet(nn.Module):
        stage_sizes: Any
        block_cls: ModuleDef
        num_classes: int
        num_filters: int = 64
        dtype: Any = jnp.float32
        act: Callable = nn.relu
        conv: ModuleDef = nn.Conv

        @nn.compact
        def __call__(self, x: Any, train: bool = True) -> Any:
            conv = partial(self.conv, use_bias=False, dtype=self.dtype)
            norm = partial(nn.BatchNorm, use_running_average=not train, momentum=0.9,
                           epsilon=1e-5, dtype=self.dtype, axis_name=None)
            x = conv(self.num_filters, (7, 7), (2, 2), padding=[(3, 3), (3, 3)],
                     name="conv_init")(x)
            x = norm(name="bn_init")(x)
            x = nn.relu(x)
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            for i, block_size in enumerate(self.stage_sizes):
                for j in range(block_size):
                    strides = (2, 2) if i > 0 and j == 0 else (1, 1)
                    x = self.block_cls(self.num_filters * 2**i, strides=strides, conv=conv,
                                       norm=norm, act=self.act)(x)
            x = jnp.mean(x, axis=(1, 2))
            x = nn.Dense(self.num_classes, dtype=self.dtype)(x)
            return jnp.asarray(x, self.dtype)

    return partial(ResNet, stage_sizes=[2, 2, 2, 2], block_cls=ResNetBlock)


def resnet_train_step(state: Any, batch: Any) -> Any:
    """flax examples/imagenet/train.py's `train_step` (no weight decay, no lr schedule)."""
    import jax
    import optax

    def loss_fn(params: Any) -> Any:
        logits, new_model_state = state.apply_fn(
            {"params": params, "batch_stats": state.batch_stats}, batch["image"],
            mutable=["batch_stats"])
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()
        return loss, (new_model_state, logits)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    aux, grads = grad_fn(state.params)
    new_model_state, logits = aux[1]
    new_state = state.apply_gradients(grads=grads,
                                      batch_stats=new_model_state["batch_stats"])
    return new_state, _metrics(logits, batch["label"])


def _resnet(small: bool) -> Case:
    import jax
    import jax.numpy as jnp
    import optax
    from flax.training import train_state

    class TrainState(train_state.TrainState):  # type: ignore[misc]
        batch_stats: Any

    # The small size has batch 4, not 2: 16x16 images reach 1x1 maps in the last two stages, and
    # BatchNorm over 2 values per channel makes the step ill-conditioned. Its backward scales by
    # 1 - xhat^2 = eps / (var + eps) (xhat = +-s for two values), computed with a relative error
    # of f32 rounding times (var + eps) / eps, 1e3 (median) to 1.6e5 there; flax's fast variance
    # (E[x^2] - E[x]^2) adds its own cancellation. At batch 2, outputs beyond rtol=2e-3/atol=1e-4
    # of jax.jit's: jax.jit itself with the images moved by one ulp 21-28 (a BatchNorm scale's
    # gradient off by 0.0055), jax.jit without FMA 37, hlofuse 33, its interpreter 10; against
    # the f64 step, jax.jit's f32 step 20. At batch 4: none (jax.jit moved by one ulp, hlofuse).
    batch, side = (4, 16) if small else (16, 32)
    model = _resnet_module()(num_classes=10, num_filters=16)
    variables = model.init(jax.random.PRNGKey(0), jnp.ones([1, side, side, 3]), train=False)
    state = TrainState.create(apply_fn=model.apply, params=variables["params"],
                              tx=optax.sgd(0.1, 0.9, nesterov=True),
                              batch_stats=variables["batch_stats"])
    key = jax.random.PRNGKey(2)
    images = jax.random.normal(key, (batch, side, side, 3))
    labels = jax.random.randint(key, (batch,), 0, 10)
    return Case(resnet_train_step, (state, {"image": images, "label": labels}),
                f"ResNet18/16 filters, batch {batch} of {side}x{side}x3")


def _lstm(small: bool) -> Case:
    import flax.linen as nn
    import jax
    import optax
    from flax.training import train_state

    class Classifier(nn.Module):
        vocab: int
        hidden: int

        @nn.compact
        def __call__(self, tokens: Any) -> Any:
            x = nn.Embed(self.vocab, self.hidden)(tokens)
            x = nn.RNN(nn.OptimizedLSTMCell(self.hidden))(x)
            return nn.Dense(2)(x[:, -1])

    batch, seq, hidden = (2, 6, 16) if small else (32, 64, 128)
    model = Classifier(vocab=1000, hidden=hidden)
    key = jax.random.PRNGKey(4)
    tokens = jax.random.randint(key, (batch, seq), 0, 1000)
    labels = jax.random.randint(key, (batch,), 0, 2)
    params = model.init(key, tokens)["params"]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params,
                                          tx=optax.adam(1e-3))
    return Case(train_step, (state, {"image": tokens, "label": labels}),
                f"batch {batch} x {seq} tokens, hidden {hidden}")


def _equinox(small: bool) -> Case:
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import optax

    width, depth, batch = (8, 2, 4) if small else (256, 4, 256)
    model = eqx.nn.MLP(in_size=32, out_size=1, width_size=width, depth=depth,
                       key=jax.random.PRNGKey(6))
    params, static = eqx.partition(model, eqx.is_array)
    optim = optax.adam(1e-3)
    opt_state = optim.init(params)

    def loss_fn(model: Any, x: Any, y: Any) -> Any:
        pred_y = jax.vmap(model)(x)
        return jnp.mean((y - pred_y) ** 2)

    def make_step(params: Any, opt_state: Any, x: Any, y: Any) -> Any:
        model = eqx.combine(params, static)
        loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x, y)
        updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        model = eqx.apply_updates(model, updates)
        return loss, eqx.filter(model, eqx.is_array), opt_state

    key = jax.random.PRNGKey(7)
    x = jax.random.normal(key, (batch, 32))
    y = jnp.sum(jnp.sin(x), axis=-1, keepdims=True)
    return Case(make_step, (params, opt_state, x, y),
                f"MLP 32-{width}x{depth}-1, batch {batch}")


def _optax(name: str) -> Callable[[bool], Case]:
    def build(small: bool) -> Case:
        import jax
        import optax

        width, layers = (16, 2) if small else (256, 8)
        keys = jax.random.split(jax.random.PRNGKey(9), layers)
        params = {f"layer{i}": {"w": jax.random.normal(k, (width, width)) * 0.05,
                                "b": jax.numpy.zeros(width)} for i, k in enumerate(keys)}
        optimizer = {
            "adamw": lambda: optax.chain(optax.clip_by_global_norm(1.0),
                                         optax.adamw(1e-3, weight_decay=1e-4)),
            "lion": lambda: optax.lion(1e-4),
            "adafactor": lambda: optax.adafactor(1e-3),
        }[name]()
        opt_state = optimizer.init(params)
        grads = jax.tree_util.tree_map(lambda p: p * 0.1 + 0.01, params)

        def update(grads: Any, opt_state: Any, params: Any) -> Any:
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        return Case(update, (grads, opt_state, params), f"{layers} layers of {width}x{width}")
    return build


_FLAX_MNIST = "flax MNIST tutorial (linen): train_step"
PROGRAMS = [
    Program("flax-cnn", "flax+optax", _FLAX_MNIST, _cnn(False), rtol=1e-3, atol=1e-5),
    Program("flax-cnn-trainstate", "flax+optax", _FLAX_MNIST + ", TrainState.create's state",
            _cnn(True), rtol=1e-3, atol=1e-5),
    Program("flax-resnet18", "flax+optax", "flax examples/imagenet: ResNet18 train_step",
            _resnet, rtol=2e-3, atol=1e-4),
    Program("flax-lstm", "flax+optax", "flax nn.RNN(OptimizedLSTMCell) classifier train step",
            _lstm, rtol=1e-3, atol=1e-5),
    Program("equinox-mlp", "equinox+optax", "equinox 'train an MLP' make_step", _equinox,
            rtol=1e-3, atol=1e-5),
    Program("optax-adamw", "optax", "optax README: update + apply_updates", _optax("adamw"),
            rtol=1e-4, atol=1e-6),
    Program("optax-lion", "optax", "optax README: update + apply_updates", _optax("lion"),
            rtol=1e-4, atol=1e-6),
    Program("optax-adafactor", "optax", "optax README: update + apply_updates",
            _optax("adafactor"), rtol=1e-4, atol=1e-6),
]
