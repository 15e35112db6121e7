"""Small objectives and step functions shared by the tests."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def quadratic(x, a=None):
    """0.5 * ||x - a||^2 (a = 0 by default): gradient x - a, smoothing-invariant."""
    return 0.5 * jnp.sum((x if a is None else x - a) ** 2)


def wavy(x):
    """A smooth non-quadratic objective with nonzero curvature everywhere."""
    return jnp.sum(jnp.cos(x) * x**2) + 0.1 * jnp.sum(x) ** 2


def jitted_update(opt, value_fn):
    """``update`` of ``opt`` jitted for a fixed ``value_fn``; data comes as keywords."""
    return jax.jit(lambda state, params, **kw: opt.update(None, state, params, value_fn=value_fn,
                                                          **kw))


def trajectory(opt, value_fn, params, steps, lr=0.0, **kw):
    """Runs ``steps`` estimator updates with plain SGD on the estimates.

    Returns the list of (estimate, state) after each step and the final params.
    """
    update = jitted_update(opt, value_fn)
    state = opt.init(params)
    out = []
    for _ in range(steps):
        g, state = update(state, params, **kw)
        out.append((g, state))
        params = jax.tree.map(lambda p, u: p - lr * u, params, g)
    return out, params


def diag(state, name):
    """A diagnostic from any (chained) state as a Python number."""
    return optax.tree.get(state, name).item()


def zoaq_chain(lr, **estimator):
    """``zoaq_jax.zoaq(lr)`` with the estimator's own arguments (a policy, the grid's
    ``k_step``, ``difference``, ``directions``): the chain the alias builds."""
    import zoaq_jax

    return zoaq_jax.chain(zoaq_jax.zoaq_estimator(**estimator), zoaq_jax.scale_by_radazo(),
                          optax.scale_by_learning_rate(lr))
