"""tuning_free: step size, K and smoothing radius chosen from the run itself.

The optimizer (this module): the units (the start point's RMS, :func:`_start_scale`), the
radius that follows the step, R-AdaZO's moments with a relative ``eps`` and a told
budget's decay, around the library's :func:`~zoaq_jax.adaptive_estimator` whose budget
rule is the controller (:mod:`zoaq_jax._src.step_control`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import checks, gates, ledger, oracle
from zoaq_jax._src import directions as dirs
from zoaq_jax._src.chain import Estimator
from zoaq_jax._src.controller import AdaptiveState, adaptive_estimator
from zoaq_jax._src.policies import Grid
from zoaq_jax._src.radazo import (ScaleByRAdaZOState, masked_step, refined_moments,
                                  relative_eps_scaled)
from zoaq_jax._src.step_control import (ControlState, Settings, StepSize, control_rule,
                                        in_unit, radius_frame, step_unit, unit_divisor)


DECAY = 0.25
"""The fraction of a told budget over which the step decays to 0 (chosen on the tuning
set: ``docs/design/tuning_free.md``)."""


def final_decay(spent: jax.Array, budget: int) -> jax.Array:
    r"""The step's factor after ``spent`` of ``budget`` calls: 1, then a cosine to 0 over
    the budget's last fraction :data:`DECAY`,
    :math:`c = \tfrac12 (1 + \cos(\pi \min(1, \max(0, (n / B - 1 + D) / D))))`."""
    phase = (spent.astype(jnp.float32) / budget - (1.0 - DECAY)) / DECAY
    return 0.5 * (1.0 + jnp.cos(jnp.pi * jnp.clip(phase, 0.0, 1.0)))


def applied_step(step: StepSize, spent: jax.Array, budget: int | None) -> jax.Array:
    r"""The step a move applies: :math:`\eta_t c_t`, with :math:`c_t` the told budget's
    :func:`final_decay` once a window has stalled (``settled``), 1 otherwise."""
    if budget is None:
        return step.learning_rate
    return step.learning_rate * jnp.where(step.settled, final_decay(spent, budget), 1.0)


MU_RATIO = 16.0
r"""The smoothing radius per unit of step, :math:`\mu_t = \kappa\, \eta_t` (chosen on the
tuning set: ``docs/design/tuning_free.md``)."""


TUNED_DIMENSION = 100
r"""The dimension of the tuning set, where ``learning_rate`` is the first step as given.

