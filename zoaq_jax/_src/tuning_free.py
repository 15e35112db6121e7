"""tuning_free: step size, K and smoothing radius chosen from the run itself."""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import checks, gates, ledger
from zoaq_jax._src import directions as dirs
from zoaq_jax._src.budgets import ResetState, window_length, window_statistics
from zoaq_jax._src.chain import Estimator
from zoaq_jax._src.controller import AdaptiveState, adaptive_estimator
from zoaq_jax._src.policies import BudgetRule, Grid
from zoaq_jax._src.radazo import ScaleByRAdaZOState, refined_moments


DECAY = 0.25
"""The fraction of a told budget over which the step decays to 0 (chosen on the tuning
set: ``docs/design/tuning_free.md``)."""


def final_decay(spent: jax.Array, budget: int) -> jax.Array:
    r"""The step's factor after ``spent`` of ``budget`` calls: 1, then a cosine to 0 over
    the budget's last fraction :data:`DECAY`,
    :math:`c = \tfrac12 (1 + \cos(\pi \min(1, \max(0, (n / B - 1 + D) / D))))`."""
    phase = (spent.astype(jnp.float32) / budget - (1.0 - DECAY)) / DECAY
    return 0.5 * (1.0 + jnp.cos(jnp.pi * jnp.clip(phase, 0.0, 1.0)))


MU_RATIO = 16.0
r"""The smoothing radius per unit of step, :math:`\mu_t = \kappa\, \eta_t` (chosen on the
tuning set: ``docs/design/tuning_free.md``)."""

RAMP_CEILING = 1.0
"""The start-up ramp's largest step, in units of :math:`s` (a step the size of the start
point's RMS in every coordinate)."""


TUNED_DIMENSION = 100
"""The dimension of the tuning set, where ``learning_rate`` is the first step as given."""


def _dimension_factor(params: chex.ArrayTree) -> float:
    r""":math:`\min(1, \sqrt{d_{tuned} / d})`: the first step at dimension :math:`d`.

    R-AdaZO's steps have unit size per coordinate whatever :math:`d`, while the part of a
    one-direction estimate along the gradient shrinks as :math:`1 / \sqrt d`; above the
    tuning set's dimension the first step shrinks with it, so that a high-dimensional run
    does not start with a random walk that climbs (the held-out d = 10^4 and 10^5
    ellipsoids rose from their start with the d = 100 step)."""
    return min(1.0, math.sqrt(TUNED_DIMENSION / max(dirs.dimension(params), 1)))


def start_ramp(c: StepControl, fell, halted, gain_rate, white, eta0: float):
    r"""The start-up ramp of a run that began below :math:`\eta_0` (:math:`d > 100`).

    While it is on, a window that falls significantly and faster per step than the last
    (:math:`\Delta_j / n_j > \Delta_{j-1} / n_{j-1}`, or the first fall), with values that
    are not white (``white``: von Neumann ratio :math:`q \ge q_{data}`, data noise
    dominates the window), doubles the step, up to :data:`RAMP_CEILING`. A window that
    decides nothing (no significant fall, no stall, no rise: the first window, or a fall
    too small for the window's noise) doubles the step too, up to :math:`\eta_0` (the
    first step at :math:`d \le 100`): the dimension's smaller first step is a guess that
    only evidence keeps (design round 7). Any other significant fall (no faster, or
    white: a larger step would raise the data-noise floor) ends the ramp at the step it
    has; so do a stall or a rise (``halted``) and the ceiling, after which the step only
    falls. A window that decides nothing leaves the ramp on, also once the step is above
    :math:`\eta_0 / 2` and no longer doubles on it; such a window may be white (a white
    fall would end the ramp: a window without a verdict is no evidence either way).

    Args:
      c: the controller before the window closes.
      fell, halted: the window fell significantly; it stalled or rose.
      gain_rate: the window's fall per step, :math:`\Delta_j / n_j`.
      white: the window's values are white (data noise dominates).
      eta0: :math:`\eta_0`, the cap of the doublings on windows that decide nothing.

    Returns:
      ``(factor, ramping)``: the step's factor (2 or 1) and whether the ramp goes on.
    """
    def doubles_within(cap):  # twice the step is at most ``cap`` (float32 rounding aside)
        return 2.0 * c.learning_rate <= cap * (1.0 + 1e-6)

    faster = ((c.prev_rate <= 0.0) | (gain_rate > c.prev_rate)) & ~white
    undecided = ~fell & ~halted
    unproven = undecided & doubles_within(eta0)
    up = c.ramping & ((fell & faster) | unproven) & doubles_within(RAMP_CEILING)
    return jnp.where(up, 2.0, 1.0), c.ramping & (up | undecided)


