"""Applying an estimator's updates to the parameters (PRNG key leaves carried)."""

from __future__ import annotations

import jax
import optax

from optax import Params, Updates


def apply_updates(params: Params, updates: Updates) -> Params:
    r""":func:`optax.apply_updates` that carries the leaves whose update is ``None``.

    .. math:: x_{t+1} = x_t + u_t \quad\text{(leaves with } u_t = \text{None unchanged)}

    The estimators return ``None`` for PRNG key leaves of the params (there is nothing to
    add to a key), which :func:`optax.apply_updates` cannot take.

    Args:
      params: the parameters.
      updates: updates shaped like ``params``, ``None`` on carried leaves.

    Returns:
      The updated parameters, each leaf in its own dtype.

    Example:
      >>> import jax, jax.numpy as jnp, zoaq_jax
      >>> params = {"w": jnp.ones(2), "rng": jax.random.key(0)}
      >>> new = zoaq_jax.apply_updates(params, {"w": jnp.ones(2), "rng": None})
      >>> new["w"].tolist(), new["rng"] is params["rng"]
      ([2.0, 2.0], True)

    References:
      Optax, ``optax.apply_updates``.
    """
    return jax.tree.map(lambda p, u: p if u is None else optax.apply_updates(p, u),
                        params, updates)
