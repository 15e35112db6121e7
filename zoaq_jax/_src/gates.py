"""Gates: the candidate tests of :func:`adaptive_estimator`, as pure functions.

A gate scores the pooled candidate (:class:`~zoaq_jax.Evidence`) and passes or fails
it. The scores are module-level pure functions, unit-tested on tiny inputs:

* :func:`cosine_score`: ZoAQ's momentum consistency :math:`\\cos(g, m)` (paper Eq. 3);
* :func:`momentum_norm_score`: the ZoAQ-Norm ablation :math:`\\|g - m\\| / \\|m\\|`;
* :func:`variance_score`: StatZO's classical norm test, the relative standard error;
* :func:`calibrate_threshold`: ZoAQ's EMA threshold update.

The factories :func:`momentum`, :func:`momentum_norm`, :func:`norm_test` and
:func:`accept` assemble them into :class:`~zoaq_jax.Gate` objects (the convention of
:mod:`zoaq_jax._src.policies`); an ablation is a different gate, e.g.
``zoaq_estimator(gate=gates.momentum_norm(c_norm=0.5))`` (ZoAQ-Norm) or
``zoaq_estimator(gate=gates.accept(gates.momentum()))`` (AlwaysMomentum).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, overload

import chex
import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs
from zoaq_jax._src.policies import Evidence, Gate, Grid, Outcome


class MomentumGateState(NamedTuple):
    """State of :func:`momentum`: the EMA of accepted estimates and the threshold."""

    ema: chex.ArrayTree  # m, EMA of accepted estimates (compute dtypes)
    tau: jax.Array  # float32: the cosine threshold, or c_norm under the norm metric


class MomentumContext(NamedTuple):
    """What :func:`momentum`'s test needs, computed once a step."""

    ema: chex.ArrayTree  # m, the EMA of usable estimates (the parameters' structure)
    ema_norm: jax.Array  # float32, ||m||
    tau: jax.Array  # float32, the threshold this step's candidates are tested against
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


@overload
def project(tau: jax.Array, band: tuple[float, float] | None) -> jax.Array: ...
@overload
def project(tau: float, band: tuple[float, float] | None) -> float | jax.Array: ...
def project(tau: float | jax.Array, band: tuple[float, float] | None) -> float | jax.Array:
    """The threshold projected onto ``band`` (unchanged without one)."""
    return tau if band is None else jnp.clip(tau, band[0], band[1])


def calibrate_threshold(tau: jax.Array, score: jax.Array, beta_tau: float,
                        band: tuple[float, float] | None = None) -> jax.Array:
    r""":math:`\tau \leftarrow \Pi_{band}(\beta_\tau \tau + (1 - \beta_\tau) s)`."""
    return project(beta_tau * tau + (1 - beta_tau) * score, band)


def _momentum_gate(
    score: Callable[[Evidence, MomentumContext], jax.Array],
    passes: Callable[[jax.Array, jax.Array], jax.Array],
    tau0: float | jax.Array, b1: float, eps_anc: float,
    calibrate: Callable[[jax.Array, jax.Array], jax.Array] | None = None,
) -> Gate:
    """A gate against the EMA :math:`m` of usable estimates (``tau`` calibrated by
    ``calibrate(tau, score)`` after usable, non-warm steps with a finite score, if given)."""
    checks.decay("b1", b1)
    checks.non_negative("eps_anc", eps_anc)

    def init(params: chex.ArrayTree, grid: Grid) -> MomentumGateState:
        del grid
        return MomentumGateState(ema=dirs.zeros(params), tau=jnp.asarray(tau0, jnp.float32))

    def prepare(state: MomentumGateState) -> MomentumContext:
        ema_norm = dirs.norm(state.ema)
        return MomentumContext(state.ema, ema_norm, state.tau, ema_norm <= eps_anc)

    def test(ctx: MomentumContext, ev: Evidence) -> tuple[jax.Array, jax.Array]:
        s = score(ev, ctx)
        return s, passes(s, ctx.tau)

    def update(state: MomentumGateState, outcome: Outcome) -> MomentumGateState:
        usable = outcome.usable
        ema = jax.tree.map(lambda mi, gi: jnp.where(usable, b1 * mi + (1 - b1) * gi, mi),
                           state.ema, outcome.estimate)
        tau = state.tau
        if calibrate is not None:
            s = outcome.score
            tau = jnp.where(usable & ~outcome.context.warm & jnp.isfinite(s),
                            calibrate(tau, s), tau)
        return MomentumGateState(ema=ema, tau=jnp.asarray(tau, jnp.float32))

    return Gate(init, prepare, test, update)