class StepControl(NamedTuple):
    """The step-size and budget controller of :func:`tuning_free` (diagnostics included).

    The current window accumulates the steps' free value estimates ``v_t``, shifted by
    the window's first value so that float32 sums keep the spread of values far from 0.
    """

    scale: jax.Array  # float32, s: the RMS of the start point (the unit of every step)
    learning_rate: jax.Array  # float32, eta_t in units of s
    elapsed: jax.Array  # int32, usable steps
    window_len: jax.Array  # int32, steps the current window closes at
    window_n: jax.Array  # int32, steps in the current window
    window_ref: jax.Array  # float32, the window's first value (the shift)
    window_sum: jax.Array  # float32, sum of v - ref
    window_sq: jax.Array  # float32, sum of (v - ref)^2
    window_sq_diff: jax.Array  # float32, sum of squared successive differences
    last_value: jax.Array  # float32, the last value estimate
    prev_mean: jax.Array  # float32, mean of the previous window
    prev_se2: jax.Array  # float32, squared standard error of that mean
    have_prev: jax.Array  # bool
    origin: jax.Array  # float32, the highest window mean so far (progress is measured from it)
    num_lr_down: jax.Array  # int32, step-size halvings so far
    num_data_noise: jax.Array  # int32, stalls blamed on data noise so far
    num_k_up: jax.Array  # int32, K doublings so far (stalls blamed on direction noise)
    pending: jax.Array  # bool, the last window stalled on data noise (unconfirmed)
    ramping: jax.Array  # bool, the start-up ramp is on (:func:`start_ramp`)
    prev_rate: jax.Array  # float32, the last closed window's fall per step (0: none yet)
    num_lr_up: jax.Array  # int32, step-size doublings of the start-up ramp so far
    before_mean: jax.Array  # float32, mean of the window before a pending data-noise stall
    before_se2: jax.Array  # float32, squared standard error of that mean
    settled: jax.Array  # bool, a stall was seen (a told budget's decay is on)
    on_trial: jax.Array  # bool, the last window halved the step for data noise
    data_noise_off: jax.Array  # bool, a data-noise halving bought no fall and was undone
    unit: jax.Array  # float32, the power of 2 estimates and values are divided by (0: unset)


class TuningFreeState(NamedTuple):
    """State of :func:`tuning_free`: the estimator's, the moments' and the controller's."""

    estimator: AdaptiveState
    moments: ScaleByRAdaZOState
    control: StepControl


def _external_budget(k_min: int) -> BudgetRule:
    """A budget the controller sets (``ResetState.next_k``); the estimator never moves it."""
    return BudgetRule(
        init=lambda params, grid: ResetState(jnp.asarray(k_min, jnp.int32)),
        start=lambda state: state.next_k,
        update=lambda state, outcome: state,
    )


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


UNIT_RANGE = 2.0**40
"""A run whose first informative estimate's largest entry lies in ``[1 / UNIT_RANGE,
UNIT_RANGE]`` uses its estimates as they are; others are divided by a power of 2
(:func:`value_unit`)."""


