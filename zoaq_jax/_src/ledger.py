"""Per-estimator bookkeeping shared by every estimator: keys, step count, query count.

Every estimator state holds a :class:`QueryLedger`. Its fields are the diagnostics that
exist for all estimators and are found with ``optax.tree.get(state, name)`` from any
chained state:

* ``num_queries``: cumulative oracle calls made by the estimator, centre values included.
* ``num_nonfinite``: cumulative responses discarded because they were NaN or inf.
* ``last_k``: fresh directions acquired at the last step.

Keys follow one schedule: the direction with index ``i`` at step ``t`` is drawn from
``fold_in(fold_in(key, t), i)``, so a record is reproducible from ``(t, i)`` alone.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class QueryLedger(NamedTuple):
    """Keys and counters of a zeroth-order estimator."""

    key: jax.Array  # typed PRNG key of the run
    step: jax.Array  # int32, steps taken (the per-step key index)
    num_queries: jax.Array  # int32, cumulative oracle calls
    num_nonfinite: jax.Array  # int32, cumulative discarded (NaN/inf) responses
    last_k: jax.Array  # int32, fresh directions acquired at the last step


def init(key: jax.Array) -> QueryLedger:
    """A fresh ledger for the run keyed by the typed key ``key``."""
    def zero():  # one buffer each, so that the state can be donated to jit
        return jnp.zeros((), jnp.int32)

    return QueryLedger(key=key, step=zero(), num_queries=zero(), num_nonfinite=zero(),
                       last_k=zero())


def step_key(ledger: QueryLedger) -> jax.Array:
    """The key of the current step, ``fold_in(key, step)``."""
    return jax.random.fold_in(ledger.key, ledger.step)


def direction_keys(key: jax.Array, first: jax.Array | int, size: int) -> jax.Array:
    """Keys of directions ``first, ..., first + size - 1`` of the step keyed by ``key``."""
    index = jnp.asarray(first, jnp.int32) + jnp.arange(size, dtype=jnp.int32)
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, index)


def advance(ledger: QueryLedger, *, k: jax.Array, calls: jax.Array, nonfinite: jax.Array):
    """The ledger after a step that acquired ``k`` directions with ``calls`` oracle calls."""
    return ledger._replace(
        step=ledger.step + 1,
        num_queries=ledger.num_queries + jnp.asarray(calls, jnp.int32),
        num_nonfinite=ledger.num_nonfinite + jnp.asarray(nonfinite, jnp.int32),
        last_k=jnp.asarray(k, jnp.int32),
    )
