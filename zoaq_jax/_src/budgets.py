"""Budget rules: where each step of :func:`adaptive_estimator` starts, as pure functions.

* :func:`constant`: always the same budget (the fixed-K estimator, StatZO's restart);
* :func:`reset`: ZoAQ's reset policies after an accepted budget (``min``, ``half``,
  ``linear``; :func:`next_budget` is the pure rule), e.g.
  ``zoaq_estimator(budget=budgets.reset("half"))``;
* :func:`progress`: ``auto_k``'s rule: double the budget when the objective stops
  improving (and again each time it then falls a further step below the level where it
  stalled), halve it when it improves fast again, over windows that grow with the run
  (:func:`window_length`, :func:`window_statistics`, :func:`progress_decision` and
  :func:`next_target` are the pure pieces).
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import checks
from zoaq_jax._src.policies import BudgetRule, Grid, Outcome

RESETS = ("min", "half", "linear")


class ResetState(NamedTuple):
    """State of :func:`reset`: the budget the next step starts from."""

    next_k: jax.Array  # int32


class Window(NamedTuple):
    """The open window of a run's value estimates :math:`v_t`: its running sums.

    Shared by :func:`progress` and :func:`zoaq_jax.tuning_free`'s controller. A shifted
    window (:func:`open_window` with ``shifted=True``) sums :math:`v_t - v_{ref}`, with
    :math:`v_{ref}` its first value, and their squares: float32 sums then keep the spread
    of values that lie far from 0 (a sum of :math:`10^6 + \epsilon_t` loses the
    :math:`\epsilon_t`). An unshifted window (``window_ref`` and ``window_sq`` None, no
    leaves) sums the values themselves.
    """

    window_len: jax.Array  # int32, steps the window closes at
    window_n: jax.Array  # int32, steps in the window
    window_sum: jax.Array  # float32, sum of v - ref (ref = 0 unshifted)
    window_sq_diff: jax.Array  # float32, sum of squared successive differences
    last_value: jax.Array  # float32, the last value estimate (the previous window's too)
    window_ref: jax.Array | None = None  # float32, the window's first value (the shift)
    window_sq: jax.Array | None = None  # float32, sum of (v - ref)^2


def open_window(length: int, *, shifted: bool) -> Window:
    """An empty window of ``length`` steps (``shifted``: it keeps the shift and the sum of
    squares); one buffer a field, so that the state can be donated to jit."""
    def f0():
        return jnp.zeros((), jnp.float32)

    return Window(jnp.asarray(length, jnp.int32), jnp.zeros((), jnp.int32), f0(), f0(), f0(),
                  f0() if shifted else None, f0() if shifted else None)


def window_add(window: Window, value: jax.Array) -> Window:
    """``window`` with one more value: the sums of (shifted) values, their squares and
    their squared successive differences (the first value of a window starts no
    difference: the last value of the previous window is not one of its own)."""
    first = window.window_n == 0
    ref, sq, shifted = None, None, value
    if window.window_ref is not None and window.window_sq is not None:  # shifted
        ref = jnp.where(first, value, window.window_ref)
        shifted = value - ref
        sq = window.window_sq + shifted**2
    step_diff = jnp.where(first, 0.0, value - window.last_value)
    return Window(
        window_len=window.window_len, window_n=window.window_n + 1,
        window_sum=window.window_sum + shifted,
        window_sq_diff=window.window_sq_diff + step_diff**2, last_value=value,
        window_ref=ref, window_sq=sq)


def window_mean(window: Window) -> tuple[jax.Array, jax.Array]:
    """The window's mean (of the shifted values: add ``window_ref`` for the values') and
    the squared standard error of that mean (:func:`window_statistics`)."""
    return window_statistics(window.window_sum, window.window_sq_diff, window.window_n)


def close_window(window: Window, length: jax.Array) -> Window:
    """The next, empty window of ``length`` steps after ``window`` closed (its last value
    and shift kept: the next window's first value replaces the shift)."""
    zero = jnp.zeros((), jnp.float32)
    return window._replace(window_len=length, window_n=jnp.zeros((), jnp.int32),
                           window_sum=zero, window_sq_diff=zero,
                           window_sq=None if window.window_sq is None else zero)


class ProgressState(NamedTuple):
    """State of :func:`progress`.

    The current window (:class:`Window`, unshifted) accumulates the steps' value
    estimates; the previous window is kept as its mean and the squared standard error of
    that mean.
    """

    next_k: jax.Array  # int32, the budget of the next step
    elapsed: jax.Array  # int32, usable steps seen (the run's elapsed time)
    current: Window  # the open window
    prev_mean: jax.Array  # float32, mean of the previous window
    prev_se2: jax.Array  # float32, squared standard error of that mean
    have_prev: jax.Array  # bool, a previous window exists
    fast: jax.Array  # bool, the previous window improved significantly fast
    target: jax.Array  # float32, a window mean at or below it doubles the budget (0: none)


def constant(k: int) -> BudgetRule:
    """Every step stops at ``k`` fresh directions (unless the gate fails before)."""
    k = checks.static_int("k", k, 1)
    return BudgetRule(
        init=lambda params, grid: optax.EmptyState(),
        start=lambda state: jnp.asarray(k, jnp.int32),
        update=lambda state, outcome: state,
    )


def next_budget(kind: str, k: jax.Array, k_min: int, k_step: int) -> jax.Array:
    """ZoAQ's reset policy: the start of the step after one that accepted ``k``.

    ``"min"``: :math:`K_{\\min}`; ``"half"``: the grid point at the midpoint of
    :math:`K_{\\min}` and ``k``; ``"linear"``: ``k``.
    """
    if kind == "min":
        return jnp.asarray(k_min, jnp.int32)
    if kind == "half":
        return k_min + ((k - k_min) // k_step // 2) * k_step
    return k


def reset(kind: str = "min") -> BudgetRule:
    """ZoAQ's reset policy: each step starts where :func:`next_budget` says on the step's
    grid (``outcome.grid``); the first step starts at :math:`K_{\\min}`, and unusable
    steps keep the start.

    Args:
      kind: ``"min"`` (paper default), ``"half"`` or ``"linear"``.

    Returns:
      A :class:`~zoaq_jax.BudgetRule` with state :class:`ResetState`.

    Example:
      >>> import zoaq_jax
      >>> est = zoaq_jax.zoaq_estimator(budget=zoaq_jax.budgets.reset("half"))
    """
    checks.choice("reset", kind, RESETS)

    def init(params: chex.ArrayTree, grid: Grid) -> ResetState:
        del params
        return ResetState(jnp.asarray(grid.k_min, jnp.int32))

    def update(state: ResetState, outcome: Outcome) -> ResetState:
        assert outcome.grid is not None  # the skeleton's outcomes carry their grid
        k = next_budget(kind, outcome.k, outcome.grid.k_min, outcome.grid.k_step)
        return ResetState(jnp.asarray(jnp.where(outcome.usable, k, state.next_k), jnp.int32))

    return BudgetRule(init=init, start=lambda state: state.next_k, update=update)


def window_statistics(total: jax.Array, sq_diff: jax.Array, n: jax.Array):
    r"""Mean of a window and the squared standard error of that mean.

    The noise variance is estimated from successive differences,
    :math:`\hat\sigma^2 = \sum (v_t - v_{t-1})^2 / (2 (n - 1))`, which a slow trend
    (the progress itself) barely inflates; the squared standard error is
    :math:`\hat\sigma^2 / n`.
    """
    n = jnp.maximum(n, 1).astype(jnp.float32)
    return total / n, sq_diff / (2.0 * jnp.maximum(n - 1.0, 1.0)) / n


def progress_decision(prev_mean, prev_se2, mean, se2, *, r, r_up, z, z_stall=1.0):
    r"""Whether a window stalled or improved fast against the one before.

    With :math:`\Delta = \bar v_{prev} - \bar v`, level :math:`L = |\bar v_{prev}|` and
    :math:`SE = \sqrt{SE_{prev}^2 + SE^2}`: stalled when the gain is small and not
    significant, :math:`\Delta < r L` and :math:`\Delta \le z_{stall} SE`, in windows
    precise enough to see a gain of :math:`r L`, :math:`SE \le r L` (slow but steady
    progress is not a stall, nor is a window too noisy to tell); fast when :math:`\Delta > r_{up} L + z\, SE`
    (significantly fast, so that noise alone does not lower the budget). Both compare the
    gain with its own noise, so they mean the same whatever the window's length.

    Returns:
      ``(stalled, fast)`` booleans.
    """
    level = jnp.maximum(jnp.abs(prev_mean), jnp.finfo(jnp.float32).tiny)
    gain = prev_mean - mean
    se = jnp.sqrt(prev_se2 + se2)
    stalled = (gain < r * level) & (gain <= z_stall * se) & (se <= r * level)
    fast = gain > r_up * level + z * se
    return stalled, fast


def next_target(target, mean, stalled, early, halved, ahead: float):
    r"""The level whose crossing doubles the budget ahead of the next stall.

    A stall at window mean :math:`L > 0` sets the target :math:`a L`; each doubling it
    triggers lowers it to :math:`a^2 L, a^3 L, \dots` (``ahead`` :math:`a`); halving the
    budget (fast progress: the objective changed) clears it to 0 (no target), as does a
    stall at a level :math:`\le 0` or ``ahead = 0``. A target is always positive, so the
    state stays finite.
    """
    armed = jnp.where((mean > 0) & (ahead > 0), ahead * mean, 0.0)
    return jnp.where(stalled, armed, jnp.where(early, ahead * target,
                                               jnp.where(halved, 0.0, target)))


def window_length(steps: jax.Array, window: int, growth: float) -> jax.Array:
    r"""Steps of the window that opens after ``steps`` usable steps:
    :math:`n_j = \max(w, \lfloor g\, t_j \rfloor)` (``window`` :math:`w`, ``growth`` :math:`g`)."""
    grown = jnp.floor(growth * steps.astype(jnp.float32)).astype(jnp.int32)
    return jnp.maximum(window, grown)


def progress(
    *,
    window: int = 8,
    growth: float = 0.125,
    r: float = 0.01,
    r_up: float = 0.05,
    z: float = 2.0,
    z_stall: float = 1.0,
    floor: float = 0.0,
    ahead: float = 0.9,
) -> BudgetRule:
    r"""``auto_k``'s budget rule: more directions once progress stalls, in log-time.

    The steps' own value estimates :math:`v_t` (``Outcome.value``, minus ``floor``) are
    averaged over consecutive windows; the window that opens after :math:`t_j` usable
    steps is :math:`n_j = \max(w, \lfloor g\, t_j \rfloor)` steps long
    (:func:`window_length`), so windows grow with the run and decisions are evenly spaced
    in :math:`\log t` (about :math:`\log(T / w) / \log(1 + g)` of them in :math:`T`
    steps, the same relative resolution on a run of 300 steps as on one of
    :math:`10^6`). At the end of a window, :func:`progress_decision` against the previous
    window doubles the budget (up to :math:`K_{\max}`) when it stalled, and halves it
    (down to :math:`K_{\min}`) after two consecutive significantly fast windows at the
    same budget (for example after the objective changed). Unusable steps and non-finite
    values leave the state unchanged. ``growth=0`` gives fixed windows of ``window`` steps.

    A stall says the iterates reached the noise floor of the current budget, which is one
    doubling late: the budget that is best per call at a given level is larger than the
    one whose floor that level is. So once a stall at window mean :math:`L` has doubled
    the budget, the next doublings come *ahead* of their stalls, as soon as a window's
    mean falls to :math:`a L`, then :math:`a^2 L`, ... (:func:`next_target`, ``ahead``
    :math:`a`). The targets are relative to ``v - floor``, so an objective whose minimum
    lies far above ``floor`` only doubles at stalls (pass its ``floor`` to anticipate).

    The budgets lie on the estimator's grid (``init``'s and ``outcome.grid``): the first
    and smallest is its ``k_min``, the largest its ``k_max`` (a doubling is cut there).

    Args:
      window: steps of the shortest (first) window, :math:`w \ge 2`.
      growth: window length as a fraction of the usable steps elapsed, :math:`0 \le g \le 1`.
      r: relative gain a window below which progress has stalled.
      r_up: relative gain a window above which (significantly) progress is fast.
      z: standard errors the fast test must clear.
      z_stall: standard errors a gain must exceed not to be a stall.
      floor: a lower bound of the objective; gains are relative to ``v - floor``.
      ahead: after a stall at level :math:`L`, double again when a window's mean falls
        to ``ahead`` :math:`L` (then ``ahead``\ :sup:`2` :math:`L`, ...),
        :math:`0 \le a < 1`; 0 doubles only at stalls.

    Returns:
      A :class:`BudgetRule` with state :class:`ProgressState`.
    """
    checks.count("window", window, 2)
    checks.in_closed_interval("growth", growth, 0.0, 1.0)
    for name, value in (("r", r), ("r_up", r_up)):
        checks.positive(name, value)
    if checks.concrete_value(r) is not None and checks.concrete_value(r_up) is not None:
        if float(r_up) < float(r):
            raise ValueError(f"r_up must be >= r, got r_up={r_up} < r={r}.")
    checks.non_negative("z", z)
    checks.non_negative("z_stall", z_stall)
    checks.finite("floor", floor)
    checks.decay("ahead", ahead)

    def init(params: chex.ArrayTree, grid: Grid) -> ProgressState:
        del params

        def f0():  # one buffer each, so that the state can be donated to jit
            return jnp.zeros((), jnp.float32)

        return ProgressState(
            next_k=jnp.asarray(grid.k_min, jnp.int32), elapsed=jnp.zeros((), jnp.int32),
            current=open_window(window, shifted=False), prev_mean=f0(),
            prev_se2=f0(), have_prev=jnp.zeros((), bool), fast=jnp.zeros((), bool),
            target=f0())

    def update(state: ProgressState, outcome: Outcome) -> ProgressState:
        assert outcome.grid is not None  # the skeleton's outcomes carry their grid
        k_min, k_max, _ = outcome.grid
        value = outcome.value.astype(jnp.float32) - floor
        ok = outcome.usable & jnp.isfinite(value)
        running = window_add(state.current, value)
        elapsed = state.elapsed + 1
        mean, se2 = window_mean(running)
        stalled, fast = progress_decision(state.prev_mean, state.prev_se2, mean, se2,
                                          r=r, r_up=r_up, z=z, z_stall=z_stall)
        stalled, fast = stalled & state.have_prev, fast & state.have_prev
        k = state.next_k
        up = jnp.minimum(2 * k, k_max)
        down = jnp.maximum(k // 2, k_min)
        halve = fast & state.fast
        early = ~stalled & (state.target > 0) & (mean <= state.target)
        new_k = jnp.where(stalled | early, up, jnp.where(halve, down, k))
        closed = ProgressState(
            next_k=jnp.asarray(new_k, jnp.int32),
            elapsed=elapsed,
            current=close_window(running, window_length(elapsed, window, growth)),
            prev_mean=mean,
            prev_se2=se2,
            have_prev=jnp.ones((), bool),
            fast=fast & ~halve & (new_k == k),
            target=next_target(state.target, mean, stalled, early, halve, ahead),
        )
        new = jax.tree.map(lambda a, b: jnp.where(running.window_n >= running.window_len, a, b),
                           closed, state._replace(elapsed=elapsed, current=running))
        return jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, state)

    return BudgetRule(init=init, start=lambda state: state.next_k, update=update)
