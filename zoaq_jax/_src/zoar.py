"""ZoAR: zeroth-order estimation with averaged-baseline query reuse (Qiu et al., 2025)."""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs
from zoaq_jax._src import expansion, history, host, ledger, oracle, retained
from zoaq_jax._src.chain import Estimator


class ZoARState(NamedTuple):
    """State of :func:`zoar_estimator`: counters, the FIFO of the newest records and the
    running sums over them (``direction_sum`` and ``baseline`` in the forward form only)."""

    ledger: ledger.QueryLedger
    history: history.History
    retained_sum: chex.ArrayTree  # sum c_i u_i; c_i = (y_i - baseline) / mu (forward) or r_i
    direction_sum: chex.ArrayTree | None  # forward: sum_i u_i (None for central)
    baseline: jax.Array | None  # forward: float32 mean of the retained y_i (None for central)


def zoar_estimator(
    k: int = 1,
    *,
    n_hist: int = 8,
    mu: float = 5e-3,
    difference: str = "forward",
    directions: str = "gaussian",
    refresh: int = retained.REFRESH,
    key: int | jax.Array = 0,
) -> optax.GradientTransformationExtraArgs:
    r"""ZoAR's history-reuse estimator; history is counted in steps.

    Each step draws ``k`` fresh directions (Gaussian by default) and appends their records to a
    FIFO that keeps the newest :math:`n = (N_{hist} + 1) k` records.

    * ``difference="forward"`` (the public code's form, an averaged baseline): records
      hold :math:`y_i = f(x_{a_i} + \mu u_i)`; with :math:`b = \frac1n \sum_j y_j`,

      .. math:: g_t = \frac1n \sum_i \frac{y_i - b}{\mu} u_i

      (``k`` calls a step; no centre value is needed).
    * ``difference="central"`` (the LLM form): records hold central responses
      :math:`r_i`, and :math:`g_t = \frac1n \sum_i r_i u_i`, the average of MeZO projected
      gradients over the newest :math:`N_{hist} + 1` steps (``2k`` calls a step).

    Non-finite values are discarded (counted in ``num_nonfinite``) and never enter the
    buffer; ``num_zero_responses`` counts the fresh records whose coefficient is exactly 0
    (central: :math:`r_i = 0`; forward: all of a step's ``k >= 2`` fresh values equal,
    i.e. :math:`f(x + \mu u_i)` does not depend on :math:`u_i`, e.g. when ``mu`` is below
    the parameters' float resolution; with ``k = 1`` the forward form cannot tell); a
    step that the ledger's ``query_limit`` cannot afford (``k`` directions) is not
    taken; a step without any finite fresh value returns zeros. The buffer holds
    float32 values, so in the forward form a float64 objective's baseline is formed
    from float32 values. With ``n_hist=0`` and
    central differences this is exactly :func:`fixed_estimator`.

    Cost: the state keeps the running sums the estimate needs (forward:
    :math:`\sum_i (y_i - b) u_i / \mu` and :math:`\sum_i u_i`, re-centred at the new
    baseline every step; central: :math:`\sum_i r_i u_i`), so a step draws its ``k``
    fresh directions and regenerates only the ``k`` it evicts, not all
    :math:`(N_{hist} + 1) k`; every ``refresh`` steps the sums are recomputed exactly
    from the keys.

    Args:
      k: fresh directions per step.
      n_hist: past steps kept :math:`N_{hist} \ge 0` (forward form: at least two records,
        :math:`(N_{hist} + 1) k \ge 2`, or the baseline is the only record and the
        estimate is 0).
      mu: smoothing radius :math:`\mu > 0`.
      difference: ``"forward"`` (averaged baseline) or ``"central"``.
      directions: the family of directions (see :func:`fixed_estimator`).
      refresh: steps between exact recomputations of the running sums (bounds their
        rounding drift; see ``docs/design/retained.md``).
      key: integer seed or typed key; the default 0 is the same in every lane of a
        ``vmap`` (see the ``seed`` of :func:`zoaq_jax.run`).

    Returns:
      An :class:`optax.GradientTransformationExtraArgs` (see :func:`fixed_estimator`
      for the ``update`` signature).

    Example:
      >>> import jax.numpy as jnp, optax, zoaq_jax
      >>> est = zoaq_jax.zoar_estimator(k=2, n_hist=3, key=0)
      >>> params = jnp.ones(5)
      >>> g, state = est.update(None, est.init(params), params, value_fn=lambda x: x @ x)
      >>> int(optax.tree.get(state, "num_queries"))
      2

    References:
      Qiu et al., Zeroth-Order Optimization is Secretly Single-Step Policy Optimization,
      2025.
    """
    k = checks.static_int("k", k, 1)
    n_hist = checks.static_int("n_hist", n_hist, 0)
    checks.positive("mu", mu)
    retained.check_refresh(refresh)
    schedule = ledger.KeySchedule.of(key)
    checks.choice("difference", difference, oracle.DIFFERENCES)
    family = dirs.family(directions)
    capacity = (n_hist + 1) * k
    forward = difference == "forward"
    if forward and capacity < 2:
        raise ValueError(
            f"n_hist: with difference='forward', k={k} and n_hist={n_hist} ZoAR keeps "
            "one record, which is its own baseline, so every estimate is exactly 0. Keep "
            "a record to compare with: n_hist >= 1 (the paper uses 8), k >= 2, or "
            "difference='central'.")

    def init_fn(params):
        return ZoARState(
            ledger=schedule.init(params), history=history.init(capacity),
            retained_sum=dirs.zeros(params),
            direction_sum=dirs.zeros(params) if forward else None,
            baseline=jnp.zeros((), jnp.float32) if forward else None,
        )

    def update_fn(updates, state, params, *, value_fn, value=None, **extra_args):
        del updates, value  # the forward form needs no centre value
        calls = oracle.FiniteDifference(value_fn, mu, difference).step_calls(k, 0)
        return ledger.skip_unaffordable(  # ZoAR's k is fixed: a step buys all k or none
            state, params, calls, lambda: step_fn(state, params, value_fn, extra_args))

    def step_fn(state, params, value_fn, extra_args):
        """One step of ``k`` fresh directions."""
        diff = oracle.FiniteDifference(oracle.bind(value_fn, params, extra_args), mu, difference)
        keys = schedule.step_and_record_keys(  # every record's keys, fresh and retained
            state.ledger, k, *history.oldest(state.history, capacity), params)
        oldest = None  # the k oldest records, which a full buffer evicts: drawn at once
        if dirs.fits_in_batch(k, params):  # when small, else regenerated as they leave
            oldest = dirs.sample_many(family, keys[1][:k], params)
        u = dirs.sample_many(family, keys[0], params)
        if forward:
            fresh = midpoints = diff.values(params, u)
        else:
            fresh, midpoints = diff.responses(params, u, None)
        ok = jnp.isfinite(fresh)
        n_ok = jnp.sum(ok, dtype=jnp.int32)
        # mean f(x + mu u) (forward) or midpoint (central)
        value_estimate = oracle.mean_value(jnp.sum(jnp.where(ok, midpoints, 0.0)), n_ok)
        stored = jnp.asarray(fresh, jnp.float32)  # the values the buffer keeps

        def coeffs(values):  # a record's coefficients in the running sums
            if forward:
                return (values - state.baseline) / mu, jnp.ones_like(values)
            return (values,)

        sums = (state.retained_sum, state.direction_sum) if forward else (state.retained_sum,)
        added = tuple(dirs.weighted_sum(jnp.where(ok, c, 0.0), u) for c in coeffs(stored))
        source = retained.Source(family, schedule, state.ledger, params,
                                 None if oldest is None else jax.tree.map(
                                     lambda o, f: jnp.concatenate([o, f]), oldest, u), keys)

        def baseline_of(records):  # forward: the mean retained value
            kept = history.valid(records)
            n = jnp.sum(kept, dtype=jnp.int32)
            return jnp.sum(jnp.where(kept, records.responses, 0.0)) / jnp.maximum(n, 1)

        def recentre(sums, records):  # sum (y - b') u = sum (y - b) u - (b' - b) sum u
            shift = (baseline_of(records) - state.baseline) / mu
            return (jax.tree.map(lambda s, d: s - shift.astype(d.dtype) * d, *sums), sums[1])

        def exact(records):
            kept = history.valid(records)
            if forward:
                return (jnp.where(kept, (records.responses - baseline_of(records)) / mu, 0.0),
                        kept.astype(jnp.float32))
            return (jnp.where(kept, records.responses, 0.0),)

        records, sums = retained.retain(source, state.history, sums, added, stored, ok, coeffs,
                                        exact, refresh, adjust=recentre if forward else None)
        n = jnp.sum(history.valid(records), dtype=jnp.int32)
        if forward:
            baseline = baseline_of(records)
            # y_i = f(x + mu u_i) all equal at one x: every difference of the step is 0
            same = jnp.all(jnp.where(ok, stored == jnp.max(jnp.where(ok, stored, -jnp.inf)),
                                     True))
            zero = ok & same & (n_ok >= 2)
        else:
            baseline = None
            zero = ok & (fresh == 0)
        zero = zero & diff.coarse(params, family)  # else the objective's own zeros
        g, _ = expansion.finish(sums[0], n, 1.0, n_ok)
        new_ledger = ledger.advance(
            state.ledger, k=k, calls=diff.step_calls(k, 0), nonfinite=k - n_ok,
            zero=jnp.sum(zero, dtype=jnp.int32), value=value_estimate)
        new_state = ZoARState(
            ledger=new_ledger, history=records, retained_sum=sums[0],
            direction_sum=sums[1] if forward else None, baseline=baseline)
        return dirs.cast_like(g, params), new_state

    return Estimator(init_fn, host.host_errors()(update_fn))
