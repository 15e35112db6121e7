r"""tuning_free's controller: the step size and K from windows of the run's own values.

The controller is :func:`tuning_free`'s :class:`~zoaq_jax.BudgetRule`
(:func:`control_rule`): the estimator hands it each step's :class:`~zoaq_jax.Outcome`,
and its ``update`` closes windows of the steps' free value estimates, diagnoses each
closed window (:func:`window_verdict`, :func:`noise_diagnosis`) and decides, from that
one verdict, K (its ``start``, the next step's budget) and the step size that
:func:`tuning_free` reads (:func:`radius_frame`, :func:`applied_step`). Its state is
split by concern: the open :class:`~zoaq_jax.budgets.Window` (shared with
:func:`~zoaq_jax.budgets.progress`), the closed windows' :class:`WindowHistory`, the
data-noise rule's :class:`DataNoise`, the :class:`StepSize` and the :class:`Counters`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from zoaq_jax._src import directions as dirs
from zoaq_jax._src.budgets import (Window, close_window, open_window, window_add,
                                   window_length, window_mean)
from zoaq_jax._src.policies import BudgetRule, Grid, Outcome

RAMP_CEILING = 1.0
"""The start-up ramp's largest step, in units of :math:`s` (a step the size of the start
point's RMS in every coordinate)."""

UNIT_RANGE = 2.0**40
"""A run whose first informative estimate's largest entry lies in ``[1 / UNIT_RANGE,
UNIT_RANGE]`` uses its estimates as they are; others are divided by a power of 2
(:func:`value_unit`)."""


class StepSize(NamedTuple):
    """The step :math:`\\eta_t` (in units of the start point's RMS) and its regime."""

    learning_rate: jax.Array  # float32, eta_t in units of s
    ramping: jax.Array  # bool, the start-up ramp is on (:func:`start_ramp`)
    settled: jax.Array  # bool, a stall was seen (a told budget's decay is on)


class WindowHistory(NamedTuple):
    """What the closed windows left: the last one's mean and the run's progress."""

    elapsed: jax.Array  # int32, usable steps
    prev_mean: jax.Array  # float32, mean of the previous window
    prev_se2: jax.Array  # float32, squared standard error of that mean
    have_prev: jax.Array  # bool
    origin: jax.Array  # float32, the highest window mean so far (progress is measured from it)
    prev_rate: jax.Array  # float32, the last closed window's fall per step (0: none yet)


class DataNoise(NamedTuple):
    """The data-noise rule's memory: a stall awaiting confirmation, a halving on trial."""

    pending: jax.Array  # bool, the last window stalled on data noise (unconfirmed)
    before_mean: jax.Array  # float32, mean of the window before a pending data-noise stall
    before_se2: jax.Array  # float32, squared standard error of that mean
    on_trial: jax.Array  # bool, the last window halved the step for data noise
    data_noise_off: jax.Array  # bool, a data-noise halving bought no fall and was undone


class Counters(NamedTuple):
    """The controller's decisions so far (diagnostics)."""

    num_lr_down: jax.Array  # int32, step-size halvings so far
    num_data_noise: jax.Array  # int32, stalls blamed on data noise so far
    num_k_up: jax.Array  # int32, K doublings so far (stalls blamed on direction noise)
    num_lr_up: jax.Array  # int32, step-size doublings of the start-up ramp so far


class ControlState(NamedTuple):
    """State of :func:`control_rule` (the ``budget`` of :func:`tuning_free`'s estimator).

    The open window accumulates the steps' free value estimates divided by the run's
    ``unit``, shifted by the window's first value (a shifted
    :class:`~zoaq_jax.budgets.Window`).
    """

    next_k: jax.Array  # int32, the next step's K
    unit: jax.Array  # float32, the power of 2 estimates and values are divided by (0: unset)
    step: StepSize  # the step size and its regime
    current: Window  # the open window of values (shifted)
    history: WindowHistory  # what the closed windows left
    data_noise: DataNoise  # the data-noise rule's memory
    counters: Counters  # the decisions so far (diagnostics)


class Settings(NamedTuple):
    """The controller's settings (static, validated by :func:`tuning_free`)."""

    eta0: float  # the first step at d <= 100 (units of s)
    follows: bool  # the radius follows the step (no fixed mu)
    window: int
    growth: float
    z: float
    q_data: float
    precision: float


