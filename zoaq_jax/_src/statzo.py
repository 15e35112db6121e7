"""StatZO: adaptive direction counts from the classical norm test (Bollapragada et al.)."""

from __future__ import annotations

import optax

from zoaq_jax._src import budgets, gates, oracle
from zoaq_jax._src.controller import adaptive_estimator
from zoaq_jax._src.policies import Grid, KeyLike, valid_grid


def statzo_estimator(
    k_min: int = 1,
    k_max: int = 10,
    *,
    k_step: int = 1,
    theta: float = 0.5,
    mu: float = 5e-3,
    directions: str = "gaussian",
    difference: str = "forward",
    evaluation: str = "loop",
    key: KeyLike = 0,
    common_random_numbers: bool = oracle.COMMON_RANDOM_NUMBERS,
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
    "StatZO" is ``zoaq_estimator(gate=gates.momentum_norm())``.

    Args:
      k_min: smallest budget.
      k_max: largest budget.
      k_step: grid spacing.
      theta: tolerance :math:`\theta > 0` of the norm test.
      mu: smoothing radius :math:`\mu > 0`.
      directions: the family of directions: ``"gaussian"``, ``"sphere"``, ``"rademacher"``,
        ``"sparse:P"`` (mask density P) or ``"lowrank:R"`` (rank R on matrix leaves);
        math and references in :mod:`zoaq_jax._src.directions`.
      difference: ``"forward"`` (classical, with a centre query) or ``"central"``.
      evaluation: ``"loop"``, ``"unrolled"`` or ``"vectorized"``: how a step evaluates
        its candidates (see :func:`adaptive_estimator`).
      key: integer seed or typed key; the default 0 is the same in every lane of a
        ``vmap`` (see the ``seed`` of :func:`zoaq_jax.run`).
      common_random_numbers: see :func:`fixed_estimator` (objectives that take
        ``noise_key``).

    Returns:
      An :class:`optax.GradientTransformationExtraArgs` (see :func:`fixed_estimator`):
      :func:`adaptive_estimator` with the gate :func:`gates.norm_test` and the budget
      rule ``budgets.constant(k_min)``.
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
    grid = valid_grid(Grid(k_min, k_max, k_step))  # k_min, named as such, before the rule
    return adaptive_estimator(
        gates.norm_test(theta=theta), budgets.constant(grid.k_min), grid=grid, mu=mu,
        difference=difference, directions=directions, evaluation=evaluation, key=key,
        common_random_numbers=common_random_numbers,
    )
