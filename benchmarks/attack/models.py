"""Target classifiers in flax NNX: the paper's MNIST CNN and our CIFAR-10 CNN.

Both take images in ``[0, 1]`` shaped ``(..., H, W, C)``, normalise them inside the model
(the attacker only ever sees and edits the raw image) and return log-probabilities
``(..., 10)``. :func:`log_prob_fn` turns a model into the pure function the attack
queries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from flax import nnx


class MnistCNN(nnx.Module):
    """The MNIST CNN of the ZoAR code (the model ZoAQ attacks).

    conv(1->32, 3x3) ReLU, conv(32->64, 3x3) ReLU, max-pool 2, dropout 0.25,
    fc(9216->128) ReLU, dropout 0.5, fc(128->10), log-softmax; inputs are normalised
    with MNIST's mean 0.1307 and standard deviation 0.3081.
    """

    image_shape = (28, 28, 1)
    mean = (0.1307,)
    std = (0.3081,)

    def __init__(self, *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(1, 32, (3, 3), padding="VALID", rngs=rngs)
        self.conv2 = nnx.Conv(32, 64, (3, 3), padding="VALID", rngs=rngs)
        self.dropout1 = nnx.Dropout(0.25, rngs=rngs)
        self.fc1 = nnx.Linear(9216, 128, rngs=rngs)
        self.dropout2 = nnx.Dropout(0.5, rngs=rngs)
        self.fc2 = nnx.Linear(128, 10, rngs=rngs)

    def __call__(self, images: jax.Array) -> jax.Array:
        x = _normalise(images, self.mean, self.std)
        x = nnx.relu(self.conv1(x))
        x = nnx.relu(self.conv2(x))
        x = nnx.max_pool(x, (2, 2), strides=(2, 2))
        x = self.dropout1(x)
        x = x.reshape(*x.shape[:-3], -1)
        x = self.dropout2(nnx.relu(self.fc1(x)))
        return jax.nn.log_softmax(self.fc2(x))


class CifarCNN(nnx.Module):
    """Our CIFAR-10 target (the paper does not give its model; it reports 85% accuracy).

    A small VGG-style network: three blocks of two 3x3 SAME convolutions with ReLU
    (32, 64, 128 channels) each followed by a 2x2 max-pool, then dropout 0.5,
    fc(2048->256) ReLU, dropout 0.5, fc(256->10), log-softmax; inputs are normalised
    with the CIFAR-10 channel means and standard deviations.
    """

    image_shape = (32, 32, 3)
    mean = (0.4914, 0.4822, 0.4465)
    std = (0.2470, 0.2435, 0.2616)

    def __init__(self, *, rngs: nnx.Rngs, widths: Sequence[int] = (32, 64, 128)):
        sizes, c_in = [], 3
        for width in widths:
            sizes += [(c_in, width), (width, width)]
            c_in = width
        self.convs = nnx.List([nnx.Conv(a, b, (3, 3), padding="SAME", rngs=rngs) for a, b in sizes])
        self.dropout1 = nnx.Dropout(0.5, rngs=rngs)
        self.fc1 = nnx.Linear(widths[-1] * (32 >> len(widths)) ** 2, 256, rngs=rngs)
        self.dropout2 = nnx.Dropout(0.5, rngs=rngs)
        self.fc2 = nnx.Linear(256, 10, rngs=rngs)

    def __call__(self, images: jax.Array) -> jax.Array:
        x = _normalise(images, self.mean, self.std)
        for i, conv in enumerate(self.convs):
            x = nnx.relu(conv(x))
            if i % 2:
                x = nnx.max_pool(x, (2, 2), strides=(2, 2))
        x = self.dropout1(x.reshape(*x.shape[:-3], -1))
        x = self.dropout2(nnx.relu(self.fc1(x)))
        return jax.nn.log_softmax(self.fc2(x))


MODELS: dict[str, type[nnx.Module]] = {"mnist": MnistCNN, "cifar10": CifarCNN}


def _normalise(images: jax.Array, mean: Sequence[float], std: Sequence[float]) -> jax.Array:
    return (images - jnp.asarray(mean, images.dtype)) / jnp.asarray(std, images.dtype)


def create(dataset: str, seed: int = 0) -> nnx.Module:
    """A freshly initialised target model for ``dataset`` (``"mnist"`` or ``"cifar10"``)."""
    if dataset not in MODELS:
        raise ValueError(f"Unknown dataset {dataset!r}; choose one of {sorted(MODELS)}.")
    return MODELS[dataset](rngs=nnx.Rngs(seed))


def log_prob_fn(model: nnx.Module) -> Callable[[jax.Array], jax.Array]:
    """The model in evaluation mode (no dropout) as a pure function ``images -> log p``.

    The function holds a copy of the current weights, so it can be jit-compiled and
    vmapped freely; the model itself is left unchanged (still in its own mode).
    """
    evaluated = nnx.clone(model)  # a snapshot: later changes to ``model`` do not leak in
    evaluated.eval()
    graphdef, state = nnx.split(evaluated)

    def log_prob(images: jax.Array) -> jax.Array:
        return nnx.merge(graphdef, state)(images)

    return log_prob
