"""GGUF path: a tiny LLaMA written with gguf's writer (llama.cpp layout) reads back exactly."""

import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.llm.models import gguf_loader
from benchmarks.llm.models.gguf_loader import permute_qk, unpermute_qk

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


Q = gguf.GGMLQuantizationType
TOKENS = ["<|endoftext|>", "<|im_start|>", "a", "b", "c", "Ġ", "Ġa", "ab", "Ġab", "1", "2"]
MERGES = ["Ġ a", "Ġa b", "a b"]
QUANTIZED = {
    "token_embd.weight": Q.Q8_0,
    "blk.0.attn_q.weight": Q.Q8_0,
    "blk.1.ffn_up.weight": Q.Q4_1,
}


def _gguf_name(hf: str) -> str:
    inverse = {v: k for k, v in gguf_loader._GLOBAL.items()}
    if hf in inverse:
        return inverse[hf]
    parts = hf.split(".")
    block = {v: k for k, v in gguf_loader._BLOCK.items()}[".".join(parts[3:-1])]
    return f"blk.{parts[2]}.{block}.weight"


def _write_tiny_gguf(path, arch="llama"):
    """Writes a tiny random LLaMA as llama.cpp's converter would; returns the HF model
    whose weights equal what the file decodes to (quantization round-off included)."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=len(TOKENS),
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        rope_theta=1000.0,
        tie_word_embeddings=True,
        attn_implementation="eager",
    )
    hf = transformers.LlamaForCausalLM(cfg).eval()
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(2)
    writer.add_context_length(128)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(96)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(1000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(16)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(TOKENS)
    writer.add_token_merges(MERGES)
    writer.add_token_types([3, 3] + [1] * (len(TOKENS) - 2))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(0)
    writer.add_add_bos_token(False)
    state = {
        k: v.detach().numpy().copy() for k, v in hf.state_dict().items() if k != "lm_head.weight"
    }
    decoded = {}
    for name, w in state.items():
        g = _gguf_name(name)
        if g.endswith("attn_q.weight"):
            w = permute_qk(w, 4)
        elif g.endswith("attn_k.weight"):
            w = permute_qk(w, 2)
        qtype = QUANTIZED.get(g)
        if qtype is None:
            writer.add_tensor(g, w.astype(np.float32))
            back = w
        else:
            data = gguf.quants.quantize(w.astype(np.float32), qtype)
            writer.add_tensor(g, data, raw_shape=data.shape, raw_dtype=qtype)
            back = gguf.quants.dequantize(data, qtype).reshape(w.shape)
        if g.endswith("attn_q.weight"):
            back = unpermute_qk(back, 4)
        elif g.endswith("attn_k.weight"):
            back = unpermute_qk(back, 2)
        decoded[name] = back
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with torch.no_grad():
        hf.load_state_dict({k: torch.tensor(v) for k, v in decoded.items()}, strict=False)
        hf.lm_head.weight = hf.model.embed_tokens.weight
    return hf, state


def test_qk_permutation_round_trip():
    w = np.arange(8 * 6 * 3, dtype=np.float32).reshape(8 * 6, 3)
    assert np.array_equal(unpermute_qk(permute_qk(w, 6), 6), w)
    assert not np.array_equal(permute_qk(w, 6), w)


def test_gguf_logits_match_transformers(tmp_path):
    path = tmp_path / "tiny.gguf"
    hf, original = _write_tiny_gguf(path)
    model, _, info = gguf_loader.load(path)
    assert info["tensor_types"] == ["F32", "Q4_1", "Q8_0"]
    assert model.config.num_kv_heads == 2 and model.config.head_dim == 16
    assert model.lm_head is None  # tied, as SmolLM2
    ids = np.array([[2, 3, 6, 8, 4, 5, 7, 9, 10]])
    with torch.no_grad():
        ref = hf(torch.tensor(ids)).logits.numpy()
    err = np.max(np.abs(np.asarray(model(jnp.asarray(ids))) - ref))
    assert err < 1e-4, err
    # Unquantized tensors come back bit-exact, with the Q/K permutation undone.
    k = np.asarray(model.layers[1].self_attn.k_proj.kernel[...]).T
    assert np.array_equal(k, original["model.layers.1.self_attn.k_proj.weight"])


def test_gguf_tokenizer_from_metadata(tmp_path):
    path = tmp_path / "tiny.gguf"
    _write_tiny_gguf(path)
    _, tk, _ = gguf_loader.load(path)
    assert tk.encode("ab ab") == [TOKENS.index("ab"), TOKENS.index("Ġab")]
    assert tk.encode("12") == [TOKENS.index("1"), TOKENS.index("2")]  # smollm splits digits
    assert tk.encode("<|im_start|>a") == [1, TOKENS.index("a")]  # control token kept whole
    assert tk.prefix() == [] and tk.bos_id == 1


def test_gguf_wrong_architecture_and_missing_file(tmp_path):
    path = tmp_path / "gpt2.gguf"
    _write_tiny_gguf(path, arch="gpt2")
    with pytest.raises(ValueError, match="architecture 'gpt2' is not supported"):
        gguf_loader.load(path)
    with pytest.raises(FileNotFoundError):
        gguf_loader.load(tmp_path / "missing.gguf")
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(ValueError, match="not a readable GGUF"):
        gguf_loader.load(tmp_path / "junk.gguf")
