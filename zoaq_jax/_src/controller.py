"""The adaptive-estimator skeleton: one accept-or-expand step around pluggable policies.

Every estimator built on it (ZoAQ, StatZO, the fixed-K estimator, ``auto_k``) runs the
same step: bind the objective, pool the retained records with fresh directions bought
chunk by chunk (:func:`expansion.accept_or_expand`), form the estimate, and hand what
happened to its two policies:

* a :class:`Gate` decides whether a candidate is good enough (ZoAQ's cosine gate, the
  ZoAQ-Norm rule, StatZO's norm test, or "accept"); it owns the state it needs (an EMA,
  a threshold);
* a :class:`BudgetRule` says at which budget the next step stops expanding without a test
  (ZoAQ's reset policies, a constant budget, ``auto_k``'s progress rule).

Policies are NamedTuples of pure functions over their own PyTree state, so a new rule is
a few lines (see the tutorial) and inherits exact query accounting, the NaN policy,
``jit``/``vmap`` and the ring buffer of retained records from the skeleton.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs
from zoaq_jax._src import expansion, history, host, ledger, oracle, retained, sharded
from zoaq_jax._src.chain import Estimator


class Evidence(NamedTuple):
    """What a gate sees of a candidate: the pooled records, before averaging."""

    total: Any  # sum of r_i u_i over the candidate's records (retained and fresh)
    n: jax.Array  # int32, records in ``total``
    n_fresh: jax.Array  # int32, finite fresh records
    sq_norm: jax.Array  # float32, sum of ||r_i u_i||^2 over fresh records (second_moment)
    scale: float  # estimator scale: d for sphere directions, 1 for Gaussian


class Outcome(NamedTuple):
    """What a budget rule learns from a finished step."""

    k: jax.Array  # int32, fresh directions bought
    usable: jax.Array  # bool, the estimate had a finite fresh response
    value: jax.Array  # float32, the step's own estimate of f(x_t) (NaN without one)
    score: jax.Array  # float32, the gate's score of the accepted candidate


class Gate(NamedTuple):
    """A candidate test with its own state.

    * ``init(params) -> state``
    * ``prepare(state) -> context``: computed once a step, before the expansion loop;
    * ``test(context, evidence) -> (score, passed)``: called after every chunk;
    * ``update(state, context, estimate, usable, score) -> state``: after the step.
    """

    init: Callable[[Any], Any]
    prepare: Callable[[Any], Any]
    test: Callable[[Any, Evidence], tuple[jax.Array, jax.Array]]
    update: Callable[[Any, Any, Any, jax.Array, jax.Array], Any]
    second_moment: bool = False  # the test needs Evidence.sq_norm


class BudgetRule(NamedTuple):
    """Where a step's expansion starts, with its own state.

    * ``init() -> state``
    * ``start(state) -> k``: the budget bought before the gate is consulted;
    * ``update(state, outcome) -> state``: after the step.
    """

    init: Callable[[], Any]
    start: Callable[[Any], jax.Array]
    update: Callable[[Any, Outcome], Any]


class AdaptiveState(NamedTuple):
    """State of an estimator built by :func:`adaptive_estimator`.

    ``last_score`` is the gate's score of the accepted candidate at the last step (NaN
    for gates without a score, ``-inf``/``inf`` when no finite response was available).
    """

    ledger: ledger.QueryLedger
    gate: Any  # the gate's state (e.g. the EMA and threshold)
    budget: Any  # the budget rule's state (e.g. next_k)
    history: history.History | None  # retained records (None without a buffer: n_hist=0)
    retained_sum: Any  # sum of r_i u_i over the retained records (None without a buffer)
    last_score: jax.Array  # float32


def adaptive_estimator(
    gate: Gate,
    budget: BudgetRule,
    *,
    k_min: int,
    k_max: int,
    k_step: int = 1,
    n_hist: int = 0,
    mu: float = 5e-3,
    difference: str = "central",
    directions: str = "gaussian",
    reuse_after_expand: bool = True,
    predraw: bool = True,
    refresh: int = retained.REFRESH,
    evaluation: str = "loop",
    key: Any = 0,
    mesh: jax.sharding.Mesh | None = None,
    combine: str = "psum",
) -> optax.GradientTransformationExtraArgs:
    r"""An accept-or-expand estimator from a gate and a budget rule.

    At step :math:`t` with start budget :math:`K_0 = ` ``budget.start``, fresh directions
    are bought on the grid :math:`\{K_{\min}, K_{\min} + \Delta K, \dots, K_{\max}\}`;
    from :math:`K_0` on, the first candidate the gate passes is accepted (else
    :math:`K_{\max}`):

    .. math::

      g_t = \frac{s}{n_t} \sum_{i \in \mathcal R_{t-1} \cup \mathcal Q_t(K)} r_i u_i.

    The newest ``n_hist`` finite records of usable steps are retained (keys and responses
    only) together with the running sum :math:`\sum_{i \in \mathcal R_t} r_i u_i`: a step
    adds its kept records' contributions, draws only the directions of the records it
    evicts (at most one per kept record) and recomputes the sum exactly from the keys
    every ``refresh`` steps. A non-finite response is counted and discarded; a step
    without a finite fresh response (or with a non-finite forward centre value, which
    ends it at ``k_min``) returns zeros, the gate's ``update`` sees ``usable=False`` and
    the buffer is unchanged.

    Args:
      gate: the candidate test (:mod:`zoaq_jax.gates`-style factories or your own).
      budget: the start-budget rule (:mod:`zoaq_jax.budgets`-style factories or your own).
      k_min: smallest fresh budget :math:`K_{\min} \ge 1`.
      k_max: largest fresh budget :math:`K_{\max} \ge K_{\min}`.
      k_step: grid spacing :math:`\Delta K`.
      n_hist: retained records :math:`N_{hist} \ge 0`.
      mu: smoothing radius :math:`\mu > 0`.
      difference: ``"central"`` or ``"forward"``.
      directions: the family of directions: ``"gaussian"``, ``"sphere"``, ``"rademacher"``,
        ``"sparse:P"`` (mask density P) or ``"lowrank:R"`` (rank R on matrix leaves);
        math and references in :mod:`zoaq_jax._src.directions`.
      reuse_after_expand: pool retained records into candidates beyond the start budget
        (False: the AlwaysGradient ablation, expanded candidates are fresh only).
      predraw: draw all ``k_max`` candidate directions of a step in one batch before the
        loop (fast when ``d`` is small and the budget is usually spent; ignored when the
        batch would exceed 128 Ki numbers); False draws each chunk where it is used (no draws
        beyond the budget bought). The numbers are the same either way.
      refresh: steps between exact recomputations of the running sum of the retained
        records, which bound its float32 rounding drift (see ``docs/design.md``).
      evaluation: how a step evaluates its candidates, a static choice among
        :data:`expansion.EVALUATIONS`: ``"loop"`` (the lazy ``while_loop``), or
        ``"unrolled"``/``"vectorized"`` (every predrawn candidate at once, no loop; for
        throughput measurements on accelerators).
      key: integer seed or typed key.
      mesh: a :class:`jax.sharding.Mesh` to split each step's directions over its
        devices (fixed budgets only: ``k_min == k_max``, ``n_hist=0``; see
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
    n_hist = checks.static_int("n_hist", n_hist, 0)
    checks.positive("mu", mu)
    retained.check_refresh(refresh)
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
            gate=gate.init(params),
            budget=budget.init(),
            history=history.init(n_hist) if n_hist else None,
            retained_sum=dirs.zeros(params) if n_hist else None,
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
        step = expansion.open_step(value_fn, params, extra_args, value, mu, difference)
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
                keys = schedule.record_keys(state.ledger,
                                            *history.oldest(state.history, min(slots, n_hist)))
            oldest, drawn = expansion.draw_step(family, step_key, slots, params, keys)

        def evidence(cand: expansion.Candidate) -> Evidence:
            if not n_hist:
                return Evidence(cand.total, cand.n_ok, cand.n_ok, cand.sq_norm, scale)
            reuse = True if reuse_after_expand else (cand.k <= k_start)
            weight = jnp.asarray(reuse, jnp.float32)
            total = jax.tree.map(lambda h, f: weight.astype(h.dtype) * h + f,
                                 state.retained_sum, cand.total)
            n = jnp.where(reuse, state.history.size, 0) + cand.n_ok
            return Evidence(total, n, cand.n_ok, cand.sq_norm, scale)

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
        value_estimate = step.value_estimate(cand)
        keep = cand.ok & usable
        records, retained_sum = None, None
        if n_hist:
            records = history.push(state.history, jnp.arange(slots, dtype=jnp.int32),
                                   cand.responses, state.ledger.step, keep)
            (retired,) = retained.leaving_sums(
                family, schedule, state.ledger, params, state.history, keep,
                cand.responses, lambda r: (r,), None if oldest is None else (drawn, oldest))
            running = retained.running((state.retained_sum,), (cand.total,), (retired,),
                                       jnp.sum(keep) == n_hist)
            running = jax.tree.map(lambda a, s: jnp.where(usable, a, s), running,
                                   (state.retained_sum,))
            exact = jnp.where(history.valid(records), records.responses, 0.0)
            (retained_sum,) = retained.refreshed(
                running, family, schedule, state.ledger, params, records, (exact,), refresh)
        new_state = AdaptiveState(
            ledger=step.charge(state.ledger, cand),
            gate=gate.update(state.gate, context, g, usable, cand.score),
            budget=budget.update(
                state.budget, Outcome(cand.k, usable, value_estimate, cand.score)),
            history=records,
            retained_sum=retained_sum,
            last_score=cand.score,
        )
        return dirs.cast_like(g, params), new_state

    return Estimator(init_fn, host.host_errors()(update_fn))
