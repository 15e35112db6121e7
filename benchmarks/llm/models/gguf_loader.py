"""LLaMA-architecture models from GGUF files (llama.cpp's format), read with ``gguf``.

Tensors are dequantized to float32 with ``gguf.quants`` (any type the package knows:
F32, F16, BF16, Q8_0, Q4_1, K-quants, ...), renamed to Hugging Face's names and
layouts, and the query/key rows are put back in Hugging Face's order: llama.cpp's
converter interleaves the two halves of every head's rotary dimensions (Meta's original
pairing), which :func:`unpermute_qk` undoes so that :mod:`llama`'s rotate-half rotary
embedding applies. The tokenizer is rebuilt from the file's metadata.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.llm.models import tokenizer as tok
from benchmarks.llm.models.llama import Llama, LlamaConfig

_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight",
           "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
_BLOCK = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj",
          "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
          "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
          "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_BLOCK_RE = re.compile(r"blk\.(\d+)\.(\w+)\.weight")


def permute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Hugging Face row order -> llama.cpp's (what the GGUF converter does; for tests)."""
    rows = w.shape[0]
    return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's row order -> Hugging Face's: the inverse of :func:`permute_qk`."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_name(gguf_name: str) -> str:
    """The Hugging Face name of a GGUF tensor name (``ValueError`` if unknown)."""
    if gguf_name in _GLOBAL:
        return _GLOBAL[gguf_name]
    m = _BLOCK_RE.fullmatch(gguf_name)
    if m and m.group(2) in _BLOCK:
        return f"model.layers.{m.group(1)}.{_BLOCK[m.group(2)]}.weight"
    raise ValueError(f"Unexpected tensor {gguf_name!r} in a LLaMA GGUF file.")


def read_metadata(reader) -> dict[str, Any]:
    """The key/value metadata of a ``gguf.GGUFReader`` as Python values."""
    return {name: field.contents() for name, field in reader.fields.items()
            if not name.startswith("GGUF.")}


def dequantize(tensor) -> np.ndarray:
    """A GGUF tensor as float32 in NumPy order (``[rows, cols]`` = HF ``[out, in]``)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize as deq

    shape = tuple(int(x) for x in reversed(list(tensor.shape)))
    if tensor.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        arr = np.asarray(tensor.data, np.float32)
    else:
        try:
            arr = deq(np.asarray(tensor.data), tensor.tensor_type)
        except NotImplementedError:
            raise ValueError(f"Tensor {tensor.name}: quantization {tensor.tensor_type.name} "
                             "cannot be dequantized by this version of the gguf package.") from None
    return np.asarray(arr, np.float32).reshape(shape)


def llama_config(meta: dict[str, Any], vocab_rows: int, tied: bool) -> LlamaConfig:
    def get(key, default=None):
        value = meta.get(f"llama.{key}", default)
        if value is None:
            raise ValueError(f"GGUF metadata lacks llama.{key}.")
        return value

    heads = int(get("attention.head_count"))
    hidden = int(get("embedding_length"))
    head_dim = int(meta.get("llama.attention.key_length",
                            meta.get("llama.rope.dimension_count", hidden // heads)))
    if meta.get("llama.rope.scaling.type", "none") not in ("none", None):
        raise ValueError(f"Rope scaling {meta['llama.rope.scaling.type']!r} is not supported.")
    return LlamaConfig(
        vocab_size=int(meta.get("llama.vocab_size", vocab_rows)), hidden_size=hidden,
        intermediate_size=int(get("feed_forward_length")), num_layers=int(get("block_count")),
        num_heads=heads, num_kv_heads=int(meta.get("llama.attention.head_count_kv", heads)),
        head_dim=head_dim, rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(meta.get("llama.rope.freq_base", 10000.0)),
        max_position_embeddings=int(get("context_length", 2048)), tie_word_embeddings=tied)


def read(path: Path) -> tuple[LlamaConfig, dict[str, np.ndarray], dict[str, Any]]:
    """``(config, weights with HF names, metadata)`` of a LLaMA GGUF file."""
    from gguf import GGUFReader

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file {path} does not exist.")
    try:
        reader = GGUFReader(str(path))
    except Exception as err:  # the gguf package raises ValueError/struct errors
        raise ValueError(f"{path} is not a readable GGUF file: {err}") from err
    meta = read_metadata(reader)
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"{path.name}: GGUF architecture {arch!r} is not supported; this "
                         "loader reads 'llama' models (SmolLM2, TinyLlama, Llama 2/3 without "
                         "rope scaling).")
    tensors = {t.name: t for t in reader.tensors}
    if "token_embd.weight" not in tensors:
        raise ValueError(f"{path.name} has no token_embd.weight tensor.")
    tied = "output.weight" not in tensors
    config = llama_config(meta, int(tensors["token_embd.weight"].shape[-1]), tied)
    weights = {}
    for name, tensor in tensors.items():
        key = hf_name(name)
        w = dequantize(tensor)
        if key.endswith("q_proj.weight"):
            w = unpermute_qk(w, config.num_heads)
        elif key.endswith("k_proj.weight"):
            w = unpermute_qk(w, config.num_kv_heads)
        weights[key] = w
    meta["quantization"] = sorted({t.tensor_type.name for t in reader.tensors})
    return config, weights, meta


def load(path: Path, *, dtype=None):
    """``(model, tokenizer, info)`` from a LLaMA GGUF file."""
    import jax.numpy as jnp

    config, weights, meta = read(path)
    model = Llama(config, weights, dtype=dtype or jnp.float32)
    info = {"architecture": "llama", "path": str(path), "name": meta.get("general.name"),
            "tensor_types": meta["quantization"]}
    return model, tok.from_gguf_metadata(meta), info
