"""ZoAQ: adaptive zeroth-order querying via query-reuse coupling (paper Algorithm 1)."""

from __future__ import annotations

from typing import Any

import optax

from zoaq_jax._src import budgets, checks, gates, retained
from zoaq_jax._src.controller import adaptive_estimator

CONTROLLERS = ("adaptive", "always_accept", "fresh_on_expand")


def zoaq_estimator(
    k_min: int = 1,
    k_max: int = 10,
    k_step: int = 1,
    n_hist: int = 8,
    mu: float = 5e-3,
    tau0: float = 1.0,
    beta_tau: float = 0.9,
    b1: float = 0.9,
    eps_anc: float = 1e-12,
    reset: str = "min",
    trigger: str = "cosine",
    c_norm: float | None = None,
    tau_band: tuple[float, float] | None = None,
    difference: str = "central",
    directions: str = "gaussian",
    controller: str = "adaptive",
    refresh: int = retained.REFRESH,
    evaluation: str = "loop",
    key: Any = 0,
) -> optax.GradientTransformationExtraArgs:
    r"""ZoAQ's accept-or-expand estimator with query reuse (Algorithm 1 of the paper).

    At step :math:`t` the candidate pools the retained records :math:`\mathcal R_{t-1}`
    (at most ``n_hist``) and :math:`K` fresh ones :math:`\mathcal Q_t(K)`:

    .. math::

      g_t(K) = \frac{s}{n_t(K)} \sum_{i \in \mathcal R_{t-1} \cup \mathcal Q_t(K)} r_i u_i,
      \qquad s_t(K) = \cos(g_t(K), m_{t-1}).

    Starting from :math:`K = K_{\min}` (or the reset policy's start), the first
    :math:`K` with :math:`s_t(K) \ge \tau_{t-1}` is accepted, else :math:`K_{\max}`; each
    retry buys only :math:`\Delta K` new directions. If :math:`\|m_{t-1}\| \le
    \varepsilon_{anc}` the score is :math:`\tau_{t-1}` (warm start); a zero candidate
    scores :math:`-\infty`. On acceptance :math:`m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t`,
    :math:`\tau_t = \beta_\tau \tau_{t-1} + (1-\beta_\tau) s_t` (projected onto
    ``tau_band`` if given; unchanged for :math:`s_t = -\infty` and at warm start), and
    the buffer keeps the newest ``n_hist`` records. Records store a key, a response and
    the acquisition step; the state keeps the running sum of their contributions, so a
    step draws only its fresh directions and regenerates those it evicts.

    NaN/inf policy: a non-finite response is discarded (it was a query, so it is
    counted in ``num_queries`` and in ``num_nonfinite``) and never enters the estimate,
    ``m``, ``tau`` or the buffer; discarded records leave the candidate smaller, and a
    candidate without any finite fresh response scores :math:`-\infty` (at warm start
    too), so the gate expands within the budget. A step that ends without a finite
    fresh response (or with a non-finite forward centre value, which ends the step at
    ``k_min`` whatever the reset policy) returns zeros and leaves ``m``, ``tau``, the
    buffer and the next step's starting budget unchanged: retained records alone say
    nothing about the current point.

    Args:
      k_min: smallest fresh budget :math:`K_{\min} \ge 1`.
      k_max: largest fresh budget :math:`K_{\max} \ge K_{\min}`.
      k_step: grid spacing :math:`\Delta K`.
      n_hist: retained records :math:`N_{hist} \ge 0` (0 disables reuse).
      mu: smoothing radius :math:`\mu > 0`.
      tau0: initial cosine threshold :math:`\tau_0 \in [-1, 1]`.
      beta_tau: threshold EMA factor :math:`\beta_\tau \in [0, 1)`.
      b1: estimate EMA factor :math:`\beta_1 \in [0, 1)`.
      eps_anc: warm-start radius :math:`\varepsilon_{anc} \ge 0` on :math:`\|m\|`.
      reset: where the next step starts: ``"min"`` (:math:`K_{\min}`, paper default),
        ``"half"`` (grid point at the midpoint of :math:`K_{\min}` and the accepted K)
        or ``"linear"`` (the accepted K).
      trigger: ``"cosine"`` (the paper's gate) or ``"norm"`` (ZoAQ-Norm ablation:
        accept when :math:`\|g - m\| / \|m\| \le` ``c_norm``; ``tau`` is not calibrated).
      c_norm: tolerance of the norm trigger (default 0.5); only with ``trigger="norm"``.
      tau_band: optional ``(lo, hi)`` projection band for the threshold (paper
        Appendix "Threshold Interface"); ``tau0`` is projected too.
      difference: ``"central"`` (2 calls a direction) or ``"forward"`` (1 call a
        direction plus one centre value a step).
      directions: the family of directions: ``"gaussian"``, ``"sphere"``, ``"rademacher"``,
        ``"sparse:P"`` (mask density P) or ``"lowrank:R"`` (rank R on matrix leaves);
        math and references in :mod:`zoaq_jax._src.directions`.
      controller: ``"adaptive"`` (the paper's controller), ``"always_accept"``
        (AlwaysMomentum ablation: accept at the start budget) or ``"fresh_on_expand"``
        (AlwaysGradient ablation: candidates after a failed test use fresh records only).
      refresh: steps between exact recomputations of the running sum of the retained
        records (see :func:`adaptive_estimator`).
      evaluation: ``"loop"``, ``"unrolled"`` or ``"vectorized"``: how a step evaluates
        its candidates (see :func:`adaptive_estimator`).
      key: integer seed or typed key.

    Returns:
      An :class:`optax.GradientTransformationExtraArgs` whose ``update(updates, state,
      params, *, value_fn, value=None, **fn_kwargs)`` ignores ``updates`` and returns
      :math:`g_t`: :func:`adaptive_estimator` with the gate :func:`gates.momentum` and
      the budget rule :func:`budgets.reset`. Diagnostics: ``num_queries``,
      ``num_nonfinite``, ``last_k``, ``last_score``, ``tau``, ``ema``, ``next_k``.

    Example:
      >>> import jax.numpy as jnp, optax, zoaq_jax
      >>> est = zoaq_jax.zoaq_estimator(k_min=1, k_max=4, n_hist=4, key=0)
      >>> params = jnp.ones(10)
      >>> state = est.init(params)
      >>> g, state = est.update(None, state, params, value_fn=lambda x: 0.5 * x @ x)
      >>> int(optax.tree.get(state, "last_k"))  # warm start: accepted at k_min
      1

    References:
      ZoAQ: Adaptive Zeroth-Order Querying via Query-Reuse Coupling, Algorithm 1.
    """
    checks.choice("trigger", trigger, gates.METRICS)
    checks.choice("controller", controller, CONTROLLERS)
    checks.in_closed_interval("tau0", tau0, -1.0, 1.0)
    if c_norm is None:
        c_norm = 0.5
    elif trigger != "norm":
        raise ValueError("c_norm is the norm trigger's tolerance; pass trigger='norm' to use it.")
    checks.positive("c_norm", c_norm)
    if tau_band is not None:
        if trigger == "norm":
            raise ValueError("tau_band bounds the cosine threshold; the norm trigger has none.")
        lo, hi = tau_band
        checks.in_closed_interval("tau_band[0]", lo, -1.0, 1.0)
        checks.in_closed_interval("tau_band[1]", hi, -1.0, 1.0)
        if checks.concrete_value(lo) is not None and checks.concrete_value(hi) is not None:
            if float(lo) > float(hi):
                raise ValueError(f"tau_band must satisfy lo <= hi, got {tau_band}.")
    k_min, k_max, k_step = checks.budget_grid(k_min, k_max, k_step)
    gate = gates.momentum(
        trigger, tau0=tau0, beta_tau=beta_tau, c_norm=c_norm, tau_band=tau_band, b1=b1,
        eps_anc=eps_anc, always_accept=controller == "always_accept",
    )
    return adaptive_estimator(
        gate, budgets.reset(reset, k_min, k_step), k_min=k_min, k_max=k_max, k_step=k_step,
        n_hist=n_hist, mu=mu, difference=difference, directions=directions,
        reuse_after_expand=controller != "fresh_on_expand", refresh=refresh,
        evaluation=evaluation, key=key,
    )