def momentum(
    *,
    tau0: float = 1.0,
    beta_tau: float = 0.9,
    b1: float = 0.9,
    eps_anc: float = 1e-12,
    tau_band: tuple[float, float] | None = None,
) -> Gate:
    r"""ZoAQ's gate: pass when :math:`\cos(g, m) \ge \tau` (paper Eq. 3).

    :math:`m` is the EMA of usable estimates, :math:`m \leftarrow \beta_1 m + (1 - \beta_1)
    g`; after usable, non-warm steps with a finite score :math:`\tau` is calibrated by
    :func:`calibrate_threshold`. The score is :func:`cosine_score`.

    Args:
      tau0: initial threshold :math:`\tau_0 \in [-1, 1]` (projected onto ``tau_band``).
      beta_tau: threshold EMA factor :math:`\beta_\tau \in [0, 1)`.
      b1: estimate EMA factor :math:`\beta_1 \in [0, 1)`.
      eps_anc: warm-start radius :math:`\varepsilon_{anc} \ge 0` on :math:`\|m\|`.
      tau_band: optional ``(lo, hi)`` projection band of the threshold (paper Appendix
        "Threshold Interface").

    Returns:
      A :class:`~zoaq_jax.Gate` with state :class:`MomentumGateState`.

    Example:
      >>> import zoaq_jax
      >>> est = zoaq_jax.zoaq_estimator(gate=zoaq_jax.gates.momentum(tau_band=(0.0, 0.5)))

    References:
      ZoAQ: Adaptive Zeroth-Order Querying via Query-Reuse Coupling, Eq. 3, Algorithm 1.
    """
    checks.in_closed_interval("tau0", tau0, -1.0, 1.0)
    checks.decay("beta_tau", beta_tau)
    if tau_band is not None:
        lo, hi = tau_band
        checks.in_closed_interval("tau_band[0]", lo, -1.0, 1.0)
        checks.in_closed_interval("tau_band[1]", hi, -1.0, 1.0)
        if checks.concrete_value(lo) is not None and checks.concrete_value(hi) is not None:
            if float(lo) > float(hi):
                raise ValueError(f"tau_band must satisfy lo <= hi, got {tau_band}.")
    return _momentum_gate(
        cosine_score, lambda s, tau: s >= tau, project(tau0, tau_band), b1, eps_anc,
        calibrate=lambda tau, s: calibrate_threshold(tau, s, beta_tau, tau_band))


def momentum_norm(*, c_norm: float = 0.5, b1: float = 0.9, eps_anc: float = 1e-12) -> Gate:
    r"""ZoAQ-Norm's gate: pass when :math:`\|g - m\| / \|m\| \le c_{norm}`.

    :math:`m` is the EMA of usable estimates, as in :func:`momentum`; the tolerance is
    not calibrated (the state's ``tau`` holds ``c_norm``). The score is
    :func:`momentum_norm_score`.

    Args:
      c_norm: tolerance :math:`c_{norm} > 0`.
      b1: estimate EMA factor :math:`\beta_1 \in [0, 1)`.
      eps_anc: warm-start radius :math:`\varepsilon_{anc} \ge 0` on :math:`\|m\|`.

    Returns:
      A :class:`~zoaq_jax.Gate` with state :class:`MomentumGateState`.

    Example:
      >>> import zoaq_jax
      >>> est = zoaq_jax.zoaq_estimator(gate=zoaq_jax.gates.momentum_norm(c_norm=0.5))

    References:
      ZoAQ: Adaptive Zeroth-Order Querying via Query-Reuse Coupling (ZoAQ-Norm ablation).
    """
    checks.positive("c_norm", c_norm)
    return _momentum_gate(momentum_norm_score, lambda s, tau: s <= tau, c_norm, b1, eps_anc)


def norm_test(*, theta: float = 0.5) -> Gate:
    r"""StatZO's gate: pass when :func:`variance_score` :math:`\le \theta`."""
    checks.positive("theta", theta)

    def init(params: chex.ArrayTree, grid: Grid) -> NormTestState:
        del params, grid
        return NormTestState(tau=jnp.asarray(theta, jnp.float32))

    def test(state: NormTestState, ev: Evidence) -> tuple[jax.Array, jax.Array]:
        score = variance_score(ev)
        return score, score <= theta

    return Gate(init, lambda state: state, test, lambda state, outcome: state,
                second_moment=True)


def accept(gate: Gate | None = None) -> Gate:
    """The gate that passes every candidate: the step stops at the start budget.

    With ``gate``, that gate's scores, state and updates are kept and only its verdict is
    dropped (``accept(momentum())`` is ZoAQ's AlwaysMomentum ablation); without one the
    score is NaN and the state empty.
    """
    if gate is None:
        return Gate(
            init=lambda params, grid: optax.EmptyState(),
            prepare=lambda state: state,
            test=lambda ctx, ev: (jnp.nan, True),
            update=lambda state, outcome: state,
        )
    return gate._replace(test=lambda ctx, ev: (gate.test(ctx, ev)[0], True))
