"""The attack objective: box constraint, margin loss and success on known answers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.attack import objective


def brightness_model(images):
    """A tiny 'classifier': the logit of class j is j * 10 * mean pixel, minus j**2 / 10."""
    m = jnp.mean(images, axis=(-3, -2, -1))[..., None]
    j = jnp.arange(10.0)
    return jax.nn.log_softmax(10 * j * m - j**2 / 10, axis=-1)


def test_margin_known_values():
    log_p = jnp.log(jnp.array([0.1, 0.6, 0.3, 0, 0, 0, 0, 0, 0, 0]) + 1e-30)
    # targeted at class 2: best other is class 1 -> F = log 0.6 - log 0.3 = log 2
    targeted = objective.margin(log_p, jnp.int32(2), "targeted")
    np.testing.assert_allclose(targeted, np.log(2), rtol=1e-6)
    # untargeted, true label 1: F = log 0.6 - log 0.3
    untargeted = objective.margin(log_p, jnp.int32(1), "untargeted")
    np.testing.assert_allclose(untargeted, np.log(2), rtol=1e-6)
    # untargeted at a class that is not the argmax: already misclassified, F < 0
    assert objective.margin(log_p, jnp.int32(2), "untargeted") < 0


@pytest.mark.parametrize("goal", objective.GOALS)
def test_success_iff_prediction_matches_goal(goal):
    logits = jax.random.normal(jax.random.key(0), (500, 10)) * 3
    log_p = jax.nn.log_softmax(logits)
    cls = jax.random.randint(jax.random.key(1), (500,), 0, 10)
    success = np.asarray(objective.margin(log_p, cls, goal) < 0)
    pred = np.asarray(jnp.argmax(log_p, -1))
    expected = pred == np.asarray(cls) if goal == "targeted" else pred != np.asarray(cls)
    np.testing.assert_array_equal(success, expected)
    assert 0 < success.sum() < 500


def test_attacked_class():
    np.testing.assert_array_equal(objective.attacked_class([0, 3, 9], "targeted"), [1, 4, 0])
    np.testing.assert_array_equal(objective.attacked_class([0, 3, 9], "untargeted"), [0, 3, 9])
    with pytest.raises(ValueError, match="Unknown attack goal"):
        objective.attacked_class([1], "misclassify")


def test_perturbation_never_leaves_the_box():
    key_x, key_i = jax.random.split(jax.random.key(0))
    image0 = jax.random.uniform(key_i, (64, 6, 6, 3))
    x = 10 * jax.random.normal(key_x, (64, 6 * 6 * 3))
    for eps in (0.03, 0.2):
        image = jax.vmap(lambda xi, ii: objective.perturbed_image(xi, ii, eps))(x, image0)
        assert float(jnp.max(jnp.abs(image - image0))) <= eps + 1e-6
        assert float(jnp.min(image)) >= 0.0 and float(jnp.max(image)) <= 1.0
    # inside the box and the pixel range the map is the identity
    small = jnp.full((6 * 6 * 3,), 0.01)
    np.testing.assert_allclose(objective.perturbed_image(small, image0[0] * 0 + 0.5, 0.2), 0.51)


def test_attack_loss_known_answer():
    image0 = jnp.zeros((4, 4, 1))
    loss = objective.attack_loss(brightness_model, eps=0.2, goal="targeted")
    # x = -1 clips to -0.2, then to pixel 0: the image stays black, class 0 wins.
    f_black = loss(-jnp.ones(16), image0, jnp.int32(1))
    np.testing.assert_allclose(f_black, 0 - (-0.1), rtol=1e-5)  # logit_0 - logit_1
    # x = +1 gives a uniform 0.2 image: logits 2j - j^2/10 peak at j = 10 -> class 9 (8.1)
    f_bright = loss(jnp.ones(16), image0, jnp.int32(9))
    logits = 2 * np.arange(10.0) - np.arange(10.0) ** 2 / 10
    np.testing.assert_allclose(f_bright, logits[8] - logits[9], rtol=1e-5)
    assert f_bright < 0 < f_black
