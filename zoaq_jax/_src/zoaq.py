"""ZoAQ: adaptive zeroth-order querying via query-reuse coupling (paper Algorithm 1)."""

from __future__ import annotations

import jax
import optax

from zoaq_jax._src import budgets, gates, oracle
from zoaq_jax._src import retention as retentions
from zoaq_jax._src.controller import adaptive_estimator
from zoaq_jax._src.policies import BudgetRule, Gate, Grid, KeyLike, Retention


def zoaq_estimator(
    k_min: int = 1,
    k_max: int = 10,
    *,
    k_step: int = 1,
    mu: float | jax.Array = 5e-3,
    gate: Gate | None = None,
    budget: BudgetRule | None = None,
    retention: Retention | None = None,
    difference: str = "central",
    directions: str = "gaussian",
    evaluation: str = "loop",
    key: KeyLike = 0,
    common_random_numbers: bool = oracle.COMMON_RANDOM_NUMBERS,
) -> optax.GradientTransformationExtraArgs:
    r"""ZoAQ's accept-or-expand estimator with query reuse (Algorithm 1 of the paper).

    At step :math:`t` the candidate pools the retained records :math:`\mathcal R_{t-1}`
    (at most ``n_hist``) and :math:`K` fresh ones :math:`\mathcal Q_t(K)`:

    .. math::

      g_t(K) = \frac{s}{n_t(K)} \sum_{i \in \mathcal R_{t-1} \cup \mathcal Q_t(K)} r_i u_i,
      \qquad s_t(K) = \cos(g_t(K), m_{t-1}).

    Starting from :math:`K = K_{\min}` (or the budget rule's start), the first
    :math:`K` with :math:`s_t(K) \ge \tau_{t-1}` is accepted, else :math:`K_{\max}`; each
    retry buys only :math:`\Delta K` new directions. If :math:`\|m_{t-1}\| \le
    \varepsilon_{anc}` the score is :math:`\tau_{t-1}` (warm start); a zero candidate
    scores :math:`-\infty`. On acceptance :math:`m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t`,
    :math:`\tau_t = \beta_\tau \tau_{t-1} + (1-\beta_\tau) s_t` (unchanged for
    :math:`s_t = -\infty` and at warm start), and the buffer keeps the newest ``n_hist``
    records. Records store a key, a response and
    the acquisition step; the state keeps the running sum of their contributions, so a
    step draws only its fresh directions and regenerates those it evicts.

    NaN/inf policy: a non-finite response is discarded (it was a query, so it is
    counted in ``num_queries`` and in ``num_nonfinite``) and never enters the estimate,
    ``m``, ``tau`` or the buffer; discarded records leave the candidate smaller, and a
    candidate without any finite fresh response scores :math:`-\infty` (at warm start
    too), so the gate expands within the budget. A step that ends without a finite
    fresh response (or with a non-finite forward centre value, which ends the step at
    ``k_min`` whatever the budget rule) returns zeros and leaves ``m``, ``tau``, the
    buffer and the next step's starting budget unchanged: retained records alone say
    nothing about the current point.

    Args:
      k_min: smallest fresh budget :math:`K_{\min} \ge 1`.
      k_max: largest fresh budget :math:`K_{\max} \ge K_{\min}`.
      k_step: grid spacing :math:`\Delta K`.
      mu: smoothing radius :math:`\mu > 0`.
      gate: the candidate test; None: ``gates.momentum()`` (the paper's cosine gate with
        its :math:`\tau_0`, :math:`\beta_\tau`, :math:`\beta_1` and
        :math:`\varepsilon_{anc}`; pass ``gates.momentum(tau0=0.5)`` to change one).
        Ablations: ``gates.momentum_norm(c_norm)`` (ZoAQ-Norm),
        ``gates.accept(gates.momentum())`` (AlwaysMomentum: accept at the start budget),
        ``gates.momentum(tau_band=(lo, hi))`` (a projected threshold).
      budget: where each step starts; None: ``budgets.reset("min")`` (paper default);
        ``budgets.reset("half")`` or ``budgets.reset("linear")``.
      retention: the records kept; None: ``retention.fifo()`` (the newest
        :math:`N_{hist} = 8`; ``retention.fifo(0)`` disables reuse);
        ``retention.fifo(8, reuse_after_expand=False)`` is AlwaysGradient (candidates
        after a failed test use fresh records only).
      difference: ``"central"`` (2 calls a direction) or ``"forward"`` (1 call a
        direction plus one centre value a step).
      directions: the family of directions: ``"gaussian"``, ``"sphere"``, ``"rademacher"``,
        ``"sparse:P"`` (mask density P) or ``"lowrank:R"`` (rank R on matrix leaves);
        math and references in :mod:`zoaq_jax._src.directions`.
      evaluation: ``"loop"``, ``"unrolled"`` or ``"vectorized"``: how a step evaluates
        its candidates (see :func:`adaptive_estimator`).
      key: integer seed or typed key; the default 0 is the same in every lane of a
        ``vmap`` (see the ``seed`` of :func:`zoaq_jax.run`).
      common_random_numbers: see :func:`fixed_estimator` (objectives that take
        ``noise_key``).

    Returns:
      An :class:`optax.GradientTransformationExtraArgs` whose ``update(updates, state,
      params, *, value_fn, value=None, **fn_kwargs)`` ignores ``updates`` and returns
      :math:`g_t`: :func:`adaptive_estimator` with the gate :func:`gates.momentum`, the
      budget rule :func:`budgets.reset` and the retention :func:`retention.fifo`
      (defaults). Diagnostics: ``num_queries``, ``num_nonfinite``, ``last_k``,
      ``last_score``, ``tau``, ``ema``, ``next_k``.

    Example:
      >>> import jax.numpy as jnp, optax, zoaq_jax
      >>> est = zoaq_jax.zoaq_estimator(1, 4, retention=zoaq_jax.retention.fifo(4), key=0)
      >>> params = jnp.ones(10)
      >>> state = est.init(params)
      >>> g, state = est.update(None, state, params, value_fn=lambda x: 0.5 * x @ x)
      >>> int(optax.tree.get(state, "last_k"))  # warm start: accepted at k_min
      1

    References:
      ZoAQ: Adaptive Zeroth-Order Querying via Query-Reuse Coupling, Algorithm 1.
    """
    return adaptive_estimator(
        gates.momentum() if gate is None else gate,
        budgets.reset() if budget is None else budget,
        retentions.fifo() if retention is None else retention,
        grid=Grid(k_min, k_max, k_step), mu=mu, difference=difference,
        directions=directions, evaluation=evaluation, key=key,
        common_random_numbers=common_random_numbers,
    )