class Verdict(NamedTuple):
    """What the window closing at this step says (:func:`window_verdict`)."""

    mean: jax.Array  # float32, the window's mean
    se2: jax.Array  # float32, its squared standard error
    stalled: jax.Array  # bool, no significant fall in a precise window (after confirmation)
    data_noise: jax.Array  # bool, the window's values are white
    rose: jax.Array  # bool, a significant rise
    significant: jax.Array  # bool, a significant fall
    fell: jax.Array  # bool, a significant fall that is no stall or rise
    gain_rate: jax.Array  # float32, the fall per step


def dimension_factor(params: chex.ArrayTree, tuned_dimension: int) -> float:
    r""":math:`\min(1, \sqrt{d_{tuned} / d})`: the first step at dimension :math:`d`,
    as a fraction of the first step at the tuning set's dimension :math:`d_{tuned}`."""
    return min(1.0, math.sqrt(tuned_dimension / max(dirs.dimension(params), 1)))


def init_control(learning_rate: float, factor: float, k_min: int, window: int) -> ControlState:
    """The controller before a run's first step: the first step ``learning_rate *
    factor`` (the ramp on when ``factor < 1``), K = ``k_min``."""
    def f0():  # one buffer each, so that the state can be donated to jit
        return jnp.zeros((), jnp.float32)

    def i0():
        return jnp.zeros((), jnp.int32)

    return ControlState(
        next_k=jnp.asarray(k_min, jnp.int32), unit=f0(),
        step=StepSize(jnp.asarray(learning_rate * factor, jnp.float32),
                      jnp.asarray(factor < 1.0), jnp.zeros((), bool)),
        current=open_window(window, shifted=True),
        history=WindowHistory(i0(), f0(), f0(), jnp.zeros((), bool), f0(), f0()),
        data_noise=DataNoise(jnp.zeros((), bool), f0(), f0(), jnp.zeros((), bool),
                             jnp.zeros((), bool)),
        counters=Counters(i0(), i0(), i0(), i0()))


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
    top = dirs.tree_max(jax.tree.map(jnp.abs, estimate))
    exponent = jnp.clip(jnp.frexp(top)[1] - 1, -126, 127)
    known = jnp.isfinite(top) & (top > 0)
    wide = (top > UNIT_RANGE) | (top < 1.0 / UNIT_RANGE)
    unit = jnp.where(wide, jnp.ldexp(jnp.float32(1.0), exponent), 1.0)
    return jnp.where(known, unit, 0.0).astype(jnp.float32)


def step_unit(unit: jax.Array, estimate: chex.ArrayTree) -> jax.Array:
    """The run's unit after a step whose estimate (in :math:`z`) is ``estimate``: the unit
    already fixed, else :func:`value_unit` of ``estimate`` (0 while still unknown)."""
    return jnp.where(unit > 0, unit, value_unit(estimate))


def unit_divisor(unit: jax.Array) -> jax.Array:
    """What estimates and values are divided by: the run's ``unit``, 1 while unknown."""
    return jnp.where(unit > 0, unit, 1.0)


def in_unit(x: jax.Array, divisor: jax.Array) -> jax.Array:
    """``x / divisor``; where the divisor is 1, ``x`` itself (XLA's rewrite of ``x / 1``
    moved one run by an ulp)."""
    return jnp.where(divisor == 1.0, x, x / divisor)


def radius_frame(step: StepSize, eta0: float, follows: bool) -> jax.Array:
    r"""The one path by which the estimator reads the step size: its frame
    :math:`\rho_t = \eta_t / \eta_0` (1 with a fixed ``mu``).

    The estimator's radius is fixed (:math:`\mu_e = \kappa \eta_0`); estimating on
    :math:`w = z / \rho_t`, whose gradient is :math:`\rho_t` times :math:`z`'s, gives the
    radius :math:`\mu_t = \rho_t \mu_e = \kappa \eta_t` in :math:`z`."""
    if not follows:
        return jnp.ones((), jnp.float32)
    return step.learning_rate / eta0


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