Above it the first step is ``learning_rate`` times :math:`\sqrt{d_{tuned} / d}`
(:func:`step_control.dimension_factor`): R-AdaZO's steps have unit size per coordinate
whatever :math:`d`, while the part of a one-direction estimate along the gradient shrinks
as :math:`1 / \sqrt d`; above the tuning set's dimension the first step shrinks with it,
so that a high-dimensional run does not start with a random walk that climbs (the
held-out d = 10^4 and 10^5 ellipsoids rose from their start with the d = 100 step)."""


class TuningFreeState(NamedTuple):
    """State of :func:`tuning_free`: the estimator's (its ``budget`` is the controller's
    :class:`~zoaq_jax._src.step_control.ControlState`), the moments' and the unit
    :math:`s`."""

    estimator: AdaptiveState
    moments: ScaleByRAdaZOState
    scale: jax.Array  # float32, s: the RMS of the start point (the unit of every step)


def _start_scale(params: chex.ArrayTree) -> jax.Array:
    """RMS of the optimised leaves of ``params`` that are not all 0 (1 where none is).

    A leaf that starts at 0 (LoRA's ``B``, a bias) carries no scale: counting its
    entries would shrink the unit with the share of such leaves."""
    leaves = [jnp.asarray(x, jnp.float32) for x in jax.tree.leaves(params) if dirs.optimised(x)]
    sums = [jnp.sum(jnp.square(x)) for x in leaves]
    sq = sum(sums, jnp.zeros((), jnp.float32))
    size = sum((jnp.where(q > 0, x.size, 0) for q, x in zip(sums, leaves)),
               jnp.zeros((), jnp.float32))
    rms = jnp.sqrt(sq / jnp.maximum(size, 1.0))
    return jnp.where(jnp.isfinite(rms) & (rms > 0), rms, 1.0).astype(jnp.float32)


def _scaled(tree: chex.ArrayTree, factor: jax.Array) -> chex.ArrayTree:
    """``tree`` times ``factor`` on optimised leaves (carried leaves unchanged)."""
    return jax.tree.map(
        lambda x: (x * factor).astype(jnp.result_type(x)) if dirs.optimised(x) else x, tree)


def tuning_free(
    budget: int | None = None,
    *,
    key: int | jax.Array = 0,
    learning_rate: float = 8e-3,
    k_max: int = 16,
    mu: float | None = None,
    window: int = 32,
    growth: float = 0.125,
    z: float = 1.0,
    q_data: float = 0.5,
    precision: float = 0.1,
    scale: float | None = None,
    common_random_numbers: bool = oracle.COMMON_RANDOM_NUMBERS,
) -> optax.GradientTransformationExtraArgs:
    r"""A complete zeroth-order optimizer with no learning rate, K or smoothing to choose.

    Units. Every length is measured in the start point's scale
    :math:`s = \mathrm{RMS}(x_0)` (``scale`` overrides it; 1 when :math:`x_0 = 0`): the
    optimizer works on :math:`z = x / s`, with steps :math:`s \eta_t` and smoothing radius
    :math:`s \mu_t`, so multiplying the parameters (and the start point) by a constant
    multiplies the path by it. Steps are R-AdaZO's refined moments of the K-direction
    central-difference estimate :math:`g_t` (in :math:`z`),

    .. math::

      m_t = \beta_1 m_{t-1} + (1 - \beta_1) g_t,\quad
      v_t = \beta_2 v_{t-1} + (1 - \beta_2) m_t^2,\quad
      z_{t+1} = z_t - \eta_t\, c_t\, \frac{m_t}{\sqrt{v_t} + 10^{-8} \max_i \sqrt{v_{t,i}}},

    whose :math:`\epsilon` is relative, so multiplying the objective by a constant changes
    nothing. The estimates and the controller's values are divided by a power of 2 fixed
    by the first estimate with a finite, non-zero largest entry
    (:func:`step_control.value_unit`: 1 unless that entry is beyond :math:`2^{\pm 40}`), so
    that this holds over float32's whole range (an objective times :math:`10^{\pm 30}`
    takes the same path), not only where :math:`m_t^2` is representable. :math:`c_t = 1`
    without ``budget``; told the budget :math:`B`, :math:`c_t`
    falls from 1 to 0 along a cosine over the last quarter of the budget
    (:func:`final_decay` of the calls :math:`n_t` spent) once a window has stalled (a run
    whose windows all still fall is at no noise floor, and a decay would only slow it),
    and the run never makes more than :math:`B` calls. A step without a finite response
    (every pair non-finite: the radius reaches out of the objective's domain) moves
    nothing, leaves the moments as they were and halves the step, and with it the radius
    that follows it, until the pairs fall inside the domain (with a fixed ``mu`` the
    step stays: such a run spends its calls in place; parametrize the domain away, e.g.
    optimize ``log x``).

    Smoothing. The radius follows the step, :math:`\mu_t = \kappa\, \eta_t` with
    :math:`\kappa` = :data:`MU_RATIO` (``mu`` fixes it instead): a radius many steps wide
    sees past the small-scale ripples and flat stretches of the objective while the run
    moves far, and shrinks with the step as the run settles, so its bias (of order
    :math:`\mu_t^2` times the objective's third derivatives) never sets a floor the step
    could go below.

    Control. The steps' free value estimates (the midpoints of the central pairs) are
    averaged over windows that grow with the run (:math:`\max(w, \lfloor g t\rfloor)`
    steps, decisions evenly spaced in :math:`\log t`). At the end of a window,
    :func:`step_control.noise_diagnosis` against the previous window decides:

    * a significant rise: :math:`\eta \leftarrow \eta/2`;
    * a stall from **data noise**: :math:`\eta \leftarrow \eta/2` when the window
      before stalled on data noise too and the two windows together did not fall
      significantly either (one such stall alone changes nothing); if the next window
      does not fall significantly either (:math:`\Delta \le z\, SE`, no rise), the
      halving lowered no noise floor: it is undone (:math:`\eta \leftarrow 2\eta`) and
      data noise halves the step no more in this run (a slow descent under minibatch
      noise reads as a data-noise floor that a smaller step does not lower);
    * a stall from **direction noise**: :math:`K \leftarrow \min(2K, K_{\max})` (at
      :math:`K_{\max}`, :math:`\eta \leftarrow \eta / 2`);
    * otherwise (a significant fall) nothing changes.

    At :math:`d \le 100` the step size only ever falls: it starts above the step that
    suits most objectives (a too-large step shows as a rise within the first windows, at
    a cost of a few windows) and halves each time the run stops gaining at its level, so
    a run of any length passes through the step sizes that suit it, in the manner of a
    reduce-on-plateau schedule whose plateaus are tested statistically. Above, the first
    step is :math:`\eta_0 \sqrt{100 / d}` and a start-up ramp
    (:func:`step_control.start_ramp`) doubles it, up to :data:`step_control.RAMP_CEILING`,
    while windows fall faster and are not white, and up to :math:`\eta_0` while windows decide nothing (no significant fall, stall or
    rise); after the ramp it only falls.

    The starting :math:`\eta`, :math:`\mu` and window rule were chosen on the tuning set
    of ``benchmarks/generalization`` and scored on its held-out set
    (``docs/results/generalization_heldout.md``).

    Args:
      budget: the run's call budget :math:`B` (None: an anytime run without decay).
      key: integer seed or typed key. Every lane of a ``vmap`` over starting points with
        one optimizer shares it (give each lane its own key for independent directions).
      learning_rate: the first step size :math:`\eta_0`, in units of :math:`s`, at
        dimension :math:`d \le 100` (the tuning set's); above, the first step is
        :math:`\eta_0 \sqrt{100 / d}`.
      k_max: the largest number of directions a step, :math:`K_{\max}`.
      mu: a fixed smoothing radius in units of :math:`s`; None: :math:`\mu_t = \kappa
        \eta_t`.
      window: steps of the first (shortest) window, :math:`w \ge 2`.
      growth: window length as a fraction of the steps elapsed, :math:`0 \le g \le 1`.
      z: standard errors a window's fall must exceed not to be a stall.
      q_data: von Neumann ratio at or above which a stall is blamed on data noise.
      precision: a window is precise enough to stall when its standard error is at most
        this fraction of the run's progress so far (:func:`step_control.noise_diagnosis`).
      scale: the unit :math:`s` (> 0); None: the RMS of the start point. Give it when
        that RMS is not the size of the way to go: every step and radius is a multiple
        of :math:`s`, so a start near but not at 0 (e.g. ``1e-6`` everywhere, where 0
        gives :math:`s = 1`) moves by steps of about :math:`10^{-8}` at first, never
        gets far, and its responses round to 0 (``num_zero_responses``).
      common_random_numbers: see :func:`fixed_estimator` (objectives that take
        ``noise_key``).

    Returns:
      An :class:`optax.GradientTransformationExtraArgs` (an :class:`Estimator`): its
      ``update(updates, state, params, *, value_fn, value=None, **fn_kwargs)`` ignores
      ``updates`` and returns the step to add to ``params`` (apply it with
      :func:`zoaq_jax.apply_updates`; chain nothing after it). Diagnostics:
      ``num_queries``, ``num_nonfinite``, ``last_k``, ``next_k``, ``value_estimate``,
      ``learning_rate``, ``scale``, ``num_lr_down``, ``num_data_noise``, ``num_k_up``,
      ``num_lr_up``, ``settled`` (a stall was seen: a told budget's final decay is on),
      ``data_noise_off`` (a data-noise halving was undone; an undone halving still
      counts in ``num_lr_down`` and ``num_data_noise``), ``unit``
      (:func:`step_control.value_unit`; 0 until an estimate fixes it).

    Example:
      >>> import jax, jax.numpy as jnp, optax, zoaq_jax
      >>> f = lambda x: jnp.sum(jnp.arange(1.0, 11.0) * (x - 1.0) ** 2)
      >>> opt = zoaq_jax.tuning_free(budget=4000, key=0)
      >>> params = jnp.full(10, 3.0)
      >>> state = opt.init(params)
      >>> step = jax.jit(lambda p, s: opt.update(None, s, p, value_fn=f))
      >>> for _ in range(2000):
      ...     u, state = step(params, state)
      ...     params = zoaq_jax.apply_updates(params, u)
      >>> start = f(jnp.full(10, 3.0))
      >>> int(optax.tree.get(state, "num_queries")) <= 4000, bool(f(params) < 1e-2 * start)
      (True, True)

    References:
      Ivgi, Hinder and Carmon, DoG is SGD's best friend, ICML 2023, Mishchenko and
      Defazio, Prodigy, ICML 2024 (step sizes from the run's own distances; compared as
      baselines in ``docs/results/generalization_heldout.md``); Optax's
      ``contrib.reduce_on_plateau`` (the schedule this one tests statistically); Byrd,
      Chin, Nocedal and Wu, Sample size selection in optimization methods for machine
      learning, Math. Program. 2012 (dynamic sample sizes); von Neumann, Distribution of
      the ratio of the mean square successive difference to the variance, Ann. Math.
      Stat. 1941; Shu et al., Refining Adaptive Zeroth-Order Optimization at Ease, ICML
      2025 (the moments).
    """
    if budget is not None:
        budget = checks.static_int("budget", budget, 1)
        if budget > ledger.COUNT_MAX:
            raise ValueError(f"budget ({budget}) must be at most 2**31 - 1.")
    for name, value in (("learning_rate", learning_rate), ("z", z), ("q_data", q_data),
                        ("precision", precision), ("growth", growth)):
        checks.finite(name, value)
    checks.positive("learning_rate", learning_rate)
    if mu is not None:
        checks.finite("mu", mu)
        checks.positive("mu", mu)
    k_max = checks.static_int("k_max", k_max, 1)
    checks.count("window", window, 2)
    checks.in_closed_interval("growth", growth, 0.0, 1.0)
    checks.non_negative("z", z)
    checks.in_closed_interval("q_data", q_data, 0.0, 2.0)
    checks.positive("precision", precision)
    if scale is not None:
        checks.finite("scale", scale)
        checks.positive("scale", scale)
    b1, b2, eps = 0.9, 0.99, 1e-8  # R-AdaZO's moments (the benchmarks' betas)
    follows = mu is None  # the radius follows the step
    # The estimator's radius is fixed, mu_e = kappa eta_0; the radius kappa eta_t follows
    # the step through the estimator's frame (step_control.radius_frame).
    mu_e = MU_RATIO * learning_rate if mu is None else mu
    settings = Settings(eta0=learning_rate, follows=follows, window=window, growth=growth,
                        z=z, q_data=q_data, precision=precision)
    estimator = adaptive_estimator(
        gates.accept(), control_rule(settings, learning_rate, TUNED_DIMENSION),
        grid=Grid(1, k_max), mu=mu_e, predraw=False, key=key,
        common_random_numbers=common_random_numbers)

    def init_fn(params):
        s = _start_scale(params) if scale is None else jnp.asarray(scale, jnp.float32)
        z0 = _scaled(params, 1.0 / s)
        est = estimator.init(z0)
        if budget is not None:
            est = ledger.limit_queries(est, budget)
        return TuningFreeState(est, ScaleByRAdaZOState(m=dirs.zeros(z0), v=dirs.zeros(z0)), s)

    def update_fn(updates, state, params, *, value_fn, value=None, **extra_args):
        del updates
        control: ControlState = state.estimator.budget
        s = state.scale
        rho = radius_frame(control.step, learning_rate, follows)
        w_unit = s * rho

        @functools.wraps(value_fn)
        def value_fn_w(point, *args, **kwargs):
            return value_fn(_scaled(point, w_unit), *args, **kwargs)

        w = _scaled(params, 1.0 / w_unit)
        g_w, est = estimator.update(None, state.estimator, w, value_fn=value_fn_w, value=value,
                                    **extra_args)
        g = jax.tree.map(lambda x: x / rho, g_w)
        # the unit the controller fixed in this step (est.budget.unit), from the estimate
        # as returned: the same value for float32 parameters, and the moments keep the
        # program they had when the unit was fixed here (bit for bit under XLA's defaults)
        divisor = unit_divisor(step_unit(control.unit, g))
        g = jax.tree.map(lambda x: in_unit(x, divisor), g)
        moments = refined_moments(g, state.moments, b1, b2)
        lr = applied_step(control.step, est.ledger.num_queries, budget)
        dz = jax.tree.map(lambda d: -lr * d, relative_eps_scaled(moments, eps))
        took = est.ledger.step > state.estimator.ledger.step  # a step the budget afforded
        informed = took & jnp.isfinite(est.ledger.value_estimate)
        dz, moments = masked_step(informed, dz, moments, state.moments)
        return (dirs.cast_like(_scaled(dz, s), params), TuningFreeState(est, moments, s))

    return Estimator(init_fn, update_fn)
