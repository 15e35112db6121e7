"""Gates: the candidate tests of :func:`adaptive_estimator`, as pure functions.

A gate scores the pooled candidate (:class:`controller.Evidence`) and passes or fails
it. The scores are module-level pure functions, unit-tested on tiny inputs:

* :func:`cosine_score`: ZoAQ's momentum consistency :math:`\\cos(g, m)` (paper Eq. 3);
* :func:`momentum_norm_score`: the ZoAQ-Norm ablation :math:`\\|g - m\\| / \\|m\\|`;
* :func:`variance_score`: StatZO's classical norm test, the relative standard error;
* :func:`calibrate_threshold`: ZoAQ's EMA threshold update.

The factories :func:`momentum`, :func:`norm_test` and :func:`accept` assemble them into
:class:`controller.Gate` objects.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs
from zoaq_jax._src.controller import Evidence, Gate

METRICS = ("cosine", "norm")


class MomentumGateState(NamedTuple):
    """State of :func:`momentum`: the EMA of accepted estimates and the threshold."""

    ema: Any  # m, EMA of accepted estimates (compute dtypes)
    tau: jax.Array  # float32: the cosine threshold, or c_norm under the norm metric


class MomentumContext(NamedTuple):
    """What :func:`momentum`'s test needs, computed once a step."""

    ema: Any
    ema_norm: jax.Array
    tau: jax.Array
    warm: jax.Array  # bool: ||m|| <= eps_anc, the warm start


class NormTestState(NamedTuple):
    """State of :func:`norm_test`: its tolerance ``theta`` (as ``tau``)."""

    tau: jax.Array  # float32


def cosine_score(ev: Evidence, ctx: MomentumContext) -> jax.Array:
    r"""ZoAQ's score :math:`\cos(g, m)`; ``tau`` at warm start, ``-inf`` when empty.

    The candidate is empty when it has no finite fresh record or sums to zero.
    """
    t_norm = dirs.norm(ev.total)
    cos = dirs.dot(ev.total, ctx.ema) / jnp.maximum(t_norm * ctx.ema_norm, 1e-30)
    empty = (ev.n_fresh == 0) | (t_norm == 0)
    return jnp.where(empty, -jnp.inf, jnp.where(ctx.warm, ctx.tau, cos))


def momentum_norm_score(ev: Evidence, ctx: MomentumContext) -> jax.Array:
    r"""ZoAQ-Norm's score :math:`\|g - m\| / \|m\|`; 0 at warm start, ``inf`` when empty."""
    g = jax.tree.map(lambda t: t * (ev.scale / jnp.maximum(ev.n, 1)), ev.total)
    ratio = dirs.norm(optax.tree.sub(g, ctx.ema)) / jnp.maximum(ctx.ema_norm, 1e-30)
    return jnp.where(ev.n_fresh == 0, jnp.inf, jnp.where(ctx.warm, 0.0, ratio))


def variance_score(ev: Evidence) -> jax.Array:
    r"""StatZO's relative standard error :math:`\sqrt{\widehat{\mathrm{Var}}(g_i)/n}/\|\bar g\|`.

    ``inf`` with fewer than two finite records or a zero mean. Needs ``ev.sq_norm``.
    """
    n = ev.n_fresh.astype(jnp.float32)
    mean_sq = dirs.dot(ev.total, ev.total) / jnp.maximum(n * n, 1.0)
    variance = (ev.sq_norm - n * mean_sq) / jnp.maximum(n - 1.0, 1.0)
    score = jnp.sqrt(jnp.maximum(variance, 0.0) / jnp.maximum(n, 1.0)
                     / jnp.maximum(mean_sq, 1e-30))
    return jnp.where((ev.n_fresh >= 2) & (mean_sq > 0), score, jnp.inf)


def project(tau: Any, band: tuple[float, float] | None) -> Any:
    """The threshold projected onto ``band`` (unchanged without one)."""
    return tau if band is None else jnp.clip(tau, band[0], band[1])


def calibrate_threshold(tau: jax.Array, score: jax.Array, beta_tau: float,
                        band: tuple[float, float] | None = None) -> jax.Array:
    r""":math:`\tau \leftarrow \Pi_{band}(\beta_\tau \tau + (1 - \beta_\tau) s)`."""
    return project(beta_tau * tau + (1 - beta_tau) * score, band)


def momentum(
    metric: str = "cosine",
    *,
    tau0: float = 1.0,
    beta_tau: float = 0.9,
    c_norm: float = 0.5,
    tau_band: tuple[float, float] | None = None,
    b1: float = 0.9,
    eps_anc: float = 1e-12,
    always_accept: bool = False,
) -> Gate:
    r"""ZoAQ's gate: test candidates against the EMA :math:`m` of accepted estimates.

    ``metric="cosine"`` passes when :math:`\cos(g, m) \ge \tau` and calibrates
    :math:`\tau` by :func:`calibrate_threshold` after usable, non-warm steps with a finite
    score; ``metric="norm"`` passes when :math:`\|g - m\|/\|m\| \le c_{norm}` (no
    calibration). Usable estimates update :math:`m \leftarrow \beta_1 m + (1 - \beta_1) g`.
    ``always_accept`` passes every candidate but keeps the scores and updates
    (AlwaysMomentum ablation).
    """
    checks.choice("metric", metric, METRICS)
    checks.decay("b1", b1)
    checks.decay("beta_tau", beta_tau)
    checks.non_negative("eps_anc", eps_anc)
    cosine = metric == "cosine"
    band = tau_band if cosine else None

    def init(params):
        tau = project(tau0, band) if cosine else c_norm
        return MomentumGateState(ema=dirs.zeros(params), tau=jnp.asarray(tau, jnp.float32))

    def prepare(state):
        ema_norm = dirs.norm(state.ema)
        return MomentumContext(state.ema, ema_norm, state.tau, ema_norm <= eps_anc)

    def test(ctx, ev):
        if cosine:
            score = cosine_score(ev, ctx)
            passed = score >= ctx.tau
        else:
            score = momentum_norm_score(ev, ctx)
            passed = score <= ctx.tau
        return score, (True if always_accept else passed)

    def update(state, ctx, g, usable, score):
        ema = jax.tree.map(lambda mi, gi: jnp.where(usable, b1 * mi + (1 - b1) * gi, mi),
                           state.ema, g)
        tau = state.tau
        if cosine:
            calibrated = calibrate_threshold(tau, score, beta_tau, band)
            tau = jnp.where(usable & ~ctx.warm & jnp.isfinite(score), calibrated, tau)
        return MomentumGateState(ema=ema, tau=jnp.asarray(tau, jnp.float32))

    return Gate(init, prepare, test, update)


def norm_test(theta: float = 0.5) -> Gate:
    r"""StatZO's gate: pass when :func:`variance_score` :math:`\le \theta`."""
    checks.positive("theta", theta)

    def init(params):
        del params
        return NormTestState(tau=jnp.asarray(theta, jnp.float32))

    def test(state, ev):
        score = variance_score(ev)
        return score, score <= theta

    return Gate(init, lambda state: state, test, lambda state, ctx, g, usable, score: state,
                second_moment=True)


def accept() -> Gate:
    """The gate that passes every candidate: the step stops at the start budget."""
    return Gate(
        init=lambda params: optax.EmptyState(),
        prepare=lambda state: state,
        test=lambda ctx, ev: (jnp.nan, True),
        update=lambda state, ctx, g, usable, score: state,
    )
