"""The OPT decoder (Zhang et al. 2022) in flax NNX: the paper's models.

Learned positional embeddings with OPT's offset of 2, multi-head attention with biases
(queries scaled by ``head_dim ** -0.5`` after projection), ReLU MLP, layer norm before
each sub-block (``do_layer_norm_before``) or after it (OPT-350m), the optional
``project_in`` / ``project_out`` between a narrower word-embedding width and the hidden
width (OPT-350m), and an output head tied to the token embedding. Weights come from a
dictionary with Hugging Face's names (the ``model.`` prefix removed) and layouts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from benchmarks.llm.models.layers import (CausalLM, Embedding, LayerNorm, Linear, as_param,
                                          causal_attention, check_weights, module_list)

POSITION_OFFSET = 2  # OPT's learned position table starts at index 2

ACTIVATIONS = {"relu": jax.nn.relu, "gelu": jax.nn.gelu, "gelu_new": jax.nn.gelu,
               "silu": jax.nn.silu}


@dataclasses.dataclass(frozen=True)
class OPTConfig:
    vocab_size: int
    hidden_size: int
    ffn_dim: int
    num_layers: int
    num_heads: int
    max_position_embeddings: int = 2048
    word_embed_proj_dim: int | None = None
    do_layer_norm_before: bool = True
    remove_final_layer_norm: bool = False
    activation_function: str = "relu"
    enable_bias: bool = True
    layer_norm_elementwise_affine: bool = True

    def __post_init__(self):
        if self.word_embed_proj_dim is None:
            object.__setattr__(self, "word_embed_proj_dim", self.hidden_size)
        if self.hidden_size % self.num_heads:
            raise ValueError("hidden_size must be a multiple of num_heads.")
        if self.activation_function not in ACTIVATIONS:
            raise ValueError(f"Unsupported OPT activation {self.activation_function!r}; "
                             f"expected one of {sorted(ACTIVATIONS)}.")
        if not self.layer_norm_elementwise_affine:
            raise ValueError("OPT checkpoints without affine layer norms are not supported.")

    @property
    def has_final_layer_norm(self) -> bool:
        return self.do_layer_norm_before and not self.remove_final_layer_norm

    @property
    def projects(self) -> bool:
        return self.word_embed_proj_dim != self.hidden_size


def _linear(cfg: OPTConfig, w: Mapping[str, np.ndarray], name: str, dtype) -> Linear:
    """The layer ``name`` of ``w`` (its bias if the checkpoint has biases)."""
    bias = w.get(f"{name}.bias") if cfg.enable_bias else None
    return Linear(np.asarray(w[f"{name}.weight"]).T, bias, dtype=dtype)


class OPTAttention(nnx.Module):
    def __init__(self, cfg: OPTConfig, w: Mapping[str, np.ndarray], prefix: str, dtype):
        def lin(name):
            return _linear(cfg, w, f"{prefix}.{name}", dtype)

        self.q_proj, self.k_proj = lin("q_proj"), lin("k_proj")
        self.v_proj, self.out_proj = lin("v_proj"), lin("out_proj")
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads

    def __call__(self, x):
        b, t, _ = x.shape
        shape = (b, t, self.num_heads, self.head_dim)
        q = (self.q_proj(x) * self.head_dim**-0.5).reshape(shape)
        k, v = self.k_proj(x).reshape(shape), self.v_proj(x).reshape(shape)
        return self.out_proj(causal_attention(q, k, v, 1.0))


class OPTBlock(nnx.Module):
    def __init__(self, cfg: OPTConfig, w: Mapping[str, np.ndarray], i: int, dtype):
        p = f"decoder.layers.{i}"

        def norm(name):
            return LayerNorm(w[f"{p}.{name}.weight"], w[f"{p}.{name}.bias"], dtype=dtype)

        self.self_attn = OPTAttention(cfg, w, f"{p}.self_attn", dtype)
        self.self_attn_layer_norm = norm("self_attn_layer_norm")
        self.fc1, self.fc2 = _linear(cfg, w, f"{p}.fc1", dtype), _linear(cfg, w, f"{p}.fc2", dtype)
        self.final_layer_norm = norm("final_layer_norm")
        self.pre_norm = cfg.do_layer_norm_before
        self.activation = cfg.activation_function

    def __call__(self, x):
        h = self.self_attn(self.self_attn_layer_norm(x) if self.pre_norm else x)
        x = x + h
        if not self.pre_norm:
            x = self.self_attn_layer_norm(x)
        h = self.final_layer_norm(x) if self.pre_norm else x
        x = x + self.fc2(ACTIVATIONS[self.activation](self.fc1(h)))
        if not self.pre_norm:
            x = self.final_layer_norm(x)
        return x


class OPT(CausalLM):
    """An OPT causal language model (``hidden`` / ``logits`` as in :class:`Llama`)."""

    def __init__(self, cfg: OPTConfig, weights: Mapping[str, np.ndarray], *, dtype=jnp.float32):
        check_weights("OPT", weight_shapes(cfg), weights)
        self.config = cfg
        w = weights
        self.embed_tokens = Embedding(w["decoder.embed_tokens.weight"], dtype=dtype)
        self.embed_positions = Embedding(w["decoder.embed_positions.weight"], dtype=dtype)
        self.project_in, self.project_out = (
            (Linear(np.asarray(w[f"decoder.{name}.weight"]).T, dtype=dtype)
             for name in ("project_in", "project_out")) if cfg.projects else (None, None))
        self.final_layer_norm = (LayerNorm(w["decoder.final_layer_norm.weight"],
                                           w["decoder.final_layer_norm.bias"], dtype=dtype)
                                 if cfg.has_final_layer_norm else None)
        self.layers = module_list(OPTBlock(cfg, w, i, dtype) for i in range(cfg.num_layers))
        head = w.get("lm_head.weight")
        tied = head is None or np.array_equal(np.asarray(head),
                                              np.asarray(w["decoder.embed_tokens.weight"]))
        self.lm_head = None if tied else as_param(np.asarray(head).T, dtype)

    def embed(self, tokens: jax.Array) -> jax.Array:
        x = self.embed_tokens(tokens)
        if self.project_in is not None:
            x = self.project_in(x)
        return x + self.embed_positions(jnp.arange(tokens.shape[-1]) + POSITION_OFFSET)

    def block(self, layer: OPTBlock, x: jax.Array) -> jax.Array:
        return layer(x)

    def final(self, x: jax.Array) -> jax.Array:
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
        if self.project_out is not None:
            x = self.project_out(x)
        return x


def weight_shapes(cfg: OPTConfig) -> dict[str, tuple[int, ...]]:
    """Names (without the ``model.`` prefix) and shapes of an OPT checkpoint."""
    d, f, p = cfg.hidden_size, cfg.ffn_dim, cfg.word_embed_proj_dim
    shapes = {"decoder.embed_tokens.weight": (cfg.vocab_size, p),
              "decoder.embed_positions.weight": (cfg.max_position_embeddings + POSITION_OFFSET, d)}
    if cfg.projects:
        shapes["decoder.project_in.weight"] = (d, p)
        shapes["decoder.project_out.weight"] = (p, d)
    if cfg.has_final_layer_norm:
        shapes["decoder.final_layer_norm.weight"] = (d,)
        shapes["decoder.final_layer_norm.bias"] = (d,)
    for i in range(cfg.num_layers):
        q = f"decoder.layers.{i}"
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            shapes[f"{q}.self_attn.{proj}.weight"] = (d, d)
            if cfg.enable_bias:
                shapes[f"{q}.self_attn.{proj}.bias"] = (d,)
        for norm in ("self_attn_layer_norm", "final_layer_norm"):
            shapes[f"{q}.{norm}.weight"] = (d,)
            shapes[f"{q}.{norm}.bias"] = (d,)
        shapes[f"{q}.fc1.weight"] = (f, d)
        shapes[f"{q}.fc2.weight"] = (d, f)
        if cfg.enable_bias:
            shapes[f"{q}.fc1.bias"] = (f,)
            shapes[f"{q}.fc2.bias"] = (d,)
    return shapes
