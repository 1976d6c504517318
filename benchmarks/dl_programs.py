"""The deep-learning programs of benchmarks/dl.py, written with JAX, flax (linen) and optax.

Each `Program` has a function and its arguments (pytrees of arrays); `fn(*args)` is what both
hlofuse and jax.jit compile. Sizes follow issue 12: softmax and layernorms over [512, 384] rows,
a GELU MLP and attention at transformer sizes (d = 128, 8 sequences of 64 tokens), a flax MLP
forward and train step, an optax AdamW update of a GPT's parameters, and a GPT-style training
step (flax + optax AdamW; d = 128, 4 heads, 8 x 64 tokens, vocabulary 256) at 2 and 8 layers.

`atol`/`rtol` are the tolerances of the check against jax.jit: float32 results reordered by a
different blocking (dots, reductions) differ in the last bits; a train step's AdamW update
divides by sqrt(v), so a gradient near zero can flip its first update by up to 2 * lr.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

D, HEADS, BATCH, SEQ, VOCAB = 128, 4, 8, 64, 256
LR = 1e-3


@dataclass
class Program:
    name: str
    fn: Callable[..., Any]
    make_args: Callable[[], tuple[Any, ...]]
    atol: float = 1e-4
    rtol: float = 1e-4
    quick: bool = True  # part of --quick
    note: str = ""
    torch_fn: Callable[..., Any] | None = None  # the same program on torch tensors, if written


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _f32(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ----- row-wise kernels ---------------------------------------------------------------------

def softmax(x: jax.Array) -> jax.Array:
    return jax.nn.softmax(x, axis=-1)


def _layernorm(x: jax.Array, g: jax.Array, b: jax.Array) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * g + b


def layernorm(x: jax.Array, g: jax.Array, b: jax.Array) -> jax.Array:
    return _layernorm(x, g, b)


def layernorm_gelu(x: jax.Array, g: jax.Array, b: jax.Array) -> jax.Array:
    return jax.nn.gelu(_layernorm(x, g, b))


def _rows_args() -> tuple[Any, ...]:
    r = _rng(0)
    return _f32(r, 512, 384), _f32(r, 384), _f32(r, 384)


# ----- GELU MLP and attention ---------------------------------------------------------------

def gelu_mlp(x: jax.Array, w1: jax.Array, b1: jax.Array, w2: jax.Array, b2: jax.Array
             ) -> jax.Array:
    return jax.nn.gelu(x @ w1 + b1) @ w2 + b2


def _mlp_args() -> tuple[Any, ...]:
    r = _rng(1)
    return (_f32(r, BATCH * SEQ, D), _f32(r, D, 4 * D, scale=D ** -0.5), _f32(r, 4 * D),
            _f32(r, 4 * D, D, scale=(4 * D) ** -0.5), _f32(r, D))


def attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """Causal multi-head attention, [batch, heads, tokens, head dim]."""
    s = jnp.einsum("bhtd,bhsd->bhts", q, k) / np.sqrt(q.shape[-1]).astype(np.float32)
    mask = jnp.tril(jnp.ones((q.shape[2], k.shape[2]), bool))
    p = jax.nn.softmax(jnp.where(mask, s, -1e9), axis=-1)
    return jnp.einsum("bhts,bhsd->bhtd", p, v)


def _attention_args() -> tuple[Any, ...]:
    r = _rng(2)
    shape = (BATCH, HEADS, SEQ, D // HEADS)
    return _f32(r, *shape), _f32(r, *shape), _f32(r, *shape)


# ----- flax MLP -----------------------------------------------------------------------------

class MLP(nn.Module):
    features: tuple[int, ...] = (512, 512, 10)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for f in self.features[:-1]:
            x = nn.relu(nn.Dense(f)(x))
        return nn.Dense(self.features[-1])(x)


_MLP = MLP()
_MLP_TX = optax.adam(LR)


def mlp_forward(params: Any, x: jax.Array) -> jax.Array:
    return _MLP.apply(params, x)


def mlp_train_step(params: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
    def loss_fn(p: Any) -> jax.Array:
        logits = _MLP.apply(p, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = _MLP_TX.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def _mlp_params() -> Any:
    return jax.tree_util.tree_map(np.asarray, _MLP.init(jax.random.PRNGKey(0),
                                                        jnp.zeros((1, 256))))


def _mlp_forward_args() -> tuple[Any, ...]:
    return _mlp_params(), _f32(_rng(3), 256, 256)


def _mlp_train_args() -> tuple[Any, ...]:
    params = _mlp_params()
    state = jax.tree_util.tree_map(np.asarray, _MLP_TX.init(params))
    r = _rng(4)
    return params, state, _f32(r, 256, 256), r.integers(0, 10, 256).astype(np.int32)


# ----- GPT ----------------------------------------------------------------------------------

class Block(nn.Module):
    d: int
    heads: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b, t, d = x.shape
        h = nn.LayerNorm()(x)
        qkv = nn.Dense(3 * d)(h).reshape(b, t, 3, self.heads, d // self.heads)
        q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
        a = attention(q, k, v).transpose(0, 2, 1, 3).reshape(b, t, d)
        x = x + nn.Dense(d)(a)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(d)(jax.nn.gelu(nn.Dense(4 * d)(h)))


class GPT(nn.Module):
    layers: int
    d: int = D
    heads: int = HEADS
    vocab: int = VOCAB
    seq: int = SEQ

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        x = nn.Embed(self.vocab, self.d)(tokens)
        pos = self.param("pos", nn.initializers.normal(0.02), (self.seq, self.d))
        x = x + pos[: tokens.shape[1]]
        for _ in range(self.layers):
            x = Block(self.d, self.heads)(x)
        return nn.Dense(self.vocab)(nn.LayerNorm()(x))


_GPT_TX = optax.adamw(LR, weight_decay=0.01)


def _gpt_loss(model: GPT, params: Any, tokens: jax.Array) -> jax.Array:
    logits = model.apply(params, tokens[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()


def make_gpt_step(layers: int) -> Callable[..., Any]:
    model = GPT(layers)

    def gpt_train_step(params: Any, opt_state: Any, tokens: jax.Array) -> Any:
        loss, grads = jax.value_and_grad(lambda p: _gpt_loss(model, p, tokens))(params)
        updates, opt_state = _GPT_TX.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    gpt_train_step.__name__ = f"gpt{layers}_train_step"
    return gpt_train_step


def _gpt_params(layers: int) -> Any:
    model = GPT(layers)
    tokens = jnp.zeros((BATCH, SEQ), jnp.int32)
    return jax.tree_util.tree_map(np.asarray, model.init(jax.random.PRNGKey(layers), tokens))


def _gpt_args(layers: int) -> tuple[Any, ...]:
    params = _gpt_params(layers)
    state = jax.tree_util.tree_map(np.asarray, _GPT_TX.init(params))
    # one token more than the model's context: inputs are tokens[:-1], targets tokens[1:]
    tokens = _rng(5).integers(0, VOCAB, (BATCH, SEQ + 1)).astype(np.int32)
    return params, state, tokens


def adamw_update(params: Any, opt_state: Any, grads: Any) -> Any:
    updates, opt_state = _GPT_TX.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


def _adamw_args() -> tuple[Any, ...]:
    params = _gpt_params(2)
    state = jax.tree_util.tree_map(np.asarray, _GPT_TX.init(params))
    r = _rng(6)
    grads = jax.tree_util.tree_map(lambda p: _f32(r, *p.shape, scale=1e-2), params)
    return params, state, grads


# ----- the same programs in torch (torch.compile peers; torch is optional) -------------------

def torch_softmax(x: Any) -> Any:
    import torch

    return torch.softmax(x, dim=-1)


def _torch_layernorm(x: Any, g: Any, b: Any) -> Any:
    import torch

    mean = x.mean(dim=-1, keepdim=True)
    var = (x - mean).square().mean(dim=-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + 1e-5) * g + b


def torch_layernorm(x: Any, g: Any, b: Any) -> Any:
    return _torch_layernorm(x, g, b)


def torch_layernorm_gelu(x: Any, g: Any, b: Any) -> Any:
    import torch

    return torch.nn.functional.gelu(_torch_layernorm(x, g, b), approximate="tanh")


def torch_gelu_mlp(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    import torch

    return torch.nn.functional.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2


def torch_attention(q: Any, k: Any, v: Any) -> Any:
    import torch

    s = (q @ k.transpose(-1, -2)) / float(np.sqrt(q.shape[-1]))
    mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
    return torch.softmax(torch.where(mask, s, -1e9), dim=-1) @ v


STEP_TOL = {"atol": 3 * LR, "rtol": 1e-3}

PROGRAMS: list[Program] = [
    Program("softmax", softmax, lambda: (_f32(_rng(7), 512, 384),), atol=1e-6, rtol=1e-4,
            torch_fn=torch_softmax),
    Program("layernorm", layernorm, _rows_args, torch_fn=torch_layernorm),
    Program("layernorm_gelu", layernorm_gelu, _rows_args, torch_fn=torch_layernorm_gelu),
    Program("gelu_mlp", gelu_mlp, _mlp_args, torch_fn=torch_gelu_mlp),
    Program("attention", attention, _attention_args, torch_fn=torch_attention),
    Program("flax_mlp_forward", mlp_forward, _mlp_forward_args),
    Program("flax_mlp_train_step", mlp_train_step, _mlp_train_args, **STEP_TOL),
    Program("optax_adamw_update", adamw_update, _adamw_args, atol=1e-6, rtol=1e-5),
    Program("gpt2_train_step", make_gpt_step(2), lambda: _gpt_args(2), **STEP_TOL),
    Program("gpt8_train_step", make_gpt_step(8), lambda: _gpt_args(8), quick=False,
            **STEP_TOL),
]
