"""The embedded SmolLM2 model, when it is already cached (never downloads; slow)."""

import numpy as np
import pytest

from benchmarks.llm import fetch, tasks
from benchmarks.llm.data import SentimentExample

pytestmark = pytest.mark.slow


def test_cached_smollm2_predicts_and_uses_the_fast_path():
    try:
        path = fetch.smollm2_gguf(download=False)
    except FileNotFoundError:
        pytest.skip("SmolLM2 is not cached (python -m benchmarks.llm.fetch)")
    import jax.numpy as jnp

    from benchmarks.llm.models import gguf_loader

    model, tk, info = gguf_loader.load(path)
    assert info["tensor_types"] == ["F32", "Q4_1", "Q8_0"]
    assert model.config.num_layers == 30 and model.config.num_kv_heads == 3
    ids = tk.encode("The capital of France is")
    logits = np.asarray(model(jnp.asarray([ids]))[0, -1])
    assert tk.decode([int(np.argmax(logits))]) == " Paris"
    task = tasks.get_task("sst2")
    layout = tasks.measure(task, tk, [SentimentExample("A fine film .", 1)])
    assert layout.single_token  # " terrible" and " great" are one token each