def window_verdict(window: Window, history: WindowHistory, noise: DataNoise,
                   s: Settings) -> Verdict:
    """The verdict of ``window`` (the window with this step's value in it) against the
    previous one, as if it closed now: :func:`noise_diagnosis`, then the data-noise
    span confirmation (a data-noise stall confirms the pending one only if the two
    windows together did not fall significantly either: a slow fall shows over their
    span, ``docs/design/tuning_free_rounds_6_to_8.md``)."""
    ref, sq = window.window_ref, window.window_sq
    assert ref is not None and sq is not None  # the controller's windows are shifted
    shifted_mean, se2 = window_mean(window)
    mean = shifted_mean + ref
    origin = jnp.where(history.have_prev, history.origin, mean)
    stalled, data_noise, rose = noise_diagnosis(
        shifted_mean, se2, history.prev_mean - ref, history.prev_se2, sq,
        window.window_sq_diff, window.window_n, origin - mean, z=s.z, q_data=s.q_data,
        precision=s.precision)
    stalled, rose = stalled & history.have_prev, rose & history.have_prev
    span_fell = noise.before_mean - mean > s.z * jnp.sqrt(noise.before_se2 + se2)
    stalled = stalled & ~(noise.pending & data_noise & span_fell)
    gain = history.prev_mean - mean
    significant = gain > s.z * jnp.sqrt(history.prev_se2 + se2)
    fell = history.have_prev & ~stalled & ~rose & significant
    return Verdict(mean, se2, stalled, data_noise, rose, significant, fell,
                   gain / window.window_n.astype(jnp.float32))


