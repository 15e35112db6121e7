"""The ``--model`` registry: a spec string -> ``(model, tokenizer, info)``.

* ``smollm2``: the embedded SmolLM2-135M-Instruct GGUF (fetched and cached, see
  :mod:`fetch`).
* ``gguf:PATH``: any LLaMA-architecture GGUF file.
* ``opt:PATH``: a Hugging Face OPT checkpoint folder (the paper's models);
  ``hf:PATH`` accepts OPT or LLaMA folders.
* ``tiny-llama`` / ``tiny-opt``: tiny randomly initialised models with a word-level
  tokenizer over the given words (smoke runs and tests; nothing is downloaded).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import jax.numpy as jnp

from benchmarks.llm.models import llama, opt
from benchmarks.llm.models import tokenizer as tok
from benchmarks.llm.models.layers import random_weights

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def tiny_llama_config(vocab_size: int) -> llama.LlamaConfig:
    return llama.LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                             num_layers=2, num_heads=4, num_kv_heads=2, max_position_embeddings=256)


def tiny_opt_config(vocab_size: int) -> opt.OPTConfig:
    return opt.OPTConfig(vocab_size=vocab_size, hidden_size=32, ffn_dim=64, num_layers=2,
                         num_heads=4, max_position_embeddings=256)


def load_model(spec: str, *, dtype: str = "float32", words: Sequence[str] = (), seed: int = 0):
    """``(model, tokenizer, info)`` for the ``--model`` spec (see the module docstring)."""
    if dtype not in DTYPES:
        raise ValueError(f"Unknown dtype {dtype!r}; expected one of {sorted(DTYPES)}.")
    jdtype = DTYPES[dtype]
    kind, _, arg = spec.partition(":")
    if spec == "smollm2":
        from benchmarks.llm import fetch
        from benchmarks.llm.models import gguf_loader

        model, tk, info = gguf_loader.load(fetch.smollm2_gguf(), dtype=jdtype)
        info["name"] = "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized)"
    elif kind == "gguf" and arg:
        from benchmarks.llm.models import gguf_loader

        model, tk, info = gguf_loader.load(Path(arg), dtype=jdtype)
    elif kind in ("opt", "hf") and arg:
        from benchmarks.llm.models import hf_loader

        model, tk, info = hf_loader.load(Path(arg), dtype=jdtype)
        if kind == "opt" and info["architecture"] != "opt":
            raise ValueError(f"{arg} holds a {info['architecture']!r} model, not OPT; use hf:PATH.")
        info["name"] = Path(arg).name
    elif spec in ("tiny-llama", "tiny-opt"):
        if not words:
            raise ValueError(f"{spec} needs a vocabulary (words of the data).")
        tk = tok.word_level(words)
        if spec == "tiny-llama":
            cfg = tiny_llama_config(tk.vocab_size)
            model = llama.Llama(cfg, random_weights(llama.weight_shapes(cfg), seed), dtype=jdtype)
        else:
            cfg = tiny_opt_config(tk.vocab_size)
            model = opt.OPT(cfg, random_weights(opt.weight_shapes(cfg), seed), dtype=jdtype)
        info = {"architecture": spec.split("-")[1], "name": f"{spec} (random, seed {seed})"}
    else:
        raise ValueError(f"Unknown model {spec!r}; expected smollm2, gguf:PATH, opt:PATH, "
                         "hf:PATH, tiny-llama or tiny-opt.")
    info["dtype"] = dtype
    return model, tk, info
