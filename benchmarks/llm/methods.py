"""The optimizers compared in the paper's LLM table, built from :mod:`zoaq_jax`.

All use the paper's learning rate and perturbation scale (passed in) and Gaussian
directions. FE (forward evaluations) are the estimator's ``num_queries``:

* ``mezo``: MeZO, K = 4 central directions on plain SGD. 2K = 8 FE a step.
* ``radazo``: R-AdaZO, K = 4 central directions on the R-AdaZO backbone. 8 FE a step.
* ``radazo-k1`` / ``radazo-k2``: the same with K = 1 / K = 2 (2 / 4 FE a step): with
  ``radazo``, the fixed-K methods whose best dev loss at each FE budget is the envelope
  of the anytime comparison (``--budget``).
* ``statzo``: the classical norm test (Bollapragada et al.; ``zoaq_jax.statzo``,
  theta = 0.5) growing K in [2, 4] on the R-AdaZO backbone. It uses forward differences
  with one centre forward pass a step, so a step costs K_t + 1 FE (not 2 K_t).
* ``statzo-norm``: the rule the ZoAQ paper writes for its StatZO baseline,
  ``||g - m|| / ||m|| <= 0.5`` (``zoaq_estimator(trigger="norm")`` without reuse),
  central differences, K in [2, 4]: 2 K_t FE a step, the paper's accounting.
* ``zoaq-1-4`` / ``zoaq-1-2``: ZoAQ, K in [1, 4] / [1, 2], N_hist = 15, tau0 = 1,
  beta_tau = 0.9, reset "min", central differences: 2 K_t FE a step.
* ``auto-k``: ``zoaq_jax.auto_k`` (the ``auto_k_estimator`` at its library defaults,
  K in [1, 16], progress window 1000 steps, on the R-AdaZO backbone) with the learning
  rate and mu the others get. It buys fresh directions one at a time: 2 K_t FE a step.

``chunks(k)`` lists the batched oracle calls a step with ``K_t = k`` makes (sizes in
forward passes; ``centre`` marks an unbatched centre evaluation): the benchmark uses it
to split step time into forward passes and everything else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import zoaq_jax


@dataclasses.dataclass(frozen=True)
class Method:
    name: str
    label: str
    k_min: int
    k_max: int
    build: Callable  # (learning_rate, mu, seed) -> optax.GradientTransformationExtraArgs
    chunks: Callable  # k -> list of (forward passes, batched)


def _central_chunks(k_min: int, k_step: int = 1):
    def chunks(k: int):
        return [(2 * k_min, True)] + [(2 * k_step, True)] * ((k - k_min) // k_step)

    return chunks


def _statzo_chunks(k: int):
    return [(1, False), (2, True)] + [(1, True)] * (k - 2)


def _radazo(k: int) -> Method:
    return Method(
        "radazo" if k == 4 else f"radazo-k{k}",
        f"R-AdaZO K={k}",
        k,
        k,
        lambda lr, mu, seed: zoaq_jax.radazo(lr, k=k, mu=mu, key=seed),
        _central_chunks(k),
    )


METHODS = {
    "mezo": Method(
        "mezo",
        "MeZO K=4",
        4,
        4,
        lambda lr, mu, seed: zoaq_jax.mezo(lr, k=4, mu=mu, key=seed),
        _central_chunks(4),
    ),
    "radazo": _radazo(4),
    "radazo-k1": _radazo(1),
    "radazo-k2": _radazo(2),
    "statzo": Method(
        "statzo",
        "StatZO K∈[2,4] (norm test, fwd diff.)",
        2,
        4,
        lambda lr, mu, seed: zoaq_jax.statzo(lr, k_min=2, k_max=4, theta=0.5, mu=mu, key=seed),
        _statzo_chunks,
    ),
    "statzo-norm": Method(
        "statzo-norm",
        "StatZO K∈[2,4] (paper's rule)",
        2,
        4,
        lambda lr, mu, seed: zoaq_jax.zoaq(
            lr, k_min=2, k_max=4, n_hist=0, mu=mu, trigger="norm", c_norm=0.5, key=seed
        ),
        _central_chunks(2),
    ),
    "zoaq-1-4": Method(
        "zoaq-1-4",
        "ZoAQ K∈[1,4]",
        1,
        4,
        lambda lr, mu, seed: zoaq_jax.zoaq(
            lr, k_min=1, k_max=4, n_hist=15, mu=mu, tau0=1.0, beta_tau=0.9, reset="min", key=seed
        ),
        _central_chunks(1),
    ),
    "zoaq-1-2": Method(
        "zoaq-1-2",
        "ZoAQ K∈[1,2]",
        1,
        2,
        lambda lr, mu, seed: zoaq_jax.zoaq(
            lr, k_min=1, k_max=2, n_hist=15, mu=mu, tau0=1.0, beta_tau=0.9, reset="min", key=seed
        ),
        _central_chunks(1),
    ),
    "auto-k": Method(
        "auto-k",
        "auto_k K∈[1,16] (defaults)",
        1,
        16,
        lambda lr, mu, seed: zoaq_jax.auto_k(lr, mu=mu, key=seed),
        _central_chunks(1),
    ),
}

DEFAULT = ("mezo", "radazo", "statzo", "zoaq-1-4", "zoaq-1-2")


def get_methods(names) -> list[Method]:
    unknown = [n for n in names if n not in METHODS]
    if unknown:
        raise ValueError(f"Unknown method(s) {unknown}; choose from {sorted(METHODS)}.")
    if not names:
        raise ValueError("No method given.")
    return [METHODS[n] for n in names]
