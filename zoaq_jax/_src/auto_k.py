"""auto_k: a tuning-free query budget that grows only when progress per step stalls."""

from __future__ import annotations

import jax
import optax

from zoaq_jax._src import budgets, gates, oracle
from zoaq_jax._src.controller import adaptive_estimator
from zoaq_jax._src.policies import BudgetRule, Grid, KeyLike


def auto_k_estimator(
    k_min: int = 1,
    k_max: int = 16,
    *,
    mu: float | jax.Array = 5e-3,
    budget: BudgetRule | None = None,
    difference: str = "central",
    directions: str = "gaussian",
    key: KeyLike = 0,
    common_random_numbers: bool = oracle.COMMON_RANDOM_NUMBERS,
) -> optax.GradientTransformationExtraArgs:
    r"""A fixed-K estimator whose K follows the objective's progress (``auto_k``).

    Each step averages :math:`K_t` fresh finite differences, as :func:`fixed_estimator`
    does. :math:`K_t` starts at :math:`K_{\min}` and follows :func:`budgets.progress`:
    the steps' own free estimates of :math:`f(x_t)` (the midpoints
    :math:`(f(x + \mu u) + f(x - \mu u))/2` of the central pairs, or the forward centre
    value) are averaged over consecutive windows that grow with the run (the window
    opening after :math:`t_j` steps is :math:`n_j = \max(w, \lfloor g\, t_j \rfloor)`
    steps long, so decisions are evenly spaced in :math:`\log t` whatever the run's
    length), and

    .. math::

      K_{t+1} = \begin{cases}
        \min(2K_t, K_{\max}) & \Delta < r\, |\bar v_{prev}| \text{ and }
            \Delta \le z_{stall} SE \text{ (a stall, at level } L = \bar v) \\
        \min(2K_t, K_{\max}) & \bar v \le a^j L \text{ (the } j\text{-th doubling
            since that stall, ahead of its own stall)} \\
        \max(K_t / 2, K_{\min}) & \text{two windows with }
            \Delta > r_{up} |\bar v_{prev}| + z\, SE \\
        K_t & \text{otherwise,}
      \end{cases}

    with :math:`\Delta = \bar v_{prev} - \bar v` the gain of a window's mean value over
    the previous window's and :math:`SE` its standard error (from successive differences).
    A stall means the iterates sit at the current budget's noise floor, which is one
    doubling late (the budget that is best per call at a level is larger than the one
    whose floor that level is), so after a stall at :math:`L` each further fall of the
    window mean by the factor ``ahead`` :math:`a` doubles the budget at once.

    Why progress and not a ratio test: for a deterministic objective the relative noise
    of a Gaussian-direction estimate does not depend on where one is, so a gate like
    ZoAQ's accepts at the same rate all along; what changes is the progress per call.
    Small budgets buy more steps while the step size, not the estimate's noise, limits
    progress; a larger budget lowers the noise floor once the iterates stall at it.
    The defaults are the same for every benchmark in this repository (see
    ``docs/results/synthetic_budget.md`` for the measured query regret against the best
    fixed K in hindsight, and ``docs/results/generalization_heldout.md`` for held-out
    objectives; every default was chosen on the tuning set of that protocol).

    Args:
      k_min: first and smallest budget (the grid's :math:`K_{\min}`).
      k_max: largest budget.
      mu: smoothing radius :math:`\mu > 0`.
      budget: the rule; None: ``budgets.progress()`` at its defaults (``window``
        :math:`w`, ``growth`` :math:`g`, ``r``, ``r_up``, ``z``, ``z_stall``, ``floor``,
        ``ahead`` :math:`a` above; e.g. ``budget=budgets.progress(window=50)``).
      difference: ``"central"`` (2 calls a direction) or ``"forward"``.
      directions: the family of directions (``"gaussian"``, ``"sphere"``,
        ``"rademacher"``, ``"sparse:P"``, ``"lowrank:R"``; math and references in
        :mod:`zoaq_jax._src.directions`).
      key: integer seed or typed key; the default 0 is the same in every lane of a
        ``vmap`` (see the ``seed`` of :func:`zoaq_jax.run`).
      common_random_numbers: see :func:`fixed_estimator` (objectives that take
        ``noise_key``).

    Returns:
      An :class:`optax.GradientTransformationExtraArgs` (see :func:`fixed_estimator` for
      ``update``). Diagnostics: ``num_queries``, ``num_nonfinite``, ``last_k``,
      ``next_k``.

    Example:
      >>> import jax, jax.numpy as jnp, optax, zoaq_jax
      >>> est = zoaq_jax.auto_k_estimator(
      ...     k_max=8, budget=zoaq_jax.budgets.progress(window=5), key=0)
      >>> flat = lambda x: 0 * x.sum() + 1  # no progress at all, so K doubles
      >>> step = jax.jit(lambda s, x: est.update(None, s, x, value_fn=flat))
      >>> params, state = jnp.zeros(4), est.init(jnp.zeros(4))
      >>> for _ in range(20):
      ...     g, state = step(state, params)
      >>> int(optax.tree.get(state, "next_k"))
      8

    References:
      Byrd, Chin, Nocedal and Wu, Sample size selection in optimization methods for
      machine learning, Math. Program. 2012 (dynamic sample sizes, a related rule);
      ZoAQ: Adaptive Zeroth-Order Querying via Query-Reuse Coupling (the budgets it
      is compared with).
    """
    return adaptive_estimator(
        gates.accept(), budgets.progress() if budget is None else budget,
        grid=Grid(k_min, k_max), mu=mu, difference=difference, directions=directions,
        predraw=False, key=key, common_random_numbers=common_random_numbers,
    )
