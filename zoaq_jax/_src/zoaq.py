"""ZoAQ: adaptive zeroth-order querying via query-reuse coupling (paper Algorithm 1)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs
from zoaq_jax._src import expansion, history, ledger, oracle

RESETS = ("min", "half", "linear")
TRIGGERS = ("cosine", "norm")
CONTROLLERS = ("adaptive", "always_accept", "fresh_on_expand")


class ZoAQState(NamedTuple):
    """State of :func:`zoaq_estimator`.

    ``tau`` is the threshold in force (the calibrated cosine threshold, or ``c_norm``
    under the norm trigger); ``last_score`` is the score of the accepted candidate at
    the last step (``-inf`` when no finite response was available).
    """

    ledger: ledger.QueryLedger
    ema: Any  # m, EMA of accepted estimates (compute dtypes)
    tau: jax.Array  # float32
    next_k: jax.Array  # int32, the budget the next step starts from (reset policy)
    history: history.History  # retained records
    last_score: jax.Array  # float32


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
    the buffer keeps the newest ``n_hist`` records. Records store the acquisition step,
    the direction's index and a response; directions are regenerated from their keys.

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
      directions: ``"gaussian"`` or ``"sphere"``.
      controller: ``"adaptive"`` (the paper's controller), ``"always_accept"``
        (AlwaysMomentum ablation: accept at the start budget) or ``"fresh_on_expand"``
        (AlwaysGradient ablation: candidates after a failed test use fresh records only).
      key: integer seed or typed key.

    Returns:
      An :class:`optax.GradientTransformationExtraArgs` whose ``update(updates, state,
      params, *, value_fn, value=None, **fn_kwargs)`` ignores ``updates`` and returns
      :math:`g_t`. Diagnostics: ``num_queries``, ``num_nonfinite``, ``last_k``,
      ``last_score``, ``tau``.

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
    k_min, k_max, k_step = checks.budget_grid(k_min, k_max, k_step)
    n_hist = checks.static_int("n_hist", n_hist, 0)
    checks.positive("mu", mu)
    schedule = ledger.KeySchedule.of(key)
    checks.in_closed_interval("tau0", tau0, -1.0, 1.0)
    checks.decay("beta_tau", beta_tau)
    checks.decay("b1", b1)
    checks.non_negative("eps_anc", eps_anc)
    checks.choice("reset", reset, RESETS)
    checks.choice("trigger", trigger, TRIGGERS)
    checks.choice("difference", difference, oracle.DIFFERENCES)
    checks.choice("directions", directions, dirs.KINDS)
    checks.choice("controller", controller, CONTROLLERS)
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
    slots = expansion.capacity(k_min, k_max, k_step)

    def project(tau):
        return tau if tau_band is None else jnp.clip(tau, tau_band[0], tau_band[1])

    def init_fn(params):
        tau = c_norm if trigger == "norm" else project(tau0)
        return ZoAQState(
            ledger=schedule.init(params),
            ema=dirs.zeros(params),
            tau=jnp.asarray(tau, jnp.float32),
            next_k=jnp.asarray(k_min, jnp.int32),
            history=history.init(n_hist),
            last_score=jnp.asarray(jnp.nan, jnp.float32),
        )

    def update_fn(updates, state, params, *, value_fn, value=None, **extra_args):
        del updates
        step = expansion.open_step(value_fn, params, extra_args, value, mu, difference)
        step_key = schedule.step_key(state.ledger)
        scale = dirs.estimator_scale(directions, params)
        # A non-finite forward centre ends the step at once, whatever the reset policy.
        k_start = jnp.where(step.centre_bad, k_min, state.next_k)
        tau, m = state.tau, state.ema
        m_norm = dirs.norm(m)
        warm = m_norm <= eps_anc

        retained = history.valid(state.history)
        coeffs = jnp.where(retained, state.history.responses, 0.0)
        retained_keys = schedule.record_keys(state.ledger, state.history.steps,
                                             state.history.index)
        retained_u, drawn = expansion.draw_step(
            directions, step_key, slots, params, retained_keys if n_hist else None
        )
        if retained_u is None:
            retained_total = dirs.regenerate_sum(directions, retained_keys, coeffs, params)
        else:
            retained_total = dirs.weighted_sum(coeffs, retained_u)
        n_retained = jnp.sum(retained, dtype=jnp.int32)

        def candidate(cand):
            """(sum of r_i u_i, record count) of the candidate pooled from cand."""
            reuse = (cand.k <= k_start) if controller == "fresh_on_expand" else True
            weight = jnp.asarray(reuse, jnp.float32)
            total = jax.tree.map(lambda h, f: weight.astype(h.dtype) * h + f,
                                 retained_total, cand.total)
            return total, jnp.where(reuse, n_retained, 0) + cand.n_ok

        def test(cand):
            total, n = candidate(cand)
            if trigger == "cosine":
                t_norm = dirs.norm(total)
                cos = dirs.dot(total, m) / jnp.maximum(t_norm * m_norm, 1e-30)
                empty = (cand.n_ok == 0) | (t_norm == 0)
                score = jnp.where(empty, -jnp.inf, jnp.where(warm, tau, cos))
                passed = score >= tau
            else:
                g = jax.tree.map(lambda t: t * (scale / jnp.maximum(n, 1)), total)
                ratio = dirs.norm(optax.tree.sub(g, m)) / jnp.maximum(m_norm, 1e-30)
                score = jnp.where(cand.n_ok == 0, jnp.inf, jnp.where(warm, 0.0, ratio))
                passed = score <= c_norm
            if controller == "always_accept":
                passed = True
            return score, passed | step.centre_bad

        cand = expansion.accept_or_expand(
            expansion.fresh_acquirer(step, params, step_key, directions, drawn),
            test, params, k_min=k_min, k_max=k_max, k_step=k_step, k_start=k_start,
        )
        g, usable = expansion.finish(*candidate(cand), scale, cand.n_ok)
        score = cand.score

        ema = jax.tree.map(lambda mi, gi: jnp.where(usable, b1 * mi + (1 - b1) * gi, mi), m, g)
        if trigger == "cosine":
            calibrated = project(beta_tau * tau + (1 - beta_tau) * score)
            tau = jnp.where(usable & ~warm & jnp.isfinite(score), calibrated, tau)
        records = history.push(
            state.history, jnp.arange(slots, dtype=jnp.int32), cand.responses,
            state.ledger.step, cand.ok & usable,
        )
        if reset == "min":
            next_k = jnp.asarray(k_min, jnp.int32)
        elif reset == "half":
            next_k = k_min + ((cand.k - k_min) // k_step // 2) * k_step
        else:
            next_k = cand.k
        next_k = jnp.where(usable, next_k, state.next_k)
        new_state = ZoAQState(
            ledger=step.charge(state.ledger, cand),
            ema=ema,
            tau=jnp.asarray(tau, jnp.float32),
            next_k=jnp.asarray(next_k, jnp.int32),
            history=records,
            last_score=score,
        )
        return optax.tree.cast_like(g, params), new_state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
