"""Target models: shapes, evaluation mode, weight files."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.attack import models, train


@pytest.mark.parametrize("dataset", ["mnist", "cifar10"])
def test_models_return_normalised_log_probs(dataset):
    model = models.create(dataset, seed=0)
    images = jax.random.uniform(jax.random.key(0), (3, *models.MODELS[dataset].image_shape))
    log_prob = jax.jit(models.log_prob_fn(model))
    out = log_prob(images)
    assert out.shape == (3, 10)
    np.testing.assert_allclose(jax.scipy.special.logsumexp(out, axis=-1), 0, atol=1e-5)
    np.testing.assert_array_equal(out, log_prob(images))  # dropout is off: deterministic


def test_weights_round_trip_and_shape_check(tmp_path):
    trained = models.create("mnist", seed=1)
    path = tmp_path / "w.npz"
    train.save_weights(trained, path)
    fresh = models.create("mnist", seed=2)
    x = jnp.full((1, 28, 28, 1), 0.5)
    expected = train.predict(models.log_prob_fn(trained), np.asarray(x))
    before = models.log_prob_fn(fresh)
    train.load_weights(fresh, path)
    after = models.log_prob_fn(fresh)
    assert not np.allclose(jax.jit(before)(x), jax.jit(after)(x))
    np.testing.assert_allclose(jax.jit(after)(x), jax.jit(models.log_prob_fn(trained))(x))
    np.testing.assert_array_equal(train.predict(after, np.asarray(x)), expected)
    with pytest.raises(ValueError, match="parameters"):
        train.load_weights(models.create("cifar10"), path)


def test_unknown_dataset():
    with pytest.raises(ValueError, match="Unknown dataset"):
        models.create("imagenet")
