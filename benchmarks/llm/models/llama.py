"""The LLaMA decoder (Touvron et al. 2023) in flax NNX, as SmolLM2 uses it.

RMSNorm before attention and MLP, rotary position embeddings (the "rotate half" pairing
of Hugging Face's ``modeling_llama``; GGUF files are converted to it on load), grouped-
query attention, a SwiGLU MLP, and an output head tied to the token embedding unless the
checkpoint has its own. Weights are read from a dictionary with Hugging Face's names and
layouts (``[out, in]``), which both :mod:`gguf_loader` and the tests produce.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from benchmarks.llm.models.layers import (CausalLM, Embedding, Linear, RMSNorm, as_param,
                                          causal_attention, check_weights, module_list)


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int | None = None
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = True

    def __post_init__(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                             f"({self.num_kv_heads}).")
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        if self.head_dim % 2:
            raise ValueError(f"Rotary embeddings need an even head_dim, got {self.head_dim}.")


def rotary(positions: jax.Array, head_dim: int, theta: float) -> tuple[jax.Array, jax.Array]:
    """``cos`` and ``sin`` tables ``[T, head_dim]`` for the rotate-half pairing."""
    inv_freq = 1.0 / theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
    freqs = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def apply_rotary(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotates ``x`` ``[B, T, H, hd]``: pairs are ``(i, i + hd/2)``."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


class LlamaAttention(nnx.Module):
    def __init__(self, cfg: LlamaConfig, w: Mapping[str, np.ndarray], prefix: str, dtype):
        def lin(name):
            return Linear(np.asarray(w[f"{prefix}.{name}.weight"]).T, dtype=dtype)

        self.q_proj, self.k_proj = lin("q_proj"), lin("k_proj")
        self.v_proj, self.o_proj = lin("v_proj"), lin("o_proj")
        self.num_heads, self.num_kv_heads, self.head_dim = (cfg.num_heads, cfg.num_kv_heads,
                                                              cfg.head_dim)

    def attend_at(self, x, index, cos, sin):
        """Attention output ``[N, D]`` of the query at ``index[n]`` only (keys: all)."""
        n, t, _ = x.shape
        q = self.q_proj(x[jnp.arange(n), index]).reshape(n, self.num_heads, self.head_dim)
        k = self.k_proj(x).reshape(n, t, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).reshape(n, t, self.num_kv_heads, self.head_dim)
        q, k = apply_rotary(q, cos[index], sin[index]), apply_rotary(k, cos, sin)
        g = self.num_heads // self.num_kv_heads
        q = q.reshape(n, self.num_kv_heads, g, self.head_dim)
        scores = jnp.einsum("nkgd,nskd->nkgs", q, k, preferred_element_type=jnp.float32)
        scores = scores * self.head_dim**-0.5
        mask = jnp.arange(t)[None, :] <= index[:, None]  # [N, T]
        scores = jnp.where(mask[:, None, None, :], scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        out = jnp.einsum("nkgs,nskd->nkgd", probs, v).reshape(n, -1)
        return self.o_proj(out)

    def __call__(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).reshape(b, t, self.num_heads, self.head_dim)
        k = self.k_proj(x).reshape(b, t, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).reshape(b, t, self.num_kv_heads, self.head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        return self.o_proj(causal_attention(q, k, v, self.head_dim**-0.5))


class LlamaMLP(nnx.Module):
    def __init__(self, w: Mapping[str, np.ndarray], prefix: str, dtype):
        def lin(name):
            return Linear(np.asarray(w[f"{prefix}.{name}.weight"]).T, dtype=dtype)

        self.gate_proj, self.up_proj, self.down_proj = map(lin, ("gate_proj", "up_proj",
                                                                 "down_proj"))

    def __call__(self, x):
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nnx.Module):
    def __init__(self, cfg: LlamaConfig, w: Mapping[str, np.ndarray], i: int, dtype):
        p = f"model.layers.{i}"
        self.input_layernorm = RMSNorm(w[f"{p}.input_layernorm.weight"], cfg.rms_norm_eps,
                                       dtype=dtype)
        self.self_attn = LlamaAttention(cfg, w, f"{p}.self_attn", dtype)
        self.post_attention_layernorm = RMSNorm(w[f"{p}.post_attention_layernorm.weight"],
                                                cfg.rms_norm_eps, dtype=dtype)
        self.mlp = LlamaMLP(w, f"{p}.mlp", dtype)

    def __call__(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(CausalLM):
    """A LLaMA causal language model.

    ``hidden(tokens)`` returns the final (normed) hidden states ``[N, T, D]`` and
    ``logits(h)`` maps any ``[..., D]`` to vocabulary logits, so that callers compute the
    output head only at the positions they score.
    """

    def __init__(self, cfg: LlamaConfig, weights: Mapping[str, np.ndarray], *, dtype=jnp.float32):
        check_weights("LLaMA", weight_shapes(cfg), weights, optional=("lm_head.weight",))
        self.config = cfg
        self.embed_tokens = Embedding(weights["model.embed_tokens.weight"], dtype=dtype)
        self.layers = module_list(LlamaBlock(cfg, weights, i, dtype) for i in range(cfg.num_layers))
        self.norm = RMSNorm(weights["model.norm.weight"], cfg.rms_norm_eps, dtype=dtype)
        head = weights.get("lm_head.weight")
        tied = cfg.tie_word_embeddings or head is None
        self.lm_head = None if tied else as_param(np.asarray(head).T, dtype)

    def embed(self, tokens: jax.Array) -> jax.Array:
        return self.embed_tokens(tokens)

    def block(self, layer: LlamaBlock, x: jax.Array) -> jax.Array:
        cos, sin = rotary(jnp.arange(x.shape[1]), self.config.head_dim, self.config.rope_theta)
        return layer(x, cos, sin)

    def final(self, x: jax.Array) -> jax.Array:
        return self.norm(x)

    def hidden_at(self, x: jax.Array, first: int, index: jax.Array) -> jax.Array:
        """As :meth:`CausalLM.hidden_at`; the last layer computes only the ``index`` rows
        (their attention reads every key), so a pass costs little more than the keys and
        values of the last layer when only that layer is tuned."""
        layers = list(self.layers)
        for layer in layers[first:-1]:
            x = self.block(layer, x)
        last = layers[-1]
        cos, sin = rotary(jnp.arange(x.shape[1]), self.config.head_dim, self.config.rope_theta)
        h = x[jnp.arange(x.shape[0]), index]
        h = h + last.self_attn.attend_at(last.input_layernorm(x), index, cos, sin)
        return self.norm(h + last.mlp(last.post_attention_layernorm(h)))


def weight_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Hugging Face names and shapes of a LLaMA checkpoint with config ``cfg``."""
    d, hd = cfg.hidden_size, cfg.head_dim
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, d), "model.norm.weight": (d,)}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}"
        shapes.update({
            f"{p}.input_layernorm.weight": (d,), f"{p}.post_attention_layernorm.weight": (d,),
            f"{p}.self_attn.q_proj.weight": (cfg.num_heads * hd, d),
            f"{p}.self_attn.k_proj.weight": (cfg.num_kv_heads * hd, d),
            f"{p}.self_attn.v_proj.weight": (cfg.num_kv_heads * hd, d),
            f"{p}.self_attn.o_proj.weight": (d, cfg.num_heads * hd),
            f"{p}.mlp.gate_proj.weight": (cfg.intermediate_size, d),
            f"{p}.mlp.up_proj.weight": (cfg.intermediate_size, d),
            f"{p}.mlp.down_proj.weight": (d, cfg.intermediate_size)})
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, d)
    return shapes
