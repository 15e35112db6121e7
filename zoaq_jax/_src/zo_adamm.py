"""ZO-AdaMM: Adam-style moments for zeroth-order estimates (Chen et al., 2019)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs


class ScaleByZOAdaMMState(NamedTuple):
    """State of :func:`scale_by_zo_adamm`; ``v_max`` is ``None`` without AMSGrad.

    The fields are not called ``mu``/``nu`` (Optax's names) because ``mu`` is the
    estimators' smoothing radius: every name in a chained state is unique.
    """

    m: optax.Updates  # first moment
    v: optax.Updates  # second moment
    v_max: optax.Updates | None  # running maximum of v (AMSGrad), or None


def scale_by_zo_adamm(
    *,
    b1: float = 0.9,
    b2: float = 0.99,
    eps: float = 1e-8,
    amsgrad: bool = False,
) -> optax.GradientTransformation:
    r"""Rescales estimates by ZO-AdaMM's Adam-style moments, without bias correction.

    .. math::

      m_t = \beta_1 m_{t-1} + (1 - \beta_1) g_t, \qquad
      v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2, \qquad
      u_t = \frac{m_t}{\sqrt{\hat v_t} + \epsilon},

    with :math:`\hat v_t = v_t` (the ZoAR code's ``adam`` rule, used by the benchmarks)
    or :math:`\hat v_t = \max(\hat v_{t-1}, v_t)` with ``amsgrad=True`` (the original
    ZO-AdaMM paper).

    Args:
      b1: first-moment decay :math:`\beta_1 \in [0, 1)`.
      b2: second-moment decay :math:`\beta_2 \in [0, 1)`.
      eps: stability term :math:`\epsilon > 0`.
      amsgrad: keep the running maximum of :math:`v`.

    Returns:
      An :class:`optax.GradientTransformation`; updates keep the params' dtypes.

    Example:
      >>> import jax.numpy as jnp, zoaq_jax
      >>> tx = zoaq_jax.scale_by_zo_adamm()
      >>> u, _ = tx.update(jnp.array([2.0, -4.0]), tx.init(jnp.zeros(2)))
      >>> [round(float(x), 4) for x in u]  # (1-b1) g / sqrt((1-b2) g^2)
      [1.0, -1.0]

    References:
      Chen et al., ZO-AdaMM: Zeroth-Order Adaptive Momentum Method for Black-Box
      Optimization, NeurIPS 2019.
    """
    checks.decay("b1", b1)
    checks.decay("b2", b2)
    checks.stability_term("eps", eps)

    def init_fn(params):
        # separate buffers for each moment, so that the state can be donated to jit
        return ScaleByZOAdaMMState(
            m=dirs.zeros(params), v=dirs.zeros(params),
            v_max=dirs.zeros(params) if amsgrad else None,
        )

    def update_fn(updates, state, params=None):
        del params
        m = optax.tree.update_moment(updates, state.m, b1, 1)
        v = optax.tree.update_moment_per_elem_norm(updates, state.v, b2, 2)
        v_max = jax.tree.map(jnp.maximum, state.v_max, v) if amsgrad else None
        scaled = jax.tree.map(lambda mi, vi: mi / (jnp.sqrt(vi) + eps), m, v_max if amsgrad else v)
        new_state = ScaleByZOAdaMMState(m=m, v=v, v_max=v_max)
        return optax.tree.cast_like(scaled, updates), new_state

    return optax.GradientTransformation(init_fn, update_fn)
