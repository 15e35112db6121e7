"""The fixed-budget K-direction estimator (inside R-AdaZO, ZO-AdaMM, ZO-SGD and MeZO)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
import optax

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs
from zoaq_jax._src import expansion, ledger, oracle


class FixedEstimatorState(NamedTuple):
    """State of :func:`fixed_estimator`: only keys and counters."""

    ledger: ledger.QueryLedger


def fixed_estimator(
    k: int = 1,
    mu: float = 5e-3,
    difference: str = "central",
    directions: str = "gaussian",
    key: Any = 0,
) -> optax.GradientTransformationExtraArgs:
    r"""Averages ``k`` fresh random-direction finite differences at the current point.

    .. math::

      g_t = \frac{s}{n} \sum_{i=1}^{k} r_\mu(x_t, u_{t,i})\, u_{t,i},

    with central responses :math:`r = (f(x + \mu u) - f(x - \mu u)) / (2\mu)` (2 calls a
    direction) or forward ones :math:`r = (f(x + \mu u) - f(x)) / \mu` (1 call a direction
    plus one centre value a step), :math:`n` the number of finite responses and
    :math:`s` = 1 (gaussian) or :math:`d` (sphere). Non-finite responses are discarded
    (counted in ``num_nonfinite``); a step without any finite response returns zeros.

    Args:
      k: directions per step.
      mu: smoothing radius :math:`\mu > 0`.
      difference: ``"central"`` or ``"forward"``.
      directions: ``"gaussian"`` or ``"sphere"``.
      key: integer seed or typed key (``jax.random.key``).

    Returns:
      An :class:`optax.GradientTransformationExtraArgs`; its ``update(updates, state,
      params, *, value_fn, value=None, **fn_kwargs)`` ignores ``updates`` and returns the
      estimate. ``value`` (optional) is ``f(params)`` already computed by the caller;
      forward differences then reuse it and do not count it.

    Example:
      >>> import jax.numpy as jnp, optax, zoaq_jax
      >>> est = zoaq_jax.fixed_estimator(k=4, mu=1e-3, key=0)
      >>> params = jnp.ones(3)
      >>> g, state = est.update(None, est.init(params), params, value_fn=lambda x: x @ x)
      >>> int(optax.tree.get(state, "num_queries"))
      8

    References:
      Nesterov and Spokoiny, Random gradient-free minimization of convex functions, 2017.
    """
    k = checks.static_int("k", k, 1)
    checks.positive("mu", mu)
    schedule = ledger.KeySchedule.of(key)
    checks.choice("difference", difference, oracle.DIFFERENCES)
    checks.choice("directions", directions, dirs.KINDS)

    def init_fn(params):
        return FixedEstimatorState(ledger=schedule.init(params))

    def update_fn(updates, state, params, *, value_fn, value=None, **extra_args):
        del updates
        step = expansion.open_step(value_fn, params, extra_args, value, mu, difference)
        step_key = schedule.step_key(state.ledger)
        _, drawn = expansion.draw_step(directions, step_key, k, params)
        cand = expansion.accept_or_expand(
            expansion.fresh_acquirer(step, params, step_key, directions, drawn),
            lambda c: (jnp.nan, True),
            params,
            k_min=k, k_max=k, k_step=1, k_start=k,
        )
        g, _ = expansion.finish(cand.total, cand.n_ok, dirs.estimator_scale(directions, params),
                                cand.n_ok)
        new_ledger = step.charge(state.ledger, cand)
        return optax.tree.cast_like(g, params), FixedEstimatorState(ledger=new_ledger)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
