"""Hugging Face checkpoint folders (OPT, and LLaMA-family) from a local path.

A folder holds ``config.json``; weights as ``model.safetensors``, sharded safetensors
with ``model.safetensors.index.json``, or ``pytorch_model.bin`` (read with PyTorch, which
is then needed); and tokenizer files. Keys are accepted with or without the ``model.``
prefix (OPT-350m's ``pytorch_model.bin`` has none) and normalised.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.llm.models import tokenizer as tok
from benchmarks.llm.models.llama import Llama, LlamaConfig
from benchmarks.llm.models.opt import OPT, OPTConfig


def read_config(path: Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"Checkpoint folder {path} does not exist.")
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{path} has no config.json: not a Hugging Face checkpoint folder.")
    return json.loads(cfg_path.read_text())


def opt_config(cfg: dict[str, Any]) -> OPTConfig:
    return OPTConfig(
        vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"], ffn_dim=cfg["ffn_dim"],
        num_layers=cfg["num_hidden_layers"], num_heads=cfg["num_attention_heads"],
        max_position_embeddings=cfg.get("max_position_embeddings", 2048),
        word_embed_proj_dim=cfg.get("word_embed_proj_dim"),
        do_layer_norm_before=cfg.get("do_layer_norm_before", True),
        remove_final_layer_norm=cfg.get("_remove_final_layer_norm", False),
        activation_function=cfg.get("activation_function", "relu"),
        enable_bias=cfg.get("enable_bias", True),
        layer_norm_elementwise_affine=cfg.get("layer_norm_elementwise_affine", True))


def llama_config(cfg: dict[str, Any]) -> LlamaConfig:
    # Older configs hold rope_theta / rope_scaling, transformers >= 5 rope_parameters.
    rope = dict(cfg.get("rope_parameters") or {})
    scaling = cfg.get("rope_scaling") or {}
    kind = rope.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    if kind not in ("default", None):
        raise ValueError(f"Rope scaling {kind!r} is not supported.")
    theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
    return LlamaConfig(
        vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"], num_layers=cfg["num_hidden_layers"],
        num_heads=cfg["num_attention_heads"],
        num_kv_heads=cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
        head_dim=cfg.get("head_dim"), rms_norm_eps=cfg.get("rms_norm_eps", 1e-5),
        rope_theta=float(theta), max_position_embeddings=cfg.get("max_position_embeddings", 2048),
        tie_word_embeddings=cfg.get("tie_word_embeddings", True))


def read_weights(path: Path) -> dict[str, np.ndarray]:
    """All tensors of the checkpoint folder as float32 NumPy arrays, by original name."""
    path = Path(path)
    single, index = path / "model.safetensors", path / "model.safetensors.index.json"
    if single.is_file() or index.is_file():
        from safetensors.numpy import load_file

        files = ([single] if single.is_file() else
                 sorted({path / f for f in json.loads(index.read_text())["weight_map"].values()}))
        out = {}
        for f in files:
            try:
                out.update(load_file(str(f)))
            except TypeError:  # bf16 tensors cannot be read into NumPy directly
                out.update(_load_safetensors_via_torch(f))
        return {k: np.asarray(v, np.float32) for k, v in out.items()}
    binary = path / "pytorch_model.bin"
    if binary.is_file():
        try:
            import torch
        except ImportError:
            raise ImportError(f"{binary} is a PyTorch pickle; reading it needs torch (pip "
                              "install torch), or convert the checkpoint to safetensors.") from None
        state = torch.load(str(binary), map_location="cpu", weights_only=True)
        return {k: v.float().numpy() for k, v in state.items()}
    raise FileNotFoundError(f"No weights in {path}: expected model.safetensors, "
                            "model.safetensors.index.json or pytorch_model.bin.")


def _load_safetensors_via_torch(f: Path) -> dict[str, np.ndarray]:
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise ImportError(f"{f} holds bfloat16 tensors; reading them needs torch (pip "
                          "install torch).") from None

    return {k: v.float().numpy() for k, v in load_file(str(f)).items()}


def normalize_opt_keys(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Removes the ``model.`` prefix of ``OPTForCausalLM`` checkpoints."""
    return {k.removeprefix("model."): v for k, v in weights.items()}


def normalize_llama_keys(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Adds the ``model.`` prefix where a bare ``LlamaModel`` checkpoint lacks it."""
    return {k if k.startswith(("model.", "lm_head.")) else f"model.{k}": v
            for k, v in weights.items()}


def load(path: Path, *, dtype=None):
    """``(model, tokenizer, info)`` from a Hugging Face folder of an OPT or LLaMA model."""
    import jax.numpy as jnp

    dtype = dtype or jnp.float32
    cfg = read_config(path)
    kind = cfg.get("model_type")
    if kind == "opt":
        model = OPT(opt_config(cfg), normalize_opt_keys(read_weights(path)), dtype=dtype)
    elif kind == "llama":
        model = Llama(llama_config(cfg), normalize_llama_keys(read_weights(path)), dtype=dtype)
    else:
        raise ValueError(f"Unsupported model_type {kind!r} in {Path(path) / 'config.json'}; "
                         "expected 'opt' or 'llama'.")
    return model, tok.from_hf_dir(path, cfg), {"architecture": kind, "path": str(path)}