def start_ramp(step: StepSize, prev_rate, fell, halted, gain_rate, white, eta0: float):
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
      step: the step size before the window closes.
      prev_rate: the previous window's fall per step (0: none yet).
      fell, halted: the window fell significantly; it stalled or rose.
      gain_rate: the window's fall per step, :math:`\Delta_j / n_j`.
      white: the window's values are white (data noise dominates).
      eta0: :math:`\eta_0`, the cap of the doublings on windows that decide nothing.

    Returns:
      ``(factor, ramping)``: the step's factor (2 or 1) and whether the ramp goes on.
    """
    def doubles_within(cap):  # twice the step is at most ``cap`` (float32 rounding aside)
        return 2.0 * step.learning_rate <= cap * (1.0 + 1e-6)

    faster = ((prev_rate <= 0.0) | (gain_rate > prev_rate)) & ~white
    undecided = ~fell & ~halted
    unproven = undecided & doubles_within(eta0)
    up = step.ramping & ((fell & faster) | unproven) & doubles_within(RAMP_CEILING)
    return jnp.where(up, 2.0, 1.0), step.ramping & (up | undecided)


class Decision(NamedTuple):
    """What a closed window decides (:func:`decide`)."""

    ramp: jax.Array  # float32, the ramp's factor on the step (2 or 1)
    ramping: jax.Array  # bool, the ramp goes on
    grow_k: jax.Array  # bool, K doubles
    lr_down: jax.Array  # bool, a halving (counted)
    blamed: jax.Array  # bool, a confirmed data-noise halving
    opened: jax.Array  # bool, a first data-noise stall (pending from here)
    undo: jax.Array  # bool, the last data-noise halving is undone


def decide(v: Verdict, step: StepSize, history: WindowHistory, noise: DataNoise,
           k: jax.Array, k_max: int, eta0: float) -> Decision:
    r"""The step's and K's change when a window closes with verdict ``v``.

    * a significant **rise**: :math:`\eta \leftarrow \eta / 2`;
    * a stall from **data noise**, confirmed by a second such stall in a row (the first
      only opens ``pending``): :math:`\eta \leftarrow \eta / 2`, and the next window
      judges it: one that neither falls significantly nor rises undoes it (:math:`\eta
      \leftarrow 2\eta`) and data noise halves the step no more in this run;
    * a stall from **direction noise**: :math:`K \leftarrow \min(2K, K_{\max})` (at
      :math:`K_{\max}`, :math:`\eta \leftarrow \eta / 2`);
    * the start-up ramp's doubling (:func:`start_ramp`).
    """
    data_stall = v.stalled & ~v.rose & v.data_noise
    blamed = data_stall & noise.pending & ~noise.data_noise_off
    opened = data_stall & ~noise.pending
    grow_k = v.stalled & ~v.rose & ~v.data_noise & (k < k_max)
    lr_down = ((v.stalled & ~v.data_noise) | blamed | v.rose) & ~grow_k
    undo = noise.on_trial & ~v.significant & ~v.rose
    lr_down = lr_down & ~undo
    ramp, ramping = start_ramp(step, history.prev_rate, v.fell, v.stalled | v.rose,
                               v.gain_rate, v.data_noise, eta0)
    return Decision(ramp, ramping, grow_k, lr_down, blamed, opened, undo)


def closed(c: ControlState, window: Window, v: Verdict, d: Decision, s: Settings
           ) -> ControlState:
    """The controller after ``window`` closed with verdict ``v`` and decision ``d``."""
    h, noise, n = c.history, c.data_noise, c.counters
    mean = v.mean
    origin = jnp.where(h.have_prev, h.origin, mean)
    elapsed = h.elapsed + 1
    return c._replace(
        step=StepSize(learning_rate=c.step.learning_rate * jnp.where(d.lr_down, 0.5, 1.0)
                      * jnp.where(d.undo, 2.0, 1.0) * d.ramp, ramping=d.ramping,
                      settled=c.step.settled | v.stalled),
        current=close_window(window, window_length(elapsed, s.window, s.growth)),
        history=WindowHistory(
            elapsed=elapsed, prev_mean=mean, prev_se2=v.se2, have_prev=jnp.ones((), bool),
            origin=jnp.maximum(origin, mean),
            prev_rate=jnp.where(h.have_prev, v.gain_rate, 0.0)),
        data_noise=DataNoise(
            pending=d.opened,
            before_mean=jnp.where(d.opened, h.prev_mean, noise.before_mean),
            before_se2=jnp.where(d.opened, h.prev_se2, noise.before_se2),
            on_trial=d.blamed, data_noise_off=noise.data_noise_off | d.undo),
        counters=Counters(num_lr_down=n.num_lr_down + d.lr_down,
                          num_data_noise=n.num_data_noise + d.blamed,
                          num_k_up=n.num_k_up + d.grow_k,
                          num_lr_up=n.num_lr_up + (d.ramp > 1.0)))


def observe(c: ControlState, outcome: Outcome, s: Settings) -> ControlState:
    r"""The controller after one step (the rule's ``update``).

    The step's estimate fixes the run's ``unit`` if none is fixed yet
    (:func:`value_unit`, on the estimate in :math:`z`: :math:`g_w / \rho_t`); its value
    estimate, divided by the unit, joins the open window; a window that reaches its
    length closes (:func:`window_verdict`, :func:`decide`, :func:`closed`). A step
    without a finite value estimate changes nothing but the unit; one that had no finite
    response at all also halves the step (its radius reached out of the objective's
    domain), when the radius follows the step.
    """
    assert outcome.grid is not None  # the skeleton's outcomes carry their grid
    rho = radius_frame(c.step, s.eta0, s.follows)
    unit = step_unit(c.unit, jax.tree.map(lambda x: x / rho, outcome.estimate))
    value = in_unit(outcome.value, unit_divisor(unit))
    ok = (outcome.k > 0) & jnp.isfinite(value)
    window = window_add(c.current, value)
    running = c._replace(current=window, history=c.history._replace(
        elapsed=c.history.elapsed + 1))
    v = window_verdict(window, c.history, c.data_noise, s)
    d = decide(v, c.step, c.history, c.data_noise, c.next_k, outcome.grid.k_max, s.eta0)
    close = window.window_n >= c.current.window_len
    new = jax.tree.map(lambda a, b: jnp.where(close, a, b), closed(c, window, v, d, s),
                       running)
    new = jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, c)
    new = new._replace(unit=unit)
    if s.follows:  # a step without a finite response: its radius reached out of the domain
        blind = (outcome.k > 0) & ~jnp.isfinite(outcome.value)
        new = new._replace(
            step=new.step._replace(learning_rate=jnp.where(blind, 0.5, 1.0)
                                   * new.step.learning_rate),
            counters=new.counters._replace(num_lr_down=new.counters.num_lr_down + blind))
    grow = ok & close & d.grow_k
    k = c.next_k
    return new._replace(next_k=jnp.asarray(jnp.where(grow, jnp.minimum(2 * k, outcome.grid.k_max),
                                                     k), jnp.int32))


def control_rule(settings: Settings, learning_rate: float, tuned_dimension: int
                 ) -> BudgetRule:
    """tuning_free's controller as a :class:`~zoaq_jax.BudgetRule`: ``start`` is the K it
    decided, ``update`` is :func:`observe` (its state :class:`ControlState`); the first
    step is ``learning_rate`` times :func:`dimension_factor` of the (scaled) params."""
    def init(params: chex.ArrayTree, grid: Grid) -> ControlState:
        factor = dimension_factor(params, tuned_dimension)
        return init_control(learning_rate, factor, grid.k_min, settings.window)

    return BudgetRule(init=init, start=lambda state: state.next_k,
                      update=lambda state, outcome: observe(state, outcome, settings))
