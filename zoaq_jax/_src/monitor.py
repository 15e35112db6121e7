"""A pass-through transform that measures momentum consistency for any estimator."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs


class ConsistencyState(NamedTuple):
    """State of :func:`monitor_consistency`."""

    monitor_ema: optax.Updates  # EMA of the updates seen so far (not ``ema``: ZoAQ's gate has one)
    consistency: jax.Array  # float32, cos(updates, previous ema); NaN if either is zero


def monitor_consistency(*, b1: float = 0.9) -> optax.GradientTransformation:
    r"""Records the momentum-consistency score of the updates passing through.

    .. math::

      c_t = \cos(g_t, m_{t-1}), \qquad m_t = \beta_1 m_{t-1} + (1 - \beta_1) g_t.

    Updates pass unchanged. Placed right after an estimator in an ``optax.chain`` it
    gives fixed-budget baselines the same diagnostic that ZoAQ gates on; after ZoAQ's
    own estimator (same ``b1``) it equals ZoAQ's ``last_score`` after the warm start,
    until the first step whose estimate is unusable (ZoAQ then keeps its ``m``, while
    the zero update passing through decays the monitor's).
    Read it with ``optax.tree.get(state, "consistency")``.

    Args:
      b1: EMA factor :math:`\beta_1 \in [0, 1)`.

    Returns:
      An :class:`optax.GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, optax, zoaq_jax
      >>> tx = zoaq_jax.monitor_consistency()
      >>> state = tx.init(jnp.zeros(2))
      >>> _, state = tx.update(jnp.array([1.0, 0.0]), state)
      >>> _, state = tx.update(jnp.array([1.0, 1.0]), state)
      >>> round(float(optax.tree.get(state, "consistency")), 4)
      0.7071

    References:
      ZoAQ paper, Appendix "Cosine Stability" (the score traced for all methods).
    """
    checks.decay("b1", b1)

    def init_fn(params):
        return ConsistencyState(monitor_ema=dirs.zeros(params),
                                consistency=jnp.asarray(jnp.nan, jnp.float32))

    def update_fn(updates, state, params=None):
        del params
        norms = dirs.norm(updates) * dirs.norm(state.monitor_ema)
        cos = dirs.dot(updates, state.monitor_ema) / jnp.where(norms > 0, norms, 1.0)
        consistency = jnp.where(norms > 0, cos, jnp.nan).astype(jnp.float32)
        ema = optax.tree.update_moment(updates, state.monitor_ema, b1, 1)
        return updates, ConsistencyState(monitor_ema=ema, consistency=consistency)

    return optax.GradientTransformation(init_fn, update_fn)
