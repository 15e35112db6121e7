"""Our NNX decoders against Hugging Face transformers (PyTorch) on tiny random configs."""

import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.llm.models import hf_loader, llama, lora, opt

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


TOL = 1e-4


def _state(model) -> dict[str, np.ndarray]:
    return {k: v.detach().float().numpy() for k, v in model.state_dict().items()}


def _hf_logits(model, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(ids)).logits.float().numpy()


def _tiny_llama_hf(tie: bool = True, kv_heads: int = 2):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=97,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=kv_heads,
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
        rope_theta=500.0,
        tie_word_embeddings=tie,
        attn_implementation="eager",
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from 1 so that they are tested
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return cfg, model


def _our_llama(cfg, weights, dtype=jnp.float32):
    ours = hf_loader.llama_config(cfg.to_dict())
    return llama.Llama(ours, weights, dtype=dtype)


@pytest.mark.parametrize("tie,kv_heads", [(True, 2), (False, 6)])
def test_llama_logits_match_transformers(tie, kv_heads):
    cfg, hf = _tiny_llama_hf(tie, kv_heads)
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, (2, 11))
    ours = _our_llama(cfg, hf_loader.normalize_llama_keys(_state(hf)))
    assert (ours.lm_head is None) == tie
    err = np.max(np.abs(np.asarray(ours(jnp.asarray(ids))) - _hf_logits(hf, ids)))
    assert err < TOL, err


def _tiny_opt_hf(**overrides):
    torch.manual_seed(1)
    kwargs = dict(
        vocab_size=91,
        hidden_size=32,
        ffn_dim=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=40,
        word_embed_proj_dim=32,
        do_layer_norm_before=True,
        dropout=0.0,
        attention_dropout=0.0,
        attn_implementation="eager",
    )
    kwargs.update(overrides)
    cfg = transformers.OPTConfig(**kwargs)
    model = transformers.OPTForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return cfg, model


@pytest.mark.parametrize("variant", ["opt-125m-like", "opt-350m-like"])
@pytest.mark.parametrize("prefixed", [True, False])
def test_opt_logits_match_transformers(variant, prefixed):
    # opt-350m: post-LayerNorm (no final norm) and 16 -> 32 -> 16 projections.
    overrides = (
        {}
        if variant == "opt-125m-like"
        else dict(do_layer_norm_before=False, word_embed_proj_dim=16)
    )
    cfg, hf = _tiny_opt_hf(**overrides)
    state = _state(hf)
    if not prefixed:  # opt-350m's pytorch_model.bin has no "model." prefix
        state = {k.removeprefix("model."): v for k, v in state.items()}
    ours = opt.OPT(hf_loader.opt_config(cfg.to_dict()), hf_loader.normalize_opt_keys(state))
    assert (ours.project_in is not None) == (variant == "opt-350m-like")
    assert (ours.final_layer_norm is None) == (variant == "opt-350m-like")
    ids = np.random.default_rng(1).integers(0, cfg.vocab_size, (3, 9))
    err = np.max(np.abs(np.asarray(ours(jnp.asarray(ids))) - _hf_logits(hf, ids)))
    assert err < TOL, err


def test_opt_checkpoint_folder_round_trip(tmp_path):
    """A saved OPT folder (safetensors + GPT-2 tokenizer files) loads through hf_loader."""
    import json

    cfg, hf = _tiny_opt_hf()
    hf.save_pretrained(tmp_path)
    words = ["<s>", "<pad>", "</s>", "<unk>", "a", "b", "Ġ", "Ġa", "Ġb", "ab", "Ġab"]
    vocab = {w: i for i, w in enumerate(words)}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("#version: 0.2\nĠ a\nĠa b\na b\n")
    model, tk, info = hf_loader.load(tmp_path)
    assert info["architecture"] == "opt"
    assert tk.add_bos and tk.prefix() == [cfg.bos_token_id]
    assert tk.encode("ab ab") == [vocab["ab"], vocab["Ġab"]]
    ids = np.array([[2, 5, 6, 7, 8]])
    err = np.max(np.abs(np.asarray(model(jnp.asarray(ids))) - _hf_logits(hf, ids)))
    assert err < TOL, err


def test_bf16_base_with_float32_lora_stays_close():
    cfg, hf = _tiny_llama_hf()
    weights = hf_loader.normalize_llama_keys(_state(hf))
    ids = np.random.default_rng(2).integers(0, cfg.vocab_size, (2, 7))
    ref = _hf_logits(hf, ids)
    model = lora.apply_lora(_our_llama(cfg, weights, dtype=jnp.bfloat16), key=0)
    _, adapters, base = lora.split(model)
    assert {x.dtype for x in __import__("jax").tree.leaves(base)} == {jnp.dtype(jnp.bfloat16)}
    assert {x.dtype for x in __import__("jax").tree.leaves(adapters)} == {jnp.dtype(jnp.float32)}
    out = np.asarray(model(jnp.asarray(ids)))
    assert out.dtype == np.float32
    err = np.max(np.abs(out - ref))
    assert 0 < err < 0.1 * np.max(np.abs(ref)), err  # bf16 rounding of weights only


def test_mismatched_weights_are_rejected():
    cfg, hf = _tiny_llama_hf()
    weights = hf_loader.normalize_llama_keys(_state(hf))
    del weights["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(ValueError, match="missing"):
        _our_llama(cfg, weights)
    bad = dict(hf_loader.normalize_llama_keys(_state(hf)))
    bad["model.norm.weight"] = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="shape"):
        _our_llama(cfg, bad)
