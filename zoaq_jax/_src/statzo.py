"""StatZO: adaptive direction counts from the classical norm test (Bollapragada et al.)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs
from zoaq_jax._src import expansion, ledger, oracle


class StatZOState(NamedTuple):
    """State of :func:`statzo_estimator`; ``tau`` is the test tolerance ``theta``."""

    ledger: ledger.QueryLedger
    tau: jax.Array  # float32, theta
    last_score: jax.Array  # float32, relative standard error of the accepted mean


def statzo_estimator(
    k_min: int = 1,
    k_max: int = 10,
    k_step: int = 1,
    theta: float = 0.5,
    mu: float = 5e-3,
    directions: str = "gaussian",
    difference: str = "forward",
    key: Any = 0,
) -> optax.GradientTransformationExtraArgs:
    r"""Adaptive sampling: grow K until the classical norm test holds.

    The per-direction estimates :math:`g_i = s\, r_i u_i` are added :math:`\Delta K` at
    a time (nested, as in ZoAQ) until the norm test

    .. math::

      \frac{\widehat{\mathrm{Var}}(g_i)}{n} \le \theta^2 \|\bar g\|^2,
      \qquad \widehat{\mathrm{Var}}(g_i) = \frac{1}{n-1}\sum_i \|g_i - \bar g\|^2,

    holds or :math:`K = K_{\max}`; the estimate is :math:`\bar g`. The classical form
    uses forward responses :math:`r_i = (f(x + \mu u_i) - f(x)) / \mu` and pays one
    centre query a step; ``difference="central"`` uses central responses (``2K`` calls a
    step, no centre query), the accounting of the ZoAQ paper's LLM table. The score reported
    in ``last_score`` is the relative standard error
    :math:`\sqrt{\widehat{\mathrm{Var}}/n} / \|\bar g\|` (the test is ``score <= theta``);
    fewer than two finite records cannot pass. Every step restarts at :math:`K_{\min}`.
    This is the classical test; the momentum-relative rule the ZoAQ paper also calls
    "StatZO" is ``zoaq_estimator(trigger="norm")``.

    Args:
      k_min: smallest budget.
      k_max: largest budget.
      k_step: grid spacing.
      theta: tolerance :math:`\theta > 0` of the norm test.
      mu: smoothing radius :math:`\mu > 0`.
      directions: ``"gaussian"`` or ``"sphere"``.
      difference: ``"forward"`` (classical, with a centre query) or ``"central"``.
      key: integer seed or typed key.

    Returns:
      An :class:`optax.GradientTransformationExtraArgs` (see :func:`fixed_estimator`).
      A forward step costs ``1 + K`` calls (``K`` when the caller passes ``value``), a
      central step ``2K``.

    Example:
      >>> import jax.numpy as jnp, optax, zoaq_jax
      >>> est = zoaq_jax.statzo_estimator(k_min=2, k_max=6, theta=0.5, key=0)
      >>> params = jnp.ones(4)
      >>> g, state = est.update(None, est.init(params), params, value_fn=lambda x: x @ x)
      >>> 2 <= int(optax.tree.get(state, "last_k")) <= 6
      True

    References:
      Bollapragada, Karamanli and Wild, Derivative-free optimization via adaptive
      sampling strategies, 2024.
    """
    k_min, k_max, k_step = checks.budget_grid(k_min, k_max, k_step)
    checks.positive("theta", theta)
    checks.positive("mu", mu)
    schedule = ledger.KeySchedule.of(key)
    checks.choice("directions", directions, dirs.KINDS)
    checks.choice("difference", difference, oracle.DIFFERENCES)
    slots = expansion.capacity(k_min, k_max, k_step)

    def init_fn(params):
        return StatZOState(
            ledger=schedule.init(params),
            tau=jnp.asarray(theta, jnp.float32),
            last_score=jnp.asarray(jnp.nan, jnp.float32),
        )

    def update_fn(updates, state, params, *, value_fn, value=None, **extra_args):
        del updates
        step = expansion.open_step(value_fn, params, extra_args, value, mu, difference)
        step_key = schedule.step_key(state.ledger)
        _, drawn = expansion.draw_step(directions, step_key, slots, params)

        def test(cand):
            n = cand.n_ok.astype(jnp.float32)
            mean_sq = dirs.dot(cand.total, cand.total) / jnp.maximum(n * n, 1.0)
            variance = (cand.sq_norm - n * mean_sq) / jnp.maximum(n - 1.0, 1.0)
            score = jnp.sqrt(jnp.maximum(variance, 0.0) / jnp.maximum(n, 1.0)
                             / jnp.maximum(mean_sq, 1e-30))
            score = jnp.where((cand.n_ok >= 2) & (mean_sq > 0), score, jnp.inf)
            return score, (score <= theta) | step.centre_bad

        cand = expansion.accept_or_expand(
            expansion.fresh_acquirer(step, params, step_key, directions, drawn),
            test, params, k_min=k_min, k_max=k_max, k_step=k_step, k_start=k_min,
            second_moment=True,
        )
        g, _ = expansion.finish(cand.total, cand.n_ok, dirs.estimator_scale(directions, params),
                                cand.n_ok)
        new_state = StatZOState(
            ledger=step.charge(state.ledger, cand),
            tau=state.tau,
            last_score=cand.score,
        )
        return optax.tree.cast_like(g, params), new_state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
