"""The attack objective: box-constrained perturbation, margin loss, success.

The attacker optimises a free variable :math:`x \\in \\mathbb R^d` (:math:`d` = pixels of
the image), mapped into the :math:`\\ell_\\infty` box around the clean image
:math:`I_0` and the valid pixel range:

.. math:: I(x) = \\mathrm{clip}(\\mathrm{clip}(x, -\\epsilon, \\epsilon) + I_0, 0, 1).

With log-probabilities :math:`\\log p(I)` of the target model, the loss is the margin

* targeted (the ZoAR code's attack, target :math:`t = (y + 1) \\bmod 10`):
  :math:`F(x) = \\max_{j \\ne t} \\log p_j - \\log p_t`;
* untargeted (the ZoAQ paper's wording, "misclassifies"):
  :math:`F(x) = \\log p_y - \\max_{j \\ne y} \\log p_j`;

and the attack succeeds when :math:`F(x) < 0` (the model predicts :math:`t`, resp. any
class but :math:`y`).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

GOALS = ("targeted", "untargeted")
EPSILON = {"mnist": 0.2, "cifar10": 0.03}


def check_goal(goal: str) -> str:
    if goal not in GOALS:
        raise ValueError(f"Unknown attack goal {goal!r}; choose one of {GOALS}.")
    return goal


def perturbed_image(x: jax.Array, image0: jax.Array, eps: float) -> jax.Array:
    """``clip(clip(x, -eps, eps) + image0, 0, 1)`` with ``x`` flat or image-shaped."""
    delta = jnp.clip(jnp.reshape(x, image0.shape), -eps, eps)
    return jnp.clip(delta + image0, 0.0, 1.0)


def attacked_class(labels, goal: str):
    """The class the margin is taken against: the target ``(y + 1) % 10`` or the label."""
    check_goal(goal)
    labels = np.asarray(labels, np.int32)
    return (labels + 1) % 10 if goal == "targeted" else labels


def margin(log_p: jax.Array, cls: jax.Array, goal: str) -> jax.Array:
    """The loss :math:`F` from log-probabilities ``(..., C)`` and the attacked class."""
    own = jnp.take_along_axis(log_p, jnp.expand_dims(cls, -1), axis=-1)[..., 0]
    others = jnp.where(jnp.arange(log_p.shape[-1]) == jnp.expand_dims(cls, -1), -jnp.inf, log_p)
    best_other = jnp.max(others, axis=-1)
    return best_other - own if goal == "targeted" else own - best_other


def attack_loss(log_prob: Callable[[jax.Array], jax.Array], eps: float, goal: str):
    """The black-box objective ``F(x, image0, cls)`` on the flat variable ``x``.

    ``image0`` is the clean image (H, W, C) and ``cls`` the attacked class (see
    :func:`attacked_class`); both are passed to the estimators as keywords.
    """
    check_goal(goal)

    def loss(x: jax.Array, image0: jax.Array, cls: jax.Array) -> jax.Array:
        log_p = log_prob(perturbed_image(x, image0, eps)[None])[0]
        return margin(log_p, cls, goal)

    return loss
