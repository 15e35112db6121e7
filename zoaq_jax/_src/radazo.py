"""R-AdaZO: the refined adaptive zeroth-order backbone (Shu et al., ICML 2025)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs


class ScaleByRAdaZOState(NamedTuple):
    """State of :func:`scale_by_radazo` (moments in at least float32).

    The fields are not called ``mu``/``nu`` (Optax's names) because ``mu`` is the
    estimators' smoothing radius: every name in a chained state is unique.
    """

    m: optax.Updates  # first moment m
    v: optax.Updates  # second moment of the first moment, v


def refined_moments(updates: optax.Updates, state: ScaleByRAdaZOState, b1: float,
                    b2: float) -> ScaleByRAdaZOState:
    """R-AdaZO's moments after one estimate: :math:`m_t = \beta_1 m_{t-1} + (1 - \beta_1)
    g_t`, :math:`v_t = \beta_2 v_{t-1} + (1 - \beta_2) m_t^2` (shared with
    :func:`zoaq_jax.tuning_free`)."""
    m = optax.tree.update_moment(updates, state.m, b1, 1)
    return ScaleByRAdaZOState(m=m, v=optax.tree.update_moment_per_elem_norm(m, state.v, b2, 2))


def relative_eps_scaled(moments: ScaleByRAdaZOState, eps: float) -> optax.Updates:
    r"""R-AdaZO's step direction with a relative :math:`\epsilon`,
    :math:`m_t / (\sqrt{v_t} + \epsilon \max_i \sqrt{v_{t,i}} + \text{tiny})` (tiny:
    float32's smallest normal number, for :math:`v_t = 0`).

    Multiplying every estimate by a constant leaves it unchanged (an absolute
    :math:`\epsilon` would not: :func:`zoaq_jax.tuning_free`, scale-free)."""
    root = jax.tree.map(jnp.sqrt, moments.v)
    floor = eps * dirs.tree_max(root) + jnp.finfo(jnp.float32).tiny
    return jax.tree.map(lambda mi, ri: mi / (ri + floor), moments.m, root)


def masked_step(informed: jax.Array, step: optax.Updates, moments: ScaleByRAdaZOState,
                previous: ScaleByRAdaZOState) -> tuple[optax.Updates, ScaleByRAdaZOState]:
    """``(step, moments)`` after a step with a finite response (``informed``); after one
    without (every pair left the objective's domain, or the budget skipped the step), a
    zero step and the ``previous`` moments: a step that knows nothing moves nothing,
    rather than coast on the momentum out of the domain."""
    step = jax.tree.map(lambda d: jnp.where(informed, d, 0.0), step)
    kept = jax.tree.map(lambda new, old: jnp.where(informed, new, old), moments, previous)
    return step, kept


def scale_by_radazo(
    *,
    b1: float = 0.9,
    b2: float = 0.99,
    eps: float = 1e-8,
    eps_in_sqrt: bool = False,
) -> optax.GradientTransformation:
    r"""Rescales estimates by R-AdaZO's refined second moment of the first moment.

    .. math::

      m_t = \beta_1 m_{t-1} + (1 - \beta_1) g_t, \qquad
      v_t = \beta_2 v_{t-1} + (1 - \beta_2) m_t^2, \qquad
      u_t = \frac{m_t}{\sqrt{v_t} + \epsilon}
      \;\Big(\text{or } \frac{m_t}{\sqrt{v_t + \epsilon}} \text{ with eps\_in\_sqrt}\Big),

    without bias correction. The default places :math:`\epsilon` outside the root, as
    the public R-AdaZO and ZoAR code (and the ZoAQ experiments) do; ``eps_in_sqrt=True``
    is the R-AdaZO paper's formula. Chain with ``optax.scale_by_learning_rate`` to get
    :math:`x_{t+1} = x_t - \eta u_t`.

    Args:
      b1: first-moment decay :math:`\beta_1 \in [0, 1)`.
      b2: second-moment decay :math:`\beta_2 \in [0, 1)`.
      eps: stability term :math:`\epsilon > 0`.
      eps_in_sqrt: put :math:`\epsilon` inside the square root (paper form).

    Returns:
      An :class:`optax.GradientTransformation`; updates keep the params' dtypes.

    Example:
      >>> import jax.numpy as jnp, zoaq_jax
      >>> tx = zoaq_jax.scale_by_radazo()
      >>> u, _ = tx.update(jnp.array([2.0, -4.0]), tx.init(jnp.zeros(2)))
      >>> [round(float(x), 4) for x in u]  # m / sqrt(v) = sign(g) / sqrt(1 - b2)
      [10.0, -10.0]

    References:
      Shu et al., Refining Adaptive Zeroth-Order Optimization at Ease, ICML 2025.
    """
    checks.decay("b1", b1)
    checks.decay("b2", b2)
    checks.stability_term("eps", eps)

    def init_fn(params):
        # separate buffers for each moment, so that the state can be donated to jit
        return ScaleByRAdaZOState(m=dirs.zeros(params), v=dirs.zeros(params))

    def update_fn(updates, state, params=None):
        del params
        m, v = refined_moments(updates, state, b1, b2)
        if eps_in_sqrt:
            scaled = jax.tree.map(lambda mi, vi: mi / jnp.sqrt(vi + eps), m, v)
        else:
            scaled = jax.tree.map(lambda mi, vi: mi / (jnp.sqrt(vi) + eps), m, v)
        return optax.tree.cast_like(scaled, updates), ScaleByRAdaZOState(m=m, v=v)

    return optax.GradientTransformation(init_fn, update_fn)