def value_unit(estimate: chex.ArrayTree) -> jax.Array:
    r"""The power of 2 :math:`u` the run's estimates and values are divided by, from the
    first estimate :math:`g_0` with a finite, non-zero largest entry: 1 when
    :math:`\max_i |g_{0,i}|` is within :data:`UNIT_RANGE` of 1; else :math:`2^{e}` with
    :math:`2^{e} \le \max_i |g_{0,i}| < 2^{e+1}`; 0 (not yet known) when that entry is 0
    or not finite, and the next step's estimate decides.

    Dividing by a power of 2 is exact, so the path is the same as without it, except
    that :math:`m_t^2` in the second moment and the squared values of the controller's
    windows stay within float32's range: an objective times :math:`10^{30}` (or
    :math:`10^{-30}`) takes the path of the objective itself, where the raw squares
    would overflow to inf (no step moves) or underflow to 0 (a step of
    :math:`m_t / 10^{-38}`)."""
    top = _tree_max(jax.tree.map(jnp.abs, estimate))
    exponent = jnp.clip(jnp.frexp(top)[1] - 1, -126, 127)
    known = jnp.isfinite(top) & (top > 0)
    wide = (top > UNIT_RANGE) | (top < 1.0 / UNIT_RANGE)
    unit = jnp.where(wide, jnp.ldexp(jnp.float32(1.0), exponent), 1.0)
    return jnp.where(known, unit, 0.0).astype(jnp.float32)


def _tree_max(tree: chex.ArrayTree) -> jax.Array:
    """The largest entry of ``tree``'s leaves that are not empty."""
    return jnp.max(jnp.stack([jnp.max(x) for x in jax.tree.leaves(tree) if jnp.size(x)]))


def _scaled(tree: chex.ArrayTree, factor: jax.Array) -> chex.ArrayTree:
    """``tree`` times ``factor`` on optimised leaves (carried leaves unchanged)."""
    return jax.tree.map(
        lambda x: (x * factor).astype(jnp.result_type(x)) if dirs.optimised(x) else x, tree)


