"""ZoAR: zeroth-order estimation with averaged-baseline query reuse (Qiu et al., 2025)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
import optax

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs
from zoaq_jax._src import expansion, history, ledger, oracle


class ZoARState(NamedTuple):
    """State of :func:`zoar_estimator`: counters and the FIFO of the newest records."""

    ledger: ledger.QueryLedger
    history: history.History


def zoar_estimator(
    k: int = 1,
    n_hist: int = 8,
    mu: float = 5e-3,
    difference: str = "forward",
    key: Any = 0,
) -> optax.GradientTransformationExtraArgs:
    r"""ZoAR's history-reuse estimator; history is counted in steps.

    Each step draws ``k`` fresh Gaussian directions and appends their records to a
    FIFO that keeps the newest :math:`n = (N_{hist} + 1) k` records.

    * ``difference="forward"`` (the public code's form, an averaged baseline): records
      hold :math:`y_i = f(x_{a_i} + \mu u_i)`; with :math:`b = \frac1n \sum_j y_j`,

      .. math:: g_t = \frac1n \sum_i \frac{y_i - b}{\mu} u_i

      (``k`` calls a step; no centre value is needed).
    * ``difference="central"`` (the LLM form): records hold central responses
      :math:`r_i`, and :math:`g_t = \frac1n \sum_i r_i u_i`, the average of MeZO projected
      gradients over the newest :math:`N_{hist} + 1` steps (``2k`` calls a step).

    Non-finite values are discarded (counted in ``num_nonfinite``) and never enter the
    buffer; a step without any finite fresh value returns zeros. The buffer holds
    float32 values, so in the forward form a float64 objective's baseline is formed
    from float32 values. With ``n_hist=0`` and
    central differences this is exactly :func:`fixed_estimator`.

    Args:
      k: fresh directions per step.
      n_hist: past steps kept :math:`N_{hist} \ge 0`.
      mu: smoothing radius :math:`\mu > 0`.
      difference: ``"forward"`` (averaged baseline) or ``"central"``.
      key: integer seed or typed key.

    Returns:
      An :class:`optax.GradientTransformationExtraArgs` (see :func:`fixed_estimator`
      for the ``update`` signature).

    Example:
      >>> import jax.numpy as jnp, optax, zoaq_jax
      >>> est = zoaq_jax.zoar_estimator(k=2, n_hist=3, key=0)
      >>> params = jnp.ones(5)
      >>> g, state = est.update(None, est.init(params), params, value_fn=lambda x: x @ x)
      >>> int(optax.tree.get(state, "num_queries"))
      2

    References:
      Qiu et al., Zeroth-Order Optimization is Secretly Single-Step Policy Optimization,
      2025.
    """
    k = checks.static_int("k", k, 1)
    n_hist = checks.static_int("n_hist", n_hist, 0)
    checks.positive("mu", mu)
    schedule = ledger.KeySchedule.of(key)
    checks.choice("difference", difference, oracle.DIFFERENCES)
    capacity = (n_hist + 1) * k

    def init_fn(params):
        return ZoARState(ledger=schedule.init(params), history=history.init(capacity))

    def update_fn(updates, state, params, *, value_fn, value=None, **extra_args):
        del updates, value  # the forward form needs no centre value
        diff = oracle.FiniteDifference(oracle.bind(value_fn, params, extra_args), mu, difference)
        step_key = schedule.step_key(state.ledger)
        u = dirs.sample_many("gaussian", ledger.direction_keys(step_key, 0, k), params)
        if difference == "forward":
            fresh = diff.values(params, u)
        else:
            fresh, _ = diff.responses(params, u, None)
        ok = jnp.isfinite(fresh)
        records = history.push(state.history, jnp.arange(k, dtype=jnp.int32), fresh,
                               state.ledger.step, ok)
        kept = history.valid(records)
        n = jnp.sum(kept, dtype=jnp.int32)
        coeffs = records.responses
        if difference == "forward":
            baseline = jnp.sum(jnp.where(kept, coeffs, 0.0)) / jnp.maximum(n, 1)
            coeffs = (coeffs - baseline) / mu
        record_keys = schedule.record_keys(state.ledger, records.steps, records.index)
        total = dirs.regenerate_sum("gaussian", record_keys, jnp.where(kept, coeffs, 0.0), params)
        n_ok = jnp.sum(ok, dtype=jnp.int32)
        g, _ = expansion.finish(total, n, 1.0, n_ok)
        new_ledger = ledger.advance(
            state.ledger, k=k, calls=diff.calls_per_direction * k, nonfinite=k - n_ok
        )
        return optax.tree.cast_like(g, params), ZoARState(ledger=new_ledger, history=records)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
