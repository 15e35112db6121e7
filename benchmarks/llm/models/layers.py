"""Building blocks shared by the decoders: dense layers, norms, embeddings, attention.

Weights are stored in the layout of the checkpoints' consumers (``kernel`` is
``[in, out]``) and in any dtype (float32 or bfloat16); every computation upcasts them to
the activations' dtype (float32), so bf16 storage halves memory without changing the
arithmetic of the forward pass beyond the rounding of the weights themselves.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def as_param(value, dtype=None) -> nnx.Param:
    """A frozen base weight (``nnx.Param``) from an array, cast to ``dtype`` if given."""
    arr = jnp.asarray(value)
    return nnx.Param(arr.astype(dtype) if dtype is not None else arr)


class Linear(nnx.Module):
    """``y = x @ kernel + bias`` with ``kernel`` of shape ``[in, out]``."""

    def __init__(self, kernel, bias=None, *, dtype=None):
        self.kernel = as_param(kernel, dtype)
        self.bias = None if bias is None else as_param(bias, dtype)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.kernel[...].shape)

    def __call__(self, x: jax.Array) -> jax.Array:
        y = x @ self.kernel[...].astype(x.dtype)
        if self.bias is not None:
            y = y + self.bias[...].astype(x.dtype)
        return y


class RMSNorm(nnx.Module):
    """Root-mean-square norm (LLaMA): ``x / sqrt(mean(x^2) + eps) * weight`` in float32."""

    def __init__(self, weight, eps: float, *, dtype=None):
        self.weight = as_param(weight, dtype)
        self.eps = float(eps)

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + self.eps)
        return (x32 * self.weight[...].astype(jnp.float32)).astype(x.dtype)


class LayerNorm(nnx.Module):
    """Layer norm with affine weight and bias (OPT), computed in float32."""

    def __init__(self, weight, bias, eps: float = 1e-5, *, dtype=None):
        self.weight = as_param(weight, dtype)
        self.bias = as_param(bias, dtype)
        self.eps = float(eps)

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        mean = jnp.mean(x32, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
        y = (x32 - mean) * jax.lax.rsqrt(var + self.eps)
        return (y * self.weight[...].astype(jnp.float32)
                + self.bias[...].astype(jnp.float32)).astype(x.dtype)


class Embedding(nnx.Module):
    """A lookup table ``[num, dim]``; ``attend`` multiplies by its transpose (tied heads)."""

    def __init__(self, table, *, dtype=None):
        self.table = as_param(table, dtype)

    def __call__(self, ids: jax.Array, dtype=jnp.float32) -> jax.Array:
        return jnp.take(self.table[...], ids, axis=0).astype(dtype)

    def attend(self, x: jax.Array) -> jax.Array:
        return x @ self.table[...].astype(x.dtype).T


def causal_attention(q: jax.Array, k: jax.Array, v: jax.Array, scale: float) -> jax.Array:
    """Causal multi-head attention with grouped key/value heads.

    Args:
      q: ``[B, T, H, hd]`` queries; query head ``h`` reads key/value head ``h // (H / KV)``
        (the grouping of Hugging Face's ``repeat_kv``).
      k, v: ``[B, T, KV, hd]``.
      scale: factor applied to the scores (``1 / sqrt(hd)`` unless folded into ``q``).

    Returns:
      ``[B, T, H * hd]``. Scores and softmax are in float32.
    """
    b, t, h, hd = q.shape
    kv = k.shape[2]
    q = q.reshape(b, t, kv, h // kv, hd)
    scores = jnp.einsum("btkgd,bskd->bkgts", q, k, preferred_element_type=jnp.float32) * scale
    mask = jnp.tril(jnp.ones((t, t), bool))
    scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, v)
    return out.reshape(b, t, h * hd)


def module_list(items):
    """A list of submodules that NNX tracks (``nnx.List`` where available)."""
    return nnx.List(items) if hasattr(nnx, "List") else list(items)


class CausalLM(nnx.Module):
    """What the decoders share: the LM head, the LoRA targets and the call.

    Subclasses set ``config`` (with ``max_position_embeddings``), ``layers`` (each with a
    ``self_attn`` holding ``q_proj`` and ``v_proj``), ``embed_tokens`` and ``lm_head``
    (``None`` when tied to the embedding) and define ``embed(tokens)`` (the residual
    stream entering layer 0), ``block(layer, x)`` and ``final(x)`` (the output norm).

    The forward pass splits at any layer ``first``: ``hidden(tokens) ==
    hidden_from(hidden_below(tokens, first), first)``. When only layers ``>= first`` carry
    trainable adapters, ``hidden_below`` is a fixed function of the example, computed
    once and cached, and every perturbed forward pass costs only the layers above it.
    """

    def lora_targets(self, first: int = 0):
        """The (attention module, attribute) pairs LoRA adapts: q and v of every layer
        from ``first`` on."""
        for layer in list(self.layers)[first:]:
            yield layer.self_attn, "q_proj"
            yield layer.self_attn, "v_proj"

    def hidden_below(self, tokens: jax.Array, first: int) -> jax.Array:
        """The residual stream ``[N, T, D]`` entering layer ``first`` (0: the embeddings)."""
        check_context(tokens, self.config.max_position_embeddings)
        x = self.embed(tokens)
        for layer in list(self.layers)[:first]:
            x = self.block(layer, x)
        return x

    def hidden_from(self, x: jax.Array, first: int) -> jax.Array:
        """The final (normed) hidden states ``[N, T, D]`` from the stream entering ``first``."""
        for layer in list(self.layers)[first:]:
            x = self.block(layer, x)
        return self.final(x)

    def hidden_at(self, x: jax.Array, first: int, index: jax.Array) -> jax.Array:
        """The final hidden state ``[N, D]`` at position ``index[n]`` of each sequence, from
        the stream entering ``first`` (decoders may skip the last layer's other positions)."""
        return self.hidden_from(x, first)[jnp.arange(x.shape[0]), index]

    def hidden(self, tokens: jax.Array) -> jax.Array:
        """The final (normed) hidden states ``[N, T, D]`` of ``tokens`` ``[N, T]``."""
        return self.hidden_from(self.hidden_below(tokens, 0), 0)

    def logits(self, h: jax.Array) -> jax.Array:
        if self.lm_head is None:
            return self.embed_tokens.attend(h)
        return h @ self.lm_head[...].astype(h.dtype)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        return self.logits(self.hidden(tokens))


def check_context(tokens: jax.Array, limit: int) -> int:
    """The sequence length of ``tokens``, or a clear error if it exceeds ``limit``."""
    t = tokens.shape[-1]
    if t > limit:
        raise ValueError(f"Sequence length {t} exceeds the model's context of {limit} tokens.")
    return t


def random_weights(shapes: Mapping[str, tuple[int, ...]], seed: int = 0,
                   std: float = 0.1) -> dict[str, np.ndarray]:
    """Random float32 weights of a checkpoint's ``shapes`` (norm weights near 1, the rest
    near 0) for tiny test and smoke models."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        base = 1.0 if ("norm" in name and name.endswith(".weight")) else 0.0
        out[name] = (base + std * rng.standard_normal(shape)).astype(np.float32)
    return out


def check_weights(architecture: str, shapes: Mapping[str, tuple[int, ...]],
                  weights: Mapping[str, np.ndarray], optional: tuple[str, ...] = ()) -> None:
    """Raises ``ValueError`` if ``weights`` lack a tensor of ``shapes`` (``optional`` ones
    aside) or hold one of another shape than its config gives."""
    missing = [n for n in shapes if n not in weights and n not in optional]
    if missing:
        raise ValueError(f"{architecture} checkpoint is missing {len(missing)} tensors, e.g. "
                         f"{missing[:3]}.")
    for name, shape in shapes.items():
        if name in weights and tuple(np.shape(weights[name])) != shape:
            raise ValueError(f"{architecture} tensor {name} has shape "
                             f"{tuple(np.shape(weights[name]))}, expected {shape} from the "
                             "config.")