def noise_diagnosis(mean, se2, prev_mean, prev_se2, sq, sq_diff, n, progress, *, z: float,
                    q_data: float, precision: float):
    r"""What a closed window says: a stall and its cause, or a significant rise.

    With :math:`\Delta = \bar v_{prev} - \bar v` and :math:`SE = \sqrt{SE_{prev}^2 +
    SE^2}` (successive-difference standard errors, :func:`budgets.window_statistics`):

    * **stall**: :math:`\Delta \le z\, SE` (no significant fall: a rise included) in
      windows precise enough to see a fall of a fraction ``precision`` :math:`\rho` of the
      run's progress so far :math:`P` (the highest window mean so far minus this one's),
      :math:`SE \le \rho P`: a window too noisy to tell is no stall, so data noise does
      not halve the step while the run is still falling;
    * its cause, from the von Neumann ratio of the window's values
      :math:`q = \frac{\sum (v_t - v_{t-1})^2 / (n - 1)}{2 \hat\sigma^2_v}`: values that
      jump independently from step to step (:math:`q \ge q_{data}`; white noise gives
      :math:`q = 1`) come from **data noise** (a fresh minibatch or noisy calls each
      step), which only a smaller step lowers; values that wander smoothly
      (:math:`q < q_{data}`; a random walk of the iterate gives :math:`q \ll 1`) come
      from the iterate's own jitter, which more directions a step calm (**direction
      noise**).

    Everything is a ratio of value differences, so the diagnosis does not change when
    the objective is multiplied by a constant or shifted.

    Args:
      mean, se2: the window's mean and squared standard error.
      prev_mean, prev_se2: the previous window's.
      sq, sq_diff, n: the window's sum of squares (about the values' shift, the same
        shift as ``mean``), sum of squared successive differences, and length.
      progress: :math:`P`.
      z, q_data, precision: the tests' thresholds (:func:`tuning_free`).

    Returns:
      ``(stalled, data_noise, rose)``: booleans; ``rose`` is a significant rise
      (:math:`\Delta < -2 z\, SE`).
    """
    gain = prev_mean - mean
    se = jnp.sqrt(prev_se2 + se2)
    nf = jnp.maximum(n, 2).astype(jnp.float32)
    var = jnp.maximum(sq - nf * jnp.square(mean), 0.0) / (nf - 1.0)
    msd = sq_diff / (nf - 1.0)
    q = msd / jnp.maximum(2.0 * var, jnp.finfo(jnp.float32).tiny)
    stalled = (gain <= z * se) & (se <= precision * progress)
    return stalled, q >= q_data, gain < -2.0 * z * se


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
    by the first estimate with a finite, non-zero largest entry (:func:`value_unit`: 1
    unless that entry is beyond :math:`2^{\pm 40}`), so that this holds over float32's
    whole range (an objective times :math:`10^{\pm 30}` takes the same path), not only
    where :math:`m_t^2` is representable. :math:`c_t = 1` without ``budget``; told the
    budget :math:`B`, :math:`c_t`
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
    :func:`noise_diagnosis` against the previous window decides:

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
    step is :math:`\eta_0 \sqrt{100 / d}` and a start-up ramp (:func:`start_ramp`)
    doubles it, up to :data:`RAMP_CEILING`, while windows fall faster and are not white,
    and up to :math:`\eta_0` while windows decide nothing (no significant fall, stall or
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
        this fraction of the run's progress so far (:func:`noise_diagnosis`).
      scale: the unit :math:`s` (> 0); None: the RMS of the start point. Give it when
        that RMS is not the size of the way to go: every step and radius is a multiple
        of :math:`s`, so a start near but not at 0 (e.g. ``1e-6`` everywhere, where 0
        gives :math:`s = 1`) moves by steps of about :math:`10^{-8}` at first, never
        gets far, and its responses round to 0 (``num_zero_responses``).

    Returns:
      An :class:`optax.GradientTransformationExtraArgs` (an :class:`Estimator`): its
      ``update(updates, state, params, *, value_fn, value=None, **fn_kwargs)`` ignores
      ``updates`` and returns the step to add to ``params`` (apply it with
      :func:`zoaq_jax.apply_updates`; chain nothing after it). Diagnostics:
      ``num_queries``, ``num_nonfinite``, ``last_k``, ``next_k``, ``value_estimate``,
      ``learning_rate``, ``scale``, ``num_lr_down``, ``num_data_noise``, ``num_k_up``,
      ``num_lr_up``, ``settled`` (a stall was seen: a told budget's final decay is on),
      ``data_noise_off`` (a data-noise halving was undone; an undone halving still
      counts in ``num_lr_down`` and ``num_data_noise``), ``unit`` (:func:`value_unit`; 0
      until an estimate fixes it).

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
    # The estimator's radius is fixed (mu_e); a radius mu_t = rho_t mu_e is had by
    # estimating on w = z / rho_t, whose gradient is rho_t times z's.
    mu_e = MU_RATIO * learning_rate if mu is None else mu
    estimator = adaptive_estimator(
        gates.accept(), _external_budget(1), grid=Grid(1, k_max), mu=mu_e, predraw=False,
        key=key)
    f32 = functools.partial(jnp.asarray, dtype=jnp.float32)

    def init_fn(params):
        s = _start_scale(params) if scale is None else f32(scale)
        z0 = _scaled(params, 1.0 / s)
        factor = _dimension_factor(z0)
        est = estimator.init(z0)
        if budget is not None:
            est = ledger.limit_queries(est, budget)

        def zero_f():  # one buffer each, so that the state can be donated to jit
            return jnp.zeros((), jnp.float32)

        def zero_i():
            return jnp.zeros((), jnp.int32)

        control = StepControl(
            scale=s, learning_rate=f32(learning_rate * factor),
            elapsed=zero_i(),
            window_len=jnp.asarray(window, jnp.int32), window_n=zero_i(),
            window_ref=zero_f(), window_sum=zero_f(), window_sq=zero_f(),
            window_sq_diff=zero_f(), last_value=zero_f(), prev_mean=zero_f(),
            prev_se2=zero_f(), have_prev=jnp.zeros((), bool), origin=zero_f(),
            num_lr_down=zero_i(), num_data_noise=zero_i(),
            num_k_up=zero_i(), pending=jnp.zeros((), bool),
            ramping=jnp.asarray(factor < 1.0), prev_rate=zero_f(), num_lr_up=zero_i(),
            before_mean=zero_f(), before_se2=zero_f(), settled=jnp.zeros((), bool),
            on_trial=jnp.zeros((), bool), data_noise_off=jnp.zeros((), bool),
            unit=zero_f())
        return TuningFreeState(est, ScaleByRAdaZOState(m=dirs.zeros(z0), v=dirs.zeros(z0)),
                               control)

    def update_fn(updates, state, params, *, value_fn, value=None, **extra_args):
        del updates
        c = state.control
        s = c.scale
        rho = c.learning_rate / learning_rate if mu is None else jnp.ones((), jnp.float32)
        w_unit = s * rho

        @functools.wraps(value_fn)
        def value_fn_w(point, *args, **kwargs):
            return value_fn(_scaled(point, w_unit), *args, **kwargs)

        w = _scaled(params, 1.0 / w_unit)
        g_w, est = estimator.update(None, state.estimator, w, value_fn=value_fn_w, value=value,
                                    **extra_args)
        g = jax.tree.map(lambda x: x / rho, g_w)
        unit = jnp.where(c.unit > 0, c.unit, value_unit(g))  # 0: not known yet
        # the divisor (1 while unknown); the where keeps a unit of 1 bit for bit (XLA's
        # rewrite of x / 1 moved one run by an ulp)
        divisor = jnp.where(unit > 0, unit, 1.0)
        g = jax.tree.map(lambda x: jnp.where(divisor == 1.0, x, x / divisor), g)
        m, v = refined_moments(g, state.moments, b1, b2)
        root = jax.tree.map(jnp.sqrt, v)
        top = _tree_max(root)
        floor = eps * top + jnp.finfo(jnp.float32).tiny
        direction = jax.tree.map(lambda mi, ri: mi / (ri + floor), m, root)
        lr = c.learning_rate
        if budget is not None:
            lr = lr * jnp.where(c.settled, final_decay(est.ledger.num_queries, budget), 1.0)
        dz = jax.tree.map(lambda d: -lr * d, direction)
        took = est.ledger.step > state.estimator.ledger.step  # a step the budget afforded
        # A step without a finite response (every pair left the objective's domain) knows
        # nothing: it moves nothing, rather than coast on the momentum out of the domain.
        informed = took & jnp.isfinite(est.ledger.value_estimate)
        dz = jax.tree.map(lambda d: jnp.where(informed, d, 0.0), dz)
        control = _control(c, est, took, informed, unit, divisor, follows=mu is None,
                           k_max=k_max, window=window, growth=growth, z=z, q_data=q_data,
                           precision=precision, eta0=learning_rate)
        new_est = est._replace(budget=ResetState(control[1]))
        moments = jax.tree.map(lambda new, old: jnp.where(informed, new, old),
                               ScaleByRAdaZOState(m, v), state.moments)
        return (dirs.cast_like(_scaled(dz, s), params),
                TuningFreeState(new_est, moments, control[0]))

    return Estimator(init_fn, update_fn)


def _control(c: StepControl, est: AdaptiveState, took, informed, unit, divisor, *, follows,
             k_max, window, growth, z, q_data, precision, eta0):
    """The controller after one step: ``(StepControl, next_k)``; ``informed``: the step
    had a finite response; values divided by ``divisor`` (the run's ``unit``, 1 while it
    is not known); ``follows``: the radius follows the step (no fixed ``mu``)."""
    value = est.ledger.value_estimate
    value = jnp.where(divisor == 1.0, value, value / divisor)
    k = est.budget.next_k
    ok = took & (est.ledger.last_k > 0) & jnp.isfinite(value)
    first = c.window_n == 0
    ref = jnp.where(first, value, c.window_ref)
    shifted = value - ref
    step_diff = jnp.where(first, 0.0, value - c.last_value)
    n, elapsed = c.window_n + 1, c.elapsed + 1
    total, sq = c.window_sum + shifted, c.window_sq + shifted**2
    sq_diff = c.window_sq_diff + step_diff**2
    mean_shifted, se2 = window_statistics(total, sq_diff, n)
    mean = mean_shifted + ref
    origin = jnp.where(c.have_prev, c.origin, mean)
    stalled, data_noise, rose = noise_diagnosis(
        mean_shifted, se2, c.prev_mean - ref, c.prev_se2, sq, sq_diff, n, origin - mean, z=z,
        q_data=q_data, precision=precision)
    stalled, rose = stalled & c.have_prev, rose & c.have_prev
    # A data-noise stall confirms the pending one only if the two windows together did not
    # fall significantly either (a slow fall shows over their span: docs/design/tuning_free_rounds_6_to_8.md).
    span_fell = c.before_mean - mean > z * jnp.sqrt(c.before_se2 + se2)
    stalled = stalled & ~(c.pending & data_noise & span_fell)
    # Data noise halves the step only when two windows in a row stall on it (one such stall
    # is as likely a slow fall that one window's noise hides: docs/design/tuning_free.md).
    data_stall = stalled & ~rose & data_noise
    blamed = data_stall & c.pending & ~c.data_noise_off
    opened = data_stall & ~c.pending  # a first data-noise stall: pending from here
    grow_k = stalled & ~rose & ~data_noise & (k < k_max)
    lr_down = ((stalled & ~data_noise) | blamed | rose) & ~grow_k
    gain = c.prev_mean - mean
    gain_rate = gain / n.astype(jnp.float32)
    significant = gain > z * jnp.sqrt(c.prev_se2 + se2)
    fell = c.have_prev & ~stalled & ~rose & significant
    # A data-noise halving that the next window does not answer with a significant fall
    # lowered no floor: it is undone, and data noise halves the step no more (round 8b).
    undo = c.on_trial & ~significant & ~rose
    lr_down = lr_down & ~undo
    ramp, ramping = start_ramp(c, fell, stalled | rose, gain_rate, data_noise, eta0)
    lr = c.learning_rate * jnp.where(lr_down, 0.5, 1.0) * jnp.where(undo, 2.0, 1.0) * ramp
    closed = c._replace(
        learning_rate=lr, elapsed=elapsed,
        window_len=window_length(elapsed, window, growth), window_n=jnp.zeros((), jnp.int32),
        window_sum=jnp.zeros((), jnp.float32),
        window_sq=jnp.zeros((), jnp.float32), window_sq_diff=jnp.zeros((), jnp.float32),
        last_value=value, prev_mean=mean, prev_se2=se2, have_prev=jnp.ones((), bool),
        origin=jnp.maximum(origin, mean),
        num_lr_down=c.num_lr_down + lr_down,
        num_data_noise=c.num_data_noise + blamed,
        num_k_up=c.num_k_up + grow_k, pending=opened, ramping=ramping,
        prev_rate=jnp.where(c.have_prev, gain_rate, 0.0),
        num_lr_up=c.num_lr_up + (ramp > 1.0),
        before_mean=jnp.where(opened, c.prev_mean, c.before_mean),
        before_se2=jnp.where(opened, c.prev_se2, c.before_se2),
        settled=c.settled | stalled, on_trial=blamed,
        data_noise_off=c.data_noise_off | undo)
    running = c._replace(elapsed=elapsed, window_n=n, window_ref=ref, window_sum=total,
                         window_sq=sq, window_sq_diff=sq_diff, last_value=value)
    close = n >= c.window_len
    new = jax.tree.map(lambda a, b: jnp.where(close, a, b), closed, running)
    new = jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, c)
    new = new._replace(unit=jnp.where(took, unit, c.unit))
    if follows:  # a step without a finite response: its radius reached out of the domain
        blind = took & (est.ledger.last_k > 0) & ~informed
        new = new._replace(learning_rate=jnp.where(blind, 0.5, 1.0) * new.learning_rate,
                           num_lr_down=new.num_lr_down + blind)
    new_k = jnp.where(ok & close & grow_k, jnp.minimum(2 * k, k_max), k)
    return new, jnp.asarray(new_k, jnp.int32)
