"""Retention policies: which records of :func:`adaptive_estimator` outlive their step.

* :func:`none`: every estimate is formed from its step's fresh records alone;
* :func:`fifo`: ZoAQ's ring of the newest ``n_hist`` finite records, pooled into every
  candidate (or only into those at the start budget: ``reuse_after_expand=False``, the
  AlwaysGradient ablation), kept as keys and responses plus the running sum of their
  contributions (:func:`retained.retain`).
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs
from zoaq_jax._src import history, retained
from zoaq_jax._src.policies import Grid, Outcome, Retention


class RetainedState(NamedTuple):
    """State of :func:`fifo`: the records and the running sum of their contributions."""

    history: history.History  # the newest n_hist finite records of usable steps
    retained_sum: chex.ArrayTree  # sum of r_i u_i over them (compute dtypes)


def _nothing_retained(*args):
    raise TypeError("retention.none() retains nothing: the skeleton never asks it.")


def none() -> Retention:
    """Nothing outlives its step (``capacity`` 0; the state is None)."""
    return Retention(init=lambda params, grid: None, oldest=_nothing_retained,
                     pooled=_nothing_retained, update=lambda state, outcome: state)


def fifo(n_hist: int = 8, *, refresh: int | jax.Array = retained.REFRESH,
         reuse_after_expand: bool = True) -> Retention:
    r"""ZoAQ's retention: the newest ``n_hist`` finite records of usable steps.

    Every candidate pools the retained records :math:`\mathcal R_{t-1}` with its fresh
    ones; with ``reuse_after_expand=False`` only candidates at the step's start budget do
    (later ones are fresh only: the AlwaysGradient ablation). A step adds its kept
    records' contributions to the running sum :math:`\sum_{i \in \mathcal R} r_i u_i`,
    draws only the directions of the records it evicts, and recomputes the sum exactly
    from the keys every ``refresh`` steps (:func:`retained.retain`). An unusable step
    changes nothing.

    Args:
      n_hist: records kept :math:`N_{hist} \ge 0` (0: :func:`none`; 8 in the paper).
      refresh: steps between exact recomputations of the running sum.
      reuse_after_expand: pool the records into candidates beyond the start budget.

    Returns:
      A :class:`~zoaq_jax.Retention` with state :class:`RetainedState`.

    Example:
      >>> import zoaq_jax
      >>> always_gradient = zoaq_jax.zoaq_estimator(
      ...     retention=zoaq_jax.retention.fifo(8, reuse_after_expand=False))

    References:
      ZoAQ: Adaptive Zeroth-Order Querying via Query-Reuse Coupling, Algorithm 1.
    """
    n_hist = checks.static_int("n_hist", n_hist, 0)
    retained.check_refresh(refresh)
    if not n_hist:
        return none()

    def init(params: chex.ArrayTree, grid: Grid) -> RetainedState:
        del grid
        return RetainedState(history.init(n_hist), dirs.zeros(params))

    def pooled(state: RetainedState, k: jax.Array, k_start: jax.Array):
        reuse = True if reuse_after_expand else (k <= k_start)
        weight = jnp.asarray(reuse, jnp.float32)
        total = jax.tree.map(lambda h: weight.astype(h.dtype) * h, state.retained_sum)
        return total, jnp.where(reuse, state.history.size, 0)

    def update(state: RetainedState, outcome: Outcome) -> RetainedState:
        rec, usable = outcome.records, outcome.usable
        assert rec is not None  # the skeleton's outcomes carry their records

        def keep_if_usable(sums, records):
            del records
            return jax.tree.map(lambda a, s: jnp.where(usable, a, s), sums,
                                (state.retained_sum,))

        def exact(records):
            return (jnp.where(history.valid(records), records.responses, 0.0),)

        records, (total,) = retained.retain(
            rec.source, state.history, (state.retained_sum,), (rec.total,), rec.responses,
            rec.ok & usable, lambda r: (r,), exact, refresh, adjust=keep_if_usable)
        return RetainedState(records, total)

    return Retention(init, lambda state, size: history.oldest(state.history, size), pooled,
                     update, capacity=n_hist)
