"""The adaptive-estimator skeleton: one accept-or-expand step around pluggable policies.

Every estimator built on it (ZoAQ, StatZO, the fixed-K estimator, ``auto_k``) runs the
same step: bind the objective, pool the retained records with fresh directions bought
chunk by chunk (:func:`expansion.accept_or_expand`), form the estimate, and hand what
happened, one :class:`Outcome` record, to its three policies:

* a :class:`Gate` decides whether a candidate is good enough (ZoAQ's cosine gate, the
  ZoAQ-Norm rule, StatZO's norm test, or "accept"); it owns the state it needs (an EMA,
  a threshold);
* a :class:`BudgetRule` says at which budget the next step stops expanding without a test
  (ZoAQ's reset policies, a constant budget, ``auto_k``'s progress rule);
* a :class:`Retention` policy says which records outlive their step (none, or ZoAQ's
  FIFO ring with its running sum).

Policies are NamedTuples of pure functions over their own PyTree state with one calling
convention (:mod:`zoaq_jax._src.policies`), so a new rule is a few lines (see the
tutorial) and inherits exact query accounting, the NaN policy and ``jit``/``vmap`` from
the skeleton.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax
from jax.typing import ArrayLike

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs
from zoaq_jax._src import expansion, host, ledger, oracle, retained, sharded
from zoaq_jax._src.chain import Estimator
from zoaq_jax._src.policies import (BudgetRule, Evidence, Gate, Grid, KeyLike, Outcome,
                                    Params, PolicyState, Records, Retention, Updates,
                                    ValueFn, check_policies, valid_grid)
from zoaq_jax._src.retention import none as no_retention


class AdaptiveState(NamedTuple):
    """State of an estimator built by :func:`adaptive_estimator`.

    ``last_score`` is the gate's score of the accepted candidate at the last step (NaN
    for gates without a score, ``-inf``/``inf`` when no finite response was available).
    """

    ledger: ledger.QueryLedger
    gate: PolicyState  # the gate's state (e.g. the EMA and threshold)
    budget: PolicyState  # the budget rule's state (e.g. next_k)
    retention: PolicyState  # the retention policy's state (None without records)
    last_score: jax.Array  # float32


class Policies(NamedTuple):
    """The three policies of an adaptive estimator."""

    gate: Gate
    budget: BudgetRule
    retention: Retention


class Execution(NamedTuple):
    """How an adaptive estimator runs its steps: validated settings, frozen at
    construction (all static but ``mu``, which ``optax.inject_hyperparams`` may trace)."""

    grid: Grid
    mu: float | jax.Array
    difference: str  # one of oracle.DIFFERENCES
    family: dirs.Family
    schedule: ledger.KeySchedule
    predraw: bool = True
    evaluation: str = "loop"  # one of expansion.EVALUATIONS
    mesh: jax.sharding.Mesh | None = None
    combine: str = "psum"  # one of sharded.COMBINES
    common: bool = oracle.COMMON_RANDOM_NUMBERS  # a difference's calls share a noise key


def init(params: Params, policies: Policies, execution: Execution) -> AdaptiveState:
    """The state of an adaptive estimator at ``params`` before its first step."""
    grid = execution.grid
    return AdaptiveState(
        ledger=execution.schedule.init(params),
        gate=policies.gate.init(params, grid),
        budget=policies.budget.init(params, grid),
        retention=policies.retention.init(params, grid),
        last_score=jnp.asarray(jnp.nan, jnp.float32),
    )


def update(
    state: AdaptiveState, params: Params, value_fn: ValueFn, value: jax.Array | None,
    extra_args: dict[str, Any], policies: Policies, execution: Execution,
) -> tuple[Updates, AdaptiveState]:
    """One step of an adaptive estimator, or none when the query limit cannot afford
    ``k_min`` directions (:func:`ledger.skip_unaffordable`)."""
    diff = oracle.FiniteDifference(value_fn, execution.mu, execution.difference)
    min_calls = diff.step_calls(execution.grid.k_min, diff.centre_calls(value))
    return ledger.skip_unaffordable(
        state, params, min_calls,
        lambda: step(state, params, value_fn, value, extra_args, policies, execution))


def _predraw(state: AdaptiveState, params: Params, policies: Policies, execution: Execution
             ) -> tuple[chex.ArrayTree | None, tuple[jax.Array, jax.Array] | None]:
    """The records the step's fresh candidates may evict and the candidates, in one batch,
    with the keys of every retained record: ``(drawn, keys)`` (:func:`expansion.draw_step`:
    ``drawn`` None where the directions are drawn where used)."""
    if not execution.predraw or execution.mesh is not None:
        return None, None  # with a mesh, each device draws its own share
    slots, n_hist = execution.grid.k_max, policies.retention.capacity
    retained = None
    if n_hist:
        retained = policies.retention.oldest(state.retention, n_hist)
    return expansion.draw_step(execution.family, execution.schedule, state.ledger, slots,
                               params, retained, min(slots, n_hist))


def step(
    state: AdaptiveState, params: Params, value_fn: ValueFn, value: jax.Array | None,
    extra_args: dict[str, Any], policies: Policies, execution: Execution,
) -> tuple[Updates, AdaptiveState]:
    """One step that the query limit affords (at least ``k_min`` directions): bind the
    objective, expand until the gate accepts, form the estimate, update every policy with
    the step's :class:`Outcome`."""
    gate, budget, retention = policies
    grid, family = execution.grid, execution.family
    schedule, n_hist = execution.schedule, retention.capacity
    query = expansion.open_step(value_fn, params, extra_args, value, execution.mu,
                               execution.difference, family, state.ledger, execution.common)
    step_key = schedule.step_key(state.ledger)
    scale = dirs.estimator_scale(family, params)
    k_start = jnp.where(query.centre_bad, grid.k_min, budget.start(state.budget))
    k_cap, left = None, ledger.calls_left(state.ledger)
    if left is not None:  # a query limit: the largest grid point it affords
        k_cap = expansion.grid_cap(grid, (left - query.centre_calls)
                                   // query.diff.calls_per_direction)
    context = gate.prepare(state.gate)
    drawn, keys = _predraw(state, params, policies, execution)

    def evidence(cand: expansion.Candidate) -> Evidence:
        if not n_hist:
            return Evidence(cand.total, cand.n_ok, cand.n_ok, cand.sq_norm, scale)
        held, n_held = retention.pooled(state.retention, cand.k, k_start)
        total = jax.tree.map(jnp.add, held, cand.total)
        return Evidence(total, n_held + cand.n_ok, cand.n_ok, cand.sq_norm, scale)

    def test(cand: expansion.Candidate) -> tuple[ArrayLike, ArrayLike]:
        score, passed = gate.test(context, evidence(cand))
        return score, passed | query.centre_bad

    if execution.mesh is None:
        acquirer = expansion.fresh_acquirer(query, params, step_key, family, drawn,
                                            execution.evaluation,
                                            None if keys is None else keys[0],
                                            retained.old_rows(drawn, grid.k_max),
                                            bool(n_hist) or grid.k_max > grid.k_min)
        cand = expansion.accept_or_expand(
            expansion.Expansion(acquirer, test, params, grid, k_start, k_cap,
                                gate.second_moment), execution.evaluation)
    else:  # k_min == k_max: a query limit either affords the step or skips it
        cand = sharded.candidate(execution.mesh, execution.combine, query, params, step_key,
                                 family, grid.k_max, test)
    ev = evidence(cand)
    g, usable = expansion.finish(ev.total, ev.n, scale, cand.n_ok)
    source = retained.Source(family, schedule, state.ledger, params,
                             drawn, keys)
    outcome = Outcome(
        k=cand.k, usable=usable, value=query.value_estimate(cand), score=cand.score,
        estimate=g, context=context,
        records=Records(cand.responses, cand.ok, cand.total, source), grid=grid)
    new_state = AdaptiveState(
        ledger=query.charge(state.ledger, cand),
        gate=gate.update(state.gate, outcome),
        budget=budget.update(state.budget, outcome),
        retention=retention.update(state.retention, outcome),
        last_score=cand.score,
    )
    return dirs.cast_like(g, params), new_state


def adaptive_estimator(
    gate: Gate,
    budget: BudgetRule,
    retention: Retention | None = None,
    *,
    grid: Grid,
    mu: float | jax.Array = 5e-3,
    difference: str = "central",
    directions: str = "gaussian",
    predraw: bool = True,
    evaluation: str = "loop",
    key: KeyLike = 0,
    mesh: jax.sharding.Mesh | None = None,
    combine: str = "psum",
    common_random_numbers: bool = oracle.COMMON_RANDOM_NUMBERS,
) -> optax.GradientTransformationExtraArgs:
    r"""An accept-or-expand estimator from a gate, a budget rule and a retention policy.

    At step :math:`t` with start budget :math:`K_0 = ` ``budget.start``, fresh directions
    are bought on the grid :math:`\{K_{\min}, K_{\min} + \Delta K, \dots, K_{\max}\}`;
    from :math:`K_0` on, the first candidate the gate passes is accepted (else
    :math:`K_{\max}`):

    .. math::

      g_t = \frac{s}{n_t} \sum_{i \in \mathcal R_{t-1} \cup \mathcal Q_t(K)} r_i u_i.

    :math:`\mathcal R_{t-1}` are the records the retention policy pools (with
    :func:`retention.fifo`: the newest ``n_hist`` finite records of usable steps, kept as
    keys and responses with their running sum). After the step every policy's
    ``update`` receives the same :class:`Outcome`. A non-finite response is counted and
    discarded; a step without a finite fresh response (or with a non-finite forward
    centre value, which ends it at ``k_min``) returns zeros, and the policies see
    ``usable=False``.

    Args:
      gate: the candidate test (:mod:`zoaq_jax.gates`-style factories or your own).
      budget: the start-budget rule (:mod:`zoaq_jax.budgets`-style factories or your own).
      retention: the retention policy (:mod:`zoaq_jax.retention`-style factories); None:
        nothing is retained (``retention.none()``).
      grid: the budget grid :class:`Grid` ``(k_min, k_max, k_step)``: smallest fresh
        budget :math:`K_{\min} \ge 1`, largest :math:`K_{\max} \ge K_{\min}`, spacing
        :math:`\Delta K` (static integers, validated here).
      mu: smoothing radius :math:`\mu > 0`.
      difference: ``"central"`` or ``"forward"``.
      directions: the family of directions: ``"gaussian"``, ``"sphere"``, ``"rademacher"``,
        ``"sparse:P"`` (mask density P) or ``"lowrank:R"`` (rank R on matrix leaves);
        math and references in :mod:`zoaq_jax._src.directions`.
      predraw: draw all ``k_max`` candidate directions of a step in one batch before the
        loop (fast when ``d`` is small and the budget is usually spent; ignored when the
        batch would exceed 128 Ki numbers); False draws each chunk where it is used (no draws
        beyond the budget bought). The numbers are the same either way.
      evaluation: how a step evaluates its candidates, a static choice among
        :data:`expansion.EVALUATIONS`: ``"loop"`` (the lazy ``while_loop``), or
        ``"unrolled"``/``"vectorized"`` (every predrawn candidate at once, no loop; for
        throughput measurements on accelerators).
      key: integer seed or typed key; the default 0 is the same in every lane of a
        ``vmap`` (see the ``seed`` of :func:`zoaq_jax.run`).
      mesh: a :class:`jax.sharding.Mesh` to split each step's directions over its
        devices (fixed budgets only: ``k_min == k_max``, no retention; see
        :mod:`zoaq_jax._src.sharded`); None (default): one device.
      combine: with ``mesh``, how the devices' records form the estimate:
        ``"psum"`` or ``"gather"`` (see :func:`fixed_estimator`).
      common_random_numbers: see :func:`fixed_estimator`.

    Returns:
      An :class:`optax.GradientTransformationExtraArgs` whose ``update(updates, state,
      params, *, value_fn, value=None, **fn_kwargs)`` ignores ``updates``; its state is
      an :class:`AdaptiveState`.

    Example:
      >>> import jax.numpy as jnp, optax, zoaq_jax
      >>> est = zoaq_jax.adaptive_estimator(
      ...     zoaq_jax.gates.accept(), zoaq_jax.budgets.constant(3), grid=zoaq_jax.Grid(1, 3))
      >>> params = jnp.ones(4)
      >>> g, state = est.update(None, est.init(params), params, value_fn=lambda x: x @ x)
      >>> int(optax.tree.get(state, "last_k")), int(optax.tree.get(state, "num_queries"))
      (3, 6)

    References:
      ZoAQ: Adaptive Zeroth-Order Querying via Query-Reuse Coupling, Algorithm 1.
    """
    grid = valid_grid(grid)
    policies = Policies(gate, budget, no_retention() if retention is None else retention)
    check_policies(*policies)
    checks.positive("mu", mu)
    checks.choice("difference", difference, oracle.DIFFERENCES)
    checks.choice("evaluation", evaluation, expansion.EVALUATIONS)
    sharded.check(mesh, combine, grid=grid, n_hist=policies.retention.capacity,
                  evaluation=evaluation, second_moment=gate.second_moment)
    execution = Execution(grid, mu, difference, dirs.family(directions),
                          ledger.KeySchedule.of(key), predraw, evaluation, mesh, combine,
                          oracle.common_random_numbers(common_random_numbers))

    def init_fn(params: Params) -> AdaptiveState:
        return init(params, policies, execution)

    def update_fn(updates: Updates | None, state: AdaptiveState, params: Params, *,
                  value_fn: ValueFn, value: jax.Array | None = None, **extra_args: Any
                  ) -> tuple[Updates, AdaptiveState]:
        del updates
        return update(state, params, value_fn, value, extra_args, policies, execution)

    return Estimator(init_fn, host.host_errors()(update_fn))
