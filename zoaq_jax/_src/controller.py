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

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs
from zoaq_jax._src import expansion, host, ledger, oracle, retained, sharded
from zoaq_jax._src.chain import Estimator
from zoaq_jax._src.policies import (BudgetRule, Evidence, Gate, Grid, Outcome, Records,
                                    Retention)
from zoaq_jax._src.retention import none as no_retention


class AdaptiveState(NamedTuple):
    """State of an estimator built by :func:`adaptive_estimator`.

    ``last_score`` is the gate's score of the accepted candidate at the last step (NaN
    for gates without a score, ``-inf``/``inf`` when no finite response was available).
    """

    ledger: ledger.QueryLedger
    gate: chex.ArrayTree  # the gate's state (e.g. the EMA and threshold)
    budget: chex.ArrayTree  # the budget rule's state (e.g. next_k)
    retention: chex.ArrayTree  # the retention policy's state (None without records)
    last_score: jax.Array  # float32


def adaptive_estimator(
    gate: Gate,
    budget: BudgetRule,
    retention: Retention | None = None,
    *,
    k_min: int,
    k_max: int,
    k_step: int = 1,
    mu: float = 5e-3,
    difference: str = "central",
    directions: str = "gaussian",
    predraw: bool = True,
    evaluation: str = "loop",
    key: int | jax.Array = 0,
    mesh: jax.sharding.Mesh | None = None,
    combine: str = "psum",
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
      k_min: smallest fresh budget :math:`K_{\min} \ge 1`.
      k_max: largest fresh budget :math:`K_{\max} \ge K_{\min}`.
      k_step: grid spacing :math:`\Delta K`.
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

    Returns:
      An :class:`optax.GradientTransformationExtraArgs` whose ``update(updates, state,
      params, *, value_fn, value=None, **fn_kwargs)`` ignores ``updates``; its state is
      an :class:`AdaptiveState`.

    Example:
      >>> import jax.numpy as jnp, optax, zoaq_jax
      >>> est = zoaq_jax.adaptive_estimator(
      ...     zoaq_jax.gates.accept(), zoaq_jax.budgets.constant(3), k_min=1, k_max=3)
      >>> params = jnp.ones(4)
      >>> g, state = est.update(None, est.init(params), params, value_fn=lambda x: x @ x)
      >>> int(optax.tree.get(state, "last_k")), int(optax.tree.get(state, "num_queries"))
      (3, 6)

    References:
      ZoAQ: Adaptive Zeroth-Order Querying via Query-Reuse Coupling, Algorithm 1.
    """
    k_min, k_max, k_step = checks.budget_grid(k_min, k_max, k_step)
    grid = Grid(k_min, k_max, k_step)
    retention = no_retention() if retention is None else retention
    n_hist = retention.capacity
    checks.positive("mu", mu)
    schedule = ledger.KeySchedule.of(key)
    checks.choice("difference", difference, oracle.DIFFERENCES)
    family = dirs.family(directions)
    checks.choice("evaluation", evaluation, expansion.EVALUATIONS)
    sharded.check(mesh, combine, k_min=k_min, k_max=k_max, n_hist=n_hist,
                  evaluation=evaluation, second_moment=gate.second_moment)
    slots = k_max  # fresh records of one step: every K grid ends exactly at k_max

    def init_fn(params):
        return AdaptiveState(
            ledger=schedule.init(params),
            gate=gate.init(params, grid),
            budget=budget.init(params, grid),
            retention=retention.init(params, grid),
            last_score=jnp.asarray(jnp.nan, jnp.float32),
        )

    def update_fn(updates, state, params, *, value_fn, value=None, **extra_args):
        del updates
        diff = oracle.FiniteDifference(value_fn, mu, difference)
        min_calls = diff.step_calls(k_min, diff.centre_calls(value))
        return ledger.skip_unaffordable(
            state, params, min_calls,
            lambda: step_fn(state, params, value_fn, value, extra_args))

    def step_fn(state, params, value_fn, value, extra_args):
        """One step that the query limit affords (at least ``k_min`` directions)."""
        step = expansion.open_step(value_fn, params, extra_args, value, mu, difference, family)
        step_key = schedule.step_key(state.ledger)
        scale = dirs.estimator_scale(family, params)
        k_start = jnp.where(step.centre_bad, k_min, budget.start(state.budget))
        k_cap, left = None, ledger.calls_left(state.ledger)
        if left is not None:  # a query limit: the largest grid point it affords
            k_cap = expansion.grid_cap(k_min, k_max, k_step,
                                       (left - step.centre_calls) // step.diff.calls_per_direction)
        context = gate.prepare(state.gate)

        drawn, oldest = None, None
        # The fresh candidates and the records they may evict, in one batch (with a mesh,
        # each device draws its own share instead).
        if predraw and mesh is None:
            keys = None
            if n_hist:
                keys = schedule.record_keys(
                    state.ledger, *retention.oldest(state.retention, min(slots, n_hist)))
            oldest, drawn = expansion.draw_step(family, step_key, slots, params, keys)

        def evidence(cand: expansion.Candidate) -> Evidence:
            if not n_hist:
                return Evidence(cand.total, cand.n_ok, cand.n_ok, cand.sq_norm, scale)
            held, n_held = retention.pooled(state.retention, cand.k, k_start)
            total = jax.tree.map(jnp.add, held, cand.total)
            return Evidence(total, n_held + cand.n_ok, cand.n_ok, cand.sq_norm, scale)

        def test(cand):
            score, passed = gate.test(context, evidence(cand))
            return score, passed | step.centre_bad

        if mesh is None:
            cand = expansion.accept_or_expand(
                expansion.fresh_acquirer(step, params, step_key, family, drawn, evaluation),
                test, params, k_min=k_min, k_max=k_max, k_step=k_step, k_start=k_start,
                second_moment=gate.second_moment, evaluation=evaluation,
                k_cap=k_cap,
            )
        else:  # k_min == k_max: a query limit either affords the step or skips it
            cand = sharded.candidate(mesh, combine, step, params, step_key, family, k_max,
                                     test)
        ev = evidence(cand)
        g, usable = expansion.finish(ev.total, ev.n, scale, cand.n_ok)
        source = retained.Source(family, schedule, state.ledger, params,
                                 None if oldest is None else (drawn, oldest))
        outcome = Outcome(
            k=cand.k, usable=usable, value=step.value_estimate(cand), score=cand.score,
            estimate=g, context=context,
            records=Records(cand.responses, cand.ok, cand.total, source), grid=grid)
        new_state = AdaptiveState(
            ledger=step.charge(state.ledger, cand),
            gate=gate.update(state.gate, outcome),
            budget=budget.update(state.budget, outcome),
            retention=retention.update(state.retention, outcome),
            last_score=cand.score,
        )
        return dirs.cast_like(g, params), new_state

    return Estimator(init_fn, host.host_errors()(update_fn))
