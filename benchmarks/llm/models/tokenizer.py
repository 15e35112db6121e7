"""Tokenizers for the decoders, built with Hugging Face ``tokenizers`` (no transformers).

* GGUF files carry a byte-level BPE vocabulary and merge list in their metadata
  (``tokenizer.ggml.model == "gpt2"``); :func:`from_gguf_metadata` rebuilds it, with the
  digit splitting of SmolLM2's pre-tokenizer (``tokenizer.ggml.pre == "smollm"``).
* Hugging Face checkpoint folders carry ``tokenizer.json`` or GPT-2 style
  ``vocab.json`` + ``merges.txt`` (OPT): :func:`from_hf_dir`.
* Tiny test and smoke models use a word-level vocabulary: :func:`word_level`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

CONTROL_TOKEN = 3  # llama.cpp's token type for control (special) tokens


@dataclasses.dataclass
class Tokenizer:
    """Text to token ids; ``add_bos`` says whether sequences start with ``bos_id``."""

    backend: Any  # tokenizers.Tokenizer
    bos_id: int | None
    eos_id: int | None
    pad_id: int
    add_bos: bool

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without any special token."""
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def prefix(self) -> list[int]:
        """The ids every sequence starts with (the BOS token or nothing)."""
        return [self.bos_id] if self.add_bos and self.bos_id is not None else []

    def decode(self, ids: Sequence[int]) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=False)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)


def _byte_level_bpe(vocab: Mapping[str, int], merges: Sequence[Any], split_digits: bool):
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers

    pairs = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in merges]
    backend = Backend(models.BPE(dict(vocab), pairs, fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if split_digits else byte_level)
    backend.decoder = decoders.ByteLevel()
    return backend


def from_gguf_metadata(meta: Mapping[str, Any]) -> Tokenizer:
    """The tokenizer described by a GGUF file's ``tokenizer.ggml.*`` metadata."""
    from tokenizers import AddedToken

    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(f"Unsupported GGUF tokenizer model {kind!r}: only byte-level BPE "
                         "('gpt2', as in SmolLM2 and other GPT-2 style vocabularies) is "
                         "implemented.")
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in ("default", "gpt2", "smollm"):
        raise ValueError(f"Unsupported GGUF pre-tokenizer {pre!r}; supported: 'default', "
                         "'gpt2', 'smollm'.")
    tokens = list(meta["tokenizer.ggml.tokens"])
    merges = list(meta.get("tokenizer.ggml.merges", []))
    backend = _byte_level_bpe({t: i for i, t in enumerate(tokens)}, merges, pre == "smollm")
    types = list(meta.get("tokenizer.ggml.token_type", []))
    special = [t for t, ty in zip(tokens, types) if ty == CONTROL_TOKEN]
    if special:
        backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    bos = meta.get("tokenizer.ggml.bos_token_id")
    eos = meta.get("tokenizer.ggml.eos_token_id")
    pad = meta.get("tokenizer.ggml.padding_token_id", eos if eos is not None else 0)
    return Tokenizer(backend=backend, bos_id=None if bos is None else int(bos),
                     eos_id=None if eos is None else int(eos), pad_id=int(pad),
                     add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)))


def from_hf_dir(path: Path, config: Mapping[str, Any]) -> Tokenizer:
    """The tokenizer of a Hugging Face checkpoint folder.

    Reads ``tokenizer.json`` when present, else ``vocab.json`` + ``merges.txt``; special
    ids come from ``config.json``; ``add_bos_token`` from ``tokenizer_config.json``
    (default: True for OPT, which starts every sequence with ``</s>``, else False).
    """
    from tokenizers import Tokenizer as Backend

    path = Path(path)
    if (path / "tokenizer.json").is_file():
        backend = Backend.from_file(str(path / "tokenizer.json"))
        backend.no_post_processor = True
    elif (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
        vocab = json.loads((path / "vocab.json").read_text(encoding="utf-8"))
        lines = (path / "merges.txt").read_text(encoding="utf-8").splitlines()
        merges = [ln for ln in lines if ln and not ln.startswith("#version")]
        backend = _byte_level_bpe(vocab, merges, split_digits=False)
    else:
        raise FileNotFoundError(f"No tokenizer in {path}: expected tokenizer.json, or "
                                "vocab.json and merges.txt.")
    tok_cfg_path = path / "tokenizer_config.json"
    tok_cfg = json.loads(tok_cfg_path.read_text()) if tok_cfg_path.is_file() else {}
    eos = config.get("eos_token_id")
    pad = config.get("pad_token_id")
    return Tokenizer(backend=backend, bos_id=config.get("bos_token_id"), eos_id=eos,
                     pad_id=int(pad if pad is not None else (eos if eos is not None else 0)),
                     add_bos=bool(tok_cfg.get("add_bos_token", config.get("model_type") == "opt")))


def word_level(words: Iterable[str], *,
               specials: Sequence[str] = ("<pad>", "<bos>", "<unk>")) -> Tokenizer:
    """A word-level tokenizer (whitespace and punctuation split) for tiny models."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import models, pre_tokenizers

    vocab = {s: i for i, s in enumerate(specials)}
    for w in sorted(set(words)):
        vocab.setdefault(w, len(vocab))
    backend = Backend(models.WordLevel(vocab, unk_token=specials[2]))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return Tokenizer(backend=backend, bos_id=vocab[specials[1]], eos_id=None,
                     pad_id=vocab[specials[0]], add_bos=True)
