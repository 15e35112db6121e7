"""LoRA: zero-initialised B leaves the model unchanged; only adapters move; weights shared."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from llm_helpers import tiny

from benchmarks.llm import methods, tasks, train
from benchmarks.llm.models import lora


def _batch(tk, task, splits, n=4):
    layout = tasks.measure(task, tk, splits.train)
    return {
        k: jnp.asarray(v)
        for k, v in tasks.take(tasks.encode(task, tk, splits.train, layout), np.arange(n)).items()
    }


def test_adapters_start_as_identity():
    model, tk, task, splits = tiny()
    ids = jnp.asarray(
        tasks.encode(task, tk, splits.train[:2], tasks.measure(task, tk, splits.train))["tokens"][
            :, 0
        ]
    )
    with_lora = np.asarray(model(ids))
    graphdef, adapters, base = lora.split(model)
    # Setting A to anything keeps the output while B = 0.
    shaken = jax.tree.map(
        lambda x: x + 3.0 if x.ndim == 2 and x.shape[1] == lora.RANK else x, adapters
    )
    np.testing.assert_array_equal(np.asarray(lora.merge(graphdef, shaken, base)(ids)), with_lora)
    # A non-zero B changes it.
    moved = jax.tree.map(lambda x: x + 0.5, adapters)
    assert np.max(np.abs(np.asarray(lora.merge(graphdef, moved, base)(ids)) - with_lora)) > 1e-3


@pytest.mark.parametrize("arch", ["tiny-llama", "tiny-opt"])
def test_adapters_only_on_q_and_v_and_float32(arch):
    model, *_ = tiny(arch=arch)
    _, adapters, _ = lora.split(model)
    paths = [
        "/".join(str(getattr(p, "key", p)) for p in path)
        for path, _ in jax.tree_util.tree_flatten_with_path(adapters)[0]
    ]
    assert len(paths) == 2 * 2 * model.config.num_layers  # (A, B) x (q, v) x layers
    assert all(("q_proj" in p) or ("v_proj" in p) for p in paths)
    assert {x.dtype for x in jax.tree.leaves(adapters)} == {jnp.dtype(jnp.float32)}
    fresh = lora.init_adapters(adapters, 7)
    a = [x for p, x in zip(paths, jax.tree.leaves(fresh)) if "lora_a" in p]
    b = [x for p, x in zip(paths, jax.tree.leaves(fresh)) if "lora_b" in p]
    assert all(np.all(np.asarray(x) == 0) for x in b)
    assert all(0 < np.max(np.abs(np.asarray(x))) <= 1 / np.sqrt(x.shape[0]) for x in a)
    with pytest.raises(ValueError, match="already"):
        lora.apply_lora(model)


def test_step_updates_only_adapters_and_shares_base_weights():
    model, tk, task, splits = tiny()
    graphdef, adapters, base = lora.split(model)
    bundle = train.Bundle(graphdef, adapters, base, task.loss_kind, {}, {}, {})
    opt = methods.build(methods.REGISTRY.parse("mezo"), 1e-2, 1e-2, 0)
    state = opt.init(adapters)
    batch = _batch(tk, task, splits)
    step = train.make_step(opt, bundle.loss)
    base_before = jax.tree.map(np.array, base)
    new, _, fe, k = step(adapters, state, base, batch)
    assert int(fe) == 8 and int(k) == 4
    moved = [
        np.max(np.abs(np.asarray(a) - np.asarray(b)))
        for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(adapters))
    ]
    assert max(moved) > 0
    jax.tree.map(np.testing.assert_array_equal, base_before, jax.tree.map(np.asarray, base))
    # The 2K = 8 perturbed forward passes see the base weights once: no weight matrix is
    # ever materialised with a leading axis of 8 (a per-direction copy).
    text = str(jax.make_jaxpr(step)(adapters, state, base, batch))
    for w in jax.tree.leaves(base):
        if w.ndim == 2:
            shape = ",".join(str(s) for s in (8, *w.shape))
            assert f"f32[{shape}]" not in text, shape
